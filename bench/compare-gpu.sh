#!/usr/bin/env bash
# Side by side on a real GPU, in one run: every trace of a directory replayed
# through libvmem (cuda backend, and vmm where it works), PyTorch's caching
# allocator (C++ API, with and without expandable segments), cudaMallocAsync
# on the default pool (release threshold UINT64_MAX) and cudaMalloc, all by
# the same replay method (bench/replay.h).  Writes the table into
# docs/benchmarks.md (between the gpu-compare markers) and under $OUT.
#
#   bench/compare-gpu.sh [TRACES_DIR]
#
# TRACES_DIR: default $TRACES, else the first of ../shared/traces,
# shared/traces, .carry/traces that holds *.txt.gz.  Environment:
#   OUT            logs and results (default build-compare/out)
#   BUILD          meson build dir with CUDA (default build-gpu; configured
#                  and built here if bench/vmem-replay is missing)
#   REPEAT         timed passes after one warm-up (default 5)
#   MALLOC_REPEAT  the same for plain cudaMalloc, which is slow (default 2)
#   PYTHON         python with torch (default python3)
# Prints a short summary table last.  Exit 0 when every replayer ran.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export PATH="/usr/local/cuda/bin:$PATH"

OUT=${OUT:-$REPO/build-compare/out}
BUILD=${BUILD:-build-gpu}
REPEAT=${REPEAT:-5}
MALLOC_REPEAT=${MALLOC_REPEAT:-2}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
NOTES=()
status=0

note() { NOTES+=("$*"); echo "compare-gpu: $*" >&2; }

# ---------------------------------------------------------------- traces
TDIR=${1:-${TRACES:-}}
if [ -z "$TDIR" ]; then
    for d in ../shared/traces shared/traces .carry/traces; do
        if compgen -G "$d/*.txt.gz" >/dev/null; then TDIR=$d; break; fi
    done
fi
if [ -z "$TDIR" ] || ! compgen -G "$TDIR/*.txt.gz" >/dev/null; then
    echo "compare-gpu: no *.txt.gz traces in '${TDIR:-(none found)}'" >&2
    exit 2
