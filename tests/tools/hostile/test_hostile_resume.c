/* Hostile resume state and outputs (issue 28): a manifest without the boundary it needs, shards whose fingerprint was edited, outputs with layers removed, checked by resume and by `lwq verify`. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <sys/stat.h>

#include "core/data/hash.h"
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

/* The rerun of m into o is refused (exit 2); its stderr is shown when not. */
static void rerun_refused(void)
{
    int rc = quantize("o", "");
    char *err = lwqt_err();
    cr_assert_eq(rc, 2, "the rerun exited %d, expected 2 (refused); stderr: %s", rc, err);
    free(err);
}

static void stderr_has(const char *needle)
{
    char *err = lwqt_err();
    cr_assert(strstr(err, needle), "stderr lacks \"%s\": %s", needle, err);
    free(err);
}

/* The partial run's manifest naming boundary file `file`, then a rerun: refused. */
static void rerun_naming_boundary(const char *file)
{
    partial_run();
    cJSON *j = load_json("o.layerwise_resume/manifest.json");
    cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "boundary");
    cJSON_ReplaceItemInObjectCaseSensitive(b, "file", cJSON_CreateString(file));
    save_json("o.layerwise_resume/manifest.json", j);
    rerun_refused();
}

/* F7: 1 of 2 committed, not complete, no boundary named: the rerun took layer 1's input from the
 * embedding and exited 0 with a wrong output. */
Test(hostile_resume, committed_layers_without_their_boundary_are_refused)
{
    rerun_naming_boundary("");
    char want[700];
    snprintf(want, sizeof want, "%s: 1 of 2 layers committed, so boundary.file must be \"boundary-1.bin\" with its size, "
             "not \"\"", lwqt_path("o.layerwise_resume/manifest.json"));
    stderr_has(want);
}

/* The other file of the pair is an old boundary (the input of layer 0's predecessor, or garbage):
 * naming it is refused too, before it is read. */
Test(hostile_resume, the_other_boundary_file_is_refused)
{
    rerun_naming_boundary("boundary-0.bin");
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
    rerun_refused();
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
    rerun_refused();
    stderr_has("manifest.json: field \"complete\" is missing or invalid");
}

/* F6 for the resume state's other file: a FIFO as the boundary is refused, not waited on. */
Test(hostile_resume, a_fifo_as_the_boundary_is_refused)
{
    partial_run();
    cr_assert_eq(unlink(lwqt_path("o.layerwise_resume/boundary-1.bin")), 0);
    cr_assert_eq(mkfifo(lwqt_path("o.layerwise_resume/boundary-1.bin"), 0644), 0);
    int rc = quantize("o", "timeout -s KILL 60");
    cr_assert_neq(rc, 137, "the rerun blocked on the FIFO boundary-1.bin");
    cr_assert_eq(rc, 2, "exit %d", rc);
    char want[700];
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", lwqt_path("o.layerwise_resume/boundary-1.bin"));
    stderr_has(want);
}

/* The unedited partial state still resumes (the checks above refuse only what is inconsistent). */
Test(hostile_resume, an_intact_partial_state_resumes_to_the_same_bytes)
{
    partial_run();
    cr_assert_eq(quantize("o", ""), 0);
    cr_assert_eq(quantize("ref", ""), 0);
    cr_assert_eq(lwqt_sh("diff -r %s %s >/dev/null", lwqt_path("o"), lwqt_path("ref")), 0);
}

/* Whole file into *n bytes (malloc'd). */
static unsigned char *read_whole(const char *name, size_t *n)
{
    FILE *fp = fopen(lwqt_path(name), "rb");
    cr_assert_not_null(fp, "%s", name);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    cr_assert_eq(fread(b, 1, *n, fp), *n);
    fclose(fp);
    return b;
}

/* Flip one hex digit of the lwq_fingerprint in the header of out/<shard> and record the file's
 * new XXH64 in the manifest, as someone covering an edit would. */
