/* Framework adapters (PyTorch pluggable allocator, CuPy CFunctionAllocator).
 * Not built yet: see issue 5. */
#include "vmem_internal.h"
