/* Hostile resume state and outputs (issue 28): a manifest without the boundary it needs, shards whose fingerprint was edited, outputs with layers removed, checked by resume and by `lwq verify`. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <sys/stat.h>

#include "core/hash.h"
#include "tests/helpers/run.h"

TestSuite(hostile_resume, .init = lwqt_setup, .fini = lwqt_teardown, .timeout = 300);

static void make_model(void)
{
    const char *mk[] = {"mkmodel", lwqt_path("m"), "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--vocab", "300", "--quiet", NULL};
    cr_assert_eq(lwqt_run(mk), 0, "mkmodel");
}

/* lwq quantize m -o <out> with a small calibration set and `env` ("" or "VAR=x ..."); exit status. */
static int quantize(const char *out, const char *env)
{
    return lwqt_sh("%s %s quantize %s -o %s --calib-size 4 --calib-seq 16 --quiet >%s 2>%s", env, lwqt_bin(),
                   lwqt_path("m"), lwqt_path(out), lwqt_path("out.txt"), lwqt_path("err.txt"));
}

static cJSON *load_json(const char *name)
{
    char *t = lwqt_slurp(lwqt_path(name));
    cJSON *j = cJSON_Parse(t);
    free(t);
    cr_assert_not_null(j, "%s is not JSON", name);
    return j;
}

static void save_json(const char *name, cJSON *j)
{
    char *t = cJSON_Print(j);
    lwqt_write_str(name, t);
    free(t);
    cJSON_Delete(j);
}

static int manifest_int(const char *name, const char *key)
{
    cJSON *j = load_json(name);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    int x = cJSON_IsNumber(v) ? v->valueint : cJSON_IsTrue(v) ? 1 : 0;
    cJSON_Delete(j);
    return x;
}

/* Layers committed after a run of m into o killed at durable step k+1 (0: none, or no manifest). */
static int committed_after_crash(int k)
{
    lwqt_sh("rm -rf %s %s.layerwise_resume", lwqt_path("o"), lwqt_path("o"));
    char env[64];
    snprintf(env, sizeof env, "LWQ_SYS_CRASH_STEP=%d", k);
    int rc = quantize("o", env);
    struct stat st;
    if (rc == 0 || stat(lwqt_path("o.layerwise_resume/manifest.json"), &st) != 0)
        return rc == 0 ? 2 : 0;
    return manifest_int("o.layerwise_resume/manifest.json", "committed");
}

/* o: a run of m killed just after layer 0 (of 2) was committed, its boundary-1.bin on disk.  The
 * committed count grows with the crash step, so the first step that leaves one layer committed
 * is found by bisection. */
static void partial_run(void)
{
    make_model();
    int lo = 0, hi = 400; /* committed_after_crash(lo) == 0, (hi) >= 1 */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (committed_after_crash(mid) >= 1)
            hi = mid;
        else
            lo = mid;
    }
    cr_assert_eq(committed_after_crash(hi), 1, "crash step %d leaves other than 1 layer committed", hi);
    struct stat st;
    cr_assert_eq(stat(lwqt_path("o.layerwise_resume/boundary-1.bin"), &st), 0, "boundary-1.bin after step %d", hi);
}

static void stderr_has(const char *needle)
{
    char *err = lwqt_err();
    cr_assert(strstr(err, needle), "stderr lacks \"%s\": %s", needle, err);
    free(err);
}

/* F7: 1 of 2 committed, not complete, no boundary named: the rerun took layer 1's input from the
 * embedding and exited 0 with a wrong output. */
Test(hostile_resume, committed_layers_without_their_boundary_are_refused)
{
    partial_run();
    cJSON *j = load_json("o.layerwise_resume/manifest.json");
    cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "boundary");
    cJSON_ReplaceItemInObjectCaseSensitive(b, "file", cJSON_CreateString(""));
    save_json("o.layerwise_resume/manifest.json", j);
    cr_assert_eq(quantize("o", ""), 2);
    char want[700];
    snprintf(want, sizeof want, "%s: 1 of 2 layers committed, so boundary.file must be \"boundary-1.bin\" with its size, "
             "not \"\"", lwqt_path("o.layerwise_resume/manifest.json"));
    stderr_has(want);
}

/* The other file of the pair is an old boundary (the input of layer 0's predecessor, or garbage):
 * naming it is refused too, before it is read. */
Test(hostile_resume, the_other_boundary_file_is_refused)
{
    partial_run();
    cJSON *j = load_json("o.layerwise_resume/manifest.json");
    cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "boundary");
    cJSON_ReplaceItemInObjectCaseSensitive(b, "file", cJSON_CreateString("boundary-0.bin"));
    save_json("o.layerwise_resume/manifest.json", j);
    cr_assert_eq(quantize("o", ""), 2);
    stderr_has("so boundary.file must be \"boundary-1.bin\" with its size, not \"boundary-0.bin\"");
}

/* Nothing committed, a boundary named: layer 0 would have started from that file instead of the
 * embedding. */
Test(hostile_resume, a_boundary_before_any_commit_is_refused)
{
    partial_run();
    cJSON *j = load_json("o.layerwise_resume/manifest.json");
    cJSON_ReplaceItemInObjectCaseSensitive(j, "committed", cJSON_CreateNumber(0));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "layers", cJSON_CreateArray());
    save_json("o.layerwise_resume/manifest.json", j);
    cr_assert_eq(quantize("o", ""), 2);
    stderr_has("manifest.json: boundary.file is \"boundary-1.bin\" with 0 of 2 layers committed, where no boundary may "
               "be named");
}

/* A manifest saying complete with layers uncommitted. */
Test(hostile_resume, complete_with_uncommitted_layers_is_refused)
{
    partial_run();
    cJSON *j = load_json("o.layerwise_resume/manifest.json");
    cJSON_ReplaceItemInObjectCaseSensitive(j, "complete", cJSON_CreateTrue());
    save_json("o.layerwise_resume/manifest.json", j);
    cr_assert_eq(quantize("o", ""), 2);
    stderr_has("manifest.json: field \"complete\" is missing or invalid");
}

/* The unedited partial state still resumes (the checks above refuse only what is inconsistent). */
Test(hostile_resume, an_intact_partial_state_resumes_to_the_same_bytes)
{
    partial_run();
    cr_assert_eq(quantize("o", ""), 0);
    cr_assert_eq(quantize("ref", ""), 0);
    cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("o"), lwqt_path("ref")), 0);
}
