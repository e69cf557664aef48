#!/usr/bin/env bash
# scripts/sanitize.sh: the CPU test suite under sanitizers and valgrind (issue 6).
#
#   scripts/sanitize.sh [MODE ...]        (no MODE: asan)
#
#   asan      build-asan/ (-Db_sanitize=address,undefined): every CPU test that
#             `meson test` has (suites named *gpu* excluded), LeakSanitizer on,
#             UBSan fatal; then vmem-replay over the traces in the repository
#             (tests/data/, or VMEM_TRACES) and over malformed traces.  No trace
#             found is a failure, not a silent pass.  This is the mode .ci/run calls.
#   tsan      build-tsan/ (-Db_sanitize=thread): the multi-threaded stress
#             (stress_main: workers, limit, step, host-limit, control-file and tag pause/resume
#             threads) and the fuzz driver.  Criterion cannot start under TSan
#             (Snaipe/Criterion#274), so the Criterion suites are not run here.
#   valgrind  build-valgrind/ (no sanitizer): every CPU test under
#             valgrind --leak-check=full, following Criterion's children; each
#             process logs to its own file and the ERROR SUMMARY lines decide:
#             memcheck errors in tests that pass fail the mode; tests that
#             fail under valgrind (sim-vmm reserves 64 GiB + 4x its capacity of
#             address space, valgrind has 128 GiB) are listed apart.  Slow.
#   fuzz      build-fuzz/ (clang): the libFuzzer build for FUZZ_SECONDS
#             (default 60) on a copy of tests/fuzz/corpus.
#   all       asan tsan valgrind
#
# Environment: SANITIZE_JOBS (parallel tests, default 2), SANITIZE_CUDA (the
# meson 'cuda' option of these builds, default disabled: the CPU suite, and
# no closed-source CUDA runtime inside the sanitizers), FUZZ_SECONDS.
# Logs: build-<mode>/sanitize-logs/.  Prints one summary line per mode last.
# Exit status: 0 if every mode passed; 1 on any failing test or any
# sanitizer / valgrind report (reports are searched for in the logs too, since
# Criterion's sandboxed children do not always pass a report's exit status on).
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
JOBS=${SANITIZE_JOBS:-2}
CUDA=${SANITIZE_CUDA:-disabled}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
TRACES=${VMEM_TRACES:-$ROOT/tests/data}
REPORT_RE='ERROR: (Address|Leak|Thread|Memory)Sanitizer|WARNING: ThreadSanitizer|runtime error:|SUMMARY: (Address|Undefined|Thread)'

declare -a SUMMARY=()
STATUS=0

say() { printf '%s\n' "$*"; }
result() { # mode, ok(0/1), text
    local mark=PASS
    [ "$2" -ne 0 ] && mark=FAIL && STATUS=1
    SUMMARY+=("$(printf '%-9s %s  %s' "$1" "$mark" "$3")")
}

# setup_build DIR [meson options...]: configures (or re-configures) and builds.
setup_build() {
    local dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >"/tmp/sanitize-setup.$$.log" 2>&1 || {
            cat "/tmp/sanitize-setup.$$.log"
            rm -f "/tmp/sanitize-setup.$$.log"
            return 1
        }
        rm -f "/tmp/sanitize-setup.$$.log"
    else
        meson configure "$dir" "$@" >/dev/null || return 1
    fi
    mkdir -p "$dir/sanitize-logs"
    say "== building $dir"
    ninja -C "$dir" >"$dir/sanitize-logs/build.log" 2>&1 || {
        grep -E -A5 'FAILED|error:' "$dir/sanitize-logs/build.log" | head -40
        return 1
    }
}

# tests_of DIR KIND: names of the CPU tests (no *gpu* suite) whose command is
# python (KIND=python) or anything else (KIND=native).
tests_of() {
    meson introspect "$1" --tests | python3 -c '
import json, os, sys
kind = sys.argv[1]
for t in json.load(sys.stdin):
    suites = [s.split(":")[-1] for s in t["suite"]]
    if any("gpu" in s for s in suites):
        continue
    k = "python" if os.path.basename(t["cmd"][0]).startswith("python") else "native"
    if k == kind:
        print(t["name"])
' "$2"
}

