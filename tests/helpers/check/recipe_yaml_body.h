/* tests/helpers/check/recipe_yaml_body.h — the recipe YAML tests' imported units and a ptq recipe around a quant_cfg body. */
#ifndef LWQT_RECIPE_YAML_BODY_H
#define LWQT_RECIPE_YAML_BODY_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout/recipe/recipe.h"
#include "layout/recipe/recipe_yaml.h"
#include "tests/helpers/craft.h"

/* Units every recipe of the tests may import (written by the test, in Model Optimizer's schema). */
static inline void lwqt_yaml_units(void)
{
    lwqt_setup();
    cr_assert_eq(chdir(lwqt_dir), 0);
    mkdir("n", 0755);
    mkdir("u", 0755);
    lwqt_write_str("n/fp8.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                                 "num_bits: e4m3\naxis:\n");
    lwqt_write_str("n/nvfp4.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                                   "num_bits: e2m1\nblock_sizes: {-1: 16, type: dynamic, scale_bits: e4m3}\n");
    lwqt_write_str("n/nvfp4_static.yml",
                   "# modelopt-schema: modelopt.torch.quantization.config.QuantizerAttributeConfig\n"
                   "num_bits: e2m1\nblock_sizes: {-1: 16, type: static, scale_bits: e4m3}\n");
    lwqt_write_str("u/off.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerCfgEntry\n"
                                 "quantizer_name: '*'\nenable: false\n");
    lwqt_write_str("u/kv_cast.yaml", "# modelopt-schema: modelopt.torch.quantization.config.QuantizerCfgListConfig\n"
                                     "imports:\n  fp8: n/fp8\n---\n"
                                     "- quantizer_name: '*[kv]_bmm_quantizer'\n"
                                     "  cfg: {$import: fp8, use_constant_amax: true}\n");
}

/* A recipe whose quant_cfg starts with the deny-all entry (line 6) and goes on with `entries`. */
static inline int lwqt_yaml_load_body(const char *head, const char *entries, lwq_recipe *r, lwq_recipe_run *run, lwq_error *e)
{
    char buf[8192];
    snprintf(buf, sizeof buf,
             "imports: {fp8: n/fp8, nvfp4: n/nvfp4, nvfp4_static: n/nvfp4_static, off: u/off, kv_cast: u/kv_cast}\n"
             "metadata: {recipe_type: ptq}\n"
             "quantize:\n"
             "%s"
             "  quant_cfg:\n"
             "    - $import: off\n"
             "%s"
             "    - {quantizer_name: '*lm_head*', enable: false}\n",
             head ? head : "  algorithm: max\n", entries);
    lwqt_write_str("r.yaml", buf);
    return lwq_recipe_yaml_load("r.yaml", NULL, r, run, e);
}

static inline void lwqt_yaml_refused(const char *head, const char *entries, const char *msg)
{
    lwq_recipe r;
    lwq_recipe_run run;
    lwq_error e = {0};
    cr_assert_neq(lwqt_yaml_load_body(head, entries, &r, &run, &e), 0, "accepted: %s", entries);
    cr_assert_str_eq(e.msg, msg);
}

static inline lwq_quant_choice lwqt_yaml_pick(const lwq_recipe *r, const char *m) { return lwq_recipe_resolve(r, m); }

#endif
