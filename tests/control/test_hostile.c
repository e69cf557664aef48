/* Suite 'control': what lies at the control and statistics paths when it is
 * not an ordinary file (issue 16).  A job must never hang on a path (a FIFO
 * blocks open() and read()), never replace what is not a regular file (a
 * device node, a FIFO), follow the links schedulers deliver files through,
 * and read sizes exactly.  A hang shows as the test's timeout. */
#include <sys/sysmacros.h>

#include "common.h"

static void fifo_make(const char *path) { cr_assert_eq(mkfifo(path, 0644), 0, "mkfifo %s", path); }

/* A FIFO at the path when the instance starts: vmem_create returns (it used
 * to block in open() for ever), logs one error naming what lies there, and
 * the watcher keeps running: a good file put there later is applied. */
Test(control_hostile, fifo_at_start_does_not_hang, .timeout = 20)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    fifo_make(ctl);
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 1);
    cr_assert(logcount_has(&lc, "not a regular file (a FIFO)"), "log: %s", lc.all);
    cr_assert_eq(atomic_load(&lc.errors), 1, "log: %s", lc.all);
    cr_assert(status_of(v).in_error);
    cr_assert_eq(limit_of(v), 1 * GiB);
    file_put_atomic(ctl, "{\"limit\": \"256M\"}");
    cr_assert(wait_file_limit(v, 256 * MiB), "the good file that replaced the FIFO was not read");
    cr_assert_eq(limit_of(v), 256 * MiB);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* A FIFO that replaces a good file later: the watcher must not block (then
 * vmem_destroy would never return), the last good setting stays. */
static void case_fifo_later(int poll)
{
    control_force_poll = poll;
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    char *fifo = path_join(dir, "fifo");
    file_put_atomic(ctl, "{\"limit\": \"512M\"}");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 1);
    cr_assert_eq(limit_of(v), 512 * MiB);
    fifo_make(fifo);
    cr_assert_eq(rename(fifo, ctl), 0);
    cr_assert(WAIT_FOR(status_of(v).in_error), "the FIFO was not noticed");
    /* the watcher publishes the error state before it logs the line */
    cr_assert(WAIT_FOR(logcount_has(&lc, "not a regular file (a FIFO); "
                                         "keeping the last good setting")),
              "log: %s", lc.all);
    cr_assert_eq(limit_of(v), 512 * MiB);
    vmem_destroy(v); /* hangs (the test times out) if the watcher is stuck in open() */
    free(fifo);
    free(ctl);
    dir_remove(dir);
}
Test(control_hostile, fifo_later_inotify, .timeout = 20) { case_fifo_later(0); }
Test(control_hostile, fifo_later_polling, .timeout = 20) { case_fifo_later(1); }

/* A directory at the path is refused by name too (it was "cannot read: Is a
 * directory"), and a symlink to a good file is followed. */
Test(control_hostile, directory_refused_symlink_followed, .timeout = 20)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    char *real = path_join(dir, "real.json");
    cr_assert_eq(mkdir(ctl, 0755), 0);
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 1);
    cr_assert(logcount_has(&lc, "not a regular file (a directory)"), "log: %s", lc.all);
    vmem_destroy(v);
    cr_assert_eq(rmdir(ctl), 0);
    file_put_atomic(real, "{\"limit\": \"128M\"}");
    cr_assert_eq(symlink("real.json", ctl), 0);
    v = instance_make(1 * GiB, ctl, NULL, NULL, 1);
    cr_assert_eq(limit_of(v), 128 * MiB);
    vmem_destroy(v);
    free(real);
    free(ctl);
    dir_remove(dir);
}

/* Sizes of 2^53 bytes and more are read exactly (a JSON number went through
 * a double: 9007199254740993 read as ...992, 2^64-1 was rejected). */
Test(control_hostile, sizes_are_read_exactly, .timeout = 20)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": 9007199254740993}");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 1);
    control_status_t cs = status_of(v);
    cr_assert(!cs.in_error, "log: %s", lc.all);
    cr_assert_eq(cs.limit, (size_t)9007199254740993ull);
    cr_assert_eq(limit_of(v), 1 * GiB); /* above the start cap: capped there */
    file_put_atomic(ctl, "{\"limit\": 18446744073709551615}");
    cr_assert(wait_file_limit(v, SIZE_MAX), "log: %s", lc.all);
    file_put_atomic(ctl, "{\"limit\": 18446744073709551616}");
    cr_assert(WAIT_FOR(status_of(v).in_error));
    cr_assert(WAIT_FOR(logcount_has(&lc, "\"limit\" must be a size")), "log: %s", lc.all);
    cr_assert_eq(status_of(v).limit, SIZE_MAX, "the last good setting is kept");
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* Text from the file reaches the log escaped: no invalid UTF-8, no control
 * characters (a key is named in the "unknown key" warning). */
