#!/bin/bash
# call 1 (twenty-first session): double buffering in the fetch ahead (CUT_OFFLOAD_AHEAD_MIN=2:
# two records may be held ahead whatever the window, the room under the target still bounds
# them) against the default (one), alternating three times per job on one machine. The
# twentieth session's profile of ResNet-50 at 75% had the copies back busy only 72% of the
# backward: its window (138 MB) holds one of its largest saved tensors (205 MB) at a time, so
# copy and compute take turns.
# Decided beforehand: ahead_min 2 becomes the default only if, for every job run here, the
# median 75% cut step of its three processes is at least 3% below that of the three default
# ones, and the 50% median not more than 3% above.
mkdir -p /tmp/w/c1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for job in ${JOBS:-resnet50 effnet}; do
  for r in 1 2 3; do
    for v in def a2; do
      case $v in def) e="CUT_OFFLOAD_AHEAD_MIN=1";; a2) e="CUT_OFFLOAD_AHEAD_MIN=2";; esac
      env $e CUT_JOBS=$job CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=4 CUT_STEPS=9 CUT_RAISED=1 \
        OUT=/tmp/w/c1/$job-$v-$r timeout 80 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c1/$job-$v-$r.log 2>&1
      echo "[$job $v $r rc=$?]"; grep -E "^\S+ +planned\+offload +\S+ +cut(75|50) " /tmp/w/c1/$job-$v-$r.log | head -2
      tar xzOf /tmp/w/c1/$job-$v-$r/results.tgz ./cut-bench.sh.log > /tmp/w/c1/$job-$v-$r-inner.log 2>/dev/null
      grep -E "cut75 +[678] " /tmp/w/c1/$job-$v-$r-inner.log | grep -o "fwd [0-9.]*, bwd [0-9.]*" | tr '\n' ' '; echo
      grep -A3 -E "cut75 +8 " /tmp/w/c1/$job-$v-$r-inner.log | grep -o "budget [0-9.]* -> [0-9.]* GB; device max [0-9.]* GB\|at most.*" 
    done
  done
done
tar czf $OUT/o.tgz -C /tmp w