# run_tests DIR LOGNAME [names...]: meson test on those names (env as set by
# the caller); returns 1 on a failing test or a sanitizer report in the log.
run_tests() {
    local dir=$1 log=$2
    shift 2
    [ $# -eq 0 ] && return 0
    local out="$dir/sanitize-logs/$log.txt" rc=0
    meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$JOBS" "$@" >"$out" 2>&1 || rc=1
    # (with --wrap, meson names its log after the wrapper: take the newest)
    local newest
    newest=$(ls -t "$dir"/meson-logs/testlog*.txt 2>/dev/null | head -1)
    [ -n "$newest" ] && cp "$newest" "$dir/sanitize-logs/$log.testlog.txt"
    newest=$(ls -t "$dir"/meson-logs/testlog*.json 2>/dev/null | head -1)
    [ -n "$newest" ] && cp "$newest" "$dir/sanitize-logs/$log.testlog.json"
    grep -E '^ *[0-9]+/[0-9]+ ' "$out" | sed 's/^/   /'
    if grep -Eq "$REPORT_RE" "$dir/sanitize-logs/$log.testlog.txt" "$out" 2>/dev/null; then
        say "   sanitizer report(s) in $dir/sanitize-logs/$log.testlog.txt:"
        grep -Eh "$REPORT_RE" "$dir/sanitize-logs/$log.testlog.txt" "$out" | sort | uniq -c | head -20
        rc=1
    fi
    [ $rc -ne 0 ] && grep -E '^(Ok|Fail|Timeout|Skipped):' "$out" | sed 's/^/   /'
    return $rc
}

# Malformed traces for vmem-replay: each must be refused with an error, never
# a crash or a sanitizer report.
replay_checks() {
    local dir=$1 replay=$1/bench/vmem-replay tmp rc=0
    [ -x "$replay" ] || { say "   (no vmem-replay in $dir: skipped)"; return 0; }
    tmp=$(mktemp -d)
    local real=()
    [ -d "$TRACES" ] && real=("$TRACES"/*.txt.gz)
    if [ ${#real[@]} -eq 0 ] || [ ! -f "${real[0]}" ]; then
        say "   FAIL: no traces in $TRACES (tests/data/*.txt.gz, or set VMEM_TRACES)"
        rc=1
        real=()
    fi
    for t in "${real[@]}"; do
        if "$replay" --backend sim-vmm "$t" >"$tmp/out" 2>"$tmp/err"; then
            say "   vmem-replay $(basename "$t"): ok"
        else
            say "   vmem-replay $(basename "$t"): exit $?"
            rc=1
        fi
        grep -Eq "$REPORT_RE" "$tmp/err" && { cat "$tmp/err" | head -20; rc=1; }
    done
    printf 'not gzip at all\n' >"$tmp/notgzip.txt.gz"
    printf '# {}\na 1 100 0 5\nf 2 6\n' | gzip >"$tmp/unknown-free.txt.gz"
    printf '# {}\na 1 -5 0 5\n' | gzip >"$tmp/negative.txt.gz"
    printf '# {}\na 1 18446744073709551616 0 5\n' | gzip >"$tmp/overflow.txt.gz"
    printf '# {}\nzz top\n\0\0\0\n' | gzip >"$tmp/garbage.txt.gz"
    printf '# {}\na 1 100 0 5\na 1 200 0 6\n' | gzip >"$tmp/duplicate.txt.gz"
    [ ${#real[@]} -gt 0 ] && head -c 200 "${real[0]}" >"$tmp/truncated.txt.gz"
    : | gzip >"$tmp/empty.txt.gz"
    for t in "$tmp"/*.txt.gz; do
        "$replay" --backend sim "$t" >"$tmp/out" 2>"$tmp/err"
        local st=$?
        if [ $st -ge 128 ] || grep -Eq "$REPORT_RE" "$tmp/err"; then
            say "   vmem-replay $(basename "$t"): exit $st"
            head -20 "$tmp/err"
            rc=1
        else
            say "   vmem-replay $(basename "$t"): exit $st: $(head -c 120 "$tmp/err" | tr '\n' ' ')"
        fi
    done
    rm -rf "$tmp"
    return $rc
}

mode_asan() {
    local dir=build-asan t0=$SECONDS rc=0
    say "=== asan: AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer"
    setup_build $dir -Db_sanitize=address,undefined -Db_lundef=false -Dcuda="$CUDA" \
        -Dbuildtype=debugoptimized || { result asan 1 "build failed ($dir/sanitize-logs/build.log)"; return; }
    # Criterion's own allocations at exit are not ours.
    printf 'leak:libcriterion.so\nleak:libboxfort\n' >"$dir/sanitize-logs/lsan.supp"
    export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:check_initialization_order=1:detect_stack_use_after_return=1
    export LSAN_OPTIONS="suppressions=$ROOT/$dir/sanitize-logs/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    export FUZZ_RUNS=${FUZZ_RUNS_ASAN:-60}
    mapfile -t native < <(tests_of $dir native)
    mapfile -t python < <(tests_of $dir python)
    run_tests $dir asan-native --timeout-multiplier 3 "${native[@]}" || rc=1
    # Python loads libvmem.so through ctypes: the ASan runtime must come first;
    # the interpreter's own allocations are not checked for leaks.
    if [ ${#python[@]} -gt 0 ]; then
        local libasan
        libasan=$(${CC:-cc} -print-file-name=libasan.so)
        LD_PRELOAD="$libasan" ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 \
            run_tests $dir asan-python --timeout-multiplier 3 "${python[@]}" || rc=1
    fi
    replay_checks $dir || rc=1
    unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS FUZZ_RUNS
    result asan $rc "${#native[@]} native + ${#python[@]} python tests, replay checks, $((SECONDS - t0)) s"
}

mode_tsan() {
    local dir=build-tsan t0=$SECONDS rc=0 log
    say "=== tsan: ThreadSanitizer on the multi-threaded stress and the fuzz driver"
    setup_build $dir -Db_sanitize=thread -Db_lundef=false -Dcuda="$CUDA" -Dbench=false \
        -Dbuildtype=debugoptimized || { result tsan 1 "build failed ($dir/sanitize-logs/build.log)"; return; }
    log=$dir/sanitize-logs/tsan.txt
    : >"$log"
    export TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1
    # Some kernels map memory where TSan wants its shadow: run without ASLR.
    local norand=""
    setarch "$(uname -m)" -R true 2>/dev/null && norand="setarch $(uname -m) -R"
    $norand $dir/tests/fuzz/stress_main --ops 4000 --repeat 2 >>"$log" 2>&1 || rc=1
    FUZZ_RUNS=40 $norand $dir/tests/fuzz/fuzz_driver --seed 7 --corpus tests/fuzz/corpus >>"$log" 2>&1 || rc=1
    unset TSAN_OPTIONS
    grep -E '^stress|^fuzz_ops' "$log" | sed 's/^/   /'
    if grep -Eq "$REPORT_RE" "$log"; then
        say "   ThreadSanitizer report(s) in $log:"
        grep -E -A12 'WARNING: ThreadSanitizer' "$log" | head -40
        rc=1
    fi
    result tsan $rc "stress_main (6 configurations x 2) + fuzz driver, $((SECONDS - t0)) s"
}

mode_valgrind() {
    local dir=build-valgrind t0=$SECONDS rc=0 vglogs errors
    say "=== valgrind: memcheck, leak-check=full, children followed"
    command -v valgrind >/dev/null || { result valgrind 1 "valgrind not installed"; return; }
    setup_build $dir -Dcuda="$CUDA" -Dbench=false -Dbuildtype=debugoptimized ||
        { result valgrind 1 "build failed ($dir/sanitize-logs/build.log)"; return; }
    vglogs=$ROOT/$dir/sanitize-logs/vg
    rm -rf "$vglogs"
    mkdir -p "$vglogs"
    mapfile -t native < <(tests_of $dir native)
    # valgrind is ~50x slower: few fuzz inputs, generous timeouts.
    # The verdict is memcheck's: a test may also fail here for want of address
    # space (valgrind's is 128 GiB; a sim-vmm instance reserves 4x its capacity
    # + 64 GiB), which run natively and under asan shows is not a bug.
    FUZZ_RUNS=${FUZZ_RUNS_VALGRIND:-4} FUZZ_MAX_LEN=256 FUZZ_BACKEND=sim \
        run_tests $dir valgrind --timeout-multiplier 20 \
        --wrap="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --track-origins=no --trace-children=yes --log-file=$vglogs/vg.%p.log" \
        "${native[@]}"
    # Each process's log names its executable; a test's errors count unless the
    # test itself failed under valgrind (then they are the failure's debris:
    # blocks an aborted test never freed), which is reported separately.
    local verdict
    verdict=$(python3 - "$vglogs" "$dir/sanitize-logs/valgrind.testlog.json" <<'PYEOF'
import glob, json, re, sys
logs, testlog = sys.argv[1], sys.argv[2]
failed_exes, failed = set(), []
for line in open(testlog):
    t = json.loads(line)
    if t["result"] not in ("OK", "SKIP", "EXPECTEDFAIL"):
        failed_exes.add(t["command"][-1])
        failed.append(t["name"].split(" / ")[-1])
counted = discounted = nproc = 0
bad = []
for f in glob.glob(logs + "/vg.*.log"):
    text = open(f, errors="replace").read()
    m = re.search(r"Command: (\S+)", text)
    exe = m.group(1) if m else "?"
    errs = sum(int(x) for x in re.findall(r"ERROR SUMMARY: (\d+) errors", text))
    nproc += 1
    if exe in failed_exes:
        discounted += errs
    else:
        counted += errs
        if errs:
            bad.append(f)
print(counted, discounted, nproc, ",".join(failed) or "-", " ".join(sorted(bad)[:10]))
PYEOF
)
    local discounted nlogs failed badlogs nfailed=0
    read -r errors discounted nlogs failed badlogs <<<"$verdict"
    if [ "${errors:-1}" -ne 0 ]; then
        say "   memcheck errors in tests that pass: ${errors:-?}; logs:"
        for f in $badlogs; do say "     $f"; done
        rc=1
    fi
    if [ "$failed" != "-" ]; then
        nfailed=$(tr ',' '\n' <<<"$failed" | wc -l)
        say "   failed under valgrind (address space?): $failed"
        say "   ($discounted memcheck errors in those not counted)"
    fi
    result valgrind $rc "${#native[@]} tests ($nfailed failed under valgrind), $nlogs processes, ${errors:-?} memcheck errors, $((SECONDS - t0)) s"
}

mode_fuzz() {
    local dir=build-fuzz t0=$SECONDS rc=0 log corpus
    say "=== fuzz: libFuzzer (clang, address + undefined) for ${FUZZ_SECONDS} s"
    command -v clang >/dev/null || { result fuzz 1 "clang not installed"; return; }
    if [ ! -f "$dir/build.ninja" ]; then
        CC=clang CXX=clang++ meson setup $dir -Dcuda="$CUDA" -Dbench=false -Dbuildtype=debugoptimized \
            >/dev/null || { result fuzz 1 "meson setup failed"; return; }
    fi
    mkdir -p $dir/sanitize-logs
    ninja -C $dir tests/fuzz/fuzz_ops_libfuzzer >$dir/sanitize-logs/build.log 2>&1 ||
        { result fuzz 1 "build failed ($dir/sanitize-logs/build.log)"; return; }
    corpus=$dir/sanitize-logs/corpus
    mkdir -p "$corpus"
    cp -n tests/fuzz/corpus/* "$corpus"/ 2>/dev/null
    log=$dir/sanitize-logs/libfuzzer.txt
    (cd $dir/sanitize-logs &&
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ../tests/fuzz/fuzz_ops_libfuzzer \
            -max_total_time="$FUZZ_SECONDS" -max_len=4096 -timeout=60 -rss_limit_mb=4096 \
            -print_final_stats=1 corpus) >"$log" 2>&1 || rc=1
    grep -E '^(#[0-9]+ *DONE|stat::number_of_executed_units|fuzz_ops:)' "$log" | sed 's/^/   /'
    grep -Eq "$REPORT_RE|VIOLATION|deadly signal" "$log" && { grep -E -B2 -A20 "$REPORT_RE|VIOLATION|deadly" "$log" | head -40; rc=1; }
    result fuzz $rc "$(grep -o 'fuzz_ops: [0-9]* inputs, [0-9]* operations' "$log" | tail -1), $((SECONDS - t0)) s"
}

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(asan)
for m in "${modes[@]}"; do
    case $m in
    asan) mode_asan ;;
    tsan) mode_tsan ;;
    valgrind) mode_valgrind ;;
    fuzz) mode_fuzz ;;
    all) mode_asan; mode_tsan; mode_valgrind ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) say "sanitize.sh: unknown mode '$m' (asan, tsan, valgrind, fuzz, all)"; exit 2 ;;
    esac
done

say ""
say "=== sanitize.sh summary"
for line in "${SUMMARY[@]}"; do say "$line"; done
exit $STATUS
