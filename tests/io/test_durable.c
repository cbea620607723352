/* tests/io/test_durable.c — durable writes under injected faults and simulated crashes. */
#include "tests/helpers/io_testutil.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/durable.h"
#include "io/sys.h"

static char dir[64];
static char path[160], tmp[170];

static void setup(void)
{
    tu_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model-layer-00001.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
}

static void teardown(void)
{
    lwq_sys_fault_clear();
    tu_rmrf(dir);
}

static int file_equals(const char *p, const char *want, size_t n)
{
    char *got;
    size_t len;
    lwq_error e = {0};
    if (lwq_durable_read_file(p, 1 << 20, &got, &len, &e) < 0)
        return 0;
    int eq = len == n && memcmp(got, want, n) == 0;
    free(got);
    return eq;
}

TestSuite(durable, .init = setup, .fini = teardown);

Test(durable, write_file_replaces_atomically)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "first", 5, &e), 0, "%s", e.msg);
    cr_assert(file_equals(path, "first", 5));
    cr_assert_eq(lwq_durable_write_file(path, "second!", 7, &e), 0, "%s", e.msg);
    cr_assert(file_equals(path, "second!", 7));
    cr_assert_not(tu_exists(tmp), "no temp file is left behind");
}

Test(durable, enospc_leaves_no_final_file)
{
    lwq_sys_fault f = {.op = LWQ_SYS_OP_WRITE, .nth = 1, .times = 1, .err = ENOSPC};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "data", 4, &e), LWQ_ENOSPC);
    cr_assert(strstr(e.msg, tmp) && strstr(e.msg, "No space left on device"), "%s", e.msg);
    cr_assert_not(tu_exists(path));
    cr_assert_not(tu_exists(tmp));
}

Test(durable, eio_on_fsync_keeps_old_version)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "old", 3, &e), 0);
    lwq_sys_fault f = {.op = LWQ_SYS_OP_FSYNC, .nth = 1, .times = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    cr_assert_eq(lwq_durable_write_file(path, "new!", 4, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "fsync") && strstr(e.msg, tmp), "%s", e.msg);
    cr_assert(file_equals(path, "old", 3), "the committed version is untouched");
    cr_assert_not(tu_exists(tmp));
}

Test(durable, eio_on_rename_names_both_paths)
{
    lwq_sys_fault f = {.op = LWQ_SYS_OP_RENAME, .nth = 1, .times = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "x", 1, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "rename") && strstr(e.msg, path), "%s", e.msg);
    cr_assert_not(tu_exists(path));
    cr_assert_not(tu_exists(tmp));
}

Test(durable, failed_directory_fsync_removes_final_name)
{
    /* the second fsync is the directory's, after the rename */
    lwq_sys_fault f = {.op = LWQ_SYS_OP_FSYNC, .nth = 2, .times = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "x", 1, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "fsync directory") && strstr(e.msg, dir), "%s", e.msg);
    cr_assert_not(tu_exists(path));
}

Test(durable, short_writes_and_eintr_are_retried)
{
    char data[10000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 7);
    lwq_sys_fault s = {.op = LWQ_SYS_OP_WRITE, .nth = 1, .times = 4, .short_io = 1};
    lwq_sys_fault i = {.op = LWQ_SYS_OP_WRITE, .nth = 5, .times = 2, .err = EINTR};
    lwq_sys_fault y = {.op = LWQ_SYS_OP_FSYNC, .nth = 1, .times = 1, .err = EINTR};
    cr_assert_eq(lwq_sys_fault_add(&s), 0);
    cr_assert_eq(lwq_sys_fault_add(&i), 0);
    cr_assert_eq(lwq_sys_fault_add(&y), 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, data, sizeof data, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_sys_faults_fired(), 7);
    cr_assert(file_equals(path, data, sizeof data));
}

Test(durable, crash_between_tmp_write_and_rename)
{
    /* steps: 1 create tmp, 2 pwrite, 3 fsync tmp, 4 rename, 5 fsync dir */
    lwq_sys_crash_at(3, LWQ_SYS_CRASH_FAIL);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "payload", 7, &e), LWQ_EIO);
    cr_assert(lwq_sys_crashed());
    cr_assert(strstr(e.msg, "rename"), "%s", e.msg);
    cr_assert_not(tu_exists(path), "no final file after a crash before the rename");
    cr_assert(file_equals(tmp, "payload", 7), "the synced temp file is what the crash leaves");
    /* the next attempt truncates the stale temp file and succeeds */
    lwq_sys_fault_clear();
    lwq_error_clear(&e);
    cr_assert_eq(lwq_durable_write_file(path, "v2", 2, &e), 0, "%s", e.msg);
    cr_assert(file_equals(path, "v2", 2));
    cr_assert_not(tu_exists(tmp));
}

