#!/usr/bin/env bash
# Issue 14: the device arena at its peak held, with vmm and sim-vmm side by side
# (vmem-arena-peak, docs/benchmarks.md "Held over live"), so that what sim-vmm
# shows here can be checked against the real backend.  Logs under $OUT.
#
# Through the lead's runner (builds build-gpu/ here, carries it):
#   scripts/gpu-run.sh device scripts/gpu/arena-peak.sh
# Environment: BUILD (default build-gpu), TRACES (directory of *.txt.gz; default
# .carry/traces), MIN_CHUNK (free/live chunks listed from this size, default 16M).
# What to look for: per trace the first line (peak held, event, held/live) must
# be the same for vmm and sim-vmm, and so must the FREE lines at the peak.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-arena-peak}"
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
TRACES=${TRACES:-.carry/traces}
MIN_CHUNK=${MIN_CHUNK:-16M}
rc=0
for t in "$TRACES"/*.txt.gz; do
    n=$(basename "$t" .txt.gz)
    for b in vmm sim-vmm; do
        "$BUILD/bench/vmem-arena-peak" --backend "$b" --min-chunk "$MIN_CHUNK" "$t" \
            > "$OUT/$n-$b.txt" 2>&1 || rc=1
    done
    if diff <(sed 1d "$OUT/$n-vmm.txt" | sed 's/on vmm/on X/') \
            <(sed 1d "$OUT/$n-sim-vmm.txt" | sed 's/on sim-vmm/on X/') > "$OUT/$n.diff"; then
        echo "$n: vmm and sim-vmm agree at the peak: $(head -1 "$OUT/$n-vmm.txt")"
    else
        echo "$n: vmm and sim-vmm DIFFER at the peak (see $n.diff): $(head -1 "$OUT/$n-vmm.txt")"
    fi
done
exit $rc
