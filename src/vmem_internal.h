/* The allocator instance and the helpers shared between libvmem's source
 * files.  Not installed. */
#ifndef VMEM_INTERNAL_H
#define VMEM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"
#include "bfc.h"
#include "deferred.h"
#include "layout.h"
#include "lock.h"
#include "placement.h"
#include "vmem.h"

#define VMEM_DEFAULT_HOST_LIMIT ((size_t)64 << 30)
#define VMEM_DEFAULT_SIM_CAPACITY ((size_t)80 << 30)
#define VMEM_MAX_STREAMS 64

struct control; /* control.c */
struct tags;    /* tags.c */

/*
 * One allocator instance.
 * Invariants (under lock):
 *  - dev.limit <= start_cap unless a forced raise moved start_cap;
 *  - every live block is in exactly one of dev.live, host.live;
 *  - step_*_min <= current in-use <= step_*_max since the last step end.
 */
struct vmem {
    vmem_lock_t lock;           /* lock.h */
    vmem_config_t cfg;          /* copy; strings below are owned copies */
    char *control_file;
    char *stats_file;
    backend_t *dev_backend;
    backend_t *host_backend;
    bfc_arena_t dev;
    bfc_arena_t host;
    size_t start_cap;
    int host_fallback;
    vmem_log_fn log_fn;
    void *log_ctx;
    vmem_log_level_t log_level;

    /* counters */
    uint64_t allocs, frees, spills, spilled_bytes, failures, bad_frees;
    const char *swap_reason;    /* "none", "limit", "device_full" */

    /* step accounting */
    uint64_t steps;
    double step_start;          /* monotonic seconds */
    double step_excluded;       /* vmem_step_exclude's seconds in the step in progress */
    double last_step_excluded;  /* ... in the last step */
    double last_step_seconds;
    size_t step_dev_min, step_dev_max, step_host_min, step_host_max;
    size_t last_step_dev_min, last_step_dev_max, last_step_host_min, last_step_host_max;
    size_t stable_dev, stable_host; /* in use at the last step end */
    size_t wm_all; /* bytes in use (device and host) at their most since the last vmem_watermark */
    /* held-but-unused integral (stats.c): value and time of the last read */
    double unused_integral, unused_t0, unused_t;
    size_t unused_last;

    /* streams: stream keys are per-stream only once two streams were seen.  Then
     * fences[i] is an event recorded on streams[i] at its latest free
     * (NULL before its first free, and always on simulated backends), and
     * dirty[i] says that free chunks keyed to streams[i] may exist. */
    void *streams[VMEM_MAX_STREAMS];
    void *fences[VMEM_MAX_STREAMS];
    unsigned char dirty[VMEM_MAX_STREAMS];
    int nstreams;
    int multi_stream;
    /* VMEM_REMAP (on by default): under the limit, an allocation that no
     * free chunk fits moves free granules to the arena's end without waiting
     * for the device (bfc_remap) before giving memory back */
    int remap;
    unsigned copy_blocks;     /* vmem_copy_async's kernel blocks (VMEM_COPY_BLOCKS, smcopy.h) */
    struct recorder *recorder; /* VMEM_TRACE_FILE (recorder.h); NULL: not recording */
    /* deferred frees (deferred.c, vmem_record_stream): freed blocks whose
     * memory other streams' work still reads, held until that work is done */
    deferred_t deferred;

    /* placement planner (placement.c): which allocations go to host */
    place_t place;

    /* block layout planner (layout.c): where the step's large blocks go,
     * while no limit is set on a contiguous backend */
    layout_t layout;

    /* callbacks */
    vmem_event_fn cb_fn[4];
    void *cb_ctx[4];

    /* allocation tags (tags.c): NULL until a tag other than 0 is used;
     * tag_key holds each thread's current tag once tag_key_made is 1 */
    struct tags *tags;
    pthread_key_t tag_key;
    _Atomic int tag_key_made;

    /* runtime control (control.c); perf is the GPU time share in percent */
    struct control *control;
    _Atomic int perf;
    _Atomic int stats_failing;  /* the last statistics file write failed */
    char limit_source[48];      /* where the initial limit came from (stats) */
    size_t device_limit;        /* the limit at create when it came from the device
                                   (no limit configured), else 0: while the limit
                                   is not below it, the planner may idle */
};

/* Bytes in use by live blocks on device memory, and on host memory (the
 * host arena, and blocks spilled in place in the device arena: vmm,
 * sim-vmm).  Their sum is all the bytes in use, wherever they lie.  Blocks
 * freed and waiting for other streams' work (deferred.h) are not in use. */
static inline size_t vmem_device_bytes(const vmem_t *v)
{
    return v->dev.in_use - v->dev.host_in_use - v->deferred.dev_bytes;
}
static inline size_t vmem_host_bytes(const vmem_t *v)
{
    return v->host.in_use + v->dev.host_in_use - v->deferred.host_bytes;
}

