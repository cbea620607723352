/* fuzz/fuzz_config.c — config.json through lwq_config_parse, then the architecture plans the
 * engine derives from it (layout/arch/arch.h), as inspect, plan, quantize and eval do.
 *
 * Checked on success: the plans of the first layers, the last layer and the tail build, and every
 * planned tensor has 1 to 4 dims, each at least 1 (0 for an optional one), with an element count
 * that fits in int64 (checkpoint checks and memory plans multiply them). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz/fuzz_util.h"
#include "layout/arch/arch.h"
#include "layout/config/config.h"

static void check_plan(const lwq_arch_layer *p, int layer)
{
    for (int i = 0; i < p->ntensors; i++) {
        const lwq_arch_tensor *t = &p->tensors[i];
        if (t->ndim < 1 || t->ndim > 4)
            lwq_fuzz_fail("layer %d: planned tensor %s has %d dims", layer, t->name, t->ndim);
        int64_t numel = 1;
        /* an optional buffer may plan as empty (inv_freq of a rotary dim under 2, which the
         * forward then refuses by name) */
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < !t->optional || __builtin_mul_overflow(numel, t->shape[d], &numel))
                lwq_fuzz_fail("layer %d: planned tensor %s: dim %d is %lld (or the element count "
                              "overflows)", layer, t->name, d, (long long)t->shape[d]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lwq_fuzz_quiet();
    char *json = lwq_fuzz_cstr(d, n);
    lwq_model_config c;
    lwq_error e = {0};
    int rc = lwq_config_parse("config.json", json, &c, &e);
    lwq_fuzz_check_error(rc, &e, "lwq_config_parse");
    if (rc == 0) {
        /* the first layers cover every layer kind of a hybrid or partly-MoE model; all 4096 of
         * a large config would make each input slow */
        int L = c.num_hidden_layers;
        for (int layer = 0; layer < L; layer = layer < 7 ? layer + 1 : (layer < L - 1 ? L - 1 : L)) {
            (void)lwq_config_layer_is_moe(&c, layer);
            lwq_arch_layer p;
            lwq_error pe = {0};
            int prc = lwq_arch_layer_plan(&c, layer, &p, &pe);
            lwq_fuzz_check_error(prc, &pe, "lwq_arch_layer_plan");
            if (prc == 0) {
                check_plan(&p, layer);
                lwq_arch_layer_free(&p);
            }
        }
        lwq_arch_layer tail;
        lwq_error te = {0};
        int trc = lwq_arch_tail_plan(&c, &tail, &te);
        lwq_fuzz_check_error(trc, &te, "lwq_arch_tail_plan");
        if (trc == 0) {
            check_plan(&tail, -1);
            lwq_arch_layer_free(&tail);
        }
        lwq_config_free(&c);
    }
    free(json);
    return 0;
}
