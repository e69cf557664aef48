#!/usr/bin/env bash
# Issue 7 on a real GPU: the vmm backend's suite, its costs against the
# targets, and the replay of the shared traces with vmm.  Runs unattended;
# logs and JSON under $OUT; prints a short summary table last.
#
# Through the lead's runner (builds build-gpu/ here, carries it):
#   scripts/gpu-run.sh device scripts/gpu/vmm-bench.sh
# Standalone on the GPU machine (builds build-vmm-gpu/ if nothing is built):
#   OUT=/tmp/vmm bash scripts/gpu/vmm-bench.sh
# Environment: BUILD (meson build dir with CUDA, default build-gpu),
# TRACES (directory of *.txt.gz; default: the first of .carry/traces,
# ../shared/traces, shared/traces that has some), SHRINK_GIB (8), MOVE_GIB (4).
#
# Measured (targets from issue 7):
#   gpu-vmm suite                 kernels on spilled/evicted/returned blocks
#   shrink of 8 GiB free granules < 100 ms (scattered and one run); "path" lines
#                                 say which handles ran (64 MiB+2 MiB or 2 MiB only)
#   host -> device migration      >= 25 GB/s (cudaMemcpy pinned->device shown)
#   variants                      each table line names its variant: the shrinks
#                                 with device handles 64 MiB and 2 MiB, the moves
#                                 with device/host handles 64/2, 64/64 and 2/64 MiB;
#                                 the path lines add where the backend's time went
#   --find-min-limit, vmm/sim-vmm min_limit_ratio <= 1.03 on every trace
#   warm replay ns/op with vmm    (issue 3's targets: see docs/benchmarks.md)
#   shrink on the traces          vmem-shrink-trace --backend vmm: 16 cuts per trace to
#                                 the live granules (fragmentation of the real jobs)
#   driver probe                  vmm-driver-probe: microseconds per VMM driver call
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-vmm}"
mkdir -p "$OUT"
SHRINK_GIB=${SHRINK_GIB:-8}
MOVE_GIB=${MOVE_GIB:-4}

BUILD=${BUILD:-build-gpu}
if [ ! -x "$BUILD/tests/gpu/vmm-bench" ] || [ ! -x "$BUILD/bench/vmem-replay" ]; then
    BUILD=build-vmm-gpu
    echo "vmm-bench: building $BUILD (log: $OUT/build.log)"
    export PATH="/usr/local/cuda/bin:$PATH"
    if ! { [ -f "$BUILD/build.ninja" ] ||
           meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release -Db_ndebug=false; } \
            >"$OUT/build.log" 2>&1 || ! ninja -C "$BUILD" >>"$OUT/build.log" 2>&1; then
        tail -20 "$OUT/build.log"
        echo "vmm-bench: build failed"
        exit 2
    fi
fi
# C binaries need the carried Criterion etc. when run through gpu-run.sh.
RUN_LD=${VMEM_TEST_LD:-${LD_LIBRARY_PATH:-}}
run() { LD_LIBRARY_PATH="$RUN_LD" "$@"; }

if [ -z "${TRACES:-}" ]; then
    for d in .carry/traces ../shared/traces shared/traces; do
        if ls "$d"/*.txt.gz >/dev/null 2>&1; then TRACES=$d; break; fi
    done
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader \
    | tee "$OUT/gpu.txt"
summary=()

# 1. The GPU suite, one test at a time: tests compare cudaMemGetInfo before
# and after, which parallel test processes would disturb.
if run "$BUILD/tests/gpu/test_vmm" --jobs 1 --verbose >"$OUT/test_vmm.log" 2>&1; then
    summary+=("gpu-vmm suite: $(grep -m1 Synthesis "$OUT/test_vmm.log" | sed 's/.*Synthesis: //')")
else
    summary+=("gpu-vmm suite: FAILED ($(grep -m1 Synthesis "$OUT/test_vmm.log" | sed 's/.*Synthesis: //'))")
fi
grep -E '\[(FAIL|SKIP)|vmm granule|Assert' "$OUT/test_vmm.log" | head -20

# 2. Costs.
run "$BUILD/tests/gpu/vmm-bench" "$SHRINK_GIB" "$MOVE_GIB" >"$OUT/vmm-bench.json" 2>"$OUT/vmm-bench.err"
bench_rc=$?
cat "$OUT/vmm-bench.err"
sed -n '/^vmm-bench /,$p' "$OUT/vmm-bench.json"

# 3. The traces: min limit with vmm and sim-vmm, warm ns/op with vmm.
replay_rows=()
if [ -n "${TRACES:-}" ]; then
    for backend in vmm sim-vmm; do
        run "$BUILD/bench/vmem-replay" --backend "$backend" --find-min-limit "$TRACES"/*.txt.gz \
            >"$OUT/replay-$backend.json" 2>"$OUT/replay-$backend.err" ||
            summary+=("vmem-replay --backend $backend: FAILED (see replay-$backend.err)")
    done
    replay_rows=("$(python3 scripts/gpu/vmm_tables.py replay "$OUT/replay-vmm.json" "$OUT/replay-sim-vmm.json")")
else
    summary+=("traces: none found (set TRACES)")
fi

# 4. Shrinks on the fragmentation of the real jobs: at 16 points of each
# trace the limit is cut to the granules its live blocks touch (vmm), and the
# driver's cost per call, which bounds the scattered case.
shrink_rows=()
if [ -n "${TRACES:-}" ]; then
    for t in "$TRACES"/*.txt.gz; do
        name=$(basename "$t" .txt.gz)
        if ! run "$BUILD/bench/vmem-shrink-trace" --backend vmm --points 16 "$t" \
                >"$OUT/shrink-trace-$name.json" 2>"$OUT/shrink-trace-$name.err"; then
            summary+=("vmem-shrink-trace $name: FAILED (see shrink-trace-$name.err)")
        fi
        shrink_rows+=("$(python3 scripts/gpu/vmm_tables.py shrink "$OUT/shrink-trace-$name.json")")
    done
fi
run "$BUILD/tests/gpu/vmm-driver-probe" 2048 4 >"$OUT/driver-probe.json" 2>&1 ||
    summary+=("vmm-driver-probe: FAILED")

echo "===== vmm summary ($(cut -d, -f1 "$OUT/gpu.txt"))"
printf '%s\n' "${summary[@]}"
echo
sed -n '/^vmm-bench /,$p' "$OUT/vmm-bench.json"
[ $bench_rc -eq 0 ] || echo "vmm-bench exit $bench_rc"
if [ ${#replay_rows[@]} -gt 0 ]; then
    echo
    printf '%-9s %-24s %9s %9s %10s %7s\n' backend trace ns/op frag min_ratio "<=1.03"
    printf '%s\n' "${replay_rows[@]}"
fi
if [ ${#shrink_rows[@]} -gt 0 ]; then
    echo
    printf '%-22s %3s %9s %9s %8s %10s %9s %6s\n' "shrink on traces" pts GiB ms ms/GiB \
        "max GiB" "its ms" "<100ms"
    printf '%s\n' "${shrink_rows[@]}"
fi
echo
python3 scripts/gpu/vmm_tables.py probe "$OUT/driver-probe.json"
[ $bench_rc -eq 0 ] && ! printf '%s\n' "${summary[@]}" | grep -q FAILED
