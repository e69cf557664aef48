/*
 * Hostile input against the public API (issue 16): every failure is said
 * (an event, a log line, a status naming the input), numbers in the
 * environment are parsed one documented way, out-of-range settings name the
 * variable and the range.  Criterion runs each test in its own process, so
 * setenv stays local.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"


static log_capture_t cap = LOG_CAPTURE_INIT;

static void clean_env(void)
{
    env_unset_all();
    capture_reset(&cap);
    vmem_set_log(capture_log, &cap, VMEM_LOG_WARN);
}

TestSuite(hostile, .init = clean_env, .timeout = 30);

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct seen {
    int n;
    vmem_event_t last;
} seen_t;

static void on_event(void *ctx, const vmem_event_t *ev)
{
    seen_t *s = ctx;
    s->n++;
    s->last = *ev;
}

/* VMEM_EVENT_ALLOC_FAILED is "an allocation returned NULL": a zero size and
 * a size whose rounding overflows return NULL too (they were counted as
 * failures but fired no event). */
Test(hostile, alloc_failed_fires_for_bad_sizes)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 0, 0, &cap);
    vmem_t *v = create_or_die(&cfg);
    seen_t s = {0};
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_ALLOC_FAILED, on_event, &s), VMEM_OK);
    const size_t sizes[] = {0, SIZE_MAX, SIZE_MAX - 100};
    for (int i = 0; i < 3; i++) {
        cr_assert_null(vmem_alloc(v, sizes[i]));
        cr_assert_eq(vmem_last_status(), VMEM_ERR_SIZE);
        cr_assert_eq(s.n, i + 1, "size %zu: no ALLOC_FAILED event", sizes[i]);
        cr_assert_eq(s.last.kind, VMEM_EVENT_ALLOC_FAILED);
        cr_assert_eq(s.last.size, sizes[i]);
        cr_assert_eq(s.last.status, VMEM_ERR_SIZE);
    }
    cr_assert_eq(stats_of(v).failures, 3);
    vmem_destroy(v);
}

/* The same in a tag's arena (vmem_alloc_tagged, or vmem_alloc with the
 * thread's tag set): a NULL fires ALLOC_FAILED and counts as a failure, a
 * spill fires SPILL.  Tagged allocations fired no event at all, and a bad
 * size or a paused tag was not counted. */
Test(hostile, tagged_allocations_fire_events)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, 64 * MiB, 0, 128 * MiB, &cap);
    vmem_t *v = create_or_die(&cfg);
    seen_t failed = {0}, spilled = {0};
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_ALLOC_FAILED, on_event, &failed), VMEM_OK);
    cr_assert_eq(vmem_set_callback(v, VMEM_EVENT_SPILL, on_event, &spilled), VMEM_OK);
    uint64_t failures = stats_of(v).failures;
    const size_t bad[] = {0, SIZE_MAX};
    for (int i = 0; i < 2; i++) {
        cr_assert_null(vmem_alloc_tagged(v, bad[i], 3));
        cr_assert_eq(vmem_last_status(), VMEM_ERR_SIZE);
        cr_assert_eq(failed.n, i + 1, "size %zu in tag 3: no ALLOC_FAILED event", bad[i]);
        cr_assert_eq(failed.last.size, bad[i]);
        cr_assert_eq(failed.last.status, VMEM_ERR_SIZE);
        cr_assert_eq(stats_of(v).failures, ++failures, "size %zu in tag 3: not counted", bad[i]);
    }
    /* 80 MiB does not fit under the 64 MiB limit: host memory of the tag */
    void *h = vmem_alloc_tagged(v, 80 * MiB, 3);
    cr_assert_not_null(h, "%s", vmem_strerror(vmem_last_status()));
    cr_assert_eq(spilled.n, 1, "a spill in tag 3: no SPILL event");
    cr_assert_eq(spilled.last.kind, VMEM_EVENT_SPILL);
    cr_assert_eq(spilled.last.size, 80 * MiB);
    /* neither device nor host room: NOMEM, through the thread's tag */
    cr_assert_eq(vmem_set_tag(v, 3, NULL), VMEM_OK);
    cr_assert_null(vmem_alloc(v, 100 * MiB));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_NOMEM);
    cr_assert_eq(failed.n, 3, "NOMEM in the thread's tag: no ALLOC_FAILED event");
    cr_assert_eq(failed.last.status, VMEM_ERR_NOMEM);
    cr_assert_eq(stats_of(v).failures, ++failures);
    /* a paused tag: BUSY */
    cr_assert_eq(vmem_pause(v, 4, VMEM_PAUSE_DISCARD), VMEM_OK);
    cr_assert_null(vmem_alloc_tagged(v, 4096, 4));
    cr_assert_eq(vmem_last_status(), VMEM_ERR_BUSY);
    cr_assert_eq(failed.n, 4, "a paused tag: no ALLOC_FAILED event");
    cr_assert_eq(failed.last.status, VMEM_ERR_BUSY);
    cr_assert_eq(stats_of(v).failures, ++failures, "a paused tag: not counted");
    cr_assert_eq(spilled.n, 1);
    cr_assert_eq(vmem_free(v, h), VMEM_OK);
    CHECK_VMEM(v, "tagged events");
    vmem_destroy(v);
}

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

