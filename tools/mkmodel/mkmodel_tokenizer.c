#include "tools/mkmodel/mkmodel_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's byte-level merges whose parts are single bytes or earlier merges. */
static const char *const merges[] = {"Ġ t", "Ġ a", "h e", "i n",  "r e", "o n", "Ġt he", "e r",
                                     "Ġ s", "a t", "Ġ w", "Ġ o", "e n", "Ġ c", "i t",   "i s"};
#define N_MERGES ((int)(sizeof merges / sizeof merges[0]))

static int utf8(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    out[2] = 0;
    return 2;
}

char *lwq_mkmodel_tokenizer_json(void)
{
    /* GPT-2 byte_to_unicode: printable bytes map to themselves, the other 68 to U+0100.. in
     * order; ids follow that same order (printable first), as in GPT-2's vocab. */
    unsigned cp[256];
    int order[256], k = 0, extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        if (printable) {
            cp[b] = (unsigned)b;
            order[k++] = b;
        }
    }
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        if (!printable) {
            cp[b] = 256u + (unsigned)extra++;
            order[k++] = b;
        }
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *at = cJSON_CreateObject();
    cJSON_AddNumberToObject(at, "id", LWQ_MK_EOT_ID);
    cJSON_AddStringToObject(at, "content", "<|endoftext|>");
    cJSON_AddBoolToObject(at, "single_word", 0);
    cJSON_AddBoolToObject(at, "lstrip", 0);
    cJSON_AddBoolToObject(at, "rstrip", 0);
    cJSON_AddBoolToObject(at, "normalized", 0);
    cJSON_AddBoolToObject(at, "special", 1);
    cJSON_AddItemToArray(added, at);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
    cJSON_AddBoolToObject(pre, "trim_offsets", 1);
    cJSON_AddBoolToObject(pre, "use_regex", 1);
    cJSON *post = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(post, "type", "ByteLevel");
    cJSON_AddBoolToObject(post, "add_prefix_space", 1);
    cJSON_AddBoolToObject(post, "trim_offsets", 0);
    cJSON_AddBoolToObject(post, "use_regex", 1);
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
    cJSON_AddBoolToObject(dec, "trim_offsets", 1);
    cJSON_AddBoolToObject(dec, "use_regex", 1);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < 256; i++) {
        char s[4];
        utf8(cp[order[i]], s);
        cJSON_AddNumberToObject(vocab, s, i);
    }
    for (int i = 0; i < N_MERGES; i++) {
        char tok[32];
        const char *sp = strchr(merges[i], ' ');
        snprintf(tok, sizeof tok, "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        cJSON_AddNumberToObject(vocab, tok, 256 + i);
    }
    cJSON_AddNumberToObject(vocab, "<|endoftext|>", LWQ_MK_EOT_ID);
    cJSON *mg = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < N_MERGES; i++)
        cJSON_AddItemToArray(mg, cJSON_CreateString(merges[i]));
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

_Static_assert(N_MERGES == 16, "LWQ_MK_EOT_ID assumes 16 merges");
