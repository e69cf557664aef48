/*
 * libvmem — a GPU memory allocator with a runtime-adjustable limit and a
 * transparent pinned-host fallback.
 *
 * This header is the whole public API.  Every function declared here is
 * thread-safe unless its comment says otherwise: one instance (vmem_t) may be
 * used from any number of threads at once.
 *
 * Conventions:
 *  - Fallible calls return vmem_status_t; VMEM_OK is 0.  Out-parameters are
 *    left untouched when a call fails.
 *  - The library never prints on its own and never aborts on bad input;
 *    messages go to the log callback (default: stderr, warnings and errors).
 *  - Sizes are bytes.
 */
#ifndef VMEM_H
#define VMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VMEM_BUILDING_LIBRARY)
#define VMEM_API __attribute__((visibility("default")))
#else
#define VMEM_API
#endif

#define VMEM_VERSION_MAJOR 0
#define VMEM_VERSION_MINOR 1
#define VMEM_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

typedef enum vmem_status {
    VMEM_OK = 0,
    VMEM_PENDING = 1,           /* not an error: a shrink was recorded but live
                                   data still holds more than the new limit */
    VMEM_ERR_INVALID = -1,      /* NULL handle, NULL out-parameter, bad config */
    VMEM_ERR_SIZE = -2,         /* size 0, or so large that rounding overflows */
    VMEM_ERR_NOMEM = -3,        /* device (within limit) and host fallback full */
    VMEM_ERR_FOREIGN_PTR = -4,  /* pointer not handed out by this instance */
    VMEM_ERR_DOUBLE_FREE = -5,  /* pointer already freed */
    VMEM_ERR_BACKEND = -6,      /* the backend (CUDA, ...) reported an error */
    VMEM_ERR_UNAVAILABLE = -7,  /* backend not present: no GPU, no driver, not built */
    VMEM_ERR_ABOVE_CAP = -8,    /* limit above the start cap without VMEM_LIMIT_FORCE */
    VMEM_ERR_ENV = -9,          /* a VMEM_* environment variable is invalid */
    VMEM_ERR_IO = -10,          /* a file could not be read or written */
    VMEM_ERR_PARSE = -11,       /* a control file or trace is malformed */
    VMEM_ERR_UNSUPPORTED = -12, /* operation not supported by this backend/build */
    VMEM_ERR_BUSY = -13         /* resource in use (e.g. destroy with live blocks) */
} vmem_status_t;

/* The library's version as "MAJOR.MINOR.PATCH" (static, never NULL): the
 * version of the libvmem.so loaded at run time, which may differ from the
 * VMEM_VERSION_* macros of the header a program was compiled with. */
VMEM_API const char *vmem_version(void);

/* Returns a static, human-readable name for a status (never NULL). */
VMEM_API const char *vmem_strerror(vmem_status_t st);

/* The status of the calling thread's last failed or succeeded vmem_alloc /
 * vmem_alloc_ex call (thread-local). */
VMEM_API vmem_status_t vmem_last_status(void);

/* ------------------------------------------------------------------------ */
/* Logging                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum vmem_log_level {
    VMEM_LOG_DEBUG = 0,
    VMEM_LOG_INFO = 1,
    VMEM_LOG_WARN = 2,
    VMEM_LOG_ERROR = 3,
    VMEM_LOG_NONE = 4
} vmem_log_level_t;

/* A log sink.  msg is one line without the trailing newline.  May be called
 * from any thread, with internal locks held: it must not call back into the
 * same vmem instance. */
typedef void (*vmem_log_fn)(void *ctx, vmem_log_level_t level, const char *msg);

/* Sets the process-wide default sink used by instances whose config has no
 * log_fn, and for errors raised before an instance exists (vmem_create).
 * fn NULL restores the default (stderr).  Messages below min_level are
 * dropped.  Thread-safe. */
VMEM_API void vmem_set_log(vmem_log_fn fn, void *ctx, vmem_log_level_t min_level);

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

typedef enum vmem_backend_kind {
    VMEM_BACKEND_AUTO = 0, /* best CUDA backend present (vmm, then cuda), else sim */
    VMEM_BACKEND_SIM = 1,  /* simulated device, separate regions like cudaMalloc */
    VMEM_BACKEND_SIM_VMM = 2, /* simulated device, one reserved range, 2 MiB granules */
    VMEM_BACKEND_CUDA = 3, /* cudaMalloc; host fallback through cudaHostAlloc */
    VMEM_BACKEND_VMM = 4   /* CUDA virtual memory management (cuMemCreate/cuMemMap) */
} vmem_backend_kind_t;

/* Returns "auto", "sim", "sim-vmm", "cuda", "vmm" (or "?"). */
VMEM_API const char *vmem_backend_name(vmem_backend_kind_t kind);

#define VMEM_CONFIG_VERSION 1

/* The range of vmem_config_t.sim_capacity (and VMEM_SIM_CAPACITY): 2 MiB
 * to 16 TiB. */
#define VMEM_SIM_CAPACITY_MIN ((size_t)2 << 20)
#define VMEM_SIM_CAPACITY_MAX ((size_t)16 << 40)

/* How allocations are placed between device and host memory when the device
 * limit cannot hold a step's peak (docs/placement.md). */
