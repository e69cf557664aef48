/*
 * The instance lock (src/lock.h, src/lock.c): mutual exclusion under
 * contention, the sleeping path, and the state it leaves.  The counters are
 * plain (non-atomic) integers: a lock that lets two threads in loses
 * increments.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <time.h>

#include "lock.h"

#define THREADS 8

typedef struct shared {
    vmem_lock_t lock;
    unsigned long long count; /* only under lock */
    unsigned long long inside; /* threads inside the lock now, only under lock */
    int overlap;               /* set if a thread found another inside */
    unsigned rounds;
    long hold_ns; /* > 0: sleep that long while holding (waiters then sleep too) */
} shared_t;

static void *worker(void *arg)
{
    shared_t *s = arg;
    for (unsigned i = 0; i < s->rounds; i++) {
        vmem_lock(&s->lock);
        if (s->inside++)
            s->overlap = 1;
        unsigned long long c = s->count;
        if (s->hold_ns) {
            struct timespec ts = {0, s->hold_ns};
            nanosleep(&ts, NULL);
        }
        s->count = c + 1;
        s->inside--;
        vmem_unlock(&s->lock);
    }
    return NULL;
}

static void run(shared_t *s)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, worker, s), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
}

Test(lock, contended_increments_are_never_lost)
{
    static shared_t s;
    vmem_lock_init(&s.lock);
    s.rounds = 200000;
    run(&s);
    cr_assert_eq(s.count, (unsigned long long)THREADS * s.rounds);
    cr_assert_eq(s.overlap, 0, "two threads held the lock at once");
    vmem_lock_destroy(&s.lock);
}

/* Holders that sleep push the waiters past their spins into the kernel:
 * every unlock must wake one, or the test hangs (meson's timeout fails it). */
Test(lock, waiters_that_sleep_are_woken, .timeout = 60)
{
    static shared_t s;
    vmem_lock_init(&s.lock);
    s.rounds = 200;
    s.hold_ns = 200000; /* 0.2 ms */
    run(&s);
    cr_assert_eq(s.count, (unsigned long long)THREADS * s.rounds);
    cr_assert_eq(s.overlap, 0);
#ifdef __linux__
    cr_assert_eq(atomic_load(&s.lock.state), 0, "free after the last unlock");
#endif
    vmem_lock_destroy(&s.lock);
}

Test(lock, uncontended_lock_and_unlock_leave_it_free)
{
    vmem_lock_t l;
    vmem_lock_init(&l);
    for (int i = 0; i < 3; i++) {
        vmem_lock(&l);
#ifdef __linux__
        cr_assert_eq(atomic_load(&l.state), 1);
#endif
        vmem_unlock(&l);
#ifdef __linux__
        cr_assert_eq(atomic_load(&l.state), 0);
#endif
    }
    vmem_lock_destroy(&l);
}
