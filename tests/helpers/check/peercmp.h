/* tests/helpers/check/peercmp.h — compare two exported checkpoints tensor by tensor, by name, whatever
 * their shard layouts, with the rules of issue 23 (the same as peers/compare.py): every tensor
 * except input_scale / k_scale / v_scale byte-identical (dtype, shape, bytes); those F32 scalars
 * within a relative tolerance; hf_quant_config.json's quantization and config.json's
 * quantization_config equal in meaning (every key equal except producer, and the exclusion lists
 * as the set of the checkpoints' quantizable modules -- a weight of two or more dimensions -- they
 * cover: a glob and the names it matches are the same exclusion; quantized_layers and config_groups
 * entry by entry, each missing or differing entry named, and names that carry Model Optimizer 0.47's
 * mangled nemotron_h sentinel read up to it, with a note saying so: peercmp.c read_json).
 * Test-only; not thread-safe. */
#ifndef LWQ_TESTS_PEERCMP_H
#define LWQ_TESTS_PEERCMP_H

#define PC_MAX_NOTES 12

typedef struct pc_result {
    int exact_total, exact_identical; /* tensors compared byte for byte */
    int scales;                       /* activation / KV scales compared as numbers */
    double worst_rel;                 /* worst relative scale difference */
    char worst[200];                  /* its tensor */
    int ndiff;                        /* differences of any kind */
    char notes[PC_MAX_NOTES][300];    /* the first ones, each naming the tensor or config key */
} pc_result;

/* Compare checkpoint directory a with b (b is the reference in relative differences).  Errors
 * reading either (a missing file, a bad header) are Criterion assertion failures naming it. */
void pc_compare(const char *a, const char *b, double rtol, pc_result *r);

#endif