typedef enum vmem_placement {
    VMEM_PLACEMENT_PLANNED = 0, /* default: learn each step's allocation sequence
                                   and, where the next step repeats it, place on
                                   host from their allocation the blocks a rule
                                   picks so that the step fits under the limit;
                                   on a real device the rule (FARTHEST, LARGEST
                                   or, with vmm, SWAP) is chosen by measured
                                   step time after each limit change, on a
                                   simulated one it is FARTHEST (fewest bytes) */
    VMEM_PLACEMENT_NAIVE = 1,   /* device first, host when the device is full */
    VMEM_PLACEMENT_FARTHEST = 2, /* planned; when the step would overflow, the
                                   blocks freed farthest ahead go to host first */
    VMEM_PLACEMENT_LARGEST = 3, /* planned; the largest live blocks go first */
    VMEM_PLACEMENT_SWAP = 4     /* planned as FARTHEST, but blocks of at least two
                                   move units (vmm: 64 MiB big mappings) stay on the device
                                   around their allocation and their free and
                                   are moved to host in between, at the same
                                   address (vmm, sim-vmm; elsewhere FARTHEST) */
} vmem_placement_t;

/* Instance configuration.  Always initialise with vmem_config_init() and then
 * change fields: zero in a size field means "the default" as documented. */
typedef struct vmem_config {
    uint32_t size;        /* sizeof(vmem_config_t), set by vmem_config_init */
    uint32_t version;     /* VMEM_CONFIG_VERSION */
    vmem_backend_kind_t backend; /* default VMEM_BACKEND_AUTO */
    int device;           /* CUDA device ordinal, default 0 */
    size_t limit;         /* device cap; 0: the device's free memory at create */
    size_t start_cap;     /* ceiling for later raises; 0: the initial limit */
    size_t host_limit;    /* host fallback cap; 0: 64 GiB */
    int host_fallback;    /* 1 (default): spill to host when the device is full */
    size_t sim_capacity;  /* simulated device size; 0: 80 GiB; else
                             VMEM_SIM_CAPACITY_MIN..VMEM_SIM_CAPACITY_MAX */
    uint64_t sim_fail_nth;   /* sim: fail the Nth device region request (1-based); 0 off */
    double sim_fail_rate;    /* sim: probability that a region request fails (0 to 1;
                                NaN is VMEM_ERR_INVALID) */
    uint64_t sim_seed;       /* sim: seed for sim_fail_rate */
    const char *control_file; /* watched JSON control file; NULL: none */
    const char *stats_file;   /* statistics JSON written at each step end; NULL: none */
    int control_immediate;    /* 1: apply control-file changes as soon as seen,
                                 0 (default): at the next vmem_step_end */
    vmem_log_fn log_fn;       /* NULL: the process-wide sink (vmem_set_log) */
    void *log_ctx;
    vmem_log_level_t log_level; /* default VMEM_LOG_WARN */
    vmem_placement_t placement; /* default VMEM_PLACEMENT_PLANNED */
} vmem_config_t;

/* Fills cfg with the defaults.  Not affected by the environment. */
VMEM_API void vmem_config_init(vmem_config_t *cfg);

/* Applies the VMEM_* environment variables to cfg (see docs/configuration.md):
 * VMEM_BACKEND, VMEM_DEVICE, VMEM_LIMIT, VMEM_START_CAP, VMEM_HOST_LIMIT,
 * VMEM_HOST_FALLBACK, VMEM_SIM_CAPACITY, VMEM_SIM_FAIL_NTH, VMEM_SIM_FAIL_RATE,
 * VMEM_SIM_SEED, VMEM_CONTROL_FILE, VMEM_STATS_FILE, VMEM_CONTROL_IMMEDIATE,
 * VMEM_LOG_LEVEL, VMEM_PLACEMENT.  Returns VMEM_ERR_ENV (and logs the variable's
 * name) on the first invalid value (a VMEM_SIM_CAPACITY outside its range and
 * a VMEM_START_CAP below the limit included), leaving cfg unchanged;
 * VMEM_ERR_INVALID if cfg is NULL.
 * The strings stored in cfg point into the environment. */
VMEM_API vmem_status_t vmem_config_from_env(vmem_config_t *cfg);

/* Parses a size: a plain integer or one with suffix K, M, G, T (powers of
 * 1024, optional trailing "iB"/"B").  Returns VMEM_ERR_PARSE for anything
 * else (negative, empty, overflow). */
VMEM_API vmem_status_t vmem_parse_size(const char *text, size_t *out);

/* ------------------------------------------------------------------------ */
/* Instances                                                                */
/* ------------------------------------------------------------------------ */

typedef struct vmem vmem_t;

/* Creates an instance.  cfg NULL: defaults, then the VMEM_* environment.
 * Returns VMEM_ERR_UNAVAILABLE if the chosen backend is not present,
 * VMEM_ERR_ENV for a bad environment, VMEM_ERR_INVALID for a bad config. */
VMEM_API vmem_status_t vmem_create(const vmem_config_t *cfg, vmem_t **out);

/* Destroys an instance and returns all its memory to the backends.  Blocks
 * still live are released too (a warning is logged with their count).
 * v NULL is a no-op.  Must not race with other calls on the same instance,
 * with one exception: it may be called while another thread waits in
 * vmem_step_end (perf pacing or suspension), which then returns
 * VMEM_ERR_BUSY without touching v again. */
VMEM_API void vmem_destroy(vmem_t *v);

/* Allocates size bytes (rounded up to 256) on the device, or, when the device
 * arena cannot serve it within the limit, in pinned host memory mapped into
 * the device's address space.  Returns NULL on failure; vmem_last_status()
 * then says why (VMEM_ERR_SIZE, VMEM_ERR_NOMEM, VMEM_ERR_INVALID). */
