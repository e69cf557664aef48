"""libvmem as Numba's CUDA memory manager (an External Memory Management
plugin, Numba's EMM interface version 1, as RAPIDS RMM offers one).

Every device array Numba creates (cuda.device_array, cuda.to_device, the
temporaries of kernels and ufuncs) is then allocated by libvmem: under the
device limit on the device, beyond it in pinned host memory mapped into the
device's address space, so kernels keep running when the limit is cut.

Either before Numba creates its CUDA context:

    import libvmem_numba
    libvmem_numba.install()          # numba.cuda.set_memory_manager(...)

or without touching the program:

    NUMBA_CUDA_MEMORY_MANAGER=libvmem_numba python3 job.py

The instance of a device is libvmem's per-device instance (the one PyTorch
and CuPy share through python/libvmem.py), created from the VMEM_*
environment on first use; libvmem.set_limit(), libvmem.stats() and
libvmem.step_end() act on it.

Host (pinned) allocations Numba asks for (cuda.pinned_array,
cuda.mapped_array) stay with Numba (HostOnlyCUDAMemoryManager).
get_memory_info() reports the device limit as the total and the limit minus
what libvmem holds in use on the device as free.  get_ipc_handle() works for
blocks of the cuda backend (cudaMalloc regions); vmm blocks cannot be
exported through cuIpcGetMemHandle and raise.  defer_cleanup() defers only
Numba's own host-side cleanup: libvmem returns freed blocks to its arena at
once, whatever the context manager says.
"""

import ctypes

try:
    from numba import cuda as _cuda
except ImportError as e:  # pragma: no cover - exercised where numba is absent
    raise ImportError("libvmem_numba needs Numba's CUDA target (pip install numba-cuda): "
                      + str(e)) from e

import libvmem

__all__ = ["VmemNumbaManager", "install"]

_HostOnly = _cuda.HostOnlyCUDAMemoryManager
_IpcMixin = _cuda.GetIpcHandleMixin


def _device_pointer(addr):
    """The pointer object MemoryPointer expects: older Numba versions using
    the NVIDIA bindings want a CUdeviceptr; newer ones convert c_void_p."""
    try:
        from numba.cuda.cudadrv import driver
    except ImportError:  # pragma: no cover
        return ctypes.c_void_p(addr)
    if getattr(driver, "USE_NV_BINDING", False) is True:
        return driver.binding.CUdeviceptr(addr)
    return ctypes.c_void_p(addr)


def _make_finalizer(lib, inst, addr):
    # No reference to the manager or the pointer object: Numba calls this
    # when the MemoryPointer dies.
    def finalize():
        lib.vmem_free_stream(inst, addr, None)
    return finalize


class VmemNumbaManager(_IpcMixin, _HostOnly):
    """Numba EMM plugin allocating device memory from libvmem."""

    def _vmem(self):
        dev = self.context.device.id
        return libvmem.load(), libvmem._instance(dev)

    def initialize(self):
        # Creates the device's libvmem instance now, so that a bad VMEM_*
        # setting is reported when Numba opens the context, not at the first
        # array.  May be called more than once.
        self._vmem()

    def memalloc(self, size):
        lib, inst = self._vmem()
        if size <= 0:
            size = 1  # Numba allocates 0-byte arrays; libvmem refuses size 0
        addr = lib.vmem_alloc_stream(inst, size, None)
        if not addr:
            st = lib.vmem_last_status()
            from numba.cuda.cudadrv.driver import CudaAPIError
            raise CudaAPIError(
                2, "libvmem could not allocate %d bytes: %s" % (size, libvmem.strerror(st)))
        return _cuda.MemoryPointer(self.context, _device_pointer(addr), size,
                                   finalizer=_make_finalizer(lib, inst, addr))

    def get_memory_info(self):
        s = libvmem.stats(self.context.device.id)
        total = s["limit"]
        return _cuda.MemoryInfo(free=max(total - s["deviceInUse"], 0), total=total)

    def reset(self):
        # Blocks still referenced by live arrays stay valid; empty regions go
        # back to the device.
        super().reset()
        try:
            libvmem.trim(self.context.device.id)
        except (libvmem.VmemError, OSError):
            pass

    @property
    def interface_version(self):
        return 1


_numba_memory_manager = VmemNumbaManager


def install():
    """Makes libvmem Numba's device memory manager.  Call it before Numba
    creates a CUDA context (before the first array or kernel launch)."""
    _cuda.set_memory_manager(VmemNumbaManager)
    return VmemNumbaManager
