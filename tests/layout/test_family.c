/* The family table (layout/family.h): lookups, the supported list, and what rows compose. */
#include <criterion/criterion.h>
#include <string.h>

#include "layout/family.h"

static const char *const all_types[] = {"llama",     "mistral",     "qwen2",       "qwen3",
                                        "qwen3_moe", "mixtral",     "deepseek_v2", "deepseek_v3",
                                        "kimi_k2",   "glm4_moe",    "minimax_m2",  "deepseek_v32", "glm_moe_dsa", "mistral4",    "qwen3_next"};

Test(family, every_row_is_in_the_supported_list)
{
    const char *list = lwq_supported_model_types();
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        cr_assert_not_null(lwq_family_find(all_types[i]), "%s", all_types[i]);
        cr_assert_not_null(strstr(list, all_types[i]), "%s missing from \"%s\"", all_types[i], list);
    }
}

Test(family, unknown_model_type_names_it)
{
    const lwq_family *f = (const lwq_family *)1;
    lwq_error e = {0};
    cr_assert_eq(lwq_family_lookup("gpt2", &f, &e), LWQ_EUNSUPPORTED);
    cr_assert_null(f);
    cr_assert_not_null(strstr(e.msg, "unknown model_type 'gpt2'"), "%s", e.msg);
}

Test(family, every_row_has_a_full_attention_mixer_and_a_defined_mlp)
{
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        const lwq_family *f = lwq_family_find(all_types[i]);
        cr_assert(lwq_mixer_is_attention(f->attn), "%s", all_types[i]);
        cr_assert(f->linear == LWQ_MIXER_NONE || !lwq_mixer_is_attention(f->linear), "%s",
                  all_types[i]);
        cr_assert(f->rope_theta > 0 && f->rms_norm_eps > 0 && f->partial_rotary > 0, "%s",
                  all_types[i]);
    }
}

Test(family, aliases_share_their_family)
{
    cr_assert_str_eq(lwq_family_find("mistral")->name, "llama");
    cr_assert_str_eq(lwq_family_find("kimi_k2")->name, "deepseek_v3");
    cr_assert_eq(lwq_family_find("kimi_k2")->router, LWQ_ROUTER_DEEPSEEK_V3);
    cr_assert_not_null(lwq_family_find_wrapper("kimi_k25"));
    cr_assert_null(lwq_family_find_wrapper("llama"));
}
