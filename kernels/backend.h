/* kernels/backend.h — the compute backend: a table of function pointers plus a context.
 *
 * Every op the layer forward needs (GEMM, RMSNorm, RoPE, attention, SwiGLU, MoE routing,
 * row gather / weighted combine, amax, ...) goes through an lwq_backend.  The CPU backend
 * (kernels/cpu/, plain C, its own GEMM) is always built and is the specification; the CUDA backend
 * (kernels/cuda/, cuBLAS + kernels) is built when the build finds nvcc, as a module that
 * --device cuda loads at run time (kernels/cuda_module.h), and is tested op by op against the CPU
 * one.
 *
 * The public wrappers below (lwq_backend_*) do every argument, dtype, shape and device check and
 * then call the backend, so a backend implementation may assume well-formed arguments.  All
 * tensors given to an op live on the backend's device (tensor.device) and are contiguous
 * row-major 2-D views unless stated; "act" below means an activation dtype: F32, BF16 or F16.
 *
 * Numerics (shared by all backends; ../shared/DESIGN.md "Numerics"): inputs are read into FP32,
 * every reduction accumulates in FP32 (the CPU reference may use wider accumulators), and each op
 * rounds its result to the output dtype the way a framework running that dtype would (one
 * rounding per framework op, e.g. RoPE rounds q*cos, rot(q)*sin and their sum separately).
 * Results are deterministic for a given backend and thread count: no op uses atomics or an
 * order that depends on scheduling.
 * Contraction: the element-wise ops (rope, swiglu, add, moe_combine, rmsnorm's scaling) round
 * every product and every sum to f32 on its own; no product is fused with the following add
 * into an FMA (the C build is ISO C11, where GCC does not contract; the CUDA kernels use
 * __fmul_rn / __fadd_rn).  So for equal inputs these ops agree bit for bit across backends, except
 * where a libm function (expf, sinf, cosf) differs by an ulp between glibc and CUDA.  Reductions
 * (GEMM, attention, RMSNorm's sum of squares, routing's softmax) may differ in order and
 * contraction and are compared with stated tolerances. 
 *
 * Ownership: lwq_backend_destroy() destroys what lwq_backend_*_create() made.  Memory from
 * lwq_backend_alloc() must be released with lwq_backend_free() of the same backend.
 * Thread-safety: one backend is used by one thread at a time (ops may use internal threads).
 * Failure: ops return 0 or a negative LWQ_E* code and fill the lwq_error (LWQ_EINVAL naming the
 * op and argument for bad shapes/dtypes, LWQ_EDEVICE for driver errors, LWQ_ENOMEM). */
#ifndef LWQ_KERNELS_BACKEND_H
#define LWQ_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "core/data/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lwq_route_mode {
    LWQ_ROUTE_SOFTMAX_TOPK = 0,  /* softmax (f32) over all experts, top-k, weights as they are */
    LWQ_ROUTE_SOFTMAX_TOPK_NORM, /* ... then renormalised over the k (qwen3_moe norm_topk_prob,
                                    mixtral as transformers computes it) */
    LWQ_ROUTE_TOPK_SOFTMAX,      /* top-k of the logits, softmax over those k (Mixtral paper form) */
} lwq_route_mode;

typedef struct lwq_attn_args {
    const lwq_tensor *q;         /* (batch*seq, n_heads*head_dim) act */
    const lwq_tensor *k, *v;     /* (batch*seq, n_kv_heads*head_dim) act, same dtype as q */
    lwq_tensor *out;             /* (batch*seq, n_heads*head_dim) act */
    const lwq_tensor *key_valid; /* U8 (batch*seq): 1 = real token, 0 = padding; NULL = all real */
    int64_t batch, seq;
    int n_heads, n_kv_heads;     /* n_heads % n_kv_heads == 0 (grouped-query heads) */
    int64_t head_dim;
    float scale;                 /* softmax scale, usually head_dim^-0.5 */
} lwq_attn_args;