Test(control_hostile, file_text_is_escaped_in_the_log, .timeout = 20)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": \"64M\", \"k\xff\xfe\\u001b[31m\": 1, \"caf\xc3\xa9\": 2}");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 1);
    cr_assert_eq(limit_of(v), 64 * MiB);
    cr_assert(logcount_has(&lc, "\"k\\xff\\xfe\\x1b[31m\""), "log: %s", lc.all);
    cr_assert(logcount_has(&lc, "\"caf\xc3\xa9\""), "valid UTF-8 is kept: %s", lc.all);
    cr_assert_null(strchr(lc.all, '\x1b'));
    cr_assert_null(strchr(lc.all, '\xff'));
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* A per-GPU key that no device can ever match (not a PCI bus id, not
 * "sim:N") is warned about, like any unknown key, instead of being skipped
 * in silence. */
Test(control_hostile, malformed_gpu_key_is_warned, .timeout = 20)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, "{\"limit\": \"64M\", \"gpu:0\": {\"mem_limit\": 1}, "
                         "\"0000:3b:00.0\": {\"mem_limit\": 2}}");
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, ctl, NULL, &lc, 1);
    cr_assert_eq(limit_of(v), 64 * MiB);
    cr_assert(logcount_has(&lc, "ignoring unknown key(s) \"gpu:0\""), "log: %s", lc.all);
    cr_assert(!logcount_has(&lc, "0000:3b:00.0"), "another GPU's entry is not unknown: %s",
              lc.all);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

/* ------------------------------------------------------------------------ */
/* The statistics file                                                      */
/* ------------------------------------------------------------------------ */

/* Something that is not a regular file at the statistics path is never
 * replaced (rename put a regular file in place of /dev/full); one error. */
static void stats_refused(const char *what, int (*make)(const char *), mode_t type)
{
    char *dir = dir_make();
    char *stats = path_join(dir, "stats.json");
    if (make(stats) != 0)
        cr_skip_test("cannot make a %s here", what);
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, NULL, stats, &lc, 0);
    cr_assert_eq(vmem_step_end(v), VMEM_ERR_IO);
    cr_assert_eq(vmem_step_end(v), VMEM_ERR_IO);
    struct stat st;
    cr_assert_eq(lstat(stats, &st), 0);
    cr_assert_eq(st.st_mode & S_IFMT, type, "the %s was replaced", what);
    char want[96];
    snprintf(want, sizeof want, "not a regular file (a %s); not replacing it", what);
    cr_assert(logcount_has(&lc, want), "log: %s", lc.all);
    cr_assert_eq(atomic_load(&lc.errors), 1, "one error per failing run: %s", lc.all);
    vmem_destroy(v);
    /* nothing left behind next to it */
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(n, 1, "temporary files left in %s", dir);
    free(stats);
    dir_remove(dir);
}
static int make_fifo(const char *p) { return mkfifo(p, 0644); }
static int make_chardev(const char *p) { return mknod(p, S_IFCHR | 0666, makedev(1, 7)); }
static int make_dir(const char *p) { return mkdir(p, 0755); }
Test(control_hostile, stats_fifo_not_replaced, .timeout = 20) { stats_refused("FIFO", make_fifo, S_IFIFO); }
Test(control_hostile, stats_device_not_replaced, .timeout = 20)
{
    stats_refused("character device", make_chardev, S_IFCHR); /* /dev/full's numbers */
}
Test(control_hostile, stats_directory_not_replaced, .timeout = 20)
{
    char *dir = dir_make();
    char *stats = path_join(dir, "stats.json");
    cr_assert_eq(make_dir(stats), 0);
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, NULL, stats, &lc, 0);
    vmem_step_end(v);
    struct stat st;
    cr_assert_eq(lstat(stats, &st), 0);
    cr_assert(S_ISDIR(st.st_mode));
    cr_assert(logcount_has(&lc, "not a regular file (a directory)"), "log: %s", lc.all);
    vmem_destroy(v);
    rmdir(stats);
    free(stats);
    dir_remove(dir);
}

/* A symlinked statistics file is written through the link: the link stays,
 * its target gets the statistics. */
Test(control_hostile, stats_symlink_written_through, .timeout = 20)
{
    char *dir = dir_make();
    char *stats = path_join(dir, "stats.json");
    char *real = path_join(dir, "real.json");
    file_put_atomic(real, "{}");
    cr_assert_eq(symlink("real.json", stats), 0);
    logcount_t lc;
    logcount_init(&lc);
    vmem_t *v = instance_make(1 * GiB, NULL, stats, &lc, 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    struct stat st;
    cr_assert_eq(lstat(stats, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the symlink was replaced by a file");
    char buf[64] = "";
    FILE *f = fopen(real, "r");
    cr_assert_not_null(f);
    cr_assert(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
    cr_assert(strncmp(buf, "{\"version\":", 11) == 0, "target: %s", buf);
    cr_assert_eq(atomic_load(&lc.errors), 0, "log: %s", lc.all);
    vmem_destroy(v);
    free(real);
    free(stats);
    dir_remove(dir);
}
