/*
 * Concurrency stress: worker threads allocate, write, verify and free blocks
 * while one thread moves the device limit up and down (and trims), one calls
 * vmem_step_end, reads the statistics and runs vmem_check, one changes the
 * host limit and the fallback, and (optionally) one rewrites the watched
 * control file so that the library's own watcher thread applies limits too,
 * and (optionally) one pauses and resumes the tags of two workers while the
 * others allocate in theirs.
 * Block contents are not touched while vmem_step_end runs (see data_lock).
 * Work is counted in operations, never in time.  At the end: vmem_check,
 * the library's counters equal the sum of the threads' own counts, every
 * pattern is intact, and after freeing everything nothing is held.
 */
#include "stress.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define MAX_WORKERS 16
#define SLOTS 48
#define MIN_ROUNDS 64 /* each control thread acts at least this often */

typedef struct stress {
    vmem_t *v;
    const stress_opts_t *o;
    atomic_int workers_left;
    atomic_uint bad;
    /* Data access vs step end: with vmm the step end is where data may move
     * between host and device (design semantics 6), so, as in a training
     * loop, no thread touches block contents while vmem_step_end runs.
     * Workers hold it shared around their pattern writes and checks. */
    pthread_rwlock_t data_lock;
    /* Tags (o->tags): worker t (t = 0, 1) allocates in tag t + 1 and holds
     * tag_lock[t] shared around each operation; the pause thread holds it
     * exclusively from a pause to the matching resume, since a paused tag's
     * blocks must not be touched (docs/tags.md). */
    pthread_rwlock_t tag_lock[2];
    struct worker *tagged[2];
    unsigned pauses[2];           /* successful pauses: [0] discard, [1] keep */
    pthread_mutex_t why_lock;
    char why[256];
    char control_path[256];
} stress_t;

typedef struct worker {
    stress_t *st;
    int id;
    uint64_t allocs, frees, nulls, bad_frees;
    void *p[SLOTS];
    size_t size[SLOTS];
    uint64_t pat[SLOTS]; /* pattern id of each slot's block */
} worker_t;

static void stress_fail(stress_t *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void stress_fail(stress_t *st, const char *fmt, ...)
{
    if (atomic_fetch_add(&st->bad, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        pthread_mutex_lock(&st->why_lock);
        vsnprintf(st->why, sizeof st->why, fmt, ap);
        pthread_mutex_unlock(&st->why_lock);
        va_end(ap);
    }
}

#define CHECK(st, cond, ...)               \
    do {                                   \
        if (!(cond))                       \
            stress_fail((st), __VA_ARGS__); \
    } while (0)

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static uint8_t pattern_at(uint64_t id, size_t off)
{
    return (uint8_t)(((id + 1) * 0x9E3779B97F4A7C15ull + off * 0xBF58476D1CE4E5B9ull) >> 56);
}

static void pattern_fill(void *p, size_t n, uint64_t id)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n && i < 64; i++)
        b[i] = pattern_at(id, i);
    for (size_t i = n > 64 ? n - 64 : n; i < n; i++)
        b[i] = pattern_at(id, i);
}

static int pattern_ok(const void *p, size_t n, uint64_t id)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n && i < 64; i++)
        if (b[i] != pattern_at(id, i))
            return 0;
    for (size_t i = n > 64 ? n - 64 : n; i < n; i++)
        if (b[i] != pattern_at(id, i))
            return 0;
    return 1;
}

static void quiet_log(void *ctx, vmem_log_level_t level, const char *msg)
{
    (void)ctx;
    (void)level;
    (void)msg;
}

static int rounds_left(stress_t *st, unsigned n)
{
    return atomic_load(&st->workers_left) > 0 || n < MIN_ROUNDS;
}

