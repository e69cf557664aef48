/* The CUDA driver API, reached through cudaGetDriverEntryPointByVersion
 * (CUDA 12.5+ runtime), never by linking libcuda.  See cuda_driver.h. */
#include "cuda_driver.h"

#ifdef VMEM_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

/* The driver ABI asked for: every entry point as it was in CUDA 12.0. */
#define CU_DRIVER_ABI 12000

static cu_driver_t driver;
static const cu_driver_t *loaded;
static char why[160];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const struct {
    const char *symbol;
    size_t offset;
} entries[] = {
#define ENTRY(name) {"cu" #name, offsetof(cu_driver_t, name)}
    ENTRY(GetErrorString),
    ENTRY(DeviceGet),
    ENTRY(DeviceGetAttribute),
    ENTRY(DevicePrimaryCtxRetain),
    ENTRY(DevicePrimaryCtxRelease),
    ENTRY(CtxPushCurrent),
    ENTRY(CtxPopCurrent),
    ENTRY(CtxSynchronize),
    ENTRY(MemGetInfo),
    ENTRY(MemAddressReserve),
    ENTRY(MemAddressFree),
    ENTRY(MemCreate),
    ENTRY(MemRelease),
    ENTRY(MemMap),
    ENTRY(MemUnmap),
    ENTRY(MemSetAccess),
    ENTRY(MemGetAllocationGranularity),
    ENTRY(MemcpyAsync),
    ENTRY(StreamCreate),
    ENTRY(StreamDestroy),
    ENTRY(StreamSynchronize),
    ENTRY(EventCreate),
    ENTRY(EventRecord),
    ENTRY(EventSynchronize),
    ENTRY(EventDestroy),
    ENTRY(StreamGetCaptureInfo),
    ENTRY(ThreadExchangeStreamCaptureMode),
    ENTRY(MemRetainAllocationHandle),
    ENTRY(ModuleLoadData),
    ENTRY(ModuleGetFunction),
    ENTRY(LaunchKernel),
#undef ENTRY
};

static void driver_load(void)
{
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *fn = NULL;
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        cudaError_t e = cudaGetDriverEntryPointByVersion(entries[i].symbol, &fn, CU_DRIVER_ABI,
                                                         cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
            if (e != cudaSuccess)
                snprintf(why, sizeof why, "no CUDA driver (%s)", cudaGetErrorString(e));
            else
                snprintf(why, sizeof why, "driver entry point %s %s", entries[i].symbol,
                         q == cudaDriverEntryPointVersionNotSufficent ? "too old" : "missing");
            cudaGetLastError(); /* do not leave the error for the embedder */
            return;
        }
        *(void **)((char *)&driver + entries[i].offset) = fn;
    }
    loaded = &driver;
}

const cu_driver_t *cu_driver(void)
{
    pthread_once(&once, driver_load);
    return loaded;
}

const char *cu_driver_why(void)
{
    pthread_once(&once, driver_load);
    return loaded ? "" : why;
}

const char *cu_error_string(CUresult r)
{
    const char *s = NULL;
    const cu_driver_t *cu = cu_driver();
    if (cu && cu->GetErrorString(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "unknown CUDA driver error";
}
#endif