/* The non-GEMM part of a Mamba2 mixer (nemotron_h; engine/forward/model_nemotron.c has the
 * formulas).  I = heads * head_dim, C = I + 2 * groups * state, W = I + C + heads; n = batch * seq.
 * Rows whose valid byte is 0 are padding: their proj values are never read, their outputs are 0,
 * and each sequence's conv history and scan state start at zero. */
typedef struct lwq_mamba2_args {
    const lwq_tensor *proj;      /* (n, W) act: in_proj's output, columns z | xBC | dt */
    const lwq_tensor *conv_w;    /* (C, 1, K) float: the depthwise conv1d's weight */
    const lwq_tensor *conv_b;    /* (C) float, or NULL */
    const lwq_tensor *a_log, *dt_bias, *d; /* (heads) float each */
    const lwq_tensor *norm_w;    /* (I) float: the gated RMSNorm's weight */
    const lwq_tensor *valid;     /* U8 (n): 1 = real token */
    lwq_tensor *xbc_in;          /* (n, C) act or NULL: the conv's input (proj's xBC), padding 0 */
    lwq_tensor *out;             /* (n, I) act: the gated norm's output, out_proj's input */
    int64_t batch, seq, heads, head_dim, state, groups, kernel;
    float eps, dt_min;           /* the norm's epsilon; time_step_min */
} lwq_mamba2_args;

/* One product of lwq_backend_gemm_grouped: y = x W^T (+ bias), operands as lwq_backend_gemm's. */
typedef struct lwq_gemm_group {
    const lwq_tensor *x, *w, *bias;
    lwq_tensor *y;
} lwq_gemm_group;

typedef struct lwq_backend_ops {
    const char *name;
    lwq_device device;
    void (*destroy)(void *ctx);

    int (*alloc)(void *ctx, size_t bytes, void **out, lwq_error *e);
    void (*free)(void *ctx, void *p);
    int (*upload)(void *ctx, void *dst, const void *src_host, size_t bytes, lwq_error *e);
    int (*download)(void *ctx, void *dst_host, const void *src, size_t bytes, lwq_error *e);
    int (*memset0)(void *ctx, void *dst, size_t bytes, lwq_error *e);

    int (*gemm)(void *ctx, const lwq_tensor *x, const lwq_tensor *w, const lwq_tensor *bias,
                lwq_tensor *y, lwq_error *e);
    int (*rmsnorm)(void *ctx, const lwq_tensor *x, const lwq_tensor *w, float eps, lwq_tensor *y,
                   lwq_error *e);
    int (*rope)(void *ctx, lwq_tensor *x, int64_t head_dim, const lwq_tensor *pos,
                const lwq_tensor *inv_freq, float attn_scaling, lwq_error *e);
    int (*attention)(void *ctx, const lwq_attn_args *a, lwq_error *e);
    int (*swiglu)(void *ctx, const lwq_tensor *gate, const lwq_tensor *up, lwq_tensor *out,
                  lwq_error *e);
    int (*add)(void *ctx, lwq_tensor *acc, const lwq_tensor *x, lwq_error *e);
    int (*moe_route)(void *ctx, const lwq_tensor *logits, int k, lwq_route_mode mode,
                     lwq_dtype weight_dtype, lwq_tensor *idx, lwq_tensor *wts, lwq_error *e);
    int (*gather_rows)(void *ctx, const lwq_tensor *src, const lwq_tensor *rows, lwq_tensor *dst,
                       lwq_error *e);
    int (*moe_combine)(void *ctx, const lwq_tensor *y, const lwq_tensor *slot_rows,
                       const lwq_tensor *wts, lwq_tensor *out, lwq_error *e);
    int (*amax)(void *ctx, const lwq_tensor *x, const lwq_tensor *row_valid, float *out,
                lwq_error *e);
    int (*synchronize)(void *ctx, lwq_error *e);
    /* Peak device memory in use (bytes, the whole device as cudaMemGetInfo reports it), sampled
     * at every device allocation of the CUDA module (the backend's, GPTQ's, the quantizers',
     * library handles) and at every synchronize; NULL for host backends. */
    uint64_t (*mem_peak)(void *ctx);
    /* Page-lock host memory for fast uploads (cudaHostRegister); NULL for host backends. */
    int (*host_register)(void *ctx, void *ptr, size_t bytes, lwq_error *e);
    void (*host_unregister)(void *ctx, void *ptr);
    /* "0000:17:00.0" of the device (for NUMA placement); NULL for host backends. */
    int (*pci_bus_id)(void *ctx, char *out, size_t cap);
    /* Appended last so positional initialisers of the tables stay in order. */
    int (*copy)(void *ctx, const lwq_tensor *src, lwq_tensor *dst, lwq_error *e);
    /* count products at once (lwq_backend_gemm_grouped); NULL: the wrapper calls gemm per group */
    int (*gemm_grouped)(void *ctx, const lwq_gemm_group *g, int count, lwq_error *e);
    /* lwq_backend_mamba2; NULL: the backend has none (the wrapper refuses) */
    int (*mamba2)(void *ctx, const lwq_mamba2_args *a, lwq_error *e);
    /* Quantization ops (quant_nvfp4, quant_fp8, mse/sweep search, hessian_accumulate) are added
     * here when they are wired: the reference quantizers are plain functions (layout/ and
     * kernels/cpu/ *_ref) and each gets a slot, a checking wrapper below and a CPU-vs-CUDA test,
     * exactly like the ops above. */
} lwq_backend_ops;

