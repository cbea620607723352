/* tools/hfptq_args.h — Model Optimizer hf_ptq.py's command line for `lwq quantize`.
 *
 * A script that runs `python examples/hf_ptq/hf_ptq.py ARGS` can run `lwq quantize ARGS`: this
 * rewrites hf_ptq's spellings into lwq's before lwq's own parser sees them, prints what has no
 * effect in lwq, and refuses (exit 2, with the reason) what lwq cannot do exactly.  Flags lwq
 * already spells the same way (--recipe, --qformat, --device) keep hf_ptq's meaning.
 *
 * hf_ptq mode: when --pyt_ckpt_path / --model / --export_path appear, hf_ptq's defaults apply to
 * what the command line leaves out (--qformat fp8, --calib_size 1024, --calib_seq 512,
 * --batch_size 0 = the largest batch that fits, --export_path exported_model). */
#ifndef LWQ_TOOLS_HFPTQ_ARGS_H
#define LWQ_TOOLS_HFPTQ_ARGS_H

#include <stdio.h>

typedef struct lwq_hfptq_argv {
    int argc;
    char **argv;              /* argv[0] is the command name, as given */
    char **owned;             /* strings this module allocated */
    int nowned;
    int cap;                  /* words allocated in argv and owned (both grow together) */
} lwq_hfptq_argv;

/* 0: out holds lwq's arguments (notes were printed to `notes`); -1: refused, message printed to
 * `err`.  `out` must be freed with lwq_hfptq_free either way. */
int lwq_hfptq_translate(int argc, char **argv, lwq_hfptq_argv *out, FILE *notes, FILE *err);
void lwq_hfptq_free(lwq_hfptq_argv *a);

/* Model Optimizer --qformat names lwq runs and what each becomes (for --help). */
const char *lwq_hfptq_qformat_help(void);

#endif
