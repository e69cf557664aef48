/* Framework adapters: one libvmem instance per CUDA device, created on first
 * use from the VMEM_* environment, behind the entry points that PyTorch's
 * CUDAPluggableAllocator and CuPy's CFunctionAllocator call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "vmem_internal.h"

#define ADAPTER_MAX_DEVICES 64

/*
 * One slot per device ordinal.
 * Invariants: inst is written once, under slots_lock, and never cleared (the
 * framework may free blocks until the process exits); tried is set under
 * slots_lock after the one creation attempt; status is that attempt's result
 * (VMEM_OK iff inst != NULL).
 */
typedef struct adapter_slot {
    _Atomic(vmem_t *) inst;
    int tried;
    vmem_status_t status;
    gpool_t graph; /* PyTorch's blocks of CUDA graph captures (capture.h) */
} adapter_slot_t;

static adapter_slot_t slots[ADAPTER_MAX_DEVICES];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

/* The statistics file of device d: "%d" in the configured name is replaced
 * by d; without one, devices other than 0 get ".d" appended so that
 * instances never overwrite each other's file. */
static char *stats_path_for(const char *path, int device)
{
    size_t n = strlen(path) + 24;
    char *out = malloc(n);
    if (!out)
        return NULL;
    const char *pct = strstr(path, "%d");
    if (pct)
        snprintf(out, n, "%.*s%d%s", (int)(pct - path), path, device, pct + 2);
    else if (device != 0)
        snprintf(out, n, "%s.%d", path, device);
    else
        snprintf(out, n, "%s", path);
    return out;
}

static vmem_status_t slot_create(int device, vmem_t **out)
{
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    vmem_status_t st = vmem_config_from_env(&cfg);
    if (st != VMEM_OK)
        return st;
    cfg.device = device;
    char *stats = NULL;
    if (cfg.stats_file) {
        stats = stats_path_for(cfg.stats_file, device);
        if (!stats)
            return VMEM_ERR_NOMEM;
        cfg.stats_file = stats;
    }
    st = vmem_create(&cfg, out); /* copies the strings */
    free(stats);
    return st;
}

vmem_status_t vmem_instance_ex(int device, vmem_t **out)
{
    if (!out || device < 0 || device >= ADAPTER_MAX_DEVICES) {
        if (out)
            vmem_log(NULL, VMEM_LOG_ERROR, "adapter: device ordinal %d outside 0..%d", device,
                     ADAPTER_MAX_DEVICES - 1);
        else
            vmem_log(NULL, VMEM_LOG_ERROR, "vmem_instance_ex: out is NULL");
        return VMEM_ERR_INVALID;
    }
    adapter_slot_t *s = &slots[device];
    vmem_t *v = atomic_load_explicit(&s->inst, memory_order_acquire);
    if (v) {
        *out = v;
        return VMEM_OK;
    }
    pthread_mutex_lock(&slots_lock);
    if (!s->tried) {
        vmem_t *nv = NULL;
        s->status = slot_create(device, &nv);
        s->tried = 1;
        if (s->status == VMEM_OK)
            gpool_init(&s->graph);
        if (s->status == VMEM_OK)
            atomic_store_explicit(&s->inst, nv, memory_order_release);
        else
            vmem_log(NULL, VMEM_LOG_ERROR,
                     "adapter: no libvmem instance for device %d: %s (not retried)", device,
                     vmem_strerror(s->status));
    }
    vmem_status_t st = s->status;
    v = atomic_load_explicit(&s->inst, memory_order_acquire);
    pthread_mutex_unlock(&slots_lock);
    if (st == VMEM_OK)
        *out = v;
    return st;
}

vmem_t *vmem_instance(int device)
{
    vmem_t *v = NULL;
    return vmem_instance_ex(device, &v) == VMEM_OK ? v : NULL;
}

vmem_t *vmem_instance_peek(int device)
{
    if (device < 0 || device >= ADAPTER_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&slots[device].inst, memory_order_acquire);
}

vmem_status_t vmem_instances_step_end(void)
{
    vmem_status_t first = VMEM_OK;
    for (int d = 0; d < ADAPTER_MAX_DEVICES; d++) {
        vmem_t *v = vmem_instance_peek(d);
        if (!v)
            continue;
        vmem_status_t st = vmem_step_end(v);
        if (st != VMEM_OK && first == VMEM_OK)
            first = st;
    }
    return first;
}

