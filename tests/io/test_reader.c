/* tests/io/test_reader.c — plans, byte-exact reads in every mode, and injected read faults. */
#include "tests/helpers/io_testutil.h"

#include "io/pool.h"
#include "io/reader.h"
#include "io/sys.h"

typedef enum { M_URING_DIRECT_REG, M_URING_DIRECT, M_URING_BUFFERED, M_PREAD, M_PREAD_DIRECT,
               M_COUNT } mode;
static const char *mode_name[] = {"uring-direct-reg", "uring-direct", "uring-buffered", "pread",
                                  "pread-direct"};

static lwq_io_reader_opts opts_for(mode m)
{
    lwq_io_reader_opts o;
    lwq_io_reader_opts_default(&o);
    o.use_uring = m <= M_URING_BUFFERED;
    o.direct = m != M_URING_BUFFERED && m != M_PREAD;
    o.register_buffers = m == M_URING_DIRECT_REG;
    o.register_files = m == M_URING_DIRECT_REG;
    o.queue_depth = 8;
    o.block_bytes = 64 << 10; /* small requests: many in flight, many boundaries */
    o.pread_threads = 3;
    return o;
}

typedef struct {
    char dir[64];
    char path[2][128];
    uint64_t size[2];
    lwq_pool pool;
    lwq_io_reader *rd;
} fixture;

static void setup_files(fixture *f)
{
    memset(f, 0, sizeof *f);
    tu_tmpdir(f->dir, sizeof f->dir);
    f->size[0] = (3u << 20) + 1234; /* not a multiple of 4 KiB: tail reads hit EOF */
    f->size[1] = 700000;
    for (int i = 0; i < 2; i++) {
        snprintf(f->path[i], sizeof f->path[i], "%s/shard-%d.bin", f->dir, i);
        tu_write_pattern(f->path[i], f->size[i], 100 + (uint64_t)i);
    }
}

static void open_reader(fixture *f, mode m, size_t pool_bytes)
{
    lwq_io_reader_opts o = opts_for(m);
    lwq_error e = {0};
    cr_assert_eq(lwq_io_reader_init(&f->rd, &o, &e), 0, "%s", e.msg);
    if (m <= M_URING_BUFFERED && !lwq_io_reader_uses_uring(f->rd))
        cr_skip("io_uring is not available on this kernel: %s path not covered", mode_name[m]);
    lwq_pool_opts po = {.slot_bytes = pool_bytes, .nslots = 1, .numa_node = -1};
    cr_assert_eq(lwq_pool_init(&f->pool, &po, &e), 0, "%s", e.msg);
    int reg = lwq_io_reader_register(f->rd, f->pool.base, f->pool.slot_bytes, &e);
    cr_assert_geq(reg, 0, "%s", e.msg);
    if (m == M_URING_DIRECT_REG)
        cr_assert_eq(reg, 1, "registration refused: %s", lwq_io_reader_describe(f->rd));
}

static void teardown(fixture *f)
{
    lwq_io_reader_free(f->rd);
    lwq_pool_free(&f->pool);
    lwq_sys_fault_clear();
    tu_rmrf(f->dir);
}

static void check_ranges(fixture *f, const lwq_io_range *r, size_t n)
{
    const uint8_t *buf = f->pool.base;
    for (size_t i = 0; i < n; i++) {
        int which = r[i].path == f->path[0] ? 0 : 1;
        for (uint64_t k = 0; k < r[i].length; k++)
            if (buf[r[i].dst + k] != tu_byte(100 + (uint64_t)which, r[i].offset + k))
                cr_assert_fail("range %zu (%s @%llu +%llu): byte %llu differs", i, r[i].path,
                         (unsigned long long)r[i].offset, (unsigned long long)r[i].length,
                         (unsigned long long)k);
    }
}

/* The reference: every range read again with plain pread must equal what the reader placed. */
static void check_against_pread(fixture *f, const lwq_io_range *r, size_t n)
{
    const uint8_t *buf = f->pool.base;
    for (size_t i = 0; i < n; i++) {
        int fd = open(r[i].path, O_RDONLY);
        cr_assert_geq(fd, 0);
        uint8_t *ref = malloc(r[i].length + 1);
        cr_assert_eq(pread(fd, ref, r[i].length, (off_t)r[i].offset), (ssize_t)r[i].length);
        cr_assert_eq(memcmp(ref, buf + r[i].dst, r[i].length), 0, "range %zu differs from pread", i);
        free(ref);
        close(fd);
    }
    check_ranges(f, r, n);
}