/* NaN passed every range check (comparisons with NaN are false) and meant
 * "no faults" in silence. */
Test(hostile, nan_fail_rate_rejected)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 0, 0, &cap);
    cfg.sim_fail_rate = NAN;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cr_assert_null(v);
    cr_assert_not_null(strstr(cap.last, "sim_fail_rate"), "log: %s", cap.last);
    cfg.sim_fail_rate = INFINITY;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_ERR_INVALID);
}

/* An out-of-range simulated capacity names the field (or the variable) and
 * the allowed range; it was "backend sim: invalid argument". */
Test(hostile, sim_capacity_range_is_named)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 0, 0, &cap);
    cfg.sim_capacity = (size_t)17 << 40;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_ERR_INVALID);
    cr_assert_not_null(strstr(cap.last, "sim_capacity"), "log: %s", cap.last);
    cr_assert_not_null(strstr(cap.last, "2 MiB to 16 TiB"), "log: %s", cap.last);

    const char *bad[] = {"17T", "1M", "18014398509481984"};
    for (int i = 0; i < 3; i++) {
        setenv("VMEM_BACKEND", "sim", 1);
        setenv("VMEM_SIM_CAPACITY", bad[i], 1);
        capture_reset(&cap);
        cr_assert_eq(vmem_create(NULL, &v), VMEM_ERR_ENV, "VMEM_SIM_CAPACITY=%s", bad[i]);
        cr_assert_eq(capture_lines(&cap), 1);
        cr_assert_not_null(strstr(cap.last, "VMEM_SIM_CAPACITY"), "log: %s", cap.last);
        cr_assert_not_null(strstr(cap.last, "2 MiB to 16 TiB"), "log: %s", cap.last);
    }
    setenv("VMEM_SIM_CAPACITY", "16T", 1);
    setenv("VMEM_LIMIT", "1G", 1);
    cr_assert_eq(vmem_create(NULL, &v), VMEM_OK, "16T is the top of the range");
    vmem_destroy(v);
}

/* VMEM_START_CAP below VMEM_LIMIT is an environment error naming both (it
 * was VMEM_ERR_INVALID from vmem_create). */
Test(hostile, start_cap_below_limit_is_an_env_error)
{
    setenv("VMEM_BACKEND", "sim", 1);
    setenv("VMEM_LIMIT", "2G", 1);
    setenv("VMEM_START_CAP", "1G", 1);
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cr_assert_eq(vmem_config_from_env(&cfg), VMEM_ERR_ENV);
    cr_assert_eq(cfg.limit, 0, "cfg unchanged on error");
    cr_assert_not_null(strstr(cap.last, "VMEM_START_CAP"), "log: %s", cap.last);
    cr_assert_not_null(strstr(cap.last, "VMEM_LIMIT"), "log: %s", cap.last);
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(NULL, &v), VMEM_ERR_ENV);
    /* one of the two from the caller's config, the other from the
     * environment: still the environment's error */
    unsetenv("VMEM_LIMIT");
    vmem_config_init(&cfg);
    cfg.limit = 4 * GiB;
    cr_assert_eq(vmem_config_from_env(&cfg), VMEM_ERR_ENV);
    setenv("VMEM_START_CAP", "2G", 1);
    setenv("VMEM_LIMIT", "2G", 1);
    cr_assert_eq(vmem_create(NULL, &v), VMEM_OK, "equal is allowed");
    vmem_destroy(v);
}

