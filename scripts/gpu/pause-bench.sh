#!/usr/bin/env bash
# Issue 12 on a real GPU: pause/resume of a 20 GiB tag against a plain pinned
# copy of the same bytes (and torch_memory_saver when a checkout is given),
# the freed memory seen by a second process, 0 bytes held after pause, a CUDA
# graph replayed after resume, capture on the cuda backend, and the
# co-location example (engine A pauses, engine B trains in another process,
# A resumes bitwise equal).  About 2-3 minutes on an H100.
#   scripts/gpu-run.sh device scripts/gpu/pause-bench.sh
#   TMS_DIR=/path/to/torch_memory_saver  (optional; built there with
#   TMS_CUDA_MAJOR=13 pip install --no-build-isolation . beforehand)
#   PAUSE_GIB=20 (size of the big tag)
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-pause}"
mkdir -p "$OUT"
if [ -z "${VMEM_LIBRARY:-}" ]; then
    export VMEM_LIBRARY="$PWD/${BUILD:-build-gpu}/src/libvmem.so"
fi
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
rc=0
run() { # name, env..., -- args
    local name=$1; shift
    echo "== $name"
    env "$@" python3 scripts/gpu/pause_bench.py 2>&1 | tee "$OUT/$name.log" | grep -E '^(RESULT|FAIL|SKIP)|vmm phases'
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
}
echo "== gpu-vmm pause tests"
LD_LIBRARY_PATH="${VMEM_TEST_LD:-$LD_LIBRARY_PATH}" "${BUILD:-build-gpu}/tests/gpu/test_vmm" --jobs 1 --filter 'vmm_gpu/pause_keep*' 2>&1 |
    tee "$OUT/gpu-vmm-pause.txt" | tail -2
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL gpu-vmm pause tests"; rc=1; }
echo "== driver calls of a swap step (vmm-driver-probe, phase swap: 64 MiB handles)"
LD_LIBRARY_PATH="${VMEM_TEST_LD:-$LD_LIBRARY_PATH}" "${BUILD:-build-gpu}/tests/gpu/vmm-driver-probe" 512 1 \
    >"$OUT/driver-probe.json" 2>&1 || { echo "FAIL vmm-driver-probe"; rc=1; }
grep '"swap"' "$OUT/driver-probe.json" | sed 's/^/PROBE /'
run bench     VMEM_BACKEND=vmm VMEM_VMM_PHASES=1 PART=bench PAUSE_GIB="${PAUSE_GIB:-20}"
run graph     VMEM_BACKEND=vmm PART=graph
run colocate  VMEM_BACKEND=vmm PART=colocate
run capture-cuda VMEM_BACKEND=cuda PART=capture
run capture-vmm  VMEM_BACKEND=vmm PART=capture
if [ -n "${TMS_DIR:-}" ] && [ -d "$TMS_DIR" ]; then
    run tms PART=tms PAUSE_GIB="${PAUSE_GIB:-20}" PYTHONPATH="$TMS_DIR:$PYTHONPATH"
else
    echo "SKIP torch_memory_saver: set TMS_DIR to a built checkout"
fi
echo "== summary"
grep '"swap"' "$OUT/driver-probe.json" | sed 's/^/PROBE /'
grep -h '^RESULT\|^FAIL\|vmm phases' "$OUT"/*.log
exit $rc
