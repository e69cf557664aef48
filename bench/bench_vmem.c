/*
 * vmem-bench: libvmem's micro-benchmarks on the simulated backends, through
 * Google Benchmark (gbench_c.h).  Every figure is per allocator call: the
 * items_per_second column counts vmem_alloc and vmem_free calls (and
 * vmem_set_limit calls for the limit benchmarks), so ns per call is
 * 1e9 / items_per_second.
 *
 *   pair/<backend>/<size>        alloc + free of one size, warm
 *   mix/<backend>/<live>         random mix, sizes log-uniform 256 B - 64 MiB,
 *                                <live> blocks live; replaces one at a time
 *   frag/<backend>               holes pinned by small blocks, then larger
 *                                requests that do not fit them; counter frag =
 *                                peak held / peak live
 *   fallback/on|off              device full: every alloc spills to host (on)
 *                                or fails (off)
 *   set_limit/idle|release|pending   shrink + grow pairs: nothing to give
 *                                back / an empty region to give back each
 *                                time / a shrink below the live bytes
 *   pair_mt, mix_mt              one instance, 1 and 2 threads at once
 *
 * JSON: vmem-bench --benchmark_out=FILE --benchmark_out_format=json
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vmem.h>

#include "gbench_c.h"

#include "bench_sizes.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#define SIM ((void *)(intptr_t)VMEM_BACKEND_SIM)
#define SIM_VMM ((void *)(intptr_t)VMEM_BACKEND_SIM_VMM)

static vmem_t *open_instance(gb_state_t *st, void *backend, size_t limit, size_t host_limit,
                             int fallback)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = (vmem_backend_kind_t)(intptr_t)backend;
    cfg.sim_capacity = 256 * GiB;
    cfg.limit = limit;
    cfg.host_limit = host_limit;
    cfg.host_fallback = fallback;
    cfg.log_level = VMEM_LOG_NONE;
    vmem_t *v = NULL;
    vmem_status_t s = vmem_create(&cfg, &v);
    if (s != VMEM_OK) {
        gb_error(st, vmem_strerror(s));
        return NULL;
    }
    return v;
}


/* ------------------------------------------------------------------------ */

static void bm_pair(gb_state_t *st, void *backend)
{
    size_t size = (size_t)gb_range(st, 0);
    vmem_t *v = open_instance(st, backend, 0, 0, 1);
    if (!v)
        return;
    vmem_free(v, vmem_alloc(v, size)); /* warm: the region exists */
    int64_t n = 0;
    while (gb_keep_running(st)) {
        void *p = vmem_alloc(v, size);
        vmem_free(v, p);
        n++;
    }
    gb_items(st, 2 * n);
    vmem_destroy(v);
}

static void bm_mix(gb_state_t *st, void *backend)
{
    size_t live = (size_t)gb_range(st, 0);
    vmem_t *v = open_instance(st, backend, 0, 0, 1);
    size_t *sizes = size_table(42, 256, 64 * MiB);
    void **slot = calloc(live, sizeof *slot);
    if (!v || !sizes || !slot) {
        if (v && (!sizes || !slot))
            gb_error(st, "out of memory");
        free(sizes);
        free(slot);
        vmem_destroy(v);
        return;
    }
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    unsigned k = 0;
    for (size_t i = 0; i < live; i++)
        slot[i] = vmem_alloc(v, sizes[k++ % SIZE_TABLE]);
    int64_t n = 0;
    while (gb_keep_running(st)) {
        size_t i = (size_t)(rng_next(&rng) % live);
        vmem_free(v, slot[i]);
        slot[i] = vmem_alloc(v, sizes[k++ % SIZE_TABLE]);
        n++;
    }
    gb_items(st, 2 * n);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    gb_counter(st, "held_GiB", (double)s.device_held / (double)GiB);
    gb_counter(st, "frag", (double)s.device_peak_held / (double)s.device_peak_in_use);
    for (size_t i = 0; i < live; i++)
        vmem_free(v, slot[i]);
    free(slot);
    free(sizes);
    vmem_destroy(v);
}

/* One round: N blocks alternating small (4-64 KiB) and large (1-4 MiB);
 * the large ones are freed, leaving holes pinned by the small ones; then
 * N/2 requests of 2-8 MiB, which mostly do not fit the holes; then all is
 * freed. */
