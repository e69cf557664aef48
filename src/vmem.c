/* The allocator: routing between the device arena and the host fallback,
 * the limit, the step hook, pointer information and the vtable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "recorder.h"
#include "smcopy.h"
#include "vmem_internal.h"

/* initial-exec: one thread-pointer-relative access per call instead of a
 * __tls_get_addr call (a few bytes of the static TLS surplus that glibc
 * keeps for libraries loaded by dlopen, as Python's ctypes loads this one). */
static _Thread_local vmem_status_t tls_status __attribute__((tls_model("initial-exec")));

vmem_status_t vmem_last_status(void) { return tls_status; }
void vmem_set_last_status(vmem_status_t st) { tls_status = st; }

/* ------------------------------------------------------------------------ */
/* Create / destroy                                                         */
/* ------------------------------------------------------------------------ */

static vmem_status_t backends_open(const vmem_config_t *cfg, backend_t **dev, backend_t **host)
{
    vmem_backend_kind_t kind = cfg->backend;
    size_t host_cap = cfg->host_limit ? cfg->host_limit : VMEM_DEFAULT_HOST_LIMIT;
    vmem_status_t st;
    if (kind == VMEM_BACKEND_AUTO) {
        if (backend_cuda_present(cfg->device)) {
            st = backend_vmm_create(cfg->device, dev);
            if (st == VMEM_ERR_ENV) /* a bad vmm setting is refused, not worked around */
                return st;
            kind = st == VMEM_OK ? VMEM_BACKEND_VMM : VMEM_BACKEND_CUDA;
        } else
            kind = VMEM_BACKEND_SIM;
        if (kind == VMEM_BACKEND_VMM)
            goto host;
    }
    switch (kind) {
    case VMEM_BACKEND_SIM:
    case VMEM_BACKEND_SIM_VMM:
        st = backend_sim_create(cfg->sim_capacity ? cfg->sim_capacity : VMEM_DEFAULT_SIM_CAPACITY,
                                kind == VMEM_BACKEND_SIM_VMM, dev);
        if (st != VMEM_OK)
            return st;
        backend_set_faults(*dev, cfg->sim_fail_nth, cfg->sim_fail_rate, cfg->sim_seed);
        st = backend_host_create(host_cap, host);
        if (st != VMEM_OK) {
            backend_destroy(*dev);
            return st;
        }
        return VMEM_OK;
    case VMEM_BACKEND_CUDA:
        st = backend_cuda_create(cfg->device, dev);
        break;
    case VMEM_BACKEND_VMM:
        st = backend_vmm_create(cfg->device, dev);
        break;
    default:
        return VMEM_ERR_INVALID;
    }
    if (st != VMEM_OK)
        return st;
host:
    st = backend_pinned_create(cfg->device, host);
    if (st != VMEM_OK) {
        backend_destroy(*dev);
        return st;
    }
    return VMEM_OK;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* Debug log line of the planner at each step end. */
static void place_debug(void *ctx, const place_t *pl)
{
    vmem_t *v = ctx;
    if (v->log_level > VMEM_LOG_DEBUG)
        return;
    static const char *names[] = {"learn", "match", "plan", "resync", "diverged"};
    vmem_log(v, VMEM_LOG_DEBUG,
             "placement: step %llu %s (from %s, offset %zu, %zu allocations, %u re-matches): plan %llu "
             "bytes on host; placed %llu (of which for blocks the plan did not know %llu), kept on the "
             "device %llu, fallback %llu, unplanned spills %llu; "
             "margin %llu + %llu; "
             "rule %s%s (mean step %.4f s farthest, %.4f s largest, %.4f s swap); swaps: %zu planned, "
             "%llu out, %llu in, %llu skipped; trials ended by a step planned from a kept variant: %llu",
             (unsigned long long)v->steps,
             pl->idle ? "idle (not recorded)" : names[pl->state < 5 ? pl->state : 0],
             pl->src >= 0 ? "a kept variant" : "the last step", pl->offset,
             pl->rec[pl->cur].n, pl->resyncs, (unsigned long long)pl->stats.last_plan_host_bytes,
             (unsigned long long)pl->step_placed, (unsigned long long)pl->step_heavier,
             (unsigned long long)pl->step_lighter,
             (unsigned long long)pl->step_fallback,
             (unsigned long long)pl->step_naive, (unsigned long long)pl->margin,
             (unsigned long long)pl->extra, placement_name(placement_in_force(v)),
             pl->auto_rule ? (pl->decided ? ", chosen" : ", on trial") : "", pl->trial_mean[0],
             pl->trial_mean[1], pl->trial_mean[2], pl->nmoves,
             (unsigned long long)pl->stats.swap_out_bytes, (unsigned long long)pl->stats.swap_in_bytes,
             (unsigned long long)pl->stats.swap_skipped,
             (unsigned long long)pl->stats.trials_unlike);
}

/* Variable `name` (value e) as a count of events, dflt when unset; -1 if
 * invalid (an empty value too, as for the other variables). */
static long env_events(const char *name, const char *e, long dflt)
{
    if (!e)
        return dflt;
    uint64_t n;
    if (options_parse_u64(e, &n) != 0 || n > 1000000) {
        vmem_log(NULL, VMEM_LOG_ERROR, "invalid %s=\"%s\" (expected a count of events)", name, e);
        return -1;
    }
    return (long)n;
}

/* The planner's rule and trials (placement.c; swap windows: swap.c).
 * planned: farthest free first to start with; on a real device the rule
 * is then chosen by measured step time among farthest, largest and (where
 * blocks move in place) swap.  Swap windows: a block leaves the device at
 * least VMEM_SWAP_HEAD events after its allocation and comes back
 * VMEM_SWAP_TAIL events before its free. */
static void place_setup(vmem_t *v, vmem_placement_t placement, long head, long tail)
{
    static const int rule[] = {[VMEM_PLACEMENT_PLANNED] = PLACE_RULE_FARTHEST,
                               [VMEM_PLACEMENT_NAIVE] = PLACE_RULE_FARTHEST,
                               [VMEM_PLACEMENT_FARTHEST] = PLACE_RULE_FARTHEST,
                               [VMEM_PLACEMENT_LARGEST] = PLACE_RULE_LARGEST,
                               [VMEM_PLACEMENT_SWAP] = PLACE_RULE_SWAP};
    size_t unit = bfc_move_unit(&v->dev);
    int r = rule[placement];
    if (r == PLACE_RULE_SWAP && !unit)
        r = PLACE_RULE_FARTHEST; /* nothing moves in place on this backend */
    place_init(&v->place, placement != VMEM_PLACEMENT_NAIVE, r);
    place_set_swap(&v->place, unit, (uint32_t)head, (uint32_t)tail);
    /* Swap takes part where blocks move in place (place_set_auto drops it
     * otherwise): fastest for ResNet-50 on the H100, slowest for the
     * transformers (docs/placement.md, "Swap windows"). */
    if (placement == VMEM_PLACEMENT_PLANNED && !(v->dev_backend->flags & BACKEND_F_SIMULATED))
        place_set_auto(&v->place, (1u << PLACE_RULE_FARTHEST) | (1u << PLACE_RULE_LARGEST) |
                                      (1u << PLACE_RULE_SWAP));
}

vmem_status_t vmem_create(const vmem_config_t *cfg_in, vmem_t **out)
{
    vmem_config_t cfg;
    if (!out) {
        vmem_log(NULL, VMEM_LOG_ERROR, "vmem_create: out is NULL");
        return VMEM_ERR_INVALID;
    }
    if (cfg_in) {
        if (cfg_in->size < sizeof cfg || cfg_in->version != VMEM_CONFIG_VERSION) {
            vmem_log(NULL, VMEM_LOG_ERROR,
                     "vmem_create: config not initialised with vmem_config_init (size %u, version %u)",
                     cfg_in->size, cfg_in->version);
            return VMEM_ERR_INVALID;
        }
        cfg = *cfg_in;
    } else {
        vmem_config_init(&cfg);
        vmem_status_t st = vmem_config_from_env(&cfg);
        if (st != VMEM_OK)
            return st;
    }
    if (cfg.backend < VMEM_BACKEND_AUTO || cfg.backend > VMEM_BACKEND_VMM || cfg.device < 0 ||
        cfg.log_level > VMEM_LOG_NONE || cfg.placement < VMEM_PLACEMENT_PLANNED ||
        cfg.placement > VMEM_PLACEMENT_SWAP) {
        vmem_log(NULL, VMEM_LOG_ERROR, "vmem_create: invalid configuration field");
        return VMEM_ERR_INVALID;
    }
    long swap_head = env_events("VMEM_SWAP_HEAD", getenv("VMEM_SWAP_HEAD"), 4);
    long swap_tail = env_events("VMEM_SWAP_TAIL", getenv("VMEM_SWAP_TAIL"), 8);
    if (swap_head < 0 || swap_tail < 0)
        return VMEM_ERR_ENV;
    if (!(cfg.sim_fail_rate >= 0 && cfg.sim_fail_rate <= 1)) { /* NaN too */
        vmem_log(NULL, VMEM_LOG_ERROR, "vmem_create: sim_fail_rate %g is not a probability (0 to 1)",
                 cfg.sim_fail_rate);
        return VMEM_ERR_INVALID;
    }
    if (cfg.sim_capacity &&
        (cfg.sim_capacity < VMEM_SIM_CAPACITY_MIN || cfg.sim_capacity > VMEM_SIM_CAPACITY_MAX)) {
        vmem_log(NULL, VMEM_LOG_ERROR,
                 "vmem_create: sim_capacity %zu outside the simulated device's range (2 MiB to "
                 "16 TiB)",
                 cfg.sim_capacity);
        return VMEM_ERR_INVALID;
    }
    if (cfg.start_cap && cfg.limit > cfg.start_cap) {
        vmem_log(NULL, VMEM_LOG_ERROR, "vmem_create: limit %zu above start cap %zu", cfg.limit,
                 cfg.start_cap);
        return VMEM_ERR_INVALID;
    }

    char limit_source[48];
    size_t limit = 0;
    vmem_status_t lst = options_limit_default(&cfg, &limit, limit_source, sizeof limit_source);
    if (lst != VMEM_OK)
        return lst;
    if (cfg.limit == 0 && limit && cfg.start_cap && limit > cfg.start_cap) {
        limit = cfg.start_cap; /* a plugin's cap, like the device default, stops at the cap */
        snprintf(limit_source, sizeof limit_source, "start_cap");
    }

    vmem_t *v = calloc(1, sizeof *v);
    if (!v)
        return VMEM_ERR_NOMEM;
    v->log_fn = cfg.log_fn;
    v->log_ctx = cfg.log_ctx;
    v->log_level = cfg.log_level;
    vmem_status_t st = backends_open(&cfg, &v->dev_backend, &v->host_backend);
    if (st != VMEM_OK) {
        vmem_log(v, VMEM_LOG_ERROR, "vmem_create: backend %s: %s", vmem_backend_name(cfg.backend),
                 vmem_strerror(st));
        free(v);
        return st;
    }
    /* Host memory mapped in place (vmm, sim-vmm) counts as host requests. */
    v->dev_backend->host_peer = v->host_backend;
    if (limit == 0) {
        size_t free_b = 0, total_b = 0;
        if (backend_mem_info(v->dev_backend, &free_b, &total_b) == VMEM_OK)
            limit = free_b;
        if (cfg.start_cap && limit > cfg.start_cap) {
            limit = cfg.start_cap; /* the default limit never exceeds the cap */
            snprintf(limit_source, sizeof limit_source, "start_cap");
        }
    }
    memcpy(v->limit_source, limit_source, sizeof v->limit_source);
    size_t host_limit = cfg.host_limit ? cfg.host_limit : VMEM_DEFAULT_HOST_LIMIT;
    /* Shared device regions grow to 256 MiB at most; requests of 64 MiB or
     * more get dedicated regions (docs/benchmarks.md: fragmentation). */
    bfc_params_t dp = {.min_region = (size_t)2 << 20, .max_region = (size_t)256 << 20,
                       .split_min = BFC_ALIGN, .keep_regions = 0,
                       .dedicated_min = (size_t)64 << 20};
    /* Region sizes and trim before growth: growth.h, VMEM_GROWTH, VMEM_TRIM;
     * remaps under the limit: VMEM_REMAP (bfc_remap); the block layout
     * planner: VMEM_LAYOUT, VMEM_LAYOUT_MIN (layout.h). */
    int remap_on = 1, layout_on = 0;
    uint64_t layout_min = 0;
    if (growth_policy_from_env(&dp.growth,
                               (v->dev_backend->flags & BACKEND_F_CONTIGUOUS) != 0) != VMEM_OK ||
        options_remap_from_env(&remap_on) != VMEM_OK ||
        layout_from_env(&layout_on, &layout_min) != VMEM_OK ||
        smcopy_blocks_from_env(&v->copy_blocks) != VMEM_OK ||
        recorder_from_env(cfg.device, &v->recorder) != VMEM_OK) {
        backend_destroy(v->dev_backend);
        backend_destroy(v->host_backend);
        free(v);
        return VMEM_ERR_ENV;
    }
    bfc_params_t hp = {.min_region = (size_t)64 << 20, .max_region = (size_t)1 << 30,
                       .split_min = BFC_ALIGN, .keep_regions = 1};
    if (bfc_init(&v->dev, v->dev_backend, &dp, limit) != VMEM_OK ||
        bfc_init(&v->host, v->host_backend, &hp, host_limit) != VMEM_OK) {
        bfc_fini(&v->dev);
        recorder_close(v->recorder);
        backend_destroy(v->dev_backend);
        backend_destroy(v->host_backend);
        free(v);
        return VMEM_ERR_NOMEM;
    }
    v->dev.host_limit = host_limit;
    /* No limit set: held over live matters more than packing (bfc.h). */
    v->dev.share_dedicated = strcmp(limit_source, "device") == 0;
    v->device_limit = v->dev.share_dedicated ? limit : 0;
    v->cfg = cfg;
    v->control_file = dup_or_null(cfg.control_file);
    v->stats_file = dup_or_null(cfg.stats_file);
    v->cfg.control_file = v->control_file;
    v->cfg.stats_file = v->stats_file;
    v->start_cap = cfg.start_cap ? cfg.start_cap : limit;
    v->host_fallback = cfg.host_fallback != 0;
    v->swap_reason = "none";
    v->step_start = vmem_now();
    place_setup(v, cfg.placement, swap_head, swap_tail);
    layout_init(&v->layout, layout_on, layout_min);
    v->remap = remap_on;
    deferred_init(&v->deferred, !(v->dev_backend->flags & BACKEND_F_SIMULATED), cfg.device);
    v->place.debug = place_debug;
    v->place.debug_ctx = v;
    atomic_store(&v->perf, 100);
    vmem_lock_init(&v->lock);
    if (v->control_file) {
        st = control_start(v, v->control_file);
        if (st != VMEM_OK) {
            vmem_destroy(v);
            return st;
        }
    }
    vmem_log(v, VMEM_LOG_INFO, "created: backend %s, limit %zu (from %s), host limit %zu",
             v->dev_backend->name, limit, v->limit_source, host_limit);
    vmem_log(v, VMEM_LOG_DEBUG, "config: device %d, start cap %zu, host fallback %s, control file %s, "
             "stats file %s", cfg.device, v->start_cap, v->host_fallback ? "on" : "off",
             v->control_file ? v->control_file : "none", v->stats_file ? v->stats_file : "none");
    *out = v;
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* Deferred frees (deferred.h)                                              */
/* ------------------------------------------------------------------------ */

static int streams_real(const vmem_t *v);

/* The live block of the device arena, else of the host arena, containing
 * ptr (NULL if none); *arena gets which (0 device, 1 host). */
static const bfc_chunk_t *live_chunk(const vmem_t *v, const void *ptr, int *arena)
{
    const bfc_chunk_t *c = bfc_find_live(&v->dev, ptr);
    *arena = c == NULL;
    return c ? c : bfc_find_live(&v->host, ptr);
}

/* Why ptr is not a live block of the device or host arena: freed
 * (VMEM_ERR_DOUBLE_FREE) or never handed out (VMEM_ERR_FOREIGN_PTR). */
static vmem_status_t arenas_classify(const vmem_t *v, const void *ptr)
{
    vmem_status_t st = bfc_classify(&v->dev, ptr);
    return st == VMEM_ERR_FOREIGN_PTR ? bfc_classify(&v->host, ptr) : st;
}

/* A waiting block goes back to its arena. */
static void deferred_give(vmem_t *v, const defer_entry_t *e)
{
    bfc_free(e->arena ? &v->host : &v->dev, (void *)e->ptr, e->key, NULL);
}

/* Waiting blocks whose fences are done go back (oldest first: one query
 * per allocation while the oldest is not done). */
static void deferred_collect(vmem_t *v)
{
    defer_entry_t e;
    while (deferred_pop(&v->deferred, DEFER_DONE, NULL, &e))
        deferred_give(v, &e);
}

/* Every waiting block goes back, the CPU waiting for its fences: before a
 * limit change, a trim, a pause or the end of the instance. */
static void deferred_settle(vmem_t *v)
{
    defer_entry_t e;
    while (deferred_pop(&v->deferred, DEFER_CPU, NULL, &e))
        deferred_give(v, &e);
}

/* The oldest waiting block goes back to its arena if `how` allows (after a
 * wait queued on stream, or the CPU's); nothing while the thread captures a
 * CUDA graph.  1 if a block went back; *dev (if not NULL) gets its bytes on
 * device memory. */
static int deferred_reclaim_one(vmem_t *v, defer_how_t how, void *stream, size_t *dev)
{
    if (!deferred_waiting(&v->deferred) || backend_capturing())
        return 0;
    defer_entry_t e;
    if (!deferred_pop(&v->deferred, how, stream, &e))
        return 0;
    deferred_give(v, &e);
    if (dev)
        *dev = e.dev;
    return 1;
}

/* For an allocation on stream that found no room: the oldest waiting block
 * goes back.  While one stream allocates, that stream waits for its fences
 * (a wait queued on the GPU; the CPU goes on); with several, the CPU waits,
 * since another stream may take the block once the stream keys are settled.
 * Nothing is waited for while the thread captures a CUDA graph.  1 if a
 * block went back. */
static int deferred_reclaim(vmem_t *v, void *stream)
{
    return deferred_reclaim_one(v, v->multi_stream ? DEFER_CPU : DEFER_STREAM, stream, NULL);
}

/* For a tag that found no room under the shared limit (tags.c: an
 * allocation, a resume, a step end's move back): the oldest waiting block
 * goes back, the CPU waiting for its fences.  Not a stream wait: the memory
 * is of use to the tag only once the main arena gives it back to the
 * backend, which must not unmap what other streams' work still reads. */
int vmem_deferred_reclaim_cpu(vmem_t *v, size_t *dev)
{
    *dev = 0;
    return deferred_reclaim_one(v, DEFER_CPU, NULL, dev);
}

vmem_status_t vmem_record_stream(vmem_t *v, void *ptr, void *stream)
{
    if (!v || !ptr)
        return VMEM_INVALID_ARG(v);
    /* A stream capturing a graph: the fence would be a node of the graph.
     * (Simulated devices' streams are tokens, never asked.) */
    capture_scope_t cs;
    if (streams_real(v) && capture_enter(stream, &cs)) {
        capture_leave(&cs);
        vmem_log(v, VMEM_LOG_ERROR, "vmem_record_stream(%p): the stream is capturing a graph",
                 ptr);
        return VMEM_ERR_BUSY;
    }
    vmem_lock(&v->lock);
    vmem_status_t st = VMEM_OK;
    int arena;
    const bfc_chunk_t *c = live_chunk(v, ptr, &arena);
    const defer_entry_t *e = c ? deferred_find(&v->deferred, c->addr) : NULL;
    if (e && e->freed) {
        st = VMEM_ERR_DOUBLE_FREE; /* freed, waiting for its fences */
    } else if (c) {
        if (deferred_record(&v->deferred, c->addr, stream) != 0)
            st = VMEM_ERR_BACKEND;
    } else if (v->tags && tags_find_live(v, ptr)) {
        st = VMEM_ERR_UNSUPPORTED; /* a tag's arena: its frees do not wait */
    } else {
        st = arenas_classify(v, ptr);
    }
    vmem_unlock(&v->lock);
    if (st != VMEM_OK)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_record_stream(%p): %s", ptr, vmem_strerror(st));
    return st;
}

vmem_status_t vmem_copy_async(vmem_t *v, void *dst, const void *src, size_t bytes, void *stream)
{
    if (!v || (bytes && (!dst || !src)))
        return VMEM_INVALID_ARG(v);
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (bytes && (d + bytes < d || s + bytes < s || (d < s + bytes && s < d + bytes))) {
        vmem_log(v, VMEM_LOG_ERROR, "vmem_copy_async(%p, %p, %zu): the ranges overlap or wrap",
                 dst, src, bytes);
        return VMEM_ERR_INVALID;
    }
    if (!streams_real(v)) { /* simulated devices: their memory is the host's, nothing queues */
        if (bytes)
            memcpy(dst, src, bytes);
        return VMEM_OK;
    }
    vmem_status_t st = smcopy_launch(v->cfg.device, dst, src, bytes, stream, v->copy_blocks);
    if (st != VMEM_OK)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_copy_async(%p, %p, %zu): %s", dst, src, bytes,
                 vmem_strerror(st));
    return st;
}

/* At the free of the live block ptr (dev or host arena) recorded by
 * vmem_record_stream: 1 if it now waits for its fences (accounted as freed
 * by the caller), 0 if it is to be freed now.  *arena and *bytes, *seq get
 * the block's arena, size and allocation order. */
static int deferred_on_free(vmem_t *v, void *ptr, uintptr_t key, int *arena, size_t *bytes,
                            uint64_t *seq)
{
    const bfc_chunk_t *c = live_chunk(v, ptr, arena);
    if (!c || c->addr != (uintptr_t)ptr)
        return 0; /* bfc_free reports it */
    int on_host = *arena || c->host_bytes;
    if ((*arena ? &v->host : &v->dev)->pending ||
        (on_host && v->host.held + v->dev.held_host > v->dev.host_limit)) {
        /* A shrink waits for this memory: the CPU waits for the other
         * streams' work now, so the free gives it back at once. */
        deferred_wait_drop(&v->deferred, c->addr);
        return 0;
    }
    /* as bfc counts them: a block with host bytes is requested on host */
    defer_entry_t sizes = {.host = *arena ? c->size : c->host_bytes,
                           .req_dev = on_host ? 0 : c->requested,
                           .req_host = on_host ? c->requested : 0};
    sizes.dev = c->size - sizes.host;
    *bytes = c->size;
    *seq = c->seq;
    return deferred_free(&v->deferred, c->addr, *arena, key, &sizes);
}

void vmem_destroy(vmem_t *v)
{
    if (!v)
        return;
    control_stop(v);
    tags_destroy(v);
    for (int i = 0; i < v->nstreams; i++)
        backend_fence_destroy(v->fences[i]);
    deferred_settle(v);
    deferred_fini(&v->deferred);
    size_t live = bfc_fini(&v->dev) + bfc_fini(&v->host);
    layout_report(&v->layout, v);
    layout_fini(&v->layout);
    recorder_close(v->recorder);
    place_fini(&v->place);
    if (live)
        vmem_log(v, VMEM_LOG_WARN, "destroyed with %zu live blocks", live);
    backend_destroy(v->dev_backend);
    backend_destroy(v->host_backend);
    vmem_lock_destroy(&v->lock);
    free(v->control_file);
    free(v->stats_file);
    free(v);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

void vmem_event_prepare(vmem_t *v, pending_event_t *pe, vmem_event_kind_t kind)
{
    pe->fn = v->cb_fn[kind];
    pe->ctx = v->cb_ctx[kind];
    memset(&pe->ev, 0, sizeof pe->ev);
    pe->ev.kind = kind;
}

void vmem_event_fire(const pending_event_t *pe)
{
    if (pe->fn)
        pe->fn(pe->ctx, &pe->ev);
}

vmem_status_t vmem_set_callback(vmem_t *v, vmem_event_kind_t kind, vmem_event_fn fn, void *ctx)
{
    if (!v || kind < VMEM_EVENT_SPILL || kind > VMEM_EVENT_LIMIT_CHANGED)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    v->cb_fn[kind] = fn;
    v->cb_ctx[kind] = fn ? ctx : NULL;
    vmem_unlock(&v->lock);
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* Alloc / free                                                             */
/* ------------------------------------------------------------------------ */

static void step_track(vmem_t *v)
{
    size_t d = vmem_device_bytes(v), h = vmem_host_bytes(v);
    if (d < v->step_dev_min)
        v->step_dev_min = d;
    if (d > v->step_dev_max)
        v->step_dev_max = d;
    if (h < v->step_host_min)
        v->step_host_min = h;
    if (h > v->step_host_max)
        v->step_host_max = h;
    if (d + h > v->wm_all)
        v->wm_all = d + h;
}

/* The same after a free of a block on device memory (no host bytes moved):
 * only the device minimum can change. */
static inline void step_track_device_free(vmem_t *v)
{
    size_t d = vmem_device_bytes(v);
    if (d < v->step_dev_min)
        v->step_dev_min = d;
}

/* The same after an allocation that moved no host bytes (in the device
 * arena, nothing moved to or from host before it): device bytes only rose
 * and host bytes stayed, so only the maxima can change. */
static inline void step_track_device_alloc(vmem_t *v)
{
    size_t d = vmem_device_bytes(v);
    if (d > v->step_dev_max)
        v->step_dev_max = d;
    size_t all = d + vmem_host_bytes(v); /* as vmem_watermark counts them */
    if (all > v->wm_all)
        v->wm_all = all;
}

/* 1 when stream handles are real CUDA streams.  On a simulated device they
 * are opaque tokens and nothing runs asynchronously, so nothing is waited
 * for, but blocks still carry stream keys (tests check who may reuse what). */
static int streams_real(const vmem_t *v)
{
    return !(v->dev_backend->flags & BACKEND_F_SIMULATED);
}

static void stream_wait(vmem_t *v, void *stream)
{
    if (streams_real(v))
        backend_stream_sync(stream);
}

/* Index of stream in v->streams, registering it if there is room; -1 when
 * the table is full. */
static int stream_index(vmem_t *v, void *stream)
{
    for (int i = 0; i < v->nstreams; i++)
        if (v->streams[i] == stream)
            return i;
    if (v->nstreams == VMEM_MAX_STREAMS)
        return -1;
    v->streams[v->nstreams] = stream;
    v->fences[v->nstreams] = NULL;
    v->dirty[v->nstreams] = 0;
    return v->nstreams++;
}

/* The key stream_key gives blocks allocated on stream, without its side
 * effects (registering the first stream, turning multi_stream on). */
static uintptr_t stream_key_peek(const vmem_t *v, void *stream)
{
    if (!v->multi_stream && (v->nstreams == 0 || v->streams[0] == stream))
        return 0;
    return (uintptr_t)stream + 1; /* never 0: 0 means "any stream" */
}

/* The stream key of blocks allocated on stream: 0 ("any stream") while a
 * single stream has been seen, the stream's own key afterwards. */
static uintptr_t stream_key(vmem_t *v, void *stream)
{
    if (!v->multi_stream && v->nstreams == 0)
        stream_index(v, stream); /* the first stream seen */
    uintptr_t key = stream_key_peek(v, stream);
    if (key && !v->multi_stream) {
        /* A second stream: from now on free blocks carry their stream.  What
         * was freed before on the first stream has key 0 and may still be
         * in use by its queued work: wait for it, once. */
        stream_wait(v, v->streams[0]);
        v->multi_stream = 1;
    }
    return key;
}

/* The stream key of a block freed on stream.  Once several streams are in
 * use it records the stream's fence (an event at this point of its queue), which
 * other streams wait for before they reuse the block.  Without a fence (the
 * stream table is full, or the event failed) it waits for the stream now,
 * after which the block is safe for every stream. */
static uintptr_t stream_free_key(vmem_t *v, void *stream)
{
    uintptr_t key = stream_key(v, stream);
    if (!key)
        return 0;
    int i = stream_index(v, stream);
    if (i < 0 ||
        (streams_real(v) && backend_fence_record(&v->fences[i], stream, v->cfg.device) != 0)) {
        stream_wait(v, stream);
        return 0;
    }
    v->dirty[i] = 1;
    return key;
}

/* Makes every free block usable by every stream: waits (only as long as
 * needed) for each stream's fence, i.e. for the work it queued before its
 * latest free, then clears the stream keys.  Returns 1 if any block had one. */
static int streams_settle(vmem_t *v)
{
    int any = 0;
    if (backend_capturing())
        return 0; /* a fence wait during a CUDA graph capture would break it */
    for (int i = 0; i < v->nstreams; i++) {
        if (!v->dirty[i])
            continue;
        any = 1;
        if (!backend_fence_done(v->fences[i]))
            backend_fence_wait(v->fences[i]);
        v->dirty[i] = 0;
    }
    if (any) {
        bfc_clear_streams(&v->dev);
        bfc_clear_streams(&v->host);
        tags_streams_cleared(v);
    }
    return any;
}

/* For tags.c (vmem_internal.h). */
int vmem_streams_settle(vmem_t *v) { return streams_settle(v); }

/* The stream keys of an allocation and of a free on stream.  One stream so
 * far and this is it (the common case): key 0, no call. */
static inline uintptr_t alloc_key(vmem_t *v, void *stream)
{
    return !v->multi_stream && v->nstreams && v->streams[0] == stream ? 0 : stream_key(v, stream);
}
static inline uintptr_t free_key(vmem_t *v, void *stream)
{
    return !v->multi_stream && v->nstreams && v->streams[0] == stream ? 0
                                                                      : stream_free_key(v, stream);
}
uintptr_t vmem_stream_alloc_key(vmem_t *v, void *stream) { return alloc_key(v, stream); }
uintptr_t vmem_stream_free_key(vmem_t *v, void *stream) { return free_key(v, stream); }

/* Host bytes that may still be taken: the host limit covers the host arena
 * and the device arena's host-backed granules together. */
static size_t host_room(const vmem_t *v)
{
    size_t used = v->host.held + v->dev.held_host + tags_held_host(v);
    return v->host.limit > used ? v->host.limit - used : 0;
}

size_t vmem_host_room(const vmem_t *v) { return host_room(v); }

/* How far the device arena gives memory back before retrying an allocation
 * that failed: under the limit, just enough room for it (with vmm, free
 * granules anywhere in the range; giving back all of them would only make
 * the next allocations map them again); when the device itself refused,
 * everything free.  Asked only for a request bfc_within_limit: its size in
 * whole granules is within the limit, so the rounding cannot wrap (a request
 * within a granule of SIZE_MAX once wrapped it to 0 and gave everything
 * back) and no room it needs is above the limit. */
static size_t release_target(const vmem_t *v, size_t size)
{
    size_t g = v->dev.granule, need = (bfc_round(size) + g - 1) / g * g;
    return v->dev.last_fail == BFC_FAIL_LIMIT ? v->dev.limit - need : 0;
}

/* Bytes of a live block that lie on device memory (placement planner). */
static uint64_t live_device_bytes(void *ctx, int arena, uintptr_t addr, uint64_t size)
{
    vmem_t *v = ctx;
    if (arena != 0)
        return 0;
    uint64_t h = bfc_host_bytes(&v->dev, (const void *)addr, (size_t)size);
    return size > h ? size - h : 0;
}

static place_env_t place_env(vmem_t *v)
{
    place_env_t e = {.limit = v->dev.limit, .dev_in_use = vmem_device_bytes(v),
                     .device_bytes = live_device_bytes, .ctx = v};
    return e;
}

/* One try of host_alloc: host memory mapped in place in the device arena
 * (vmm, sim-vmm), or the host arena. */
static void *host_try(vmem_t *v, size_t size, uintptr_t key)
{
    return v->dev.hostmap ? bfc_alloc_spill(&v->dev, size, key, host_room(v))
                          : bfc_alloc(&v->host, size, key);
}

/* Host memory for an allocation: mapped in place in the device arena (vmm,
 * sim-vmm) or in the host arena.  *arena gets which (0 device, 1 host). */
static void *host_alloc(vmem_t *v, size_t size, uintptr_t key, void *stream, int *arena)
{
    *arena = v->dev.hostmap ? 0 : 1;
    void *p = host_try(v, size, key);
    if (!p && v->multi_stream && streams_settle(v))
        p = host_try(v, size, key);
    while (!p && deferred_reclaim(v, stream)) /* blocks waiting for other streams (deferred.h) */
        p = host_try(v, size, key);
    return p;
}

static void *device_alloc(vmem_t *v, size_t size, uintptr_t key, void *stream)
{
    void *p = bfc_alloc(&v->dev, size, key);
    /* A request larger than the limit (in whole granules) cannot fit whatever
     * is settled, given back or moved: nothing is (it goes to host as it is). */
    if (!p && v->dev.last_fail != BFC_FAIL_SIZE && bfc_within_limit(&v->dev, size)) {
        if (v->multi_stream && streams_settle(v))
            p = bfc_alloc(&v->dev, size, key);
        /* Freed blocks that other streams' work still reads (deferred.h):
         * back, oldest first, once this stream waits for that work (before
         * a remap: measured, waiting for a copy cost less than moving the
         * memory around the blocks that wait; docs/placement.md). */
        while (!p && v->dev.last_fail != BFC_FAIL_SIZE && deferred_reclaim(v, stream))
            p = bfc_alloc(&v->dev, size, key);
        /* Under the limit, free memory in pieces: moved to the arena's end
         * without waiting for the device, while one stream allocates (the
         * old addresses stay mapped for its queued work: bfc_remap). */
        if (!p && v->remap && !v->multi_stream && v->dev.last_fail == BFC_FAIL_LIMIT &&
            bfc_remap(&v->dev, size, key))
            p = bfc_alloc(&v->dev, size, key);
        if (!p && !v->dev.pending && bfc_release(&v->dev, release_target(v, size)) > 0)
            p = bfc_alloc(&v->dev, size, key);
        /* The device backend refused (the device is full: the limit may be
         * above what it has; vmm, sim-vmm: free host memory kept for spills
         * holds address space of the range): give back every empty region
         * and that host memory, and retry. */
        if (!p && v->dev.last_fail == BFC_FAIL_BACKEND && !v->dev.pending &&
            bfc_release(&v->dev, 0) + bfc_release_host(&v->dev) > 0)
            p = bfc_alloc(&v->dev, size, key);
    }
    return p;
}

int vmem_fits(vmem_t *v, size_t size, void *stream)
{
    if (!v || !size)
        return 0;
    vmem_lock(&v->lock);
    int fits = bfc_fits(&v->dev, size, stream_key_peek(v, stream));
    vmem_unlock(&v->lock);
    return fits;
}

/* Routing: where the placement planner puts the allocation (placement.c),
 * else the device within the limit, else the host fallback. */
static void *alloc_locked(vmem_t *v, size_t size, uintptr_t key, void *stream,
                          vmem_status_t *st, pending_event_t *pe)
{
    if (deferred_waiting(&v->deferred) && !backend_capturing())
        deferred_collect(v);
    size_t host_before = vmem_host_bytes(v); /* for step_track */
    unsigned where = PLACE_NONE;
    if (place_deciding(&v->place)) { /* the environment only for a step that decides */
        place_env_t env = place_env(v);
        where = place_decide_step(&v->place, size, key, &env);
    }
    /* The block layout (layout.c): this allocation's planned address, if any. */
    uintptr_t planned = layout_next(&v->layout, size, key, &v->place, &v->dev);
    if (place_moves_due(&v->place))
        swap_run_due(v); /* swap windows: blocks out before this allocation, or back */
    int arena = 0;
    void *p = NULL;
    const char *why = NULL;
    if (where == PLACE_HOST && v->host_fallback) {
        p = host_alloc(v, size, key, stream, &arena);
        why = "placement";
    }
    if (!p) {
        why = NULL;
        arena = 0;
        if (planned) {
            p = bfc_alloc_at(&v->dev, size, key, planned, v->layout.hint);
            layout_placed(&v->layout, p != NULL);
        }
        if (!p)
            p = device_alloc(v, size, key, stream);
    }
    if (!p && v->dev.last_fail != BFC_FAIL_SIZE && v->host_fallback) {
        bfc_fail_reason_t fail = v->dev.last_fail;
        size_t dev_now = vmem_device_bytes(v);
        p = host_alloc(v, size, key, stream, &arena);
        if (p && where == PLACE_DEVICE)
            place_note_short(&v->place, bfc_round(size), dev_now, v->dev.limit);
        why = fail == BFC_FAIL_LIMIT ? "limit" : "device_full";
    }
    if (p) {
        bfc_arena_t *a = arena ? &v->host : &v->dev;
        v->allocs++;
        if (why) {
            v->spills++;
            v->spilled_bytes += size;
            v->swap_reason = why;
            vmem_event_prepare(v, pe, VMEM_EVENT_SPILL);
            pe->ev.size = size;
        }
        place_note_alloc(&v->place, size, bfc_round(size), key, arena, a->seq, (uintptr_t)p,
                         why != NULL, where);
        if (arena == 0)
            layout_note_alloc(&v->layout, (uintptr_t)p);
        if (arena == 0 && vmem_host_bytes(v) == host_before)
            step_track_device_alloc(v);
        else
            step_track(v);
        *st = VMEM_OK;
        return p;
    }
    *st = v->dev.last_fail == BFC_FAIL_SIZE ? VMEM_ERR_SIZE : VMEM_ERR_NOMEM;
    v->failures++;
    vmem_event_prepare(v, pe, VMEM_EVENT_ALLOC_FAILED);
    pe->ev.size = size;
    pe->ev.status = *st;
    return NULL;
}

/* vmem_alloc_stream of a size that is zero or too large to round (out of
 * line: the common path keeps fewer registers). */
static __attribute__((noinline, cold)) void *alloc_bad_size(vmem_t *v, size_t size)
{
    pending_event_t pe;
    pe.fn = NULL;
    tls_status = VMEM_ERR_SIZE;
    vmem_lock(&v->lock);
    v->failures++;
    vmem_event_prepare(v, &pe, VMEM_EVENT_ALLOC_FAILED);
    pe.ev.size = size;
    pe.ev.status = VMEM_ERR_SIZE;
    vmem_unlock(&v->lock);
    vmem_log(v, VMEM_LOG_ERROR, "vmem_alloc: invalid size %zu", size);
    vmem_event_fire(&pe);
    return NULL;
}

void *vmem_alloc_stream(vmem_t *v, size_t size, void *stream)
{
    if (!v) {
        tls_status = VMEM_INVALID_ARG(v);
        return NULL;
    }
    if (bfc_round(size) == 0) /* zero, or too large to round */
        return alloc_bad_size(v, size);
    vmem_status_t st;
    pending_event_t pe;
    pe.fn = NULL; /* vmem_event_prepare fills the rest when there is an event */
    unsigned tag = tags_current(v); /* vmem_set_tag: the tag's own arena */
    if (tag)
        return tags_alloc(v, size, stream, tag);
    vmem_lock(&v->lock);
    void *p = alloc_locked(v, size, alloc_key(v, stream), stream, &st, &pe);
    if (p && v->recorder)
        recorder_alloc(v->recorder, p, size, stream); /* in the allocator's order */
    vmem_unlock(&v->lock);
    tls_status = st;
    if (!p)
        vmem_log(v, VMEM_LOG_WARN, "vmem_alloc(%zu): %s", size, vmem_strerror(st));
    vmem_event_fire(&pe);
    return p;
}

void *vmem_alloc(vmem_t *v, size_t size) { return vmem_alloc_stream(v, size, NULL); }

vmem_status_t vmem_free_stream(vmem_t *v, void *ptr, void *stream)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    if (!ptr)
        return VMEM_OK;
    vmem_lock(&v->lock);
    uintptr_t key = free_key(v, stream);
    size_t host_before = vmem_host_bytes(v); /* for step_track */
    size_t bytes = 0;
    int arena = 0;
    uint64_t seq = 0;
    vmem_status_t st = VMEM_ERR_FOREIGN_PTR;
    int waits = 0; /* vmem_record_stream's fences: the block waits for them (deferred.h) */
    if (v->deferred.count) {
        const defer_entry_t *e = deferred_find(&v->deferred, (uintptr_t)ptr);
        if (e && e->freed)
            st = VMEM_ERR_DOUBLE_FREE;
        else if (e && (waits = deferred_on_free(v, ptr, key, &arena, &bytes, &seq)) != 0)
            st = VMEM_OK;
    }
    if (!waits && st == VMEM_ERR_FOREIGN_PTR) {
        arena = 0;
        st = bfc_free(&v->dev, ptr, key, &bytes);
        if (st == VMEM_ERR_FOREIGN_PTR) {
            arena = 1;
            st = bfc_free(&v->host, ptr, key, &bytes);
        }
        if (st == VMEM_ERR_FOREIGN_PTR && v->tags) {
            arena = 2; /* a tag's arena (tags.c): not the planner's */
            st = tags_free(v, ptr, key);
        }
        if (arena < 2)
            seq = arena ? v->host.freed_seq : v->dev.freed_seq;
    }
    if (st == VMEM_OK) {
        if (arena < 2)
            place_note_free(&v->place, arena, seq, bytes);
        if (arena == 0)
            layout_note_free(&v->layout, (uintptr_t)ptr);
        if (arena < 2 && v->recorder) /* tags' blocks are not recorded */
            recorder_free(v->recorder, ptr);
        v->frees++;
        if (arena == 0 && vmem_host_bytes(v) == host_before)
            step_track_device_free(v);
        else
            step_track(v);
    } else {
        if (st != VMEM_ERR_DOUBLE_FREE) {
            st = arenas_classify(v, ptr);
            if (st == VMEM_ERR_FOREIGN_PTR && v->tags)
                st = tags_classify(v, ptr);
        }
        v->bad_frees++;
    }
    vmem_unlock(&v->lock);
    if (st != VMEM_OK)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_free(%p): %s", ptr, vmem_strerror(st));
    return st;
}

vmem_status_t vmem_free(vmem_t *v, void *ptr) { return vmem_free_stream(v, ptr, NULL); }

/* ------------------------------------------------------------------------ */
/* Limits                                                                   */
/* ------------------------------------------------------------------------ */

vmem_status_t vmem_apply_limit(vmem_t *v, size_t bytes, unsigned flags, size_t *applied)
{
    if (!v || (flags & ~VMEM_LIMIT_FORCE))
        return VMEM_INVALID_ARG(v);
    pending_event_t pe = {0};
    vmem_lock(&v->lock);
    if (bytes > v->start_cap) {
        if (!(flags & VMEM_LIMIT_FORCE)) {
            size_t cap = v->start_cap;
            vmem_unlock(&v->lock);
            vmem_log(v, VMEM_LOG_ERROR,
                     "vmem_set_limit(%zu): above the start cap %zu (use VMEM_LIMIT_FORCE)", bytes,
                     cap);
            return VMEM_ERR_ABOVE_CAP;
        }
        v->start_cap = bytes;
    }
    size_t old = v->dev.limit;
    v->dev.share_dedicated = 0; /* a limit was set: keep dedicated regions whole */
    layout_stop(&v->layout);    /* and best fit only */
    deferred_settle(v);         /* a shrink sees only the program's blocks */
    vmem_status_t st = bfc_set_limit(&v->dev, bytes);
    place_env_t env = place_env(v);
    place_limit_changed(&v->place, &env, old != bytes); /* an idle planner records again */
    recorder_limit(v->recorder, bytes);
    if (v->tags && tags_limit_changed(v, bytes) == VMEM_PENDING)
        st = VMEM_PENDING; /* tagged blocks hold the rest */
    size_t held = v->dev.held;
    if (old != bytes) {
        vmem_event_prepare(v, &pe, VMEM_EVENT_LIMIT_CHANGED);
        pe.ev.old_limit = old;
        pe.ev.new_limit = bytes;
    }
    vmem_unlock(&v->lock);
    if (applied)
        *applied = held;
    vmem_log(v, st == VMEM_OK ? VMEM_LOG_INFO : VMEM_LOG_WARN,
             "limit %zu -> %zu: device holds %zu%s", old, bytes, held,
             st == VMEM_PENDING ? " (shrink pending until live blocks are freed)" : "");
    vmem_event_fire(&pe);
    return st;
}

vmem_status_t vmem_set_limit_ex(vmem_t *v, size_t bytes, unsigned flags, size_t *applied)
{
    return vmem_apply_limit(v, bytes, flags, applied);
}

vmem_status_t vmem_set_limit(vmem_t *v, size_t bytes, size_t *applied)
{
    return vmem_apply_limit(v, bytes, 0, applied);
}

vmem_status_t vmem_get_limit(vmem_t *v, size_t *limit)
{
    if (!v || !limit)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    *limit = v->dev.limit;
    vmem_unlock(&v->lock);
    return VMEM_OK;
}

vmem_status_t vmem_set_host_limit(vmem_t *v, size_t bytes)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    deferred_settle(v); /* a shrink sees only the program's blocks */
    vmem_status_t st = bfc_set_limit(&v->host, bytes);
    /* Host memory mapped in place (vmm, sim-vmm): what is free goes now, the
     * rest as its blocks are freed. */
    v->dev.host_limit = bytes;
    if (v->host.held + v->dev.held_host > bytes)
        bfc_release_host(&v->dev);
    if (st == VMEM_OK && v->host.held + v->dev.held_host > bytes)
        st = VMEM_PENDING;
    vmem_unlock(&v->lock);
    return st;
}

vmem_status_t vmem_set_host_fallback(vmem_t *v, int enabled)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    v->host_fallback = enabled != 0;
    vmem_unlock(&v->lock);
    return VMEM_OK;
}

