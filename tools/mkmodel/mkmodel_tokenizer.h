/* tools/mkmodel/mkmodel_tokenizer.h — the small byte-level BPE tokenizer.json that `lwq mkmodel` writes
 * beside a synthetic checkpoint: the 256 byte tokens under GPT-2's byte-to-unicode map, 16 merges
 * and an <|endoftext|> special token, valid for Hugging Face tokenizers and for lwq's own. */
#ifndef LWQ_TOOLS_MKMODEL_TOKENIZER_H
#define LWQ_TOOLS_MKMODEL_TOKENIZER_H

/* Id of <|endoftext|>: after the 256 byte tokens and the merges (also bos/eos in config.json). */
#define LWQ_MK_EOT_ID (256 + 16)

/* The tokenizer.json text (malloc'd; NULL when out of memory). */
char *lwq_mkmodel_tokenizer_json(void);

#endif
