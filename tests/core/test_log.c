/*
 * Logging and the run-time version: VMEM_LOG_LEVEL reaches the default
 * stderr sink (debug and info lines included), an embedder's vmem_set_log
 * level still filters, and vmem_version() matches the header.
 * Criterion runs each test in its own process, so setenv and the
 * process-wide sink stay local to the test.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vmem.h>

/* Everything the test wrote to stderr so far (redirected by Criterion). */
static char *stderr_text(void)
{
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    return buf;
}

static void create_destroy_env(const char *level)
{
    setenv("VMEM_BACKEND", "sim", 1);
    setenv("VMEM_SIM_CAPACITY", "64M", 1);
    if (level)
        setenv("VMEM_LOG_LEVEL", level, 1);
    else
        unsetenv("VMEM_LOG_LEVEL");
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(NULL, &v), VMEM_OK);
    vmem_destroy(v);
}

TestSuite(log, .init = cr_redirect_stderr, .timeout = 30);

Test(log, info_reaches_default_sink)
{
    create_destroy_env("info");
    const char *out = stderr_text();
    cr_assert(strstr(out, "libvmem: info: created: backend sim") != NULL, "stderr: [%s]", out);
    cr_assert(strstr(out, "libvmem: debug:") == NULL, "stderr: [%s]", out);
}

Test(log, debug_reaches_default_sink)
{
    create_destroy_env("debug");
    const char *out = stderr_text();
    cr_assert(strstr(out, "libvmem: info: created:") != NULL, "stderr: [%s]", out);
    cr_assert(strstr(out, "libvmem: debug: config:") != NULL, "stderr: [%s]", out);
}

Test(log, default_level_is_quiet)
{
    create_destroy_env(NULL);
    const char *out = stderr_text();
    cr_assert_str_empty(out, "stderr: [%s]", out);
}

Test(log, config_field_reaches_default_sink)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.sim_capacity = 64u << 20;
    cfg.log_level = VMEM_LOG_INFO;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    vmem_destroy(v);
    const char *out = stderr_text();
    cr_assert(strstr(out, "libvmem: info: created:") != NULL, "stderr: [%s]", out);
}

static int sink_calls[5];
static void count_sink(void *ctx, vmem_log_level_t level, const char *msg)
{
    (void)ctx;
    (void)msg;
    sink_calls[level < 4 ? level : 4]++;
}

/* An embedder's sink level filters instances that use the process-wide sink. */
Test(log, set_log_level_still_filters)
{
    vmem_set_log(count_sink, NULL, VMEM_LOG_WARN);
    create_destroy_env("debug");
    cr_assert_eq(sink_calls[VMEM_LOG_INFO] + sink_calls[VMEM_LOG_DEBUG], 0);
    vmem_set_log(count_sink, NULL, VMEM_LOG_DEBUG);
    create_destroy_env("info");
    cr_assert_gt(sink_calls[VMEM_LOG_INFO], 0);
    cr_assert_eq(sink_calls[VMEM_LOG_DEBUG], 0);
    vmem_set_log(NULL, NULL, VMEM_LOG_WARN);
}

Test(log, version_matches_header)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", VMEM_VERSION_MAJOR, VMEM_VERSION_MINOR,
             VMEM_VERSION_PATCH);
    cr_assert_str_eq(vmem_version(), want);
}
