/*
 * Copies made by the GPU's SMs instead of a copy engine (vmem_copy_async;
 * docs/placement.md, "Copies out by the SMs").
 *
 * While a copy engine copies from device to host memory, every
 * cuMemSetAccess -- which each new mapping needs, a remap's included --
 * takes about 1 ms per handle instead of 25-30 us (scripts/gpu/remap_probe.py,
 * checks 5 and 6, on an H100).  Copies the other way, device to device, and
 * kernels do not slow it.  A small kernel that reads device memory and
 * writes pinned host memory through its mapping moves bytes as fast as the
 * copy engine (51.9 GB/s with 32 blocks of 256 threads against 51.2 GB/s)
 * and leaves the copy engines idle.
 *
 * The kernel is PTX text compiled by the driver when a device first copies;
 * its module stays loaded in the device's primary context for the life of
 * the process.  Not installed.
 */
#ifndef VMEM_SMCOPY_H
#define VMEM_SMCOPY_H

#include <stddef.h>

#include "vmem.h"

#define SMCOPY_BLOCKS_DEFAULT 32u
#define SMCOPY_BLOCKS_MAX 1024u
#define SMCOPY_THREADS 256u

/* The blocks a copy's kernel runs with: VMEM_COPY_BLOCKS, else the default.
 * VMEM_ERR_ENV for a value that is not a number in [1, SMCOPY_BLOCKS_MAX]. */
vmem_status_t smcopy_blocks_from_env(unsigned *blocks);

/* The grid of a copy of bytes at dst and src: (*n16) 16-byte words, then
 * (*tail) single bytes; both pointers must be 16-byte aligned alike for the
 * words (otherwise everything goes byte by byte).  Returns the blocks to
 * launch (0: nothing to copy), at most blocks. */
unsigned smcopy_shape(const void *dst, const void *src, size_t bytes, unsigned blocks,
                      unsigned long long *n16, unsigned long long *tail);

/* Queues the copy of bytes from src to dst on stream (a CUstream of the
 * device's primary context; NULL: its legacy default stream), by the
 * kernel on device.  Both addresses must be readable/writable by the
 * device: its own memory, or pinned host memory (registered or allocated
 * by CUDA) whose host address the device accepts.  VMEM_ERR_UNAVAILABLE
 * without a CUDA driver; VMEM_ERR_UNSUPPORTED where the device does not
 * take host addresses of registered memory; VMEM_ERR_BACKEND if the module
 * does not load or the launch fails. */
vmem_status_t smcopy_launch(int device, void *dst, const void *src, size_t bytes, void *stream,
                            unsigned blocks);

#endif
