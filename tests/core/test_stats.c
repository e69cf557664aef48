/*
 * Statistics (DESIGN semantics 6 and 7): the versioned struct, its JSON
 * rendering (parsed with cJSON), the step boundary's min/max.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

TestSuite(stats, .timeout = 30);

static const char *antman_keys[] = {
    "deviceMemUsedMax", "deviceMemUsedMin", "deviceMemPoolSize", "deviceMemStable",
    "hostMemUsedMax",   "hostMemUsedMin",   "hostMemPoolSize",   "swapReason",
    "miniBatchDuration",
};

/* The JSON of v, parsed; the caller deletes it. */
static cJSON *stats_parsed(vmem_t *v)
{
    size_t need = 0;
    cr_assert_eq(vmem_stats_json(v, NULL, 0, &need), VMEM_ERR_SIZE);
    char *buf = malloc(need + 1);
    cr_assert_not_null(buf);
    size_t need2 = 0;
    cr_assert_eq(vmem_stats_json(v, buf, need + 1, &need2), VMEM_OK);
    cr_assert_eq(need2, need);
    cr_assert_eq(strlen(buf), need);
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "statistics JSON does not parse near \"%.40s\": %s", cJSON_GetErrorPtr(),
                       buf);
    cr_assert(cJSON_IsObject(j));
    free(buf);
    return j;
}

static double json_number(const cJSON *j, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    cr_assert(cJSON_IsNumber(x), "key %s missing or not a number", key);
    return x->valuedouble;
}

/* A workload with device and host blocks, some freed. */
static vmem_t *busy_instance(void **keep)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 8 * MiB, 16 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *a = vmem_alloc(v, 3 * MiB), *b = vmem_alloc(v, 1000), *c = vmem_alloc(v, 6 * MiB);
    cr_assert(a && b && c);
    cr_assert_eq(location_of(v, c), VMEM_LOC_HOST, "setup: c spills");
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    keep[0] = b;
    keep[1] = c;
    return v;
}

Test(stats, struct_fields_sane)
{
    void *keep[2];
    vmem_t *v = busy_instance(keep);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.size, sizeof s);
    cr_assert_eq(s.version, VMEM_STATS_VERSION);
    cr_assert_str_eq(s.backend, "sim");
    cr_assert_eq(s.device_syncs, 0, "a simulated device never waits");
    cr_assert_eq(s.device_sync_seconds, 0);
    cr_assert_eq(s.limit, 8 * MiB);
    cr_assert_eq(s.pending_limit, 0);
    cr_assert_eq(s.start_cap, 16 * MiB);
    cr_assert_leq(s.device_held, s.limit);
    cr_assert_geq(s.device_held, s.device_in_use);
    cr_assert_eq(s.device_in_use, 1024, "b rounds to 1024 bytes");
    cr_assert_eq(s.device_requested, 1000);
    cr_assert_geq(s.device_peak_held, s.device_held);
    cr_assert_geq(s.device_peak_in_use, 3 * MiB + 1024);
    cr_assert_geq(s.device_regions, 1);
    cr_assert_eq(s.host_limit, 64 * MiB);
    cr_assert_geq(s.host_held, s.host_in_use);
    cr_assert_geq(s.host_in_use, 6 * MiB);
    cr_assert_leq(s.host_held, s.host_limit);
    cr_assert_geq(s.host_peak_held, s.host_held);
    cr_assert_geq(s.host_peak_in_use, s.host_in_use);
    cr_assert_eq(s.allocs, 3);
    cr_assert_eq(s.frees, 1);
    cr_assert_eq(s.spills, 1);
    cr_assert_eq(s.spilled_bytes, 6 * MiB);
    cr_assert_eq(s.failures, 0);
    cr_assert_eq(s.bad_frees, 0);
    cr_assert_geq(s.device_region_allocs, s.device_regions);
    cr_assert_eq(s.steps, 1);
    cr_assert_geq(s.last_step_seconds, 0.0);
    cr_assert_leq(s.step_device_min, s.step_device_max);
    cr_assert_leq(s.step_host_min, s.step_host_max);
    cr_assert_eq(s.host_fallback, 1);
    cr_assert(s.perf >= 0 && s.perf <= 100, "perf %d", s.perf);
    vmem_free(v, keep[0]);
    vmem_free(v, keep[1]);
    vmem_destroy(v);
}

