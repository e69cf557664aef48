/* vmem-demo: libvmem in half a minute.  Fills the device to its limit,
 * keeps allocating and shows the spill to host, shrinks the limit and shows
 * regions given back, grows it again, and prints the statistics — on the
 * GPU when there is one, on the simulated device otherwise.
 *
 *   vmem-demo [--help | --version]
 *
 * Exit status: 0 done, 1 a libvmem call failed, 2 bad arguments or an
 * invalid VMEM_* variable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vmem.h>

#define MiB ((size_t)1 << 20)

static void show(vmem_t *v, const char *what)
{
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    printf("  %-44s limit %6zu MiB | device held %6zu MiB, in use %6zu MiB, %2zu regions | host in use %5zu MiB | spills %llu\n",
           what, s.limit / MiB, s.device_held / MiB, s.device_in_use / MiB, s.device_regions,
           s.host_in_use / MiB, (unsigned long long)s.spills);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vmem-demo [--help | --version]\n"
            "\n"
            "Fills a device limit (default 1 GiB; VMEM_LIMIT) and shows the spill to host\n"
            "memory, a shrink of the limit, a raise, and the statistics; on the GPU when\n"
            "there is one, on the simulated device otherwise (VMEM_BACKEND chooses).\n"
            "The VMEM_* variables of docs/configuration.md apply.\n"
            "\n"
            "exit status: 0 done, 1 a libvmem call failed, 2 bad arguments or an invalid\n"
            "VMEM_* variable\n");
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[1], "--version")) {
            printf("vmem-demo (libvmem) %s\n", vmem_version());
            return 0;
        }
        fprintf(stderr, "vmem-demo: unknown argument \"%s\"\n", argv[1]);
        usage(stderr);
        return 2;
    }
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    if (vmem_config_from_env(&cfg) != VMEM_OK)
        return 2;
    if (cfg.limit == 0)
        cfg.limit = 1024 * MiB;   /* demo default: a 1 GiB cap */
    if (cfg.host_limit == 0)
        cfg.host_limit = 2048 * MiB;
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    if (st != VMEM_OK && cfg.backend == VMEM_BACKEND_AUTO) {
        cfg.backend = VMEM_BACKEND_SIM;
        st = vmem_create(&cfg, &v);
    }
    if (st != VMEM_OK) {
        fprintf(stderr, "vmem-demo: vmem_create: %s\n", vmem_strerror(st));
        return 1;
    }
    vmem_stats_t s = {.size = sizeof s};
    vmem_get_stats(v, &s);
    int simulated = strncmp(s.backend, "sim", 3) == 0;
    printf("libvmem demo on %s (backend %s)\n",
           simulated ? "the SIMULATED device (no GPU found)" : "the real GPU", s.backend);

    enum { N = 48 };
    void *blk[N] = {0};
    size_t sz = 48 * MiB;
    printf("1. allocate %d blocks of %zu MiB under a %zu MiB limit\n", N, sz / MiB, s.limit / MiB);
    int on_dev = 0, on_host = 0;
    for (int i = 0; i < N; i++) {
        blk[i] = vmem_alloc(v, sz);
        vmem_ptr_info_t info;
        if (blk[i] && vmem_ptr_info(v, blk[i], &info) == VMEM_OK) {
            if (info.location == VMEM_LOC_DEVICE)
                on_dev++;
            else
                on_host++;
        }
        if (i == 15 || i == 31 || i == N - 1)
            show(v, i == N - 1 ? "after all allocations" : "filling");
    }
    printf("   -> %d blocks on the device, %d spilled to pinned host memory (same pointers work in kernels)\n",
           on_dev, on_host);

    printf("2. free every other device block, then shrink the limit to 256 MiB\n");
    for (int i = 0; i < N; i += 2) {
        vmem_ptr_info_t info;
        if (blk[i] && vmem_ptr_info(v, blk[i], &info) == VMEM_OK && info.location == VMEM_LOC_DEVICE) {
            vmem_free(v, blk[i]);
            blk[i] = NULL;
        }
    }
    show(v, "after frees");
    size_t applied = 0;
    st = vmem_set_limit(v, 256 * MiB, &applied);
    printf("   vmem_set_limit(256 MiB): %s, device now holds %zu MiB\n",
           st == VMEM_PENDING ? "pending (live data holds more)" : vmem_strerror(st), applied / MiB);
    show(v, "after shrink");
    printf("3. free the remaining device blocks: the pending shrink completes\n");
    for (int i = 0; i < N; i++) {
        vmem_ptr_info_t info;
        if (blk[i] && vmem_ptr_info(v, blk[i], &info) == VMEM_OK && info.location == VMEM_LOC_DEVICE) {
            vmem_free(v, blk[i]);
            blk[i] = NULL;
        }
    }
    show(v, "after frees");
    printf("4. grow the limit back to %zu MiB and allocate again: back on the device\n",
           cfg.limit / MiB);
    vmem_set_limit(v, cfg.limit, &applied);
    for (int i = 0; i < 8; i++)
        if (!blk[i])
            blk[i] = vmem_alloc(v, sz);
    show(v, "after grow");
    printf("5. bad input is reported, not fatal:\n");
    int local;
    printf("   free(foreign pointer) -> %s\n", vmem_strerror(vmem_free(v, &local)));
    void *x = vmem_alloc(v, 1000);
    vmem_free(v, x);
    printf("   double free          -> %s\n", vmem_strerror(vmem_free(v, x)));
    printf("   alloc(0)             -> %s\n", vmem_alloc(v, 0) ? "?" : vmem_strerror(vmem_last_status()));
    for (int i = 0; i < N; i++)
        vmem_free(v, blk[i]);
    vmem_step_end(v);
    char json[4096];
    vmem_stats_json(v, json, sizeof json, NULL);
    printf("6. statistics (JSON):\n%s\n", json);
    st = vmem_check(v);
    printf("invariant check: %s\n", vmem_strerror(st));
    vmem_destroy(v);
    return st == VMEM_OK ? 0 : 1;
}
