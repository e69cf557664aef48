/* The operation fuzzer shared by the libFuzzer build and the standalone
 * driver.  See fuzz_ops.c for the input format and the checks. */
#ifndef VMEM_FUZZ_OPS_H
#define VMEM_FUZZ_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* libFuzzer's entry point: runs one input.  Aborts on any violation. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Totals over every input run by this process. */
typedef struct fuzz_totals {
    uint64_t inputs;     /* inputs run */
    uint64_t ops;        /* operations executed (each one followed by a full check) */
    uint64_t allocs_ok;  /* allocations that succeeded */
    uint64_t spills;     /* ... of which on the host fallback */
    uint64_t allocs_null; /* allocations that returned NULL */
    uint64_t bad_frees;  /* foreign / double frees rejected */
    uint64_t pending;    /* limit changes that left a shrink pending */
    uint64_t faults;     /* fault-injection operations */
    uint64_t remaps;     /* free memory moved under a limit (device_remaps, sim-vmm) */
    uint64_t deferred;   /* frees after vmem_record_stream (waiting for a copy stream) */
} fuzz_totals_t;

extern fuzz_totals_t fuzz_totals;

/* Prints the totals on one line. */
void fuzz_totals_print(FILE *out);

#endif