vmem_status_t vmem_trim(vmem_t *v, size_t *released)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    deferred_settle(v);
    size_t n = bfc_release(&v->dev, 0) + bfc_release(&v->host, 0) + bfc_release_host(&v->dev) +
               tags_trim(v);
    vmem_unlock(&v->lock);
    if (released)
        *released = n;
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* Step hook                                                                */
/* ------------------------------------------------------------------------ */

/* The safe point to move data between host and device (vmm, sim-vmm): a
 * step end, or a job suspended at perf 0 when its limit changes (control.c).
 * Free memory still owned by streams is settled first, so a shrink can give
 * back every free granule before it evicts live ones.  Called with v->lock. */
static vmem_status_t boundary_moves(vmem_t *v, bfc_moves_t *moves)
{
    if (v->dev.hostmap && v->multi_stream && (v->dev.pending || v->dev.held_host))
        streams_settle(v);
    /* Blocks the plan keeps on host stay there while the step does not fit
     * under the limit (placement.c); otherwise they come back. */
    v->dev.hold_host = place_hold_host(&v->place, v->dev.limit);
    /* Blocks that other streams' work still reads must not move under it:
     * those done go back; the others are waited for if a move may touch
     * them (on host memory, or a shrink still evicting), or if live data on
     * host is to come back (their device memory is room for it). */
    if (deferred_waiting(&v->deferred)) {
        deferred_collect(v);
        if (v->deferred.host_bytes || v->dev.pending ||
            (v->deferred.dev_bytes && v->dev.host_in_use && !v->dev.hold_host))
            deferred_settle(v);
    }
    return bfc_rebalance(&v->dev, v->host_fallback ? host_room(v) : 0, moves);
}

