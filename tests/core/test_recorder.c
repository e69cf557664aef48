/*
 * The allocation recorder (VMEM_TRACE_FILE, src/recorder.c): what an
 * instance sees is written as a trace vmem-replay reads -- every
 * allocation, free and step end in the allocator's order, ids unique among
 * live blocks, streams numbered by first use, the limit as a comment.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "recorder.h"
#include "vmem.h"

#define MAXLIVE 4096

static char path[64];

static vmem_t *recording(vmem_backend_kind_t kind, size_t limit)
{
    env_unset_all();
    snprintf(path, sizeof path, "/tmp/vmem-rec-%d-%%d.txt", (int)getpid());
    setenv("VMEM_TRACE_FILE", path, 1);
    vmem_config_t cfg = sim_config(kind, limit, 0, 256 * MiB, NULL);
    vmem_t *v = create_or_die(&cfg);
    unsetenv("VMEM_TRACE_FILE");
    snprintf(path, sizeof path, "/tmp/vmem-rec-%d-0.txt", (int)getpid()); /* device 0 */
    return v;
}

typedef struct parsed {
    unsigned long long allocs, frees, steps, limits, bytes_allocated;
    unsigned max_stream;
    unsigned long long last_limit;
    int header_ok;
} parsed_t;

/* Reads the trace back and checks the format's invariants: an allocation's
 * id is not live, a free's is; times never go back. */
static parsed_t parse(void)
{
    parsed_t r = {0};
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no trace at %s", path);
    unsigned long long live[MAXLIVE];
    size_t nlive = 0;
    unsigned long long last_t = 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        unsigned long long id, size, t, bytes;
        unsigned stream;
        if (n == 1) {
            r.header_ok = strncmp(line, "# {", 3) == 0 && strstr(line, "\"source\"") != NULL;
            continue;
        }
        if (sscanf(line, "# limit %llu %llu", &bytes, &t) == 2) {
            r.limits++;
            r.last_limit = bytes;
        } else if (sscanf(line, "a %llu %llu %u %llu", &id, &size, &stream, &t) == 4) {
            for (size_t i = 0; i < nlive; i++)
                cr_assert_neq(live[i], id, "line %d: allocation of a live id", n);
            cr_assert_lt(nlive, MAXLIVE);
            live[nlive++] = id;
            r.allocs++;
            r.bytes_allocated += size;
            if (stream > r.max_stream)
                r.max_stream = stream;
        } else if (sscanf(line, "f %llu %llu", &id, &t) == 2) {
            size_t i = 0;
            while (i < nlive && live[i] != id)
                i++;
            cr_assert_lt(i, nlive, "line %d: free of an id not live", n);
            live[i] = live[--nlive];
            r.frees++;
        } else if (sscanf(line, "s %llu", &t) == 1) {
            r.steps++;
        } else {
            cr_assert_fail("line %d: not a trace line: %s", n, line);
        }
        cr_assert_geq(t, last_t, "line %d: time went back", n);
        last_t = t;
    }
    fclose(f);
    return r;
}

Test(recorder, a_run_is_written_as_a_valid_trace)
{
    vmem_t *v = recording(VMEM_BACKEND_SIM_VMM, 64 * MiB);
    void *s1 = (void *)0x1001, *s2 = (void *)0x2002;
    for (int step = 0; step < 3; step++) {
        void *a = vmem_alloc(v, 3 * MiB);
        void *b = vmem_alloc_stream(v, 5000, s1);
        void *c = vmem_alloc_stream(v, 40 * MiB, s2);
        cr_assert(a && b && c);
        cr_assert_eq(vmem_free(v, a), VMEM_OK);
        cr_assert_eq(vmem_free_stream(v, b, s1), VMEM_OK);
        cr_assert_eq(vmem_free_stream(v, c, s2), VMEM_OK);
        cr_assert_eq(vmem_step_end(v), VMEM_OK);
    }
    void *keep = vmem_alloc(v, MiB);
    cr_assert_not_null(keep);
    /* refused calls are not events */
    cr_assert_eq(vmem_free(v, (void *)0x1234), VMEM_ERR_FOREIGN_PTR);
    cr_assert_null(vmem_alloc(v, 0));
    cr_assert_eq(vmem_set_limit(v, 32 * MiB, NULL), VMEM_OK);
    vmem_destroy(v); /* closes the file; the block left live stays unfreed */
    parsed_t r = parse();
    cr_assert(r.header_ok, "no JSON header");
    cr_assert_eq(r.allocs, 10);
    cr_assert_eq(r.frees, 9);
    cr_assert_eq(r.steps, 3);
    cr_assert_eq(r.bytes_allocated, 3 * (3 * MiB + 5000 + 40 * MiB) + MiB, "sizes are as asked");
    cr_assert_eq(r.max_stream, 2, "three streams: 0 (NULL), 1, 2");
    cr_assert_eq(r.limits, 1);
    cr_assert_eq(r.last_limit, 32 * MiB);
    unlink(path);
}

