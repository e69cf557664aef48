/* Criterion suite 'bench': the trace parser (validation, dense slots, peak
 * live bytes) and the shared replay loop of vmem-replay. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <vmem.h>

#include "replay.h"
#include "steps.h"
#include "trace.h"

static char dir[] = "/tmp/vmem-test-replay-XXXXXX";

static void setup(void) { cr_assert_not_null(mkdtemp(dir)); }

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)!system(cmd);
}

TestSuite(trace, .init = setup, .fini = teardown);

/* Writes text gzip-compressed (or plain) to dir/name; returns the path. */
static const char *write_trace(const char *name, const char *text, int gz)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(gzwrite(f, text, (unsigned)strlen(text)), (int)strlen(text));
        cr_assert_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(text, f);
        fclose(f);
    }
    return path;
}

/* Loads text expecting failure; returns the message. */
static const char *load_error(const char *text)
{
    static char err[512];
    trace_t t;
    const char *p = write_trace("bad.txt.gz", text, 1);
    cr_assert_eq(trace_load(p, &t, err, sizeof err), -1, "accepted: %s", text);
    cr_assert_null(t.events);
    trace_free(&t);
    return err;
}

Test(trace, parses_events_slots_and_peak)
{
    const char *p = write_trace("ok.txt.gz",
                                "# {\"workload\": \"test\"}\n"
                                "a 10 1000 0 5\n"
                                "a 11 3000 0 6\n"
                                "\n"
                                "f 10 7\n"
                                "a 12 500 7 8\n"
                                "f 11 9\n"
                                "a 13 200 0 10\r\n",
                                1);
    trace_t t;
    char err[256];
    cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(t.name, "ok.txt.gz");
    cr_assert_eq(t.nevents, 6);
    cr_assert_eq(t.nallocs, 4);
    cr_assert_eq(t.nfrees, 2);
    cr_assert_eq(t.peak_live, 4000);
    cr_assert_eq(t.max_size, 3000);
    cr_assert_eq(t.live_at_end, 2);
    /* Slots are reused once freed: never more than two blocks live. */
    cr_assert_eq(t.nslots, 2);
    cr_assert_eq(t.events[2].is_free, 1);
    cr_assert_eq(t.events[2].slot, t.events[0].slot);
    cr_assert_eq(t.events[3].slot, t.events[0].slot, "slot of a freed block reused");
    cr_assert_eq(t.stream[3], 7);
    cr_assert_eq(t.t_us[5], 10);
    trace_free(&t);
}

Test(trace, plain_text_and_last_line_without_newline)
{
    const char *p = write_trace("plain.txt", "a 1 256 0 1\nf 1 2", 0);
    trace_t t;
    char err[256];
    cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.nevents, 2);
    trace_free(&t);
}

Test(trace, malformed_lines_name_the_line)
{
    cr_assert(strstr(load_error("a 1 100 0 1\na 2 x 0 2\n"), "bad.txt.gz:2:"));
    cr_assert(strstr(load_error("a 1 100 0\n"), ":1: malformed allocation"));
    cr_assert(strstr(load_error("a 1 100 0 1 9\n"), ":1: malformed allocation"));
    cr_assert(strstr(load_error("f 1\n"), ":1: malformed free"));
    cr_assert(strstr(load_error("a 1 -5 0 1\n"), ":1:"));
    cr_assert(strstr(load_error("a 1 0 0 1\n"), "bad size 0"));
    cr_assert(strstr(load_error("a 1 99999999999999999999999 0 1\n"), ":1:"));
    cr_assert(strstr(load_error("x 1 2 3 4\n"), "unknown event"));
    cr_assert(strstr(load_error("a 1 100 0 1\n\x01\x02\n"), ":2: unknown event '?" "?'"));
    cr_assert(strstr(load_error("# only a comment\n"), "no events"));
    /* Each size is allowed (at most SIZE_MAX / 2) but the bytes live at once
     * pass 2^64: the peak wrapped and was reported far too low. */
    cr_assert(strstr(load_error("a 1 9223372036854775807 0 1\na 2 9223372036854775807 0 2\n"
                                "f 1 3\na 3 9223372036854775807 0 4\na 4 9223372036854775807 0 5\n"),
                     ":5: allocation of block 4: live bytes pass 2^64"));
}

