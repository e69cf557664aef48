/* The allocation recorder (recorder.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recorder.h"
#include "vmem_internal.h"

#define RECORDER_STREAMS 256 /* streams numbered; later ones share the last number */

struct recorder {
    FILE *f;
    char *path;
    double t0;
    uintptr_t streams[RECORDER_STREAMS];
    unsigned nstreams;
    int failed;
};

/* path with the first "%d" replaced by the device number; without one,
 * device d > 0 appends ".d" (as VMEM_STATS_FILE does).  A fresh string. */
static char *expand(const char *path, int device)
{
    const char *at = strstr(path, "%d");
    size_t n = strlen(path) + 16;
    char *out = malloc(n);
    if (!out)
        return NULL;
    if (at)
        snprintf(out, n, "%.*s%d%s", (int)(at - path), path, device, at + 2);
    else if (device > 0)
        snprintf(out, n, "%s.%d", path, device);
    else
        snprintf(out, n, "%s", path);
    return out;
}

vmem_status_t recorder_from_env(int device, recorder_t **out)
{
    *out = NULL;
    const char *e = getenv("VMEM_TRACE_FILE");
    if (!e)
        return VMEM_OK;
    recorder_t *r = calloc(1, sizeof *r);
    char *path = expand(e, device);
    FILE *f = path && *path ? fopen(path, "w") : NULL;
    if (!r || !f) {
        vmem_log(NULL, VMEM_LOG_ERROR, "VMEM_TRACE_FILE=\"%s\": cannot create %s", e,
                 path ? path : "(no memory)");
        if (f)
            fclose(f);
        free(path);
        free(r);
        return VMEM_ERR_ENV;
    }
    setvbuf(f, NULL, _IOFBF, (size_t)1 << 20);
    r->f = f;
    r->path = path;
    r->t0 = vmem_now();
    r->streams[0] = 0; /* the NULL stream is stream 0 */
    r->nstreams = 1;
    if (fprintf(f, "# {\"source\": \"libvmem VMEM_TRACE_FILE\", \"device\": %d, \"workload\": "
                   "\"recorded by libvmem %s\"}\n",
                device, vmem_version()) < 0)
        r->failed = 1;
    *out = r;
    return VMEM_OK;
}

static unsigned long long t_us(const recorder_t *r)
{
    return (unsigned long long)((vmem_now() - r->t0) * 1e6);
}

/* n: what fprintf returned, negative for a failed write, which stops the recording. */
static void wrote(recorder_t *r, int n)
{
    if (n >= 0)
        return;
    r->failed = 1;
    vmem_log(NULL, VMEM_LOG_ERROR, "VMEM_TRACE_FILE %s: write failed; recording stops",
             r->path);
}

static unsigned stream_number(recorder_t *r, void *stream)
{
    uintptr_t s = (uintptr_t)stream;
    for (unsigned i = 0; i < r->nstreams; i++)
        if (r->streams[i] == s)
            return i;
    if (r->nstreams == RECORDER_STREAMS)
        return RECORDER_STREAMS - 1;
    r->streams[r->nstreams] = s;
    return r->nstreams++;
}

void recorder_alloc(recorder_t *r, const void *p, size_t size, void *stream)
{
    if (!r || r->failed)
        return;
    wrote(r, fprintf(r->f, "a %llu %zu %u %llu\n", (unsigned long long)(uintptr_t)p, size,
                     stream_number(r, stream), t_us(r)));
}

void recorder_free(recorder_t *r, const void *p)
{
    if (!r || r->failed)
        return;
    wrote(r, fprintf(r->f, "f %llu %llu\n", (unsigned long long)(uintptr_t)p, t_us(r)));
}

void recorder_step(recorder_t *r)
{
    if (!r || r->failed)
        return;
    wrote(r, fprintf(r->f, "s %llu\n", t_us(r)));
    if (!r->failed && fflush(r->f) != 0)
        wrote(r, -1);
}

void recorder_limit(recorder_t *r, size_t bytes)
{
    if (!r || r->failed)
        return;
    wrote(r, fprintf(r->f, "# limit %zu %llu\n", bytes, t_us(r)));
}

void recorder_close(recorder_t *r)
{
    if (!r)
        return;
    if (fclose(r->f) != 0 && !r->failed)
        vmem_log(NULL, VMEM_LOG_ERROR, "VMEM_TRACE_FILE %s: write failed at close", r->path);
    free(r->path);
    free(r);
}
