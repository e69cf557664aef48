"""Checks python/libvmem_numba.py (libvmem as Numba's CUDA memory manager)
without a GPU.  Where Numba is absent: importing the plugin fails with an
ImportError that says what to install.  Where Numba is present: the class
implements the EMM interface, and memalloc / the finalizer / get_memory_info
work on libvmem's simulated device through a stand-in context.  The real
kernels run in scripts/gpu/first-hour.sh on a GPU.

    VMEM_LIBRARY=build/src/libvmem.so python3 python/test_numba.py

With LIBVMEM_TEST_INSTALLED=1 the installed modules are tested.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("LIBVMEM_TEST_INSTALLED") == "1":
    # python puts this file's directory first on sys.path: take it off, so
    # that the installed module is the one tested
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
else:
    sys.path.insert(0, HERE)
os.environ["VMEM_BACKEND"] = "sim"
os.environ["VMEM_LIMIT"] = "64M"
os.environ["VMEM_SIM_CAPACITY"] = "1G"

try:
    import numba.cuda  # noqa: F401
    HAVE_NUMBA = True
except ImportError:
    HAVE_NUMBA = False


class WithoutNumba(unittest.TestCase):
    @unittest.skipIf(HAVE_NUMBA, "Numba is installed")
    def test_import_says_what_is_missing(self):
        with self.assertRaises(ImportError) as cm:
            import libvmem_numba  # noqa: F401
        self.assertIn("numba-cuda", str(cm.exception))


class _Device:
    id = 0


class _Context:
    device = _Device()


@unittest.skipUnless(HAVE_NUMBA, "Numba is not installed")
class WithNumba(unittest.TestCase):
    def test_interface(self):
        import libvmem_numba as N
        from numba import cuda
        self.assertTrue(issubclass(N._numba_memory_manager, cuda.BaseCUDAMemoryManager))
        self.assertIs(N._numba_memory_manager, N.VmemNumbaManager)

    def test_alloc_free_on_the_simulated_device(self):
        import libvmem
        import libvmem_numba as N
        mgr = N.VmemNumbaManager.__new__(N.VmemNumbaManager)
        mgr.context = _Context()
        self.assertEqual(mgr.interface_version, 1)
        before = libvmem.stats()
        mp = mgr.memalloc(3 << 20)
        self.assertEqual(mp.size, 3 << 20)
        mid = libvmem.stats()
        self.assertEqual(mid["allocs"], before["allocs"] + 1)
        self.assertGreaterEqual(mid["deviceInUse"], 3 << 20)
        info = mgr.get_memory_info()
        self.assertEqual(info.total, 64 << 20)
        self.assertEqual(info.free, (64 << 20) - mid["deviceInUse"])
        del mp
        import gc
        gc.collect()
        after = libvmem.stats()
        self.assertEqual(after["frees"], before["frees"] + 1)
        self.assertEqual(after["deviceInUse"], before["deviceInUse"])


if __name__ == "__main__":
    unittest.main()
