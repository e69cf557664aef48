/* train_mlp: a custom runtime on libvmem.  Trains a two-layer MLP
 * (x -> relu(x W1 + b1) W2 + b2) by SGD on a synthetic regression task whose
 * targets come from a random "teacher" network of the same shape, with
 * cuBLAS for the matrix products and a handful of kernels (mlp_kernels.cu).
 *
 * What to copy into your own runtime:
 *   - it holds libvmem only through the vtable (vmem_allocator_t): every
 *     device buffer, weights and per-step activations alike, comes from
 *     alloc.alloc(ctx, bytes, stream) and goes back through alloc.free;
 *   - per-step buffers are allocated at the start of a step and freed at
 *     its end, so a limit cut between steps moves the next step's working
 *     set (spill to pinned host memory, transparently to the kernels) and a
 *     raise brings it back;
 *   - alloc.step_end(ctx) is called after every step: it applies limit
 *     changes from the control file (VMEM_CONTROL_FILE) and writes the
 *     statistics file (VMEM_STATS_FILE).
 *
 *   train_mlp [--steps N] [--batch N] [--in N] [--hidden N] [--out N]
 *             [--lr X] [--limit BYTES] [--every N] [--seed N]
 *
 * The instance is configured from the VMEM_* environment; --limit overrides
 * VMEM_LIMIT.  cuBLAS is loaded at run time ($VMEM_CUBLAS, else
 * libcublas.so.13/.12/.so on the loader path or in /usr/local/cuda).
 * Exit status: 0 when the loss fell (last steps' mean below 90% of the first
 * steps'), 1 when it did not or on a runtime error, 2 for bad usage or no
 * cuBLAS, 77 when there is no GPU (nothing to train on). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <vmem.h>

#include "mlp_kernels.h"

/* ------------------------------------------------------------------------ */
/* cuBLAS, loaded at run time                                               */
/* ------------------------------------------------------------------------ */

typedef cublasStatus_t (*cublas_create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*cublas_destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*cublas_set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*cublas_sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                          int, int, int, const float *, const float *, int,
                                          const float *, int, const float *, float *, int);

typedef struct blas {
    void *lib;
    cublas_create_fn create;
    cublas_destroy_fn destroy;
    cublas_set_stream_fn set_stream;
    cublas_sgemm_fn sgemm;
    cublasHandle_t handle;
} blas_t;

static int blas_load(blas_t *b)
{
    const char *names[] = {getenv("VMEM_CUBLAS"), "libcublas.so.13", "libcublas.so.12",
                           "libcublas.so", "/usr/local/cuda/lib64/libcublas.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !b->lib; i++)
        if (names[i] && *names[i])
            b->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!b->lib)
        return -1;
    b->create = (cublas_create_fn)dlsym(b->lib, "cublasCreate_v2");
    b->destroy = (cublas_destroy_fn)dlsym(b->lib, "cublasDestroy_v2");
    b->set_stream = (cublas_set_stream_fn)dlsym(b->lib, "cublasSetStream_v2");
    b->sgemm = (cublas_sgemm_fn)dlsym(b->lib, "cublasSgemm_v2");
    return b->create && b->destroy && b->set_stream && b->sgemm ? 0 : -1;
}

/* Row-major C[m x n] = op(A)[m x k] op(B)[k x n], where op transposes when
 * the flag is set (A is stored k x m then).  cuBLAS is column-major, and a
 * row-major matrix read column-major is its transpose, so this computes
 * C^T = op(B)^T op(A)^T. */
static int gemm(blas_t *b, int ta, int tb, int m, int n, int k, const float *A, const float *B,
                float *C)
{
    const float one = 1.f, zero = 0.f;
    return b->sgemm(b->handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                    m, k, &one, B, tb ? k : n, A, ta ? m : k, &zero, C, n) == CUBLAS_STATUS_SUCCESS
               ? 0
               : -1;
}

/* ------------------------------------------------------------------------ */
/* The runtime                                                              */
/* ------------------------------------------------------------------------ */

typedef struct opts {
    int steps, batch, in, hidden, out, every;
    float lr;
    size_t limit;
    unsigned long long seed;
} opts_t;

typedef struct rt {
    vmem_allocator_t mem;
    void *stream;
    blas_t blas;
    const char *failed; /* first failing call, for the error message */
} rt_t;

