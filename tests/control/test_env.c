/* Suite 'control': the VMEM_* environment.  Every invalid value makes
 * vmem_create(NULL, ...) fail with VMEM_ERR_ENV and a log line naming the
 * variable; valid values reach the instance, the control file and the
 * statistics file included.  (Criterion runs each test in its own process,
 * so setenv here does not leak into other tests.) */
#include "common.h"

static logcount_t global_lc;

static void env_clear(void)
{
    static const char *names[] = {
        "VMEM_BACKEND",      "VMEM_DEVICE",        "VMEM_LIMIT",         "VMEM_START_CAP",
        "VMEM_HOST_LIMIT",   "VMEM_HOST_FALLBACK", "VMEM_SIM_CAPACITY",  "VMEM_SIM_FAIL_NTH",
        "VMEM_SIM_FAIL_RATE", "VMEM_SIM_SEED",     "VMEM_CONTROL_FILE",  "VMEM_STATS_FILE",
        "VMEM_CONTROL_IMMEDIATE", "VMEM_LOG_LEVEL",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

static void setup(void)
{
    env_clear();
    logcount_init(&global_lc);
    vmem_set_log(logcount_fn, &global_lc, VMEM_LOG_WARN);
}

static void teardown(void) { vmem_set_log(NULL, NULL, VMEM_LOG_WARN); }

Test(control_env, invalid_values_fail_naming_the_variable, .init = setup, .fini = teardown)
{
    static const struct {
        const char *name, *value;
    } bad[] = {
        {"VMEM_LIMIT", "lots"},
        {"VMEM_LIMIT", "-1G"},
        {"VMEM_LIMIT", "8X"},
        {"VMEM_LIMIT", ""},
        {"VMEM_LIMIT", "99999999999999999999"},
        {"VMEM_START_CAP", "1.5G"},
        {"VMEM_HOST_LIMIT", "12Q"},
        {"VMEM_HOST_LIMIT", "-5"},
        {"VMEM_BACKEND", "gpu"},
        {"VMEM_BACKEND", "SIM "},
        {"VMEM_DEVICE", "-1"},
        {"VMEM_DEVICE", "zero"},
        {"VMEM_HOST_FALLBACK", "maybe"},
        {"VMEM_CONTROL_IMMEDIATE", "2"},
        {"VMEM_CONTROL_FILE", ""},
        {"VMEM_STATS_FILE", ""},
        {"VMEM_SIM_FAIL_RATE", "2"},
        {"VMEM_SIM_FAIL_NTH", "first"},
        {"VMEM_LOG_LEVEL", "loud"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        env_clear();
        setenv("VMEM_BACKEND", "sim", 1);
        setenv(bad[i].name, bad[i].value, 1);
        int errors = atomic_load(&global_lc.errors);
        vmem_t *v = NULL;
        vmem_status_t st = vmem_create(NULL, &v);
        cr_expect_eq(st, VMEM_ERR_ENV, "%s=\"%s\": got %s", bad[i].name, bad[i].value,
                     vmem_strerror(st));
        cr_expect_null(v, "%s=\"%s\": out-parameter touched", bad[i].name, bad[i].value);
        cr_expect_eq(atomic_load(&global_lc.errors), errors + 1, "%s=\"%s\": not logged",
                     bad[i].name, bad[i].value);
        cr_expect(strstr(global_lc.last_error, bad[i].name) != NULL,
                  "%s=\"%s\": the error does not name the variable: %s", bad[i].name,
                  bad[i].value, global_lc.last_error);
        if (v)
            vmem_destroy(v);
    }
}

Test(control_env, config_from_env_leaves_cfg_unchanged_on_error, .init = setup,
     .fini = teardown)
{
    vmem_config_t cfg, before;
    vmem_config_init(&cfg);
    cfg.limit = 123 * MiB;
    before = cfg;
    setenv("VMEM_HOST_LIMIT", "1G", 1);
    setenv("VMEM_LIMIT", "lots", 1);
    cr_assert_eq(vmem_config_from_env(&cfg), VMEM_ERR_ENV);
    cr_assert_eq(memcmp(&cfg, &before, sizeof cfg), 0);
}

Test(control_env, valid_values_reach_the_instance, .init = setup, .fini = teardown,
     .timeout = 30)
{
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    char *stats = path_join(dir, "stats.json");
    file_put_atomic(ctl, "{\"perf\": 100}");
    setenv("VMEM_BACKEND", "sim", 1);
    setenv("VMEM_SIM_CAPACITY", "16G", 1);
    setenv("VMEM_LIMIT", "512M", 1);
    setenv("VMEM_START_CAP", "1G", 1);
    setenv("VMEM_HOST_LIMIT", "2g", 1);
    setenv("VMEM_HOST_FALLBACK", "off", 1);
    setenv("VMEM_CONTROL_FILE", ctl, 1);
    setenv("VMEM_STATS_FILE", stats, 1);
    setenv("VMEM_CONTROL_IMMEDIATE", "1", 1);
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(NULL, &v), VMEM_OK);
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    cr_assert_str_eq(s.backend, "sim");
    cr_assert_eq(s.limit, 512 * MiB);
    cr_assert_eq(s.start_cap, 1 * GiB);
    cr_assert_eq(s.host_limit, 2 * GiB);
    cr_assert_eq(s.host_fallback, 0);
    cr_assert(status_of(v).active, "VMEM_CONTROL_FILE did not start the watcher");
    /* VMEM_CONTROL_IMMEDIATE=1: no step end needed; the start cap allows 1G */
    file_put_atomic(ctl, "{\"limit\": \"1G\"}");
    cr_assert(WAIT_FOR(limit_of(v) == 1 * GiB));
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(access(stats, F_OK), 0, "VMEM_STATS_FILE not written at the step end");
    vmem_destroy(v);
    free(ctl);
    free(stats);
    dir_remove(dir);
}

Test(control_env, environment_is_ignored_with_an_explicit_config, .init = setup,
     .fini = teardown)
{
    setenv("VMEM_LIMIT", "lots", 1);
    setenv("VMEM_CONTROL_FILE", "/nonexistent/dir/c.json", 1);
    vmem_t *v = instance_make(64 * MiB, NULL, NULL, NULL, 0);
    cr_assert_eq(limit_of(v), 64 * MiB);
    cr_assert_not(status_of(v).active);
    vmem_destroy(v);
}

Test(control_env, start_cap_alone_caps_the_default_limit, .init = setup, .fini = teardown)
{
    setenv("VMEM_BACKEND", "sim", 1);
    setenv("VMEM_SIM_CAPACITY", "4G", 1);
    setenv("VMEM_START_CAP", "1G", 1);
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(NULL, &v), VMEM_OK);
    cr_assert_eq(limit_of(v), 1 * GiB, "default limit (free memory, 4G) must stop at the cap");
    cr_assert_eq(vmem_check(v), VMEM_OK);
    cr_assert_eq(vmem_set_limit(v, 2 * GiB, NULL), VMEM_ERR_ABOVE_CAP);
    vmem_destroy(v);
}
