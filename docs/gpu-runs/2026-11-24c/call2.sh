#!/bin/bash
# call 1: the GPU tests of vmem_copy_async; copies out by the SMs (1) against the copy engine (0), GPT-2 and BERT
mkdir -p /tmp/x/c1
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="$PWD/build-gpu/src:$PWD/build-gpu/carry-cuda:$PWD/build-gpu/carry-libs:${LD_LIBRARY_PATH:-}"
timeout 200 build-gpu/tests/gpu/test_vmm --jobs 1 > /tmp/x/c1/test_vmm.log 2>&1; echo "test_vmm rc=$?"; tail -1 /tmp/x/c1/test_vmm.log
grep -E "FAIL|copy_async" /tmp/x/c1/test_vmm.log | head
unset LD_LIBRARY_PATH
for job in gpt2 bert; do for sm in 1 0; do
  CUT_OFFLOAD_SM_COPY=$sm CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
    OUT=/tmp/x/c1/$job-sm$sm timeout 140 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/x/c1/$job-sm$sm.log 2>&1
  echo "[$job sm_copy=$sm]"; grep -E "^\S+ +planned\+offload +\S+ +(full|cut(75|50)) " /tmp/x/c1/$job-sm$sm.log
done; done
tar czf $OUT/o.tgz -C /tmp x