static void *dev_alloc(rt_t *r, size_t bytes)
{
    void *p = r->mem.alloc(r->mem.ctx, bytes, r->stream);
    if (!p && !r->failed)
        r->failed = "libvmem allocation";
    return p;
}

static void dev_free(rt_t *r, void *p)
{
    if (p)
        r->mem.free(r->mem.ctx, p, r->stream);
}

#define CHECK(r, call)                                                                      \
    do {                                                                                    \
        if (!(r)->failed && (call) != 0)                                                    \
            (r)->failed = #call;                                                            \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned long long rng_state;

static float uniform(float lo, float hi) /* splitmix64 */
{
    unsigned long long z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)((z >> 40) * (1.0 / 16777216.0));
}

/* A device buffer of count floats, uniform in [-scale, scale]. */
static float *random_buffer(rt_t *r, size_t count, float scale)
{
    float *h = malloc(count * sizeof *h);
    float *d = dev_alloc(r, count * sizeof *d);
    if (!h || !d) {
        free(h);
        dev_free(r, d);
        if (!r->failed)
            r->failed = "host malloc";
        return NULL;
    }
    for (size_t i = 0; i < count; i++)
        h[i] = uniform(-scale, scale);
    CHECK(r, mlp_upload(d, h, count * sizeof *h, r->stream));
    CHECK(r, mlp_sync(r->stream)); /* h is freed next */
    free(h);
    return d;
}

typedef struct layer2 {
    float *w1, *b1, *w2, *b2; /* in x hidden, hidden, hidden x out, out */
} layer2_t;

static int layer2_init(rt_t *r, layer2_t *l, int in, int hidden, int out)
{
    l->w1 = random_buffer(r, (size_t)in * hidden, sqrtf(6.f / (float)(in + hidden)));
    l->b1 = random_buffer(r, (size_t)hidden, 0.01f);
    l->w2 = random_buffer(r, (size_t)hidden * out, sqrtf(6.f / (float)(hidden + out)));
    l->b2 = random_buffer(r, (size_t)out, 0.01f);
    return r->failed ? -1 : 0;
}

static void layer2_free(rt_t *r, layer2_t *l)
{
    dev_free(r, l->w1);
    dev_free(r, l->b1);
    dev_free(r, l->w2);
    dev_free(r, l->b2);
}

/* Forward pass: pre = x W1 + b1, h = relu(pre), y = h W2 + b2. */
static void forward(rt_t *r, const layer2_t *l, const float *x, int n, int in, int hidden, int out,
                    float *pre, float *h, float *y)
{
    CHECK(r, gemm(&r->blas, 0, 0, n, hidden, in, x, l->w1, pre));
    CHECK(r, mlp_bias_relu(pre, l->b1, h, n, hidden, r->stream));
    CHECK(r, gemm(&r->blas, 0, 0, n, out, hidden, h, l->w2, y));
    CHECK(r, mlp_add_bias(y, l->b2, n, out, r->stream));
}

/* One SGD step on a batch; returns the batch's loss (NAN on error).  Every
 * activation and gradient is allocated here and freed before returning. */
