#!/bin/bash
# call 2 (twenty-seventh session): the steps after each raise with the CPU's speed probed between
# steps (cut_bench's cpu_probe, new): BERT with and without the offload, ViT, ConvNeXt and
# ResNet-50 with it. Is a slow stretch after a raise the process's CPU, or the cut's doing?
R=$OUT; mkdir -p /tmp/w/c2
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { # name, env...
  local n=$1; shift
  env "$@" CUT_FULL=8 CUT_RAISED=6 CUT_UNCUT=0 OUT=/tmp/w/c2/$n \
    timeout 400 bash scripts/gpu-run.sh device scripts/gpu/cut-bench.sh > /tmp/w/c2/$n.outer 2>&1
  echo "[$n rc=$?]"
  mkdir -p /tmp/w/c2/$n/x && tar xzf /tmp/w/c2/$n/results.tgz -C /tmp/w/c2/$n/x 2>/dev/null
  cp /tmp/w/c2/$n/x/cut-bench.sh.log /tmp/w/c2/$n.log
  sed -n '/^after each raise/,/^host bytes/p' /tmp/w/c2/$n.log
  python3 - /tmp/w/c2/$n <<'PY'
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/x/cut-bench.sh.out/cut-*.json")):
    if f.endswith("cut-bench.json"): continue
    st = json.load(open(f))["steps"]
    for p in ("full", "raised75", "raised50"):
        rs = [s for s in st if s["phase"] == p]
        print(f.split("/")[-1], p, " ".join("%.0f/%.0f/%.2f" % (s["ms"], s["cpu_ms"], s.get("probe_ms", 0)) for s in rs[:12]))
PY
  cp /tmp/w/c2/$n/x/cut-bench.sh.out/cut-*.json /tmp/w/c2/ 2>/dev/null
}
run bert CUT_JOBS=bert CUT_MODES=planned+offload,planned
run img CUT_JOBS=vit,convnext,resnet50 CUT_MODES=planned+offload
cd /tmp/w && tar czf $R/o.tgz c2/*.log c2/*.json