fi
mapfile -t TRACE_FILES < <(ls "$TDIR"/*.txt.gz | sort)
echo "traces: ${TRACE_FILES[*]}"

GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
GPU=${GPU:-unknown GPU}
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "gpu: $GPU (driver ${DRIVER:-?})"

# ---------------------------------------------------------------- builds
# CUDA_HOME (default: nvcc's toolkit), TORCH_BIN and build_torch (used below)
# shellcheck source=bench/torch-replay-build.sh
. bench/torch-replay-build.sh
export LD_LIBRARY_PATH="$REPO/$BUILD/src:${LD_LIBRARY_PATH:-}:$CUDA_HOME/lib64"

if [ ! -x "$BUILD/bench/vmem-replay" ] || [ ! -x "$BUILD/bench/cuda-replay" ]; then
    {
        if [ ! -f "$BUILD/build.ninja" ]; then
            meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release -Dtests=false
        fi
        ninja -C "$BUILD" bench/vmem-replay bench/cuda-replay
    } >"$OUT/build-libvmem.log" 2>&1 || note "libvmem build failed (build-libvmem.log)"
fi

TORCH_VERSION=?
build_torch >"$OUT/build-torch.log" 2>&1 || note "torch-replay did not build (build-torch.log)"

# ---------------------------------------------------------------- runs
# run NAME TIMEOUT CMD...: appends the JSON lines to results, the rest to NAME.log
run() {
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*" | tee -a "$OUT/runs.log"
    timeout "$limit" "$@" >"$OUT/$name.jsonl" 2>"$OUT/$name.log"
    local rc=$?
    cat "$OUT/$name.jsonl" >>"$RESULTS"
    tail -5 "$OUT/$name.log" | sed "s/^/   $name: /"
    return $rc
}

# legacy NAME BACKEND: the same replay with the growth policy before issue 14
# (VMEM_GROWTH=legacy VMEM_TRIM=off) and without its block layout
# (VMEM_LAYOUT=off), rows labelled libvmem-BACKEND-legacy, so that one run
# shows before and after (docs/benchmarks.md).
legacy() {
    run "$1" 300 env VMEM_GROWTH=legacy VMEM_TRIM=off VMEM_LAYOUT=off "$BUILD/bench/vmem-replay" --backend "$2" \
        --repeat "$REPEAT" "${TRACE_FILES[@]}" || { note "$1: exit $? ($1.log)"; status=1; }
    # the lines already went into results: relabel them there
    sed -i "/\"allocator\"/! s/\"backend\": \"$2\"/\"allocator\": \"libvmem-$2-legacy\", &/" "$RESULTS"
}

if [ -x "$BUILD/bench/vmem-replay" ]; then
    legacy libvmem-cuda-legacy cuda
    run libvmem-cuda 300 "$BUILD/bench/vmem-replay" --backend cuda --repeat "$REPEAT" "${TRACE_FILES[@]}" ||
        { note "libvmem cuda backend: exit $? (libvmem-cuda.log)"; status=1; }
    # vmm: probe first; skip with a note if the backend cannot be created.
    if "$BUILD/bench/vmem-replay" --backend vmm --repeat 1 "${TRACE_FILES[0]}" >/dev/null 2>"$OUT/vmm-probe.log"; then
        legacy libvmem-vmm-legacy vmm
        run libvmem-vmm 300 "$BUILD/bench/vmem-replay" --backend vmm --repeat "$REPEAT" "${TRACE_FILES[@]}" ||
            { note "libvmem vmm backend: exit $? (libvmem-vmm.log)"; status=1; }
    else
        note "libvmem vmm backend skipped: $(grep -m1 -o 'vmem_create.*' "$OUT/vmm-probe.log" || echo 'probe failed (vmm-probe.log)')"
    fi
else
    note "no vmem-replay: libvmem not measured"
    status=1
fi

if [ -x "$TORCH_BIN" ]; then
    # PyTorch keeps its own libraries (rpath), not the carried CUDA runtime.
    run torch 300 env -u PYTORCH_CUDA_ALLOC_CONF LD_LIBRARY_PATH= "$TORCH_BIN" --repeat "$REPEAT" "${TRACE_FILES[@]}" ||
        { note "torch-replay: exit $? (torch.log)"; status=1; }
    run torch-expandable 300 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True LD_LIBRARY_PATH= \
        "$TORCH_BIN" --repeat "$REPEAT" "${TRACE_FILES[@]}" ||
        { note "torch-replay, expandable segments: exit $? (torch-expandable.log)"; status=1; }
else
    status=1
fi

if [ -x "$BUILD/bench/cuda-replay" ]; then
    run cudaMallocAsync 300 "$BUILD/bench/cuda-replay" --mode async --repeat "$REPEAT" "${TRACE_FILES[@]}" ||
        { note "cudaMallocAsync: exit $? (cudaMallocAsync.log)"; status=1; }
    run cudaMalloc 400 "$BUILD/bench/cuda-replay" --mode malloc --repeat "$MALLOC_REPEAT" "${TRACE_FILES[@]}" ||
        { note "cudaMalloc: exit $? (cudaMalloc.log)"; status=1; }
else
    note "no cuda-replay in $BUILD/bench: CUDA allocators not measured"
    status=1
fi

# ---------------------------------------------------------------- table
CMD="bench/compare-gpu.sh $TDIR (REPEAT=$REPEAT, MALLOC_REPEAT=$MALLOC_REPEAT)"
NOTES+=("PyTorch $TORCH_VERSION; driver ${DRIVER:-?}; cudaMalloc with $MALLOC_REPEAT timed passes.")
"$PYTHON" - "$OUT/meta.json" "$GPU" "$CMD" "${NOTES[@]}" <<'EOF'
import json, sys, datetime
path, gpu, cmd, *notes = sys.argv[1:]
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "gpu": gpu, "command": cmd, "notes": notes}, open(path, "w"), indent=1)
EOF
written=0
if python3 bench/compare_table.py "$RESULTS" --meta "$OUT/meta.json" \
    --markdown "$OUT/gpu-compare.md" --write docs/benchmarks.md >/dev/null; then
    written=1
    cp -f docs/benchmarks.md "$OUT/benchmarks.md"
else
    echo "compare-gpu: no results to tabulate" >&2
    status=1
fi

echo
echo "===== compare-gpu summary ($GPU)"
python3 - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    r.setdefault("allocator", "libvmem-" + r.get("backend", "?"))
torch = {r["trace"]: r["ns_per_op"] for r in rows if r["allocator"] == "torch"}
print(f"{'trace':24} {'allocator':18} {'ns/op':>9} {'held/live':>9} {'failed':>6} {'vs torch':>8}")
for r in sorted(rows, key=lambda r: (r["trace"], r["allocator"])):
    ref = torch.get(r["trace"])
    vs = f"{r['ns_per_op'] / ref:.2f}x" if ref and r["allocator"] != "torch" else ""
    frag = r.get("frag")
    frag = f"{frag:.3f}" if isinstance(frag, (int, float)) else "-"
    print(f"{r['trace']:24} {r['allocator']:18} {r['ns_per_op']:9.1f} {frag:>9} {r.get('failed_allocs', 0):6} {vs:>8}")
EOF
for n in "${NOTES[@]}"; do echo "note: $n"; done
if [ "$written" = 1 ]; then
    echo "results: $RESULTS; table: $OUT/gpu-compare.md; docs/benchmarks.md updated (copy: $OUT/benchmarks.md)"
else
    echo "results: $RESULTS (no table written)"
fi
exit $status
