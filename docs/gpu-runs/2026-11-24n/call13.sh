#!/bin/bash
# call 13 (twenty-ninth session): framework_proof part 6 (two-rank DDP, rank 1 cut to half its peak at step 10) on two
# H200s, the session's final code (94d5ba2: the trials and the learned margin)
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export LD_LIBRARY_PATH=$PWD/build-gpu/carry-cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BUILD=build-gpu VMEM_LIBRARY=$PWD/build-gpu/src/libvmem.so OUT=/tmp/p13 timeout 400 \
  bash scripts/gpu/framework_proof.sh --parts 6 2>&1 | tail -20
python3 - <<'PY'
import json
for r in (0, 1):
    d = json.load(open("/tmp/p13/part6-rank%d.json" % r))
    s = d.get("stats", {})
    print("rank", r, "ok", d["ok"], "cut", d.get("cut"), "offload", d.get("offload"),
          "remaps", s.get("deviceRemaps"), "syncs", s.get("deviceSyncs"),
          "losses", d["losses"][8:14], d.get("error", ""))
PY
