/* The CUDA driver API, reached through cudaGetDriverEntryPointByVersion
 * (never by linking libcuda).  Not built yet: see issue 7. */
#include "vmem_internal.h"