static void worker_op(struct worker *w, int op, void *stream, uint64_t *rs, char *foreign);

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    stress_t *st = w->st;
    vmem_t *v = st->v;
    void *stream = st->o->streams ? (void *)(uintptr_t)(0x10000 * (w->id + 1)) : NULL;
    uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
    char foreign[64];
    pthread_rwlock_t *tl = st->o->tags && w->id < 2 ? &st->tag_lock[w->id] : NULL;
    if (tl) {
        vmem_status_t s = vmem_set_tag(v, (unsigned)w->id + 1, NULL);
        CHECK(st, s == VMEM_OK, "set_tag(%d): %s", w->id + 1, vmem_strerror(s));
    }
    for (int op = 0; op < st->o->ops; op++) {
        if (tl)
            pthread_rwlock_rdlock(tl);
        worker_op(w, op, stream, &r, foreign);
        if (tl)
            pthread_rwlock_unlock(tl);
    }
    atomic_fetch_sub(&st->workers_left, 1);
    return NULL;
}

/* One operation of a worker: free a slot's block (pattern and ptr_info
 * checked first) or fill an empty slot. */
static void worker_op(worker_t *w, int op, void *stream, uint64_t *rs, char *foreign)
{
    stress_t *st = w->st;
    vmem_t *v = st->v;
    uint64_t r = *rs;
    do {
        if (op % 500 == 0) {
            vmem_status_t s = vmem_free(v, foreign + op % 64);
            CHECK(st, s == VMEM_ERR_FOREIGN_PTR, "free of a stack address: %s", vmem_strerror(s));
            w->bad_frees++;
        }
        int i = (int)(rnd(&r) % SLOTS);
        if (w->p[i]) {
            pthread_rwlock_rdlock(&st->data_lock);
            CHECK(st, pattern_ok(w->p[i], w->size[i], w->pat[i]), "block %p overwritten", w->p[i]);
            pthread_rwlock_unlock(&st->data_lock);
            vmem_ptr_info_t info;
            vmem_status_t s = vmem_ptr_info(v, w->p[i], &info);
            CHECK(st, s == VMEM_OK && info.base == w->p[i] && info.requested == w->size[i],
                  "ptr_info(%p): %s", w->p[i], vmem_strerror(s));
            s = vmem_free_stream(v, w->p[i], stream);
            CHECK(st, s == VMEM_OK, "free(%p): %s", w->p[i], vmem_strerror(s));
            w->p[i] = NULL;
            w->frees++;
            continue;
        }
        /* mostly small, some large enough to need new regions */
        uint64_t x = rnd(&r);
        size_t size = (x & 7) == 0 ? 1 + (x >> 8) % (8 * MiB) : 1 + (x >> 8) % (64 * KiB);
        void *p = vmem_alloc_stream(v, size, stream);
        if (!p) {
            CHECK(st, vmem_last_status() == VMEM_ERR_NOMEM, "alloc(%zu): %s", size,
                  vmem_strerror(vmem_last_status()));
            w->nulls++;
            continue;
        }
        vmem_ptr_info_t info;
        vmem_status_t s = vmem_ptr_info(v, p, &info);
        CHECK(st, s == VMEM_OK && info.base == p, "new block %p: %s", p, vmem_strerror(s));
        w->p[i] = p;
        w->size[i] = size;
        w->pat[i] = ((uint64_t)w->id << 32) | (uint64_t)op;
        pthread_rwlock_rdlock(&st->data_lock);
        pattern_fill(p, size, w->pat[i]);
        pthread_rwlock_unlock(&st->data_lock);
        w->allocs++;
    } while (0);
    *rs = r;
}

/* Moves the limit between 2 MiB and the cap, and trims now and then. */
static void *limit_main(void *arg)
{
    stress_t *st = arg;
    static const size_t limits[] = {64 * MiB, 4 * MiB, 32 * MiB, 12 * MiB, 128 * MiB, 2 * MiB};
    for (unsigned n = 0; rounds_left(st, n); n++) {
        size_t applied = 0;
        vmem_status_t s = vmem_set_limit(st->v, limits[n % 6], &applied);
        CHECK(st, s == VMEM_OK || s == VMEM_PENDING, "set_limit: %s", vmem_strerror(s));
        if (n % 7 == 0) {
            size_t released;
            s = vmem_trim(st->v, &released);
            CHECK(st, s == VMEM_OK, "trim: %s", vmem_strerror(s));
        }
        sched_yield();
    }
    return NULL;
}

