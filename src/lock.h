/*
 * The instance lock (vmem_t.lock): a mutex whose uncontended lock and unlock
 * are one atomic instruction each, inline on the allocation path.
 *
 * Every public call takes it once, so its cost is paid per operation:
 * pthread_mutex_lock and _unlock cost about 56 instructions a pair there
 * (two calls into libc, type and owner checks), a tenth of a replayed
 * allocation and free (docs/benchmarks.md, "Speed").  On Linux this is the
 * classic three-state futex mutex: 0 free, 1 held, 2 held and maybe
 * waited for.  A contended lock spins briefly, then sleeps in the kernel
 * (FUTEX_WAIT), so a thread holding it through a long call (a device
 * synchronisation, a region mapped) costs the waiters no CPU; an unlock
 * that finds 2 wakes one waiter.  Acquire on lock, release on unlock
 * (ThreadSanitizer sees the C11 atomics).  Elsewhere it is a pthread mutex.
 * Not recursive, like the default pthread mutex; no condition variables.
 */
#ifndef VMEM_LOCK_H
#define VMEM_LOCK_H

#ifdef __linux__
#include <stdatomic.h>

typedef struct vmem_lock {
    _Atomic int state; /* 0 free, 1 held, 2 held with (maybe) waiters */
} vmem_lock_t;

void vmem_lock_wait(vmem_lock_t *l); /* lock.c: the contended lock */
void vmem_lock_wake(vmem_lock_t *l); /* lock.c: wakes one waiter */

static inline void vmem_lock_init(vmem_lock_t *l) { atomic_init(&l->state, 0); }
static inline void vmem_lock_destroy(vmem_lock_t *l) { (void)l; }

static inline void vmem_lock(vmem_lock_t *l)
{
    int free_state = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->state, &free_state, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        vmem_lock_wait(l);
}

static inline void vmem_unlock(vmem_lock_t *l)
{
    if (atomic_exchange_explicit(&l->state, 0, memory_order_release) == 2)
        vmem_lock_wake(l);
}

#else /* not Linux: a pthread mutex */
#include <pthread.h>

typedef struct vmem_lock {
    pthread_mutex_t m;
} vmem_lock_t;

static inline void vmem_lock_init(vmem_lock_t *l) { pthread_mutex_init(&l->m, NULL); }
static inline void vmem_lock_destroy(vmem_lock_t *l) { pthread_mutex_destroy(&l->m); }
static inline void vmem_lock(vmem_lock_t *l) { pthread_mutex_lock(&l->m); }
static inline void vmem_unlock(vmem_lock_t *l) { pthread_mutex_unlock(&l->m); }
#endif

#endif
