/*
 * Multi-threaded stress (DESIGN semantics 8): worker threads allocate and
 * free random sizes with patterns while one thread moves the limit up and
 * down and one calls vmem_step_end.  At the end: vmem_check passes and the
 * counters agree with what the threads did.
 *
 * vmem_step_end is the step boundary, the safe point at which vmm-style
 * backends may move block contents between host and device (DESIGN
 * semantics 6): a runtime calls it while no kernel touches memory.  The
 * workers model kernels by touching their blocks under a read lock that the
 * step thread takes for writing; allocation, free and limit changes stay
 * fully concurrent with it.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { WORKERS = 6, SLOTS = 48, OPS = 6000 };

typedef struct worker {
    pthread_t thread;
    vmem_t *v;
    uint64_t seed;
    uint64_t allocs, frees, failures;
    size_t live;            /* blocks still held at the end */
    char *p[SLOTS];
    size_t size[SLOTS];
    uint64_t id[SLOTS];
    char error[256];        /* first problem seen (asserts stay on the main thread) */
} worker_t;

static atomic_int stop;
static pthread_rwlock_t kernels = PTHREAD_RWLOCK_INITIALIZER;

static void worker_fail(worker_t *w, const char *what, const void *p)
{
    if (!w->error[0])
        snprintf(w->error, sizeof w->error, "%s (%p)", what, p);
}

static void *worker_run(void *arg)
{
    worker_t *w = arg;
    uint64_t rng = w->seed;
    for (int op = 0; op < OPS; op++) {
        size_t i = rng_range(&rng, 0, SLOTS - 1);
        if (w->p[i]) {
            pthread_rwlock_rdlock(&kernels);
            if (!pattern_ok(w->p[i], w->size[i], w->id[i]))
                worker_fail(w, "block overwritten", w->p[i]);
            pthread_rwlock_unlock(&kernels);
            if (vmem_free(w->v, w->p[i]) != VMEM_OK)
                worker_fail(w, "vmem_free failed", w->p[i]);
            else
                w->frees++;
            w->p[i] = NULL;
        } else {
            size_t size = rng_size(&rng, MiB);
            char *p = vmem_alloc(w->v, size);
            if (!p) {
                if (vmem_last_status() != VMEM_ERR_NOMEM)
                    worker_fail(w, "vmem_alloc failed with a status other than NOMEM", NULL);
                w->failures++;
                continue;
            }
            w->allocs++;
            w->p[i] = p;
            w->size[i] = size;
            w->id[i] = (w->seed << 32) | (uint64_t)op;
            pthread_rwlock_rdlock(&kernels);
            pattern_fill(p, size, w->id[i]);
            pthread_rwlock_unlock(&kernels);
        }
    }
    for (size_t i = 0; i < SLOTS; i++)
        w->live += w->p[i] != NULL;
    return NULL;
}

typedef struct limiter {
    vmem_t *v;
    unsigned changes;
    char error[256];
} limiter_t;

static void *limiter_run(void *arg)
{
    limiter_t *l = arg;
    uint64_t rng = 99;
    while (!atomic_load(&stop)) {
        size_t limit = rng_range(&rng, 2, 32) * MiB;
        vmem_status_t st = vmem_set_limit(l->v, limit, NULL);
        if (st != VMEM_OK && st != VMEM_PENDING && !l->error[0])
            snprintf(l->error, sizeof l->error, "vmem_set_limit(%zu): %s", limit, vmem_strerror(st));
        l->changes++;
        sched_yield();
    }
    return NULL;
}

typedef struct stepper {
    vmem_t *v;
    unsigned steps;
    char error[256];
} stepper_t;