/* A duration vmem_step_exclude takes: not negative, finite, at most 1e18 s
 * (NaN fails the first test). */
static inline int vmem_excludable_seconds(double seconds)
{
    return seconds >= 0.0 && seconds <= 1e18;
}

/* log.c */
void vmem_log(const vmem_t *v, vmem_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* time in seconds from a monotonic clock */
double vmem_now(void);

/* Logs "<entry point>: invalid argument" (through v's sink, the process-wide
 * one when v is NULL) and evaluates to VMEM_ERR_INVALID: what every entry
 * point does with a NULL handle, a NULL out-parameter or an unknown kind or
 * flag. */
#define VMEM_INVALID_ARG(v)                                                                       \
    (vmem_log((v), VMEM_LOG_ERROR, "%s: invalid argument (NULL handle or out-parameter, or bad "  \
              "kind, flag or size)", __func__),                                                   \
     VMEM_ERR_INVALID)

/* vmem.c: applies a new limit with the lock NOT held (used by control.c). */
vmem_status_t vmem_apply_limit(vmem_t *v, size_t bytes, unsigned flags, size_t *applied);

/* control.c: start/stop the watcher, apply what it read (at step end or at
 * once), and the pacing of vmem_step_end.  control_pace returns nonzero when
 * vmem_destroy ended the wait: the caller must then not touch v again. */
vmem_status_t control_start(vmem_t *v, const char *path);
void control_stop(vmem_t *v);
void control_apply_pending(vmem_t *v);
int control_pace(vmem_t *v, double step_seconds);
/* vmem.c: the step end's moves between host and device, for a job suspended
 * at perf 0 whose limit changed (then the statistics file is rewritten). */
void vmem_boundary_rebalance(vmem_t *v);

/* What the watcher has seen, for tests and diagnostics. */
typedef struct control_status {
    int active;          /* a watcher runs */
    int inotify;         /* 1: inotify on the directory, 0: polling */
    uint64_t reads;      /* file versions read (good or bad) */
    uint64_t good;       /* versions read and parsed without error */
    uint64_t errors;     /* errors logged (one per distinct bad state) */
    int in_error;        /* the file is currently missing or malformed */
    int pending;         /* a change waits for the next vmem_step_end */
    int suspended;       /* threads waiting in vmem_step_end at perf 0 */
    int has_limit;       /* the last good file set "limit" (or mem_limit) */
    size_t limit;
    int perf;            /* last good file's perf, -1 if it set none */
    uint64_t rescans;    /* changes found by the identity re-check, not by an event */
} control_status_t;
vmem_status_t control_get_status(vmem_t *v, control_status_t *out);

/* 1 if a per-GPU entry's key names the device whose id is mine: PCI ids
 * compare by value ("00000000:3B:00.0" == "0000:3b:00.0" == "3b:00.0"),
 * others ("sim:0") as text ignoring case. */
int control_bus_id_match(const char *key, const char *mine);

/* Tests: 1 makes watchers started from now on poll instead of using inotify. */
extern int control_force_poll;

/* backend_cuda.c: the PCI bus id of a CUDA device ("0000:3b:00.0");
 * VMEM_ERR_UNAVAILABLE without CUDA. */
vmem_status_t backend_cuda_pci_bus_id(int device, char *buf, size_t len);

/* vmem.c, for tags.c: a stream's key for an allocation / a free (see
 * bfc_chunk_t.stream), the streams' settling, the host room left, the
 * reclaim of deferred frees. */
uintptr_t vmem_stream_alloc_key(vmem_t *v, void *stream);
void vmem_set_last_status(vmem_status_t st); /* what vmem_last_status returns */
uintptr_t vmem_stream_free_key(vmem_t *v, void *stream);
int vmem_streams_settle(vmem_t *v);
size_t vmem_host_room(const vmem_t *v);
/* An event (vmem_set_callback) taken under the instance's lock and fired
 * after it is given back: vmem_event_prepare reads the callback of kind and
 * clears the event; vmem_event_fire calls it, if any (fn NULL: no event). */
typedef struct pending_event {
    vmem_event_fn fn;
    void *ctx;
    vmem_event_t ev;
} pending_event_t;
void vmem_event_prepare(vmem_t *v, pending_event_t *pe, vmem_event_kind_t kind);
void vmem_event_fire(const pending_event_t *pe);
/* Deferred frees (deferred.h) for a tag without room (an allocation, a
 * resume, a step end's move back): the oldest block of the device or host
 * arena waiting for other streams' work goes back to its arena after the
 * CPU waits for that work (nothing while a graph is captured).  1 if one
 * went back; *dev: its bytes on device memory. */
int vmem_deferred_reclaim_cpu(vmem_t *v, size_t *dev);

/* swap.c: the moves the planner's swap windows want before the allocation
 * just decided (place_decide_step).  Called with v->lock. */
void swap_run_due(vmem_t *v);

/* tags.c: the hooks of the allocator (lock held unless said otherwise).
 * tags_current: the calling thread's tag (no lock).  tags_alloc: allocates
 * in tag (not 0), takes the lock.  tags_free: VMEM_ERR_FOREIGN_PTR if no tag
 * arena holds ptr.  tags_held_host: host bytes the tag arenas hold.
 * tags_streams_cleared, tags_step_end, tags_limit_changed (returns
 * VMEM_PENDING while the tags' live memory keeps all arenas over the new
 * limit), tags_trim (bytes given back), tags_find_live, tags_classify,
 * tags_check, tags_destroy (no lock), tags_totals: the tag arenas' memory
 * for the instance's statistics; tags_json: their entries. */
unsigned tags_current(vmem_t *v);
void *tags_alloc(vmem_t *v, size_t size, void *stream, unsigned tag);
vmem_status_t tags_free(vmem_t *v, void *ptr, uintptr_t key);
vmem_status_t tags_classify(vmem_t *v, const void *ptr);
size_t tags_held_host(const vmem_t *v);
void tags_streams_cleared(vmem_t *v);
void tags_step_end(vmem_t *v);
vmem_status_t tags_limit_changed(vmem_t *v, size_t limit);
size_t tags_trim(vmem_t *v);
const bfc_chunk_t *tags_find_live(const vmem_t *v, const void *ptr);
vmem_status_t tags_check(const vmem_t *v, char *why, size_t len);
void tags_destroy(vmem_t *v);
typedef struct tags_totals {
    size_t device_held, in_use, requested, host_in_use, host_requested, held_host;
    size_t peak_held, peak_in_use, peak_held_host, peak_host_in_use, regions;
    /* Live blocks of tags paused with discard: neither on the device nor on
     * host (nothing is mapped behind them until the resume). */
    size_t parked_in_use, parked_requested;
} tags_totals_t;
void tags_totals(const vmem_t *v, tags_totals_t *t);
/* Appends ",\"tags\":[...]" to the JSON being written by fn (stats.c). */
void tags_json(vmem_t *v, void (*fn)(void *ctx, const char *fmt, ...), void *ctx);

/* stats.c */
vmem_status_t stats_write_file(vmem_t *v, const char *path);

/* A decimal count (digits only, no sign or blanks) that fits 64 bits:
 * 0, or -1 (options.c). */
int options_parse_u64(const char *s, uint64_t *out);
/* A switch: 1, true, yes, on (any case) set *out to 1; 0, false, no, off to
 * 0; anything else: -1, *out untouched (options.c). */
int options_parse_bool(const char *s, int *out);
/* VMEM_REMAP (bfc_remap): *on stays as given when unset; VMEM_ERR_ENV (and
 * a logged error) for a value that is not a switch (options.c). */
vmem_status_t options_remap_from_env(int *on);

/* VMEM_PLACEMENT's names (options.c): the name of p, "unknown" if none;
 * placement_parse sets *out from a name (any case), -1 if none. */
const char *placement_name(vmem_placement_t p);
int placement_parse(const char *s, vmem_placement_t *out);
/* The placement in force (stats.c): the planner's rule, NAIVE without one. */
vmem_placement_t placement_in_force(const vmem_t *v);

/* options.c: the initial device limit of cfg and where it comes from
 * (source: "VMEM_LIMIT", "config", "CUDA_DEVICE_MEMORY_LIMIT_<device>",
 * "CUDA_DEVICE_MEMORY_LIMIT", or "device" with *limit 0: the device's free
 * memory).  The plugin variables are read only when cfg->limit is 0.
 * VMEM_ERR_ENV (logged) if a plugin variable is malformed. */
vmem_status_t options_limit_default(const vmem_config_t *cfg, size_t *limit, char *source,
                                    size_t len);

/* backend_cuda.c: waits for the work queued on a stream (no-op without CUDA) */
void backend_stream_sync(void *stream);

/* backend_cuda.c: stream fences (CUDA events, no-ops without CUDA).
 * backend_fence_record records on stream the point reached by its queued
 * work, creating the event on device if *fence is NULL; returns 0, or -1
 * if no event could be created or recorded (the caller then waits for the
 * stream instead).  backend_fence_done returns 1 once that work has
 * completed (and for a NULL fence), 0 otherwise; backend_fence_wait
 * blocks until then; backend_fence_stream_wait makes stream's later work
 * wait for it without blocking the CPU (0, or -1 if the wait could not be
 * queued). */
int backend_fence_record(void **fence, void *stream, int device);
int backend_fence_done(void *fence);
void backend_fence_wait(void *fence);
int backend_fence_stream_wait(void *fence, void *stream);
void backend_fence_destroy(void *fence);

#endif
