/*
 * Concurrency stress (suite 'stress', run under ThreadSanitizer by
 * scripts/sanitize.sh tsan): worker threads allocate, write, verify and free
 * blocks while one thread moves the device limit up and down (and trims),
 * one calls vmem_step_end and reads the statistics, and one changes the
 * host limit and the fallback.  Work is counted in operations, never in
 * time.  At the end: vmem_check, the library's counters equal the sum of
 * the threads' own counts, every pattern is intact, and after freeing
 * everything nothing is held.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "fuzz_common.h"

#define WORKERS 4
#define WORKER_OPS 6000
#define SLOTS 48
#define MIN_ROUNDS 64 /* each control thread acts at least this often */

typedef struct stress {
    vmem_t *v;
    atomic_int workers_left;   /* workers still running */
    atomic_ulong bad;          /* failed checks, reported by the main thread */
    int streams;               /* workers allocate on their own (fake) stream */
} stress_t;

typedef struct worker {
    stress_t *st;
    int id;
    uint64_t allocs, frees, nulls, bad_frees;
    void *p[SLOTS];
    size_t size[SLOTS];
    uint64_t tag[SLOTS];
} worker_t;

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    vmem_t *v = w->st->v;
    void *stream = w->st->streams ? (void *)(uintptr_t)(0x10000 * (w->id + 1)) : NULL;
    uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
    char foreign[64];
    for (int op = 0; op < WORKER_OPS; op++) {
        if (op % 500 == 0) {
            if (vmem_free(v, foreign + op % 64) != VMEM_ERR_FOREIGN_PTR)
                atomic_fetch_add(&w->st->bad, 1);
            w->bad_frees++;
        }
        int i = (int)(rnd(&r) % SLOTS);
        if (w->p[i]) {
            if (!pattern_ok(w->p[i], w->size[i], w->tag[i]))
                atomic_fetch_add(&w->st->bad, 1);
            vmem_ptr_info_t info;
            if (vmem_ptr_info(v, w->p[i], &info) != VMEM_OK || info.base != w->p[i] ||
                info.requested != w->size[i])
                atomic_fetch_add(&w->st->bad, 1);
            if (vmem_free_stream(v, w->p[i], stream) != VMEM_OK)
                atomic_fetch_add(&w->st->bad, 1);
            w->p[i] = NULL;
            w->frees++;
        } else {
            /* mostly small, some large enough to need new regions */
            uint64_t x = rnd(&r);
            size_t size = (x & 7) == 0 ? 1 + (x >> 8) % (8 * MiB) : 1 + (x >> 8) % (64 * KiB);
            void *p = vmem_alloc_stream(v, size, stream);
            if (!p) {
                if (vmem_last_status() != VMEM_ERR_NOMEM)
                    atomic_fetch_add(&w->st->bad, 1);
                w->nulls++;
                continue;
            }
            vmem_ptr_info_t info;
            if (vmem_ptr_info(v, p, &info) != VMEM_OK)
                atomic_fetch_add(&w->st->bad, 1);
            w->p[i] = p;
            w->size[i] = size;
            w->tag[i] = ((uint64_t)w->id << 32) | (uint64_t)op;
            pattern_fill(p, size, w->tag[i]);
            w->allocs++;
        }
    }
    atomic_fetch_sub(&w->st->workers_left, 1);
    return NULL;
}

/* Moves the limit between 4 MiB and the cap, and trims now and then. */
static void *limit_main(void *arg)
{
    stress_t *st = arg;
    static const size_t limits[] = {64 * MiB, 4 * MiB, 32 * MiB, 12 * MiB, 128 * MiB, 2 * MiB};
    unsigned n = 0;
    while (atomic_load(&st->workers_left) > 0 || n < MIN_ROUNDS) {
        size_t applied = 0;
        vmem_status_t s = vmem_set_limit(st->v, limits[n % 6], &applied);
        if (s != VMEM_OK && s != VMEM_PENDING)
            atomic_fetch_add(&st->bad, 1);
        if (n % 7 == 0) {
            size_t released;
            if (vmem_trim(st->v, &released) != VMEM_OK)
                atomic_fetch_add(&st->bad, 1);
        }
        n++;
        sched_yield();
    }
    return NULL;
}

