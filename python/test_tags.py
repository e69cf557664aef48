"""python/libvmem.py's tags, pause and resume on sim-vmm (no GPU, no
PyTorch): region() routes allocations, pause keeps or drops the bytes,
resume maps them back at the same addresses.

    VMEM_LIBRARY=build/src/libvmem.so python3 python/test_tags.py
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_libvmem import run  # noqa: E402


class Tags(unittest.TestCase):
    def test_region_pause_keep_resume(self):
        out = run("""
            lib = L.load()
            v = L._instance(0)
            with L.region("weights"):
                p = lib.vmem_alloc_stream(v, 8 << 20, None)
            q = lib.vmem_alloc_stream(v, 1 << 20, None)     # tag 0 again
            ctypes.memset(p, 0x5A, 8 << 20)
            print(L.tag_id("weights"), L.tag_stats("weights")["blocks"], L.tag_stats(0)["blocks"])
            L.pause("weights")
            s = L.tag_stats("weights")
            print(s["state"], s["device_held"], s["host_held"] > 0)
            print(L.stats()["tags"][0]["state"])
            L.resume("weights")
            buf = (ctypes.c_ubyte * 16).from_address(p + (8 << 20) - 16)
            print(L.tag_stats("weights")["state"], set(buf) == {0x5A})
            lib.vmem_free_stream(v, p, None)
            lib.vmem_free_stream(v, q, None)
            """, VMEM_BACKEND="sim-vmm", VMEM_SIM_CAPACITY="1G", VMEM_LIMIT="512M")
        self.assertEqual(out.split("\n")[:4], ["1 1 1", "paused-keep 0 True", "paused-keep",
                                               "active True"])

    def test_discard_nesting_and_errors(self):
        out = run("""
            lib = L.load()
            v = L._instance(0)
            with L.region("kv"):
                with L.region(7):
                    a = lib.vmem_alloc_stream(v, 4 << 20, None)
                b = lib.vmem_alloc_stream(v, 4 << 20, None)
            print(L.tag_stats(7)["blocks"], L.tag_stats("kv")["blocks"], L.tag_id("other"))
            L.pause("kv", keep=False)
            s = L.tag_stats("kv")
            print(s["state"], s["device_held"], s["reserved"] >= 4 << 20)
            with L.region("kv"):
                print(lib.vmem_alloc_stream(v, 1 << 20, None))
            L.resume("kv")
            ctypes.memset(b, 1, 4 << 20)                 # mapped again
            try:
                L.pause(0)
            except L.VmemError as e:
                print("error", e.status)
            lib.vmem_free_stream(v, a, None)
            lib.vmem_free_stream(v, b, None)
            """, VMEM_BACKEND="sim-vmm", VMEM_SIM_CAPACITY="1G", VMEM_LOG_LEVEL="none")
        self.assertEqual(out.split("\n")[:5], ["1 1 2", "paused-discard 0 True", "None",
                                               "error -1", ""])

    def test_unsupported_backend(self):
        out = run("""
            try:
                L.pause("x")
            except L.VmemError as e:
                print(e.status)
            """, VMEM_LOG_LEVEL="none")
        self.assertEqual(out.strip(), "-12")


if __name__ == "__main__":
    unittest.main()