Test(durable, crash_at_every_step_never_exposes_partial_data)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "version-1", 9, &e), 0);
    lwq_sys_fault_clear();
    lwq_sys_crash_at(1000, LWQ_SYS_CRASH_FAIL); /* count the steps of one write */
    cr_assert_eq(lwq_durable_write_file(path, "version-2!", 10, &e), 0);
    long total = lwq_sys_steps();
    cr_assert_eq(total, 5);
    for (long k = 0; k <= total; k++) {
        lwq_sys_fault_clear();
        cr_assert_eq(lwq_durable_write_file(path, "version-1", 9, &e), 0);
        lwq_sys_fault_clear();
        lwq_sys_crash_at(k, LWQ_SYS_CRASH_FAIL);
        lwq_error_clear(&e);
        int rc = lwq_durable_write_file(path, "version-2!", 10, &e);
        cr_assert_eq(rc == 0, k == total, "k=%ld rc=%d %s", k, rc, e.msg);
        int v1 = file_equals(path, "version-1", 9), v2 = file_equals(path, "version-2!", 10);
        cr_assert(v1 || v2, "k=%ld: final file is neither version", k);
        cr_assert_eq(v2, k >= 4, "k=%ld: new version visible only once renamed", k);
        lwq_sys_fault_clear();
        unlink(tmp);
    }
}

static int append_pieces(lwq_durable_file *f, lwq_error *e)
{
    for (int i = 0; i < 4; i++) {
        int rc = lwq_durable_append(f, "abcd", 4, e);
        if (rc < 0)
            return rc;
    }
    return lwq_durable_pwrite(f, "HEAD", 4, 0, e);
}

Test(durable, streaming_open_append_commit)
{
    lwq_durable_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_open(&f, path, &e), 0);
    cr_assert_eq(append_pieces(&f, &e), 0, "%s", e.msg);
    cr_assert_not(tu_exists(path), "not visible before commit");
    cr_assert_eq(lwq_durable_commit(&f, &e), 0, "%s", e.msg);
    cr_assert(file_equals(path, "HEADabcdabcdabcd", 16));
}

Test(durable, pwrite_past_written_bytes_rejected)
{
    lwq_durable_file f;
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_open(&f, path, &e), 0);
    cr_assert_eq(lwq_durable_append(&f, "ab", 2, &e), 0);
    cr_assert_eq(lwq_durable_pwrite(&f, "xyz", 3, 0, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, "past the 2 written"), "%s", e.msg);
    lwq_durable_abort(&f);
    cr_assert_not(tu_exists(tmp));
}

Test(durable, read_file_limits_size_and_names_missing_file)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "0123456789", 10, &e), 0);
    char *buf;
    size_t len;
    cr_assert_eq(lwq_durable_read_file(path, 9, &buf, &len, &e), LWQ_EFORMAT);
    cr_assert(strstr(e.msg, "10 bytes") && strstr(e.msg, "9 allowed"), "%s", e.msg);
    lwq_error_clear(&e);
    cr_assert_eq(lwq_durable_read_file(tmp, 100, &buf, &len, &e), LWQ_ENOENT);
    cr_assert(strstr(e.msg, tmp), "%s", e.msg);
}

Test(durable, unlink_and_rename_are_durable_and_tolerate_missing)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "a", 1, &e), 0);
    char other[200];
    snprintf(other, sizeof other, "%s/other", dir);
    cr_assert_eq(lwq_durable_rename(path, other, &e), 0, "%s", e.msg);
    cr_assert(file_equals(other, "a", 1));
    cr_assert_eq(lwq_durable_unlink(other, &e), 0);
    cr_assert_not(tu_exists(other));
    cr_assert_eq(lwq_durable_unlink(other, &e), 0, "a missing file is not an error");
}

/* Crashes at step 0 (creating the temp file), so it leaves nothing on disk to clean up. */
Test(sys_kill, crash_kill_mode_kills_the_process, .signal = SIGKILL)
{
    lwq_sys_crash_at(0, LWQ_SYS_CRASH_KILL);
    lwq_error e = {0};
    lwq_durable_write_file("/tmp/lwq-io-test-never-created", "x", 1, &e);
}

TestSuite(sys, .init = setup, .fini = teardown);

Test(sys, crash_from_env)
{
    setenv("LWQ_SYS_CRASH_STEP", "2", 1);
    setenv("LWQ_SYS_CRASH_MODE", "fail", 1);
    cr_assert_eq(lwq_sys_fault_from_env(), 1);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "x", 1, &e), LWQ_EIO);
    cr_assert(lwq_sys_crashed());
    cr_assert(strstr(e.msg, "fsync"), "step 3 is the fsync: %s", e.msg);
    setenv("LWQ_SYS_CRASH_STEP", "x2", 1);
    cr_assert_eq(lwq_sys_fault_from_env(), LWQ_EINVAL);
    unsetenv("LWQ_SYS_CRASH_STEP");
    unsetenv("LWQ_SYS_CRASH_MODE");
    cr_assert_eq(lwq_sys_fault_from_env(), 0);
}

Test(sys, bad_fault_rejected)
{
    lwq_sys_fault f = {.op = LWQ_SYS_OP_COUNT, .nth = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&f), LWQ_EINVAL);
    f = (lwq_sys_fault){.op = LWQ_SYS_OP_READ, .nth = 0, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&f), LWQ_EINVAL);
    cr_assert_eq(lwq_sys(), lwq_sys_kernel(), "nothing armed");
}