void vmem_boundary_rebalance(vmem_t *v)
{
    bfc_moves_t moves;
    vmem_lock(&v->lock);
    vmem_status_t st = boundary_moves(v, &moves);
    vmem_unlock(&v->lock);
    if (moves.to_host || moves.to_device || st < 0)
        vmem_log(v, st >= 0 ? VMEM_LOG_INFO : VMEM_LOG_WARN,
                 "suspended: %zu bytes moved to host, %zu back to device%s%s", moves.to_host,
                 moves.to_device, st >= 0 ? "" : ": ", st >= 0 ? "" : vmem_strerror(st));
    if (v->stats_file)
        stats_write_file(v, v->stats_file);
}

vmem_status_t vmem_step_naive(vmem_t *v)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    int left = place_leave_step(&v->place);
    unsigned long long step = v->steps;
    vmem_unlock(&v->lock);
    if (left) /* logged outside the lock, as vmem_alloc logs */
        vmem_log(v, VMEM_LOG_DEBUG, "placement: the rest of step %llu is naive (vmem_step_naive)",
                 step);
    return VMEM_OK;
}

vmem_status_t vmem_step_exclude(vmem_t *v, double seconds)
{
    if (!v || !vmem_excludable_seconds(seconds))
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    v->step_excluded += seconds;
    vmem_unlock(&v->lock);
    return VMEM_OK;
}

