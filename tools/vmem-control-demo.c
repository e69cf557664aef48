/* vmem-control-demo: a training loop in miniature that a scheduler steers
 * through a control file (see docs/control.md).
 *
 *   vmem-control-demo [--steps N] [--step-ms MS] [--limit SIZE] [--work SIZE]
 *                     CONTROL_FILE STATS_FILE
 *
 * Each step allocates a working set of --work bytes (default 3G) in 64 MiB
 * blocks, sleeps --step-ms (default 200; the step's "compute"), frees it and
 * calls vmem_step_end.  The instance starts with --limit (default 8G, also the start cap);
 * the rest of the configuration comes from the VMEM_* environment (on a
 * machine without a GPU the simulated device is used).  libvmem's own
 * messages (info and up) and every limit change are printed with the step
 * they happened in.  Runs --steps steps (0: until interrupted).
 * Exit status: 0 done (or interrupted), 1 a libvmem call failed or a VMEM_*
 * variable is invalid, 2 bad arguments. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vmem.h>

#define MiB ((size_t)1 << 20)

static volatile sig_atomic_t stop;
static _Atomic unsigned long long step_no = 1;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void gib(size_t b, char *buf, size_t len) { snprintf(buf, len, "%.2f GiB", (double)b / (1 << 30)); }

static void on_log(void *ctx, vmem_log_level_t level, const char *msg)
{
    (void)ctx;
    static const char *names[] = {"debug", "info", "warning", "error"};
    printf("[step %llu] libvmem %s: %s\n", (unsigned long long)step_no, names[level < 4 ? level : 3], msg);
    fflush(stdout);
}

static void on_limit(void *ctx, const vmem_event_t *ev)
{
    vmem_t *v = ctx;
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    char a[32], b[32], h[32];
    gib(ev->old_limit, a, sizeof a);
    gib(ev->new_limit, b, sizeof b);
    gib(s.device_held, h, sizeof h);
    printf("[step %llu] limit %s -> %s (device holds %s)\n", (unsigned long long)step_no, a, b, h);
    fflush(stdout);
}

static void usage_to(FILE *f)
{
    fprintf(f, "usage: vmem-control-demo [--steps N] [--step-ms MS] [--limit SIZE] "
               "[--work SIZE] CONTROL_FILE STATS_FILE\n"
               "       vmem-control-demo --help | --version\n");
}

static int usage(void)
{
    usage_to(stderr);
    return 2;
}

/* A count: decimal digits only (atol read "abc" as 0, i.e. run for ever). */
static int count_parse(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    long steps = 0, step_ms = 200;
    size_t limit = (size_t)8 << 30, work = (size_t)3 << 30;
    const char *pos[2];
    int npos = 0;
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage_to(stdout);
        printf("\nA training loop in miniature that follows a libvmem control file: each step\n"
               "allocates --work bytes (default 3G) in 64 MiB blocks, sleeps --step-ms\n"
               "(default 200), frees them and ends the step.  --limit (default 8G) is the\n"
               "start limit and cap; --steps 0 (default) runs until interrupted.\n"
               "Steer it with: vmemctl set-limit CONTROL_FILE SIZE (docs/control.md).\n"
               "\nexit status: 0 done or interrupted, 1 a libvmem call failed or a VMEM_*\n"
               "variable is invalid, 2 bad arguments\n");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("vmem-control-demo (libvmem) %s\n", vmem_version());
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            if (count_parse(argv[++i], &steps) != 0)
                return usage();
        } else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) {
            if (count_parse(argv[++i], &step_ms) != 0)
                return usage();
        } else if (!strcmp(argv[i], "--limit") && i + 1 < argc) {
            if (vmem_parse_size(argv[++i], &limit) != VMEM_OK)
                return usage();
        } else if (!strcmp(argv[i], "--work") && i + 1 < argc) {
            if (vmem_parse_size(argv[++i], &work) != VMEM_OK)
                return usage();
        } else if (argv[i][0] == '-' || npos == 2)
            return usage();
        else
            pos[npos++] = argv[i];
    }
    if (npos != 2 || steps < 0 || step_ms < 0)
        return usage();
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    setvbuf(stdout, NULL, _IOLBF, 0);

    vmem_config_t cfg;
    vmem_config_init(&cfg);
    if (vmem_config_from_env(&cfg) != VMEM_OK)
        return 1;
    cfg.limit = limit;
    cfg.start_cap = limit;
    cfg.control_file = pos[0];
    cfg.stats_file = pos[1];
    cfg.log_fn = on_log;
    cfg.log_level = VMEM_LOG_INFO;
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    if (st != VMEM_OK && cfg.backend == VMEM_BACKEND_AUTO) {
        cfg.backend = VMEM_BACKEND_SIM;
        st = vmem_create(&cfg, &v);
    }
    if (st != VMEM_OK) {
        fprintf(stderr, "vmem-control-demo: vmem_create: %s\n", vmem_strerror(st));
        return 1;
    }
    vmem_set_callback(v, VMEM_EVENT_LIMIT_CHANGED, on_limit, v);

    size_t nblk = work / (64 * MiB);
    void **blk = calloc(nblk ? nblk : 1, sizeof *blk);
    for (; !stop && (steps == 0 || (long)step_no <= steps); step_no++) {
        for (size_t i = 0; i < nblk; i++)
            blk[i] = vmem_alloc(v, 64 * MiB);
        struct timespec ts = {step_ms / 1000, (step_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL); /* the step's compute */
        for (size_t i = 0; i < nblk; i++)
            vmem_free(v, blk[i]);
        if (vmem_step_end(v) == VMEM_ERR_BUSY)
            break;
    }
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    char l[32];
    gib(s.limit, l, sizeof l);
    printf("done after %llu steps: limit %s, spills %llu, failures %llu\n",
           (unsigned long long)s.steps, l, (unsigned long long)s.spills,
           (unsigned long long)s.failures);
    free(blk);
    vmem_destroy(v);
    return 0;
}
