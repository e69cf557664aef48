// torch-replay: replays traces through PyTorch's CUDA caching allocator
// (c10::cuda::CUDACachingAllocator::get()->raw_alloc / raw_delete), by the
// same method as vmem-replay (replay.h), for the GPU comparison.
//
//   torch-replay [--repeat N] TRACE.txt.gz ...
//
// The allocator is configured as usual by PYTORCH_CUDA_ALLOC_CONF (e.g.
// expandable_segments:True).  Peak held is the allocator's own statistic:
// DeviceStats.reserved_bytes[AGGREGATE].peak, reset before each trace.
//
// Built on the GPU machine by bench/compare-gpu.sh against the installed
// torch (it is not part of the meson build).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "replay.h"

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

} // namespace

int main(int argc, char **argv)
{
    static TorchTarget t;
    const char *conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    bool expandable = conf && std::string(conf).find("expandable_segments:True") != std::string::npos;
    t.name = expandable ? "torch-expandable" : "torch";
    replay_target_t target = {};
    target.allocator = t.name.c_str();
    target.peak_source = "c10 DeviceStats reserved_bytes[AGGREGATE].peak";
    target.open = torch_open;
    target.close = torch_close;
    target.peak_reserved = torch_peak;
    target.observe = nullptr;
    target.ops.ctx = &t;
    target.ops.alloc = torch_alloc;
    target.ops.free = torch_free;
    return replay_cli(argc, argv, &target);
}