/* Step ends, statistics, JSON, checks. */
static void *step_main(void *arg)
{
    stress_t *st = arg;
    char json[4096];
    for (unsigned n = 0; rounds_left(st, n); n++) {
        pthread_rwlock_wrlock(&st->data_lock);
        vmem_status_t s = vmem_step_end(st->v);
        pthread_rwlock_unlock(&st->data_lock);
        CHECK(st, s == VMEM_OK, "step_end: %s", vmem_strerror(s));
        vmem_stats_t x = {.size = sizeof x};
        s = vmem_get_stats(st->v, &x);
        CHECK(st, s == VMEM_OK && x.device_in_use <= x.device_held + x.host_in_use,
              "stats: %s, device in use %zu held %zu", vmem_strerror(s), x.device_in_use,
              x.device_held);
        if (n % 4 == 0) {
            s = vmem_stats_json(st->v, json, sizeof json, NULL);
            CHECK(st, s == VMEM_OK, "stats_json: %s", vmem_strerror(s));
        }
        if (n % 16 == 0)
            CHECK(st, vmem_check(st->v) == VMEM_OK, "vmem_check failed during the run");
        sched_yield();
    }
    return NULL;
}

/* Host limit and fallback switches. */
static void *host_main(void *arg)
{
    stress_t *st = arg;
    for (unsigned n = 0; rounds_left(st, n); n++) {
        vmem_status_t s = vmem_set_host_limit(st->v, (n % 3 == 0) ? 64 * MiB : 512 * MiB);
        CHECK(st, s == VMEM_OK || s == VMEM_PENDING, "set_host_limit: %s", vmem_strerror(s));
        s = vmem_set_host_fallback(st->v, n % 5 != 0);
        CHECK(st, s == VMEM_OK, "set_host_fallback: %s", vmem_strerror(s));
        sched_yield();
    }
    (void)vmem_set_host_fallback(st->v, 1);
    return NULL;
}

/* Pauses tag 1 or 2 (keep, or discard one time in three) with its worker
 * held off, checks that the tag holds no device memory, resumes it (spilling
 * what does not fit; retried while the other threads make room), and after a
 * discard writes the worker's patterns again (contents are undefined). */
static void *pause_main(void *arg)
{
    stress_t *st = arg;
    for (unsigned n = 0; rounds_left(st, n); n++) {
        int t = (int)(n % 2);
        unsigned tag = (unsigned)t + 1;
        int keep = n % 3 != 0;
        pthread_rwlock_wrlock(&st->tag_lock[t]);
        vmem_status_t s = vmem_pause(st->v, tag, keep ? VMEM_PAUSE_KEEP : VMEM_PAUSE_DISCARD);
        CHECK(st, s == VMEM_OK || (keep && s == VMEM_ERR_NOMEM), "pause(%u, %s): %s", tag,
              keep ? "keep" : "discard", vmem_strerror(s));
        if (s == VMEM_OK) {
            st->pauses[keep]++;
            vmem_tag_stats_t ts = {.size = sizeof ts};
            CHECK(st, vmem_get_tag_stats(st->v, tag, &ts) == VMEM_OK && ts.device_held == 0 &&
                          ts.state != VMEM_TAG_ACTIVE,
                  "tag %u after pause: device held %zu, state %d", tag, ts.device_held,
                  (int)ts.state);
            /* No room (the limit thread left a 2 MiB limit, the host thread
             * the fallback off or a 64 MiB host limit, and they may have
             * stopped): VMEM_ERR_NOMEM is the documented answer.  After a
             * while this thread makes room itself, as a scheduler would. */
            int tries = 0;
            while ((s = vmem_resume_ex(st->v, tag, VMEM_RESUME_SPILL)) == VMEM_ERR_NOMEM &&
                   ++tries < 100000) {
                if (tries % 1000 == 0) {
                    (void)vmem_set_host_fallback(st->v, 1);
                    (void)vmem_set_host_limit(st->v, 512 * MiB);
                    (void)vmem_set_limit(st->v, 128 * MiB, NULL);
                }
                sched_yield();
            }
            CHECK(st, s == VMEM_OK, "resume(%u): %s after %d tries", tag, vmem_strerror(s), tries);
            worker_t *w = st->tagged[t];
            if (!keep && w && s == VMEM_OK) {
                pthread_rwlock_rdlock(&st->data_lock); /* not while a step end moves data */
                for (int i = 0; i < SLOTS; i++)
                    if (w->p[i])
                        pattern_fill(w->p[i], w->size[i], w->pat[i]);
                pthread_rwlock_unlock(&st->data_lock);
            }
        }
        pthread_rwlock_unlock(&st->tag_lock[t]);
        sched_yield();
    }
    return NULL;
}

