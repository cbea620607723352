/* tools/mkmodel/mkmodel_values.c — the values of `lwq mkmodel`'s tensors (mkmodel_values.h). */
#include "tools/mkmodel/mkmodel_values.h"

#include "core/parallel/parallel.h"

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix64(seed ^ mix64(h));
}

typedef struct gen_ctx {
    uint64_t tseed;
    int64_t first; /* element index of buf[0] */
    float mean, std;
    lwq_dtype dt;
    void *buf;
} gen_ctx;

static void gen_chunk(void *vctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    const gen_ctx *g = vctx;
    /* Irwin-Hall(4) scaled to unit variance: sum of 4 U[0,1) has mean 2 and variance 1/3. */
    const float k = 1.7320508f / 65536.0f, m = g->mean, s = g->std;
    for (int64_t i = b; i < e; i++) {
        uint64_t r = mix64(g->tseed + (uint64_t)(g->first + i + 1) * 0x9e3779b97f4a7c15ull);
        uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                       (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
        float x = m + s * ((float)sum * k - 2.0f * 1.7320508f);
        switch (g->dt) {
        case LWQ_BF16: ((uint16_t *)g->buf)[i] = lwq_f32_to_bf16(x); break;
        case LWQ_F16: ((uint16_t *)g->buf)[i] = lwq_f32_to_f16(x); break;
        default: ((float *)g->buf)[i] = x; break;
        }
    }
}

void lwq_mkmodel_fill(uint64_t seed, const char *name, float mean, float std, lwq_dtype dt,
                      int64_t first, int64_t count, void *out)
{
    gen_ctx g = {.tseed = name_seed(seed, name), .first = first, .mean = mean, .std = std,
                 .dt = dt, .buf = out};
    lwq_parallel_for(count, 1 << 16, gen_chunk, &g);
}

void lwq_mkmodel_values(uint64_t seed, const char *name, float mean, float std, int64_t first,
                        int64_t count, float *out)
{
    lwq_mkmodel_fill(seed, name, mean, std, LWQ_F32, first, count, out);
}