VMEM_API void *vmem_alloc(vmem_t *v, size_t size);

/* As vmem_alloc, for a CUDA stream (cudaStream_t passed as void *; NULL is
 * the legacy default stream).  A block freed on stream S is reused at once
 * only by allocations on S; other streams get it once the work queued on S
 * before the free has completed. */
VMEM_API void *vmem_alloc_stream(vmem_t *v, size_t size, void *stream);

/* Frees a block.  ptr NULL is a no-op returning VMEM_OK.  A pointer this
 * instance did not hand out returns VMEM_ERR_FOREIGN_PTR, one already freed
 * VMEM_ERR_DOUBLE_FREE; both log an error and change nothing. */
VMEM_API vmem_status_t vmem_free(vmem_t *v, void *ptr);

/* As vmem_free, recording that the block's last use was on stream. */
VMEM_API vmem_status_t vmem_free_stream(vmem_t *v, void *ptr, void *stream);

/* Records that work queued on `stream` so far reads or writes the live block
 * containing ptr (PyTorch's Tensor.record_stream): when the block is freed
 * before that work is done, its memory is not reused until it is.  The free
 * itself does not wait.  The block then counts as freed (not in use) but
 * stays held; it goes back to the arena once that work is done, or, when an
 * allocation needs the memory, after the allocating stream is made to wait
 * for it (a wait queued on the GPU while one stream allocates; the CPU waits
 * when several do), or at a limit change, vmem_trim or vmem_destroy (the CPU
 * waits).  Up to 4 streams per block; recording a fifth waits on the CPU for
 * the oldest.  Not for a stream capturing a CUDA graph (VMEM_ERR_BUSY), nor
 * for a block of a tag's arena (VMEM_ERR_UNSUPPORTED).  VMEM_ERR_FOREIGN_PTR
 * / VMEM_ERR_DOUBLE_FREE for a block not live; VMEM_ERR_BACKEND if the CUDA
 * event could not be recorded (then this use is not covered: wait for the
 * stream before freeing the block).  On simulated
 * devices the order is kept as if the work never finished on its own. */
VMEM_API vmem_status_t vmem_record_stream(vmem_t *v, void *ptr, void *stream);

/* Queues a copy of bytes from src to dst on stream (a CUDA stream of v's
 * device; NULL: its legacy default stream), made by a small kernel (32
 * blocks of 256 threads; VMEM_COPY_BLOCKS) instead of a copy engine.  For
 * copies from device to pinned host memory while libvmem maps memory: a
 * copy engine copying to host makes every cuMemSetAccess, which each new
 * mapping and remap needs, take about 1 ms per handle instead of 30 us; a
 * kernel's copy does not, and runs as fast (docs/placement.md, "Copies out
 * by the SMs").  dst and src may be any memory the device reads and
 * writes: its own, and pinned host memory (cudaHostRegister, cudaHostAlloc)
 * by its host address.  Ordered on the stream like cudaMemcpyAsync; an
 * invalid address faults the stream's context as a kernel's would.  The
 * ranges must not overlap (VMEM_ERR_INVALID).  The first call on a device
 * compiles and loads the kernel, which takes time and may let the stream's
 * earlier work finish meanwhile: make it once at start-up to keep that out
 * of a step.  On simulated devices the bytes are copied at once.  VMEM_ERR_UNSUPPORTED where the device does not
 * accept host addresses of registered memory, VMEM_ERR_UNAVAILABLE without
 * a driver, VMEM_ERR_BACKEND if the kernel does not load or launch: copy
 * with cudaMemcpyAsync instead. */
VMEM_API vmem_status_t vmem_copy_async(vmem_t *v, void *dst, const void *src, size_t bytes,
                                       void *stream);

/* Flags for vmem_set_limit_ex. */
#define VMEM_LIMIT_FORCE 1u /* allow a limit above the start cap (raises it) */

/* Sets the device limit.  Grow takes effect at once.  Shrink below what the
 * device arena holds gives back empty regions (with vmm, also free pages of
 * partly used regions) until it holds at most bytes.  If live data still
 * holds more, the limit is recorded as pending: no new device memory is
 * taken, every free gives memory back until the arena holds at most bytes,
 * and VMEM_PENDING is returned.  *applied (if not NULL) receives the bytes
 * the device arena holds after the call (<= bytes when fully applied).
 * A limit above the start cap returns VMEM_ERR_ABOVE_CAP (use
 * vmem_set_limit_ex with VMEM_LIMIT_FORCE).
 * With the vmm backend, giving back free granules that share a 64 MiB
 * physical handle with live blocks re-backs those blocks (copy, remap at the
 * same addresses): like vmem_step_end, a shrink (and vmem_trim) must not run
 * while kernels use this instance's blocks (VMEM_VMM_BIG=0 avoids it, at the
 * cost of slower shrinks and moves; see docs/vmm.md). */
VMEM_API vmem_status_t vmem_set_limit(vmem_t *v, size_t bytes, size_t *applied);
VMEM_API vmem_status_t vmem_set_limit_ex(vmem_t *v, size_t bytes, unsigned flags,
                                         size_t *applied);

/* The device limit in force (the pending target while a shrink is pending). */
VMEM_API vmem_status_t vmem_get_limit(vmem_t *v, size_t *limit);

/* Sets the host fallback limit.  Host memory already pinned beyond it is
 * released as far as it is empty. */
