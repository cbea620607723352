/* kernels/cuda_load.c — finds, loads and checks the CUDA module (kernels/cuda_module.h) and puts
 * the public CUDA entry points of backend.h, quant_ops.h and gptq.h on top of it.  Built only
 * with CUDA; a build without it has the "built without CUDA" versions (kernels/backend.c,
 * kernels/cpu/quant_ops_cpu.c and the #else below). */
#include "kernels/cuda_module.h"

#ifdef LWQ_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/log.h"
#include "kernels/quant.h"
#include "kernels/quant_check.h"

#ifndef LWQ_CUDA_MODULE_DIR
#define LWQ_CUDA_MODULE_DIR "/usr/local/lib/lwq"
#endif

/* The host functions the module calls (its undefined lwq_* symbols), referenced here so that a
 * program linking lwq statically always contains them for the module to resolve.  ctest
 * cuda_module_symbols fails when the module needs one that is missing from this list. */
__attribute__((used)) static const void *const host_exports[] = {
    (const void *)lwq_errf,
    (const void *)lwq_log,
    (const void *)lwq_dtype_size,
    (const void *)lwq_gptq_prepare,
    (const void *)lwq_quant_check_shape,
    (const void *)lwq_quant_check_global,
    (const void *)lwq_quant_check_dq,
    (const void *)lwq_quant_err_nonfinite,
    (const void *)lwq_quant_err_over_global,
    (const void *)lwq_quant_mse_argmin,
    (const void *)lwq_quant_name,
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const lwq_cuda_module *g_mod;
static lwq_error g_err;
static char g_path[PATH_MAX];

/* "libcublas.so.13: cannot open shared object file: ..." -> "libcublas.so.13" */
static void missing_library(const char *why, char *out, size_t cap)
{
    const char *end = strstr(why, ": cannot open shared object file");
    out[0] = 0;
    if (!end)
        return;
    const char *start = end;
    while (start > why && start[-1] != ' ' && start[-1] != ':')
        start--;
    size_t n = (size_t)(end - start) < cap - 1 ? (size_t)(end - start) : cap - 1;
    memcpy(out, start, n);
    out[n] = 0;
}

static int try_open(const char *path, lwq_error *e)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        char lib[256];
        missing_library(why ? why : "", lib, sizeof lib);
        if (lib[0] && !strstr(lib, LWQ_CUDA_MODULE_FILE))
            return lwq_errf(e, LWQ_EDEVICE, "cuda: the CUDA module %s needs %s, which the dynamic loader cannot "
                            "find: install the CUDA libraries it was built with or add their directory to "
                            "LD_LIBRARY_PATH (%s)", path, lib, why);
        if (why && strstr(why, "undefined symbol"))
            return lwq_errf(e, LWQ_EDEVICE, "cuda: the CUDA module %s does not match this lwq (%s): use the "
                            "module built with this binary", path, why);
        return lwq_errf(e, LWQ_EDEVICE, "cuda: cannot load the CUDA module %s: %s", path, why ? why : "?");
    }
    lwq_cuda_module_entry_fn entry;
    void *sym = dlsym(h, LWQ_CUDA_MODULE_ENTRY);
    memcpy(&entry, &sym, sizeof entry); /* ISO C has no object-to-function pointer cast */
    const lwq_cuda_module *m = entry ? entry() : NULL;
    int rc = 0;
    if (!m)
        rc = lwq_errf(e, LWQ_EDEVICE, "cuda: %s is not an lwq CUDA module (no %s)", path, LWQ_CUDA_MODULE_ENTRY);
    else if (m->abi != LWQ_CUDA_MODULE_ABI || m->size_error != sizeof(lwq_error) ||
             m->size_tensor != sizeof(lwq_tensor) || m->size_backend_ops != sizeof(lwq_backend_ops) ||
             m->size_quant_ops != sizeof(lwq_quant_ops) || m->size_gptq_ops != sizeof(lwq_gptq_ops) ||
             strcmp(m->version ? m->version : "", LWQ_VERSION))
        rc = lwq_errf(e, LWQ_EDEVICE, "cuda: the CUDA module %s was built for lwq %s (module ABI %u), this is lwq "
                      "%s (ABI %d): use the module built with this binary", path, m->version ? m->version : "?",
                      m->abi, LWQ_VERSION, LWQ_CUDA_MODULE_ABI);
    if (rc < 0) {
        dlclose(h);
        return rc;
    }
    /* never closed: its kernels stay registered with the runtime until exit */
    __atomic_store_n(&g_mod, m, __ATOMIC_RELEASE);
    return 0;
}