Test(durable, mkdir_creates_tolerates_existing_and_refuses_a_file)
{
    char sub[200];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    lwq_error e = {0};
    int created = 0;
    cr_assert_eq(lwq_durable_mkdir(sub, &created, &e), 0, "%s", e.msg);
    cr_assert_eq(created, 1);
    struct stat st;
    cr_assert(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
    cr_assert_eq(lwq_durable_mkdir(sub, &created, &e), 0, "an existing directory is not an error: %s", e.msg);
    cr_assert_eq(created, 0);
    cr_assert_eq(lwq_durable_write_file(path, "x", 1, &e), 0);
    cr_assert_eq(lwq_durable_mkdir(path, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, path) && strstr(e.msg, "not a directory"), "%s", e.msg);
}

/* Steps of lwq_durable_mkdir: mkdir, then open + fsync of the parent; a crash between them is an
 * error (the name's durability is unknown) and the retry syncs the parent again. */
Test(durable, mkdir_crash_before_the_parent_fsync_is_an_error_and_the_retry_syncs)
{
    char sub[200];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    lwq_error e = {0};
    lwq_sys_crash_at(1, LWQ_SYS_CRASH_FAIL); /* the mkdir happens, the fsync of the parent does not */
    cr_assert_eq(lwq_durable_mkdir(sub, NULL, &e), LWQ_EIO);
    cr_assert(strstr(e.msg, "fsync directory") && strstr(e.msg, dir), "%s", e.msg);
    cr_assert(tu_exists(sub));
    lwq_sys_fault_clear();
    lwq_sys_fault f = {.op = LWQ_SYS_OP_FSYNC, .nth = 1, .times = 1, .err = EIO};
    cr_assert_eq(lwq_sys_fault_add(&f), 0);
    cr_assert_eq(lwq_durable_mkdir(sub, NULL, &e), LWQ_EIO, "the retry did not fsync the parent");
    cr_assert_eq(lwq_sys_faults_fired(), 1);
    lwq_sys_fault_clear();
    lwq_error_clear(&e);
    cr_assert_eq(lwq_durable_mkdir(sub, NULL, &e), 0, "%s", e.msg);
}

Test(durable, a_symlink_at_the_temporary_path_is_refused_and_its_target_untouched)
{
    char target[200];
    snprintf(target, sizeof target, "%s/elsewhere", dir);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(target, "keep", 4, &e), 0, "%s", e.msg);
    cr_assert_eq(symlink(target, tmp), 0);
    cr_assert_eq(lwq_durable_write_file(path, "data", 4, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, tmp) && strstr(e.msg, "is a symbolic link"), "%s", e.msg);
    cr_assert(file_equals(target, "keep", 4), "the link's target was written through");
    cr_assert_not(tu_exists(path));
}

Test(durable, a_fifo_at_the_temporary_path_is_refused_without_waiting, .timeout = 10)
{
    cr_assert_eq(mkfifo(tmp, 0644), 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(path, "data", 4, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, tmp) && strstr(e.msg, "not a regular file"), "%s", e.msg);
    cr_assert_not(tu_exists(path));
}

/* issue 36, finding 3: a temp file opened with O_TRUNC wrote through a hard link planted there */
Test(durable, a_hard_link_at_the_temporary_path_is_refused_and_its_other_file_untouched)
{
    char other[200];
    snprintf(other, sizeof other, "%s/elsewhere", dir);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(other, "keep", 4, &e), 0, "%s", e.msg);
    cr_assert_eq(link(other, tmp), 0);
    cr_assert_eq(lwq_durable_write_file(path, "data", 4, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, tmp) && strstr(e.msg, "hard links"), "%s", e.msg);
    cr_assert(file_equals(other, "keep", 4), "the linked file was written through");
    cr_assert_not(tu_exists(path));
}

/* the temp file of an attempt that died before its rename is lwq's own: removed, then made anew */
Test(durable, a_stale_temporary_file_is_replaced)
{
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_write_file(tmp, "stale bytes, longer than the new", 32, &e), 0, "%s", e.msg);
    cr_assert_eq(lwq_durable_write_file(path, "data", 4, &e), 0, "%s", e.msg);
    cr_assert(file_equals(path, "data", 4));
    cr_assert_not(tu_exists(tmp));
}

/* issue 36, finding 4: an existing path was taken for the directory when stat() said directory,
 * so a link there took lwq's writes elsewhere */
Test(durable, mkdir_refuses_a_symlink_to_a_directory)
{
    char real[200], link_[200];
    snprintf(real, sizeof real, "%s/real", dir);
    snprintf(link_, sizeof link_, "%s/link", dir);
    cr_assert_eq(mkdir(real, 0755), 0);
    cr_assert_eq(symlink(real, link_), 0);
    lwq_error e = {0};
    cr_assert_eq(lwq_durable_mkdir(link_, NULL, &e), LWQ_EINVAL);
    cr_assert(strstr(e.msg, link_) && strstr(e.msg, "symbolic link"), "%s", e.msg);
}