static void edit_fingerprint(const char *out, int layer)
{
    char shard[300], man[300];
    snprintf(shard, sizeof shard, "%s/model-layer-%05d.safetensors", out, layer);
    snprintf(man, sizeof man, "%s.layerwise_resume/manifest.json", out);
    size_t n;
    unsigned char *b = read_whole(shard, &n);
    char *at = memmem(b, n < 4096 ? n : 4096, "\"lwq_fingerprint\":\"", 19);
    cr_assert_not_null(at, "no lwq_fingerprint in %s", shard);
    at[19] = at[19] == '0' ? '1' : '0';
    FILE *fp = fopen(lwqt_path(shard), "wb");
    cr_assert_eq(fwrite(b, 1, n, fp), n);
    fclose(fp);
    char hex[17];
    lwq_hex64(lwq_xxh64(b, n, 0), hex);
    free(b);
    cJSON *j = load_json(man);
    cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "layers"), layer);
    cr_assert_not_null(l);
    cJSON_ReplaceItemInObjectCaseSensitive(l, "xxh64", cJSON_CreateString(hex));
    save_json(man, j);
}

static int verify(const char *out)
{
    return lwqt_sh("%s verify %s >%s 2>%s", lwqt_bin(), lwqt_path(out), lwqt_path("out.txt"), lwqt_path("err.txt"));
}

/* `lwq verify out` exits `want`; its stdout is shown when not. */
static void verify_exits(const char *out, int want)
{
    int rc = verify(out);
    char *o = lwqt_out();
    cr_assert_eq(rc, want, "lwq verify %s exited %d, expected %d; stdout: %s", out, rc, want, o);
    free(o);
}

static void stdout_has(const char *needle)
{
    char *o = lwqt_out();
    cr_assert(strstr(o, needle), "stdout lacks \"%s\": %s", needle, o);
    free(o);
}

/* F9: verify compared checksums only; a shard whose header was edited, its checksum updated in
 * the manifest, passed. */
Test(hostile_resume, verify_compares_each_shards_fingerprint_with_the_manifest)
{
    make_model();
    cr_assert_eq(quantize("o", ""), 0);
    verify_exits("o", 0);
    edit_fingerprint("o", 0);
    verify_exits("o", 1);
    stdout_has("FAIL: model-layer-00000.safetensors: lwq_fingerprint ");
    stdout_has("but the manifest says the run is ");
}

/* ... and resume reused such a shard. */
Test(hostile_resume, resume_refuses_a_committed_shard_of_another_fingerprint)
{
    partial_run();
    edit_fingerprint("o", 0);
    rerun_refused();
    char want[700];
    snprintf(want, sizeof want, "committed shard %s: its header carries lwq_fingerprint ",
             lwqt_path("o/model-layer-00000.safetensors"));
    stderr_has(want);
    stderr_has("(a shard of another run, or an edited header)");
}

/* Drop every index entry that maps to `file` (and the file). */
static void drop_shard(const char *out, const char *file)
{
    char ip[300], fp[300];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", out);
    snprintf(fp, sizeof fp, "%s/%s", out, file);
    cJSON *j = load_json(ip);
    cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    for (cJSON *x = wm->child, *nx; x; x = nx) {
        nx = x->next;
        if (!strcmp(x->valuestring, file))
            cJSON_DeleteItemFromObjectCaseSensitive(wm, x->string);
    }
    save_json(ip, j);
    cr_assert_eq(unlink(lwqt_path(fp)), 0);
}

/* F8: verify passed an output whose layer shards and index entries were removed (lwq eval
 * refused it), and an empty weight_map. */
Test(hostile_resume, verify_finds_a_removed_layer)
{
    make_model();
    cr_assert_eq(quantize("o", ""), 0);
    lwqt_sh("rm -rf %s.layerwise_resume", lwqt_path("o"));
    verify_exits("o", 0);
    drop_shard("o", "model-layer-00001.safetensors");
    verify_exits("o", 1);
    stdout_has("config.json declares 2 decoder layers, but no tensor belongs to layer 1 (expected names "
               "model.layers.1.*)");
}

Test(hostile_resume, verify_finds_removed_tail_tensors)
{
    make_model();
    cr_assert_eq(quantize("o", ""), 0);
    lwqt_sh("rm -rf %s.layerwise_resume", lwqt_path("o"));
    drop_shard("o", "model-tail.safetensors");
    verify_exits("o", 1);
    char want[600];
    snprintf(want, sizeof want, "FAIL: %s: layer -1: missing model.embed_tokens.weight (against the llama plan of "
             "config.json)", lwqt_path("o"));
    stdout_has(want);
}

Test(hostile_resume, verify_finds_an_empty_weight_map)
{
    make_model();
    cr_assert_eq(quantize("o", ""), 0);
    lwqt_write_str("o/model.safetensors.index.json", "{\"metadata\": {}, \"weight_map\": {}}");
    verify_exits("o", 1);
    stdout_has("FAIL: ");
}
