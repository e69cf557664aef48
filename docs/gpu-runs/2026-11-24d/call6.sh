#!/bin/bash
# call 6: the vmm settings refused at create on a real device (ce9871b)
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build-gpu/carry-cuda:$PWD/build-gpu/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LIB=$PWD/build-gpu/src/libvmem.so
for kv in "VMEM_BACKEND=vmm VMEM_VMM_SPLIT_THREADS=abc" "VMEM_BACKEND=auto VMEM_VMM_BIG_MIB=3" \
          "VMEM_BACKEND=vmm VMEM_VMM_BIG=off" "VMEM_BACKEND=auto" "VMEM_BACKEND=vmm VMEM_VMM_HOST_KEEP=lots"; do
  echo "== $kv"
  env $kv VMEM_LIBRARY=$LIB python3 -c "
import sys; sys.path.insert(0, 'python'); import libvmem as L
try:
    s = L.stats(); print('created:', {k: s[k] for k in s if 'ackend' in k or k == 'deviceBigHandles'})
except Exception as e:
    print('refused:', type(e).__name__, e)
" 2>&1 | tail -4
done