vmem_status_t vmem_step_end(vmem_t *v)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    control_apply_pending(v);
    double now = vmem_now();
    vmem_lock(&v->lock);
    bfc_moves_t moves;
    recorder_step(v->recorder);
    vmem_status_t mst = boundary_moves(v, &moves);
    tags_step_end(v);
    double dur = now - v->step_start;
    place_env_t env = place_env(v);
    /* The planner's trials compare rules by the step's own time: the pauses
     * the runtime reported (vmem_step_exclude) are not the rule's. */
    env.step_seconds = dur > v->step_excluded ? dur - v->step_excluded : 0.0;
    v->last_step_excluded = v->step_excluded;
    v->step_excluded = 0.0;
    /* Before place_step_end: the layout reads what the planner learned. */
    layout_step_end(&v->layout, &v->place,
                    v->dev.share_dedicated && (v->dev_backend->flags & BACKEND_F_CONTIGUOUS));
    /* Uncapped, the planner need not record every step (a cut plans from
     * the last recorded one), unless the layout learns from the records. */
    env.may_idle = v->device_limit && v->dev.limit >= v->device_limit &&
                   !layout_wants_records(&v->layout);
    place_step_end(&v->place, &env);
    v->steps++;
    v->last_step_seconds = dur;
    v->last_step_dev_min = v->step_dev_min;
    v->last_step_dev_max = v->step_dev_max;
    v->last_step_host_min = v->step_host_min;
    v->last_step_host_max = v->step_host_max;
    v->stable_dev = vmem_device_bytes(v);
    v->stable_host = vmem_host_bytes(v);
    v->step_dev_min = v->step_dev_max = v->stable_dev;
    v->step_host_min = v->step_host_max = v->stable_host;
    vmem_unlock(&v->lock);
    if (moves.to_host || moves.to_device || mst < 0)
        vmem_log(v, mst >= 0 ? VMEM_LOG_INFO : VMEM_LOG_WARN,
                 "step end: %zu bytes moved to host, %zu back to device%s%s", moves.to_host,
                 moves.to_device, mst >= 0 ? "" : ": ", mst >= 0 ? "" : vmem_strerror(mst));
    vmem_status_t st = VMEM_OK;
    if (v->stats_file)
        st = stats_write_file(v, v->stats_file);
    if (control_pace(v, dur) != 0)
        return VMEM_ERR_BUSY; /* vmem_destroy ended a perf-0 suspension: v is gone */
    vmem_lock(&v->lock);
    v->step_start = vmem_now();
    vmem_unlock(&v->lock);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Pointer information, check, faults                                       */