static size_t random_ranges(fixture *f, lwq_io_range *r, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        int which = (int)(tu_rand(&s) % 2);
        uint64_t size = f->size[which];
        uint64_t len = tu_rand(&s) % 3 == 0 ? tu_rand(&s) % 300000 : tu_rand(&s) % 5000;
        if (len > size)
            len = size;
        uint64_t off = tu_rand(&s) % 4 == 0 ? size - len : tu_rand(&s) % (size - len + 1);
        r[i] = (lwq_io_range){f->path[which], off, len, 0};
    }
    return n;
}

static void random_reads(mode m)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, m, 64u << 20);
    lwq_error e = {0};
    for (uint64_t round = 1; round <= 4; round++) {
        lwq_io_range r[60];
        size_t n = random_ranges(&f, r, 60, round * 7919);
        lwq_io_plan p;
        /* round 1 never merges; later rounds merge across gaps up to 256 KiB */
        cr_assert_eq(lwq_io_plan_build(&p, r, n, round == 1 ? 0 : 256 << 10, &e), 0, "%s", e.msg);
        cr_assert_leq(p.bytes, f.pool.slot_bytes);
        memset(f.pool.base, 0xEE, p.bytes);
        int rc = lwq_io_reader_read(f.rd, &p, f.pool.base, f.pool.slot_bytes, NULL, &e);
        cr_assert_eq(rc, 0, "%s: %s", mode_name[m], e.msg);
        check_against_pread(&f, r, n);
        lwq_io_plan_free(&p);
    }
    teardown(&f);
}

Test(reader, random_ranges_uring_direct_registered) { random_reads(M_URING_DIRECT_REG); }
Test(reader, random_ranges_uring_direct) { random_reads(M_URING_DIRECT); }
Test(reader, random_ranges_uring_buffered) { random_reads(M_URING_BUFFERED); }
Test(reader, random_ranges_pread_pool) { random_reads(M_PREAD); }
Test(reader, random_ranges_pread_pool_direct) { random_reads(M_PREAD_DIRECT); }

Test(plan, merges_small_gaps_and_aligns)
{
    lwq_io_range r[4] = {
        {"a", 10000, 100, 0},   /* same 4 KiB page region as the next */
        {"a", 10200, 50, 0},
        {"b", 0, 4096, 0},
        {"a", 1 << 20, 10, 0},  /* far away: own extent unless the gap is huge */
    };
    lwq_io_plan p;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_plan_build(&p, r, 4, 4096, &e), 0, "%s", e.msg);
    cr_assert_eq(p.nfiles, 2);
    cr_assert_eq(p.next, 3);
    cr_assert_eq(p.ext[0].file_off, 8192);
    cr_assert_eq(p.ext[0].len, 4096);
    cr_assert_eq(p.ext[0].need_end, 10250);
    cr_assert_eq(r[0].dst, 10000 - 8192);
    cr_assert_eq(r[1].dst, 10200 - 8192);
    cr_assert_eq(p.ext[1].file_off, 1 << 20);
    cr_assert_eq(r[3].dst, 4096);
    cr_assert_eq(r[2].dst, 8192);
    cr_assert_eq(p.bytes, 3 * 4096);
    cr_assert_eq(p.payload, 100 + 50 + 4096 + 10);
    lwq_io_plan_free(&p);
    cr_assert_eq(lwq_io_plan_build(&p, r, 4, 1 << 20, &e), 0, "%s", e.msg);
    cr_assert_eq(p.next, 2, "a 1 MiB gap merges the two 'a' extents");
    lwq_io_plan_free(&p);
}

Test(plan, rejects_overflow_and_missing_path)
{
    lwq_io_range r = {"a", UINT64_MAX - 10, 100, 0};
    lwq_io_plan p;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_plan_build(&p, &r, 1, 0, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "overflows") && strstr(e.msg, "a: "), "%s", e.msg);
    lwq_error_clear(&e);
    r = (lwq_io_range){"", 0, 1, 0};
    cr_assert_eq(lwq_io_plan_build(&p, &r, 1, 0, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "no file path"), "%s", e.msg);
}

