#!/usr/bin/env bash
# Forty-first session, call 5: after call 4's failure (part 2 of the
# framework proof: transformers' GPT-2 with eager attention, cut, raised
# "size of tensor a (1024) must match ... (512)" in a recomputation: the
# layers fill a key/value cache passed as an argument, use_cache being on by
# default). Now a call with such an argument runs plain and config.use_cache
# is off while blocks recompute. (1) framework proof parts 1-2; (2) the
# recomputation checks (bitwise against the same step without it);
# (3) GPT-2's cut with the defaults; (4) the offload check, which now turns
# recomputation off to test the offload alone.
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25i/call5.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
OUT=$ROOT/proof timeout 120 python3 scripts/gpu/framework_proof.py --parts 1,2 > "$ROOT/proof.log" 2>&1
echo "== proof rc=$?"; grep -E '^[0-9] |PASS|FAIL|error' "$ROOT/proof.log" | cut -c1-300 | tail -6
grep -h "use_cache\|libvmem:.*recomputed" "$ROOT"/proof/*.log | sort | uniq -c | cut -c1-250 | head -4
timeout 150 python3 scripts/gpu/recompute_check.py > "$ROOT/recompute-check.log" 2>&1
echo "== recompute_check rc=$?"; grep -E 'PASS|FAIL|Error' "$ROOT/recompute-check.log" | cut -c1-200 | tail -10
OUT=$ROOT/gpt2 CUT_JOBS=gpt2 CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 \
    CUT_RAISED=2 timeout 120 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-gpt2.log" 2>&1
echo "== gpt2 rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut-bench-gpt2.log"
grep -E 'recompute: ' "$ROOT/cut-bench-gpt2.log" | sed -n '6,8p' | cut -c1-200
OUT=$ROOT/offload-check timeout 150 bash scripts/gpu/offload-check.sh > "$ROOT/offload-check.log" 2>&1
echo "== offload-check rc=$?"; grep -E 'PASS|FAIL' "$ROOT/offload-check.log" | cut -c1-160 | tail -10
gzip -f "$ROOT"/*.log
