/* Adapters suite: the per-device instances behind the PyTorch and CuPy entry
 * points, and the stream rules of vmem_alloc_stream / vmem_free_stream, on
 * the simulated device.  Criterion runs every test in its own process, so
 * each starts with no instance and reads the environment it sets. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmem.h"

#define MiB ((size_t)1 << 20)

static void sim_env(const char *limit)
{
    setenv("VMEM_BACKEND", "sim", 1);
    if (limit)
        setenv("VMEM_LIMIT", limit, 1);
    else
        unsetenv("VMEM_LIMIT");
    unsetenv("VMEM_STATS_FILE");
    unsetenv("VMEM_CONTROL_FILE");
    setenv("VMEM_HOST_LIMIT", "1G", 1);
}

static vmem_stats_t stats_of(vmem_t *v)
{
    vmem_stats_t s = {.size = sizeof s};
    cr_assert_eq(vmem_get_stats(v, &s), VMEM_OK);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Per-device instances                                                     */
/* ------------------------------------------------------------------------ */

static void *grab_instance(void *arg)
{
    (void)arg;
    return vmem_instance(0);
}

Test(adapters, lazy_creation_is_once_across_threads)
{
    sim_env("64M");
    enum { N = 16 };
    pthread_t t[N];
    void *got[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, grab_instance, NULL), 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], &got[i]);
    cr_assert_not_null(got[0]);
    for (int i = 1; i < N; i++)
        cr_assert_eq(got[i], got[0], "thread %d got another instance", i);
    cr_assert_eq(vmem_instance_peek(0), got[0]);
    size_t limit = 0;
    cr_assert_eq(vmem_get_limit(got[0], &limit), VMEM_OK);
    cr_assert_eq(limit, 64 * MiB, "the instance did not read VMEM_LIMIT");
}

Test(adapters, peek_never_creates)
{
    sim_env(NULL);
    cr_assert_null(vmem_instance_peek(0));
    vmem_t *v0 = vmem_instance(0);
    cr_assert_not_null(v0);
    cr_assert_eq(vmem_instance_peek(0), v0);
    cr_assert_null(vmem_instance_peek(1));
    vmem_t *v1 = vmem_instance(1);
    cr_assert_not_null(v1);
    cr_assert_neq(v1, v0, "devices must not share an instance");
}

Test(adapters, bad_ordinals_are_rejected)
{
    sim_env(NULL);
    vmem_t *v = (vmem_t *)0x1;
    cr_assert_eq(vmem_instance_ex(-1, &v), VMEM_ERR_INVALID);
    cr_assert_eq(vmem_instance_ex(64, &v), VMEM_ERR_INVALID);
    cr_assert_eq(v, (vmem_t *)0x1, "out-parameter touched on failure");
    cr_assert_eq(vmem_instance_ex(0, NULL), VMEM_ERR_INVALID);
    cr_assert_null(vmem_instance(64));
    cr_assert_null(vmem_instance_peek(-3));
    cr_assert_null(vmem_torch_malloc(MiB, 64, NULL));
}

Test(adapters, creation_failure_is_remembered)
{
    sim_env("lots");
    vmem_t *v = NULL;
    cr_assert_eq(vmem_instance_ex(0, &v), VMEM_ERR_ENV);
    setenv("VMEM_LIMIT", "64M", 1); /* not retried: the first answer stands */
    cr_assert_eq(vmem_instance_ex(0, &v), VMEM_ERR_ENV);
    cr_assert_null(v);
    cr_assert_null(vmem_torch_malloc(MiB, 0, NULL));
    cr_assert_null(vmem_cupy_malloc(NULL, MiB, 0));
    vmem_torch_free((void *)0x1000, MiB, 0, NULL); /* no instance: logged, no crash */
    cr_assert_null(vmem_instance_peek(0));
}

Test(adapters, torch_entry_points)
{
    sim_env("64M");
    cr_assert_null(vmem_torch_malloc(0, 0, NULL), "size 0 must give NULL");
    vmem_t *v = vmem_instance_peek(0);
    if (v)
        cr_assert_eq(stats_of(v).failures, 0, "size 0 is not a failure");
    void *p = vmem_torch_malloc(3 * MiB + 5, 0, NULL);
    cr_assert_not_null(p);
    v = vmem_instance_peek(0);
    cr_assert_not_null(v);
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, p, &info), VMEM_OK);
    cr_assert_eq(info.location, VMEM_LOC_DEVICE);
    cr_assert_eq(info.requested, 3 * MiB + 5);
    vmem_torch_free(p, 3 * MiB + 5, 0, NULL);
    vmem_torch_free(NULL, 0, 0, NULL);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.device_in_use, 0);
    cr_assert_eq(s.allocs, 1);
    cr_assert_eq(s.frees, 1);
    cr_assert_eq(s.failures, 0);
    cr_assert_eq(s.bad_frees, 0);
    cr_assert_eq(vmem_check(v), VMEM_OK);
}

