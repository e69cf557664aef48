#!/usr/bin/env bash
# Forty-third session, call 5: the rule trials with Python's garbage collections left out
# (vmem_step_exclude, reported by libvmem.step_end()): GPT-2 cut to 75% and 50% with the
# defaults, three runs (each a new process pair with its own full step), and ResNet-50 once.
# Printed per run: the table row, and per cut step the rule in force, the step's time, its
# host bytes and the collector's time in it.
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25k/call5.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
run() { # name, jobs
    env OUT=$ROOT/$1 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 \
        CUT_JOBS=$2 CUT_RAISED=2 timeout 200 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$1.log" 2>&1
    echo "== $1 rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$1.log"
    python3 - "$ROOT/cut-bench-$1.log" <<'PY'
import re, sys
step = None
for line in open(sys.argv[1]):
    m = re.match(r"^(\w+) planned\+offload (cut\d+) +(\d+) +([\d.]+) ms .*?host ([\d.]+) GB .*?; (\w+) swap", line)
    if m:
        step = m.groups()
        continue
    g = re.search(r"garbage collector (\d+) runs, ([\d.]+) ms", line)
    if g and step:
        print("%s %s step %2s %8s ms  host %5s GB  rule %-9s gc %s runs %7s ms" % (step[:5] + step[5:] + g.groups()))
        step = None
PY
}
for r in 1 2 3; do run gpt2-$r gpt2; done
run resnet50 resnet50
gzip -f "$ROOT"/*.log