vmem_status_t vmem_instances_step_exclude(double seconds)
{
    if (!vmem_excludable_seconds(seconds))
        return VMEM_INVALID_ARG(NULL);
    for (int d = 0; d < ADAPTER_MAX_DEVICES; d++) {
        vmem_t *v = vmem_instance_peek(d);
        if (v)
            vmem_step_exclude(v, seconds);
    }
    return VMEM_OK;
}

/* ------------------------------------------------------------------------ */
/* PyTorch: torch.cuda.memory.CUDAPluggableAllocator                        */
/* ------------------------------------------------------------------------ */

void *vmem_torch_malloc(size_t size, int device, void *stream)
{
    if (size == 0)
        return NULL; /* PyTorch keeps a NULL data pointer for empty tensors */
    vmem_t *v = vmem_instance(device);
    if (!v)
        return NULL;
    capture_scope_t cs;
    void *p = NULL;
    if (capture_enter(stream, &cs))
        p = gpool_take(&slots[device].graph, cs.id, vmem_get_tag(v), size);
    if (!p) {
        p = vmem_alloc_stream(v, size, stream);
        if (p && cs.active && gpool_add(&slots[device].graph, p, size, cs.id, vmem_get_tag(v)))
            vmem_log(v, VMEM_LOG_WARN, "vmem_torch_malloc: no memory to record a block of a "
                                       "CUDA graph capture; it will be reused when freed");
    }
    capture_leave(&cs);
    if (!p)
        vmem_log(v, VMEM_LOG_ERROR,
                 "vmem_torch_malloc(%zu, device %d): %s; PyTorch does not check for NULL from a "
                 "pluggable allocator, so the tensor will be unusable",
                 size, device, vmem_strerror(vmem_last_status()));
    return p;
}

void vmem_torch_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size; /* the arena knows the block's size */
    if (!ptr)
        return;
    vmem_t *v = vmem_instance_peek(device);
    if (!v) {
        vmem_log(NULL, VMEM_LOG_ERROR, "vmem_torch_free(%p, device %d): no instance for the device",
                 ptr, device);
        return;
    }
    /* A block of a graph capture stays allocated: the graph replays into it. */
    int g = gpool_free(&slots[device].graph, ptr);
    if (g > 0)
        return;
    if (g < 0) {
        vmem_log(v, VMEM_LOG_ERROR, "vmem_torch_free(%p): freed twice (a CUDA graph's block)", ptr);
        return;
    }
    capture_scope_t cs;
    capture_enter(stream, &cs);
    vmem_free_stream(v, ptr, stream);
    capture_leave(&cs);
}

static void graph_give(void *ctx, void *p) { vmem_free((vmem_t *)ctx, p); }

size_t vmem_torch_graph_release(int device)
{
    vmem_t *v = vmem_instance_peek(device);
    if (!v)
        return 0;
    return gpool_release(&slots[device].graph, graph_give, v);
}

size_t vmem_torch_graph_held(int device, size_t *freed)
{
    size_t live = 0, fr = 0;
    if (vmem_instance_peek(device))
        gpool_bytes(&slots[device].graph, &live, &fr);
    if (freed)
        *freed = fr;
    return live + fr;
}

/* ------------------------------------------------------------------------ */
/* CuPy: cupy.cuda.memory.CFunctionAllocator                                */
/* ------------------------------------------------------------------------ */

/* CuPy passes no stream: blocks are tagged with the legacy default stream
 * (see docs/embedding.md for programs that use several CuPy streams). */
void *vmem_cupy_malloc(void *param, size_t size, int device_id)
{
    if (size == 0)
        return NULL;
    vmem_t *v = param ? (vmem_t *)param : vmem_instance(device_id);
    if (!v)
        return NULL;
    void *p = vmem_alloc(v, size);
    if (!p)
        vmem_log(v, VMEM_LOG_ERROR, "vmem_cupy_malloc(%zu, device %d): %s", size, device_id,
                 vmem_strerror(vmem_last_status()));
    return p;
}

void vmem_cupy_free(void *param, void *ptr, int device_id)
{
    if (!ptr)
        return;
    vmem_t *v = param ? (vmem_t *)param : vmem_instance_peek(device_id);
    if (!v) {
        vmem_log(NULL, VMEM_LOG_ERROR, "vmem_cupy_free(%p, device %d): no instance for the device",
                 ptr, device_id);
        return;
    }
    vmem_free(v, ptr);
}