Test(trace, unknown_and_duplicate_ids)
{
    cr_assert(strstr(load_error("a 1 100 0 1\nf 2 2\n"), ":2: free of unknown block 2"));
    cr_assert(strstr(load_error("a 1 100 0 1\nf 1 2\nf 1 3\n"), ":3: free of unknown block 1"));
    cr_assert(strstr(load_error("a 1 100 0 1\na 1 100 0 2\n"), ":2: allocation of block 1, which is already live"));
}

Test(trace, long_line)
{
    char buf[3000];
    memset(buf, '9', sizeof buf);
    memcpy(buf, "a 1 ", 4);
    strcpy(buf + sizeof buf - 8, " 0 1\n");
    cr_assert(strstr(load_error(buf), ":1: line longer than"));
}

/* A comment line may be of any length: libvmem_trace.record() writes every
 * step's time into the header, which passed 1 KiB at 40 steps and was
 * refused as "line longer than".  The header's "iters" is still read, and
 * the events after a comment longer than the reader's buffer are all there. */
Test(trace, long_comment_lines)
{
    static const size_t sizes[] = {3000, (1u << 17) - 2, 1u << 17, 300000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        char *text = malloc(n + 64);
        cr_assert_not_null(text);
        int h = snprintf(text, n, "# {\"iters\": 7, \"step_t_us\": [");
        memset(text + h, '1', n - (size_t)h);
        strcpy(text + n, "]\na 1 256 0 1\n# x\nf 1 2\na 2 64 0 3\n");
        const char *p = write_trace("longc.txt.gz", text, 1);
        trace_t t;
        char err[512];
        cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%zu: %s", n, err);
        cr_assert_eq(t.iters, 7, "%zu", n);
        cr_assert_eq(t.nevents, 3, "%zu", n);
        cr_assert_eq(t.peak_live, 256, "%zu", n);
        trace_free(&t);
        free(text);
    }
    /* an event line is still refused by its length */
    char ev[1200];
    memset(ev, ' ', sizeof ev);
    memcpy(ev, "# short\na 1 256 0 1", 19);
    strcpy(ev + sizeof ev - 2, "\n");
    cr_assert(strstr(load_error(ev), ":2: line longer than"));
}

