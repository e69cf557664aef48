#!/usr/bin/env bash
# Issue 15 diagnostic: is the high-priority job slower beside an idle second
# process, or under the pair's budget as its limit?  Three runs of
# examples/two_jobs/run_pair.py, the high-priority job's median step time per
# phase of each:  hp-alone at 64G (two-jobs.sh's), hp-alone at the pair's
# budget, and hp-opp-idle (the opportunistic job warmed up, then suspended).
#   scripts/gpu-run.sh device scripts/gpu/two-jobs-diag.sh
# Knobs: TWO_JOBS_BUDGET (6174015488, run 4/5's), TWO_JOBS_HP_PHASES, TWO_JOBS_DIAG_RUNS.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-two-jobs-diag}" "${BUILD:=build-gpu}"
: "${VMEM_LIBRARY:=$PWD/$BUILD/src/libvmem.so.0}"
export VMEM_LIBRARY
export LD_LIBRARY_PATH="$(dirname "$VMEM_LIBRARY"):$PWD/$BUILD/carry-cuda:${LD_LIBRARY_PATH:-}"
budget=${TWO_JOBS_BUDGET:-6174015488}
phases=${TWO_JOBS_HP_PHASES:-32:120,96:120,192:120}
for run in ${TWO_JOBS_DIAG_RUNS:-hp-alone:64G hp-alone:$budget hp-opp-idle:$budget hp-alone:64G}; do
    cfg=${run%%:*} b=${run#*:}
    out="$OUT/$cfg-$b-$RANDOM"
    python3 examples/two_jobs/run_pair.py --config "$cfg" --out "$out" --budget "$b" --mode torch \
        --hp-phases "$phases" --opp-batch 96 --model resnet50 --vmemctl "$BUILD/tools/vmemctl" \
        --hp-max-seconds 35 >"$out.log" 2>&1
    python3 - "$out/summary.json" "$cfg" "$b" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ph = s["hp"]["phases"]
print("%-12s budget %-11s hp median ms per phase: %s  (exit %s)" % (
    sys.argv[2], sys.argv[3], " ".join("%.1f" % (p["median_step_s"] * 1e3) for p in ph), s["exit"]))
PY
done
