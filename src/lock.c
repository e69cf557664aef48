/* The contended paths of the instance lock (lock.h). */
#include "lock.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LOCK_SPINS 64 /* tries before sleeping: most holds are an allocation long */

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void vmem_lock_wait(vmem_lock_t *l)
{
    for (int i = 0; i < LOCK_SPINS; i++) {
        int free_state = 0;
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->state, &free_state, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        cpu_relax();
    }
    /* Marked 2 whenever this thread takes it from here: another waiter may
     * sleep, so its unlock must wake (a spurious wake costs one syscall). */
    while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, &l->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void vmem_lock_wake(vmem_lock_t *l)
{
    syscall(SYS_futex, &l->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
#else
typedef int vmem_lock_c_not_empty; /* ISO C: a translation unit declares something */
#endif
