#!/usr/bin/env bash
# Records allocation traces of jobs the policies were not tuned on
# (scripts/gpu/record_jobs.py --list), each run twice under PyTorch's own
# allocator: default, then expandable segments.  The default run's trace is
# kept in $OUT/traces; both runs' peak_reserved / peak_allocated go to
# $OUT/peaks.jsonl (PyTorch's held / live on the real job).  With
# RECORD_COMPARE=1, bench/compare-gpu.sh then replays the new traces
# (libvmem cuda and vmm, PyTorch default and expandable, same run).
#
# Through the lead's runner:   scripts/gpu-run.sh device scripts/gpu/record-jobs.sh
# Standalone on a GPU machine: OUT=/tmp/rj BUILD=build bash scripts/gpu/record-jobs.sh
# Environment: RECORD_JOBS (default: all), RECORD_COMPARE (default 0).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-record-jobs}"
mkdir -p "$OUT/traces" "$OUT/expandable"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
read -r -a jobs <<<"${RECORD_JOBS:-$(python3 scripts/gpu/record_jobs.py --list | awk '{print $1}' | tr '\n' ' ')}"
fail=0
: >"$OUT/peaks.jsonl"
for job in "${jobs[@]}"; do
    env -u PYTORCH_CUDA_ALLOC_CONF python3 scripts/gpu/record_jobs.py "$OUT/traces" "$job" \
        2>>"$OUT/record.err" | tee -a "$OUT/peaks.jsonl" || fail=1
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 scripts/gpu/record_jobs.py \
        "$OUT/expandable" "$job" 2>>"$OUT/record.err" | tee -a "$OUT/peaks.jsonl" || fail=1
done
rm -rf "$OUT/expandable"
ls -l "$OUT/traces"
if [ "${RECORD_COMPARE:-0}" = 1 ]; then
    OUT="$OUT/compare" bash bench/compare-gpu.sh "$OUT/traces" >"$OUT/compare.log" 2>&1 || fail=1
    tail -40 "$OUT/compare.log"
fi
python3 - "$OUT/peaks.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("%-10s %-8s %10s %10s %8s" % ("job", "alloc", "live MiB", "held MiB", "held/live"))
for r in rows:
    kind = "expand" if "expandable" in r.get("alloc_conf", "") else "default"
    if "error" in r:
        print("%-10s %-8s ERROR %s" % (r["job"], kind, r["error"][:80]))
        continue
    print("%-10s %-8s %10.1f %10.1f %8.3f" % (r["job"], kind, r["peak_allocated"] / 2**20,
          r["peak_reserved"] / 2**20, r["reserved_over_allocated"]))
PY
exit $fail
