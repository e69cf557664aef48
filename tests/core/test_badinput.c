/*
 * Bad input: each case returns its documented status, logs exactly one
 * line, leaves vmem_check passing and changes no statistic except the
 * counter of rejected calls.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static log_capture_t global_cap = LOG_CAPTURE_INIT;

static void capture_global(void)
{
    capture_reset(&global_cap);
    vmem_set_log(capture_log, &global_cap, VMEM_LOG_WARN);
}

TestSuite(badinput, .init = capture_global, .timeout = 30);

/* ------------------------------------------------------------------------ */
/* NULL handle                                                              */
/* ------------------------------------------------------------------------ */

/* Runs `call`, expects status `want` and exactly one logged line. */
#define EXPECT_ONE_LINE(cap, call, want)                                                       \
    do {                                                                                       \
        capture_reset(cap);                                                                    \
        vmem_status_t got_ = (call);                                                           \
        cr_expect_eq(got_, (want), "%s returned %d (%s), expected %d", #call, (int)got_,       \
                     vmem_strerror(got_), (int)(want));                                        \
        cr_expect_eq(capture_lines(cap), 1, "%s logged %u lines, expected 1", #call,           \
                     capture_lines(cap));                                                      \
    } while (0)

static void on_event(void *ctx, const vmem_event_t *ev)
{
    (void)ctx;
    (void)ev;
}

static vmem_status_t alloc_status(void *p)
{
    cr_expect_null(p);
    return vmem_last_status();
}