typedef struct lwq_backend {
    const lwq_backend_ops *ops;
    void *ctx;
} lwq_backend;

/* ---- construction ---------------------------------------------------------------------------- */

/* The CPU backend.  `threads` > 0 sets core/parallel's thread count; 0 keeps it.  The backend
 * parallelises over fixed output tiles, so each output element is computed the same way whatever
 * the thread count. */
int lwq_backend_cpu_create(lwq_backend *be, int threads, lwq_error *e);
/* The CPU GEMM path in use ("avx512bf16", "avx512", "avx2" or "portable"; kernels/cpu/gemm/gemm_isa.h):
 * the run logs it, because BF16 x BF16 products on the avx512bf16 path have bits of their own. */
const char *lwq_backend_cpu_kernels(void);
/* The CPU expf in use ("avx512", "avx2", "libm", or "scalar" when forced; kernels/cpu/exp/exp.h):
 * the vector ones only where they give the C library's expf bits, so the bytes do not depend on
 * it; the run logs it beside the GEMM path. */
const char *lwq_backend_cpu_exp(void);
/* What the CPU path's bytes depend on: "fma" for the FMA paths (avx512, avx2, portable: the same
 * bits on every CPU), else the BF16 dot path's name ("amx", "avx512bf16"), whose BF16 x BF16
 * products are summed in an order of its own.  The run's fingerprint carries it (engine/run). */
const char *lwq_backend_cpu_bytes(void);
/* The CUDA backend on `device` (its own stream and cuBLAS handle), from the CUDA module, which
 * this loads (kernels/cuda_module.h).  LWQ_EUNSUPPORTED when the build has no CUDA; LWQ_EDEVICE
 * with the reason of lwq_backend_cuda_probe when no usable device is present. */
int lwq_backend_cuda_create(lwq_backend *be, int device, lwq_error *e);
/* Number of CUDA devices: 0 without CUDA support, without a driver (then without loading the
 * module or any CUDA library: lwq_cuda_driver_present), or when the module cannot be loaded. */
int lwq_backend_cuda_device_count(void);
/* --device auto: 1 to run on CUDA (a device is there), 0 on the CPU.  When LWQ_CUDA_MODULE names
 * a module, the user chose that file: one that cannot be loaded (missing, truncated, not a module,
 * a library it needs missing) is that error (LWQ_EDEVICE, naming the file), not a quiet CPU run;
 * a module that loads but finds no device still means the CPU. */
