// torch-replay: replays traces through PyTorch's CUDA caching allocator
// (c10::cuda::CUDACachingAllocator::get()->raw_alloc / raw_delete), by the
// same method as vmem-replay (replay.h), for the GPU comparison.
//
//   torch-replay [--vmem LIBVMEM.so [--vmem-backend vmm|cuda|sim|sim-vmm]] [--repeat N] TRACE.txt.gz ...
//
// With --vmem, libvmem (dlopen'ed from that path, so that this program keeps
// PyTorch's own libraries) replays each trace in the same process, as
// vmem-replay does it (a fresh instance per trace, no limit, vmem_step_end at
// the trace's step boundaries, steps.h), and the two allocators' timed
// passes alternate (replay_cli_paired): on the lent GPU machines a replay
// process runs in one of two speed modes for every allocator, so a ratio
// read within one process does not mix them.  libvmem's line comes second,
// its paired_ratio is its ns/op over PyTorch's.
//
// The allocator is configured as usual by PYTORCH_CUDA_ALLOC_CONF (e.g.
// expandable_segments:True).  Peak held is the allocator's own statistic:
// DeviceStats.reserved_bytes[AGGREGATE].peak, reset before each trace.
//
// Built on the GPU machine by bench/compare-gpu.sh against the installed
// torch (it is not part of the meson build).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <vmem.h>

#include "replay.h"
#include "steps.h"

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

struct TorchTarget {
    int device = 0;
    bool initialised = false;
    std::string name;
};

void *torch_alloc(void *, size_t size)
{
    try {
        return alloc::get()->raw_alloc(size);
    } catch (const std::exception &) { // c10::OutOfMemoryError and friends
        return nullptr;
    }
}

void torch_free(void *, void *ptr)
{
    try {
        alloc::get()->raw_delete(ptr);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "torch-replay: raw_delete: %s\n", e.what());
    }
}

int torch_open(void *self, char *err, size_t len)
{
    auto *t = static_cast<TorchTarget *>(self);
    try {
        if (!t->initialised) {
            int n = c10::cuda::device_count();
            if (n <= t->device) {
                std::snprintf(err, len, "no CUDA device %d (%d found)", t->device, n);
                return -1;
            }
            c10::cuda::set_device(static_cast<c10::DeviceIndex>(t->device));
            alloc::get()->init(n);
            t->initialised = true;
        }
        alloc::get()->emptyCache();
        alloc::get()->resetPeakStats(static_cast<c10::DeviceIndex>(t->device));
    } catch (const std::exception &e) {
        std::snprintf(err, len, "%s", e.what());
        return -1;
    }
    return 0;
}

void torch_close(void *)
{
    try {
        alloc::get()->emptyCache();
    } catch (const std::exception &) {
    }
}

uint64_t torch_peak(void *self)
{
    auto *t = static_cast<TorchTarget *>(self);
    try {
        auto stats = alloc::get()->getDeviceStats(static_cast<c10::DeviceIndex>(t->device));
        // Index 0 is StatType::AGGREGATE (small and large pools together).
        return static_cast<uint64_t>(stats.reserved_bytes[0].peak);
    } catch (const std::exception &) {
        return 0;
    }
}

// libvmem in the same process, reached through dlopen.
struct VmemTarget {
    void *lib = nullptr;
    vmem_backend_kind_t backend = VMEM_BACKEND_VMM;
    std::string backend_name = "vmm";
    std::string name;
    vmem_t *v = nullptr;
    size_t *steps = nullptr;
    void (*config_init)(vmem_config_t *) = nullptr;
    vmem_status_t (*create)(const vmem_config_t *, vmem_t **) = nullptr;
    void (*destroy)(vmem_t *) = nullptr;
    void *(*alloc)(vmem_t *, size_t) = nullptr;
    vmem_status_t (*release)(vmem_t *, void *) = nullptr;
    vmem_status_t (*step_end)(vmem_t *) = nullptr;
    vmem_status_t (*get_stats)(vmem_t *, vmem_stats_t *) = nullptr;
    const char *(*strerror_fn)(vmem_status_t) = nullptr;
};

template <typename F> bool sym(void *lib, const char *name, F *out)
{
    *out = reinterpret_cast<F>(dlsym(lib, name));
    return *out != nullptr;
}

// Loads libvmem from path (and the cJSON it needs from beside it or from
// carry-cuda/, where scripts/gpu-run.sh prepare puts it); 0 on success.
int vmem_load(VmemTarget *t, const char *path)
{
    std::string dir(path);
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    for (const char *rel : {"../carry-cuda/libcjson.so.1", "libcjson.so.1"}) {
        std::string p = dir + rel;
        if (dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL))
            break;
    }
    t->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!t->lib) { // the CUDA runtime beside it, if PyTorch's was not loaded
        std::string rt = dir + "../carry-cuda/libcudart.so.13";
        if (dlopen(rt.c_str(), RTLD_NOW | RTLD_GLOBAL))
            t->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!t->lib) {
        std::fprintf(stderr, "torch-replay: dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    if (!sym(t->lib, "vmem_config_init", &t->config_init) || !sym(t->lib, "vmem_create", &t->create) ||
        !sym(t->lib, "vmem_destroy", &t->destroy) || !sym(t->lib, "vmem_alloc", &t->alloc) ||
        !sym(t->lib, "vmem_free", &t->release) || !sym(t->lib, "vmem_step_end", &t->step_end) ||
        !sym(t->lib, "vmem_get_stats", &t->get_stats) ||
        !sym(t->lib, "vmem_strerror", &t->strerror_fn)) {
        std::fprintf(stderr, "torch-replay: %s: a libvmem symbol is missing\n", path);
        return -1;
    }
    return 0;
}

