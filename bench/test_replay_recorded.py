#!/usr/bin/env python3
"""The recorder and its replay (src/recorder.c, bench/replay_recorded.py):
a job run on sim-vmm with VMEM_TRACE_FILE set, its limit cut after two
steps, is written as a trace that vmem-replay accepts, and
replay_recorded.py replays it step by step with the cut where it was made,
the cut steps' remaps and the allocation they were for included, and its
--addresses finds where a replay places blocks elsewhere than the run did.

    test_replay_recorded.py VMEM_REPLAY LIBVMEM_SO REPLAY_RECORDED_PY
"""
import json
import os
import subprocess
import sys
import tempfile

MiB = 1 << 20
# A step: sixteen 8 MiB blocks, every other one freed (64 MiB free in
# pieces), then a 48 MiB block.  Cut to 136 MiB after two steps, the large
# block finds no free range that holds it: the arena moves pieces (remaps).
JOB = r"""
import sys
sys.path.insert(0, %(py)r)
import libvmem as L
lib = L.load()
M = 1 << 20
def step():
    b = [lib.vmem_torch_malloc(8 * M, 0, None) for _ in range(16)]
    for p in b[0::2]:
        lib.vmem_torch_free(p, 0, 0, None)
    big = lib.vmem_torch_malloc(48 * M, 0, None)
    lib.vmem_torch_free(big, 0, 0, None)
    for p in b[1::2]:
        lib.vmem_torch_free(p, 0, 0, None)
    L.step_end()
for s in range(6):
    if s == 2:
        L.set_limit(136 * M)
    step()
"""


def main():
    replay, libso, tool = sys.argv[1:4]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "job-%d.txt")
        env = dict(os.environ, VMEM_LIBRARY=libso, VMEM_BACKEND="sim-vmm",
                   VMEM_TRACE_FILE=path, VMEM_SIM_CAPACITY="4G", VMEM_LOG_LEVEL="error")
        subprocess.run([sys.executable, "-c", JOB % {"py": os.path.join(root, "python")}],
                       env=env, check=True)
        trace = os.path.join(d, "job-0.txt")
        lines = open(trace).read().splitlines()
        assert lines[0].startswith("# {"), lines[0]
        assert sum(1 for x in lines if x.startswith("s ")) == 6, "six step lines"
        limits = [x.split() for x in lines if x.startswith("# limit ")]
        assert [x[:3] for x in limits] == [["#", "limit", str(136 * MiB)]], limits
        # vmem-replay takes the file as it is
        out = subprocess.run([replay, "--backend", "sim-vmm", "--repeat", "1", trace],
                             capture_output=True, text=True, check=True).stdout
        j = json.loads(out.splitlines()[0])
        assert j["steps"] == 5 and j["steps_source"] == "marks", j
        assert j["allocs"] == j["frees"] == 6 * 17, j
        # the replay applies the cut where it was made
        env = dict(os.environ, VMEM_LIBRARY=libso, VMEM_BACKEND="sim-vmm",
                   VMEM_SIM_CAPACITY="4G", VMEM_LOG_LEVEL="error")
        env.pop("VMEM_TRACE_FILE", None)

        def tool_out(env, *flags):
            return subprocess.run([sys.executable, tool, *flags, trace], env=env,
                                  capture_output=True, text=True, check=True).stdout

        # (--addresses adds its counts to the same rows: one replay serves both checks)
        out = tool_out(env, "--json", "--addresses")
        rows = [json.loads(x) for x in out.splitlines()]
        assert len(rows) == 6, out
        assert all(r["limit"] > 136 * MiB for r in rows[:2]), rows[:2]
        assert all(r["limit"] == 136 * MiB for r in rows[2:]), rows[2:]
        assert all(r["device_held"] <= 136 * MiB for r in rows[2:]), rows[2:]
        assert all(r["failed"] == 0 for r in rows), rows
        assert all(r["deviceRemaps"] == 0 for r in rows[:2]), rows[:2]
        assert all(r["deviceRemaps"] > 0 for r in rows[3:]), rows[3:]
        # --addresses: replayed as recorded, every block lands at its recorded offset
        assert [r["other_offset"] for r in rows] == [0] * 6, rows
        assert all(r["first_other"] is None for r in rows), rows
        # --why names the allocation that remapped: the 48 MiB block, 17th of its step
        out = tool_out(env, "--why")
        why = [x for x in out.splitlines() if "remapped for it" in x]
        assert why and all(" allocation 17 of 0.050 GB" in x for x in why), out
        # replayed without remaps (releases instead), the cut steps' offsets differ
        env_off = dict(env, VMEM_REMAP="0")
        rows = [json.loads(x) for x in tool_out(env_off, "--json", "--addresses").splitlines()]
        assert [r["other_offset"] for r in rows[:2]] == [0, 0], rows
        assert sum(r["other_offset"] for r in rows[2:]) > 0, rows
        diverged = next(r for r in rows if r["other_offset"])
        assert diverged["first_other"][0] >= 1 and diverged["first_other"][1] > 0, diverged
        out = tool_out(env_off, "--addresses")
        assert "at another offset than recorded (first: allocation" in out, out
    print("replay-recorded OK")


if __name__ == "__main__":
    main()
