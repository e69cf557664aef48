/* Copies made by the SMs (smcopy.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_driver.h"
#include "smcopy.h"
#include "vmem_internal.h"

vmem_status_t smcopy_blocks_from_env(unsigned *blocks)
{
    *blocks = SMCOPY_BLOCKS_DEFAULT;
    const char *e = getenv("VMEM_COPY_BLOCKS");
    if (!e)
        return VMEM_OK;
    uint64_t n = 0;
    if (options_parse_u64(e, &n) != 0 || n < 1 || n > SMCOPY_BLOCKS_MAX) {
        vmem_log(NULL, VMEM_LOG_ERROR,
                 "invalid VMEM_COPY_BLOCKS=\"%s\" (expected a number of blocks, 1 to %u)", e,
                 SMCOPY_BLOCKS_MAX);
        return VMEM_ERR_ENV;
    }
    *blocks = (unsigned)n;
    return VMEM_OK;
}

unsigned smcopy_shape(const void *dst, const void *src, size_t bytes, unsigned blocks,
                      unsigned long long *n16, unsigned long long *tail)
{
    int aligned = (((uintptr_t)dst | (uintptr_t)src) & 15u) == 0;
    *n16 = aligned ? bytes / 16 : 0;
    *tail = bytes - *n16 * 16;
    unsigned long long work = *n16 > *tail ? *n16 : *tail; /* one element per thread and turn */
    unsigned long long need = (work + SMCOPY_THREADS - 1) / SMCOPY_THREADS;
    return (unsigned)(need < blocks ? need : blocks);
}

#ifdef VMEM_HAVE_CUDA
/* The kernel, compiled from this CUDA C (nvcc -ptx -arch=compute_75, CUDA 13.0;
 * the PTX version lowered to 6.3, the first to know sm_75, so that drivers
 * from CUDA 10.0 on compile it; checked with ptxas for sm_75 and sm_90):
 *
 *   extern "C" __global__ void vmem_copy(unsigned char *__restrict__ dst,
 *       const unsigned char *__restrict__ src, unsigned long long n16,
 *       unsigned long long tail)
 *   {
 *       unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
 *       unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
 *       for (unsigned long long j = i; j < n16; j += stride)
 *           ((ulonglong2 *)dst)[j] = ((const ulonglong2 *)src)[j];
 *       for (unsigned long long j = i; j < tail; j += stride)
 *           dst[n16 * 16 + j] = src[n16 * 16 + j];
 *   }
 */
static const char ptx[] =
    ".version 6.3\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry vmem_copy(.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u64 p3)\n"
    "{\n"
    "  .reg .pred %p<5>;\n"
    "  .reg .b16 %rs<2>;\n"
    "  .reg .b32 %r<13>;\n"
    "  .reg .b64 %rd<24>;\n"
    "  ld.param.u64 %rd12, [p0];\n"
    "  ld.param.u64 %rd13, [p1];\n"
    "  ld.param.u64 %rd10, [p2];\n"
    "  ld.param.u64 %rd11, [p3];\n"
    "  cvta.to.global.u64 %rd1, %rd12;\n"
    "  cvta.to.global.u64 %rd2, %rd13;\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mul.wide.u32 %rd14, %r1, %r2;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  cvt.u64.u32 %rd15, %r3;\n"
    "  add.s64 %rd23, %rd14, %rd15;\n"
    "  mov.u32 %r4, %nctaid.x;\n"
    "  mul.wide.u32 %rd4, %r4, %r2;\n"
    "  setp.ge.u64 %p1, %rd23, %rd10;\n"
    "  @%p1 bra WORDS_DONE;\n"
    "  mov.u64 %rd22, %rd23;\n"
    "WORDS:\n"
    "  shl.b64 %rd16, %rd22, 4;\n"
    "  add.s64 %rd17, %rd1, %rd16;\n"
    "  add.s64 %rd18, %rd2, %rd16;\n"
    "  ld.global.nc.v4.u32 {%r5, %r6, %r7, %r8}, [%rd18];\n"
    "  st.global.v4.u32 [%rd17], {%r5, %r6, %r7, %r8};\n"
    "  add.s64 %rd22, %rd22, %rd4;\n"
    "  setp.lt.u64 %p2, %rd22, %rd10;\n"
    "  @%p2 bra WORDS;\n"
    "WORDS_DONE:\n"
    "  setp.ge.u64 %p3, %rd23, %rd11;\n"
    "  @%p3 bra DONE;\n"
    "  shl.b64 %rd7, %rd10, 4;\n"
    "BYTES:\n"
    "  add.s64 %rd19, %rd23, %rd7;\n"
    "  add.s64 %rd20, %rd2, %rd19;\n"
    "  ld.global.nc.u8 %rs1, [%rd20];\n"
    "  add.s64 %rd21, %rd1, %rd19;\n"
    "  st.global.u8 [%rd21], %rs1;\n"
    "  add.s64 %rd23, %rd23, %rd4;\n"
    "  setp.lt.u64 %p4, %rd23, %rd11;\n"
    "  @%p4 bra BYTES;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

