/*
 * Configuration and the vtable allocator: vmem_parse_size, the VMEM_*
 * environment (vmem_config_from_env, vmem_create(NULL)), vmem_get_allocator.
 * Criterion runs each test in its own process, so setenv stays local.
 */
#include <criterion/criterion.h>
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

TestSuite(config, .init = clean_env, .timeout = 30);

/* ------------------------------------------------------------------------ */
/* vmem_parse_size                                                          */
/* ------------------------------------------------------------------------ */

Test(config, parse_size_accepts)
{
    static const struct { const char *text; size_t want; } ok[] = {
        {"0", 0},
        {"1", 1},
        {"123456789", 123456789},
        {"1K", 1024},
        {"1k", 1024},
        {"2M", 2 * MiB},
        {"8G", 8 * GiB},
        {"1T", (size_t)1 << 40},
        {"3KiB", 3 * KiB},
        {"5MB", 5 * MiB},
        {"7gb", 7 * GiB},
        {" 64M", 64 * MiB},
        {"64M ", 64 * MiB},
        {"18446744073709551615", SIZE_MAX},
        {"16777215T", (size_t)16777215 << 40},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t got = 12345;
        vmem_status_t st = vmem_parse_size(ok[i].text, &got);
        cr_assert_eq(st, VMEM_OK, "\"%s\": %s", ok[i].text, vmem_strerror(st));
        cr_assert_eq(got, ok[i].want, "\"%s\" -> %zu, expected %zu", ok[i].text, got, ok[i].want);
    }
}

Test(config, parse_size_rejects)
{
    static const char *bad[] = {
        "", " ", "lots", "-5", "+5", "1.5G", "1X", "G", "1 G", "1KK", "1Ki", "0x10",
        "18446744073709551616", "16777216T", "17179869184G", "1e9", "5 5",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t got = 12345;
        vmem_status_t st = vmem_parse_size(bad[i], &got);
        cr_assert_eq(st, VMEM_ERR_PARSE, "\"%s\" accepted as %zu", bad[i], got);
        cr_assert_eq(got, 12345, "\"%s\": out-parameter changed", bad[i]);
    }
    size_t got = 0;
    cr_assert_eq(vmem_parse_size(NULL, &got), VMEM_ERR_PARSE);
    cr_assert_eq(vmem_parse_size("1", NULL), VMEM_ERR_PARSE);
}

/* ------------------------------------------------------------------------ */
/* The environment                                                          */
/* ------------------------------------------------------------------------ */

Test(config, env_limit_parsed)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    setenv("VMEM_LIMIT", "8G", 1);
    setenv("VMEM_HOST_LIMIT", "512M", 1);
    setenv("VMEM_BACKEND", "sim-vmm", 1);
    setenv("VMEM_HOST_FALLBACK", "0", 1);
    setenv("VMEM_SIM_CAPACITY", "16G", 1);
    cr_assert_eq(vmem_config_from_env(&cfg), VMEM_OK);
    cr_assert_eq(cfg.limit, 8 * GiB);
    cr_assert_eq(cfg.host_limit, 512 * MiB);
    cr_assert_eq(cfg.backend, VMEM_BACKEND_SIM_VMM);
    cr_assert_eq(cfg.host_fallback, 0);
    cr_assert_eq(cfg.sim_capacity, 16 * GiB);
    cr_assert_eq(cfg.size, sizeof cfg);
    cr_assert_eq(capture_lines(&cap), 0);
}

Test(config, env_unset_leaves_defaults)
{
    vmem_config_t cfg, def;
    vmem_config_init(&cfg);
    vmem_config_init(&def);
    cr_assert_eq(vmem_config_from_env(&cfg), VMEM_OK);
    cr_assert_eq(memcmp(&cfg, &def, sizeof cfg), 0);
}

/* A bad value: VMEM_ERR_ENV, the variable named in one log line, cfg as it
 * was (even where an earlier variable was good). */
static void expect_env_error(const char *name, const char *value)
{
    vmem_config_t cfg, copy;
    vmem_config_init(&cfg);
    cfg.limit = 77 * MiB;
    copy = cfg;
    setenv("VMEM_LIMIT", "1G", 1); /* valid, must not be applied either */
    setenv(name, value, 1);
    capture_reset(&cap);
    vmem_status_t st = vmem_config_from_env(&cfg);
    cr_assert_eq(st, VMEM_ERR_ENV, "%s=%s: %s", name, value, vmem_strerror(st));
    cr_assert_eq(memcmp(&cfg, &copy, sizeof cfg), 0, "%s=%s: cfg changed", name, value);
    cr_assert_eq(capture_lines(&cap), 1, "%s=%s: %u log lines", name, value, capture_lines(&cap));
    cr_assert_not_null(strstr(cap.last, name), "the log line should name %s: \"%s\"", name,
                       cap.last);
    unsetenv(name);
    unsetenv("VMEM_LIMIT");
}

Test(config, env_bad_values)
{
    expect_env_error("VMEM_LIMIT", "lots");
    expect_env_error("VMEM_LIMIT", "-5");
    expect_env_error("VMEM_LIMIT", "");
    expect_env_error("VMEM_BACKEND", "bogus");
    expect_env_error("VMEM_HOST_LIMIT", "1.5G");
    expect_env_error("VMEM_HOST_FALLBACK", "maybe");
    expect_env_error("VMEM_SIM_FAIL_RATE", "2");
    expect_env_error("VMEM_LOG_LEVEL", "loud");
}

