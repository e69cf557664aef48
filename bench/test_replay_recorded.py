#!/usr/bin/env python3
"""The recorder and its replay (src/recorder.c, bench/replay_recorded.py):
a job run on sim-vmm with VMEM_TRACE_FILE set, its limit cut after two
steps, is written as a trace that vmem-replay accepts, and
replay_recorded.py replays it step by step with the cut where it was made.

    test_replay_recorded.py VMEM_REPLAY LIBVMEM_SO REPLAY_RECORDED_PY
"""
import json
import os
import subprocess
import sys
import tempfile

MiB = 1 << 20
# A step: 24 activations of 8 MiB kept to the end, a 96 MiB block made
# while half of them are live, temporaries between; the cut to 200 MiB
# leaves the activations' freed memory in pieces when the large block comes.
JOB = r"""
import ctypes, sys
sys.path.insert(0, %(py)r)
import libvmem as L
lib = L.load()
M = 1 << 20
def step():
    acts = []
    for k in range(24):
        acts.append(lib.vmem_torch_malloc(8 * M, 0, None))
        t = lib.vmem_torch_malloc((k %% 3 + 1) * M, 0, None)
        lib.vmem_torch_free(t, 0, 0, None)
        if k %% 2:
            lib.vmem_torch_free(acts.pop(0), 0, 0, None)
        if k == 12:
            big = lib.vmem_torch_malloc(96 * M, 0, None)
            lib.vmem_torch_free(big, 0, 0, None)
    for a in acts:
        lib.vmem_torch_free(a, 0, 0, None)
    L.step_end()
for s in range(6):
    if s == 2:
        L.set_limit(200 * M)
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
        assert [x[:3] for x in limits] == [["#", "limit", str(200 * MiB)]], limits
        # vmem-replay takes the file as it is
        out = subprocess.run([replay, "--backend", "sim-vmm", "--repeat", "1", trace],
                             capture_output=True, text=True, check=True).stdout
        j = json.loads(out.splitlines()[0])
        assert j["steps"] == 5 and j["steps_source"] == "marks", j
        assert j["allocs"] == j["frees"] == 6 * (24 + 24 + 1), j
        # the replay applies the cut where it was made
        env = dict(os.environ, VMEM_LIBRARY=libso, VMEM_BACKEND="sim-vmm",
                   VMEM_SIM_CAPACITY="4G", VMEM_LOG_LEVEL="error")
        env.pop("VMEM_TRACE_FILE", None)
        out = subprocess.run([sys.executable, tool, "--json", trace], env=env,
                             capture_output=True, text=True, check=True).stdout
        rows = [json.loads(x) for x in out.splitlines()]
        assert len(rows) == 6, out
        assert all(r["limit"] > 200 * MiB for r in rows[:2]), rows[:2]
        assert all(r["limit"] == 200 * MiB for r in rows[2:]), rows[2:]
        assert all(r["device_held"] <= 200 * MiB for r in rows[2:]), rows[2:]
        assert all(r["failed"] == 0 for r in rows), rows
    print("replay-recorded OK")


if __name__ == "__main__":
    main()