/* Rewrites the control file (write to a temporary name, then rename), so the
 * library's watcher thread changes the limit concurrently with everything. */
static void *control_main(void *arg)
{
    stress_t *st = arg;
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", st->control_path);
    static const char *const bodies[] = {
        "{\"limit\": \"48M\"}", "{\"limit\": 8388608, \"host_fallback\": true}",
        "{\"limit\": \"100M\", \"host_limit\": \"256M\"}", "{\"limit\": \"6M\"}",
    };
    for (unsigned n = 0; rounds_left(st, n); n++) {
        FILE *f = fopen(tmp, "w");
        CHECK(st, f != NULL, "cannot write %s", tmp);
        if (!f)
            break;
        fputs(bodies[n % 4], f);
        fclose(f);
        CHECK(st, rename(tmp, st->control_path) == 0, "rename to %s", st->control_path);
        usleep(2000);
    }
    return NULL;
}

unsigned stress_run(const stress_opts_t *o, char *why, size_t len)
{
    static stress_t st;
    static worker_t w[MAX_WORKERS];
    memset(&st, 0, sizeof st);
    memset(w, 0, sizeof w);
    st.o = o;
    pthread_mutex_init(&st.why_lock, NULL);
    pthread_rwlock_init(&st.data_lock, NULL);
    pthread_rwlock_init(&st.tag_lock[0], NULL);
    pthread_rwlock_init(&st.tag_lock[1], NULL);
    atomic_init(&st.bad, 0);
    int nworkers = o->workers < 1 ? 1 : o->workers > MAX_WORKERS ? MAX_WORKERS : o->workers;
    atomic_init(&st.workers_left, nworkers);

    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = o->backend;
    cfg.sim_capacity = 256 * MiB;
    cfg.limit = 128 * MiB;
    cfg.host_limit = 512 * MiB;
    cfg.log_fn = quiet_log;
    if (o->control_file) {
        snprintf(st.control_path, sizeof st.control_path, "/tmp/vmem-stress-%d-%d.json",
                 (int)getpid(), o->backend);
        FILE *f = fopen(st.control_path, "w");
        if (f) {
            fputs("{\"limit\": \"64M\"}", f);
            fclose(f);
        }
        cfg.control_file = st.control_path;
        cfg.control_immediate = 1;
    }
    vmem_status_t cs = vmem_create(&cfg, &st.v);
    if (cs == VMEM_ERR_UNSUPPORTED && o->control_file) {
        snprintf(why, len, "skipped: control files not supported by this build");
        unlink(st.control_path);
        return 0;
    }
    if (cs != VMEM_OK) {
        snprintf(why, len, "vmem_create: %s", vmem_strerror(cs));
        return 1;
    }
    pthread_t tw[MAX_WORKERS], tl, ts, th, tc, tp;
    for (int i = 0; i < nworkers; i++) {
        w[i].st = &st;
        w[i].id = i;
        if (o->tags && i < 2)
            st.tagged[i] = &w[i];
    }
    for (int i = 0; i < nworkers; i++)
        pthread_create(&tw[i], NULL, worker_main, &w[i]);
    if (o->tags)
        pthread_create(&tp, NULL, pause_main, &st);
    pthread_create(&tl, NULL, limit_main, &st);
    pthread_create(&ts, NULL, step_main, &st);
    pthread_create(&th, NULL, host_main, &st);
    if (o->control_file)
        pthread_create(&tc, NULL, control_main, &st);
    for (int i = 0; i < nworkers; i++)
        pthread_join(tw[i], NULL);
    pthread_join(tl, NULL);
    pthread_join(ts, NULL);
    pthread_join(th, NULL);
    if (o->control_file)
        pthread_join(tc, NULL);
    if (o->tags)
        pthread_join(tp, NULL);

    CHECK(&st, !o->tags || (st.pauses[0] > 0 && st.pauses[1] > 0),
          "tags: %u pauses with discard, %u with keep", st.pauses[0], st.pauses[1]);
    /* Quiet now: everything must add up. */
    CHECK(&st, vmem_check(st.v) == VMEM_OK, "vmem_check failed after the run");
    uint64_t allocs = 0, frees = 0, nulls = 0, bad_frees = 0;
    for (int i = 0; i < nworkers; i++) {
        allocs += w[i].allocs;
        frees += w[i].frees;
        nulls += w[i].nulls;
        bad_frees += w[i].bad_frees;
    }
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(st.v, &s);
    CHECK(&st, s.allocs == allocs && s.frees == frees && s.failures == nulls,
          "counters: allocs %llu/%llu frees %llu/%llu failures %llu/%llu",
          (unsigned long long)s.allocs, (unsigned long long)allocs, (unsigned long long)s.frees,
          (unsigned long long)frees, (unsigned long long)s.failures, (unsigned long long)nulls);
    CHECK(&st, s.bad_frees == bad_frees, "bad frees %llu, threads saw %llu",
          (unsigned long long)s.bad_frees, (unsigned long long)bad_frees);
    CHECK(&st, s.steps > 0 && allocs > 0, "no steps (%llu) or no allocations (%llu)",
          (unsigned long long)s.steps, (unsigned long long)allocs);
    for (int i = 0; i < nworkers; i++)
        for (int j = 0; j < SLOTS; j++)
            if (w[i].p[j]) {
                CHECK(&st, pattern_ok(w[i].p[j], w[i].size[j], w[i].pat[j]),
                      "block %p overwritten", w[i].p[j]);
                CHECK(&st, vmem_free(st.v, w[i].p[j]) == VMEM_OK, "final free of %p", w[i].p[j]);
            }
    /* The last limit may be pending: raise it, then nothing may stay held. */
    size_t applied, released;
    CHECK(&st, vmem_set_limit(st.v, 128 * MiB, &applied) == VMEM_OK, "final set_limit");
    CHECK(&st, vmem_trim(st.v, &released) == VMEM_OK, "final trim");
    vmem_get_stats(st.v, &s);
    CHECK(&st, s.device_held == 0 && s.host_held == 0 && s.device_in_use == 0 && s.host_in_use == 0,
          "after freeing everything: device held %zu, host held %zu", s.device_held, s.host_held);
    CHECK(&st, vmem_check(st.v) == VMEM_OK, "vmem_check failed at the end");
    vmem_destroy(st.v);
    if (o->control_file) {
        unlink(st.control_path);
        char tmp[300];
        snprintf(tmp, sizeof tmp, "%s.tmp", st.control_path);
        unlink(tmp);
    }
    unsigned bad = atomic_load(&st.bad);
    if (bad)
        snprintf(why, len, "%s", st.why);
    pthread_mutex_destroy(&st.why_lock);
    pthread_rwlock_destroy(&st.data_lock);
    pthread_rwlock_destroy(&st.tag_lock[0]);
    pthread_rwlock_destroy(&st.tag_lock[1]);
    return bad;
}
