// uvm_probe: what CUDA managed memory (cudaMallocManaged + cudaMemPrefetchAsync)
// costs, for deciding whether stream-ordered prefetches can carry the overlap of
// issue 11 (blocks moved host<->device while kernels run, pointers unchanged).
//
// Built here with nvcc (static cudart), run on the GPU machine:
//   nvcc -O2 -arch=sm_90 -o .carry/uvm_probe bench/uvm_probe.cu
//   .carry/uvm_probe [total_MiB]
// Prints one line per measurement.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,          \
                    cudaGetErrorString(e_));                                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

__global__ void read_sum(const float4 *p, size_t n, float *out) {
    float s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = p[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 12345.f) *out = s;
}

__global__ void fill(float4 *p, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_float4(v, v, v, v);
}

// Compute-bound busy kernel on a small device buffer: stands in for GEMMs.
__global__ void spin(float *p, int iters) {
    float x = p[threadIdx.x];
    for (int i = 0; i < iters; i++) x = x * 1.0000001f + 0.0000001f;
    p[threadIdx.x] = x;
}

static cudaMemLocation loc_dev(int d) {
    cudaMemLocation l{};
    l.type = cudaMemLocationTypeDevice;
    l.id = d;
    return l;
}
static cudaMemLocation loc_host() {
    cudaMemLocation l{};
    l.type = cudaMemLocationTypeHost;
    l.id = 0;
    return l;
}

static float kernel_read_ms(const void *p, size_t bytes, float *out, cudaStream_t s) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    read_sum<<<1056, 512, 0, s>>>((const float4 *)p, bytes / 16, out);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms;
}

static size_t dev_used() {
    size_t f, t;
    CK(cudaMemGetInfo(&f, &t));
    return t - f;
}

// Prefetch every block of `blocks` to `to` on stream s, one call per block;
// returns CPU ms spent in the calls, and sets *gpu_ms to the stream time.
static double prefetch_all(std::vector<char *> &blocks, size_t bs, cudaMemLocation to,
                           cudaStream_t s, float *gpu_ms) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    double t0 = now_ms();
    for (char *p : blocks) CK(cudaMemPrefetchAsync(p, bs, to, 0, s));
    double cpu = now_ms() - t0;
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(gpu_ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return cpu;
}

