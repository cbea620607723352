/* layout/arch/arch_qnames.h — modules' quantizers under the names Model Optimizer 0.47 matches
 * recipes against: those of the model as transformers 5.14.1 holds it in memory, not the
 * checkpoint's (docs/RECIPES.md, "Module names").
 *
 * Most modules are held as the checkpoint names them.  The differences, per family row
 * (layout/arch/family.h), from transformers' conversion_mapping.py and modeling classes:
 *   - mixtral, minimax_m2: block_sparse_moe is mlp (WeightRenaming(".block_sparse_moe.", ".mlp."));
 *   - nemotron_h: the root backbone. is model. (WeightRenaming(r"^backbone\.", "model.")), the
 *     embedding model.embeddings;
 *   - every row with fused_experts: a layer's routed experts are one module with 3-D parameters
 *     (MixtralExperts, Qwen3MoeExperts, DeepseekV3Experts, NemotronHExperts, ...), which Model
 *     Optimizer wraps as _QuantFusedExperts (modelopt/torch/quantization/plugins/huggingface.py):
 *     per expert one weight quantizer in a list, one input quantizer per projection shared by
 *     every expert, no output quantizer.
 * So expert 5's w1 of mixtral's layer 3, model.layers.3.block_sparse_moe.experts.5.w1, has the
 * quantizers
 *   model.layers.3.mlp.experts.gate_up_proj_weight_quantizers.5   (normalised by Model Optimizer's
 *   model.layers.3.mlp.experts.gate_up_proj_weight_quantizer       _match_quantizer to this)
 *   model.layers.3.mlp.experts.gate_up_proj_input_quantizer
 * and w3 the same ones (gate and up are one fused projection in memory); w2 those of down_proj.
 * Non-gated experts (nemotron_h) have up_proj and down_proj.  The export still writes the
 * checkpoint's tensor names (transformers saves through the reverse mapping), and lwq's own JSON
 * "match" rules still see the checkpoint's module names (lwq_qnames.module). */
#ifndef LWQ_LAYOUT_ARCH_QNAMES_H
#define LWQ_LAYOUT_ARCH_QNAMES_H

#include "layout/arch/arch.h"
#include "layout/recipe/recipe.h"

/* out = the in-memory name of checkpoint module `module` of family f (NULL: unchanged). */
void lwq_arch_memory_name(const lwq_family *f, const char *module, char *out, size_t cap);
/* q: the quantizer names of a module held as one plain module (an attention module, lm_head, the
 * embedding, a linear that is no fused expert), q->module = module. */
void lwq_arch_qnames_module(const lwq_family *f, const char *module, lwq_qnames *q);
/* q: the quantizer names of p's linear m (q->module = m->name, the checkpoint's). */
void lwq_arch_qnames(const lwq_arch_layer *p, const lwq_arch_linear *m, lwq_qnames *q);

/* The in-memory module that holds routed expert m's weight ("model.layers.3.mlp.experts" for the
 * example above) into out; 0 when m is no routed expert of a fused experts module (out = ""). */
int lwq_arch_fused_experts_module(const lwq_arch_layer *p, const lwq_arch_linear *m, char *out, size_t cap);

#endif