int lwq_backend_cuda_auto(lwq_error *e);
/* The number of CUDA devices (> 0), or LWQ_EDEVICE / LWQ_EUNSUPPORTED with the real reason in e,
 * in the order they are met: built without CUDA, the CUDA module missing (the paths looked in), a
 * library it needs missing (named), no driver, a driver too old for the runtime the module was
 * built with (both versions named), no device.  Say this instead of a bare "0 devices". */
int lwq_backend_cuda_probe(lwq_error *e);
void lwq_backend_destroy(lwq_backend *be);

/* ---- memory ---------------------------------------------------------------------------------- */

int lwq_backend_alloc(const lwq_backend *be, size_t bytes, void **out, lwq_error *e);
void lwq_backend_free(const lwq_backend *be, void *p);
/* A contiguous tensor on the backend's device; free its data with lwq_backend_tensor_free. */
int lwq_backend_tensor_alloc(const lwq_backend *be, lwq_dtype dt, int ndim, const int64_t *shape,
                             lwq_tensor *t, lwq_error *e);
void lwq_backend_tensor_free(const lwq_backend *be, lwq_tensor *t);
int lwq_backend_upload(const lwq_backend *be, void *dst, const void *src_host, size_t bytes,
                       lwq_error *e);
int lwq_backend_download(const lwq_backend *be, void *dst_host, const void *src, size_t bytes,
                         lwq_error *e);
int lwq_backend_memset0(const lwq_backend *be, void *dst, size_t bytes, lwq_error *e);
int lwq_backend_synchronize(const lwq_backend *be, lwq_error *e);
/* Peak device memory in use so far (0 for the CPU backend). */
uint64_t lwq_backend_mem_peak(const lwq_backend *be);
/* Page-lock [ptr, ptr+bytes) for the device's DMA.  0 when done, 1 when the backend has no such
 * notion (CPU), negative on failure. */
int lwq_backend_host_register(const lwq_backend *be, void *ptr, size_t bytes, lwq_error *e);
void lwq_backend_host_unregister(const lwq_backend *be, void *ptr);
/* The device's PCI bus id, or -1 when there is none (CPU backend). */
int lwq_backend_pci_bus_id(const lwq_backend *be, char *out, size_t cap);

/* ---- ops ------------------------------------------------------------------------------------- */

/* y = x W^T (+ bias).  x: (n, in) act; w: (out, in) row-major F32/F16/BF16; bias: (out) float
 * dtype or NULL; y: (n, out) act (F32 allowed for any x).  FP32 accumulation, one rounding. */
int lwq_backend_gemm(const lwq_backend *be, const lwq_tensor *x, const lwq_tensor *w,
                     const lwq_tensor *bias, lwq_tensor *y, lwq_error *e);
/* count independent products g[i].y = g[i].x g[i].w^T (+ g[i].bias), each checked as
 * lwq_backend_gemm checks its operands and each giving exactly lwq_backend_gemm's bits; a backend
 * may schedule them as one job (the CPU's AMX path: all groups' weight blocks across its threads
 * in one loop, no fork and join per group).  The routed experts of a MoE layer use it.  Groups
 * with no rows are skipped.  No y may alias any x. */
int lwq_backend_gemm_grouped(const lwq_backend *be, const lwq_gemm_group *g, int count,
                             lwq_error *e);
/* Llama-style RMSNorm per row: r = x * rsqrt(mean(x^2) + eps) in f32, rounded to y's dtype,
 * then times w, rounded again.  x, y: (rows, d) (y may alias x); w: (d). */
int lwq_backend_rmsnorm(const lwq_backend *be, const lwq_tensor *x, const lwq_tensor *w, float eps,
                        lwq_tensor *y, lwq_error *e);
/* Rotate-half RoPE in place.  x: (n, heads*head_dim) act; pos: I32 (n); inv_freq: F32
 * (head_dim/2).  Angles pos*inv_freq in f32; cos/sin times attn_scaling, rounded to act. */
int lwq_backend_rope(const lwq_backend *be, lwq_tensor *x, int64_t head_dim, const lwq_tensor *pos,
                     const lwq_tensor *inv_freq, float attn_scaling, lwq_error *e);
