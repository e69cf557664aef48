/* Suite 'control_plugin': the device memory cap a GPU-sharing device plugin
 * (HAMi and the schedulers built on HAMi-core) gives the container in
 * CUDA_DEVICE_MEMORY_LIMIT_<device> / CUDA_DEVICE_MEMORY_LIMIT becomes the
 * start cap and the limit when nothing else sets one; the statistics say
 * where the limit came from.  (Criterion runs each test in its own process,
 * so setenv here does not leak into other tests.) */
#include <cjson/cJSON.h>

#include "common.h"

static logcount_t global_lc;

static void env_clear(void)
{
    static const char *names[] = {
        "VMEM_BACKEND",    "VMEM_DEVICE",       "VMEM_LIMIT",       "VMEM_START_CAP",
        "VMEM_SIM_CAPACITY", "VMEM_CONTROL_FILE", "VMEM_STATS_FILE", "CUDA_DEVICE_MEMORY_LIMIT",
        "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_1",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

static void setup(void)
{
    env_clear();
    setenv("VMEM_BACKEND", "sim", 1);
    setenv("VMEM_SIM_CAPACITY", "8G", 1);
    logcount_init(&global_lc);
    vmem_set_log(logcount_fn, &global_lc, VMEM_LOG_WARN);
}

static void teardown(void) { vmem_set_log(NULL, NULL, VMEM_LOG_WARN); }

static vmem_stats_t stats_of(vmem_t *v)
{
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    return s;
}

/* vmem_create(NULL) from the environment; asserts success. */
static vmem_t *env_instance(void)
{
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(NULL, &v);
    cr_assert_eq(st, VMEM_OK, "vmem_create: %s (%s)", vmem_strerror(st), global_lc.last_error);
    return v;
}

Test(control_plugin, per_device_variable_sets_limit_and_cap, .init = setup, .fini = teardown)
{
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "3g", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "1g", 1);
    vmem_t *v = env_instance();
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.limit, 3 * GiB, "the per-device variable must win over the global one");
    cr_assert_eq(s.start_cap, 3 * GiB);
    cr_assert_str_eq(s.limit_source, "CUDA_DEVICE_MEMORY_LIMIT_0");
    cr_assert_eq(s.device, 0);
    /* a cap: the limit cannot be raised above it without VMEM_LIMIT_FORCE */
    cr_assert_eq(vmem_set_limit(v, 3 * GiB + 1, NULL), VMEM_ERR_ABOVE_CAP);
    cr_assert_eq(vmem_set_limit(v, 1 * GiB, NULL), VMEM_OK);
    cr_assert_eq(vmem_set_limit(v, 3 * GiB, NULL), VMEM_OK);
    vmem_destroy(v);
}

Test(control_plugin, variable_of_the_instances_device, .init = setup, .fini = teardown)
{
    setenv("VMEM_DEVICE", "1", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "3g", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT_1", "2048m", 1);
    vmem_t *v = env_instance();
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.limit, 2 * GiB);
    cr_assert_str_eq(s.limit_source, "CUDA_DEVICE_MEMORY_LIMIT_1");
    cr_assert_eq(s.device, 1);
    vmem_destroy(v);
}

Test(control_plugin, adapters_read_the_variable_of_each_ordinal, .init = setup,
     .fini = teardown)
{
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "1g", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT_1", "2g", 1);
    vmem_t *v0 = NULL, *v1 = NULL;
    cr_assert_eq(vmem_instance_ex(0, &v0), VMEM_OK);
    cr_assert_eq(vmem_instance_ex(1, &v1), VMEM_OK);
    cr_assert_eq(stats_of(v0).limit, 1 * GiB);
    cr_assert_eq(stats_of(v1).limit, 2 * GiB);
    cr_assert_str_eq(stats_of(v1).limit_source, "CUDA_DEVICE_MEMORY_LIMIT_1");
}

Test(control_plugin, global_variable_and_zero_per_device, .init = setup, .fini = teardown)
{
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "1048576k", 1);
    vmem_t *v = env_instance();
    cr_assert_eq(stats_of(v).limit, 1 * GiB);
    cr_assert_str_eq(stats_of(v).limit_source, "CUDA_DEVICE_MEMORY_LIMIT");
    vmem_destroy(v);
    /* 0 means "no cap" to HAMi-core: the per-device 0 falls back to the global */
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "0", 1);
    v = env_instance();
    cr_assert_eq(stats_of(v).limit, 1 * GiB);
    cr_assert_str_eq(stats_of(v).limit_source, "CUDA_DEVICE_MEMORY_LIMIT");
    vmem_destroy(v);
    /* both 0: the device's free memory, as without a plugin */
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "0", 1);
    v = env_instance();
    cr_assert_eq(stats_of(v).limit, 8 * GiB);
    cr_assert_str_eq(stats_of(v).limit_source, "device");
    vmem_destroy(v);
}