Test(stats, json_has_antman_keys_and_parses)
{
    void *keep[2];
    vmem_t *v = busy_instance(keep);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cJSON *j = stats_parsed(v);
    for (size_t i = 0; i < sizeof antman_keys / sizeof antman_keys[0]; i++)
        cr_assert(cJSON_HasObjectItem(j, antman_keys[i]), "key %s missing", antman_keys[i]);
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(j, "swapReason");
    cr_assert(cJSON_IsString(reason));
    cr_assert_str_eq(reason->valuestring, "limit");
    /* The numbers agree with the struct. */
    vmem_stats_t s = stats_of(v);
    cr_assert_eq((size_t)json_number(j, "deviceMemPoolSize"), s.device_held);
    cr_assert_eq((size_t)json_number(j, "hostMemPoolSize"), s.host_held);
    cr_assert_eq((size_t)json_number(j, "deviceMemUsedMax"), s.step_device_max);
    cr_assert_eq((size_t)json_number(j, "deviceMemUsedMin"), s.step_device_min);
    cr_assert_eq((size_t)json_number(j, "hostMemUsedMax"), s.step_host_max);
    cr_assert_eq((size_t)json_number(j, "hostMemUsedMin"), s.step_host_min);
    cr_assert_eq((size_t)json_number(j, "deviceMemStable"), s.device_in_use,
                 "stable: in use at the last step end");
    cr_assert_geq(json_number(j, "miniBatchDuration"), 0);
    cJSON_Delete(j);
    vmem_free(v, keep[0]);
    vmem_free(v, keep[1]);
    vmem_destroy(v);
}

Test(stats, json_fresh_instance_parses)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, 8 * MiB, 0, 0, NULL);
    vmem_t *v = create_or_die(&cfg);
    cJSON *j = stats_parsed(v);
    for (size_t i = 0; i < sizeof antman_keys / sizeof antman_keys[0]; i++)
        cr_assert(cJSON_HasObjectItem(j, antman_keys[i]), "key %s missing", antman_keys[i]);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "swapReason")->valuestring, "none");
    cr_assert_eq(json_number(j, "deviceMemPoolSize"), 0);
    cJSON_Delete(j);
    vmem_destroy(v);
}

Test(stats, json_small_buffer)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 8 * MiB, 0, 0, NULL);
    vmem_t *v = create_or_die(&cfg);
    size_t need = 0;
    cr_assert_eq(vmem_stats_json(v, NULL, 0, &need), VMEM_ERR_SIZE);
    cr_assert_gt(need, 100);
    char *full = malloc(need + 1);
    cr_assert_eq(vmem_stats_json(v, full, need + 1, NULL), VMEM_OK);
    cr_assert_eq(strlen(full), need);
    /* One byte short (no room for the NUL), and much shorter: truncated,
     * NUL-terminated, *needed still the full length. */
    size_t lens[] = {need, need / 2, 10, 1};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        char *buf = malloc(lens[i] + 16);
        memset(buf, 'X', lens[i] + 16);
        size_t n = 0;
        cr_assert_eq(vmem_stats_json(v, buf, lens[i], &n), VMEM_ERR_SIZE, "len %zu", lens[i]);
        cr_assert_eq(n, need, "len %zu: *needed %zu, expected %zu", lens[i], n, need);
        cr_assert_eq(strlen(buf), lens[i] - 1, "len %zu: not NUL-terminated at the end", lens[i]);
        /* The JSON ends with the time of the call (ms): a prefix of the full
         * text made just before, or, if a millisecond ticked in between, of
         * one made just after (a tick cannot fall in both gaps). */
        char *after = malloc(need + 1);
        cr_assert_eq(vmem_stats_json(v, after, need + 1, NULL), VMEM_OK);
        cr_assert(strncmp(buf, full, lens[i] - 1) == 0 || strncmp(buf, after, lens[i] - 1) == 0,
                  "len %zu: not a prefix", lens[i]);
        free(after);
        cr_assert_eq(buf[lens[i]], 'X', "len %zu: wrote past the buffer", lens[i]);
        free(buf);
    }
    free(full);
    vmem_destroy(v);
}

