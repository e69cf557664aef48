// The device side of train_mlp (see mlp_kernels.h).
#include <cuda_runtime.h>
#include <string.h>

#include "mlp_kernels.h"

static const int THREADS = 256;

static int blocks_for(long n)
{
    long b = (n + THREADS - 1) / THREADS;
    return (int)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

static int launched(void)
{
    return (int)cudaGetLastError();
}

extern "C" int mlp_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" const char *mlp_error_string(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}

extern "C" int mlp_backend_usable(const char *backend)
{
    return strncmp(backend, "sim", 3) != 0;
}

extern "C" int mlp_stream_create(void **stream)
{
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        *stream = s;
    return (int)e;
}

extern "C" void mlp_stream_destroy(void *stream)
{
    cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" int mlp_sync(void *stream)
{
    return (int)cudaStreamSynchronize((cudaStream_t)stream);
}

extern "C" int mlp_upload(void *dst, const void *src, size_t bytes, void *stream)
{
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream);
}

extern "C" int mlp_download(void *dst, const void *src, size_t bytes, void *stream)
{
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
}

extern "C" int mlp_zero(void *p, size_t bytes, void *stream)
{
    return (int)cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream);
}

// Grid-stride loops: any n works with any grid.
__global__ void k_bias_relu(float *pre, const float *b, float *h, long n, int d)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float v = pre[i] + b[i % d];
        pre[i] = v;
        h[i] = v > 0.f ? v : 0.f;
    }
}

__global__ void k_add_bias(float *y, const float *b, long n, int d)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        y[i] += b[i % d];
}

__global__ void k_mse(const float *yhat, const float *y, float *dy, float *loss, long n)
{
    __shared__ float part[THREADS];
    float acc = 0.f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float e = yhat[i] - y[i];
        dy[i] = 2.f * e / (float)n;
        acc += e * e;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(loss, part[0] / (float)n);
}

__global__ void k_relu_backward(float *dh, const float *pre, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        if (pre[i] <= 0.f)
            dh[i] = 0.f;
}

__global__ void k_col_sum(const float *m, float *out, int n, int d)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < d; j += gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int i = 0; i < n; i++)
            acc += m[(long)i * d + j];
        out[j] = acc;
    }
}

__global__ void k_sgd(float *w, const float *g, float lr, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        w[i] -= lr * g[i];
}

extern "C" int mlp_bias_relu(float *pre, const float *b, float *h, int n, int d, void *stream)
{
    long count = (long)n * d;
    k_bias_relu<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(pre, b, h, count, d);
    return launched();
}

extern "C" int mlp_add_bias(float *y, const float *b, int n, int d, void *stream)
{
    long count = (long)n * d;
    k_add_bias<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(y, b, count, d);
    return launched();
}

extern "C" int mlp_mse(const float *yhat, const float *y, float *dy, float *loss, int count,
                       void *stream)
{
    k_mse<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(yhat, y, dy, loss, count);
    return launched();
}

extern "C" int mlp_relu_backward(float *dh, const float *pre, int count, void *stream)
{
    k_relu_backward<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(dh, pre, count);
    return launched();
}

extern "C" int mlp_col_sum(const float *m, float *out, int n, int d, void *stream)
{
    k_col_sum<<<blocks_for(d), THREADS, 0, (cudaStream_t)stream>>>(m, out, n, d);
    return launched();
}

extern "C" int mlp_sgd(float *w, const float *g, float lr, int count, void *stream)
{
    k_sgd<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(w, g, lr, count);
    return launched();
}