/* Causal grouped-query attention with f32 online softmax over key tiles (memory independent of
 * seq^2).  Query i of sequence b sees keys j <= i that are valid.  A query with no visible key
 * (a padding row) gets zeros. */
int lwq_backend_attention(const lwq_backend *be, const lwq_attn_args *a, lwq_error *e);
/* out = silu(gate) * up with framework rounding: round(round(silu(g)) * u).  (n, f) each. */
int lwq_backend_swiglu(const lwq_backend *be, const lwq_tensor *gate, const lwq_tensor *up,
                       lwq_tensor *out, lwq_error *e);
/* acc = round(acc + x) (residual add).  Same shape and dtype. */
int lwq_backend_add(const lwq_backend *be, lwq_tensor *acc, const lwq_tensor *x, lwq_error *e);
/* Router: logits (n, E) float dtype -> idx I32 (n, k) (experts of each token, ties to the lower
 * index, in descending weight order) and wts F32 (n, k), rounded to weight_dtype (the act dtype
 * transformers casts the weights to). */
int lwq_backend_moe_route(const lwq_backend *be, const lwq_tensor *logits, int k,
                          lwq_route_mode mode, lwq_dtype weight_dtype, lwq_tensor *idx,
                          lwq_tensor *wts, lwq_error *e);
/* dst[i] = src[rows[i]] converted to dst's dtype.  src: (n, d); rows: I32 (m), each in [0, n);
 * dst: (m, d).  Also the embedding lookup (src = embedding matrix). */
int lwq_backend_gather_rows(const lwq_backend *be, const lwq_tensor *src, const lwq_tensor *rows,
                            lwq_tensor *dst, lwq_error *e);
/* The expert scatter-add, written as a per-token gather so it is deterministic without atomics:
 * out[t] = sum over s of wts[t,s] * y[slot_rows[t,s]], slots taken in the given order (the engine
 * orders them by expert index, as transformers' index_add_ loop does), skipping rows < 0;
 * acc starts at 0 and each product and each partial sum is rounded to out's dtype.
 * y: (m, d); slot_rows: I32 (n, k) with values in [-1, m); wts: F32 (n, k); out: (n, d). */
int lwq_backend_moe_combine(const lwq_backend *be, const lwq_tensor *y,
                            const lwq_tensor *slot_rows, const lwq_tensor *wts, lwq_tensor *out,
                            lwq_error *e);
/* max |x| over the rows whose row_valid byte is nonzero (all rows when row_valid is NULL);
 * 0 for no rows; NaN when any counted element is NaN.  x: (rows, d) float dtype. */
int lwq_backend_amax(const lwq_backend *be, const lwq_tensor *x, const lwq_tensor *row_valid,
                     float *out, lwq_error *e);

/* dst = src converted to dst's dtype, element by element, over strided views (1 to 4 dims, the
 * same shape; strides in elements as lwq_tensor holds them).  src strides may be 0 (broadcast);
 * dst strides must be > 0 on every dim longer than 1, and dst must not overlap src.  The MLA
 * forward uses it to split heads into their nope/rope/value parts and to assemble q and k. */
int lwq_backend_copy(const lwq_backend *be, const lwq_tensor *src, lwq_tensor *dst, lwq_error *e);

/* The Mamba2 mixer's conv1d + SiLU, dt (softplus, clamp), sequential SSD scan from a zero state
 * and grouped gated RMSNorm (lwq_mamba2_args).  proj's dtype is the act dtype every framework
 * rounding goes to.  The CPU backend runs lwq_mamba2_ref (kernels/mamba2.h); the CUDA one runs
 * the same arithmetic in the same order (kernels/cuda/mamba2_cuda.cu says which bytes match). */
int lwq_backend_mamba2(const lwq_backend *be, const lwq_mamba2_args *a, lwq_error *e);

/* True for F32, BF16, F16. */
int lwq_dtype_is_act(lwq_dtype t);

#ifdef __cplusplus
}
#endif

#endif