Test(stats, older_smaller_struct_honoured)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 8 * MiB, 0, 0, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *p = vmem_alloc(v, 4096);
    cr_assert_not_null(p);
    /* An older caller knew the struct only up to device_in_use. */
    const size_t old_size = offsetof(vmem_stats_t, device_requested);
    union {
        vmem_stats_t s;
        unsigned char bytes[sizeof(vmem_stats_t)];
    } u;
    memset(&u, 0xAB, sizeof u);
    u.s.size = (uint32_t)old_size;
    cr_assert_eq(vmem_get_stats(v, &u.s), VMEM_OK);
    cr_assert_eq(u.s.size, old_size, "size keeps the caller's value");
    cr_assert_eq(u.s.version, VMEM_STATS_VERSION);
    cr_assert_str_eq(u.s.backend, "sim");
    cr_assert_eq(u.s.limit, 8 * MiB);
    cr_assert_eq(u.s.device_in_use, 4096);
    for (size_t i = old_size; i < sizeof u; i++)
        cr_assert_eq(u.bytes[i], 0xAB, "byte %zu past the caller's size was written", i);
    /* Too small for even the header: refused, untouched. */
    memset(&u, 0xAB, sizeof u);
    u.s.size = 4;
    cr_assert_eq(vmem_get_stats(v, &u.s), VMEM_ERR_INVALID);
    for (size_t i = sizeof u.s.size; i < sizeof u; i++)
        cr_assert_eq(u.bytes[i], 0xAB);
    /* A newer, larger caller: the known part is filled, size says how much. */
    struct {
        vmem_stats_t s;
        unsigned char future[64];
    } big;
    memset(&big, 0xCD, sizeof big);
    big.s.size = sizeof big;
    cr_assert_eq(vmem_get_stats(v, &big.s), VMEM_OK);
    cr_assert_eq(big.s.size, sizeof(vmem_stats_t), "size reports what was filled");
    for (size_t i = 0; i < sizeof big.future; i++)
        cr_assert_eq(big.future[i], 0xCD);
    vmem_free(v, p);
    vmem_destroy(v);
}