Test(adapters, torch_spills_past_the_limit)
{
    sim_env("32M");
    void *p[8];
    for (int i = 0; i < 8; i++) {
        p[i] = vmem_torch_malloc(8 * MiB, 0, NULL);
        cr_assert_not_null(p[i], "allocation %d failed", i);
    }
    vmem_t *v = vmem_instance_peek(0);
    vmem_stats_t s = stats_of(v);
    cr_assert_leq(s.device_held, 32 * MiB);
    cr_assert_gt(s.spills, 0);
    cr_assert_geq(s.spilled_bytes, s.spills * 8 * MiB);
    for (int i = 0; i < 8; i++)
        vmem_torch_free(p[i], 8 * MiB, 0, NULL);
    s = stats_of(v);
    cr_assert_eq(s.device_in_use + s.host_in_use, 0);
    cr_assert_eq(vmem_check(v), VMEM_OK);
}

Test(adapters, cupy_entry_points)
{
    sim_env("64M");
    void *p = vmem_cupy_malloc(NULL, MiB, 0);
    cr_assert_not_null(p);
    vmem_t *v = vmem_instance_peek(0);
    cr_assert_not_null(v);
    cr_assert_eq(stats_of(v).device_in_use, MiB);
    vmem_cupy_free(NULL, p, 0);
    cr_assert_eq(stats_of(v).device_in_use, 0);
    cr_assert_null(vmem_cupy_malloc(NULL, 0, 0));
    vmem_cupy_free(NULL, NULL, 0);
    cr_assert_eq(stats_of(v).bad_frees, 0);
}

Test(adapters, cupy_param_selects_the_instance)
{
    sim_env(NULL);
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.limit = 16 * MiB;
    vmem_t *own = NULL;
    cr_assert_eq(vmem_create(&cfg, &own), VMEM_OK);
    void *p = vmem_cupy_malloc(own, MiB, 0);
    cr_assert_not_null(p);
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(own, p, &info), VMEM_OK);
    cr_assert_null(vmem_instance_peek(0), "param given: no per-device instance needed");
    vmem_cupy_free(own, p, 0);
    cr_assert_eq(stats_of(own).device_in_use, 0);
    vmem_destroy(own);
}

Test(adapters, step_end_reaches_every_instance)
{
    sim_env(NULL);
    cr_assert_eq(vmem_instances_step_end(), VMEM_OK); /* none yet: nothing to do */
    vmem_t *a = vmem_instance(0), *b = vmem_instance(2);
    cr_assert(a && b);
    cr_assert_eq(vmem_instances_step_end(), VMEM_OK);
    cr_assert_eq(vmem_instances_step_end(), VMEM_OK);
    cr_assert_eq(stats_of(a).steps, 2);
    cr_assert_eq(stats_of(b).steps, 2);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

Test(adapters, statistics_file_per_device)
{
    sim_env(NULL);
    char dir[] = "/tmp/vmem-adapters-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char pat[256], f0[300], f1[300], plain[256], p0[300], p1[300];
    snprintf(pat, sizeof pat, "%s/dev%%d.json", dir);
    snprintf(f0, sizeof f0, "%s/dev0.json", dir);
    snprintf(f1, sizeof f1, "%s/dev1.json", dir);
    setenv("VMEM_STATS_FILE", pat, 1);
    cr_assert_not_null(vmem_instance(0));
    cr_assert_not_null(vmem_instance(1));
    /* The environment is read at creation: a later change affects only
     * instances created after it. */
    snprintf(plain, sizeof plain, "%s/plain.json", dir);
    snprintf(p0, sizeof p0, "%s/plain.json", dir);
    snprintf(p1, sizeof p1, "%s/plain.json.3", dir);
    setenv("VMEM_STATS_FILE", plain, 1);
    cr_assert_not_null(vmem_instance(3));
    cr_assert_eq(vmem_instances_step_end(), VMEM_OK);
    cr_assert(file_exists(f0), "%s missing", f0);
    cr_assert(file_exists(f1), "%s missing", f1);
    cr_assert(file_exists(p1), "%s missing", p1);
    cr_assert_not(file_exists(p0), "device 3 must not write the plain name");
    unlink(f0);
    unlink(f1);
    unlink(p1);
    rmdir(dir);
}

/* ------------------------------------------------------------------------ */
/* Streams (simulated device: stream handles are tokens, nothing is async)  */
/* ------------------------------------------------------------------------ */

#define SA ((void *)0x1000)
#define SB ((void *)0x2000)

static vmem_t *open_sim(size_t limit, int fallback)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.limit = limit;
    cfg.host_limit = 256 * MiB;
    cfg.host_fallback = fallback;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_OK);
    return v;
}