#define SMCOPY_DEVICES 64

/* Per device, once tried: st, VMEM_OK with the kernel, else why not. */
static struct {
    int tried;
    vmem_status_t st;
    CUcontext ctx;
    CUfunction fn;
} devs[SMCOPY_DEVICES];
static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;

/* The device's kernel, loaded on first use; VMEM_OK and *fn, *ctx set. */
static vmem_status_t kernel_of(const cu_driver_t *cu, int device, CUfunction *fn, CUcontext *ctx)
{
    pthread_mutex_lock(&devs_lock);
    if (!devs[device].tried) {
        vmem_status_t st = VMEM_ERR_BACKEND;
        CUdevice d;
        CUcontext c = NULL;
        CUmodule mod;
        CUfunction f;
        int hostptr = 0;
        if (cu->DeviceGet(&d, device) != CUDA_SUCCESS ||
            cu->DeviceGetAttribute(&hostptr,
                                   CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
                                   d) != CUDA_SUCCESS) {
            st = VMEM_ERR_UNAVAILABLE;
        } else if (!hostptr) {
            st = VMEM_ERR_UNSUPPORTED;
        } else if (cu->DevicePrimaryCtxRetain(&c, d) == CUDA_SUCCESS) {
            if (cu->CtxPushCurrent(c) == CUDA_SUCCESS) {
                CUresult r = cu->ModuleLoadData(&mod, ptx);
                if (r == CUDA_SUCCESS)
                    r = cu->ModuleGetFunction(&f, mod, "vmem_copy");
                CUcontext popped;
                cu->CtxPopCurrent(&popped);
                if (r == CUDA_SUCCESS) {
                    st = VMEM_OK;
                    devs[device].ctx = c; /* the context stays retained with the module */
                    devs[device].fn = f;
                } else {
                    vmem_log(NULL, VMEM_LOG_ERROR, "vmem_copy_async: the copy kernel did not "
                             "load on device %d: %s", device, cu_error_string(r));
                }
            }
            if (st != VMEM_OK)
                cu->DevicePrimaryCtxRelease(d);
        }
        devs[device].tried = 1;
        devs[device].st = st;
    }
    vmem_status_t st = devs[device].st;
    *fn = devs[device].fn;
    *ctx = devs[device].ctx;
    pthread_mutex_unlock(&devs_lock);
    return st;
}

vmem_status_t smcopy_launch(int device, void *dst, const void *src, size_t bytes, void *stream,
                            unsigned blocks)
{
    unsigned long long n16, tail;
    unsigned grid = smcopy_shape(dst, src, bytes, blocks, &n16, &tail);
    if (grid == 0)
        return VMEM_OK;
    const cu_driver_t *cu = cu_driver();
    if (!cu)
        return VMEM_ERR_UNAVAILABLE;
    if (device < 0 || device >= SMCOPY_DEVICES)
        return VMEM_ERR_UNSUPPORTED;
    CUfunction fn;
    CUcontext ctx;
    vmem_status_t st = kernel_of(cu, device, &fn, &ctx);
    if (st != VMEM_OK)
        return st;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    void *params[] = {&d, &s, &n16, &tail};
    if (cu->CtxPushCurrent(ctx) != CUDA_SUCCESS)
        return VMEM_ERR_BACKEND;
    CUresult r = cu->LaunchKernel(fn, grid, 1, 1, SMCOPY_THREADS, 1, 1, 0, (CUstream)stream,
                                  params, NULL);
    CUcontext popped;
    cu->CtxPopCurrent(&popped);
    if (r != CUDA_SUCCESS) {
        vmem_log(NULL, VMEM_LOG_ERROR, "vmem_copy_async: launch failed: %s", cu_error_string(r));
        return VMEM_ERR_BACKEND;
    }
    return VMEM_OK;
}
#else
vmem_status_t smcopy_launch(int device, void *dst, const void *src, size_t bytes, void *stream,
                            unsigned blocks)
{
    (void)device;
    (void)dst;
    (void)src;
    (void)stream;
    unsigned long long n16, tail;
    return smcopy_shape(dst, src, bytes, blocks, &n16, &tail) ? VMEM_ERR_UNAVAILABLE : VMEM_OK;
}
#endif
