#!/usr/bin/env bash
# A setting's cost per operation, one process per run, alternated with its
# baseline (docs/benchmarks.md, "Side by side on a GPU": a replay process on
# the lent machines runs either near 60 or near 110-150 ns/op whatever the
# configuration, so a difference within libvmem is read from many processes,
# not from one).
#   scripts/gpu-run.sh device scripts/gpu/replay-alternate.sh
# Environment: BUILD (default build-gpu), TRACES (directory of *.txt.gz),
# BACKENDS (default "vmm"), ROUNDS (default 6), REPEAT (timed passes per
# process, default 11), VAR (the variable alternated, default VMEM_LAYOUT),
# VALUES (default "0 1"); VAR=- makes each value a comma-separated list of
# assignments, "default" none (VALUES="VMEM_GROWTH=legacy,VMEM_TRIM=off default":
# the policy before issue 14 against today's); VAR=BUILD makes each value a
# build directory (VALUES="build-gpu .carry/build-old": this tree against
# another build of libvmem, its bench/vmem-replay and src/libvmem.so.0 on
# LD_LIBRARY_PATH first).  BACKENDS may also name
# "torch" and "torch-expandable": PyTorch's caching allocator through
# bench/torch_replay.cc (built first, bench/torch-replay-build.sh), one
# process per run in the same rotation, with VAR unset (its rows carry the
# value "-"), so libvmem's ns/op is read against PyTorch's over many
# processes (issue 11: at most 0.2x).  "torch+vmm" and "torch+cuda" run
# both in one process (torch-replay --vmem, passes alternating): each such
# process gives a ratio read under one speed mode, printed per trace as the
# median, lowest and highest over the processes (TORCH_REUSE=1: a torch-replay
# built by an earlier run is used as it is).  PIN=CPU runs every process under
# `taskset -c CPU`.  Writes $OUT/replay-alternate.jsonl (one line per
# process, with the setting) and prints, per trace, backend and value: the
# median of the processes' medians, the median and the lowest of their
# fastest passes, and held/live.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-alt}"
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
TDIR=${TRACES:-.carry/traces}
BACKENDS=${BACKENDS:-vmm}
ROUNDS=${ROUNDS:-6}
REPEAT=${REPEAT:-11}
VAR=${VAR:-VMEM_LAYOUT}
VALUES=${VALUES:-0 1}
PIN=${PIN:-}
J="$OUT/replay-alternate.jsonl"
pin=()
[ -n "$PIN" ] && pin=(taskset -c "$PIN")
case " $BACKENDS " in
*" torch"*)
    # shellcheck source=bench/torch-replay-build.sh
    . bench/torch-replay-build.sh
    if [ -z "${TORCH_REUSE:-}" ] || [ ! -x "$TORCH_BIN" ]; then
        build_torch >"$OUT/build-torch.log" 2>&1 || { echo "replay-alternate: torch-replay did not build ($OUT/build-torch.log)"; exit 2; }
    fi
    ;;
