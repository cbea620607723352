/* engine/autoq/autoq_internal.h — what the files of the auto-quantize search share:
 *   autoq_score.c   pass 1: set-up, resume state, the depth loop
 *   autoq_layer.c   pass 1 on one layer: calibration, quantization, probe, per-group replays
 *   autoq_kl.c      the kl score's streams through the later layers and their head
 *   autoq_state.c   pass 1's resume state: fingerprint, scores.json, state files; the records
 *                   checked against the model
 *   autoq_solve.c   scores -> knapsack -> the chosen formats, the recipe, the report
 *   autoq_run.c     the command: pass 1, solve, pass 2, report
 *   autoq_recipe.c  the chosen formats as lwq JSON and Model Optimizer YAML
 *   head/autoq_head.c  lm_head as a search group: its candidates, bytes, check and pass-1 scores
 * Calls go one way: autoq_run -> autoq_score -> autoq_layer -> autoq_kl; autoq_score ->
 * autoq_state; autoq_run -> autoq_recipe, autoq_solve -> autoq_state.  Not public. */
#ifndef LWQ_ENGINE_AUTOQ_INTERNAL_H
#define LWQ_ENGINE_AUTOQ_INTERNAL_H

#include <limits.h>
#include <stdint.h>

#include "engine/autoq/autoq.h"
#include "engine/autoq/autoq_groups.h"
#include "engine/run/resume/manifest.h"
#include "io/runlock.h"
#include "layout/checkpoint/checkpoint.h"

#define LWQ_AQ_DIR "auto_quantize"             /* inside the resume directory */
#define LWQ_AQ_MANIFEST "scores.json"
#define LWQ_AQ_STATE_FMT "state-%d.bin"        /* %d: 0 or 1, alternating like the boundaries */
#define LWQ_AQ_RECIPE_NAME "auto_quantize_recipe"  /* the recipe's name: the stem of its files */
#define LWQ_AQ_RECIPE_JSON LWQ_AQ_RECIPE_NAME ".json"  /* in OUT and in <resume>/auto_quantize */
#define LWQ_AQ_RECIPE_YAML LWQ_AQ_RECIPE_NAME ".yaml"
#define LWQ_AQ_REPORT "auto_quantize.json"

/* One search group's measurements in one layer. */
typedef struct lwq_aq_gscore {
    lwq_aq_kind kind;
    int nmembers;
    char first[LWQ_ARCH_NAME_MAX];            /* its first member's module name (a check on resume) */
    uint8_t allowed[LWQ_AQ_FORMATS];
    uint64_t cost[LWQ_AQ_FORMATS];            /* bytes written for its weights and scales */
    double err[LWQ_AQ_FORMATS];               /* sum over scored tokens of ||h_q - h||^2 after the layer */
    double kl[LWQ_AQ_FORMATS];                /* kl score: mean KL per scored prediction (else 0) */
    uint64_t elements;
} lwq_aq_gscore;

/* One layer's record, committed with the layer. */
typedef struct lwq_aq_lrec {
    int ngroups;
    lwq_aq_gscore *g;
    double out_sq;            /* sum over scored tokens of ||h||^2 of the source layer output */
    double gain;              /* how the layer grows a relative error of its input: the probe's
                                 relative error after the layer over the one before (0: layer 0) */
    int64_t tokens;           /* scored tokens (real, padding excluded) */
    uint64_t fixed_bytes;     /* linears in no group (routers, exclusions), their weights + scales */
    uint64_t other_bytes;     /* every other tensor of the layer's shard (norms, biases, k/v scales) */
    uint64_t linear_elements; /* weight elements of every linear of the layer */
} lwq_aq_lrec;

/* Pass 1's results and resume state. */
typedef struct lwq_aq_scores {
    lwq_fingerprint fp;
    int nlayers;
    int committed;            /* layers with records */
    int complete;             /* the kl head ran too (or is not needed): scores final */
    int nstreams;             /* kl streams held in the state file */
    char state_file[32];      /* "" or state-0.bin / state-1.bin */
    uint64_t state_bytes, state_xxh64;
    uint64_t tail_bytes;      /* tensors outside the decoder layers, as written (lm_head's excluded when
                                 it is searched: its bytes are its group's) */
    lwq_aq_score score;
    int has_head;             /* lm_head is a search group: rec[nlayers] is its record (measured at the end
                                 of pass 1, in scores.json once complete; engine/autoq/head/autoq_head.h) */
    lwq_aq_lrec *rec;         /* (nlayers + 1): the layers', then lm_head's */
} lwq_aq_scores;

/* The records the solve sees: the layers, then lm_head's when it is searched. */
static inline int lwq_aq_nrec(const lwq_aq_scores *s) { return s->nlayers + (s->has_head ? 1 : 0); }