Test(control_plugin, vmem_limit_and_explicit_config_win, .init = setup, .fini = teardown)
{
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "3g", 1);
    setenv("VMEM_LIMIT", "512M", 1);
    vmem_t *v = env_instance();
    cr_assert_eq(stats_of(v).limit, 512 * MiB);
    cr_assert_eq(stats_of(v).start_cap, 512 * MiB);
    cr_assert_str_eq(stats_of(v).limit_source, "VMEM_LIMIT");
    vmem_destroy(v);

    vmem_t *c = instance_make(256 * MiB, NULL, NULL, NULL, 0);
    cr_assert_eq(stats_of(c).limit, 256 * MiB);
    cr_assert_str_eq(stats_of(c).limit_source, "config");
    vmem_destroy(c);

    /* an explicit config that leaves the limit at its default (0) gets the
     * plugin's cap in place of the device's free memory */
    unsetenv("VMEM_LIMIT");
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.sim_capacity = 8 * GiB;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    cr_assert_eq(stats_of(v).limit, 3 * GiB);
    cr_assert_str_eq(stats_of(v).limit_source, "CUDA_DEVICE_MEMORY_LIMIT_0");
    vmem_destroy(v);
}

Test(control_plugin, start_cap_stops_the_plugin_cap, .init = setup, .fini = teardown)
{
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "3g", 1);
    setenv("VMEM_START_CAP", "1G", 1);
    vmem_t *v = env_instance();
    cr_assert_eq(stats_of(v).limit, 1 * GiB);
    cr_assert_str_eq(stats_of(v).limit_source, "start_cap");
    vmem_destroy(v);
}

Test(control_plugin, no_plugin_variable_means_the_device, .init = setup, .fini = teardown)
{
    vmem_t *v = env_instance();
    cr_assert_eq(stats_of(v).limit, 8 * GiB);
    cr_assert_str_eq(stats_of(v).limit_source, "device");
    vmem_destroy(v);
}

Test(control_plugin, hami_syntax, .init = setup, .fini = teardown)
{
    static const struct {
        const char *text;
        size_t bytes;
    } good[] = {
        {"1073741824", 1 * GiB}, {"1g", 1 * GiB},     {"1G", 1 * GiB},
        {"1024m", 1 * GiB},      {"1024M", 1 * GiB},  {"1048576k", 1 * GiB},
        {"1048576K", 1 * GiB},   {"3000m", 3000 * MiB}, {"257", 257},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("CUDA_DEVICE_MEMORY_LIMIT_0", good[i].text, 1);
        vmem_t *v = env_instance();
        cr_expect_eq(stats_of(v).limit, good[i].bytes, "\"%s\": %zu", good[i].text,
                     stats_of(v).limit);
        vmem_destroy(v);
    }
    static const char *bad[] = {"1GB", "1gi", "1.5g", "-1g", "g", "", " 1g", "1g ", "0x100",
                                "lots", "99999999999999999999", "99999999999g"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int global = 0; global < 2; global++) {
            const char *name = global ? "CUDA_DEVICE_MEMORY_LIMIT" : "CUDA_DEVICE_MEMORY_LIMIT_0";
            unsetenv("CUDA_DEVICE_MEMORY_LIMIT_0");
            unsetenv("CUDA_DEVICE_MEMORY_LIMIT");
            setenv(name, bad[i], 1);
            int errors = atomic_load(&global_lc.errors);
            vmem_t *v = NULL;
            vmem_status_t st = vmem_create(NULL, &v);
            cr_expect_eq(st, VMEM_ERR_ENV, "%s=\"%s\": got %s", name, bad[i], vmem_strerror(st));
            cr_expect_null(v);
            cr_expect_eq(atomic_load(&global_lc.errors), errors + 1, "%s=\"%s\": not logged",
                         name, bad[i]);
            cr_expect(strstr(global_lc.last_error, name) != NULL,
                      "%s=\"%s\": the error does not name the variable: %s", name, bad[i],
                      global_lc.last_error);
            if (v)
                vmem_destroy(v);
        }
    }
}

Test(control_plugin, statistics_json_names_the_source, .init = setup, .fini = teardown)
{
    setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "2g", 1);
    vmem_t *v = env_instance();
    char buf[4096];
    cr_assert_eq(vmem_stats_json(v, buf, sizeof buf, NULL), VMEM_OK);
    cJSON *root = cJSON_Parse(buf);
    cr_assert_not_null(root, "not JSON: %s", buf);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "limitSource");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(root, "device");
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(root, "startCap");
    cr_assert(cJSON_IsString(src) && !strcmp(src->valuestring, "CUDA_DEVICE_MEMORY_LIMIT_0"),
              "%s", buf);
    cr_assert(cJSON_IsNumber(dev) && dev->valuedouble == 0, "%s", buf);
    cr_assert(cJSON_IsNumber(cap) && cap->valuedouble == (double)(2 * GiB), "%s", buf);
    cJSON_Delete(root);
    vmem_destroy(v);
}

Test(control_plugin, old_callers_do_not_get_the_new_fields, .init = setup, .fini = teardown)
{
    vmem_t *v = env_instance();
    vmem_stats_t s;
    memset(&s, 0xab, sizeof s);
    s.size = (uint32_t)offsetof(vmem_stats_t, limit_source);
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    const unsigned char *tail = (const unsigned char *)&s.limit_source;
    for (size_t i = 0; i < sizeof s - offsetof(vmem_stats_t, limit_source); i++)
        cr_assert_eq(tail[i], 0xab, "byte %zu past the caller's size was written", i);
    vmem_destroy(v);
}