esac
: >"$J"
shopt -s nullglob
traces=("$TDIR"/*.txt.gz)
[ ${#traces[@]} -gt 0 ] || { echo "replay-alternate: no traces in $TDIR"; exit 2; }
for r in $(seq "$ROUNDS"); do
    for t in "${traces[@]}"; do
        for b in $BACKENDS; do
            case $b in
            torch | torch-expandable | torch+*)
                # PyTorch keeps its own libraries (rpath), not the carried CUDA
                # runtime; torch+BACKEND also replays libvmem in the process.
                conf=(-u PYTORCH_CUDA_ALLOC_CONF) paired=() tl=$b vb=-
                [ "$b" = torch-expandable ] && conf=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
                if [ "${b#torch+}" != "$b" ]; then
                    vb=${b#torch+} tl="torch(+${b#torch+})"
                    paired=(--vmem "$PWD/$BUILD/src/libvmem.so.0" --vmem-backend "$vb")
                fi
                out=$(env "${conf[@]}" LD_LIBRARY_PATH= "${pin[@]}" "$TORCH_BIN" "${paired[@]}" \
                    --repeat "$REPEAT" "$t") || { echo "replay-alternate: $t $b: exit $?"; continue; }
                while IFS= read -r line; do
                    line=$(sed -e "s/\"allocator\": \"torch[^\"]*\"/\"backend\": \"$tl\"/" \
                        -e "s/\"allocator\": \"libvmem-$vb\"/\"backend\": \"$vb(+torch)\"/" <<<"$line")
                    printf '{"round": %d, "var": "-", "value": "-", "run": %s}\n' "$r" "$line" >>"$J"
                done <<<"$out"
                continue
                ;;
            esac
            for v in $VALUES; do
                if [ "$VAR" = BUILD ]; then # v: a build directory (its bench/ and src/)
                    line=$(env LD_LIBRARY_PATH="$v/src:${LD_LIBRARY_PATH:-}" "${pin[@]}" "$v/bench/vmem-replay" \
                        --backend "$b" --repeat "$REPEAT" "$t") ||
                        { echo "replay-alternate: $t $b $v: exit $?"; continue; }
                    printf '{"round": %d, "var": "BUILD", "value": "%s", "run": %s}\n' "$r" "$v" "$line" >>"$J"
                    continue
                fi
                if [ "$VAR" = - ]; then
                    IFS=, read -r -a set <<<"$([ "$v" = default ] || echo "$v")"
                else
                    set=("$VAR=$v")
                fi
                line=$(env "${set[@]}" "${pin[@]}" "$BUILD/bench/vmem-replay" --backend "$b" --repeat "$REPEAT" "$t") ||
                    { echo "replay-alternate: $t $b $VAR=$v: exit $?"; continue; }
                printf '{"round": %d, "var": "%s", "value": "%s", "run": %s}\n' "$r" "$VAR" "$v" \
                    "$line" >>"$J"
            done
        done
    done
done
python3 - "$J" <<'EOF'
import collections, json, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    run = d["run"]
    rows[(run["trace"], run["backend"], d["value"])].append(run)
print("%-22s %-8s %-20s %5s %10s %12s %10s %8s" % (
    "trace", "backend", "value", "runs", "med(med)", "med(fastest)", "fastest", "held/live"))
for (t, b, v), runs in sorted(rows.items()):
    print("%-22s %-8s %-20s %5d %10.1f %12.1f %10.1f %8.3f" % (
        t, b, v, len(runs), statistics.median(r["ns_per_op"] for r in runs),
        statistics.median(r["ns_per_op_min"] for r in runs),
        min(r["ns_per_op_min"] for r in runs), runs[0]["frag"]))
# Paired processes (torch+BACKEND): each process's own ratio, libvmem's
# median ns/op over PyTorch's in the same process.
paired = collections.defaultdict(list)
for (t, b, v), runs in rows.items():
    if b.endswith("(+torch)"):
        paired[(t, b)] += [r["paired_ratio"] for r in runs if r.get("paired_ratio")]
if paired:
    print("%-22s %-12s %5s %12s %8s %8s" % ("trace", "paired", "procs", "median ratio", "lowest",
                                           "highest"))
    for (t, b), rs in sorted(paired.items()):
        print("%-22s %-12s %5d %12.3f %8.3f %8.3f" % (t, b, len(rs), statistics.median(rs), min(rs),
                                                      max(rs)))
# Against PyTorch's default allocator where it ran: the ratio of the medians
# of the processes' fastest passes, and of their medians.
torch = {t: runs for (t, b, v), runs in rows.items() if b == "torch"}
if torch:
    print("%-22s %-8s %-6s %14s %12s" % ("trace", "backend", "value", "x torch(fast)", "x torch(med)"))
    for (t, b, v), runs in sorted(rows.items()):
        if b == "torch" or t not in torch:
            continue
        tf = statistics.median(r["ns_per_op_min"] for r in torch[t])
        tm = statistics.median(r["ns_per_op"] for r in torch[t])
        print("%-22s %-8s %-6s %14.3f %12.3f" % (
            t, b, v, statistics.median(r["ns_per_op_min"] for r in runs) / tf,
            statistics.median(r["ns_per_op"] for r in runs) / tm))
EOF