#define FRAG_N 512u
static void bm_frag(gb_state_t *st, void *backend)
{
    vmem_t *v = open_instance(st, backend, 0, 0, 1);
    size_t *small = size_table(1, 4 * KiB, 64 * KiB);
    size_t *large = size_table(2, 1 * MiB, 4 * MiB);
    size_t *bigger = size_table(3, 2 * MiB, 8 * MiB);
    void **blk = calloc(FRAG_N + FRAG_N / 2, sizeof *blk);
    if (!v || !small || !large || !bigger || !blk) {
        if (v)
            gb_error(st, "out of memory");
        goto out;
    }
    unsigned k = 0;
    int64_t ops = 0;
    size_t live = 0, peak_live = 0;
    while (gb_keep_running(st)) {
        live = 0;
        for (unsigned i = 0; i < FRAG_N; i++) {
            size_t sz = (i & 1) ? large[k % SIZE_TABLE] : small[k % SIZE_TABLE];
            k++;
            blk[i] = vmem_alloc(v, sz);
            live += sz;
        }
        if (live > peak_live)
            peak_live = live;
        for (unsigned i = 1; i < FRAG_N; i += 2) {
            vmem_ptr_info_t info;
            if (vmem_ptr_info(v, blk[i], &info) == VMEM_OK)
                live -= info.requested;
            vmem_free(v, blk[i]);
            blk[i] = NULL;
        }
        for (unsigned i = 0; i < FRAG_N / 2; i++) {
            size_t sz = bigger[k++ % SIZE_TABLE];
            blk[FRAG_N + i] = vmem_alloc(v, sz);
            live += sz;
        }
        if (live > peak_live)
            peak_live = live;
        for (unsigned i = 0; i < FRAG_N + FRAG_N / 2; i++) {
            vmem_free(v, blk[i]);
            blk[i] = NULL;
        }
        ops += FRAG_N + FRAG_N / 2 + FRAG_N / 2 + FRAG_N;
    }
    gb_items(st, ops);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    gb_counter(st, "frag", peak_live ? (double)s.device_peak_held / (double)peak_live : 0);
out:
    free(blk);
    free(small);
    free(large);
    free(bigger);
    vmem_destroy(v);
}

/* The device (64 MiB) is filled with 1 MiB blocks; then every allocation
 * goes to the host fallback (arg 1) or fails (arg 0). */
static void bm_fallback(gb_state_t *st, void *arg)
{
    int fallback = (int)(intptr_t)arg;
    vmem_t *v = open_instance(st, SIM, 64 * MiB, 4 * GiB, 1);
    if (!v)
        return;
    void *fill[128];
    size_t nfill = 0;
    vmem_stats_t s = {.size = sizeof s};
    for (; nfill < 128; nfill++) {
        fill[nfill] = vmem_alloc(v, MiB);
        vmem_get_stats(v, &s);
        if (s.spills) {
            nfill++;
            break;
        }
    }
    vmem_set_host_fallback(v, fallback);
    /* Warm: the host arena has its region. */
    vmem_free(v, vmem_alloc(v, MiB));
    int64_t n = 0;
    while (gb_keep_running(st)) {
        void *p = vmem_alloc(v, MiB);
        vmem_free(v, p);
        n++;
    }
    gb_items(st, 2 * n);
    uint64_t spills = s.spills;
    vmem_get_stats(v, &s);
    gb_counter(st, "spills_per_iter", n ? (double)(s.spills - spills) / (double)n : 0);
    for (size_t i = 0; i < nfill; i++)
        vmem_free(v, fill[i]);
    vmem_destroy(v);
}

enum { LIMIT_IDLE, LIMIT_RELEASE, LIMIT_PENDING };

/* 256 MiB live under a 1 GiB limit; each iteration shrinks and grows the
 * limit (2 calls).  idle: shrink to 512 MiB, nothing to give back;
 * release: a 64 MiB block is allocated and freed first, so the shrink to
 * the live bytes gives its region back (4 calls); pending: shrink to
 * 128 MiB, below the live bytes, left pending until the grow. */
static void bm_set_limit(gb_state_t *st, void *arg)
{
    int mode = (int)(intptr_t)arg;
    vmem_t *v = open_instance(st, SIM, GiB, 0, 1);
    if (!v)
        return;
    void *live[4];
    for (int i = 0; i < 4; i++)
        live[i] = vmem_alloc(v, 64 * MiB);
    size_t applied;
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    size_t floor = s.device_held;
    int64_t n = 0, calls = 0;
    while (gb_keep_running(st)) {
        switch (mode) {
        case LIMIT_IDLE:
            vmem_set_limit(v, 512 * MiB, &applied);
            break;
        case LIMIT_RELEASE:
            vmem_free(v, vmem_alloc(v, 64 * MiB));
            vmem_set_limit(v, floor, &applied);
            calls += 2;
            break;
        case LIMIT_PENDING:
            vmem_set_limit(v, 128 * MiB, &applied);
            break;
        }
        vmem_set_limit(v, GiB, &applied);
        calls += 2;
        n++;
    }
    gb_items(st, calls);
    for (int i = 0; i < 4; i++)
        vmem_free(v, live[i]);
    vmem_destroy(v);
}

