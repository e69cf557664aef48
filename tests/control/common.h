/* Helpers shared by the control suites: temporary directories, writing the
 * control file the ways a scheduler (or a careless one) does, counting log
 * lines, and waiting for the watcher without sleeping blindly. */
#ifndef CONTROL_TEST_COMMON_H
#define CONTROL_TEST_COMMON_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vmem_internal.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* How long a test waits for the watcher before it fails.  Generous: the
 * watcher normally answers within ~50 ms (inotify) or ~150 ms (polling),
 * but a loaded 2-core machine can stall it. */
#define WAIT_SECONDS 10.0

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Evaluates cond every 2 ms until it holds or WAIT_SECONDS pass; yields
 * whether it held. */
#define WAIT_FOR(cond)                                                                             \
    ({                                                                                             \
        double wait_end_ = now_s() + WAIT_SECONDS;                                                 \
        int ok_;                                                                                   \
        while (!(ok_ = !!(cond)) && now_s() < wait_end_)                                           \
            sleep_ms(2);                                                                           \
        ok_;                                                                                       \
    })

/* ------------------------------------------------------------------------ */
/* Log lines                                                                */
/* ------------------------------------------------------------------------ */

typedef struct logcount {
    atomic_int errors, warnings;
    pthread_mutex_t lock;
    char last_error[512];
    char all[8192]; /* every warning and error, newline separated (truncated) */
} logcount_t;

static inline void logcount_init(logcount_t *lc)
{
    memset(lc, 0, sizeof *lc);
    pthread_mutex_init(&lc->lock, NULL);
}

static inline void logcount_fn(void *ctx, vmem_log_level_t level, const char *msg)
{
    logcount_t *lc = ctx;
    if (level < VMEM_LOG_WARN)
        return;
    pthread_mutex_lock(&lc->lock);
    if (level >= VMEM_LOG_ERROR) {
        atomic_fetch_add(&lc->errors, 1);
        snprintf(lc->last_error, sizeof lc->last_error, "%s", msg);
    } else {
        atomic_fetch_add(&lc->warnings, 1);
    }
    size_t n = strlen(lc->all);
    snprintf(lc->all + n, sizeof lc->all - n, "%s\n", msg);
    pthread_mutex_unlock(&lc->lock);
}

static inline int logcount_has(logcount_t *lc, const char *needle)
{
    pthread_mutex_lock(&lc->lock);
    int r = strstr(lc->all, needle) != NULL;
    pthread_mutex_unlock(&lc->lock);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Files                                                                    */
/* ------------------------------------------------------------------------ */

/* A fresh directory under $TMPDIR (or /tmp); the caller frees the string. */
static inline char *dir_make(void)
{
    const char *base = getenv("TMPDIR");
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/vmem-control-XXXXXX", base && *base ? base : "/tmp") > 0);
    cr_assert_not_null(mkdtemp(p), "mkdtemp");
    return p;
}

/* Removes a directory made by dir_make and the files in it. */
static inline void dir_remove(char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char *p = NULL;
            if (asprintf(&p, "%s/%s", dir, e->d_name) > 0) {
                unlink(p);
                free(p);
            }
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

static inline char *path_join(const char *dir, const char *name)
{
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

/* Writes text to fd completely. */
static inline void fd_put(int fd, const char *text, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        cr_assert(w > 0, "write");
        done += (size_t)w;
    }
}

/* The scheduler's way: a temporary file in the same directory, renamed
 * over the control file. */
static inline void file_put_atomic(const char *path, const char *text)
{
    char *tmp = NULL;
    static atomic_int serial;
    cr_assert(asprintf(&tmp, "%s.w%d", path, atomic_fetch_add(&serial, 1)) > 0);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0, "open %s", tmp);
    fd_put(fd, text, strlen(text));
    cr_assert(close(fd) == 0);
    cr_assert(rename(tmp, path) == 0, "rename");
    free(tmp);
}

/* The careless way: truncate and write in place (no rename). */
static inline void file_put_inplace(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0, "open %s", path);
    fd_put(fd, text, strlen(text));
    cr_assert(close(fd) == 0);
}

/* ------------------------------------------------------------------------ */
/* Instances                                                                */
/* ------------------------------------------------------------------------ */

/* A sim instance with the given limit (also the start cap), control file,
 * statistics file (NULL: none), log function (NULL: the default log) and
 * immediate flag. */
static inline vmem_t *instance_make_log(size_t limit, const char *control, const char *stats,
                                        vmem_log_fn log_fn, void *log_ctx, int immediate)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.sim_capacity = 12 * GiB; /* small enough for valgrind's address space */
    cfg.limit = limit;
    cfg.host_limit = 4 * GiB;
    cfg.control_file = control;
    cfg.stats_file = stats;
    cfg.control_immediate = immediate;
    if (log_fn) {
        cfg.log_fn = log_fn;
        cfg.log_ctx = log_ctx;
    }
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    cr_assert_eq(st, VMEM_OK, "vmem_create: %s", vmem_strerror(st));
    return v;
}

/* instance_make_log with the log lines counted in lc (NULL: the default log). */
static inline vmem_t *instance_make(size_t limit, const char *control, const char *stats,
                                    logcount_t *lc, int immediate)
{
    return instance_make_log(limit, control, stats, lc ? logcount_fn : NULL, lc, immediate);
}

static inline size_t limit_of(vmem_t *v)
{
    size_t l = 0;
    cr_assert_eq(vmem_get_limit(v, &l), VMEM_OK);
    return l;
}

static inline control_status_t status_of(vmem_t *v)
{
    control_status_t cs;
    cr_assert_eq(control_get_status(v, &cs), VMEM_OK);
    return cs;
}

/* Waits until the watcher holds a good file whose limit is bytes. */
static inline int wait_file_limit(vmem_t *v, size_t bytes)
{
    return WAIT_FOR(({
        control_status_t cs_ = status_of(v);
        !cs_.in_error && cs_.has_limit && cs_.limit == bytes;
    }));
}

/* Runs argv (NULL-terminated: a tool such as vmemctl) with stdout and
 * stderr captured into r. */
typedef struct cmd_run {
    int status;        /* exit status, or -1 if killed */
    char out[65536], err[4096];
} cmd_run_t;

static inline void cmd_slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static inline void cmd_run(cmd_run_t *r, const char *const argv[])
{
    char out[] = "/tmp/vmem-cmd-out-XXXXXX", err[] = "/tmp/vmem-cmd-err-XXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    cr_assert(fo >= 0 && fe >= 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    close(fo);
    close(fe);
    cmd_slurp(out, r->out, sizeof r->out);
    cmd_slurp(err, r->err, sizeof r->err);
    unlink(out);
    unlink(err);
}

#endif
