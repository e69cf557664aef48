/* The CUDA virtual-memory-management backend (reserve / create / map).
 * Not built yet: see issue 7. */
#include "backend.h"

vmem_status_t backend_vmm_create(int device, backend_t **out)
{
    (void)device;
    (void)out;
    return VMEM_ERR_UNAVAILABLE;
}