Test(stats, step_end_records_min_max)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *a = vmem_alloc(v, MiB);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.steps, 1);
    cr_assert_eq(s.step_device_max, MiB);
    /* Step 2: in use goes 1 -> 3 -> 4 -> 2 -> 1 -> 0 MiB. */
    void *b = vmem_alloc(v, 2 * MiB), *c = vmem_alloc(v, MiB);
    cr_assert(a && b && c);
    vmem_free(v, b);
    vmem_free(v, a);
    vmem_free(v, c);
    s = stats_of(v);
    cr_assert_eq(s.step_device_max, MiB, "last step's values until the step ends");
    cr_assert_eq(s.cur_step_device_max, 4 * MiB, "the step in progress: its maximum so far");
    cr_assert_eq(s.cur_step_host_max, 0);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    s = stats_of(v);
    cr_assert_eq(s.steps, 2);
    cr_assert_eq(s.step_device_max, 4 * MiB, "max %zu", s.step_device_max);
    cr_assert_eq(s.step_device_min, 0, "min %zu", s.step_device_min);
    cr_assert_eq(s.cur_step_device_max, 0, "a new step starts at what is in use");
    cr_assert_eq(s.step_host_max, 0);
    /* Step 3: nothing happens: min == max == what is in use (0). */
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    s = stats_of(v);
    cr_assert_eq(s.step_device_min, 0);
    cr_assert_eq(s.step_device_max, 0);
    /* Step 4: a spill shows in the host min/max. */
    void *d = vmem_alloc(v, 16 * MiB);
    void *h = vmem_alloc(v, 2 * MiB);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    vmem_free(v, h);
    s = stats_of(v);
    cr_assert_eq(s.cur_step_host_max, 2 * MiB);
    cr_assert_eq(s.cur_step_device_max, 16 * MiB);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    s = stats_of(v);
    cr_assert_eq(s.step_host_max, 2 * MiB);
    cr_assert_eq(s.step_host_min, 0);
    cr_assert_eq(s.step_device_min, 0);
    cr_assert_eq(s.step_device_max, 16 * MiB);
    cJSON *j = stats_parsed(v);
    cr_assert_eq((size_t)json_number(j, "hostMemUsedMax"), 2 * MiB);
    cr_assert_eq((size_t)json_number(j, "deviceMemUsedMax"), 16 * MiB);
    cr_assert_eq((size_t)json_number(j, "deviceMemStable"), 16 * MiB);
    cJSON_Delete(j);
    vmem_free(v, d);
    vmem_destroy(v);
}

/* Held but unused (issue 14): the bytes now, integrated over the time
 * between statistics reads, and in the JSON. */
Test(stats, held_but_unused)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 16 * MiB, 256 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    void *a = vmem_alloc(v, 1 * MiB);
    cr_assert_not_null(a);
    vmem_stats_t s0 = stats_of(v);
    cr_assert_eq(s0.device_unused, s0.device_held - s0.device_in_use);
    cr_assert_gt(s0.device_unused, 0, "a 1 MiB block in a 2 MiB region");
    struct timespec nap = {0, 50 * 1000 * 1000};
    nanosleep(&nap, NULL);
    vmem_stats_t s1 = stats_of(v);
    /* 50 ms (at least) with s0.device_unused unused */
    cr_assert_geq(s1.device_unused_byte_seconds - s0.device_unused_byte_seconds,
                  0.05 * (double)s0.device_unused);
    cr_assert_gt(s1.device_unused_mean, 0);
    cr_assert_leq(s1.device_unused_mean, (double)s1.device_held);
    cr_assert_eq(vmem_free(v, a), VMEM_OK);
    cJSON *j = stats_parsed(v);
    cr_assert_eq(json_number(j, "deviceUnused"), (double)stats_of(v).device_held);
    cr_assert_geq(json_number(j, "deviceUnusedByteSeconds"), s1.device_unused_byte_seconds - 1);
    (void)json_number(j, "deviceUnusedMean");
    (void)json_number(j, "deviceTrims");
    (void)json_number(j, "deviceTrimmedBytes");
    cJSON_Delete(j);
    vmem_destroy(v);
}

/* The watermark: the most in use between two reads, then restarted; bytes
 * on host count (what the program asked for, wherever it was placed). */
