/* text/calib_text.c — the built-in calibration text: prose and code written for lwq and
 * dedicated to the public domain, so the demo and tests calibrate without any download.
 * Samples are paragraphs, in order; see lwq_calib_builtin_sample in text/dataset.h. */
#include <stddef.h>

#include "text/dataset.h"

static const char *const samples[] = {
    "The lighthouse keeper wrote the same three lines in his log every evening: the wind, the "
    "state of the sea, and the number of ships that passed. Over forty years the book grew into "
    "a quiet record of a coast that changed very little, and of a man who changed a great deal.",

    "To bake a simple loaf, mix five hundred grams of flour with ten grams of salt, seven grams "
    "of dry yeast and three hundred and fifty millilitres of warm water. Knead for ten minutes, "
    "let it rise for an hour, shape it, let it rise again, and bake at 230 degrees for about "
    "thirty-five minutes, until the crust sounds hollow when tapped.",

    "def moving_average(values, window):\n"
    "    \"\"\"Return the mean of each run of `window` consecutive values.\"\"\"\n"
    "    if window <= 0:\n"
    "        raise ValueError(\"window must be positive\")\n"
    "    total = sum(values[:window])\n"
    "    out = [total / window]\n"
    "    for i in range(window, len(values)):\n"
    "        total += values[i] - values[i - window]\n"
    "        out.append(total / window)\n"
    "    return out",

    "Rivers do not run straight for long. A small bend makes the water on the outside of the "
    "curve flow faster, which cuts the bank, while the slower water on the inside drops sand and "
    "gravel. Year after year the bend grows, until the river loops so far that a flood cuts "
    "through the neck and leaves the old loop behind as a lake shaped like a crescent moon.",

    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "\n"
    "/* Count the lines of a file given on the command line. */\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "    if (argc != 2) {\n"
    "        fprintf(stderr, \"usage: %s FILE\\n\", argv[0]);\n"
    "        return 2;\n"
    "    }\n"
    "    FILE *f = fopen(argv[1], \"r\");\n"
    "    if (!f) {\n"
    "        perror(argv[1]);\n"
    "        return 1;\n"
    "    }\n"
    "    long lines = 0;\n"
    "    for (int c; (c = fgetc(f)) != EOF;)\n"
    "        lines += c == '\\n';\n"
    "    fclose(f);\n"
    "    printf(\"%ld\\n\", lines);\n"
    "    return 0;\n"
    "}",

    "Q: Why does the moon always show the same face to the Earth?\n"
    "A: Tides raised in the young moon by the Earth's gravity slowed its spin until one turn on "
    "its axis took exactly as long as one trip around the planet. Astronomers call this tidal "
    "locking, and most large moons in the solar system are locked the same way.",

    "The committee met on Tuesday, 14 March, at 09:30. Present: the chair, the treasurer and "
    "four members. The treasurer reported a balance of 12,480.75 in the general account and "
    "2,150.00 in the repair fund. It was agreed to replace the hall's boiler before winter, at a "
    "cost not to exceed 6,000, and to ask three firms for quotes by the end of April.",

    "SELECT city, COUNT(*) AS stations, AVG(temperature_c) AS mean_temp\n"
    "FROM readings\n"
    "WHERE recorded_at >= '2024-01-01' AND temperature_c IS NOT NULL\n"
    "GROUP BY city\n"
    "HAVING COUNT(*) > 10\n"
    "ORDER BY mean_temp DESC;",

    "She had learned to read the weather from her grandmother, who never trusted a forecast. "
    "High thin clouds in the morning meant rain by nightfall; swallows flying low meant it would "
    "come sooner. \"The sky tells you everything,\" the old woman used to say, \"if you stop "
    "talking long enough to listen.\"",

    "fn gcd(mut a: u64, mut b: u64) -> u64 {\n"
    "    while b != 0 {\n"
    "        let t = a % b;\n"
    "        a = b;\n"
    "        b = t;\n"
    "    }\n"
    "    a\n"
    "}\n"
    "\n"
    "fn main() {\n"
    "    let pairs = [(48, 18), (270, 192), (17, 5)];\n"
    "    for (a, b) in pairs {\n"
    "        println!(\"gcd({a}, {b}) = {}\", gcd(a, b));\n"
    "    }\n"
    "}",

    "A matrix multiplies a vector by taking, for each row, the sum of the products of that row's "
    "entries with the vector's entries. Multiplying two matrices repeats this for every column of "
    "the second one. For an n by n matrix that is n cubed multiplications, which is why so much "
    "engineering goes into doing them quickly: caches, vector units and whole chips built for it.",

    "Les marchés du samedi ouvrent tôt. On y trouve des fromages, du pain encore tiède et des "
    "légumes qui ont poussé à quelques kilomètres. Der Markt am Samstag ist voll, und überall "
    "riecht es nach Kaffee. El mercado cierra a las dos, así que conviene llegar temprano. "
    "土曜日の朝市はとてもにぎやかです。",

    "{\n"
    "  \"name\": \"weather-station-7\",\n"
    "  \"location\": {\"lat\": 51.4779, \"lon\": -0.0015},\n"
    "  \"sensors\": [\"temperature\", \"humidity\", \"pressure\"],\n"
    "  \"interval_s\": 300,\n"
    "  \"active\": true\n"
    "}",

    "Every spring the town repainted the white line down the middle of the main street, and every "
    "spring someone argued that it should be yellow. Nobody remembered why it was white. In the "
    "end a retired teacher found the answer in the library: the first paint had been bought "
    "cheaply from a shipyard that was closing, and no one had ever thought to change it.",

    "$ git log --oneline | head -3\n"
    "a1b2c3d Fix off-by-one in the line counter\n"
    "e4f5a6b Add a test for empty input files\n"
    "0c9d8e7 First working version\n"
    "$ make test\n"
    "ok   12 tests passed, 0 failed (0.41 s)",

    "When you measure something many times, the individual readings scatter, but their average "
    "settles down. With a hundred readings the average wanders about a tenth as much as a single "
    "reading does; with ten thousand, about a hundredth. That square-root rule is why careful "
    "experiments repeat themselves, and why a poll of a thousand people can say a lot about a "
    "country of millions.",
};

size_t lwq_calib_builtin_count(void)
{
    return sizeof samples / sizeof samples[0];
}

const char *lwq_calib_builtin_sample(size_t i)
{
    return i < lwq_calib_builtin_count() ? samples[i] : NULL;
}