/* VMEM_SIM_FAIL_RATE: a decimal number from 0 to 1, with an optional
 * exponent; no blanks, no hex, no inf/nan.  A value too small to represent
 * is a probability of 0 (it was rejected while hex was accepted). */
Test(hostile, fail_rate_parsing_is_one_way)
{
    static const struct { const char *text; double want; } good[] = {
        {"0", 0}, {"1", 1}, {"0.25", 0.25}, {".5", 0.5}, {"1e-3", 1e-3}, {"2.5E-1", 0.25},
        {"1e-400", 0}, {"1.0", 1}, {"0.000", 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        vmem_config_t cfg;
        vmem_config_init(&cfg);
        setenv("VMEM_SIM_FAIL_RATE", good[i].text, 1);
        cr_assert_eq(vmem_config_from_env(&cfg), VMEM_OK, "\"%s\" rejected: %s", good[i].text,
                     cap.last);
        cr_assert_eq(cfg.sim_fail_rate, good[i].want, "\"%s\"", good[i].text);
    }
    static const char *bad[] = {"0x1p-2", " 0.5", "0.5 ", "+0.5", "-0", "nan", "inf", "1.5",
                                "1e400", "", "5e", "0.5%", "1,0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vmem_config_t cfg;
        vmem_config_init(&cfg);
        setenv("VMEM_SIM_FAIL_RATE", bad[i], 1);
        capture_reset(&cap);
        cr_assert_eq(vmem_config_from_env(&cfg), VMEM_ERR_ENV, "\"%s\" accepted", bad[i]);
        cr_assert_not_null(strstr(cap.last, "VMEM_SIM_FAIL_RATE"), "log: %s", cap.last);
    }
}

/* ------------------------------------------------------------------------ */
/* Adapters and the log                                                     */
/* ------------------------------------------------------------------------ */

/* vmem.h: the adapters' malloc "returns NULL for size 0 and on failure
 * (logged)": a bad device ordinal returned NULL without a line. */
Test(hostile, adapter_bad_ordinal_is_logged)
{
    static const int ordinals[] = {-1, 64, 1 << 30};
    for (int i = 0; i < 3; i++) {
        capture_reset(&cap);
        cr_assert_null(vmem_torch_malloc(256, ordinals[i], NULL));
        cr_assert_eq(capture_lines(&cap), 1, "torch, device %d: no log line", ordinals[i]);
        cr_assert_not_null(strstr(cap.last, "device ordinal"), "log: %s", cap.last);
        capture_reset(&cap);
        cr_assert_null(vmem_cupy_malloc(NULL, 256, ordinals[i]));
        cr_assert_eq(capture_lines(&cap), 1, "cupy, device %d: no log line", ordinals[i]);
        capture_reset(&cap);
        vmem_t *v = (vmem_t *)&cap;
        cr_assert_eq(vmem_instance_ex(ordinals[i], &v), VMEM_ERR_INVALID);
        cr_assert_eq(capture_lines(&cap), 1, "vmem_instance_ex(%d): no log line", ordinals[i]);
        cr_assert_eq(v, (vmem_t *)&cap, "out-parameter untouched");
    }
}

/* Messages reach the sink with control characters and invalid UTF-8
 * escaped (\xNN); valid UTF-8 passes unchanged. */
Test(hostile, log_escapes_what_a_terminal_would_obey)
{
    const char *path = "/tmp/\x1b[2J\xff\xc3(caf\xc3\xa9\n";
    setenv("VMEM_CONTROL_FILE", path, 1);
    setenv("VMEM_LIMIT", "lots", 1);
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cr_assert_eq(vmem_config_from_env(&cfg), VMEM_ERR_ENV);
    cr_assert_not_null(strstr(cap.last, "lots"), "log: %s", cap.last);
    unsetenv("VMEM_LIMIT");
    setenv("VMEM_LOG_LEVEL", path, 1);
    capture_reset(&cap);
    cr_assert_eq(vmem_config_from_env(&cfg), VMEM_ERR_ENV);
    cr_assert_not_null(strstr(cap.last, "/tmp/\\x1b[2J\\xff\\xc3(caf\xc3\xa9\\x0a"), "log: %s",
                       cap.last);
}
