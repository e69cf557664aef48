/*
 * The allocation recorder (VMEM_TRACE_FILE; docs/configuration.md): every
 * allocation, free, step end and limit change an instance sees, written as
 * a trace that vmem-replay reads (docs/benchmarks.md, the trace format):
 *
 *     # {"source": "libvmem VMEM_TRACE_FILE", "device": 0, ...}
 *     a <id> <size> <stream> <t_us>     an allocation (the bytes asked)
 *     f <id> <t_us>                     its free
 *     s <t_us>                          vmem_step_end
 *     # limit <bytes> <t_us>            vmem_set_limit (a comment to replay)
 *
 * An id is the block's address: unique among live blocks, reused after a
 * free, as the format allows.  Streams are numbered in order of first use
 * (the NULL stream 0).  Events are written under the instance's lock, in
 * the order the allocator saw them, so a replay never allocates a live id.
 * Allocations that failed are not written.  So a job's allocations under
 * libvmem -- a cut job's offload included -- can be studied without a GPU.
 *
 * The file is plain text (gzip it to keep it): one line per event, full
 * buffering, flushed at each step end and closed at vmem_destroy.  A write
 * error stops the recording (logged once); the allocator goes on.  Not
 * installed.
 */
#ifndef VMEM_RECORDER_H
#define VMEM_RECORDER_H

#include <stddef.h>

#include "vmem.h"

typedef struct recorder recorder_t;

/* VMEM_TRACE_FILE for device: *out NULL when unset; "%d" in the path is the
 * device number (without one, device d > 0 writes PATH.d, as
 * VMEM_STATS_FILE does).  VMEM_ERR_ENV (logged) if the file cannot be
 * created. */
vmem_status_t recorder_from_env(int device, recorder_t **out);

void recorder_alloc(recorder_t *r, const void *p, size_t size, void *stream);
void recorder_free(recorder_t *r, const void *p);
void recorder_step(recorder_t *r);
void recorder_limit(recorder_t *r, size_t bytes);
/* Flushes, closes and frees (NULL: nothing). */
void recorder_close(recorder_t *r);

#endif
