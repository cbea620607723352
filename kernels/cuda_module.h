/* kernels/cuda_module.h — the CUDA backend as a loadable module: what liblwq-cuda.so exports and
 * how lwq finds it.
 *
 * The `lwq` binary links no CUDA library.  Everything that needs one (kernels/cuda/: the compute
 * backend, the quantizers, GPTQ) is built into the module liblwq-cuda.so, which links libcudart,
 * libcublas and libcusolver; `--device cuda` (and `auto` on a machine with an NVIDIA driver)
 * dlopens it (kernels/cuda_load.c), so a CPU run maps no CUDA library and the binary starts on a
 * machine without them.  The design follows ggml's GGML_BACKEND_DL: one exported entry point that
 * returns a table, an ABI check before anything in the table is used, the module looked up next to
 * the executable first.
 *
 * The module resolves the host functions it calls (lwq_errf, lwq_log, the quantizer checks,
 * lwq_gptq_prepare) from the executable that loads it: every executable that links lwq exports its
 * lwq_* symbols (CMakeLists.txt, kernels/cuda/host_exports.list), and the loader references each
 * of those functions so the static library cannot leave one out (cuda_load.c; ctest
 * cuda_module_symbols checks the list against the module's undefined symbols).  Inside the module
 * every symbol but the entry point is local (kernels/cuda/module.map), so a test program that also
 * links the CUDA kernels directly (test_quant_cuda, test_gptq_cuda) has no clash.
 *
 * Where the module is looked for, first match wins:
 *   1. $LWQ_CUDA_MODULE, a path to the file (when set, nothing else is tried);
 *   2. the directory of the running executable (the build tree: lwq and liblwq-cuda.so side by side);
 *   3. <executable dir>/../lib/lwq/ (an installed tree, wherever it was moved);
 *   4. the install lib dir compiled in (LWQ_CUDA_MODULE_DIR, CMAKE_INSTALL_FULL_LIBDIR/lwq).
 * Failure says which of three things is missing: the module (the paths tried), a library it needs
 * (the one the dynamic loader could not find), or the driver (the module's probe: cudart's own
 * reason, kernels/backend.h lwq_backend_cuda_probe). */
#ifndef LWQ_KERNELS_CUDA_MODULE_H
#define LWQ_KERNELS_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "core/sys/error.h"
#include "kernels/backend.h"
#include "kernels/gptq.h"
#include "kernels/quant_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the table below or a struct it passes changes meaning. */
#define LWQ_CUDA_MODULE_ABI 1
#define LWQ_CUDA_MODULE_FILE "liblwq-cuda.so"
#define LWQ_CUDA_MODULE_ENTRY "lwq_cuda_module_entry"
/* What a build without CUDA says when CUDA is asked for (kernels/backend.c's probe says the same). */
#define LWQ_CUDA_NOT_BUILT "lwq was built without CUDA (no nvcc at configure time)"

typedef struct lwq_cuda_module {
    uint32_t abi;                  /* LWQ_CUDA_MODULE_ABI of the module's build */
    /* sizes of the structs that cross the boundary: a module built from other headers is refused
     * before one is passed */
    uint32_t size_error, size_tensor, size_backend_ops, size_quant_ops, size_gptq_ops;
    const char *version;           /* LWQ_VERSION of the module's build */
    int cudart_version;            /* CUDART_VERSION it was compiled against (13000 = 13.0) */
    /* the number of devices (> 0), or < 0 with the runtime's reason (no driver, a driver too old,
     * no device) in e */
    int (*probe)(lwq_error *e);
    int (*backend_create)(lwq_backend *be, int device, lwq_error *e);
    const lwq_quant_ops *quant;
    const lwq_gptq_ops *gptq;
    /* the peak of device memory in use (total - free, cudaMemGetInfo) sampled at every allocation
     * the module makes, cuBLAS/cuSOLVER handles and GPTQ's buffers included, and at every
     * synchronize; 0 before the first */
    uint64_t (*mem_peak)(void);
} lwq_cuda_module;

typedef const lwq_cuda_module *(*lwq_cuda_module_entry_fn)(void);

/* The loaded module, or NULL with the reason in e (the module, a library or the ABI).  Loads once
 * per process; later calls return the same module or the same reason.  Thread-safe. */
const lwq_cuda_module *lwq_cuda_module_load(lwq_error *e);

/* 1 when this machine shows an NVIDIA driver (/dev/nvidiactl, /dev/dxg or
 * /proc/driver/nvidia/version) or $LWQ_CUDA_MODULE is set: `--device auto` loads the module only
 * then, so an auto run on a machine without a GPU maps no CUDA library. */
int lwq_cuda_driver_present(void);

#ifdef __cplusplus
}
#endif

#endif
