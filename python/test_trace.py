"""Checks libvmem_trace (PyTorch memory snapshot -> libvmem trace) on
synthetic snapshots, with no GPU and no PyTorch, and replays what it writes
with vmem-replay.

    python3 python/test_trace.py [VMEM_REPLAY]

VMEM_REPLAY: the vmem-replay binary (default: build/bench/vmem-replay, or
with LIBVMEM_TEST_INSTALLED=1 the one on PATH).  With LIBVMEM_TEST_INSTALLED=1
the installed modules and the vmem-snapshot2trace command are tested, not the
source tree's.
"""

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALLED = os.environ.get("LIBVMEM_TEST_INSTALLED") == "1"
if INSTALLED:  # python puts this file's directory first on sys.path: take it off
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
else:
    sys.path.insert(0, HERE)
import libvmem_trace as T  # noqa: E402

REPLAY = None


def ev(action, addr, size, t, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
            "frames": []}


def snapshot():
    """Two devices; device 1 has the job.  Covers: a free of a block from
    before the history (dropped), alloc / free_requested / free_completed,
    a second stream, segment events (dropped), an address handed out again
    without a recorded free (implied free), a block live at the end."""
    d1 = [
        ev("free_completed", 0x9000, 512, 99),           # allocated before the history
        ev("segment_alloc", 0x1000, 2 << 20, 100),
        ev("alloc", 0x1000, 1000, 100),
        ev("alloc", 0x2000, 4096, 101, stream=0x7f00aa),
        ev("free_requested", 0x1000, 1000, 102),
        ev("free_completed", 0x1000, 1000, 103),
        ev("alloc", 0x1000, 3000, 104),
        ev("alloc", 0x3000, 8192, 105, stream=0x7f00bb),
        ev("alloc", 0x1000, 500, 106),                   # 0x1000 again: implied free of 3000
        ev("free_requested", 0x3000, 8192, 107),
        ev("free_completed", 0x3000, 8192, 110),
        ev("segment_free", 0x1000, 2 << 20, 111),
    ]
    d0 = [ev("alloc", 0x5000, 256, 50)]
    return {"segments": [], "device_traces": [d0, d1]}


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_trace(path):
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()
    assert lines[0].startswith("# "), lines[0]
    return json.loads(lines[0][2:]), lines[1:]