/* ------------------------------------------------------------------------ */

vmem_status_t vmem_ptr_info(vmem_t *v, const void *ptr, vmem_ptr_info_t *info)
{
    if (!v || !info)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    int arena;
    const bfc_chunk_t *c = live_chunk(v, ptr, &arena);
    vmem_location_t loc = arena ? VMEM_LOC_HOST : VMEM_LOC_DEVICE;
    if (!c && v->tags && (c = tags_find_live(v, ptr)) != NULL)
        loc = VMEM_LOC_DEVICE;
    const defer_entry_t *e = c ? deferred_find(&v->deferred, c->addr) : NULL;
    if (e && e->freed)
        c = NULL; /* freed, waiting for other streams' work (deferred.h) */
    if (c && c->host_bytes)
        loc = VMEM_LOC_HOST; /* spilled in place (vmm, sim-vmm) */
    if (c) {
        info->location = loc;
        info->requested = c->requested;
        info->size = c->size;
        info->base = (void *)c->addr;
    }
    vmem_unlock(&v->lock);
    return c ? VMEM_OK : VMEM_ERR_FOREIGN_PTR;
}

vmem_status_t vmem_check(vmem_t *v)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    char why[256];
    vmem_lock(&v->lock);
    vmem_status_t st = bfc_check(&v->dev, why, sizeof why);
    const char *which = "device";
    if (st == VMEM_OK) {
        st = bfc_check(&v->host, why, sizeof why);
        which = "host";
    }
    if (st == VMEM_OK) {
        st = tags_check(v, why, sizeof why);
        which = "tagged";
    }
    if (st == VMEM_OK && v->dev.limit > v->start_cap) {
        snprintf(why, sizeof why, "limit %zu above start cap %zu", v->dev.limit, v->start_cap);
        which = "device";
        st = VMEM_ERR_INVALID;
    }
    vmem_unlock(&v->lock);
    if (st != VMEM_OK)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_check: %s arena: %s", which, why);
    return st;
}