Test(stats, watermark_between_reads)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 16 * MiB, 0, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    size_t used = 1, most = 1, limit = 1;
    cr_assert_eq(vmem_watermark(NULL, &used, &most, &limit), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_watermark(v, &used, &most, &limit), VMEM_OK);
    cr_assert_eq(used, 0);
    cr_assert_eq(most, 0);
    cr_assert_eq(limit, 16 * MiB);
    void *a = vmem_alloc(v, MiB), *b = vmem_alloc(v, 3 * MiB);
    cr_assert(a && b);
    vmem_free(v, b);
    cr_assert_eq(vmem_watermark(v, &used, &most, NULL), VMEM_OK);
    cr_assert_eq(used, MiB);
    cr_assert_eq(most, 4 * MiB, "the stretch's maximum, %zu", most);
    cr_assert_eq(vmem_watermark(v, &used, &most, NULL), VMEM_OK);
    cr_assert_eq(most, MiB, "restarted at the last read");
    /* A spill counts: 16 MiB on the device and 2 MiB on host. */
    vmem_free(v, a);
    void *d = vmem_alloc(v, 16 * MiB);
    void *h = vmem_alloc(v, 2 * MiB);
    cr_assert(d && h);
    cr_assert_eq(location_of(v, h), VMEM_LOC_HOST);
    vmem_free(v, d);
    cr_assert_eq(vmem_watermark(v, &used, &most, NULL), VMEM_OK);
    cr_assert_eq(used, 2 * MiB);
    cr_assert_eq(most, 18 * MiB);
    vmem_free(v, h);
    cr_assert_eq(vmem_watermark(v, &used, &most, NULL), VMEM_OK);
    cr_assert_eq(used, 0);
    cr_assert_eq(most, 2 * MiB);
    vmem_destroy(v);
}

/* vmem_fits: 1 only where the allocation would be served without giving
 * memory back (a free block fits, or the limit leaves room to map more). */
Test(stats, fits_says_where_an_allocation_needs_no_release)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM_VMM, 16 * MiB, 0, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    cr_assert_eq(vmem_fits(NULL, MiB, NULL), 0);
    cr_assert_eq(vmem_fits(v, 0, NULL), 0);
    cr_assert_eq(vmem_fits(v, 4 * MiB, NULL), 1, "room under the limit");
    cr_assert_eq(vmem_fits(v, 17 * MiB, NULL), 0, "above the limit");
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = vmem_alloc(v, 4 * MiB);
        cr_assert_not_null(p[i]);
        cr_assert_eq(location_of(v, p[i]), VMEM_LOC_DEVICE);
    }
    cr_assert_eq(vmem_fits(v, 4 * MiB, NULL), 0, "the device is full");
    vmem_free(v, p[1]);
    cr_assert_eq(vmem_fits(v, 4 * MiB, NULL), 1, "the free block fits it");
    cr_assert_eq(vmem_fits(v, 5 * MiB, NULL), 0, "nothing free fits 5 MiB");
    vmem_free(v, p[3]);
    /* 8 MiB free in two blocks of 4 that are not neighbours */
    cr_assert_eq(vmem_fits(v, 8 * MiB, NULL), 0, "no one free block of 8 MiB");
    vmem_free(v, p[2]); /* 1, 2 and 3 merge */
    cr_assert_eq(vmem_fits(v, 12 * MiB, NULL), 1);
    cr_assert_eq(vmem_fits(v, 13 * MiB, NULL), 0);
    vmem_free(v, p[0]);
    vmem_destroy(v);
}

/* vmem_step_exclude: reported seconds add up over the step, are reported for
 * it (struct and JSON) and start again at 0; bad arguments change nothing. */
Test(stats, step_exclude_adds_up_per_step)
{
    vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 8 * MiB, 16 * MiB, 64 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    cr_assert_eq(vmem_step_exclude(NULL, 1.0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_step_exclude(v, -1.0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_step_exclude(v, 0.0 / 0.0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_step_exclude(v, 1.0 / 0.0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_instances_step_exclude(-2.0), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_step_exclude(v, 0.25), VMEM_OK);
    cr_assert_eq(vmem_step_exclude(v, 0.5), VMEM_OK);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    cr_assert_geq(s.version, 8);
    cr_assert_float_eq(s.last_step_excluded_seconds, 0.75, 1e-9);
    cJSON *j = stats_parsed(v);
    cr_assert_float_eq(json_number(j, "miniBatchExcludedDuration"), 750000.0, 0.5);
    cJSON_Delete(j);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    cr_assert_float_eq(s.last_step_excluded_seconds, 0.0, 1e-12, "the next step starts at 0");
    vmem_destroy(v);
}
