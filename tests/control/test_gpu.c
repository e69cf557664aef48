/* Suite 'control', on a real GPU (skipped without one): AntMan's per-GPU
 * entries are matched against the device's PCI bus id as CUDA reports it,
 * whatever the spelling (nvidia-smi's 8-digit upper-case domain or CUDA's
 * 4-digit one); a simulated device's pseudo id never matches a real GPU. */
#include "common.h"
#include "../skip77.h"

static int gpu_bus_id(char *id, size_t len, unsigned f[4])
{
    if (!backend_cuda_present(0))
        return -1;
    cr_assert_eq(backend_cuda_pci_bus_id(0, id, len), VMEM_OK);
    cr_assert_eq(sscanf(id, "%x:%x:%x.%x", &f[0], &f[1], &f[2], &f[3]), 4,
                 "unexpected bus id \"%s\"", id);
    return 0;
}

enum spelling { SMI, CUDA, SHORT };

static void follows_entry(vmem_backend_kind_t kind, enum spelling how)
{
    char id[32];
    unsigned f[4];
    if (gpu_bus_id(id, sizeof id, f) != 0)
        cr_skip_test("no CUDA device");
    char key[64], text[256];
    if (how == SMI)
        snprintf(key, sizeof key, "%08X:%02X:%02X.%X", f[0], f[1], f[2], f[3]);
    else if (how == CUDA)
        snprintf(key, sizeof key, "%04x:%02x:%02x.%x", f[0], f[1], f[2], f[3]);
    else if (f[0] == 0)
        snprintf(key, sizeof key, "%02x:%02x.%x", f[1], f[2], f[3]); /* domain 0 implied */
    else
        cr_skip_test("PCI domain %x is not 0: no short spelling", f[0]);
    snprintf(text, sizeof text,
             "{\"limit\": \"1G\", \"sim:0\": {\"mem_limit\": \"128M\"},"
             " \"%s\": {\"mem_limit\": \"512M\"}}",
             key);
    char *dir = dir_make();
    char *ctl = path_join(dir, "control.json");
    file_put_atomic(ctl, text);
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = kind;
    cfg.limit = 2 * GiB;
    cfg.control_file = ctl;
    vmem_t *v = NULL;
    vmem_status_t st = vmem_create(&cfg, &v);
    if (st == VMEM_ERR_UNAVAILABLE) {
        free(ctl);
        dir_remove(dir);
        cr_skip_test("backend %s unavailable", vmem_backend_name(kind));
    }
    cr_assert_eq(st, VMEM_OK, "%s", vmem_strerror(st));
    cr_assert_eq(limit_of(v), 512 * MiB, "entry \"%s\" (device id %s) not applied", key, id);

    /* a change to the entry follows at the next step end */
    snprintf(text, sizeof text, "{\"%s\": {\"mem_limit\": \"256M\"}}", key);
    file_put_atomic(ctl, text);
    cr_assert(wait_file_limit(v, 256 * MiB));
    void *p = vmem_alloc(v, 64 * MiB);
    cr_assert_not_null(p);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(limit_of(v), 256 * MiB);
    vmem_free(v, p);
    vmem_destroy(v);
    free(ctl);
    dir_remove(dir);
}

Test(control_gpu, cuda_matches_nvidia_smi_spelling, .timeout = 60)
{
    follows_entry(VMEM_BACKEND_CUDA, SMI);
}

Test(control_gpu, cuda_matches_cuda_spelling, .timeout = 60)
{
    follows_entry(VMEM_BACKEND_CUDA, CUDA);
}

Test(control_gpu, vmm_matches_short_spelling, .timeout = 60)
{
    follows_entry(VMEM_BACKEND_VMM, SHORT);
}
