/* kernels/cuda/module_cuda.c — the CUDA module's one exported symbol (kernels/cuda_module.h): the
 * table of the backend, the quantizers and GPTQ, with the sizes the loader checks. */
#include <cuda_runtime_api.h>

#include "kernels/cuda/module_cuda.h"
#include "kernels/cuda_module.h"

__attribute__((visibility("default"))) const lwq_cuda_module *lwq_cuda_module_entry(void);

const lwq_cuda_module *lwq_cuda_module_entry(void)
{
    static lwq_cuda_module m;
    m.abi = LWQ_CUDA_MODULE_ABI;
    m.size_error = sizeof(lwq_error);
    m.size_tensor = sizeof(lwq_tensor);
    m.size_backend_ops = sizeof(lwq_backend_ops);
    m.size_quant_ops = sizeof(lwq_quant_ops);
    m.size_gptq_ops = sizeof(lwq_gptq_ops);
    m.version = LWQ_VERSION;
    m.cudart_version = CUDART_VERSION;
    m.probe = lwq_cuda_probe;
    m.backend_create = lwq_cuda_backend_create;
    m.quant = lwq_cuda_quant_table();
    m.gptq = lwq_cuda_gptq_table();
    m.mem_peak = lwq_cuda_mem_peak;
    return &m;
}