vmem_status_t vmem_inject_faults(vmem_t *v, vmem_arena_kind_t arena, uint64_t nth, double rate,
                                 uint64_t seed)
{
    if (!v || (arena != VMEM_ARENA_DEVICE && arena != VMEM_ARENA_HOST) || !(rate >= 0 && rate <= 1))
        return VMEM_INVALID_ARG(v);
    backend_t *b = arena == VMEM_ARENA_DEVICE ? v->dev_backend : v->host_backend;
    if (!(b->flags & BACKEND_F_SIMULATED))
        return VMEM_ERR_UNSUPPORTED;
    vmem_lock(&v->lock);
    backend_set_faults(b, nth, rate, seed);
    vmem_unlock(&v->lock);
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* The vtable allocator                                                     */
/* ------------------------------------------------------------------------ */

static void *vt_alloc(void *ctx, size_t size, void *stream)
{
    return vmem_alloc_stream(ctx, size, stream);
}
static int vt_free(void *ctx, void *ptr, void *stream) { return vmem_free_stream(ctx, ptr, stream); }
static int vt_set_limit(void *ctx, size_t bytes, size_t *applied)
{
    return vmem_set_limit(ctx, bytes, applied);
}
static size_t vt_get_limit(void *ctx)
{
    size_t l = 0;
    vmem_get_limit(ctx, &l);
    return l;
}
static int vt_step_end(void *ctx) { return vmem_step_end(ctx); }
static int vt_stats_json(void *ctx, char *buf, size_t len, size_t *needed)
{
    return vmem_stats_json(ctx, buf, len, needed);
}

vmem_status_t vmem_get_allocator(vmem_t *v, vmem_allocator_t *out)
{
    if (!v || !out)
        return VMEM_INVALID_ARG(v);
    out->ctx = v;
    out->alloc = vt_alloc;
    out->free = vt_free;
    out->set_limit = vt_set_limit;
    out->get_limit = vt_get_limit;
    out->step_end = vt_step_end;
    out->stats_json = vt_stats_json;
    return VMEM_OK;
}
