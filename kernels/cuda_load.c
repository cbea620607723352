/* kernels/cuda_load.c — finds, loads and checks the CUDA module (kernels/cuda_module.h) and puts
 * the public CUDA entry points of backend.h, quant_ops.h and gptq.h on top of it.  Built only
 * with CUDA; a build without it has the "built without CUDA" versions (kernels/backend.c,
 * kernels/cpu/quant/quant_ops_cpu.c and the #else below). */
#include "kernels/cuda_module.h"

#ifdef LWQ_HAVE_CUDA
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/data/dtype.h"
#include "core/sys/log.h"
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

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#define HOST_MACHINE_NAME "x86-64"
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#define HOST_MACHINE_NAME "AArch64"
#endif

/* [off, off + n) lies within a file of `size` bytes (no overflow). */
static int within(uint64_t off, uint64_t n, uint64_t size) { return off <= size && n <= size - off; }

static int bad(lwq_error *e, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(lwq_error *e, const char *path, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return lwq_errf(e, LWQ_EDEVICE, "cuda: cannot load the CUDA module %s: %s", path, why);
}

/* The module file checked before dlopen maps it: the dynamic loader maps every PT_LOAD segment
 * and touches it (relocations), so a truncated file (a partial copy or install) would kill lwq
 * with SIGBUS inside dlopen instead of an error.  Checked: a regular file, an ELF header of a
 * 64-bit little-endian shared object for this machine, and the program headers, the section
 * headers and every PT_LOAD segment's file bytes within the file.  (A file that changes between
 * this check and dlopen is not covered: the module is lwq's own install, not an input.) */
static int check_elf(const char *path, lwq_error *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return bad(e, path, "%s", strerror(errno));
    struct stat st;
    Elf64_Ehdr h;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = bad(e, path, "%s", strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = bad(e, path, "not a regular file");
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        rc = bad(e, path, "%llu bytes, too short for an ELF header (a partial copy?)", (unsigned long long)size);
        goto out;
    }
    if (memcmp(h.e_ident, ELFMAG, SELFMAG)) {
        rc = bad(e, path, "not an ELF file (no ELF magic)");
        goto out;
    }
    if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB) {
        rc = bad(e, path, "not a 64-bit little-endian ELF file (class %d, data %d)", h.e_ident[EI_CLASS], h.e_ident[EI_DATA]);
        goto out;
    }
    if (h.e_type != ET_DYN) {
        rc = bad(e, path, "ELF type %u, not a shared object", (unsigned)h.e_type);
        goto out;
    }
#ifdef HOST_MACHINE
    if (h.e_machine != HOST_MACHINE) {
        rc = bad(e, path, "built for ELF machine %u, this is " HOST_MACHINE_NAME " (%u)", (unsigned)h.e_machine,
                 (unsigned)HOST_MACHINE);
        goto out;
    }
#endif
    if (h.e_phnum == 0 || h.e_phnum == PN_XNUM || h.e_phentsize != sizeof(Elf64_Phdr) ||
        !within(h.e_phoff, (uint64_t)h.e_phnum * sizeof(Elf64_Phdr), size)) {
        rc = bad(e, path, "its %u program headers (at byte %llu) are not within its %llu bytes (truncated?)",
                 (unsigned)h.e_phnum, (unsigned long long)h.e_phoff, (unsigned long long)size);
        goto out;
    }
    if (h.e_shoff != 0 && (h.e_shentsize != sizeof(Elf64_Shdr) ||
                           !within(h.e_shoff, (uint64_t)(h.e_shnum ? h.e_shnum : 1) * sizeof(Elf64_Shdr), size))) {
        rc = bad(e, path, "its section headers (%u at byte %llu) are not within its %llu bytes (truncated?)",
                 (unsigned)h.e_shnum, (unsigned long long)h.e_shoff, (unsigned long long)size);
        goto out;
    }
    Elf64_Phdr ph[64];
    for (unsigned i = 0; i < h.e_phnum && rc == 0; i += 64) {
        unsigned n = h.e_phnum - i < 64 ? h.e_phnum - i : 64;
        size_t len = n * sizeof(Elf64_Phdr);
        if (pread(fd, ph, len, (off_t)(h.e_phoff + i * sizeof(Elf64_Phdr))) != (ssize_t)len) {
            rc = bad(e, path, "cannot read its program headers: %s", strerror(errno));
            break;
        }
        for (unsigned k = 0; k < n; k++)
            if ((ph[k].p_type == PT_LOAD || ph[k].p_type == PT_DYNAMIC) &&
                !within(ph[k].p_offset, ph[k].p_filesz, size)) {
                rc = bad(e, path, "its program header %u (%s) needs bytes %llu to %llu, the file has %llu (truncated: a "
                         "partial copy or install?)", i + k, ph[k].p_type == PT_LOAD ? "PT_LOAD" : "PT_DYNAMIC",
                         (unsigned long long)ph[k].p_offset, (unsigned long long)(ph[k].p_offset + ph[k].p_filesz),
                         (unsigned long long)size);
                break;
            }
    }
out:
    close(fd);
    return rc;
}

static int try_open(const char *path, lwq_error *e)
{
    int crc = check_elf(path, e);
    if (crc < 0)
        return crc;
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

int lwq_backend_cuda_auto(lwq_error *e)
{
    const char *env = getenv("LWQ_CUDA_MODULE");
    if (env && *env && !lwq_cuda_module_load(e))
        return e && e->code ? e->code : LWQ_EDEVICE;
    return lwq_backend_cuda_device_count() > 0;
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