Test(recorder, blocks_on_host_and_reused_addresses_keep_ids_valid)
{
    /* under a small limit blocks go to host and addresses come back often */
    vmem_t *v = recording(VMEM_BACKEND_SIM, 8 * MiB);
    void *live[64] = {0};
    unsigned seed = 7;
    for (int i = 0; i < 4000; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % 64);
        if (live[k]) {
            cr_assert_eq(vmem_free(v, live[k]), VMEM_OK);
            live[k] = NULL;
        } else {
            live[k] = vmem_alloc(v, ((seed >> 16) % 512 + 1) * 1024);
        }
        if (i % 500 == 499)
            cr_assert_eq(vmem_step_end(v), VMEM_OK);
    }
    for (int k = 0; k < 64; k++)
        vmem_free(v, live[k]);
    vmem_destroy(v);
    parsed_t r = parse(); /* fails on any id allocated while live or freed while not */
    cr_assert_eq(r.allocs, r.frees);
    cr_assert_eq(r.steps, 8);
    unlink(path);
}

static void *churn(void *arg)
{
    vmem_t *v = arg;
    for (int i = 0; i < 2000; i++) {
        void *p = vmem_alloc(v, (size_t)(i % 7 + 1) * 4096);
        cr_assert_not_null(p);
        vmem_free(v, p);
    }
    return NULL;
}

Test(recorder, threads_write_in_the_allocators_order)
{
    vmem_t *v = recording(VMEM_BACKEND_SIM, 256 * MiB);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, churn, v);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    vmem_destroy(v);
    parsed_t r = parse(); /* an address handed to one thread right after another freed it */
    cr_assert_eq(r.allocs, 8000);
    cr_assert_eq(r.frees, 8000);
    unlink(path);
}

Test(recorder, a_file_that_cannot_be_created_is_refused_at_create)
{
    env_unset_all();
    expect_env_refused("VMEM_TRACE_FILE", "/nonexistent-dir/trace.txt", VMEM_BACKEND_SIM);
    expect_env_refused("VMEM_TRACE_FILE", "", VMEM_BACKEND_SIM);
    recorder_t *r = (recorder_t *)1;
    cr_assert_eq(recorder_from_env(0, &r), VMEM_OK);
    cr_assert_null(r, "unset: no recorder");
}

Test(recorder, each_device_writes_its_own_file)
{
    env_unset_all();
    char base[64], want[80];
    snprintf(base, sizeof base, "/tmp/vmem-rec-dev-%d.txt", (int)getpid());
    setenv("VMEM_TRACE_FILE", base, 1);
    vmem_t *v[2];
    for (int d = 0; d < 2; d++) {
        vmem_config_t cfg = sim_config(VMEM_BACKEND_SIM, 64 * MiB, 0, 64 * MiB, NULL);
        cfg.device = d;
        v[d] = create_or_die(&cfg);
        void *p = vmem_alloc(v[d], (size_t)(d + 1) * MiB);
        cr_assert_not_null(p);
        vmem_free(v[d], p);
    }
    unsetenv("VMEM_TRACE_FILE");
    vmem_destroy(v[0]);
    vmem_destroy(v[1]);
    for (int d = 0; d < 2; d++) {
        if (d == 0)
            snprintf(want, sizeof want, "%s", base);
        else
            snprintf(want, sizeof want, "%s.%d", base, d);
        FILE *f = fopen(want, "r");
        cr_assert_not_null(f, "no %s", want);
        char line[256];
        unsigned long long id, size, t;
        unsigned stream;
        cr_assert_not_null(fgets(line, sizeof line, f));
        cr_assert_not_null(strstr(line, d ? "\"device\": 1" : "\"device\": 0"));
        cr_assert_not_null(fgets(line, sizeof line, f));
        cr_assert_eq(sscanf(line, "a %llu %llu %u %llu", &id, &size, &stream, &t), 4);
        cr_assert_eq(size, (d + 1) * MiB, "device %d's file holds another device's allocation", d);
        fclose(f);
        unlink(want);
    }
}