Test(badinput, null_handle_every_entry_point)
{
    log_capture_t *c = &global_cap;
    int x = 0;
    size_t sz = 0;
    vmem_ptr_info_t info;
    vmem_stats_t st = {.size = sizeof st};
    vmem_allocator_t va;
    char buf[64];
    EXPECT_ONE_LINE(c, alloc_status(vmem_alloc(NULL, 64)), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, alloc_status(vmem_alloc_stream(NULL, 64, NULL)), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_free(NULL, &x), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_free_stream(NULL, &x, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_set_limit(NULL, MiB, &sz), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_set_limit_ex(NULL, MiB, VMEM_LIMIT_FORCE, &sz), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_get_limit(NULL, &sz), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_set_host_limit(NULL, MiB), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_set_host_fallback(NULL, 1), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_trim(NULL, &sz), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_step_end(NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_ptr_info(NULL, &x, &info), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_get_stats(NULL, &st), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_stats_json(NULL, buf, sizeof buf, &sz), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_check(NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_set_callback(NULL, VMEM_EVENT_SPILL, on_event, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_inject_faults(NULL, VMEM_ARENA_DEVICE, 1, 0, 0), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_get_allocator(NULL, &va), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_create(NULL, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(c, vmem_config_from_env(NULL), VMEM_ERR_INVALID);
    cr_expect_eq(sz, 0, "out-parameters untouched");
    /* vmem_destroy(NULL) is a documented no-op, so is vmem_config_init(NULL). */
    capture_reset(c);
    vmem_destroy(NULL);
    vmem_config_init(NULL);
    cr_expect_eq(capture_lines(c), 0);
}

Test(badinput, null_out_parameters)
{
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 16 * MiB, 16 * MiB, &cap);
    vmem_t *v = create_or_die(&cfg);
    void *p = vmem_alloc(v, 100);
    cr_assert_not_null(p);
    vmem_stats_t before = stats_of(v);
    EXPECT_ONE_LINE(&cap, vmem_get_limit(v, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_ptr_info(v, p, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_get_stats(v, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_get_allocator(v, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_stats_json(v, NULL, 16, NULL), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_set_callback(v, (vmem_event_kind_t)0, on_event, NULL),
                    VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_set_callback(v, (vmem_event_kind_t)99, on_event, NULL),
                    VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_inject_faults(v, VMEM_ARENA_DEVICE, 0, 2.0, 0), VMEM_ERR_INVALID);
    EXPECT_ONE_LINE(&cap, vmem_inject_faults(v, (vmem_arena_kind_t)5, 1, 0, 0), VMEM_ERR_INVALID);
    vmem_stats_t tiny = {.size = 4};
    EXPECT_ONE_LINE(&cap, vmem_get_stats(v, &tiny), VMEM_ERR_INVALID);
    CHECK_VMEM(v, "NULL out-parameters");
    vmem_stats_t after = stats_of(v);
    /* the held-but-unused integral grows with time alone */
    before.device_unused_byte_seconds = after.device_unused_byte_seconds = 0;
    before.device_unused_mean = after.device_unused_mean = 0;
    cr_assert_eq(memcmp(&before, &after, sizeof before), 0, "statistics changed");
    cr_assert_eq(vmem_free(v, p), VMEM_OK);
    vmem_destroy(v);
}

/* ------------------------------------------------------------------------ */
/* Bad configurations                                                       */
/* ------------------------------------------------------------------------ */

Test(badinput, bad_configs_rejected)
{
    log_capture_t *c = &global_cap;
    vmem_t *v = NULL;
    vmem_config_t cfg;
    memset(&cfg, 0, sizeof cfg); /* not initialised with vmem_config_init */
    EXPECT_ONE_LINE(c, vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 0, NULL);
    cfg.backend = (vmem_backend_kind_t)42;
    EXPECT_ONE_LINE(c, vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 0, NULL);
    cfg.sim_fail_rate = 1.5;
    EXPECT_ONE_LINE(c, vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 0, NULL);
    cfg.device = -1;
    EXPECT_ONE_LINE(c, vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 0, NULL);
    cfg.sim_capacity = 4096; /* smaller than one granule */
    EXPECT_ONE_LINE(c, vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cr_assert_null(v, "out-parameter untouched");
}

/* ------------------------------------------------------------------------ */
/* Frees and sizes on a live instance                                       */
/* ------------------------------------------------------------------------ */

typedef struct bad_fixture {
    log_capture_t cap;
    vmem_t *v;
    char *a, *b, *c; /* three adjacent live blocks */
    char *h;         /* a block spilled to the host */
} bad_fixture_t;

static bad_fixture_t F = {.cap = LOG_CAPTURE_INIT};

static void bad_open(void)
{
    capture_global();
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 4 * MiB, 16 * MiB, 64 * MiB, &F.cap);
    F.v = create_or_die(&cfg);
    F.a = vmem_alloc(F.v, 4 * KiB);
    F.b = vmem_alloc(F.v, 4 * KiB);
    F.c = vmem_alloc(F.v, 4 * KiB);
    cr_assert(F.a && F.b && F.c);
    cr_assert(F.b == F.a + 4 * KiB && F.c == F.b + 4 * KiB, "setup: adjacent blocks");
    F.h = vmem_alloc(F.v, 4 * MiB);
    cr_assert_not_null(F.h);
    cr_assert_eq(location_of(F.v, F.h), VMEM_LOC_HOST, "setup: spilled block");
    capture_reset(&F.cap);
}

static void bad_close(void)
{
    vmem_destroy(F.v);
    F.v = NULL;
}

TestSuite(badfree, .init = bad_open, .fini = bad_close, .timeout = 30);

/* The statistics may differ only in the counter named. */
static void assert_only_counter_changed(const vmem_stats_t *before, const vmem_stats_t *after,
                                        int bad_frees, int failures)
{
    vmem_stats_t x = *before, y = *after;
    cr_assert_eq(y.bad_frees, x.bad_frees + (uint64_t)bad_frees, "bad_frees %llu -> %llu",
                 (unsigned long long)x.bad_frees, (unsigned long long)y.bad_frees);
    cr_assert_eq(y.failures, x.failures + (uint64_t)failures, "failures %llu -> %llu",
                 (unsigned long long)x.failures, (unsigned long long)y.failures);
    x.bad_frees = y.bad_frees = 0;
    x.failures = y.failures = 0;
    /* the held-but-unused integral grows with time alone */
    x.device_unused_byte_seconds = y.device_unused_byte_seconds = 0;
    x.device_unused_mean = y.device_unused_mean = 0;
    cr_assert_eq(memcmp(&x, &y, sizeof x), 0, "a statistic other than the counters changed");
}

/* A rejected free: status, one log line, check passes, only bad_frees moves. */
static void expect_bad_free(void *p, vmem_status_t want, const char *what)
{
    vmem_stats_t before = stats_of(F.v);
    capture_reset(&F.cap);
    vmem_status_t st = vmem_free(F.v, p);
    cr_assert_eq(st, want, "%s: vmem_free returned %s, expected %s", what, vmem_strerror(st),
                 vmem_strerror(want));
    cr_assert_eq(capture_lines(&F.cap), 1, "%s: %u log lines", what, capture_lines(&F.cap));
    cr_assert_geq(F.cap.last_level, VMEM_LOG_WARN);
    CHECK_VMEM(F.v, "%s", what);
    vmem_stats_t after = stats_of(F.v);
    assert_only_counter_changed(&before, &after, 1, 0);
}

/* A rejected allocation: NULL, vmem_last_status, one line, only failures. */
static void expect_bad_alloc(size_t size, vmem_status_t want)
{
    vmem_stats_t before = stats_of(F.v);
    capture_reset(&F.cap);
    void *p = vmem_alloc(F.v, size);
    cr_assert_null(p, "vmem_alloc(%zu) succeeded", size);
    cr_assert_eq(vmem_last_status(), want, "vmem_alloc(%zu): %s, expected %s", size,
                 vmem_strerror(vmem_last_status()), vmem_strerror(want));
    cr_assert_eq(capture_lines(&F.cap), 1, "vmem_alloc(%zu): %u log lines", size,
                 capture_lines(&F.cap));
    CHECK_VMEM(F.v, "vmem_alloc(%zu)", size);
    vmem_stats_t after = stats_of(F.v);
    assert_only_counter_changed(&before, &after, 0, 1);
}

Test(badfree, foreign_pointers)
{
    int on_stack = 0;
    expect_bad_free(&on_stack, VMEM_ERR_FOREIGN_PTR, "stack pointer");
    void *m = malloc(4096);
    cr_assert_not_null(m);
    expect_bad_free(m, VMEM_ERR_FOREIGN_PTR, "malloc pointer");
    free(m);
    expect_bad_free(F.b + 256, VMEM_ERR_FOREIGN_PTR, "aligned pointer inside a live block");
    expect_bad_free(F.b + 1, VMEM_ERR_FOREIGN_PTR, "unaligned pointer inside a live block");
    expect_bad_free(F.h + 4096, VMEM_ERR_FOREIGN_PTR, "pointer inside a live host block");
    expect_bad_free((void *)(uintptr_t)0x1000, VMEM_ERR_FOREIGN_PTR, "small integer");
    /* The blocks are intact and still free normally. */
    cr_assert_eq(vmem_free(F.v, F.b), VMEM_OK);
    cr_assert_eq(vmem_free(F.v, F.h), VMEM_OK);
}

Test(badfree, double_free_between_live_blocks)
{
    cr_assert_eq(vmem_free(F.v, F.b), VMEM_OK);
    CHECK_VMEM(F.v, "first free");
    expect_bad_free(F.b, VMEM_ERR_DOUBLE_FREE, "second free of a fenced block");
    /* The hole is reused normally afterwards. */
    char *again = vmem_alloc(F.v, 4 * KiB);
    cr_assert_eq(again, F.b, "the freed hole should be reused");
    CHECK_VMEM(F.v, "reuse");
}

Test(badfree, double_free_after_coalescing)
{
    cr_assert_eq(vmem_free(F.v, F.a), VMEM_OK);
    cr_assert_eq(vmem_free(F.v, F.b), VMEM_OK); /* merges into a's chunk */
    CHECK_VMEM(F.v, "two frees");
    expect_bad_free(F.b, VMEM_ERR_DOUBLE_FREE, "second free of a coalesced block");
    expect_bad_free(F.a, VMEM_ERR_DOUBLE_FREE, "second free of the chunk's first block");
}

Test(badfree, double_free_on_host)
{
    cr_assert_eq(vmem_free(F.v, F.h), VMEM_OK);
    expect_bad_free(F.h, VMEM_ERR_DOUBLE_FREE, "second free of a host block");
}

Test(badfree, free_after_region_released)
{
    cr_assert_eq(vmem_free(F.v, F.a), VMEM_OK);
    cr_assert_eq(vmem_free(F.v, F.b), VMEM_OK);
    cr_assert_eq(vmem_free(F.v, F.c), VMEM_OK);
    size_t released = 0;
    cr_assert_eq(vmem_trim(F.v, &released), VMEM_OK);
    cr_assert_gt(released, 0);
    cr_assert_eq(stats_of(F.v).device_held, 0, "setup: the region is gone");
    /* The library cannot tell this from a foreign pointer any more: either
     * status is an error, and nothing changes. */
    vmem_stats_t before = stats_of(F.v);
    capture_reset(&F.cap);
    vmem_status_t st = vmem_free(F.v, F.b);
    cr_assert(st == VMEM_ERR_FOREIGN_PTR || st == VMEM_ERR_DOUBLE_FREE, "got %s",
              vmem_strerror(st));
    cr_assert_eq(capture_lines(&F.cap), 1);
    CHECK_VMEM(F.v, "free after release");
    vmem_stats_t after = stats_of(F.v);
    assert_only_counter_changed(&before, &after, 1, 0);
}

Test(badfree, bad_sizes)
{
    expect_bad_alloc(0, VMEM_ERR_SIZE);
    expect_bad_alloc(SIZE_MAX, VMEM_ERR_SIZE);
    expect_bad_alloc(SIZE_MAX - 100, VMEM_ERR_SIZE);
    expect_bad_alloc(SIZE_MAX - 254, VMEM_ERR_SIZE);
    /* Roundable but larger than anything: device and host both refuse. */
    expect_bad_alloc(SIZE_MAX - 255, VMEM_ERR_NOMEM);
    expect_bad_alloc((size_t)1 << 63, VMEM_ERR_NOMEM);
    expect_bad_alloc(SIZE_MAX / 3, VMEM_ERR_NOMEM);
    expect_bad_alloc(65 * MiB, VMEM_ERR_NOMEM);
    /* The stream variant the same way. */
    capture_reset(&F.cap);
    cr_assert_null(vmem_alloc_stream(F.v, 0, NULL));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_SIZE);
    cr_assert_eq(capture_lines(&F.cap), 1);
    /* A good allocation still works. */
    void *p = vmem_alloc(F.v, 4 * KiB);
    cr_assert_not_null(p);
    cr_assert_eq(vmem_last_status(), VMEM_OK);
}

Test(badfree, destroy_with_live_blocks_warns)
{
    capture_reset(&F.cap);
    vmem_destroy(F.v);
    F.v = NULL;
    cr_assert_eq(capture_lines(&F.cap), 1, "destroy with 4 live blocks: %u lines",
                 capture_lines(&F.cap));
    cr_assert_not_null(strstr(F.cap.last, "4"), "the count of live blocks: \"%s\"", F.cap.last);
}
