#!/bin/bash
# call 5: the final C code (ce9871b, 24c1c8c) and offload (06765bf): the GPU test binaries,
# offload-check, and the vmm settings refused at create on a real device
mkdir -p /tmp/v/c5
cd "$(dirname "$0")/.."
OUT=/tmp/v/c5/t timeout 420 bash scripts/gpu-run.sh device tests scripts/gpu/offload-check.sh > /tmp/v/c5/tests.log 2>&1
echo "[tests rc=$?]"; tail -30 /tmp/v/c5/tests.log
LIB=$PWD/build-gpu/src/libvmem.so
for kv in "VMEM_BACKEND=vmm VMEM_VMM_SPLIT_THREADS=abc" "VMEM_BACKEND=auto VMEM_VMM_BIG_MIB=3" \
          "VMEM_BACKEND=vmm VMEM_VMM_BIG=off" "VMEM_BACKEND=auto"; do
  echo "== $kv"
  env $kv VMEM_LIBRARY=$LIB python3 -c "
import sys; sys.path.insert(0, 'python'); import libvmem as L
try:
    s = L.stats(); print('created: backend', s.get('backend'), 'deviceBigBytes' in s)
except Exception as e:
    print('refused:', type(e).__name__, e)
" 2>&1 | tail -3
done
tar czf $OUT/o.tgz -C /tmp v