void *vm_alloc(void *self, size_t size)
{
    auto *t = static_cast<VmemTarget *>(self);
    return t->alloc(t->v, size);
}

void vm_free(void *self, void *p)
{
    auto *t = static_cast<VmemTarget *>(self);
    t->release(t->v, p);
}

void vm_step(void *self)
{
    auto *t = static_cast<VmemTarget *>(self);
    t->step_end(t->v);
}

int vm_open(void *self, char *err, size_t len)
{
    auto *t = static_cast<VmemTarget *>(self);
    vmem_config_t cfg;
    t->config_init(&cfg);
    cfg.backend = t->backend;
    vmem_status_t st = t->create(&cfg, &t->v);
    if (st != VMEM_OK) {
        std::snprintf(err, len, "vmem_create: %s", t->strerror_fn(st));
        t->v = nullptr;
        return -1;
    }
    return 0;
}

int vm_trace_begin(void *self, const trace_t *tr, replay_ops_t *ops, char *err, size_t len)
{
    auto *t = static_cast<VmemTarget *>(self);
    std::free(t->steps);
    t->steps = nullptr;
    steps_source_t src;
    size_t n = trace_steps(tr, &t->steps, &src);
    if (n == static_cast<size_t>(-1)) {
        std::snprintf(err, len, "out of memory");
        return -1;
    }
    ops->step = vm_step;
    ops->steps = t->steps;
    ops->nsteps = n;
    return 0;
}

void vm_close(void *self)
{
    auto *t = static_cast<VmemTarget *>(self);
    if (t->v)
        t->destroy(t->v);
    t->v = nullptr;
}

uint64_t vm_peak(void *self)
{
    auto *t = static_cast<VmemTarget *>(self);
    vmem_stats_t s;
    std::memset(&s, 0, sizeof s);
    s.size = sizeof s;
    if (!t->v || t->get_stats(t->v, &s) != VMEM_OK)
        return 0;
    return s.device_peak_held;
}

replay_target_t make_target(const char *name, const char *peak_source,
                            int (*open)(void *, char *, size_t), void (*close)(void *),
                            uint64_t (*peak)(void *), void *ctx, void *(*alloc)(void *, size_t),
                            void (*release)(void *, void *))
{
    replay_target_t r = {};
    r.allocator = name;
    r.peak_source = peak_source;
    r.open = open;
    r.close = close;
    r.peak_reserved = peak;
    r.ops.ctx = ctx;
    r.ops.alloc = alloc;
    r.ops.free = release;
    return r;
}

} // namespace

int main(int argc, char **argv)
{
    static TorchTarget t;
    const char *conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    bool expandable = conf && std::string(conf).find("expandable_segments:True") != std::string::npos;
    t.name = expandable ? "torch-expandable" : "torch";
    replay_target_t target = make_target(t.name.c_str(), "c10 DeviceStats reserved_bytes[AGGREGATE].peak",
                                         torch_open, torch_close, torch_peak, &t, torch_alloc,
                                         torch_free);

    // --vmem LIB [--vmem-backend vmm|cuda] come first; the rest goes to replay_cli.
    static VmemTarget vt;
    const char *lib = nullptr;
    int used = 0;
    while (used + 2 < argc) {
        if (std::strcmp(argv[used + 1], "--vmem") == 0) {
            lib = argv[used + 2];
        } else if (std::strcmp(argv[used + 1], "--vmem-backend") == 0) {
            std::string b = argv[used + 2];
            vt.backend_name = b;
            if (b == "vmm")
                vt.backend = VMEM_BACKEND_VMM;
            else if (b == "cuda")
                vt.backend = VMEM_BACKEND_CUDA;
            else if (b == "sim") // checks without a GPU
                vt.backend = VMEM_BACKEND_SIM;
            else if (b == "sim-vmm")
                vt.backend = VMEM_BACKEND_SIM_VMM;
            else {
                std::fprintf(stderr, "torch-replay: --vmem-backend vmm, cuda, sim or sim-vmm\n");
                return 2;
            }
        } else {
            break;
        }
        used += 2;
    }
    argv[used] = argv[0];
    if (!lib)
        return replay_cli(argc - used, argv + used, &target);
    if (vmem_load(&vt, lib) != 0)
        return 1;
    vt.name = "libvmem-" + vt.backend_name;
    replay_target_t paired = make_target(vt.name.c_str(), "libvmem device_peak_held", vm_open,
                                         vm_close, vm_peak, &vt, vm_alloc, vm_free);
    paired.trace_begin = vm_trace_begin;
    return replay_cli_paired(argc - used, argv + used, &target, &paired);
}