static int exe_dir(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0)
        return -1;
    out[n] = 0;
    char *slash = strrchr(out, '/');
    if (!slash)
        return -1;
    *slash = 0;
    return 0;
}

static void load_once(void)
{
    const char *env = getenv("LWQ_CUDA_MODULE");
    struct stat sb;
    if (env && *env) {
        snprintf(g_path, sizeof g_path, "%s", env);
        if (stat(env, &sb) != 0)
            lwq_errf(&g_err, LWQ_EDEVICE, "cuda: the CUDA module %s (LWQ_CUDA_MODULE) does not exist", env);
        else
            try_open(env, &g_err);
        return;
    }
    char dir[PATH_MAX], cand[3][PATH_MAX + 64];
    int n = 0;
    if (exe_dir(dir, sizeof dir) == 0) {
        snprintf(cand[n++], sizeof cand[0], "%s/%s", dir, LWQ_CUDA_MODULE_FILE);
        snprintf(cand[n++], sizeof cand[0], "%s/../lib/lwq/%s", dir, LWQ_CUDA_MODULE_FILE);
    }
    snprintf(cand[n++], sizeof cand[0], "%s/%s", LWQ_CUDA_MODULE_DIR, LWQ_CUDA_MODULE_FILE);
    for (int i = 0; i < n; i++)
        if (stat(cand[i], &sb) == 0) {
            snprintf(g_path, sizeof g_path, "%s", cand[i]);
            try_open(cand[i], &g_err);
            return;
        }
    lwq_errf(&g_err, LWQ_EDEVICE, "cuda: the CUDA module %s is missing: not in %s, %s%s%s (it is built next to "
             "the lwq binary; LWQ_CUDA_MODULE=path names it explicitly)", LWQ_CUDA_MODULE_FILE, cand[0],
             n > 1 ? cand[1] : "", n > 2 ? " or " : "", n > 2 ? cand[2] : "");
}

const lwq_cuda_module *lwq_cuda_module_load(lwq_error *e)
{
    pthread_once(&g_once, load_once);
    if (!g_mod)
        lwq_errf(e, g_err.code ? g_err.code : LWQ_EDEVICE, "%s", g_err.msg);
    else
        LWQ_DEBUG("cuda: module %s (lwq %s, CUDA runtime %d.%d)", g_path, g_mod->version,
                  g_mod->cudart_version / 1000, g_mod->cudart_version % 1000 / 10);
    return g_mod;
}

int lwq_cuda_driver_present(void)
{
    const char *env = getenv("LWQ_CUDA_MODULE");
    return (env && *env) || access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0 ||
           access("/proc/driver/nvidia/version", F_OK) == 0;
}

/* ---- the public CUDA entry points (kernels/backend.h, quant_ops.h, gptq.h) ------------------- */

int lwq_backend_cuda_probe(lwq_error *e)
{
    const lwq_cuda_module *m = lwq_cuda_module_load(e);
    return m ? m->probe(e) : LWQ_EDEVICE;
}

int lwq_backend_cuda_device_count(void)
{
    /* without a driver there is no device: say so without mapping any CUDA library */
    if (!lwq_cuda_driver_present())
        return 0;
    int n = lwq_backend_cuda_probe(NULL);
    return n > 0 ? n : 0;
}

int lwq_backend_cuda_create(lwq_backend *be, int device, lwq_error *e)
{
    be->ops = NULL;
    be->ctx = NULL;
    const lwq_cuda_module *m = lwq_cuda_module_load(e);
    return m ? m->backend_create(be, device, e) : LWQ_EDEVICE;
}

const lwq_quant_ops *lwq_quant_cuda_ops(void)
{
    /* only a module already loaded (by a CUDA backend): asking never loads one */
    const lwq_cuda_module *m = __atomic_load_n(&g_mod, __ATOMIC_ACQUIRE);
    return m ? m->quant : NULL;
}

const lwq_gptq_ops *lwq_gptq_cuda_ops(lwq_error *e)
{
    const lwq_cuda_module *m = lwq_cuda_module_load(e);
    return m ? m->gptq : NULL;
}
#else
const lwq_gptq_ops *lwq_gptq_cuda_ops(lwq_error *e)
{
    lwq_errf(e, LWQ_EUNSUPPORTED, "cuda GPTQ: " LWQ_CUDA_NOT_BUILT);
    return NULL;
}

int lwq_cuda_driver_present(void) { return 0; }

const lwq_cuda_module *lwq_cuda_module_load(lwq_error *e)
{
    lwq_errf(e, LWQ_EUNSUPPORTED, "cuda: " LWQ_CUDA_NOT_BUILT);
    return NULL;
}
#endif
