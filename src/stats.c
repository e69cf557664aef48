/* Statistics: the versioned struct, its JSON rendering and the file. */
#include <errno.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef VMEM_HAVE_CUDA
#include "cuda_driver.h"
#endif
#include "safefile.h"
#include "vmem_internal.h"

vmem_placement_t placement_in_force(const vmem_t *v)
{
    static const vmem_placement_t of_rule[PLACE_NRULES] = {
        [PLACE_RULE_FARTHEST] = VMEM_PLACEMENT_FARTHEST,
        [PLACE_RULE_LARGEST] = VMEM_PLACEMENT_LARGEST,
        [PLACE_RULE_SWAP] = VMEM_PLACEMENT_SWAP};
    if (!v->place.plans)
        return VMEM_PLACEMENT_NAIVE;
    return v->place.rule >= 0 && v->place.rule < PLACE_NRULES ? of_rule[v->place.rule]
                                                              : VMEM_PLACEMENT_FARTHEST;
}

vmem_status_t vmem_watermark(vmem_t *v, size_t *in_use, size_t *max_since, size_t *limit)
{
    if (!v)
        return VMEM_INVALID_ARG(v);
    vmem_lock(&v->lock);
    size_t d = vmem_device_bytes(v) + vmem_host_bytes(v);
    if (in_use)
        *in_use = d;
    if (max_since)
        *max_since = v->wm_all > d ? v->wm_all : d;
    if (limit)
        *limit = v->dev.limit;
    v->wm_all = d;
    vmem_unlock(&v->lock);
    return VMEM_OK;
}

