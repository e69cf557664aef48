/* The concurrency stress run shared by the Criterion suite (test_stress.c)
 * and the standalone driver (stress_main.c), which is what runs under
 * ThreadSanitizer: Criterion cannot start under TSan (its sandbox arena
 * mapping fails: Snaipe/Criterion#274). */
#ifndef VMEM_FUZZ_STRESS_H
#define VMEM_FUZZ_STRESS_H

#include <stddef.h>

#include "vmem.h"

typedef struct stress_opts {
    vmem_backend_kind_t backend;   /* VMEM_BACKEND_SIM or VMEM_BACKEND_SIM_VMM */
    int streams;                   /* workers allocate on their own (fake) streams */
    int control_file;              /* a thread rewrites a watched control file */
    int tags;                      /* sim-vmm: workers 0 and 1 allocate in tags 1 and 2,
                                      which one more thread pauses (keep or discard)
                                      and resumes while the others run */
    int workers;                   /* allocating threads (1..16) */
    int ops;                       /* operations per worker */
} stress_opts_t;

/* Runs one stress configuration.  Returns the number of failed checks
 * (0: everything held) and writes the first failure into why; a run that
 * could not happen (no control-file support) returns 0 with why starting
 * "skipped". */
unsigned stress_run(const stress_opts_t *o, char *why, size_t len);

#endif
