#!/usr/bin/env bash
# Issue 12 on a real GPU: pause/resume of a 20 GiB tag against a plain pinned
# copy of the same bytes (and torch_memory_saver when a checkout is given),
# the freed memory seen by a second process, 0 bytes held after pause, a CUDA
# graph replayed after resume, capture on the cuda backend, and the
# co-location example (engine A pauses, engine B trains in another process,
# A resumes bitwise equal), and pause with discard (and a warm keep pause)
# with the default handles (64 MiB, and 512 MiB huge ones for device memory)
# and without huge handles at 64, 256 and 512 MiB (VMEM_VMM_BIG_MIB,
# VMEM_VMM_HUGE_MIB=0).  About 6-8 minutes on an H100 (with the
# torch_memory_saver build and its alternating discard pairs).
#   scripts/gpu-run.sh device scripts/gpu/pause-bench.sh
#   torch_memory_saver runs beside libvmem when its source is present:
#   TMS_SRC (default .carry/tms-src, an untracked copy of
#   github.com/fzyzcjy/torch_memory_saver) is copied to /tmp and built there
#   with TMS_CUDA_MAJOR=<torch's CUDA major> pip install --no-build-isolation
#   --no-deps --target /tmp/tms-site . (no network on the GPU machine); or
#   TMS_DIR=<a directory already importable as torch_memory_saver's parent>.
#   PAUSE_GIB=20 (size of the big tag); BIG_MIBS="256 512" (discard rows without huge
#   handles besides 64); DISCARD_PAIRS=3 (libvmem / torch_memory_saver discard pairs)
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
# A cold keep pause alone in a fresh process (pinning varies from run to run).
run cold      VMEM_BACKEND=vmm PART=cold PAUSE_GIB="${PAUSE_GIB:-20}"
# The defaults (64 MiB handles, 512 MiB huge ones for device memory), then
# without huge handles at each big handle size.
run discard-64 VMEM_BACKEND=vmm VMEM_VMM_PHASES=1 PART=discard PAUSE_GIB="${PAUSE_GIB:-20}"
for mib in 64 ${BIG_MIBS:-256 512}; do
    run "discard-$mib-nohuge" VMEM_BACKEND=vmm VMEM_VMM_PHASES=1 VMEM_VMM_BIG_MIB="$mib" \
        VMEM_VMM_HUGE_MIB=0 PART=discard PAUSE_GIB="${PAUSE_GIB:-20}"
done
run graph     VMEM_BACKEND=vmm PART=graph
run colocate  VMEM_BACKEND=vmm PART=colocate
run capture-cuda VMEM_BACKEND=cuda PART=capture
run capture-vmm  VMEM_BACKEND=vmm PART=capture
TMS_SRC="${TMS_SRC:-.carry/tms-src}"
if [ -z "${TMS_DIR:-}" ] && [ -f "$TMS_SRC/setup.py" ]; then
    echo "== build torch_memory_saver from $TMS_SRC"
    major=$(python3 -c 'import torch; print((torch.version.cuda or "13").split(".")[0])' 2>/dev/null || echo 13)
    rm -rf /tmp/tms-build /tmp/tms-site
    cp -r "$TMS_SRC" /tmp/tms-build
    if (cd /tmp/tms-build && TMS_CUDA_MAJOR="$major" python3 -m pip install --no-build-isolation \
            --no-deps --no-index --target /tmp/tms-site .) >"$OUT/tms-build.log" 2>&1; then
        TMS_DIR=/tmp/tms-site
        echo "built torch_memory_saver (CUDA major $major) into $TMS_DIR"
    else
        echo "SKIP torch_memory_saver: its build failed (TMS_CUDA_MAJOR=$major; last lines of $OUT/tms-build.log:)"
        tail -5 "$OUT/tms-build.log"
    fi
fi
if [ -n "${TMS_DIR:-}" ] && [ -d "$TMS_DIR" ]; then
    run tms PART=tms PAUSE_GIB="${PAUSE_GIB:-20}" PYTHONPATH="$TMS_DIR:$PYTHONPATH"
    # Pause with discard, libvmem (defaults) and torch_memory_saver
    # alternating in fresh processes, DISCARD_ROUNDS each (the driver's
    # unmap time moves between runs and between processes).
    for i in $(seq "${DISCARD_PAIRS:-3}"); do
        run "discard-pair$i-libvmem" VMEM_BACKEND=vmm PART=discard DISCARD_ROUNDS=4 DISCARD_KEEP=0 \
            PAUSE_GIB="${PAUSE_GIB:-20}"
        run "discard-pair$i-tms" PART=tms-discard DISCARD_ROUNDS=4 PAUSE_GIB="${PAUSE_GIB:-20}" \
            PYTHONPATH="$TMS_DIR:$PYTHONPATH"
    done
elif [ ! -f "$TMS_SRC/setup.py" ]; then
    echo "SKIP torch_memory_saver: no source at $TMS_SRC (and no TMS_DIR)"
fi
echo "== summary"
grep '"swap"' "$OUT/driver-probe.json" | sed 's/^/PROBE /'
grep -h '^RESULT\|^FAIL\|vmm phases' "$OUT"/*.log
exit $rc