VMEM_API vmem_status_t vmem_set_host_limit(vmem_t *v, size_t bytes);

/* Turns the host fallback on (1) or off (0). */
VMEM_API vmem_status_t vmem_set_host_fallback(vmem_t *v, int enabled);

/* Gives back to the backend every empty device region (and, with vmm, free
 * granules) and every empty host region.  *released gets the bytes freed. */
VMEM_API vmem_status_t vmem_trim(vmem_t *v, size_t *released);

/* Called by the runtime after each step (mini-batch): applies control
 * changes received from outside, records the step's duration and its
 * min/max memory use, writes the statistics file if configured, and paces
 * the job if a performance share is set (perf 0 blocks here until the share
 * changes).  With vmm and sim-vmm it is also the point where data moves
 * between host and device memory at unchanged addresses: no kernel or thread
 * may touch blocks of this instance while it runs (after the step's work has
 * completed, as at a mini-batch boundary).  Returns VMEM_OK, VMEM_ERR_IO if
 * the statistics file could not be written, or VMEM_ERR_BUSY if
 * vmem_destroy ended a suspension (v is then gone). */
VMEM_API vmem_status_t vmem_step_end(vmem_t *v);

/* Leaves the rest of the step in progress to naive placement: allocations
 * go to the device while they fit under the limit, to host memory after,
 * with no plan (docs/placement.md).  For a layer above the allocator that
 * knows the last step no longer says what this one needs, e.g. the PyTorch
 * offload in the first step under a cut, which takes saved tensors off the
 * device itself.  The planner still records the step (counted in
 * diverged_steps); the next step plans from it.  No effect on a step that
 * plans nothing (VMEM_PLACEMENT_NAIVE, a step that fits).  VMEM_OK, or
 * VMEM_ERR_INVALID for a NULL v. */
VMEM_API vmem_status_t vmem_step_naive(vmem_t *v);

/* Tells the instance that `seconds` of the step in progress were not the
 * job's own work: a pause of the runtime's (Python's garbage collector, a
 * checkpoint written) that would run as long whatever the allocator did.
 * Adds up until vmem_step_end, which leaves it out of the step's time where
 * the placement planner compares its rules by step time (the trials,
 * docs/placement.md), and reports it as last_step_excluded_seconds.  The
 * step's own time (last_step_seconds), pacing and everything else are
 * unchanged.  VMEM_OK, or VMEM_ERR_INVALID for a NULL v or a seconds that
 * is negative, not finite or above 1e18. */
VMEM_API vmem_status_t vmem_step_exclude(vmem_t *v, double seconds);

/* ------------------------------------------------------------------------ */
/* Pointer information                                                      */
/* ------------------------------------------------------------------------ */

typedef enum vmem_location {
    VMEM_LOC_DEVICE = 0, /* device memory (the device arena) */
    VMEM_LOC_HOST = 1    /* host memory mapped into the device's address space */
} vmem_location_t;

typedef struct vmem_ptr_info {
    vmem_location_t location;
    size_t requested;  /* bytes asked for */
    size_t size;       /* bytes reserved for the block (rounded) */
    void *base;        /* start of the block containing ptr */
} vmem_ptr_info_t;

/* Describes the live block that contains ptr (ptr may point inside it).
 * VMEM_ERR_FOREIGN_PTR if no live block of this instance contains it. */
VMEM_API vmem_status_t vmem_ptr_info(vmem_t *v, const void *ptr, vmem_ptr_info_t *info);

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */
/* ------------------------------------------------------------------------ */

#define VMEM_STATS_VERSION 8 /* 2: placement .. device_trimmed appended;
                                3: swap_out_bytes .. swap_skipped appended;
                                4: cur_step_device_max, cur_step_host_max;
                                5: naive_chosen_steps;
                                6: device_syncs, device_sync_seconds;
                                7: device_remaps, device_remapped;
                                8: last_step_excluded_seconds */