/* Step ends, statistics, checks. */
static void *step_main(void *arg)
{
    stress_t *st = arg;
    unsigned n = 0;
    char json[4096];
    while (atomic_load(&st->workers_left) > 0 || n < MIN_ROUNDS) {
        if (vmem_step_end(st->v) != VMEM_OK)
            atomic_fetch_add(&st->bad, 1);
        vmem_stats_t s = {.size = sizeof s};
        if (vmem_get_stats(st->v, &s) != VMEM_OK || s.device_in_use > s.device_held ||
            s.host_in_use > s.host_held)
            atomic_fetch_add(&st->bad, 1);
        if (n % 4 == 0 && vmem_stats_json(st->v, json, sizeof json, NULL) != VMEM_OK)
            atomic_fetch_add(&st->bad, 1);
        if (n % 16 == 0 && vmem_check(st->v) != VMEM_OK)
            atomic_fetch_add(&st->bad, 1);
        n++;
        sched_yield();
    }
    return NULL;
}

/* Host limit and fallback switches. */
static void *host_main(void *arg)
{
    stress_t *st = arg;
    unsigned n = 0;
    while (atomic_load(&st->workers_left) > 0 || n < MIN_ROUNDS) {
        vmem_status_t s = vmem_set_host_limit(st->v, (n % 3 == 0) ? 64 * MiB : 512 * MiB);
        if (s != VMEM_OK && s != VMEM_PENDING)
            atomic_fetch_add(&st->bad, 1);
        if (vmem_set_host_fallback(st->v, n % 5 != 0) != VMEM_OK)
            atomic_fetch_add(&st->bad, 1);
        n++;
        sched_yield();
    }
    (void)vmem_set_host_fallback(st->v, 1);
    return NULL;
}

static void stress_run(vmem_backend_kind_t kind, int streams)
{
    stress_t st = {.v = sim_open(kind, 256 * MiB, 128 * MiB, 512 * MiB), .streams = streams};
    atomic_init(&st.workers_left, WORKERS);
    atomic_init(&st.bad, 0);
    static worker_t w[WORKERS];
    memset(w, 0, sizeof w);
    pthread_t tw[WORKERS], tl, ts, th;
    for (int i = 0; i < WORKERS; i++) {
        w[i].st = &st;
        w[i].id = i;
        cr_assert_eq(pthread_create(&tw[i], NULL, worker_main, &w[i]), 0);
    }
    cr_assert_eq(pthread_create(&tl, NULL, limit_main, &st), 0);
    cr_assert_eq(pthread_create(&ts, NULL, step_main, &st), 0);
    cr_assert_eq(pthread_create(&th, NULL, host_main, &st), 0);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(tw[i], NULL);
    pthread_join(tl, NULL);
    pthread_join(ts, NULL);
    pthread_join(th, NULL);

    cr_assert_eq(atomic_load(&st.bad), 0, "%lu failed checks in the threads",
                 (unsigned long)atomic_load(&st.bad));
    cr_assert_eq(vmem_check(st.v), VMEM_OK);
    uint64_t allocs = 0, frees = 0, nulls = 0, bad_frees = 0;
    for (int i = 0; i < WORKERS; i++) {
        allocs += w[i].allocs;
        frees += w[i].frees;
        nulls += w[i].nulls;
        bad_frees += w[i].bad_frees;
    }
    vmem_stats_t s = stats_of(st.v);
    cr_assert_eq(s.allocs, allocs);
    cr_assert_eq(s.frees, frees);
    cr_assert_eq(s.failures, nulls);
    cr_assert_eq(s.bad_frees, bad_frees);
    cr_assert_gt(s.steps, 0);
    cr_assert_gt(allocs, 0);
    for (int i = 0; i < WORKERS; i++)
        for (int j = 0; j < SLOTS; j++)
            if (w[i].p[j]) {
                cr_assert(pattern_ok(w[i].p[j], w[i].size[j], w[i].tag[j]));
                cr_assert_eq(vmem_free(st.v, w[i].p[j]), VMEM_OK);
            }
    /* the last limit may be pending; raise it so the trim is unconstrained */
    size_t applied;
    cr_assert_eq(vmem_set_limit(st.v, 128 * MiB, &applied), VMEM_OK);
    assert_nothing_held(st.v);
    vmem_destroy(st.v);
}

Test(stress, sim_threads_limit_step) { stress_run(VMEM_BACKEND_SIM, 0); }
Test(stress, sim_vmm_threads_limit_step) { stress_run(VMEM_BACKEND_SIM_VMM, 0); }
Test(stress, sim_vmm_streams_threads_limit_step) { stress_run(VMEM_BACKEND_SIM_VMM, 1); }