Test(streams, one_stream_reuses_at_once)
{
    vmem_t *v = open_sim(64 * MiB, 1);
    void *a = vmem_alloc_stream(v, MiB, SA);
    cr_assert_eq(vmem_free_stream(v, a, SA), VMEM_OK);
    cr_assert_eq(vmem_alloc_stream(v, MiB, SA), a);
    vmem_destroy(v);
}

Test(streams, other_stream_takes_fresh_memory_while_there_is_room)
{
    vmem_t *v = open_sim(64 * MiB, 1);
    void *b = vmem_alloc_stream(v, MiB, SB);
    void *a = vmem_alloc_stream(v, MiB, SA);
    cr_assert_eq(vmem_free_stream(v, a, SA), VMEM_OK);
    void *b2 = vmem_alloc_stream(v, MiB, SB);
    cr_assert_not_null(b2);
    cr_assert_neq(b2, a, "stream B got A's block before A's work was known to be done");
    cr_assert_eq(vmem_alloc_stream(v, MiB, SA), a, "A must reuse its own block at once");
    vmem_free_stream(v, b, SB);
    vmem_free_stream(v, b2, SB);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
}

Test(streams, other_stream_reuses_after_the_fence_under_the_limit)
{
    /* Limit 4 MiB: the 2 MiB block A frees is the only room B can have. */
    vmem_t *v = open_sim(4 * MiB, 0);
    void *b = vmem_alloc_stream(v, MiB, SB);
    void *a = vmem_alloc_stream(v, 2 * MiB, SA);
    cr_assert_not_null(b);
    cr_assert_not_null(a);
    cr_assert_eq(vmem_free_stream(v, a, SA), VMEM_OK);
    void *b2 = vmem_alloc_stream(v, 2 * MiB, SB);
    cr_assert_eq(b2, a, "B should get A's block once A's fence has passed");
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.failures, 0);
    cr_assert_eq(s.spills, 0);
    cr_assert_leq(s.device_held, 4 * MiB);
    vmem_free_stream(v, b2, SB);
    vmem_free_stream(v, b, SB);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
}

Test(streams, free_on_a_new_stream_tags_the_block)
{
    /* One stream so far; the block's last use is on another stream. */
    vmem_t *v = open_sim(64 * MiB, 1);
    void *a = vmem_alloc_stream(v, MiB, SA);
    cr_assert_eq(vmem_free_stream(v, a, SB), VMEM_OK);
    void *a2 = vmem_alloc_stream(v, MiB, SA);
    cr_assert_not_null(a2);
    cr_assert_neq(a2, a, "A reused a block whose last use was on B");
    cr_assert_eq(vmem_alloc_stream(v, MiB, SB), a);
    vmem_destroy(v);
}

Test(streams, host_blocks_are_tagged_and_settled_too)
{
    /* On a device miss the fences are checked (on sim they have always
     * passed), so the host block A freed becomes B's without new host
     * memory. */
    vmem_t *v = open_sim(2 * MiB, 1);
    void *d = vmem_alloc_stream(v, 2 * MiB, SB); /* fills the device */
    void *h = vmem_alloc_stream(v, MiB, SA);
    vmem_ptr_info_t info;
    cr_assert_eq(vmem_ptr_info(v, h, &info), VMEM_OK);
    cr_assert_eq(info.location, VMEM_LOC_HOST);
    size_t host_held = stats_of(v).host_held;
    cr_assert_eq(vmem_free_stream(v, h, SA), VMEM_OK);
    void *h2 = vmem_alloc_stream(v, MiB, SB);
    cr_assert_eq(h2, h);
    cr_assert_eq(stats_of(v).host_held, host_held);
    vmem_free_stream(v, h2, SB);
    vmem_free_stream(v, d, SB);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    vmem_destroy(v);
}

Test(streams, many_streams_stay_correct)
{
    /* More streams than the table holds: frees on untracked streams are
     * settled at once; every block is still accounted for. */
    vmem_t *v = open_sim(512 * MiB, 1);
    enum { N = 100 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = vmem_alloc_stream(v, MiB, (void *)(uintptr_t)(0x1000 * (i + 1)));
        cr_assert_not_null(p[i]);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(vmem_free_stream(v, p[i], (void *)(uintptr_t)(0x1000 * (i + 1))), VMEM_OK);
    cr_assert_eq(stats_of(v).device_in_use, 0);
    cr_assert_eq(vmem_check(v), VMEM_OK);
    size_t released = 0;
    cr_assert_eq(vmem_trim(v, &released), VMEM_OK);
    cr_assert_eq(stats_of(v).device_held, 0);
    vmem_destroy(v);
}