typedef struct vmem_stats {
    uint32_t size;              /* set by the caller: sizeof(vmem_stats_t) */
    uint32_t version;           /* filled in: VMEM_STATS_VERSION */
    const char *backend;        /* "sim", "sim-vmm", "cuda", "vmm" */
    size_t limit;               /* device limit in force */
    size_t pending_limit;       /* target of a pending shrink (see shrink_pending) */
    size_t start_cap;           /* ceiling for raises */
    size_t device_held;         /* bytes held from the device backend */
    size_t device_in_use;       /* bytes in live device blocks (rounded) */
    size_t device_requested;    /* bytes requested by live device blocks */
    size_t device_peak_held;
    size_t device_peak_in_use;
    size_t device_regions;
    size_t host_limit;
    size_t host_held;           /* bytes held from the host backend (pinned) */
    size_t host_in_use;
    size_t host_peak_held;
    size_t host_peak_in_use;
    uint64_t allocs;            /* successful allocations */
    uint64_t frees;             /* successful frees */
    uint64_t spills;            /* allocations served by the host fallback */
    uint64_t spilled_bytes;     /* bytes of those allocations */
    uint64_t failures;          /* allocations that returned NULL */
    uint64_t bad_frees;         /* foreign or double frees rejected */
    uint64_t device_region_allocs;   /* regions obtained from the backend */
    uint64_t device_region_frees;    /* regions given back */
    uint64_t steps;             /* vmem_step_end calls */
    double last_step_seconds;   /* duration of the last step */
    size_t step_device_min;     /* device bytes in use, min/max during the last step */
    size_t step_device_max;
    size_t step_host_min;
    size_t step_host_max;
    int host_fallback;          /* fallback enabled */
    int perf;                   /* performance share in percent (100: no pacing) */
    int shrink_pending;         /* 1 while a shrink waits for frees (pending_limit
                                   is then its target, which may be 0) */
    /* Placement (docs/placement.md).  spills and spilled_bytes above count
     * every allocation placed on host memory, planned ones included. */
    int placement;              /* vmem_placement_t in force */
    uint64_t placed_host_allocs;  /* of spills: placed on host by the planner */
    uint64_t placed_host_bytes;
    uint64_t fallback_allocs;   /* planned for the device, spilled anyway (full) */
    uint64_t fallback_bytes;
    uint64_t moved_to_host_bytes;   /* live data moved to host at step ends (vmm, sim-vmm) */
    uint64_t moved_to_device_bytes; /* and back to the device */
    uint64_t planned_steps;     /* steps that ran on a plan to their end */
    uint64_t diverged_steps;    /* steps that stopped repeating their plan */
    uint64_t plan_host_bytes;   /* bytes the latest plan places on host per step */
    uint64_t host_freed_bytes;  /* bytes of blocks placed on host and freed since create */
    double host_life_events;    /* their lifetime, allocations and frees in between,
                                   averaged weighted by bytes (0 before the first) */
    double host_life_seconds;   /* the same in seconds */
    /* Memory held but unused (docs/configuration.md, "Growth and trim"). */
    size_t device_unused;       /* device_held - device_in_use now: held from the
                                   backend but in no live block */
    double device_unused_byte_seconds; /* device_unused integrated over time since
                                   vmem_create, sampled at every statistics read
                                   (this call, the JSON, the statistics file at
                                   each step end): each interval counts with the
                                   value read at its start */
    double device_unused_mean;  /* that integral over the seconds it covers
                                   (0 before the second read) */
    uint64_t device_trims;      /* growths that first gave free memory back */
    uint64_t device_trimmed;    /* bytes those trims gave back */
    /* Where the initial limit (and, unless start_cap was set, the start cap)
     * came from: "VMEM_LIMIT", "config" (vmem_config_t.limit), the variable
     * of a GPU-sharing device plugin ("CUDA_DEVICE_MEMORY_LIMIT_<device>" or
     * "CUDA_DEVICE_MEMORY_LIMIT"), "device" (the device's free memory) or
     * "start_cap" (a default stopped at the start cap).  Owned by the
     * instance; valid while it lives. */
    const char *limit_source;
    int device;                 /* the CUDA device ordinal of the instance */
    /* Swap windows (VMEM_PLACEMENT_SWAP, docs/placement.md). */
    uint64_t plan_swap_bytes;   /* of plan_host_bytes: swapped (moved out and back) */
    uint64_t swap_out_bytes;    /* moved to host by swap windows since create */
    uint64_t swap_in_bytes;     /* moved back to the device by them */
    uint64_t swap_points;       /* allocations before which swaps ran */
    uint64_t swap_skipped;      /* planned moves not done: block freed or not
                                   placed by the plan, no room, graph capture */
    /* The step in progress (since the last vmem_step_end): device and host
     * bytes in use at its maximum so far (step_device_max and step_host_max
     * are the last completed step's). */
    size_t cur_step_device_max;
    size_t cur_step_host_max;
    /* Steps the planner left to naive placement because, modelled on the
     * last step, naive put no more bytes on host than its plan (fixed
     * farthest-first rule only; docs/placement.md). */
    uint64_t naive_chosen_steps;
    /* Device synchronisations the backend made since create (vmm: before
     * unmapping memory it gives back, moving or parking live data; each
     * waits for all the device's queued work, on every stream) and the
     * seconds the calling threads waited in them.  0 on other backends. */
    uint64_t device_syncs;
    double device_sync_seconds;
    /* Under the limit, free memory moved to the end of the device arena
     * without waiting for the device, for an allocation that no free block
     * fitted (vmm, sim-vmm; VMEM_REMAP, docs/configuration.md): the moves
     * since create and their bytes. */
    uint64_t device_remaps;
    uint64_t device_remapped;
    /* Seconds of the last step that vmem_step_exclude reported as not the
     * job's own (left out of the placement trials' step time). */
    double last_step_excluded_seconds;
} vmem_stats_t;

/* Fills *stats.  The caller sets stats->size; fields beyond it are not
 * written, so older callers keep working.  VMEM_ERR_INVALID if stats->size is
 * smaller than the first version's header. */
VMEM_API vmem_status_t vmem_get_stats(vmem_t *v, vmem_stats_t *stats);

/* A watermark of the bytes in use by the instance's live blocks, wherever
 * they lie (device and host: what the program asked for, whatever the
 * placement made of it), for a hook that runs between a program's
 * allocations and wants to know how far they went in between
 * (libvmem_offload.py learns the room each stretch of a step needs from
 * it).  *in_use gets the bytes in use now; *max_since the most in use at any
 * moment since the previous call (since vmem_create for the first), not less
 * than *in_use; *limit the device limit in force.  The watermark then starts
 * again from now.  One watermark per instance: two callers would shorten
 * each other's stretches.  Any output pointer may be NULL. */
VMEM_API vmem_status_t vmem_watermark(vmem_t *v, size_t *in_use, size_t *max_since,
                                      size_t *limit);