static float train_step(rt_t *r, layer2_t *l, const opts_t *o, const float *x, const float *y)
{
    int n = o->batch, in = o->in, hd = o->hidden, out = o->out;
    size_t f = sizeof(float);
    float *pre = dev_alloc(r, (size_t)n * hd * f), *h = dev_alloc(r, (size_t)n * hd * f);
    float *yh = dev_alloc(r, (size_t)n * out * f), *dy = dev_alloc(r, (size_t)n * out * f);
    float *dh = dev_alloc(r, (size_t)n * hd * f), *loss = dev_alloc(r, f);
    float *gw1 = dev_alloc(r, (size_t)in * hd * f), *gb1 = dev_alloc(r, (size_t)hd * f);
    float *gw2 = dev_alloc(r, (size_t)hd * out * f), *gb2 = dev_alloc(r, (size_t)out * f);
    float value = NAN;
    if (!r->failed) {
        forward(r, l, x, n, in, hd, out, pre, h, yh);
        CHECK(r, mlp_zero(loss, f, r->stream));
        CHECK(r, mlp_mse(yh, y, dy, loss, n * out, r->stream));
        CHECK(r, gemm(&r->blas, 1, 0, hd, out, n, h, dy, gw2));  /* h^T dy */
        CHECK(r, mlp_col_sum(dy, gb2, n, out, r->stream));
        CHECK(r, gemm(&r->blas, 0, 1, n, hd, out, dy, l->w2, dh)); /* dy W2^T */
        CHECK(r, mlp_relu_backward(dh, pre, n * hd, r->stream));
        CHECK(r, gemm(&r->blas, 1, 0, in, hd, n, x, dh, gw1));  /* x^T dh */
        CHECK(r, mlp_col_sum(dh, gb1, n, hd, r->stream));
        CHECK(r, mlp_sgd(l->w1, gw1, o->lr, in * hd, r->stream));
        CHECK(r, mlp_sgd(l->b1, gb1, o->lr, hd, r->stream));
        CHECK(r, mlp_sgd(l->w2, gw2, o->lr, hd * out, r->stream));
        CHECK(r, mlp_sgd(l->b2, gb2, o->lr, out, r->stream));
        CHECK(r, mlp_download(&value, loss, f, r->stream));
        CHECK(r, mlp_sync(r->stream));
    }
    /* Freed on the stream they were used on: the next step's allocations on
     * that stream may reuse them at once. */
    float *bufs[] = {pre, h, yh, dy, dh, loss, gw1, gb1, gw2, gb2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        dev_free(r, bufs[i]);
    return r->failed ? NAN : value;
}

static int usage(void)
{
    fprintf(stderr, "usage: train_mlp [--steps N] [--batch N] [--in N] [--hidden N] [--out N]\n"
                    "                 [--lr X] [--limit BYTES] [--every N] [--seed N]\n");
    return 2;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int *iv = !strcmp(a, "--steps")    ? &o->steps
                  : !strcmp(a, "--batch")  ? &o->batch
                  : !strcmp(a, "--in")     ? &o->in
                  : !strcmp(a, "--hidden") ? &o->hidden
                  : !strcmp(a, "--out")    ? &o->out
                  : !strcmp(a, "--every")  ? &o->every
                                           : NULL;
        if (!val)
            return -1;
        char *end = NULL;
        if (iv) {
            long v = strtol(val, &end, 10);
            if (*end || v <= 0 || v > (1L << 20))
                return -1;
            *iv = (int)v;
        } else if (!strcmp(a, "--lr")) {
            o->lr = strtof(val, &end);
            if (*end || !(o->lr > 0))
                return -1;
        } else if (!strcmp(a, "--seed")) {
            o->seed = strtoull(val, &end, 10);
            if (*end)
                return -1;
        } else if (!strcmp(a, "--limit")) {
            if (vmem_parse_size(val, &o->limit) != VMEM_OK || o->limit == 0)
                return -1;
        } else {
            return -1;
        }
        i++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {.steps = 200, .batch = 4096, .in = 512, .hidden = 2048, .out = 64, .every = 20,
                .lr = 0.05f, .limit = 0, .seed = 1};
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: train_mlp [--steps N] [--batch N] [--in N] [--hidden N] [--out N]\n"
               "                 [--lr X] [--limit BYTES] [--every N] [--seed N]\n"
               "Trains a two-layer MLP with cuBLAS on libvmem (docs/embedding.md).\n"
               "exit status: 0 the loss fell, 1 it did not or a runtime error, 2 bad usage or\n"
               "no cuBLAS, 77 no CUDA device\n");
        return 0;
    }
    if (parse_args(argc, argv, &o) != 0)
        return usage();
    if (mlp_device_count() == 0) {
        fprintf(stderr, "train_mlp: no CUDA device found: nothing to train on\n");
        return 77;
    }
    rt_t r = {0};
    if (blas_load(&r.blas) != 0) {
        fprintf(stderr, "train_mlp: cannot load cuBLAS (set VMEM_CUBLAS to libcublas.so's path)\n");
        return 2;
    }

    vmem_config_t cfg;
    vmem_config_init(&cfg);
    if (vmem_config_from_env(&cfg) != VMEM_OK)
        return 2;
    if (o.limit)
        cfg.limit = o.limit;
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    if (st != VMEM_OK) {
        fprintf(stderr, "train_mlp: vmem_create: %s\n", vmem_strerror(st));
        return 1;
    }
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    if (!mlp_backend_usable(s.backend)) {
        fprintf(stderr, "train_mlp: backend %s gives no device memory; use cuda or vmm\n",
                s.backend);
        vmem_destroy(v);
        return 2;
    }
    vmem_get_allocator(v, &r.mem);
    int err = mlp_stream_create(&r.stream);
    if (err || r.blas.create(&r.blas.handle) != CUBLAS_STATUS_SUCCESS ||
        r.blas.set_stream(r.blas.handle, (cudaStream_t)r.stream) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "train_mlp: CUDA/cuBLAS setup failed%s%s\n", err ? ": " : "",
                err ? mlp_error_string(err) : "");
        vmem_destroy(v);
        return 1;
    }
    printf("train_mlp: backend %s, limit %zu MiB, batch %d, %d-%d-%d, lr %g, %d steps\n",
           s.backend, s.limit >> 20, o.batch, o.in, o.hidden, o.out, o.lr, o.steps);

    /* The data set: 8 batches of inputs, targets from a teacher network. */
    enum { NBATCH = 8 };
    rng_state = o.seed;
    size_t nx = (size_t)NBATCH * o.batch;
    float *x = random_buffer(&r, nx * o.in, 1.f);
    float *y = dev_alloc(&r, nx * o.out * sizeof(float));
    layer2_t teacher = {0}, student = {0};
    layer2_init(&r, &teacher, o.in, o.hidden / 4 > 0 ? o.hidden / 4 : 1, o.out);
    if (!r.failed) {
        int th = o.hidden / 4 > 0 ? o.hidden / 4 : 1;
        float *pre = dev_alloc(&r, nx * th * sizeof(float));
        float *h = dev_alloc(&r, nx * th * sizeof(float));
        if (!r.failed)
            forward(&r, &teacher, x, (int)nx, o.in, th, o.out, pre, h, y);
        CHECK(&r, mlp_sync(r.stream));
        dev_free(&r, pre);
        dev_free(&r, h);
    }
    layer2_free(&r, &teacher);
    layer2_init(&r, &student, o.in, o.hidden, o.out);

    enum { WINDOW = 5 };
    double first = 0, last = 0, t_total = 0;
    int nfirst = 0, nlast = 0, steps_done = 0;
    float *losses = calloc((size_t)o.steps, sizeof *losses);
    for (int step = 0; step < o.steps && !r.failed && losses; step++) {
        size_t off = (size_t)(step % NBATCH) * o.batch;
        double t0 = now_s();
        float loss = train_step(&r, &student, &o, x + off * o.in, y + off * o.out);
        r.mem.step_end(r.mem.ctx);
        double dt = now_s() - t0;
        t_total += dt;
        if (r.failed || !isfinite(loss))
            break;
        losses[step] = loss;
        steps_done++;
        if (step % o.every == 0 || step == o.steps - 1) {
            vmem_get_stats(v, &s);
            printf("step %4d  loss %.6f  %7.2f ms  device in use %5zu MiB  host in use %5zu "
                   "MiB  limit %5zu MiB\n",
                   step, loss, dt * 1e3, s.device_in_use >> 20, s.host_in_use >> 20,
                   s.limit >> 20);
            fflush(stdout);
        }
    }
    for (int i = 0; i < steps_done; i++) {
        if (i < WINDOW) {
            first += losses[i];
            nfirst++;
        }
        if (i >= steps_done - WINDOW) {
            last += losses[i];
            nlast++;
        }
    }
    free(losses);
    first = nfirst ? first / nfirst : NAN;
    last = nlast ? last / nlast : NAN;

    vmem_get_stats(v, &s);
    int fell = steps_done > WINDOW && last < 0.9 * first;
    if (r.failed)
        fprintf(stderr, "train_mlp: failed at %s (%s)\n", r.failed,
                vmem_strerror(vmem_last_status()));
    printf("RESULT {\"steps\":%d,\"loss_first\":%.6f,\"loss_last\":%.6f,\"loss_fell\":%s,"
           "\"ms_per_step\":%.3f,\"backend\":\"%s\",\"device_peak_in_use\":%zu,"
           "\"spills\":%llu,\"spilled_bytes\":%llu,\"failures\":%llu,\"error\":%s%s%s}\n",
           steps_done, first, last, fell ? "true" : "false",
           steps_done ? t_total * 1e3 / steps_done : 0.0, s.backend, s.device_peak_in_use,
           (unsigned long long)s.spills, (unsigned long long)s.spilled_bytes,
           (unsigned long long)s.failures, r.failed ? "\"" : "", r.failed ? r.failed : "null",
           r.failed ? "\"" : "");

    layer2_free(&r, &student);
    dev_free(&r, x);
    dev_free(&r, y);
    r.blas.destroy(r.blas.handle);
    mlp_stream_destroy(r.stream);
    vmem_destroy(v);
    return !r.failed && fell ? 0 : 1;
}
