/* text/eval_text.c — the built-in held-out evaluation text of `lwq eval`: prose and code written
 * for lwq and dedicated to the public domain, none of it in the calibration text
 * (text/calib_text.c), so that the default eval set never overlaps the default calibration
 * samples.  Samples are paragraphs, in order (text/eval_text.h). */
#include "text/eval_text.h"

static const char *const samples[] = {
    "The lighthouse keeper wrote the same three lines in his log every night: the time the lamp "
    "was lit, the direction of the wind, and whether any ship had passed. After forty years the "
    "logbooks filled a whole wall of the cottage, and a historian who read them found that the "
    "winds had slowly turned, a degree or two each decade, long before anyone had measured it "
    "with instruments.",

    "To make bread you need flour, water, salt and time. Mix the flour and water and let them "
    "rest for half an hour before adding the salt; the dough becomes smoother on its own. Knead "
    "it until it stretches without tearing, leave it to rise until it has doubled, shape it, let "
    "it rise again, and bake it in the hottest oven you have.",

    "def moving_average(values, window):\n"
    "    if window <= 0:\n"
    "        raise ValueError(\"window must be positive\")\n"
    "    total = 0.0\n"
    "    out = []\n"
    "    for i, v in enumerate(values):\n"
    "        total += v\n"
    "        if i >= window:\n"
    "            total -= values[i - window]\n"
    "        out.append(total / min(i + 1, window))\n"
    "    return out",

    "Rivers do not run straight. A small bend makes the water on the outside move faster, which "
    "cuts the bank there, while slower water on the inside drops sand and gravel. So the bend "
    "grows, loop after loop, until one day a flood cuts through the narrow neck and leaves the "
    "old loop behind as a quiet crescent-shaped lake.",

    "Dear neighbours, the water will be turned off on Thursday between nine in the morning and "
    "two in the afternoon while the old pipes under the courtyard are replaced. Please fill a "
    "few bottles the evening before. The workers will leave the gate open; keep children and "
    "pets away from the trench. Thank you for your patience.",

    "A good map leaves things out. A subway map that showed every curve of every tunnel would be "
    "accurate and useless; the famous diagrams straighten the lines, spread out the crowded "
    "centre and shrink the empty suburbs, because a traveller only needs to know the order of "
    "the stations and where to change trains.",

    "SELECT city, COUNT(*) AS orders, SUM(total) AS revenue\n"
    "FROM orders\n"
    "WHERE created_at >= DATE '2024-01-01'\n"
    "GROUP BY city\n"
    "HAVING COUNT(*) > 10\n"
    "ORDER BY revenue DESC\n"
    "LIMIT 5;",

    "The first clocks in most towns hung on church towers and were set by the sun, so noon came "
    "a few minutes earlier in the east of a country than in the west. Nobody minded until the "
    "railways arrived: a timetable needs one time for everyone, and within a few years every "
    "station clock along a line agreed, whatever the sun said.",

    "In the garden the tomatoes ripened all at once, as they always do, and for two weeks there "
    "were tomatoes at every meal: sliced with salt for breakfast, in a salad at noon, cooked "
    "down into sauce in the evening. What could not be eaten was bottled, and the jars stood on "
    "the cellar shelf until the middle of winter.",

    "Il pleuvait depuis le matin et la gare était pleine de voyageurs qui attendaient un train "
    "en retard. Ein alter Mann las die Zeitung, ein Kind zählte die Gleise. Cuando por fin llegó "
    "el tren, todos subieron a la vez y el andén quedó vacío en un minuto.",

    "A bicycle stays upright for reasons that are still argued about. The spinning wheels help a "
    "little, but the larger part is steering: when the bike leans, the front wheel turns into "
    "the lean and brings the wheels back under the rider. Even a riderless bicycle, pushed along "
    "a smooth floor, will right itself for a while before it falls.",

    "$ du -sh logs/*\n"
    "4.0K\tlogs/README\n"
    "212M\tlogs/2024-05\n"
    "198M\tlogs/2024-06\n"
    "$ gzip -9 logs/2024-05/*.log\n"
    "$ du -sh logs/2024-05\n"
    "23M\tlogs/2024-05",

    "Owls hunt at night by sound as much as by sight. The two ear openings of many owls sit at "
    "different heights on the head, so a mouse rustling below reaches one ear a fraction of a "
    "millisecond before the other, and the bird can place its prey in the dark to within a "
    "degree or two before it ever leaves the branch.",

    "The committee met on the first Monday of every month and rarely agreed on anything except "
    "the date of the next meeting. Yet over ten years it rebuilt the library, planted the avenue "
    "of lime trees and kept the swimming pool open through two bad winters, which suggests that "
    "disagreement and progress are not as opposed as they look.",
};

size_t lwq_eval_builtin_count(void) { return sizeof samples / sizeof samples[0]; }

const char *lwq_eval_builtin_sample(size_t i) { return i < lwq_eval_builtin_count() ? samples[i] : NULL; }
