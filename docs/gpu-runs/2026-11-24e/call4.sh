#!/bin/bash
# call 4: the GPU test binaries on 7bcfdb7 (the vmm move switches strict), and the switches on a
# real vmm instance: a malformed one refused at create (also with auto), good ones accepted
mkdir -p /tmp/v/c4
cd "$(dirname "$0")/.."
if [ "${1:-}" != checks ]; then
OUT=/tmp/v/c4/t timeout 420 bash scripts/gpu-run.sh device tests > /tmp/v/c4/tests.log 2>&1
echo "[tests rc=$?]"; tail -4 /tmp/v/c4/tests.log
fi
export LD_LIBRARY_PATH=$PWD/build-gpu/carry-cuda:${LD_LIBRARY_PATH:-}
LIB=$PWD/build-gpu/src/libvmem.so
for kv in "VMEM_BACKEND=vmm VMEM_VMM_PHASES=garbage" "VMEM_BACKEND=auto VMEM_VMM_MOVE_MIRROR=offf" \
          "VMEM_BACKEND=vmm VMEM_VMM_FREE_LATE=" "VMEM_BACKEND=vmm VMEM_VMM_MOVE_MIRROR=off VMEM_VMM_MOVE_SWAP=No" "VMEM_BACKEND=auto"; do
  echo "== $kv"
  env $kv VMEM_LIBRARY=$LIB python3 -c "
import sys; sys.path.insert(0, 'python'); import libvmem as L
try:
    s = L.stats(); print('created: backend', s.get('backend'))
except Exception as e:
    print('refused:', type(e).__name__, e)
" 2>&1 | tail -3
done
tar czf $OUT/o.tgz -C /tmp v
