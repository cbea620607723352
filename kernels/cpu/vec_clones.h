/* kernels/cpu/vec_clones.h — LWQ_VEC: a function compiled per ISA (target_clones picks AVX-512 /
 * AVX2 / baseline at load time) with the vectorizer on.  GCC on x86-64 only, as in quant_cpu.c:
 * clang has no optimize attribute, vectorizes at -O2 anyway, and its (14's) target_clones on a
 * function called from other files resolves those calls to the resolver itself, so a clang build
 * keeps plain functions.  Loops under it must be element by element with IEEE operations (no FMA:
 * ISO C mode) and sequential float reductions (GCC reorders no float sum without -ffast-math),
 * so every clone gives the bits of the plain loop. */
#ifndef LWQ_KERNELS_CPU_VEC_CLONES_H
#define LWQ_KERNELS_CPU_VEC_CLONES_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LWQ_VEC                                                                                    \
    __attribute__((target_clones("avx512f", "avx2", "default"),                                   \
                   optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define LWQ_VEC
#endif

#endif