vmem_status_t vmem_get_stats(vmem_t *v, vmem_stats_t *out)
{
    if (!v || !out || out->size < offsetof(vmem_stats_t, limit))
        return VMEM_INVALID_ARG(v);
    vmem_stats_t s;
    memset(&s, 0, sizeof s);
    vmem_lock(&v->lock);
    s.size = out->size < sizeof s ? out->size : (uint32_t)sizeof s;
    s.version = VMEM_STATS_VERSION;
    s.backend = v->dev_backend->name;
    s.limit = v->dev.limit;
    s.pending_limit = v->dev.pending ? v->dev.limit : 0;
    s.shrink_pending = v->dev.pending != 0;
    s.start_cap = v->start_cap;
    s.device_held = v->dev.held;
    /* vmm, sim-vmm: blocks and memory spilled in place count as host. */
    s.device_in_use = vmem_device_bytes(v);
    s.device_requested = v->dev.requested - v->dev.host_requested - v->deferred.dev_requested;
    s.device_peak_held = v->dev.peak_held;
    s.device_peak_in_use = v->dev.peak_in_use;
    s.device_regions = v->dev.nregions;
    s.host_limit = v->host.limit;
    s.host_held = v->host.held + v->dev.held_host;
    s.host_in_use = vmem_host_bytes(v);
    s.host_peak_held = v->host.peak_held + v->dev.peak_held_host;
    s.host_peak_in_use = v->host.peak_in_use + v->dev.peak_host_in_use;
    s.allocs = v->allocs;
    s.frees = v->frees;
    s.spills = v->spills;
    s.spilled_bytes = v->spilled_bytes;
    s.failures = v->failures;
    s.bad_frees = v->bad_frees;
    s.device_region_allocs = v->dev.region_allocs;
    s.device_region_frees = v->dev.region_frees;
    s.steps = v->steps;
    s.last_step_seconds = v->last_step_seconds;
    s.step_device_min = v->last_step_dev_min;
    s.step_device_max = v->last_step_dev_max;
    s.step_host_min = v->last_step_host_min;
    s.step_host_max = v->last_step_host_max;
    s.host_fallback = v->host_fallback;
    s.perf = atomic_load(&v->perf);
    s.placement = placement_in_force(v);
    s.plan_swap_bytes = v->place.stats.last_plan_swap_bytes;
    s.swap_out_bytes = v->place.stats.swap_out_bytes;
    s.swap_in_bytes = v->place.stats.swap_in_bytes;
    s.swap_points = v->place.stats.swap_points;
    s.swap_skipped = v->place.stats.swap_skipped;
    s.cur_step_device_max = v->step_dev_max;
    s.cur_step_host_max = v->step_host_max;
    s.naive_chosen_steps = v->place.stats.naive_chosen;
#ifdef VMEM_HAVE_CUDA
    backend_vmm_counters_t vc;
    if (backend_vmm_counters(v->dev_backend, &vc) == 0) {
        s.device_syncs = vc.syncs;
        s.device_sync_seconds = vc.sync_seconds;
    }
#endif
    s.placed_host_allocs = v->place.stats.planned_host_allocs;
    s.placed_host_bytes = v->place.stats.planned_host_bytes;
    s.fallback_allocs = v->place.stats.fallback_allocs;
    s.fallback_bytes = v->place.stats.fallback_bytes;
    s.moved_to_host_bytes = v->dev.moved_to_host;
    s.moved_to_device_bytes = v->dev.moved_to_device;
    s.planned_steps = v->place.stats.planned_steps;
    s.diverged_steps = v->place.stats.diverged_steps;
    s.plan_host_bytes = v->place.stats.last_plan_host_bytes;
    s.host_freed_bytes = v->place.stats.host_freed_bytes;
    s.host_life_events = v->place.stats.host_freed_bytes
                             ? v->place.stats.host_life_events / (double)v->place.stats.host_freed_bytes
                             : 0;
    s.host_life_seconds = v->place.stats.host_freed_bytes
                              ? v->place.stats.host_life_seconds / (double)v->place.stats.host_freed_bytes
                              : 0;
    if (v->tags) { /* tagged blocks (tags.c) count with the rest */
        tags_totals_t t;
        tags_totals(v, &t);
        s.device_held += t.device_held;
        /* Blocks of tags paused with discard lie nowhere: not device bytes in
         * use (device_unused = held - in_use must not wrap). */
        s.device_in_use += t.in_use - t.host_in_use - t.parked_in_use;
        s.device_requested += t.requested - t.host_requested - t.parked_requested;
        s.device_peak_held += t.peak_held;
        s.device_peak_in_use += t.peak_in_use;
        s.device_regions += t.regions;
        s.host_held += t.held_host;
        s.host_in_use += t.host_in_use;
        s.host_peak_held += t.peak_held_host;
        s.host_peak_in_use += t.peak_host_in_use;
    }
    s.device_unused = s.device_held - s.device_in_use;
    double now = vmem_now();
    if (v->unused_t0 == 0)
        v->unused_t0 = v->unused_t = now;
    v->unused_integral += (double)v->unused_last * (now - v->unused_t);
    v->unused_t = now;
    v->unused_last = s.device_unused;
    s.device_unused_byte_seconds = v->unused_integral;
    s.device_unused_mean = now > v->unused_t0 ? v->unused_integral / (now - v->unused_t0) : 0.0;
    s.device_trims = v->dev.trims;
    s.device_remaps = v->dev.remaps;
    s.device_remapped = v->dev.remapped;
    s.last_step_excluded_seconds = v->last_step_excluded;
    s.device_trimmed = v->dev.trimmed;
    s.limit_source = v->limit_source;
    s.device = v->cfg.device;
    vmem_unlock(&v->lock);
    memcpy(out, &s, s.size);
    return VMEM_OK;
}

typedef struct jbuf {
    char *buf;
    size_t len, pos;
} jbuf_t;