/* 1 if an allocation of size bytes on stream would now be served from the
 * device arena without giving memory back: a free block fits it, or the
 * limit leaves room to map more.  0 if not (then the allocation would make
 * the arena move free memory without a wait where it can, VMEM_REMAP, or
 * give it back and map it again, which waits for the device), for size 0,
 * or for v NULL.  A hint for a caller that can choose
 * when to allocate (libvmem_offload.py fetches a saved tensor back ahead of
 * its use only where it fits); the placement planner's choice is not
 * consulted, and another thread may take the room before the allocation. */
VMEM_API int vmem_fits(vmem_t *v, size_t size, void *stream);

/* Renders the statistics as one JSON object (AntMan's keys deviceMemUsedMax,
 * deviceMemUsedMin, deviceMemPoolSize, deviceMemStable, hostMemUsedMax,
 * hostMemUsedMin, hostMemPoolSize, swapReason, miniBatchDuration, plus
 * libvmem's own).  Writes at most len bytes including the NUL; *needed (if
 * not NULL) gets the full length without the NUL.  Returns VMEM_ERR_SIZE if
 * the buffer is too small (buf is then NUL-terminated but truncated). */
VMEM_API vmem_status_t vmem_stats_json(vmem_t *v, char *buf, size_t len, size_t *needed);

/* Checks every internal invariant of both arenas (chunk lists, bins, totals,
 * no overlap, limit).  Returns VMEM_OK or VMEM_ERR_INVALID and logs the first
 * broken invariant.  Cost is linear in the number of chunks. */
VMEM_API vmem_status_t vmem_check(vmem_t *v);

/* ------------------------------------------------------------------------ */
/* Callbacks                                                                */
/* ------------------------------------------------------------------------ */

typedef enum vmem_event_kind {
    VMEM_EVENT_SPILL = 1,        /* an allocation went to the host fallback */
    VMEM_EVENT_ALLOC_FAILED = 2, /* an allocation returned NULL (a zero or unroundable
                                    size too, with status VMEM_ERR_SIZE) */
    VMEM_EVENT_LIMIT_CHANGED = 3 /* the device limit changed */
} vmem_event_kind_t;

typedef struct vmem_event {
    vmem_event_kind_t kind;
    size_t size;        /* SPILL, ALLOC_FAILED: bytes requested */
    size_t old_limit;   /* LIMIT_CHANGED */
    size_t new_limit;   /* LIMIT_CHANGED */
    vmem_status_t status; /* ALLOC_FAILED: the reason */
} vmem_event_t;

/* Called without the instance's lock held, on the thread that caused the
 * event (or the control watcher's thread).  It may call into the instance. */
typedef void (*vmem_event_fn)(void *ctx, const vmem_event_t *event);

/* Registers (fn non-NULL) or clears (fn NULL) the callback for one kind. */
VMEM_API vmem_status_t vmem_set_callback(vmem_t *v, vmem_event_kind_t kind,
                                         vmem_event_fn fn, void *ctx);

/* ------------------------------------------------------------------------ */
/* Simulated-device fault injection (sim and sim-vmm backends only)         */
/* ------------------------------------------------------------------------ */

typedef enum vmem_arena_kind {
    VMEM_ARENA_DEVICE = 0,
    VMEM_ARENA_HOST = 1
} vmem_arena_kind_t;

/* From now on, make the nth next region request of that arena's backend
 * fail (nth 1 = the very next; 0 = off), and each request fail with
 * probability rate drawn from a generator seeded with seed.
 * VMEM_ERR_UNSUPPORTED on real backends. */
VMEM_API vmem_status_t vmem_inject_faults(vmem_t *v, vmem_arena_kind_t arena,
                                          uint64_t nth, double rate, uint64_t seed);

/* ------------------------------------------------------------------------ */
/* Allocation tags, pause and resume (docs/tags.md)                         */
/* ------------------------------------------------------------------------ */

/*
 * Every block carries a tag: a small integer naming the engine, model or
 * pool it belongs to (0, the default, for untagged allocations).  The
 * blocks of each tag other than 0 live in device memory of their own:
 * granules (2 MiB, vmm and sim-vmm) of one tag never hold another tag's
 * blocks, and free memory of one tag is never handed to another.  The
 * device limit caps the memory of all tags together.
 *
 * A tag can be paused: its device memory is given back to the GPU (another
 * process can allocate it) while every address of its blocks stays
 * reserved, and resumed: device memory is mapped back at the same
 * addresses, so pointers held by frameworks and CUDA graphs stay valid.
 * Pause and resume need the vmm backend (with host memory support) or
 * sim-vmm; other backends return VMEM_ERR_UNSUPPORTED.  Tag 0 cannot be
 * paused.
 *
 * The contract: between vmem_pause and vmem_resume no kernel, copy or
 * thread may touch the tag's blocks, and none may be queued on them when
 * vmem_pause is called (it waits for the device's queued work, then moves
 * or unmaps memory).  After a discard, an access faults (the range is
 * unmapped); after a keep, the blocks lie in host memory at their
 * addresses (readable, slowly), or, with VMEM_PAUSE_GUARD=1 in the
 * environment at the pause, inaccessible until the resume, so a stray
 * access faults (vmm: an illegal-address error; sim-vmm: SIGSEGV).  Blocks
 * of a paused tag may be freed; allocating in a paused
 * tag fails with VMEM_ERR_BUSY.  Calls on other tags are safe meanwhile
 * (they wait for the instance's lock while a pause or resume runs).
 */

