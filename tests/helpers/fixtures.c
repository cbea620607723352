/* tests/helpers/fixtures.c — the fixture table and its lookup (see fixtures.h). */
#include "tests/helpers/fixtures.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const lwqt_fixture_folder lwqt_fixture_folders[] = {
    {"cai-tiny-llama", "LlamaForCausalLM, hidden 8, 2-shard copy, reference logits (F32)"},
    {"cai-tiny-smollm2", "LlamaForCausalLM, slice of SmolLM2-135M, tied embeddings (BF16)"},
    {"cai-tiny-qwen2", "Qwen2ForCausalLM with qkv bias, reference logits (F32)"},
    {"cai-tiny-qwen3", "Qwen3ForCausalLM, q/k norm, reference logits (F32)"},
    {"cai-tiny-qwen3-moe", "Qwen3MoeForCausalLM, 4 experts top-2, reference logits (F32)"},
    {"cai-tiny-mixtral", "MixtralForCausalLM, 4 experts top-2, reference logits (F32)"},
    {"cai-tiny-deepseek-v2", "DeepseekV2ForCausalLM, MLA, shared + routed experts, reference logits (F32)"},
    {"agilerl-tiny-qwen3-moe", "Qwen3MoeForCausalLM hidden 64 with a toy tokenizer (F32)"},
    {"mlxd-tiny-llama3-bf16", "Llama-3-style, hidden 64, layer references (BF16)"},
    {"mlxd-tiny-qwen3-bf16", "Qwen3, hidden 64, layer references (BF16)"},
    {"quatricmorph-tiny-llama-2shard", "12-layer Llama, 2 shards + index, mixed F32/BF16"},
    {"llama2c-stories260K-raw", "TinyStories 260K llama2.c checkpoint (not HF)"},
    {"tokenizer-gpt2-bytelevel-bpe", "GPT-2 tokenizer.json (byte-level BPE) + golden ids"},
    {"tokenizer-tinyllama-sentencepiece-bpe", "TinyLlama tokenizer.json (SentencePiece-style BPE) + golden ids"},
    {"published-nvfp4", "hf_quant_config.json + config.json of published ModelOpt NVFP4/FP8 checkpoints"},
};
const int lwqt_nfixture_folders = (int)(sizeof lwqt_fixture_folders / sizeof lwqt_fixture_folders[0]);

const lwqt_ckpt_fixture lwqt_ckpt_fixtures[] = {
    {"cai-tiny-llama", NULL},
    {"cai-tiny-llama/sharded", "cai-tiny-llama/config.json"},
    {"cai-tiny-smollm2", NULL},
    {"cai-tiny-qwen2", NULL},
    {"cai-tiny-qwen3", NULL},
    {"cai-tiny-qwen3-moe", NULL},
    {"cai-tiny-mixtral", NULL},
    {"cai-tiny-deepseek-v2", NULL},
    {"agilerl-tiny-qwen3-moe", NULL},
    {"mlxd-tiny-llama3-bf16", NULL},
    {"mlxd-tiny-qwen3-bf16", NULL},
    {"quatricmorph-tiny-llama-2shard", NULL},
};
const int lwqt_nckpt_fixtures = (int)(sizeof lwqt_ckpt_fixtures / sizeof lwqt_ckpt_fixtures[0]);

int *lwqt_ckpt_fixture_indexes(void)
{
    static int idx[sizeof lwqt_ckpt_fixtures / sizeof lwqt_ckpt_fixtures[0]];
    for (int i = 0; i < lwqt_nckpt_fixtures; i++)
        idx[i] = i;
    return idx;
}

static const char *env_root(void)
{
    const char *r = getenv("LWQ_FIXTURES");
    return r && *r ? r : NULL;
}

static int fallback_allowed(void)
{
    const char *n = getenv("LWQ_FIXTURES_NO_FALLBACK");
    return !(n && *n && strcmp(n, "0"));
}

#define SHARED_ROOT LWQ_SOURCE_DIR "/../shared/fixtures"

const char *lwqt_source_dir(void)
{
    return LWQ_SOURCE_DIR;
}

const char *lwqt_fixture_roots(void)
{
    static char buf[2048];
    const char *r = env_root();
    snprintf(buf, sizeof buf, "$LWQ_FIXTURES%s%s%s%s", r ? "=" : " (unset)", r ? r : "",
             fallback_allowed() ? ", then " : "", fallback_allowed() ? SHARED_ROOT : "");
    return buf;
}

static int in_table(const char *rel)
{
    size_t n = strcspn(rel, "/");
    for (int i = 0; i < lwqt_nfixture_folders; i++)
        if (strlen(lwqt_fixture_folders[i].name) == n && !strncmp(lwqt_fixture_folders[i].name, rel, n))
            return 1;
    return 0;
}

const char *lwqt_fixture_find(const char *rel)
{
    static char bufs[16][1024];
    static int k;
    const char *roots[2] = {env_root(), fallback_allowed() ? SHARED_ROOT : NULL};
    for (int i = 0; i < 2; i++) {
        if (!roots[i])
            continue;
        char *b = bufs[k];
        int w = snprintf(b, sizeof bufs[0], "%s/%s", roots[i], rel);
        struct stat st;
        if (w > 0 && (size_t)w < sizeof bufs[0] && stat(b, &st) == 0) {
            k = (k + 1) % 16;
            return b;
        }
    }
    return NULL;
}

const char *lwqt_fixture(const char *rel)
{
    cr_assert(in_table(rel), "fixture %s is not in the table of tests/helpers/fixtures.c: add it there", rel);
    const char *p = lwqt_fixture_find(rel);
    if (!p)
        cr_skip_test("fixture %s not found (looked in %s); see README, Test fixtures", rel, lwqt_fixture_roots());
    return p;
}
