#!/usr/bin/env bash
# Forty-third session, call 2: three libraries in turn, read as issue 11's replay target is
# (libvmem's ns/op over PyTorch's in one process, torch-replay --vmem, vmm and cuda, every
# carried trace, four rounds): f7819af (.carry/oldlib), the inlined helpers of 0b8683f
# (.carry/inlinelib) and this tree, whose free chunks carry a copy of their region's dedicated
# flag (build-gpu). Then why seg runs slower on `cuda` than on `vmm`: vmem-replay (no PyTorch
# in the process) on seg and bert with the four backends, three processes each.
# Carry: build-gpu/src build-gpu/bench build-gpu/carry-cuda .carry
# Run: bash scripts/gpu-run.sh device docs/gpu-runs/2026-11-25k/call2.sh
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2 3 4; do
    for b in .carry/oldlib .carry/inlinelib build-gpu; do
        name=$(basename "$b")
        BUILD=$b OUT="$OUT/r$r-$name" TORCH_REUSE=1 BACKENDS="torch+vmm torch+cuda" ROUNDS=1 \
            REPEAT=11 VAR=- VALUES=default bash scripts/gpu/replay-alternate.sh > "$OUT/r$r-$name.log" 2>&1 ||
            echo "round $r $name: exit $?"
    done
done
# (it ran as an inline Python here-document, the same code without the count
# per cell; now the shared script)
python3 scripts/gpu/replay_libs_summary.py "$OUT" oldlib inlinelib build-gpu
echo "== vmem-replay, no PyTorch in the process (ns_per_op, ns_per_op_min)"
for i in 1 2 3; do
    for t in seg bert; do
        for b in cuda vmm sim sim-vmm; do
            printf '%s %s %s ' "$i" "$t" "$b"
            build-gpu/bench/vmem-replay --backend "$b" --sim-capacity 24g --repeat 11 ".carry/traces/trace_$t.txt.gz" |
                python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print(d["ns_per_op"], d["ns_per_op_min"], d["frag"], d.get("device_regions"))'
        done
    done
done
command -v perf valgrind || echo "no perf, no valgrind"