/* Distinct tags other than 0 an instance can ever use, not at once: a tag
 * takes a slot the first time it is allocated in or paused and keeps it for
 * the instance's life (freeing all its blocks does not give it back), so
 * allocating in or pausing a 65th distinct tag fails with VMEM_ERR_INVALID. */
#define VMEM_MAX_TAGS 64
#define VMEM_PAUSE_KEEP 1u    /* copy the tag's blocks to host memory */
#define VMEM_PAUSE_DISCARD 2u /* drop the contents: memory given back at once */
#define VMEM_RESUME_SPILL 1u  /* resume beyond the limit: what does not fit lies
                                 in host memory at the same addresses */

/* Sets the calling thread's current tag for instance v: later vmem_alloc
 * and vmem_alloc_stream calls (and the PyTorch and CuPy adapters) on this
 * thread allocate in that tag.  *previous (if not NULL) gets the tag that
 * was current (0 at first).  VMEM_ERR_INVALID for v NULL;
 * VMEM_ERR_NOMEM if no thread-local slot could be made. */
VMEM_API vmem_status_t vmem_set_tag(vmem_t *v, unsigned tag, unsigned *previous);

/* The calling thread's current tag for v (0 if none was set, or v NULL). */
VMEM_API unsigned vmem_get_tag(vmem_t *v);

/* As vmem_alloc, in tag `tag` whatever the thread's current tag (0: the
 * default).  NULL on failure, vmem_last_status() says why: VMEM_ERR_BUSY
 * (the tag is paused), VMEM_ERR_INVALID (more than VMEM_MAX_TAGS tags),
 * VMEM_ERR_SIZE, VMEM_ERR_NOMEM.  Falls back to host memory like
 * vmem_alloc; with vmm and sim-vmm that host memory is the tag's own. */
VMEM_API void *vmem_alloc_tagged(vmem_t *v, size_t size, unsigned tag);

/* Pauses tag (not 0) with exactly one of VMEM_PAUSE_KEEP, VMEM_PAUSE_DISCARD:
 * free memory of the tag is given back, then its live blocks are copied to
 * host memory at the same addresses (keep; needs host room under the host
 * limit, else VMEM_ERR_NOMEM and nothing moved) or dropped (discard), and
 * the device memory is released.  Afterwards the tag holds 0 bytes of
 * device memory.  Pausing a paused tag: discard over keep drops the host
 * copy, otherwise nothing happens (VMEM_OK).  A tag never used is paused as well
 * (allocations in it fail until it is resumed).
 * VMEM_ERR_UNSUPPORTED on backends without pause (cuda, sim, vmm on a device
 * that cannot map host memory); VMEM_ERR_INVALID for tag 0 or bad flags;
 * VMEM_ERR_BACKEND if the driver failed (the tag is then unpaused, its data
 * intact).  Blocks until done.  See the contract above. */
VMEM_API vmem_status_t vmem_pause(vmem_t *v, unsigned tag, unsigned flags);

/* Resumes a paused tag: device memory mapped back at the same addresses,
 * contents restored (paused with keep) or undefined (discard).  If the
 * tag's memory does not fit under the limit with everything else held:
 * VMEM_ERR_NOMEM and the tag stays paused (vmem_resume_ex with
 * VMEM_RESUME_SPILL puts what does not fit in host memory instead, moved to
 * the device at later step ends as room appears).  VMEM_ERR_BACKEND if the
 * driver failed: after discard the tag stays paused; after keep it is
 * resumed with what did not move left in host memory (contents intact).
 * VMEM_OK if the tag is not paused. */
VMEM_API vmem_status_t vmem_resume(vmem_t *v, unsigned tag);
VMEM_API vmem_status_t vmem_resume_ex(vmem_t *v, unsigned tag, unsigned flags);

/* Host memory kept ready for keep pauses (vmm): pinning host memory costs
 * about as much as the pause's copy many times over (H100: 15.5 s for
 * 20 GiB), so a pause maps kept host memory instead of creating it.  Host
 * memory comes back to this reserve when a paused tag resumes (up to
 * VMEM_VMM_HOST_KEEP bytes, default all), so a second pause pins nothing;
 * this call creates it ahead (VMEM_VMM_RESERVE_THREADS threads, default 4)
 * until `bytes` are kept, or drops the surplus (0: gives all of it back).
 * Holds the instance's lock while it runs.  *kept (may be NULL): the bytes
 * kept.  VMEM_ERR_UNSUPPORTED on other backends. */
VMEM_API vmem_status_t vmem_host_reserve(vmem_t *v, size_t bytes, size_t *kept);

typedef enum vmem_tag_state {
    VMEM_TAG_ACTIVE = 0,
    VMEM_TAG_PAUSED_KEEP = 1,
    VMEM_TAG_PAUSED_DISCARD = 2
} vmem_tag_state_t;

#define VMEM_TAG_STATS_VERSION 1

/* One tag's memory: what is in use, what is held and where it lies. */
typedef struct vmem_tag_stats {
    uint32_t size;           /* set by the caller: sizeof(vmem_tag_stats_t) */
    uint32_t version;        /* filled in: VMEM_TAG_STATS_VERSION */
    unsigned tag;
    vmem_tag_state_t state;
    size_t blocks;           /* live blocks */
    size_t in_use;           /* bytes of live blocks (rounded), wherever they lie */
    size_t requested;        /* bytes requested by live blocks */
    size_t device_held;      /* device memory held for the tag (0 while paused) */
    size_t host_held;        /* host memory mapped at the tag's addresses (a
                                pause with keep, or spills) */
    size_t host_in_use;      /* bytes of live blocks lying in host memory */
    size_t reserved;         /* addresses kept with nothing behind them (paused
                                with discard) */
    size_t peak_device_held;
    uint64_t allocs, frees;  /* successful calls in this tag */
    uint64_t pauses, resumes;
    uint64_t bytes_to_host;  /* copied by pauses with keep */
    uint64_t bytes_to_device; /* copied back by resumes */
    double last_pause_seconds, last_resume_seconds;
} vmem_tag_stats_t;

