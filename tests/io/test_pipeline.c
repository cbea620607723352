/* tests/io/test_pipeline.c — reader (prefetch) thread, a busy compute thread and the writer
 * thread running together, as in a run: the data race check for the io layer (run this binary
 * under helgrind or a -fsanitize=thread build; see perf/RESULTS.md). */
#include "tests/helpers/io_testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "io/prefetch.h"
#include "io/writer.h"

#define LAYERS 6
#define LAYER_BYTES (192u << 10)

static atomic_int stop_busy;
static double busy_sink;

/* A real compute loop (a small dot-product kernel), not a sleep: keeps a core busy. */
static void *busy_main(void *arg)
{
    float a[256], b[256];
    for (int i = 0; i < 256; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = 1.0f / (float)(i + 1);
    }
    double acc = 0;
    while (!atomic_load(&stop_busy))
        for (int r = 0; r < 64; r++) {
            float s = 0;
            for (int i = 0; i < 256; i++)
                s += a[i] * b[i];
            acc += sqrt((double)s);
        }
    busy_sink = acc;
    return NULL;
}

typedef struct {
    pthread_mutex_t mu;
    int committed[LAYERS];
    int failures;
} commits;

typedef struct {
    commits *c;
    int layer;
    unsigned char *out;
} shard;

static void on_written(void *ctx, int64_t id, int rc, const lwq_error *e)
{
    shard *s = ctx;
    pthread_mutex_lock(&s->c->mu);
    if (rc == 0)
        s->c->committed[s->layer] = 1; /* the engine would write its manifest entry here */
    else
        s->c->failures++;
    pthread_mutex_unlock(&s->c->mu);
    free(s->out);
    free(s);
}

Test(pipeline, reader_compute_writer_threads_together)
{
    char dir[64], src[128];
    tu_tmpdir(dir, sizeof dir);
    snprintf(src, sizeof src, "%s/model.safetensors", dir);
    tu_write_pattern(src, (uint64_t)LAYERS * LAYER_BYTES, 9);

    lwq_error e = {0};
    lwq_io_reader *rd;
    lwq_io_reader_opts o;
    lwq_io_reader_opts_default(&o);
    o.block_bytes = 32 << 10;
    cr_assert_eq(lwq_io_reader_init(&rd, &o, &e), 0, "%s", e.msg);
    lwq_pool pool;
    lwq_pool_opts po = {.slot_bytes = LAYER_BYTES + 4096, .nslots = 2, .numa_node = -1};
    cr_assert_eq(lwq_pool_init(&pool, &po, &e), 0, "%s", e.msg);
    lwq_prefetch *pf;
    lwq_prefetch_opts pfo = {.reader = rd, .pool = &pool};
    cr_assert_eq(lwq_prefetch_init(&pf, &pfo, &e), 0, "%s", e.msg);
    lwq_writer *w;
    cr_assert_eq(lwq_writer_init(&w, 2, &e), 0);
    pthread_t busy;
    atomic_store(&stop_busy, 0);
    cr_assert_eq(pthread_create(&busy, NULL, busy_main, NULL), 0);

    commits c = {.mu = PTHREAD_MUTEX_INITIALIZER};
    lwq_io_range r[LAYERS][3];
    for (int l = 0; l < LAYERS; l++) {
        uint64_t base = (uint64_t)l * LAYER_BYTES;
        /* three "tensors" per layer, with a gap, out of order */
        r[l][0] = (lwq_io_range){src, base + 70000, 50000, 0};
        r[l][1] = (lwq_io_range){src, base, 65536, 0};
        r[l][2] = (lwq_io_range){src, base + 150000, LAYER_BYTES - 150000, 0};
        cr_assert_eq(lwq_prefetch_submit(pf, r[l], 3, &e), l, "%s", e.msg);
    }
    for (int l = 0; l < LAYERS; l++) {
        void *slot;
        cr_assert_eq(lwq_prefetch_wait(pf, l, &slot, &e), 0, "%s", e.msg);
        /* "compute": transform the layer's tensors into the output shard */
        size_t n = 0;
        for (int t = 0; t < 3; t++)
            n += r[l][t].length;
        shard *s = malloc(sizeof *s);
        s->c = &c;
        s->layer = l;
        s->out = malloc(n);
        size_t k = 0;
        for (int t = 0; t < 3; t++)
            for (uint64_t i = 0; i < r[l][t].length; i++)
                s->out[k++] = (unsigned char)(((const unsigned char *)slot)[r[l][t].dst + i] ^ 0x5A);
        cr_assert_eq(lwq_prefetch_release(pf, l, &e), 0);
        char path[160];
        snprintf(path, sizeof path, "%s/model-layer-%05d.safetensors", dir, l);
        lwq_writer_job j = {.path = path, .data = s->out, .len = n, .done = on_written,
                            .done_ctx = s};
        cr_assert_eq(lwq_writer_submit(w, &j, &e), l, "%s", e.msg);
    }
    cr_assert_eq(lwq_writer_flush(w, &e), 0, "%s", e.msg);
    atomic_store(&stop_busy, 1);
    pthread_join(busy, NULL);
    lwq_writer_free(w);
    lwq_prefetch_free(pf);
    lwq_io_reader_free(rd);
    lwq_pool_free(&pool);

    cr_assert_eq(c.failures, 0);
    for (int l = 0; l < LAYERS; l++) {
        cr_assert(c.committed[l], "layer %d committed", l);
        char path[160];
        snprintf(path, sizeof path, "%s/model-layer-%05d.safetensors", dir, l);
        FILE *fp = fopen(path, "rb");
        cr_assert_not_null(fp);
        for (int t = 0; t < 3; t++)
            for (uint64_t i = 0; i < r[l][t].length; i++) {
                int ch = fgetc(fp);
                if (ch != (tu_byte(9, r[l][t].offset + i) ^ 0x5A))
                    cr_assert_fail("layer %d tensor %d byte %llu wrong", l, t,
                                   (unsigned long long)i);
            }
        cr_assert_eq(fgetc(fp), EOF);
        fclose(fp);
    }
    tu_rmrf(dir);
}
