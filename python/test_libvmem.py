"""Checks python/libvmem.py against a libvmem on the simulated device: no GPU,
no PyTorch, no CuPy needed.  Each case runs in its own interpreter, since
the per-device instances are created once per process from the environment.

    VMEM_LIBRARY=build/src/libvmem.so python3 python/test_libvmem.py

With LIBVMEM_TEST_INSTALLED=1 the cases import the installed package instead
(`pip install .`; .ci/run does it in a fresh virtual environment): the source
tree is kept off sys.path, VMEM_LIBRARY must be unset, and the module must
load the libvmem.so installed beside it.
"""

import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
INSTALLED = os.environ.get("LIBVMEM_TEST_INSTALLED") == "1"
# The installed cases run in an empty directory of their own: `python -c` puts
# its working directory first on sys.path, and a libvmem.so there (the C
# library, which is not a Python module) would be imported instead of the
# package.  The shared temporary directory may hold one.
RUN_DIR = tempfile.mkdtemp(prefix="libvmem-test-") if INSTALLED else None
if RUN_DIR:
    import atexit
    import shutil
    atexit.register(shutil.rmtree, RUN_DIR, True)


def run(code, **env):
    """Runs code with libvmem importable and VMEM_BACKEND=sim plus env;
    returns stdout.  Fails the test on a non-zero exit."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("VMEM_") or k == "VMEM_LIBRARY"}
    e["VMEM_BACKEND"] = "sim"
    e.update({k: str(v) for k, v in env.items()})
    if INSTALLED:
        prog = "import sys, ctypes\nimport libvmem as L\n"
    else:
        prog = "import sys, ctypes\nsys.path.insert(0, %r)\nimport libvmem as L\n" % HERE
    prog += textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", prog], env=e, capture_output=True, text=True,
                       timeout=60, cwd=RUN_DIR)
    if r.returncode != 0:
        raise AssertionError("exit %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout,
                                                                       r.stderr))
    return r.stdout


class PythonModule(unittest.TestCase):
    def test_version_matches_header(self):
        out = run("print(L.version())")
        with open(os.path.join(HERE, "..", "include", "vmem.h")) as f:
            h = f.read()

        want = ".".join(re.search(r"#define VMEM_VERSION_%s (\d+)" % k, h).group(1)
                        for k in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(out.strip(), want)

    @unittest.skipUnless(INSTALLED, "LIBVMEM_TEST_INSTALLED=1: tests the installed package")
    def test_installed_package_loads_its_bundled_library(self):
        self.assertNotIn("VMEM_LIBRARY", os.environ)
        out = run("import os; print(os.path.dirname(os.path.realpath(L.__file__))); "
                  "print(os.path.dirname(os.path.realpath(L.library_path())))")
        mod_dir, lib_dir = out.split()
        self.assertNotEqual(mod_dir, os.path.realpath(HERE),
                            "imported the source tree's module, not the installed one")
        self.assertEqual(mod_dir, lib_dir)

    def test_finds_and_loads_library(self):
        out = run("print(L.library_path()); print(L.load().vmem_instance_peek(0))")
        path, peek = out.split()
        self.assertTrue(os.path.exists(path), path)
        self.assertEqual(peek, "None")  # loading creates no instance

    @unittest.skipIf(INSTALLED, "the source tree's lookup (build*/src) is what is tested")
    def test_a_build_that_has_not_built_the_library_is_skipped(self):
        # scripts/sanitize.sh fuzz leaves build-fuzz/src/libvmem.so a dangling
        # link; the lookup once stat()ed it and raised FileNotFoundError.
        import shutil
        tree = tempfile.mkdtemp(prefix="libvmem-tree-")
        try:
            os.makedirs(os.path.join(tree, "python"))
            shutil.copy(os.path.join(HERE, "libvmem.py"), os.path.join(tree, "python"))
            for b in ("build-dangling", "build-real"):
                os.makedirs(os.path.join(tree, b, "src"))
            os.symlink("libvmem.so.0", os.path.join(tree, "build-dangling", "src", "libvmem.so"))
            real = os.path.join(tree, "build-real", "src", "libvmem.so")
            open(real, "w").close()
            os.utime(real, (1, 1))  # older than the dangling link: still found
            out = subprocess.run(
                [sys.executable, "-c", "import sys; sys.path.insert(0, %r); import libvmem; "
                 "print('\\n'.join(libvmem._candidates()))" % os.path.join(tree, "python")],
                capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                     if k != "VMEM_LIBRARY"})
            self.assertEqual(out.returncode, 0, out.stderr)
            cands = out.stdout.split()
            self.assertIn(real, cands)
            self.assertFalse([c for c in cands if "build-dangling" in c], cands)
        finally:
            shutil.rmtree(tree)

    def test_missing_library_is_a_clear_error(self):
        out = run("""
            try:
                L.load()
            except OSError as e:
                print("OSError", "VMEM_LIBRARY" in str(e))
            """, VMEM_LIBRARY="/nonexistent/libvmem.so")
        self.assertEqual(out.strip(), "OSError True")

    def test_limit_roundtrip(self):
        out = run("""
            print(L.get_limit())
            print(L.set_limit("32M"))
            print(L.get_limit())
            print(L.stats()["limit"], L.stats()["startCap"], L.stats()["backend"])
            try:
                L.set_limit(128 << 20)
                print("no error")
            except L.VmemError as e:
                print("refused", e.status)
            print(L.set_limit(128 << 20, force=True), L.get_limit())
            """, VMEM_LIMIT="64M")
        lines = out.splitlines()
        self.assertEqual(int(lines[0]), 64 * MiB)
        self.assertEqual(lines[1], "(0, 0)")
        self.assertEqual(int(lines[2]), 32 * MiB)
        self.assertEqual(lines[3], "%d %d sim" % (32 * MiB, 64 * MiB))
        self.assertEqual(lines[4], "refused -8")  # VMEM_ERR_ABOVE_CAP
        self.assertEqual(lines[5], "(0, 0) %d" % (128 * MiB))

    def test_shrink_below_live_data_is_pending(self):
        out = run("""
            lib = L.load()
            p = lib.vmem_torch_malloc(48 << 20, 0, None)
            st, held = L.set_limit("16M")
            s = L.stats()
            print(st, held >= (48 << 20), s["pendingLimit"])
            lib.vmem_torch_free(p, 48 << 20, 0, None)
            s = L.stats()
            print(s["pendingLimit"], s["deviceHeld"] <= (16 << 20))
            """, VMEM_LIMIT="64M")
        first, second = out.splitlines()
        self.assertEqual(first, "1 True %d" % (16 * MiB))  # VMEM_PENDING
        self.assertEqual(second, "0 True")

    def test_parse_size(self):
        out = run("""
            print(L.parse_size("8G"), L.parse_size(4096), L.parse_size("1K"))
            for bad in ("lots", "-1", ""):
                try:
                    L.parse_size(bad); print("accepted", bad)
                except ValueError:
                    pass
            """)
        self.assertEqual(out.strip(), "%d 4096 1024" % (8 << 30))

    def test_offload_switch_and_stats_without_torch(self):
        out = run("""
            import os
            got = []
            for val in ("", "1", "on", "0", "False", "no"):
                os.environ["VMEM_TORCH_OFFLOAD"] = val
                got.append(L._env_flag("VMEM_TORCH_OFFLOAD", True))
            os.environ["VMEM_TORCH_OFFLOAD"] = "maybe"
            try:
                L._env_flag("VMEM_TORCH_OFFLOAD", True); got.append("accepted")
            except ValueError:
                got.append("refused")
            print(got, L.offload_stats())
            """)
        self.assertEqual(out.strip(), "[True, True, True, False, False, False, 'refused'] "
                         "{'installed': False}")

    def test_a_cut_by_set_limit_pushes_the_offloads_hooks(self):
        # the offload over a stand-in torch, libvmem's own statistics reader
        out = run("""
            sys.path.append(%r)
            import libvmem_offload as off
            import test_offload as T
            _, o, _ = T.make(0)
            ag = T.FakeAutograd()
            o.switch = off.HookSwitch(ag, (o.hook_pack, o.hook_unpack))
            o.last_demand = 48 << 20  # the last step's device and host maximum
            off._off, off._read = o, off._stats_reader(L)
            L._offload = off
            L.set_limit("56M")
            print(len(ag.stack))
            L.set_limit("32M")
            print(len(ag.stack), off.stats()["hooks_on"])
            """ % HERE, VMEM_LIMIT="64M")
        self.assertEqual(out.split(), ["0", "1", "True"])

    def test_stats_spill_and_step_end(self):
        out = run("""
            lib = L.load()
            ps = [lib.vmem_torch_malloc(8 << 20, 0, None) for _ in range(6)]
            print(all(ps))
            L.step_end()
            s = L.stats()
            print(s["spills"] > 0, s["spilledBytes"] >= (8 << 20), s["steps"],
                  s["deviceMemUsedMax"] <= (32 << 20), s["hostMemUsedMax"] > 0)
            for p in ps:
                lib.vmem_torch_free(p, 8 << 20, 0, None)
            L.step_end(0)
            print(L.stats()["deviceInUse"], L.stats()["hostInUse"], L.stats()["steps"])
            """, VMEM_LIMIT="32M", VMEM_HOST_LIMIT="256M")
        lines = out.splitlines()
        self.assertEqual(lines[0], "True")
        self.assertEqual(lines[1], "True True 1 True True")
        self.assertEqual(lines[2], "0 0 2")

    def test_step_end_reports_the_garbage_collectors_time(self):
        # The first step end starts the count; a collection in the next step
        # is reported with its end (vmem_step_exclude), and the step after,
        # with none, reports 0.
        out = run("""
            import gc
            L.stats()  # the instance of device 0
            L.step_end()
            junk = [[i] for i in range(300000)]  # containers the collection walks
            gc.collect()
            L.step_end()
            print(L.stats()["miniBatchExcludedDuration"] > 0)
            L.step_end(0)
            print(L.stats()["miniBatchExcludedDuration"])
            print(len([c for c in gc.callbacks if c is L._gc_callback]))
            """)
        self.assertEqual(out.split(), ["True", "0", "1"])

    def test_step_hook_ends_a_step_when_the_grad_scaler_skips(self):
        # A fake torch: the optimizer post-step hooks, and a GradScaler whose
        # step runs optimizer.step() unless the gradients held inf (as
        # torch.amp.GradScaler does).  Every iteration must end one libvmem
        # step, skipped or not; remove_step_hook() restores the scaler.
        out = run("""
            import types
            hooks = []
            class Handle:
                def __init__(self, f): self.f = f
                def remove(self): hooks.remove(self.f)
            def register(f):
                hooks.append(f); return Handle(f)
            class Opt:
                def step(self):
                    for f in list(hooks): f(self, (), {})
            class GradScaler:
                def __init__(self): self.inf = False
                def step(self, optimizer, *args, **kwargs):
                    if not self.inf:
                        return optimizer.step()
            torch = types.ModuleType("torch")
            torch.optim = types.ModuleType("torch.optim")
            torch.optim.optimizer = types.ModuleType("torch.optim.optimizer")
            torch.optim.optimizer.register_optimizer_step_post_hook = register
            torch.amp = types.ModuleType("torch.amp")
            torch.amp.GradScaler = GradScaler
            for name, mod in (("torch", torch), ("torch.optim", torch.optim),
                              ("torch.optim.optimizer", torch.optim.optimizer),
                              ("torch.amp", torch.amp)):
                sys.modules[name] = mod
            orig = GradScaler.step
            L.install_step_hook()
            L.install_step_hook()  # idempotent: wraps once
            opt, sc = Opt(), GradScaler()
            steps = [L.stats()["steps"]]
            for inf in (True, True, False, True, False):
                sc.inf = inf
                sc.step(opt)
                steps.append(L.stats()["steps"])
            opt.step()  # an optimizer step without the scaler
            steps.append(L.stats()["steps"])
            L.remove_step_hook()
            sc.inf = True
            sc.step(opt)
            opt.step()
            steps.append(L.stats()["steps"])
            print(steps, GradScaler.step is orig, len(hooks))
            """)
        self.assertEqual(out.strip(), "[0, 1, 2, 3, 4, 5, 6, 6] True 0")

    def test_record_stream_keeps_a_freed_block_until_an_allocation_needs_it(self):
        # sim-vmm: a simulated stream's work never ends by itself, so the
        # freed block comes back only when the allocating stream "waits"
        out = run("""
            lib = L.load()
            a = lib.vmem_torch_malloc(4 << 20, 0, None)
            L.record_stream(a, 0x77)
            lib.vmem_torch_free(a, 4 << 20, 0, None)
            b = lib.vmem_torch_malloc(4 << 20, 0, None)
            s = L.stats()
            print(a != b, s["deferredWaitingBytes"] == 4 << 20, s["deviceInUse"] == 4 << 20)
            c = lib.vmem_torch_malloc(12 << 20, 0, None)  # needs a's memory too
            s = L.stats()
            print(s["deferredStreamWaits"], s["deferredWaitingBytes"], s["hostInUse"])
            try:
                L.record_stream(12345, 0x77)
            except L.VmemError as e:
                print("refused", e.status)
            """, VMEM_LIMIT="16M", VMEM_HOST_LIMIT="64M", VMEM_BACKEND="sim-vmm")
        self.assertEqual(out.split("\n")[:3], ["True True True", "1 0 0", "refused -4"])

    def test_copy_async_copies_on_a_simulated_device_and_refuses_overlap(self):
        out = run("""
            import ctypes
            lib = L.load()
            a = lib.vmem_torch_malloc(1 << 20, 0, None)
            b = lib.vmem_torch_malloc(1 << 20, 0, None)
            ctypes.memmove(a, b"libvmem" * 100, 700)
            L.copy_async(b + 3, a, 700, stream=0x77)
            print(ctypes.string_at(b + 3, 700) == b"libvmem" * 100)
            try:
                L.copy_async(a + 8, a, 64)
            except L.VmemError as e:
                print("refused", e.status)
            """, VMEM_BACKEND="sim")
        self.assertEqual(out.split("\n")[:2], ["True", "refused -1"])

    def test_step_naive_leaves_the_plan_of_the_step(self):
        # A repeating step over a 28 MiB limit: planned steps place blocks on
        # host by plan; a step told step_naive() places none by plan.
        out = run("""
            lib = L.load()
            def step():  # four activations, then a temporary per layer backward
                acts = [lib.vmem_torch_malloc(8 << 20, 0, None) for _ in range(4)]
                for a in reversed(acts):
                    t = lib.vmem_torch_malloc(8 << 20, 0, None)
                    lib.vmem_torch_free(t, 8 << 20, 0, None)
                    lib.vmem_torch_free(a, 8 << 20, 0, None)
                L.step_end()
            for _ in range(3):
                step()
            s0 = L.stats()
            L.step_naive()
            step()
            s1 = L.stats()
            print(s0["placedHostBytes"] > 0, s1["placedHostBytes"] == s0["placedHostBytes"],
                  s1["divergedSteps"] - s0["divergedSteps"], s1["spilledBytes"] > s0["spilledBytes"])
            """, VMEM_LIMIT="28M", VMEM_HOST_LIMIT="256M", VMEM_BACKEND="sim-vmm",
            VMEM_PLACEMENT="farthest")
        self.assertEqual(out.strip(), "True True 1 True")

    def test_bad_environment_and_bad_device(self):
        out = run("""
            for dev in (0, 99):
                try:
                    L.stats(dev); print("no error")
                except L.VmemError as e:
                    print(e.status)
            """, VMEM_LIMIT="lots")
        self.assertEqual(out.split(), ["-9", "-1"])  # VMEM_ERR_ENV, VMEM_ERR_INVALID

    def test_per_device_instances_and_stats_files(self):
        with tempfile.TemporaryDirectory() as d:
            run("""
                L.set_limit("16M", device=1)
                print(L.get_limit(0), L.get_limit(1))
                L.step_end()
                """, VMEM_LIMIT="64M", VMEM_STATS_FILE=os.path.join(d, "stats-%d.json"))
            self.assertEqual(sorted(os.listdir(d)), ["stats-0.json", "stats-1.json"])

    def test_cupy_entry_points(self):
        out = run("""
            lib = L.load()
            p = lib.vmem_cupy_malloc(None, 1 << 20, 0)
            print(bool(p), L.stats()["deviceInUse"])
            lib.vmem_cupy_free(None, p, 0)
            print(L.stats()["deviceInUse"], L.stats()["badFrees"])
            print(lib.vmem_cupy_malloc(None, 0, 0))
            """)
        self.assertEqual(out.splitlines(), ["True %d" % MiB, "0 0", "None"])

    def test_torch_stream_reuse(self):
        # A block freed on stream A is reused at once by A, not by B while the
        # arena can still grow.
        out = run("""
            lib = L.load()
            A, B = 0x1000, 0x2000
            a0 = lib.vmem_torch_malloc(1 << 20, 0, A)
            b0 = lib.vmem_torch_malloc(1 << 20, 0, B)
            lib.vmem_torch_free(a0, 1 << 20, 0, A)
            b1 = lib.vmem_torch_malloc(1 << 20, 0, B)
            a1 = lib.vmem_torch_malloc(1 << 20, 0, A)
            print(b1 != a0, a1 == a0)
            """)
        self.assertEqual(out.strip(), "True True")


if __name__ == "__main__":
    unittest.main(verbosity=2)