Test(trace, truncated_and_not_gzip)
{
    /* A valid gzip stream cut in the middle. */
    char text[20000];
    size_t n = 0;
    for (int i = 0; i < 800; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "a %d %d 0 %d\n", i, 256 + i, i);
    const char *p = write_trace("cut.txt.gz", text, 1);
    FILE *f = fopen(p, "rb");
    char gz[20000];
    size_t len = fread(gz, 1, sizeof gz, f);
    fclose(f);
    f = fopen(p, "wb");
    fwrite(gz, 1, len / 2, f);
    fclose(f);
    trace_t t;
    char err[512];
    cr_assert_eq(trace_load(p, &t, err, sizeof err), -1);
    cr_assert(strstr(err, "truncated or corrupt gzip data"), "%s", err);
    cr_assert(strstr(err, "cut.txt.gz:"), "%s", err);
    trace_free(&t);

    p = write_trace("text.txt.gz", "a 1 256 0 1\n", 0);
    cr_assert_eq(trace_load(p, &t, err, sizeof err), -1);
    cr_assert(strstr(err, "not gzip data"), "%s", err);

    snprintf(text, sizeof text, "%s/missing.txt.gz", dir);
    cr_assert_eq(trace_load(text, &t, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot open"), "%s", err);
}

/* Writes len bytes (NULs included) gzip-compressed to dir/name. */
static const char *write_trace_bytes(const char *name, const char *bytes, size_t len)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gzFile f = gzopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(gzwrite(f, bytes, (unsigned)len), (int)len);
    cr_assert_eq(gzclose(f), Z_OK);
    return path;
}

/* A NUL byte inside a line is an error naming the line (the rest of the
 * line after it was dropped in silence: "a 1 256 0 1\0junk" loaded). */
Test(trace, nul_byte_names_the_line)
{
    static const char text[] = "a 1 256 0 1\na 2 512\0 0 2 junk\nf 1 3\n";
    const char *p = write_trace_bytes("nul.txt.gz", text, sizeof text - 1);
    trace_t t;
    char err[512];
    cr_assert_eq(trace_load(p, &t, err, sizeof err), -1, "a line with a NUL byte loaded");
    cr_assert(strstr(err, "nul.txt.gz:2: NUL byte"), "%s", err);
    trace_free(&t);
    /* also on the last line, without a newline */
    static const char last[] = "a 1 256 0 1\nf 1 2\0";
    p = write_trace_bytes("nul2.txt.gz", last, sizeof last - 1);
    cr_assert_eq(trace_load(p, &t, err, sizeof err), -1);
    cr_assert(strstr(err, "nul2.txt.gz:2: NUL byte"), "%s", err);
    /* and a long line is still refused by its length */
    char longl[3000];
    memset(longl, ' ', sizeof longl);
    memcpy(longl, "a 1 256 0 1", 11);
    longl[sizeof longl - 1] = '\n';
    p = write_trace_bytes("long.txt.gz", longl, sizeof longl);
    cr_assert_eq(trace_load(p, &t, err, sizeof err), -1);
    cr_assert(strstr(err, "long.txt.gz:1: line longer than"), "%s", err);
}

/* A directory is named as such (it was "truncated or corrupt gzip data"). */
Test(trace, directory_is_named)
{
    trace_t t;
    char err[512];
    cr_assert_eq(trace_load(dir, &t, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot open: a directory"), "%s", err);
}

/* The number of events is bounded (a small gzip can inflate to gigabytes of
 * valid events): past the bound, a clear error naming it; 0: no bound. */
Test(trace, event_bound)
{
    char text[4096];
    size_t n = 0;
    for (int i = 0; i < 50; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "a %d 256 0 %d\nf %d %d\n", i, i, i, i);
    const char *p = write_trace("many.txt.gz", text, 1);
    trace_t t;
    char err[512];
    cr_assert_eq(trace_load_max(p, 99, &t, err, sizeof err), -2);
    cr_assert(strstr(err, "many.txt.gz:100: more than 99 events"), "%s", err);
    cr_assert_null(t.events);
    cr_assert_eq(trace_load_max(p, 100, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.nevents, 100);
    trace_free(&t);
    cr_assert_eq(trace_load_max(p, 0, &t, err, sizeof err), 0, "%s", err);
    trace_free(&t);
    cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "the default bound is far above 100");
    trace_free(&t);
}

/* ------------------------------------------------------------------------ */
/* The replay loop with a counting allocator                                 */
/* ------------------------------------------------------------------------ */

typedef struct counting {
    int allocs, frees, live;
    size_t fail_size; /* requests of this size fail */
    char arena[64][256];
    int used[64];
} counting_t;

static void *count_alloc(void *ctx, size_t size)
{
    counting_t *c = ctx;
    if (size == c->fail_size)
        return NULL;
    for (int i = 0; i < 64; i++)
        if (!c->used[i]) {
            c->used[i] = 1;
            c->allocs++;
            c->live++;
            return c->arena[i];
        }
    return NULL;
}

static void count_free(void *ctx, void *p)
{
    counting_t *c = ctx;
    int i = (int)(((char(*)[256])p) - c->arena);
    cr_assert(i >= 0 && i < 64 && c->used[i], "free of a block not handed out");
    c->used[i] = 0;
    c->frees++;
    c->live--;
}

static size_t observed;
static void observe(void *octx, size_t i)
{
    (void)octx;
    cr_assert_eq(i, observed);
    observed++;
}

Test(trace, replay_pass_frees_leftovers_and_counts_failures)
{
    const char *p = write_trace("r.txt.gz",
                                "a 1 100 0 1\na 2 200 0 2\nf 1 3\na 3 300 0 4\na 4 777 0 5\n"
                                "f 4 6\n",
                                1);
    trace_t t;
    char err[256];
    cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
    counting_t c = {.fail_size = 777};
    replay_ops_t ops = {.ctx = &c, .alloc = count_alloc, .free = count_free};
    void **ptrs = calloc(t.nslots, sizeof *ptrs);
    uint64_t failed = 99;
    observed = 0;
    double ns = replay_pass(&t, &ops, ptrs, &failed, observe, NULL);
    cr_assert(ns >= 0);
    cr_assert_eq(observed, t.nevents);
    cr_assert_eq(failed, 1, "the 777-byte request failed");
    cr_assert_eq(c.allocs, 3);
    cr_assert_eq(c.live, 0, "blocks never freed are freed after the pass");
    for (size_t i = 0; i < t.nslots; i++)
        cr_assert_null(ptrs[i]);
    replay_pass(&t, &ops, ptrs, &failed, NULL, NULL);
    cr_assert_eq(c.allocs, 6);
    cr_assert_eq(c.live, 0);
    free(ptrs);
    trace_free(&t);
}

/* Paired replay: two targets in one process, their timed passes
 * alternating A B, B A, ...; both lines name the other and its ratio. */
typedef struct paired_ctx {
    counting_t c;
    char id;
    int opened, closed;
    uint64_t peak;
} paired_ctx_t;

static char pass_order[64];
static size_t npass;

static void *paired_alloc(void *ctx, size_t size)
{
    paired_ctx_t *p = ctx;
    if (p->c.allocs % 3 == 0 && npass + 1 < sizeof pass_order)
        pass_order[npass++] = p->id; /* the first of a pass's three allocations */
    return count_alloc(&p->c, size);
}

static void paired_free(void *ctx, void *ptr) { count_free(&((paired_ctx_t *)ctx)->c, ptr); }

static int paired_open(void *self, char *err, size_t len)
{
    (void)err, (void)len;
    ((paired_ctx_t *)self)->opened++;
    return 0;
}

static void paired_close(void *self) { ((paired_ctx_t *)self)->closed++; }

static int paired_steps_seen;
static const size_t paired_steps[] = {2};
static void paired_step(void *ctx)
{
    (void)ctx;
    paired_steps_seen++;
}

/* B's step ends: one boundary, before the trace's third event. */
static int paired_begin(void *self, const trace_t *t, replay_ops_t *ops, char *err, size_t len)
{
    (void)self, (void)err, (void)len;
    cr_assert_eq(t->nevents, 4);
    ops->step = paired_step;
    ops->steps = paired_steps;
    ops->nsteps = 1;
    return 0;
}
static uint64_t paired_peak(void *self) { return ((paired_ctx_t *)self)->peak; }

Test(trace, paired_replay_alternates_passes_and_prints_both)
{
    const char *p = write_trace("p.txt.gz", "a 1 100 0 1\na 2 200 0 2\nf 1 3\na 3 300 0 4\n", 1);
    paired_ctx_t a = {.id = 'A', .peak = 600}, b = {.id = 'B', .peak = 1200};
    replay_target_t ta = {.allocator = "alpha", .peak_source = "test", .open = paired_open,
                          .close = paired_close, .peak_reserved = paired_peak,
                          .ops = {.ctx = &a, .alloc = paired_alloc, .free = paired_free}};
    replay_target_t tb = ta;
    tb.allocator = "beta";
    tb.ops.ctx = &b;
    tb.trace_begin = paired_begin;
    paired_steps_seen = 0;
    char out[256];
    snprintf(out, sizeof out, "%s/paired.out", dir);
    fflush(stdout);
    int saved = dup(1);
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    dup2(fileno(f), 1);
    char *argv[] = {"x", "--repeat", "4", (char *)p, NULL};
    npass = 0;
    int rc = replay_cli_paired(4, argv, &ta, &tb);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(f);
    cr_assert_eq(rc, 0);
    pass_order[npass] = '\0';
    /* warm-up A, warm-up B, then A B, B A, A B, B A */
    cr_assert_str_eq(pass_order, "ABABBAABBA");
    cr_assert(a.opened == 1 && a.closed == 1 && b.opened == 1 && b.closed == 1);
    cr_assert(a.c.live == 0 && b.c.live == 0);
    cr_assert_eq(paired_steps_seen, 5, "B's step end in its warm-up and 4 timed passes");
    char text[2048] = {0};
    f = fopen(out, "r");
    cr_assert_not_null(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    cr_assert(got > 0);
    char *l2 = strchr(text, '\n');
    cr_assert_not_null(l2);
    *l2++ = '\0';
    cr_assert_not_null(strstr(text, "\"allocator\": \"alpha\""), "%s", text);
    cr_assert_not_null(strstr(text, "\"paired_with\": \"beta\""), "%s", text);
    cr_assert_not_null(strstr(text, "\"paired_ratio\": "), "%s", text);
    cr_assert_not_null(strstr(text, "\"frag\": 1"), "600 / 600 live: %s", text);
    cr_assert_not_null(strstr(l2, "\"allocator\": \"beta\""), "%s", l2);
    cr_assert_not_null(strstr(l2, "\"paired_with\": \"alpha\""), "%s", l2);
    cr_assert_not_null(strstr(l2, "\"frag\": 2"), "1200 / 600 live: %s", l2);
    /* without a second target: one line, no pairing keys */
    f = fopen(out, "w");
    saved = dup(1);
    dup2(fileno(f), 1);
    char *argv1[] = {"x", "--repeat", "2", (char *)p, NULL};
    rc = replay_cli(4, argv1, &ta);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(f);
    cr_assert_eq(rc, 0);
    f = fopen(out, "r");
    got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    fclose(f);
    cr_assert_null(strstr(text, "paired"), "%s", text);
    cr_assert_eq(strchr(text, '\n'), text + got - 1, "one line: %s", text);
}

Test(trace, median)
{
    double a[] = {5, 1, 4};
    cr_assert_float_eq(replay_median(a, 3), 4.0, 1e-12);
    double b[] = {8, 2, 4, 6};
    cr_assert_float_eq(replay_median(b, 4), 5.0, 1e-12);
}

/* Through libvmem on the sim backend: every block comes back, the arena
 * checks out after every event. */
static void *vm_alloc(void *ctx, size_t size) { return vmem_alloc(ctx, size); }
static void vm_free(void *ctx, void *p) { cr_assert_eq(vmem_free(ctx, p), VMEM_OK); }
static void vm_check(void *octx, size_t i)
{
    cr_assert_eq(vmem_check(octx), VMEM_OK, "after event %zu", i);
}

Test(trace, replay_through_libvmem)
{
    char text[40000];
    size_t n = 0;
    unsigned seed = 7;
    for (int i = 0; i < 600; i++) {
        seed = seed * 1103515245u + 12345u;
        n += (size_t)snprintf(text + n, sizeof text - n, "a %d %u 0 %d\n", i,
                              1u + (seed >> 8) % (80u << 20), i);
        if (i >= 20)
            n += (size_t)snprintf(text + n, sizeof text - n, "f %d %d\n", i - 20, i);
    }
    const char *p = write_trace("v.txt.gz", text, 1);
    trace_t t;
    char err[256];
    cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.sim_capacity = (size_t)8 << 30;
    vmem_t *v;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    replay_ops_t ops = {.ctx = v, .alloc = vm_alloc, .free = vm_free};
    void **ptrs = calloc(t.nslots, sizeof *ptrs);
    uint64_t failed = 1;
    replay_pass(&t, &ops, ptrs, &failed, vm_check, v);
    cr_assert_eq(failed, 0);
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    cr_assert_eq(s.device_in_use, 0);
    cr_assert_geq(s.device_peak_held, t.peak_live);
    cr_assert_eq(s.allocs, t.nallocs);
    free(ptrs);
    vmem_destroy(v);
    trace_free(&t);
}

/* ------------------------------------------------------------------------ */
/* Step boundaries (steps.c)                                                */
/* ------------------------------------------------------------------------ */

TestSuite(steps, .init = setup, .fini = teardown);

Test(steps, period_of_a_repeating_tail_after_a_prefix)
{
    /* A prefix of 37 keys, then 5 repetitions of a 20-key step. */
    unsigned long long k[37 + 100];
    size_t n = 0;
    for (int i = 0; i < 37; i++)
        k[n++] = 1000 + (unsigned long long)i * 7;
    for (int r = 0; r < 5; r++)
        for (int i = 0; i < 20; i++)
            k[n++] = (unsigned long long)(i % 6) + 1; /* repeats inside the step too */
    size_t reps = 0;
    size_t p = steps_period(k, n, &reps);
    /* The smallest period covering the longest repeating run: the step's
     * own inner structure (i % 6 over 20 keys) does not repeat exactly. */
    cr_assert_eq(p, 20, "period %zu", p);
    cr_assert_eq(reps, 5);
}

Test(steps, no_period_and_short_runs_are_not_steps)
{
    unsigned long long k[200];
    for (int i = 0; i < 200; i++)
        k[i] = (unsigned long long)i * 2654435761ull; /* all different */
    size_t reps = 7;
    cr_assert_eq(steps_period(k, 200, &reps), 0);
    cr_assert_eq(reps, 0);
    /* A run of equal keys at the end (period 1) is not a step. */
    for (int i = 180; i < 200; i++)
        k[i] = 42;
    cr_assert_eq(steps_period(k, 200, &reps), 0);
    /* Too short to hold two steps of the smallest size. */
    cr_assert_eq(steps_period(k, 10, &reps), 0);
}

Test(steps, marks_win_and_boundaries_fall_before_a_step_s_first_allocation)
{
    trace_t t;
    char err[256];
    /* 's' lines: boundaries at the events after them. */
    const char *p = write_trace("marks.txt.gz", "a 1 256 0 1\nf 1 2\ns 3\na 2 256 0 4\nf 2 5\ns 6\n"
                                                "a 3 512 0 7\n", 1);
    cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
    size_t *b = NULL;
    steps_source_t src;
    size_t n = trace_steps(&t, &b, &src);
    cr_assert_eq(src, STEPS_MARKS);
    cr_assert_eq(n, 2);
    cr_assert_eq(b[0], 2);
    cr_assert_eq(b[1], 4);
    free(b);
    trace_free(&t);

    /* Without marks: a setup allocation, then 3 steps of 8 allocations
     * (each freed at once): boundaries before each step's first one. */
    char text[8192];
    size_t len = 0;
    unsigned id = 1, ts = 1;
    len += (size_t)snprintf(text + len, sizeof text - len, "a %u 999424 0 %u\n", id++, ts++);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 8; i++) {
            len += (size_t)snprintf(text + len, sizeof text - len, "a %u %d 0 %u\nf %u %u\n", id,
                                    256 * (i + 1), ts, id, ts + 1);
            id++;
            ts += 2;
        }
    p = write_trace("found.txt.gz", text, 1);
    cr_assert_eq(trace_load(p, &t, err, sizeof err), 0, "%s", err);
    n = trace_steps(&t, &b, &src);
    cr_assert_eq(src, STEPS_FOUND);
    cr_assert_eq(n, 3);
    cr_assert_eq(b[0], 1);      /* after the setup allocation */
    cr_assert_eq(b[1], 1 + 16); /* 8 allocations and 8 frees per step */
    cr_assert_eq(b[2], 1 + 32);
    free(b);
    trace_free(&t);
}