static void *stepper_run(void *arg)
{
    stepper_t *s = arg;
    char json[4096];
    while (!atomic_load(&stop)) {
        pthread_rwlock_wrlock(&kernels);
        vmem_status_t st = vmem_step_end(s->v);
        pthread_rwlock_unlock(&kernels);
        if (st != VMEM_OK && !s->error[0])
            snprintf(s->error, sizeof s->error, "vmem_step_end: %s", vmem_strerror(st));
        if (vmem_stats_json(s->v, json, sizeof json, NULL) != VMEM_OK && !s->error[0])
            snprintf(s->error, sizeof s->error, "vmem_stats_json failed");
        s->steps++;
        sched_yield();
    }
    return NULL;
}

typedef struct stress_param {
    vmem_backend_kind_t kind;
} stress_param_t;

ParameterizedTestParameters(stress, threads_with_moving_limit)
{
    static stress_param_t params[] = {{VMEM_BACKEND_SIM}, {VMEM_BACKEND_SIM_VMM}};
    return cr_make_param_array(stress_param_t, params, sizeof params / sizeof params[0]);
}

ParameterizedTest(stress_param_t *param, stress, threads_with_moving_limit, .timeout = 60)
{
    log_capture_t cap = LOG_CAPTURE_INIT;
    vmem_config_t cfg = sim_config(param->kind, 32 * MiB, 32 * MiB, 48 * MiB, &cap);
    vmem_t *v = create_or_die(&cfg);
    static worker_t w[WORKERS];
    limiter_t lim = {.v = v};
    stepper_t step = {.v = v};
    pthread_t tl, ts;
    atomic_store(&stop, 0);
    for (int i = 0; i < WORKERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].v = v;
        w[i].seed = 1000 + (uint64_t)i;
        cr_assert_eq(pthread_create(&w[i].thread, NULL, worker_run, &w[i]), 0);
    }
    cr_assert_eq(pthread_create(&tl, NULL, limiter_run, &lim), 0);
    cr_assert_eq(pthread_create(&ts, NULL, stepper_run, &step), 0);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i].thread, NULL);
    atomic_store(&stop, 1);
    pthread_join(tl, NULL);
    pthread_join(ts, NULL);

    uint64_t allocs = 0, frees = 0, failures = 0, live = 0;
    for (int i = 0; i < WORKERS; i++) {
        cr_assert_eq(w[i].error[0], '\0', "%s, worker %d: %s", vmem_backend_name(param->kind), i,
                     w[i].error);
        allocs += w[i].allocs;
        frees += w[i].frees;
        failures += w[i].failures;
        live += w[i].live;
    }
    cr_assert_eq(lim.error[0], '\0', "%s", lim.error);
    cr_assert_eq(step.error[0], '\0', "%s", step.error);
    cr_assert_gt(lim.changes, 0);
    cr_assert_gt(step.steps, 0);
    CHECK_VMEM(v, "the threads finished (last log line: %s)", cap.last);
    vmem_stats_t s = stats_of(v);
    cr_assert_eq(s.allocs, allocs, "allocs: library %llu, threads %llu",
                 (unsigned long long)s.allocs, (unsigned long long)allocs);
    cr_assert_eq(s.frees, frees);
    cr_assert_eq(s.failures, failures);
    cr_assert_eq(s.allocs - s.frees, live, "allocs - frees != live blocks");
    cr_assert_eq(s.bad_frees, 0);
    cr_assert_eq(s.steps, step.steps);
    /* Everything still live is intact and frees cleanly. */
    for (int i = 0; i < WORKERS; i++)
        for (size_t k = 0; k < SLOTS; k++)
            if (w[i].p[k]) {
                cr_assert(pattern_ok(w[i].p[k], w[i].size[k], w[i].id[k]), "block overwritten");
                cr_assert_eq(vmem_free(v, w[i].p[k]), VMEM_OK);
            }
    CHECK_VMEM(v, "the final frees");
    s = stats_of(v);
    cr_assert_eq(s.allocs, s.frees);
    cr_assert_eq(s.device_in_use + s.host_in_use, 0);
    vmem_destroy(v);
}