int main(int argc, char **argv) {
    size_t total_mib = argc > 1 ? strtoull(argv[1], 0, 10) : 4096;
    size_t total = total_mib << 20;
    int dev = 0;
    CK(cudaSetDevice(dev));
    int cma = 0, pma = 0;
    CK(cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, dev));
    CK(cudaDeviceGetAttribute(&pma, cudaDevAttrPageableMemoryAccess, dev));
    printf("concurrentManagedAccess %d pageableMemoryAccess %d\n", cma, pma);
    float *out;
    CK(cudaMalloc(&out, 4096));
    cudaStream_t cs, xs;
    CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&xs, cudaStreamNonBlocking));

    // Baseline: cudaMalloc read bandwidth.
    {
        void *d;
        CK(cudaMalloc(&d, total));
        fill<<<1056, 512, 0, cs>>>((float4 *)d, total / 16, 1.f);
        kernel_read_ms(d, total, out, cs);
        float ms = kernel_read_ms(d, total, out, cs);
        printf("cudaMalloc read %.1f GB/s\n", total / ms / 1e6);
        CK(cudaFree(d));
    }
    size_t used0 = dev_used();

    for (size_t bs_mib : {12, 64, 256}) {
        size_t bs = bs_mib << 20;
        size_t n = total / bs;
        char *base;
        double t0 = now_ms();
        CK(cudaMallocManaged(&base, n * bs));
        double alloc_ms = now_ms() - t0;
        std::vector<char *> blocks;
        for (size_t i = 0; i < n; i++) blocks.push_back(base + i * bs);
        size_t bytes = n * bs;
        printf("\n== blocks of %zu MiB, %zu blocks, %.0f MiB; cudaMallocManaged %.2f ms\n", bs_mib,
               n, bytes / 1048576.0, alloc_ms);
        float g;
        double c = prefetch_all(blocks, bs, loc_dev(dev), cs, &g);
        printf("first prefetch to device (populate): cpu %.2f ms, gpu %.2f ms (%.1f GB/s)\n", c, g,
               bytes / g / 1e6);
        fill<<<1056, 512, 0, cs>>>((float4 *)base, bytes / 16, 2.f);
        CK(cudaStreamSynchronize(cs));
        printf("device used after populate: +%.0f MiB\n", (dev_used() - used0) / 1048576.0);
        float r1 = kernel_read_ms(base, bytes, out, cs);
        printf("kernel read, resident on device: %.1f GB/s\n", bytes / r1 / 1e6);
        for (int rep = 0; rep < 2; rep++) {
            c = prefetch_all(blocks, bs, loc_host(), cs, &g);
            printf("prefetch to host: cpu %.2f ms (%.1f us/call), gpu %.2f ms (%.1f GB/s); device used +%.0f MiB\n",
                   c, c * 1000 / n, g, bytes / g / 1e6, (dev_used() - used0) / 1048576.0);
            c = prefetch_all(blocks, bs, loc_dev(dev), cs, &g);
            printf("prefetch to device: cpu %.2f ms (%.1f us/call), gpu %.2f ms (%.1f GB/s); device used +%.0f MiB\n",
                   c, c * 1000 / n, g, bytes / g / 1e6, (dev_used() - used0) / 1048576.0);
        }
        // Remote access: preferred location host, accessed by the device, then read.
        t0 = now_ms();
        for (char *p : blocks) {
            CK(cudaMemAdvise(p, bs, cudaMemAdviseSetPreferredLocation, loc_host()));
            CK(cudaMemAdvise(p, bs, cudaMemAdviseSetAccessedBy, loc_dev(dev)));
        }
        double adv = now_ms() - t0;
        c = prefetch_all(blocks, bs, loc_host(), cs, &g);
        float r2 = kernel_read_ms(base, bytes, out, cs);
        float r3 = kernel_read_ms(base, bytes, out, cs);
        printf("advise host+accessedBy: %.1f us/block; prefetch to host gpu %.2f ms; kernel read on host %.1f then %.1f GB/s; device used +%.0f MiB\n",
               adv * 1000 / n, g, bytes / r2 / 1e6, bytes / r3 / 1e6, (dev_used() - used0) / 1048576.0);
        // Prefetch back while preferred location is host: does it stay on device?
        c = prefetch_all(blocks, bs, loc_dev(dev), cs, &g);
        float r4 = kernel_read_ms(base, bytes, out, cs);
        printf("prefetch to device despite preferred host: gpu %.2f ms (%.1f GB/s), kernel read %.1f GB/s, device used +%.0f MiB\n",
               g, bytes / g / 1e6, bytes / r4 / 1e6, (dev_used() - used0) / 1048576.0);
        t0 = now_ms();
        for (char *p : blocks) {
            CK(cudaMemAdvise(p, bs, cudaMemAdviseUnsetPreferredLocation, loc_host()));
        }
        printf("unset preferred: %.1f us/block\n", (now_ms() - t0) * 1000 / n);

        // Overlap: a compute kernel on cs while half the blocks go out and half come in on xs.
        {
            float *sp;
            CK(cudaMalloc(&sp, 4096));
            std::vector<char *> lo(blocks.begin(), blocks.begin() + n / 2),
                hi(blocks.begin() + n / 2, blocks.end());
            prefetch_all(hi, bs, loc_host(), cs, &g);  // hi starts on host
            cudaEvent_t a, b, c1, c2;
            CK(cudaEventCreate(&a));
            CK(cudaEventCreate(&b));
            CK(cudaEventCreate(&c1));
            CK(cudaEventCreate(&c2));
            // compute alone
            CK(cudaEventRecord(a, cs));
            spin<<<132 * 4, 256, 0, cs>>>(sp, 2000000);
            CK(cudaEventRecord(b, cs));
            CK(cudaEventSynchronize(b));
            float comp;
            CK(cudaEventElapsedTime(&comp, a, b));
            // copies alone (both directions, one stream each way)
            cudaStream_t ys;
            CK(cudaStreamCreateWithFlags(&ys, cudaStreamNonBlocking));
            CK(cudaEventRecord(c1, xs));
            for (char *p : lo) CK(cudaMemPrefetchAsync(p, bs, loc_host(), 0, xs));
            CK(cudaEventRecord(c2, xs));
            CK(cudaEventRecord(a, ys));
            for (char *p : hi) CK(cudaMemPrefetchAsync(p, bs, loc_dev(dev), 0, ys));
            CK(cudaEventRecord(b, ys));
            CK(cudaDeviceSynchronize());
            float out_ms, in_ms;
            CK(cudaEventElapsedTime(&out_ms, c1, c2));
            CK(cudaEventElapsedTime(&in_ms, a, b));
            printf("both directions at once: out %.2f ms (%.1f GB/s), in %.2f ms (%.1f GB/s)\n",
                   out_ms, lo.size() * bs / out_ms / 1e6, in_ms, hi.size() * bs / in_ms / 1e6);
            // now together with compute: swap roles back
            double w0 = now_ms();
            spin<<<132 * 4, 256, 0, cs>>>(sp, 2000000);
            double tc = now_ms();
            for (char *p : hi) CK(cudaMemPrefetchAsync(p, bs, loc_host(), 0, xs));
            for (char *p : lo) CK(cudaMemPrefetchAsync(p, bs, loc_dev(dev), 0, ys));
            double tcall = now_ms() - tc;
            CK(cudaDeviceSynchronize());
            double wall = now_ms() - w0;
            printf("compute alone %.2f ms; compute + %.0f MiB each way: wall %.2f ms (cpu in prefetch calls %.2f ms)\n",
                   comp, lo.size() * bs / 1048576.0, wall, tcall);
            cudaStreamDestroy(ys);
            cudaFree(sp);
        }
        CK(cudaFree(base));
        printf("device used after free: +%.0f MiB\n", (dev_used() - used0) / 1048576.0);
    }
    return 0;
}