class Convert(unittest.TestCase):
    def test_events(self):
        lines, info = T.convert(snapshot())
        self.assertEqual(info["device"], 1)  # the device with the most allocations
        self.assertEqual(lines, [
            "a 0 1000 0 100",
            "a 1 4096 1 101",
            "f 0 103",
            "a 2 3000 0 104",
            "a 3 8192 2 105",
            "f 2 106",
            "a 4 500 0 106",
            "f 3 110",
        ])
        self.assertEqual(info["allocs"], 5)
        self.assertEqual(info["frees"], 2)
        self.assertEqual(info["implied_frees"], 1)
        self.assertEqual(info["unknown_frees"], 1)
        self.assertEqual(info["other_events"], 4)  # 2 segment + 2 free_requested
        self.assertEqual(info["live_at_end"], 2)
        self.assertEqual(info["streams"], 3)
        self.assertEqual(info["peak_live"], 4096 + 3000 + 8192)

    def test_free_at_requested(self):
        lines, info = T.convert(snapshot(), free_at="requested")
        self.assertIn("f 0 102", lines)
        self.assertIn("f 3 107", lines)
        self.assertEqual(info["unknown_frees"], 0)  # the stray free was a free_completed

    def test_device_choice(self):
        lines, info = T.convert(snapshot(), device=0)
        self.assertEqual(lines, ["a 0 256 0 50"])
        with self.assertRaises(ValueError):
            T.convert(snapshot(), device=2)

    def test_insert_steps(self):
        lines = ["a 0 10 0 100", "a 1 10 0 105", "f 0 110", "f 1 120"]
        self.assertEqual(T.insert_steps(lines, [50, 107, 110, 200]),
                         ["a 0 10 0 100", "a 1 10 0 105", "s 107", "f 0 110", "s 110",
                          "f 1 120"])

    def test_no_history_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "_record_memory_history"):
            T.convert({"segments": [], "device_traces": [[]]})


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vmem-trace-test.")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def cli(self, *args):
        if INSTALLED:
            cmd = [shutil.which("vmem-snapshot2trace") or "vmem-snapshot2trace"]
        else:
            cmd = [sys.executable, os.path.join(HERE, "libvmem_trace.py")]
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)

    def test_cli_writes_a_trace_vmem_replay_reads(self):
        snap = os.path.join(self.dir, "job.pickle")
        with open(snap, "wb") as f:
            pickle.dump(snapshot(), f)
        r = self.cli(snap, "--workload", "synthetic")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = os.path.join(self.dir, "job.txt.gz")
        self.assertIn("5 allocations", r.stdout)
        self.assertIn("1 frees of blocks allocated before the history", r.stdout)
        header, lines = read_trace(out)
        self.assertEqual(header["workload"], "synthetic")
        self.assertEqual(header["allocs"], 5)
        self.assertEqual(len(lines), 8)
        # the same input gives the same bytes
        first = read_bytes(out)
        self.assertEqual(self.cli(snap, "--workload", "synthetic").returncode, 0)
        self.assertEqual(read_bytes(out), first)
        if REPLAY is None:
            self.skipTest("no vmem-replay given")
        rr = subprocess.run([REPLAY, "--backend", "sim", out], capture_output=True, text=True,
                            timeout=60)
        self.assertEqual(rr.returncode, 0, rr.stderr)
        res = json.loads(rr.stdout.splitlines()[0])
        self.assertEqual(res["ops"], 5 + 3)
        self.assertEqual(res["peak_live"], header["peak_live"])
        self.assertEqual(res["failed_allocs"], 0)

    def test_step_lines_replay(self):
        if REPLAY is None:
            self.skipTest("no vmem-replay given")
        lines = ["a 0 1000 0 100", "a 1 2000 0 101", "f 0 102", "f 1 103",
                 "a 2 1000 0 104", "a 3 2000 0 105", "f 2 106", "f 3 107"]
        out = os.path.join(self.dir, "steps.txt.gz")
        T.write_trace(out, T.insert_steps(lines, [103, 107]), {"workload": "steps"})
        rr = subprocess.run([REPLAY, "--backend", "sim", "--repeat", "1", out],
                            capture_output=True, text=True, timeout=60)
        self.assertEqual(rr.returncode, 0, rr.stderr)
        self.assertEqual(json.loads(rr.stdout.splitlines()[0])["ops"], 8)

    def test_json_and_gzip_snapshots(self):
        snap = os.path.join(self.dir, "job.json.gz")
        with gzip.open(snap, "wt") as f:
            json.dump(snapshot(), f)
        out = os.path.join(self.dir, "out.txt")
        r = self.cli(snap, "-o", out, "--device", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            self.assertEqual(f.read().splitlines()[1:], ["a 0 256 0 50"])

    def test_refuses_pickles_with_code(self):
        snap = os.path.join(self.dir, "evil.pickle")
        with open(snap, "wb") as f:
            pickle.dump({"device_traces": [[]], "x": os.system}, f)
        r = self.cli(snap)
        self.assertEqual(r.returncode, 1)
        self.assertIn("only plain data", r.stderr)

    def test_bad_inputs_exit_1_with_a_message(self):
        missing = os.path.join(self.dir, "missing.pickle")
        r = self.cli(missing)
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing.pickle", r.stderr)
        junk = os.path.join(self.dir, "junk.pickle")
        with open(junk, "wb") as f:
            f.write(b"not a pickle at all")
        r = self.cli(junk)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a PyTorch memory snapshot", r.stderr)
        notsnap = os.path.join(self.dir, "list.pickle")
        with open(notsnap, "wb") as f:
            pickle.dump({"segments": []}, f)
        r = self.cli(notsnap)
        self.assertEqual(r.returncode, 1)
        self.assertIn("device_traces", r.stderr)

    def test_bad_arguments_exit_2(self):
        r = self.cli()
        self.assertEqual(r.returncode, 2)
        r = self.cli("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("exit status", r.stdout)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        REPLAY = sys.argv.pop(1)
    elif INSTALLED:
        REPLAY = shutil.which("vmem-replay")
    else:
        cand = os.path.join(HERE, "..", "build", "bench", "vmem-replay")
        REPLAY = cand if os.path.exists(cand) else None
    unittest.main()