static void jvprintf(jbuf_t *j, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void jvprintf(jbuf_t *j, const char *fmt, va_list ap)
{
    int n = vsnprintf(j->pos < j->len ? j->buf + j->pos : NULL, j->pos < j->len ? j->len - j->pos : 0,
                      fmt, ap);
    if (n > 0)
        j->pos += (size_t)n;
}

static void jprintf(jbuf_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jprintf(jbuf_t *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jvprintf(j, fmt, ap);
    va_end(ap);
}

static void jprintf_ctx(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jprintf_ctx(void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jvprintf(ctx, fmt, ap);
    va_end(ap);
}

vmem_status_t vmem_stats_json(vmem_t *v, char *buf, size_t len, size_t *needed)
{
    if (!v || (!buf && len))
        return VMEM_INVALID_ARG(v);
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    vmem_lock(&v->lock);
    size_t stable_dev = v->stable_dev, stable_host = v->stable_host;
    const char *reason = v->swap_reason;
    uint64_t remap_misses = v->dev.remap_misses, remap_refused = v->dev.remap_refused;
    uint64_t idle_steps = v->place.stats.idle_steps;
    const deferred_t *d = &v->deferred;
    unsigned long long df_frees = d->deferred, df_bytes = d->deferred_bytes,
                       df_waiting = d->dev_bytes + d->host_bytes,
                       df_stream_waits = d->stream_waits, df_cpu_waits = d->cpu_waits;
    double map_s = 0, unmap_s = 0, remap_s = 0, split_s = 0; /* vmm: the CPU in driver mappings */
    unsigned long long huge_splits = 0, big_splits = 0;
#ifdef VMEM_HAVE_CUDA
    backend_vmm_counters_t vc;
    if (backend_vmm_counters(v->dev_backend, &vc) == 0) {
        map_s = vc.map_seconds;
        unmap_s = vc.unmap_seconds;
        remap_s = vc.remap_seconds;
        split_s = vc.split_seconds;
        huge_splits = vc.huge_splits;
        big_splits = vc.splits;
    }
#endif
    vmem_unlock(&v->lock);
    control_status_t cs;
    control_get_status(v, &cs);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double frag = s.device_in_use ? (double)s.device_held / (double)s.device_in_use : 0.0;
    jbuf_t j = {buf, len, 0};
    jprintf(&j, "{\"version\":%u,\"backend\":\"%s\"", s.version, s.backend);
    /* AntMan's keys: step min/max memory in use, pool sizes, stable bytes
     * (in use at the last step boundary), why memory spilled, step time (us). */
    jprintf(&j, ",\"deviceMemUsedMax\":%zu,\"deviceMemUsedMin\":%zu", s.step_device_max,
            s.step_device_min);
    jprintf(&j, ",\"deviceMemPoolSize\":%zu,\"deviceMemStable\":%zu", s.device_held, stable_dev);
    jprintf(&j, ",\"hostMemUsedMax\":%zu,\"hostMemUsedMin\":%zu", s.step_host_max, s.step_host_min);
    jprintf(&j, ",\"hostMemPoolSize\":%zu,\"hostMemStable\":%zu", s.host_held, stable_host);
    jprintf(&j, ",\"swapReason\":\"%s\",\"miniBatchDuration\":%llu", reason,
            (unsigned long long)(s.last_step_seconds * 1e6 + 0.5));
    jprintf(&j, ",\"miniBatchExcludedDuration\":%llu",
            (unsigned long long)(s.last_step_excluded_seconds * 1e6 + 0.5));
    jprintf(&j, ",\"limit\":%zu,\"pendingLimit\":%zu,\"shrinkPending\":%s,\"startCap\":%zu",
            s.limit, s.pending_limit, s.shrink_pending ? "true" : "false", s.start_cap);
    jprintf(&j, ",\"limitSource\":\"%s\",\"device\":%d", s.limit_source, s.device);
    jprintf(&j, ",\"deviceHeld\":%zu,\"deviceInUse\":%zu,\"deviceRequested\":%zu", s.device_held,
            s.device_in_use, s.device_requested);
    jprintf(&j, ",\"devicePeakHeld\":%zu,\"devicePeakInUse\":%zu,\"deviceRegions\":%zu",
            s.device_peak_held, s.device_peak_in_use, s.device_regions);
    jprintf(&j, ",\"hostLimit\":%zu,\"hostHeld\":%zu,\"hostInUse\":%zu,\"hostPeakHeld\":%zu",
            s.host_limit, s.host_held, s.host_in_use, s.host_peak_held);
    jprintf(&j, ",\"hostPeakInUse\":%zu", s.host_peak_in_use);
    /* time-dependent: fixed-width numbers, so that a length asked for first still fits */
    jprintf(&j, ",\"deviceUnused\":%zu,\"deviceUnusedByteSeconds\":%.6e,\"deviceUnusedMean\":%.6e",
            s.device_unused, s.device_unused_byte_seconds, s.device_unused_mean);
    jprintf(&j, ",\"deviceTrims\":%llu,\"deviceTrimmedBytes\":%llu",
            (unsigned long long)s.device_trims, (unsigned long long)s.device_trimmed);
    jprintf(&j, ",\"hostFallback\":%s,\"perf\":%d", s.host_fallback ? "true" : "false", s.perf);
    jprintf(&j, ",\"allocs\":%llu,\"frees\":%llu,\"spills\":%llu,\"spilledBytes\":%llu",
            (unsigned long long)s.allocs, (unsigned long long)s.frees,
            (unsigned long long)s.spills, (unsigned long long)s.spilled_bytes);
    jprintf(&j, ",\"failures\":%llu,\"badFrees\":%llu,\"steps\":%llu,\"fragmentation\":%.4f",
            (unsigned long long)s.failures, (unsigned long long)s.bad_frees,
            (unsigned long long)s.steps, frag);
    jprintf(&j, ",\"placement\":\"%s\",\"placedHostAllocs\":%llu,\"placedHostBytes\":%llu",
            placement_name((vmem_placement_t)s.placement),
            (unsigned long long)s.placed_host_allocs, (unsigned long long)s.placed_host_bytes);
    jprintf(&j, ",\"fallbackAllocs\":%llu,\"fallbackBytes\":%llu,\"movedToHostBytes\":%llu",
            (unsigned long long)s.fallback_allocs, (unsigned long long)s.fallback_bytes,
            (unsigned long long)s.moved_to_host_bytes);
    jprintf(&j, ",\"movedToDeviceBytes\":%llu,\"plannedSteps\":%llu,\"divergedSteps\":%llu",
            (unsigned long long)s.moved_to_device_bytes, (unsigned long long)s.planned_steps,
            (unsigned long long)s.diverged_steps);
    jprintf(&j, ",\"naiveChosenSteps\":%llu,\"placementIdleSteps\":%llu",
            (unsigned long long)s.naive_chosen_steps, (unsigned long long)idle_steps);
    jprintf(&j, ",\"deviceSyncs\":%llu,\"deviceSyncSeconds\":%.6f",
            (unsigned long long)s.device_syncs, s.device_sync_seconds);
    jprintf(&j, ",\"deviceRemaps\":%llu,\"deviceRemappedBytes\":%llu",
            (unsigned long long)s.device_remaps, (unsigned long long)s.device_remapped);
    jprintf(&j, ",\"deviceRemapMisses\":%llu,\"deviceRemapRefusals\":%llu",
            (unsigned long long)remap_misses, (unsigned long long)remap_refused);
    jprintf(&j, ",\"deferredFrees\":%llu,\"deferredFreedBytes\":%llu,\"deferredWaitingBytes\":%llu",
            df_frees, df_bytes, df_waiting);
    jprintf(&j, ",\"deferredStreamWaits\":%llu,\"deferredCpuWaits\":%llu", df_stream_waits,
            df_cpu_waits);
    jprintf(&j, ",\"deviceMapSeconds\":%.6f,\"deviceUnmapSeconds\":%.6f,\"deviceRemapSeconds\":%.6f",
            map_s, unmap_s, remap_s);
    jprintf(&j, ",\"deviceHugeSplits\":%llu,\"deviceBigSplits\":%llu,\"deviceSplitSeconds\":%.6f",
            huge_splits, big_splits, split_s);
    jprintf(&j, ",\"planHostBytes\":%llu,\"hostFreedBytes\":%llu,\"hostLifeEvents\":%.1f",
            (unsigned long long)s.plan_host_bytes, (unsigned long long)s.host_freed_bytes,
            s.host_life_events);
    jprintf(&j, ",\"hostLifeSeconds\":%.6f", s.host_life_seconds);
    jprintf(&j, ",\"planSwapBytes\":%llu,\"swapOutBytes\":%llu,\"swapInBytes\":%llu",
            (unsigned long long)s.plan_swap_bytes, (unsigned long long)s.swap_out_bytes,
            (unsigned long long)s.swap_in_bytes);
    jprintf(&j, ",\"swapPoints\":%llu,\"swapSkipped\":%llu", (unsigned long long)s.swap_points,
            (unsigned long long)s.swap_skipped);
    /* where the numbers come from: the process, the time (Unix seconds), and
     * whether the control file is being followed */
    jprintf(&j, ",\"pid\":%ld,\"time\":%.3f", (long)getpid(),
            (double)now.tv_sec + (double)now.tv_nsec * 1e-9);
    jprintf(&j, ",\"controlFile\":\"%s\",\"controlPending\":%s,\"controlErrors\":%llu",
            !cs.active ? "none" : cs.in_error ? "error" : "ok", cs.pending ? "true" : "false",
            (unsigned long long)cs.errors);
    tags_json(v, jprintf_ctx, &j); /* one entry per tag other than 0 */
    jprintf(&j, "}");
    if (needed)
        *needed = j.pos;
    if (j.pos >= len)
        return VMEM_ERR_SIZE;
    return VMEM_OK;
}

vmem_status_t stats_write_file(vmem_t *v, const char *path)
{
    char small[4096], *buf = small;
    size_t need = 0;
    if (vmem_stats_json(v, buf, sizeof small, &need) != VMEM_OK) {
        /* many tags: a buffer of the size needed (stats may grow meanwhile) */
        buf = malloc(need + 1024);
        if (!buf || vmem_stats_json(v, buf, need + 1024, &need) != VMEM_OK) {
            free(buf);
            return VMEM_ERR_SIZE;
        }
    }
    /* Only a regular file (or nothing) is replaced: rename would put a
     * regular file in place of a device node or a FIFO.  A symlink is
     * written through (its target replaced), so the link stays.  Readers
     * only ever see a complete file, since rename replaces it in one step;
     * each write has a temporary file of its own (O_EXCL, never through a
     * link), so instances writing the same path never share one. */
    char why[128] = "";
    char *target = safefile_replace_target(path, why, sizeof why);
    char *tmp = NULL;
    int ok = 0, e = 0;
    if (target) {
        int fd = safefile_temp(target, &tmp);
        if (fd >= 0) {
            buf[need] = '\n';
            ok = fchmod(fd, 0644) == 0 && safefile_write_all(fd, buf, need + 1);
            ok = close(fd) == 0 && ok;
            ok = ok && rename(tmp, target) == 0;
        }
        e = errno;
        if (!ok && tmp)
            unlink(tmp);
        if (!ok)
            snprintf(why, sizeof why, "cannot write: %s", strerror(e));
    }
    free(tmp);
    free(target);
    if (buf != small)
        free(buf);
    /* one error per run of failures, not one per step */
    int was = atomic_exchange(&v->stats_failing, !ok);
    if (!ok && !was)
        vmem_log(v, VMEM_LOG_ERROR, "statistics file %s: %s", path, why);
    else if (ok && was)
        vmem_log(v, VMEM_LOG_WARN, "statistics file %s: written again", path);
    return ok ? VMEM_OK : VMEM_ERR_IO;
}