/* ---- autoq_state.c ---- */
/* The pass-1 fingerprint: a quantize run's (engine/run/resume/fingerprint.h) over the base recipe's
 * choices, with the candidate formats, the score and the score size mixed into its options. */
struct lwq_arch_layer;
int lwq_aq_fingerprint(const lwq_autoq_opts *o, const lwq_ckpt *ck, const struct lwq_arch_layer *plans,
                       const char *backend, lwq_fingerprint *fp, lwq_error *e);
void lwq_aq_scores_free(lwq_aq_scores *s);
/* LWQ_ENOENT (no message) when there is no scores.json; the file is untrusted input. */
int lwq_aq_scores_load(const char *path, lwq_aq_scores *s, lwq_error *e);
int lwq_aq_scores_save(const char *path, const lwq_aq_scores *s, lwq_error *e);
/* The bytes of every tensor outside the decoder layers, lm_head's weight left out when o searches it
 * (its bytes are then its group's): s->tail_bytes. */
uint64_t lwq_aq_tail_bytes(const lwq_autoq_opts *o, const lwq_ckpt *ck);
/* The state file (boundary + streams) for a commit: written durably into dir/state-<k>.bin with
 * k the one the manifest does not name; its name, size and checksum go into s. */
int lwq_aq_state_write(const char *dir, lwq_aq_scores *s, const void *const *parts, const uint64_t *bytes, int nparts,
                       lwq_error *e);
/* Every committed record of s against the model: its groups rebuilt from the plans, the base
 * recipe and the formats (kind, first module, members, elements, candidate formats), and every
 * byte count the solve uses recomputed exactly from the checkpoint's table (each group's cost per
 * format, the layer's fixed and other bytes and linear elements, the tail).  LWQ_ESTATE naming
 * `file`, the layer, the group and both values at the first difference.  The file is untrusted:
 * this is what keeps an edited or foreign one from writing past the budget. */
int lwq_aq_scores_check(const lwq_autoq_opts *o, const lwq_ckpt *ck, const struct lwq_arch_layer *plans,
                        const lwq_aq_scores *s, const char *file, lwq_error *e);
/* The committed state file, checked against the manifest, into the buffers. */
int lwq_aq_state_read(const char *dir, const lwq_aq_scores *s, void *const *parts, const uint64_t *bytes, int nparts,
                      lwq_error *e);

/* ---- autoq_score.c ---- */
/* Pass 1, from the first uncommitted layer (s holds what is committed; `dir` is
 * <resume>/auto_quantize).  Returns with s complete. */
int lwq_aq_pass1(const lwq_autoq_opts *o, const char *dir, lwq_aq_scores *s, lwq_error *e);

/* ---- autoq_solve.c ---- */
typedef struct lwq_aq_solution {
    int ngroups;              /* over all layers */
    uint8_t *fmt;             /* the candidate (engine/autoq/autoq.h) of each group, layer-major */
    uint64_t bytes;           /* predicted: every tensor written (layers + tail) */
    uint64_t linear_bytes, linear_elements;
    double bits;              /* predicted bits per weight */
    double active_bits;       /* active_moe: the weighted bits per weight the budget bounds (else = bits) */
    double weighted_elements; /* active_moe: sum of cost weight x elements of the linears (else elements) */
    double score;             /* summed score of the choice */
    double lp_bound;
    int free_items;
} lwq_aq_solution;

/* Model Optimizer's routed-expert test (is_routed_moe_module_name): ".experts." (or "experts" at
 * either end) in the name and no "shared_expert". */
int lwq_aq_routed_name(const char *name);
/* The unit of the active_moe cost weights: 2^20 (engine/autoq/autoq.h) */
#define LWQ_AQ_WEIGHT_ONE (1u << 20)
/* Group g's cost weight in LWQ_AQ_WEIGHT_ONE units under o's cost model (1 under "weight"). */
uint64_t lwq_aq_cost_weight(const lwq_autoq_opts *o, const lwq_aq_gscore *g);

/* The product of the gains of the layers after L (how much they grow a relative error). */
double lwq_aq_amplification(const lwq_aq_scores *s, int L);
/* The score the knapsack minimises for group g of layer rec (in s->rec) in format f. */
double lwq_aq_score_of(const lwq_aq_scores *s, const lwq_aq_lrec *rec, const lwq_aq_gscore *g, int f);
int lwq_aq_solve(const lwq_autoq_opts *o, const lwq_aq_scores *s, lwq_aq_solution *sol, lwq_error *e);
/* The uniform mix of the same groups: every group in candidate pref where it can take it, else FP8,
 * else NVFP4, else NVFP4_MSE, else W4A16, else W4A16_F46, else none (the comparison the report prints beside the search). */
int lwq_aq_uniform(const lwq_aq_scores *s, int pref, lwq_aq_solution *sol, lwq_error *e);
void lwq_aq_solution_free(lwq_aq_solution *sol);

#endif
