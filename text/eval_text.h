/* text/eval_text.h — the built-in held-out evaluation text of `lwq eval` (text/eval_text.c):
 * paragraphs that are not in the built-in calibration text, so the default eval set never
 * overlaps the default calibration samples.  Strings are static. */
#ifndef LWQ_LAYOUT_EVAL_TEXT_H
#define LWQ_LAYOUT_EVAL_TEXT_H

#include <stddef.h>

size_t lwq_eval_builtin_count(void);
/* The i-th paragraph, NULL past the end. */
const char *lwq_eval_builtin_sample(size_t i);

#endif
