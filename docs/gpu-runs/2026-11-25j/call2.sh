#!/usr/bin/env bash
# Forty-second session, call 2: (1) the ckpt jobs again with this session's
# module after call 1's failure (a non-reentrant checkpoint of the program's
# saw a different recomputation: now blocks under the program's own saved
# tensor hooks or inside a backward run plain); (2) the defaults' cut on
# GPT-2, ResNet-50 and BERT with four steps after each raise; (3) BERT three
# more times (issue 11's 75% target for BERT: how reliable); (4) GPT-2 under
# its own non-reentrant gradient checkpointing through cut_bench (floors).
# Command: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25j/call2.sh
# Carry: build-gpu/src build-gpu/carry-libs build-gpu/carry-cuda
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ROOT=$OUT
echo "== (1) ckpt jobs"
timeout 150 python3 scripts/gpu/recompute_default.py ckpt-nr ckpt-re 2>&1 | tee "$ROOT/ckpt-new.jsonl" | cut -c1-400
cb() { # name, env...
    local name=$1; shift
    env OUT=$ROOT/$name CUT_MODES=planned+offload CUT_UNCUT=0 CUT_FULL=5 CUT_STEPS=13 "$@" \
        timeout 170 bash scripts/gpu/cut-bench.sh > "$ROOT/cut-bench-$name.log" 2>&1
    echo "== $name rc=$?"; sed -n '/^job /,/^$/p' "$ROOT/cut-bench-$name.log"
    grep -E 'recompute( \(found|:)' "$ROOT/cut-bench-$name.log" | sed -n '1p;6p;8p;22p;24p' | cut -c1-220
}
cb all CUT_JOBS=gpt2,resnet50,bert CUT_RAISED=4
for r in 2 3 4; do cb bert$r CUT_JOBS=bert CUT_RAISED=2; done
cb gpt2-userckpt CUT_JOBS=gpt2 CUT_RAISED=2 CUT_USER_CKPT=nr
gzip -f "$ROOT"/*.log