Test(config, create_from_env)
{
    setenv("VMEM_BACKEND", "sim", 1);
    setenv("VMEM_LIMIT", "16M", 1);
    setenv("VMEM_START_CAP", "32M", 1);
    setenv("VMEM_HOST_LIMIT", "8M", 1);
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(NULL, &v), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_str_eq(s.backend, "sim");
    cr_assert_eq(s.limit, 16 * MiB);
    cr_assert_eq(s.start_cap, 32 * MiB);
    cr_assert_eq(s.host_limit, 8 * MiB);
    vmem_destroy(v);
}

Test(config, create_from_bad_env_fails)
{
    setenv("VMEM_BACKEND", "sim", 1);
    setenv("VMEM_LIMIT", "lots", 1);
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(NULL, &v), VMEM_ERR_ENV);
    cr_assert_null(v);
    cr_assert_geq(capture_lines(&cap), 1);
}

Test(config, explicit_config_ignores_env)
{
    setenv("VMEM_LIMIT", "lots", 1);
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 0, NULL);
    vmem_t *v = create_or_die(&cfg);
    cr_assert_eq(stats_of(v).limit, 16 * MiB);
    vmem_destroy(v);
}

Test(config, defaults)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 0, 0, 0, NULL);
    cfg.sim_capacity = 0;
    vmem_t *v = create_or_die(&cfg);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.limit, (size_t)80 << 30, "default limit: the simulated device's free memory");
    cr_assert_eq(s.start_cap, s.limit);
    cr_assert_eq(s.host_limit, (size_t)64 << 30, "default host limit: 64 GiB");
    cr_assert_eq(s.host_fallback, 1);
    vmem_destroy(v);
}

Test(config, names)
{
    cr_assert_str_eq(vmem_backend_name(VMEM_BACKEND_SIM), "sim");
    cr_assert_str_eq(vmem_backend_name(VMEM_BACKEND_SIM_VMM), "sim-vmm");
    cr_assert_str_eq(vmem_backend_name(VMEM_BACKEND_CUDA), "cuda");
    cr_assert_str_eq(vmem_backend_name(VMEM_BACKEND_VMM), "vmm");
    cr_assert_str_eq(vmem_backend_name((vmem_backend_kind_t)99), "?");
    for (int st = -13; st <= 1; st++) {
        const char *m = vmem_strerror((vmem_status_t)st);
        cr_assert(m && *m, "status %d has no name", st);
        if (st != 0)
            cr_assert_str_neq(m, vmem_strerror(VMEM_OK));
    }
    cr_assert_not_null(vmem_strerror((vmem_status_t)12345));
}

/* ------------------------------------------------------------------------ */
/* The vtable allocator                                                     */
/* ------------------------------------------------------------------------ */

Test(config, allocator_round_trip)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 32 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    vmem_allocator_t a;
    memset(&a, 0, sizeof a);
    cr_assert_eq(vmem_get_allocator(v, &a), VMEM_OK);
    cr_assert(a.ctx && a.alloc && a.free && a.set_limit && a.get_limit && a.step_end &&
              a.stats_json);
    /* Everything through the table only, as a runtime would. */
    char *p = a.alloc(a.ctx, 1000, NULL);
    cr_assert_not_null(p);
    pattern_fill(p, 1000, 9);
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, p, &info), VMEM_OK, "the table allocates from v");
    cr_assert_eq(info.requested, 1000);
    cr_assert_eq(a.get_limit(a.ctx), 16 * MiB);
    size_t applied = 0;
    cr_assert_eq(a.set_limit(a.ctx, 8 * MiB, &applied), VMEM_OK);
    cr_assert_eq(a.get_limit(a.ctx), 8 * MiB);
    cr_assert_leq(applied, 8 * MiB);
    cr_assert_eq(a.set_limit(a.ctx, 64 * MiB, NULL), VMEM_ERR_ABOVE_CAP);
    cr_assert_eq(a.step_end(a.ctx), VMEM_OK);
    size_t need = 0;
    cr_assert_eq(a.stats_json(a.ctx, NULL, 0, &need), VMEM_ERR_SIZE);
    cr_assert_gt(need, 0);
    char *json = malloc(need + 1);
    cr_assert_eq(a.stats_json(a.ctx, json, need + 1, NULL), VMEM_OK);
    cr_assert_not_null(strstr(json, "\"deviceMemPoolSize\""));
    free(json);
    cr_assert(pattern_ok(p, 1000, 9));
    cr_assert_eq(a.free(a.ctx, p, NULL), 0);
    cr_assert_neq(a.free(a.ctx, p, NULL), 0, "a double free through the table is reported");
    int x;
    cr_assert_eq(a.free(a.ctx, &x, NULL), VMEM_ERR_FOREIGN_PTR);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.allocs, 1);
    cr_assert_eq(s.frees, 1);
    cr_assert_eq(s.bad_frees, 2);
    cr_assert_eq(s.steps, 1);
    CHECK_VMEM(v, "the table round trip");
    vmem_destroy(v);
}
