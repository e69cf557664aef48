/* Suite 'control', built only without cJSON: a configured control file is
 * refused with VMEM_ERR_UNSUPPORTED and a clear log line; everything else
 * (statistics file, pacing hook) still works. */
#include "common.h"

Test(control_nocjson, control_file_is_refused_clearly)
{
    logcount_t lc;
    logcount_init(&lc);
    vmem_config_t cfg;
    vmem_config_init(&cfg);
    cfg.backend = VMEM_BACKEND_SIM;
    cfg.limit = 64 * MiB;
    cfg.control_file = "/tmp/vmem-nocjson-control.json";
    cfg.log_fn = logcount_fn;
    cfg.log_ctx = &lc;
    vmem_t *v = NULL;
    cr_assert_eq(vmem_create(&cfg, &v), VMEM_ERR_UNSUPPORTED);
    cr_assert_null(v);
    cr_assert_eq(atomic_load(&lc.errors), 1);
    cr_assert(strstr(lc.last_error, "without cJSON") != NULL, "%s", lc.last_error);
}

Test(control_nocjson, everything_else_works)
{
    char *dir = dir_make();
    char *stats = path_join(dir, "stats.json");
    vmem_t *v = instance_make(64 * MiB, NULL, stats, NULL, 0);
    cr_assert_not(status_of(v).active);
    void *p = vmem_alloc(v, 1 * MiB);
    cr_assert_not_null(p);
    cr_assert_eq(vmem_step_end(v), VMEM_OK);
    cr_assert_eq(access(stats, F_OK), 0);
    vmem_free(v, p);
    vmem_destroy(v);
    free(stats);
    dir_remove(dir);
}