Test(reader, range_past_end_of_file_names_file_and_size)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, M_PREAD, 8u << 20);
    lwq_io_range r = {f.path[1], f.size[1] - 10, 11, 0};
    lwq_io_plan p;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_plan_build(&p, &r, 1, 0, &e), 0);
    cr_assert_eq(lwq_io_reader_read(f.rd, &p, f.pool.base, f.pool.slot_bytes, NULL, &e),
                 LWQ_EFORMAT);
    cr_assert(strstr(e.msg, f.path[1]) && strstr(e.msg, "700000 bytes"), "%s", e.msg);
    lwq_io_plan_free(&p);
    teardown(&f);
}

Test(reader, missing_file_is_named)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, M_PREAD, 1u << 20);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/nope.bin", f.dir);
    lwq_io_range r = {missing, 0, 1, 0};
    lwq_io_plan p;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_plan_build(&p, &r, 1, 0, &e), 0);
    cr_assert_eq(lwq_io_reader_read(f.rd, &p, f.pool.base, f.pool.slot_bytes, NULL, &e),
                 LWQ_ENOENT);
    cr_assert(strstr(e.msg, missing), "%s", e.msg);
    lwq_io_plan_free(&p);
    teardown(&f);
}

Test(reader, small_or_unaligned_buffer_rejected)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, M_PREAD, 1u << 20);
    lwq_io_range r = {f.path[0], 0, 8192, 0};
    lwq_io_plan p;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_plan_build(&p, &r, 1, 0, &e), 0);
    cr_assert_eq(lwq_io_reader_read(f.rd, &p, f.pool.base + 1, 1 << 20, NULL, &e), LWQ_EINVAL);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_io_reader_read(f.rd, &p, f.pool.base, 4096, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "8192 bytes"), "%s", e.msg);
    lwq_io_plan_free(&p);
    teardown(&f);
}

/* ---- injected faults ------------------------------------------------------------------------ */

static int read_whole(fixture *f, lwq_io_range *r, lwq_error *e)
{
    lwq_io_plan p;
    cr_assert_eq(lwq_io_plan_build(&p, r, 1, 0, e), 0);
    int rc = lwq_io_reader_read(f->rd, &p, f->pool.base, f->pool.slot_bytes, NULL, e);
    lwq_io_plan_free(&p);
    return rc;
}

static void fault_eio(mode m)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, m, 8u << 20);
    lwq_sys_fault ft = {.op = LWQ_SYS_OP_READ, .nth = 3, .times = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&ft), 0);
    lwq_io_range r = {f.path[0], 0, f.size[0], 0};
    lwq_error e = {0};
    cr_assert_eq(read_whole(&f, &r, &e), LWQ_EIO, "%s", e.msg);
    cr_assert(strstr(e.msg, f.path[0]) && strstr(e.msg, "at offset") &&
              strstr(e.msg, "Input/output error"), "%s", e.msg);
    cr_assert_eq(lwq_sys_faults_fired(), 1);
    /* a read error is not sticky for the reader: the next job reads fine */
    lwq_error_clear(&e);
    cr_assert_eq(read_whole(&f, &r, &e), 0, "%s", e.msg);
    check_ranges(&f, &r, 1);
    teardown(&f);
}

Test(reader_fault, eio_uring) { fault_eio(M_URING_DIRECT_REG); }
Test(reader_fault, eio_pread) { fault_eio(M_PREAD); }

static void fault_short_and_eintr(mode m, int err, int short_io)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, m, 8u << 20);
    lwq_sys_fault ft = {.op = LWQ_SYS_OP_READ, .nth = 2, .times = 6, .err = err,
                        .short_io = short_io};
    cr_assert_eq(lwq_sys_fault_add(&ft), 0);
    lwq_io_range r = {f.path[0], 5, f.size[0] - 5, 0};
    lwq_error e = {0};
    cr_assert_eq(read_whole(&f, &r, &e), 0, "%s: %s", mode_name[m], e.msg);
    cr_assert_eq(lwq_sys_faults_fired(), 6);
    cr_assert_geq(lwq_io_reader_retries(f.rd), 6);
    check_against_pread(&f, &r, 1);
    teardown(&f);
}

