/* Runtime control: the watched control file and step pacing.
 * The watcher is not built yet (issue 4): a configured control file is
 * refused with VMEM_ERR_UNSUPPORTED rather than silently ignored. */
#include "vmem_internal.h"

vmem_status_t control_start(vmem_t *v, const char *path)
{
    vmem_log(v, VMEM_LOG_ERROR, "control file %s: not supported by this build", path);
    return VMEM_ERR_UNSUPPORTED;
}

void control_stop(vmem_t *v) { (void)v; }
void control_apply_pending(vmem_t *v) { (void)v; }
void control_pace(vmem_t *v, double step_seconds)
{
    (void)v;
    (void)step_seconds;
}
