/* tests/io/test_pool.c — pinned pool layout, NUMA node lookup, registration callback. */
#include "tests/helpers/io_testutil.h"

#include "io/pool.h"

static int reg_calls, unreg_calls;
static void *reg_ptr;
static size_t reg_len;

static int fake_register(void *ctx, void *ptr, size_t len, lwq_error *e)
{
    reg_calls++;
    reg_ptr = ptr;
    reg_len = len;
    if (ctx)
        return lwq_errf(e, LWQ_EDEVICE, "cudaHostRegister failed (simulated)");
    return 0;
}

static void fake_unregister(void *ctx, void *ptr, size_t len)
{
    unreg_calls++;
    cr_assert_eq(ptr, reg_ptr);
    cr_assert_eq(len, reg_len);
}

Test(pool, slots_are_aligned_distinct_and_registered)
{
    lwq_pool p;
    lwq_error e = {0};
    lwq_pool_opts o = {.slot_bytes = 100000, .nslots = 3, .numa_node = -1, .reg = fake_register,
                       .unreg = fake_unregister};
    cr_assert_eq(lwq_pool_init(&p, &o, &e), 0, "%s", e.msg);
    cr_assert_eq(p.slot_bytes, 102400, "rounded up to 4 KiB");
    for (int i = 0; i < 3; i++) {
        unsigned char *s = lwq_pool_slot(&p, i);
        cr_assert_eq((uintptr_t)s % 4096, 0);
        cr_assert_eq(s, p.base + (size_t)i * p.slot_bytes);
        memset(s, i + 1, p.slot_bytes);
    }
    cr_assert_null(lwq_pool_slot(&p, 3));
    cr_assert_null(lwq_pool_slot(&p, -1));
    cr_assert_eq(reg_calls, 1);
    cr_assert_eq(reg_ptr, p.base);
    cr_assert_eq(reg_len, 3 * p.slot_bytes);
    lwq_pool_free(&p);
    cr_assert_eq(unreg_calls, 1);
    lwq_pool_free(&p); /* idempotent */
    cr_assert_eq(unreg_calls, 1);
}

Test(pool, failing_registration_fails_init_with_its_message)
{
    lwq_pool p;
    lwq_error e = {0};
    lwq_pool_opts o = {.slot_bytes = 4096, .nslots = 1, .numa_node = -1, .reg = fake_register,
                       .unreg = fake_unregister, .reg_ctx = (void *)1};
    cr_assert_eq(lwq_pool_init(&p, &o, &e), LWQ_EDEVICE);
    cr_assert(strstr(e.msg, "cudaHostRegister"), "%s", e.msg);
    cr_assert_eq(unreg_calls, 0);
    cr_assert_null(p.base);
}

Test(pool, bad_sizes_rejected)
{
    lwq_pool p;
    lwq_error e = {0};
    lwq_pool_opts o = {.slot_bytes = 0, .nslots = 2, .numa_node = -1};
    cr_assert_eq(lwq_pool_init(&p, &o, &e), LWQ_EINVAL);
    lwq_error_clear(&e);
    o = (lwq_pool_opts){.slot_bytes = SIZE_MAX / 4, .nslots = 8, .numa_node = -1};
    cr_assert_eq(lwq_pool_init(&p, &o, &e), LWQ_ENOMEM);
    cr_assert(strstr(e.msg, "overflow"), "%s", e.msg);
}

static void write_node(const char *root, const char *id, const char *content)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/bus/pci/devices/%s' && printf '%%s' '%s' > '%s/bus/pci/devices/%s/numa_node'",
             root, id, content, root, id);
    cr_assert_eq(system(cmd), 0);
}

Test(pool, pci_numa_node_from_sysfs)
{
    char root[64];
    tu_tmpdir(root, sizeof root);
    write_node(root, "0000:17:00.0", "1\n");
    write_node(root, "0000:65:00.0", "-1\n");
    write_node(root, "0000:99:00.0", "garbage");
    lwq_error e = {0};
    cr_assert_eq(lwq_pool_pci_numa_node(root, "0000:17:00.0", &e), 1);
    cr_assert_eq(lwq_pool_pci_numa_node(root, "0000:65:00.0", &e), -1);
    cr_assert_eq(lwq_pool_pci_numa_node(root, "0000:99:00.0", &e), LWQ_EFORMAT);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_pool_pci_numa_node(root, "0000:01:00.0", &e), LWQ_ENOENT);
    cr_assert(strstr(e.msg, "0000:01:00.0"), "%s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_pool_pci_numa_node(root, "../../../etc/passwd", &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "bad PCI bus id"), "%s", e.msg);
    tu_rmrf(root);
}

Test(pool, unknown_gpu_falls_back_to_a_local_node)
{
    char root[64];
    tu_tmpdir(root, sizeof root);
    lwq_pool p;
    lwq_error e = {0};
    lwq_pool_opts o = {.slot_bytes = 8192, .nslots = 2, .numa_node = -1,
                       .pci_bus_id = "0000:aa:00.0", .sysfs_root = root};
    cr_assert_eq(lwq_pool_init(&p, &o, &e), 0, "%s", e.msg);
    cr_assert_geq(p.node, -1);
    memset(p.base, 1, 2 * p.slot_bytes);
    lwq_pool_free(&p);
    tu_rmrf(root);
}