/* ------------------------------------------------------------------------ */
/* Two threads on one instance                                              */
/* ------------------------------------------------------------------------ */

static vmem_t *mt_instance;
static atomic_int mt_done;

static void bm_pair_mt(gb_state_t *st, void *backend)
{
    size_t size = (size_t)gb_range(st, 0);
    if (gb_thread_index(st) == 0) {
        mt_instance = open_instance(st, backend, 0, 0, 1);
        atomic_store(&mt_done, 0);
        if (mt_instance)
            vmem_free(mt_instance, vmem_alloc(mt_instance, size));
    }
    int64_t n = 0;
    while (gb_keep_running(st)) {
        if (!mt_instance)
            continue;
        void *p = vmem_alloc(mt_instance, size);
        vmem_free(mt_instance, p);
        n++;
    }
    gb_items(st, 2 * n);
    if (atomic_fetch_add(&mt_done, 1) + 1 == gb_thread_count(st)) {
        vmem_destroy(mt_instance);
        mt_instance = NULL;
    }
}

static void bm_mix_mt(gb_state_t *st, void *backend)
{
    size_t live = (size_t)gb_range(st, 0);
    if (gb_thread_index(st) == 0) {
        mt_instance = open_instance(st, backend, 0, 0, 1);
        atomic_store(&mt_done, 0);
    }
    size_t *sizes = size_table(42 + (uint64_t)gb_thread_index(st), 256, 64 * MiB);
    void **slot = calloc(live, sizeof *slot);
    uint64_t rng = 0x9E3779B97F4A7C15ull + (uint64_t)gb_thread_index(st);
    unsigned k = 0;
    int64_t n = 0;
    int filled = 0;
    while (gb_keep_running(st)) {
        if (!mt_instance || !sizes || !slot)
            continue;
        if (!filled) { /* first iteration: fill this thread's slots */
            gb_pause(st);
            for (size_t i = 0; i < live; i++)
                slot[i] = vmem_alloc(mt_instance, sizes[k++ % SIZE_TABLE]);
            filled = 1;
            gb_resume(st);
        }
        size_t i = (size_t)(rng_next(&rng) % live);
        vmem_free(mt_instance, slot[i]);
        slot[i] = vmem_alloc(mt_instance, sizes[k++ % SIZE_TABLE]);
        n++;
    }
    gb_items(st, 2 * n);
    if (mt_instance && slot)
        for (size_t i = 0; i < live; i++)
            vmem_free(mt_instance, slot[i]);
    free(slot);
    free(sizes);
    if (atomic_fetch_add(&mt_done, 1) + 1 == gb_thread_count(st)) {
        vmem_destroy(mt_instance);
        mt_instance = NULL;
    }
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    static const int64_t pair_sizes[] = {256, 4096, 65536, 1 << 20, 16 << 20, 256 << 20};
    struct {
        const char *name;
        void *kind;
    } backends[] = {{"sim", SIM}, {"sim-vmm", SIM_VMM}};
    char name[64];
    for (unsigned b = 0; b < 2; b++) {
        snprintf(name, sizeof name, "pair/%s", backends[b].name);
        gb_bench_t *bm = gb_unit_ns(gb_register(name, bm_pair, backends[b].kind));
        for (unsigned i = 0; i < sizeof pair_sizes / sizeof pair_sizes[0]; i++)
            gb_arg(bm, pair_sizes[i]);
        snprintf(name, sizeof name, "mix/%s", backends[b].name);
        gb_arg(gb_arg(gb_unit_ns(gb_register(name, bm_mix, backends[b].kind)), 1024), 4096);
        snprintf(name, sizeof name, "frag/%s", backends[b].name);
        gb_unit_us(gb_register(name, bm_frag, backends[b].kind));
    }
    gb_unit_ns(gb_register("fallback/on", bm_fallback, (void *)1));
    gb_unit_ns(gb_register("fallback/off", bm_fallback, (void *)0));
    gb_unit_ns(gb_register("set_limit/idle", bm_set_limit, (void *)LIMIT_IDLE));
    gb_unit_ns(gb_register("set_limit/release", bm_set_limit, (void *)LIMIT_RELEASE));
    gb_unit_ns(gb_register("set_limit/pending", bm_set_limit, (void *)LIMIT_PENDING));
    gb_bench_t *mt = gb_real_time(gb_unit_ns(gb_arg(gb_register("pair_mt/sim", bm_pair_mt, SIM), 4096)));
    gb_threads(gb_threads(mt, 1), 2);
    mt = gb_real_time(gb_unit_ns(gb_arg(gb_register("mix_mt/sim", bm_mix_mt, SIM), 1024)));
    gb_threads(gb_threads(mt, 1), 2);
    return gb_main(argc, argv);
}