/* Fills *out for tag (0: the default tag's blocks).  The caller sets
 * out->size; fields beyond it are not written.  A tag never used: zeros
 * (state active), VMEM_OK.  VMEM_ERR_INVALID for NULL arguments or a size
 * below the header. */
VMEM_API vmem_status_t vmem_get_tag_stats(vmem_t *v, unsigned tag, vmem_tag_stats_t *out);

/* ------------------------------------------------------------------------ */
/* The vtable allocator: what a runtime holds without knowing libvmem       */
/* ------------------------------------------------------------------------ */

typedef struct vmem_allocator {
    void *ctx;                                   /* the vmem_t */
    void *(*alloc)(void *ctx, size_t size, void *stream);
    int (*free)(void *ctx, void *ptr, void *stream);          /* 0 on success */
    int (*set_limit)(void *ctx, size_t bytes, size_t *applied); /* vmem_status_t */
    size_t (*get_limit)(void *ctx);
    int (*step_end)(void *ctx);
    /* Writes the statistics JSON (see vmem_stats_json). */
    int (*stats_json)(void *ctx, char *buf, size_t len, size_t *needed);
} vmem_allocator_t;

/* Fills *out with a vtable over v.  v must outlive every use of it. */
VMEM_API vmem_status_t vmem_get_allocator(vmem_t *v, vmem_allocator_t *out);

/* ------------------------------------------------------------------------ */
/* Framework adapters                                                       */
/* ------------------------------------------------------------------------ */

/* The adapters keep one instance per CUDA device ordinal (0..63), created on
 * first use from the VMEM_* environment (as vmem_config_from_env) with the
 * device set to that ordinal, and kept until the process exits.  With
 * VMEM_STATS_FILE set, "%d" in its name is replaced by the ordinal; without
 * "%d", devices other than 0 write to the name with ".<ordinal>" appended.
 * All functions here are thread-safe.  See docs/embedding.md. */

/* Returns device's instance in *out, creating it on first use.  Creation is
 * tried once: later calls return the same failure (VMEM_ERR_ENV,
 * VMEM_ERR_UNAVAILABLE, ...), which is logged once.  VMEM_ERR_INVALID (and
 * an error line, each call) for an ordinal outside 0..63 or out NULL. */
VMEM_API vmem_status_t vmem_instance_ex(int device, vmem_t **out);

/* As vmem_instance_ex; NULL on failure. */
VMEM_API vmem_t *vmem_instance(int device);

/* The instance of device if it was already created, else NULL (never
 * creates one). */
VMEM_API vmem_t *vmem_instance_peek(int device);

/* Calls vmem_step_end on every instance created so far; returns the first
 * failure, VMEM_OK if none (or no instance exists). */
VMEM_API vmem_status_t vmem_instances_step_end(void);

/* Calls vmem_step_exclude on every instance created so far (VMEM_OK if none
 * exists; VMEM_ERR_INVALID for a seconds vmem_step_exclude refuses). */
VMEM_API vmem_status_t vmem_instances_step_exclude(double seconds);

/* PyTorch, torch.cuda.memory.CUDAPluggableAllocator(path, "vmem_torch_malloc",
 * "vmem_torch_free"); stream is a cudaStream_t.  malloc allocates on the
 * device's instance, tagged with stream (the current stream at allocation);
 * it returns NULL for size 0 and on failure (logged: PyTorch does not check).
 * free gets the stream of the allocation from PyTorch; size is ignored. */
VMEM_API void *vmem_torch_malloc(size_t size, int device, void *stream);
VMEM_API void vmem_torch_free(void *ptr, size_t size, int device, void *stream);
/* CUDA graphs: a block that vmem_torch_malloc hands out while its stream is
 * capturing belongs to that capture.  Freed, it stays allocated (the graph
 * replays into it; a pause keeps or parks it with its tag) and only later
 * allocations of the same capture and tag reuse it.  release gives every
 * such freed block back (call it once the graphs that used them are
 * destroyed) and returns the bytes; held returns the bytes held for graphs,
 * *freed (may be NULL) those of them freed by PyTorch.  During a capture
 * the thread's capture mode is relaxed around libvmem's driver calls, and
 * libvmem neither waits for the device nor moves memory (docs/tags.md). */
VMEM_API size_t vmem_torch_graph_release(int device);
VMEM_API size_t vmem_torch_graph_held(int device, size_t *freed);

/* CuPy, cupy.cuda.memory.CFunctionAllocator(param, malloc, free, owner).
 * param NULL: the device's instance; otherwise param is the vmem_t to use.
 * CuPy passes no stream, so blocks are tagged with the legacy default
 * stream.  malloc returns NULL for size 0 and on failure. */
VMEM_API void *vmem_cupy_malloc(void *param, size_t size, int device_id);
VMEM_API void vmem_cupy_free(void *param, void *ptr, int device_id);

#ifdef __cplusplus
}
#endif

#endif /* VMEM_H */
