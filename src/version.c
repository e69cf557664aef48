/* The run-time version (vmem_version).  VMEM_VERSION_STRING comes from
 * meson.build's project version, which meson checks against the
 * VMEM_VERSION_* macros of include/vmem.h. */
#include "vmem_internal.h"

#ifndef VMEM_VERSION_STRING
#error "VMEM_VERSION_STRING must be defined by the build (meson.build)"
#endif

const char *vmem_version(void)
{
    return VMEM_VERSION_STRING;
}
