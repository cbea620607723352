/* engine/autoq/head/autoq_head.h — lm_head as a search group of the auto-quantize search, with Model
 * Optimizer 0.47's semantics (algorithms.py insert_hparams_after_merge_rules, _auto_quantize_cost.py):
 * lm_head is a QuantLinear, an auto-quantize module in a group of its own, cost weight 1, counted in
 * the budget's numerator and denominator; a candidate's quant_cfg applies to it relative to the module,
 * so the `fp8` candidate makes it W8A8 (per-tensor FP8 weight, a calibrated FP8 input quantizer) and
 * `w4a16_nvfp4` weight-only NVFP4 (dynamic blocks); `none` keeps the source dtype.
 *
 * lwq searches lm_head when exactly one module_search_spaces entry has a pattern matching its name
 * (the qwen3_6_moe module_spaces recipe's "*lm_head*"): its candidates are that entry's (none with
 * its allow_no_quant).  An `nvfp4` (W4A4, or its mse variant) candidate on lm_head, two entries matching it, and a tied
 * lm_head (no lm_head.weight of its own) are refused naming lm_head.  Under a fixed `quantize` baseline
 * with no entry matching lm_head, its one choice is the baseline's lm_head (weight-only NVFP4, W8A8 FP8
 * or none), a fixed group inside the budget, as Model Optimizer resolves an unmatched group with the
 * baseline; a baseline lm_head no candidate is (weight-only FP8, static NVFP4, Four-over-Six) stays
 * outside the search.  Without a baseline or an entry lm_head keeps the base recipe's choice outside
 * the search (Model Optimizer would search it with the top-level candidates; README says so).
 *
 * The group's record is the extra record rec[nlayers] of the scores (lwq_aq_nrec): one group of kind
 * LWQ_AQ_HEAD, gain 1, no fixed or other bytes, lm_head's weight elements.  Pass 1 measures it after
 * the last layer, from the source's final hidden state of the calibration set:
 *   - the input amax: the final norm's output over every calibration row (real tokens; padding too
 *     with --include-padding), as lwq quantize's lwq_run_head_amax calibrates a W8A8 lm_head;
 *   - per quantized candidate, lm_head quantized as lwq quantize writes it (engine/run/run_output.c:
 *     FP8 at the weight's amax + input_scale; NVFP4 dynamic blocks): its exact bytes, then on the
 *     scored rows the logits with the weight dequantized (and, for FP8, the input quantized to E4M3
 *     per tensor, engine/eval/emul/eval_emul.h) against the source logits: err = sum over real
 *     tokens of ||z_q - z||^2 and out_sq = sum of ||z||^2 (layer score err / out_sq: the squared
 *     error it adds to the logits relative to them, no later layers), and with the kl score the mean
 *     KL(P_src || P_q) per scored prediction.
 * Byte costs (exact; lwq_aq_head_cost, also what the check of a scores file recomputes):
 *   fp8  V*H (E4M3) + weight_scale + input_scale = V*H + 8
 *   w4a16_nvfp4  V*H/2 + V*H/16 (E4M3 block scales) + weight_scale_2 = 9*V*H/16 + 4
 *   none  the source tensor's bytes.
 * Not public: the autoq files' (engine/autoq/autoq_internal.h). */
#ifndef LWQ_ENGINE_AUTOQ_HEAD_H
#define LWQ_ENGINE_AUTOQ_HEAD_H

#include <stdint.h>

#include "engine/autoq/autoq.h"
#include "layout/checkpoint/checkpoint.h"

struct lwq_aq_lrec;
struct lwq_aq_ctx;

/* Whether o's search takes lm_head: 1 searched (allowed[] its candidates), 2 fixed at the baseline's
 * format (allowed[] that one), 0 not; < 0 an error naming lm_head and the space(s). */
int lwq_aq_head_allowed(const lwq_autoq_opts *o, const lwq_ckpt *ck, uint8_t allowed[LWQ_AQ_FORMATS], lwq_error *e);
/* The LWQ_LMHEAD_* mode candidate f writes lm_head as (FP8: W8A8, W4A16: dynamic weight-only NVFP4,
 * NONE: none); -1 for a candidate lm_head cannot take. */
int lwq_aq_head_mode(int f);
/* The candidate a LWQ_LMHEAD_* mode is (the inverse of lwq_aq_head_mode), or -1. */
int lwq_aq_head_format(int mode);
/* Exact bytes lwq writes for lm_head's weight (`w`, the checkpoint's) and scales in candidate f. */
uint64_t lwq_aq_head_cost(const lwq_ckpt_tensor *w, int f);
/* rec: lm_head's record before measuring (one group: kind, first module, allowed, costs, elements). */
int lwq_aq_head_record(const lwq_autoq_opts *o, const lwq_ckpt *ck, struct lwq_aq_lrec *rec, lwq_error *e);
/* A record read from a scores file (`file`) against lwq_aq_head_record's: LWQ_ESTATE naming the field. */
int lwq_aq_head_check(const lwq_autoq_opts *o, const lwq_ckpt *ck, const struct lwq_aq_lrec *rec, const char *file,
                      lwq_error *e);
/* Pass 1's measurement (above) into rec, made by lwq_aq_head_record; c->bnd[c->cur] holds the source's
 * output of the last layer for every calibration row. */
int lwq_aq_head_score(struct lwq_aq_ctx *c, struct lwq_aq_lrec *rec, lwq_error *e);

#endif