Test(reader_fault, short_reads_uring_direct) { fault_short_and_eintr(M_URING_DIRECT_REG, 0, 1); }
Test(reader_fault, short_reads_uring_buffered) { fault_short_and_eintr(M_URING_BUFFERED, 0, 1); }
Test(reader_fault, short_reads_pread) { fault_short_and_eintr(M_PREAD, 0, 1); }
Test(reader_fault, eintr_uring) { fault_short_and_eintr(M_URING_DIRECT, EINTR, 0); }
Test(reader_fault, eintr_pread) { fault_short_and_eintr(M_PREAD_DIRECT, EINTR, 0); }

Test(reader_fault, endless_eintr_gives_up_with_error)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, M_PREAD, 8u << 20);
    lwq_sys_fault ft = {.op = LWQ_SYS_OP_READ, .nth = 1, .times = 0, .err = EINTR};
    cr_assert_eq(lwq_sys_fault_add(&ft), 0);
    lwq_io_range r = {f.path[1], 0, 100, 0};
    lwq_error e = {0};
    cr_assert_eq(read_whole(&f, &r, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "interrupted") && strstr(e.msg, f.path[1]), "%s", e.msg);
    teardown(&f);
}

Test(reader_fault, submit_failure_is_sticky)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, M_URING_DIRECT, 8u << 20);
    lwq_sys_fault ft = {.op = LWQ_SYS_OP_SUBMIT, .nth = 2, .times = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&ft), 0);
    lwq_io_range r = {f.path[0], 0, f.size[0], 0};
    lwq_error e = {0};
    cr_assert_eq(read_whole(&f, &r, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "io_uring submit") && strstr(e.msg, f.path[0]), "%s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(read_whole(&f, &r, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "unusable after an earlier failure"), "%s", e.msg);
    teardown(&f);
}

Test(reader, cancel_stops_the_read)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, M_URING_DIRECT, 8u << 20);
    atomic_int cancel = 1;
    lwq_io_range r = {f.path[0], 0, f.size[0], 0};
    lwq_io_plan p;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_plan_build(&p, &r, 1, 0, &e), 0);
    cr_assert_eq(lwq_io_reader_read(f.rd, &p, f.pool.base, f.pool.slot_bytes, &cancel, &e),
                 LWQ_ECANCELED);
    lwq_io_plan_free(&p);
    teardown(&f);
}

Test(reader, odirect_refused_falls_back_to_buffered)
{
    fixture f;
    setup_files(&f);
    open_reader(&f, M_URING_DIRECT, 8u << 20);
    /* the first open (with O_DIRECT) fails as on a filesystem without direct I/O */
    lwq_sys_fault ft = {.op = LWQ_SYS_OP_OPEN, .nth = 1, .times = 1, .err = EINVAL};
    cr_assert_eq(lwq_sys_fault_add(&ft), 0);
    lwq_io_range r = {f.path[0], 77, 1 << 20, 0};
    lwq_error e = {0};
    cr_assert_eq(read_whole(&f, &r, &e), 0, "%s", e.msg);
    cr_assert(strstr(lwq_io_reader_describe(f.rd), "O_DIRECT refused"), "%s",
              lwq_io_reader_describe(f.rd));
    check_against_pread(&f, &r, 1);
    teardown(&f);
}

Test(reader, env_disables_uring)
{
    setenv("LWQ_IO_URING", "0", 1);
    lwq_io_reader_opts o;
    lwq_io_reader_opts_default(&o);
    unsetenv("LWQ_IO_URING");
    cr_assert_eq(o.use_uring, 0);
    lwq_io_reader *rd;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_reader_init(&rd, &o, &e), 0);
    cr_assert_eq(lwq_io_reader_uses_uring(rd), 0);
    cr_assert(strstr(lwq_io_reader_describe(rd), "pread pool"));
    lwq_io_reader_free(rd);
}

Test(reader, bad_options_rejected)
{
    lwq_io_reader_opts o;
    lwq_io_reader_opts_default(&o);
    o.block_bytes = 5000;
    lwq_io_reader *rd;
    lwq_error e = {0};
    cr_assert_eq(lwq_io_reader_init(&rd, &o, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "block 5000"), "%s", e.msg);
}
