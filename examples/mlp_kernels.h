/* The device side of train_mlp: the few elementwise kernels a two-layer MLP
 * needs besides cuBLAS's matrix products, and the CUDA runtime calls it
 * makes (streams, copies).  Every function returns 0 or a CUDA error code
 * (mlp_error_string names it); stream is a cudaStream_t. */
#ifndef MLP_KERNELS_H
#define MLP_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int mlp_device_count(void);                /* 0 without a usable GPU */
const char *mlp_error_string(int err);
/* 1 if blocks from this libvmem backend can be used by kernels (not "sim",
 * whose addresses exist only on the host). */
int mlp_backend_usable(const char *backend);

int mlp_stream_create(void **stream);
void mlp_stream_destroy(void *stream);
int mlp_sync(void *stream);
int mlp_upload(void *dst, const void *src, size_t bytes, void *stream);
int mlp_download(void *dst, const void *src, size_t bytes, void *stream);
int mlp_zero(void *p, size_t bytes, void *stream);

/* pre[n x d] += b (per column); h = max(pre, 0) */
int mlp_bias_relu(float *pre, const float *b, float *h, int n, int d, void *stream);
/* y[n x d] += b (per column) */
int mlp_add_bias(float *y, const float *b, int n, int d, void *stream);
/* dy = 2 (yhat - y) / count; *loss += sum((yhat - y)^2) / count */
int mlp_mse(const float *yhat, const float *y, float *dy, float *loss, int count, void *stream);
/* dh *= (pre > 0) */
int mlp_relu_backward(float *dh, const float *pre, int count, void *stream);
/* out[j] = sum_i m[i x d + j] */
int mlp_col_sum(const float *m, float *out, int n, int d, void *stream);
/* w -= lr * g */
int mlp_sgd(float *w, const float *g, float lr, int count, void *stream);

#ifdef __cplusplus
}
#endif

#endif
