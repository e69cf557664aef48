#!/usr/bin/env bash
# Run libvmem's GPU work on the lent GPU machine.
#
# Here (no GPU needed):
#   scripts/gpu-run.sh prepare
#       builds build-gpu/ with CUDA enabled, copies the shared libraries its
#       binaries need that a bare Ubuntu 24.04 + CUDA machine lacks (Criterion and
#       friends, Google Benchmark, cJSON) into build-gpu/carry-libs/, and copies the
#       shared traces and tests/data's into .carry/traces/.  Then call the device with
#       command: bash scripts/gpu-run.sh device [STEPS] and a carry that fits the device's
#       64 MiB beside the tracked tree (40 MiB on 2026-11-24; the whole build-gpu, 28 MiB,
#       no longer does).  The tests step runs the binaries carried, so the suite goes in
#       two calls (build-gpu/tests/control needs build-gpu/tools):
#         ["build-gpu/src", "build-gpu/tests/core", "build-gpu/tests/gpu", "build-gpu/tests/vmm",
#          "build-gpu/tests/fuzz", "build-gpu/tests/tags", "build-gpu/carry-libs",
#          "build-gpu/carry-cuda"]  (tests/adapters is small: with either)
#         ["build-gpu/src", "build-gpu/tests/control", "build-gpu/tools",
#          "build-gpu/carry-libs", "build-gpu/carry-cuda"]
#       Scripts: ["build-gpu/src", "build-gpu/carry-cuda", ".carry"] (and "build-gpu/bench"
#       for the replay benchmarks).
#
# There (on the GPU machine, from the repository root):
#   scripts/gpu-run.sh device [tests] [demo] [SCRIPT ...]
#       runs the chosen steps (default: tests demo) with LD_LIBRARY_PATH pointing at
#       the carried libraries, logs under $OUT, and prints a short summary last.
#       A SCRIPT step is any executable path in the repo (e.g. bench/compare-gpu.sh),
#       given OUT=$OUT/<script>.out; everything is packed into $OUT/results.tgz;
#       it runs with BUILD=build-gpu TRACES=.carry/traces VMEM_LIBRARY=<libvmem.so>,
#       libvmem and the CUDA runtime on LD_LIBRARY_PATH, and VMEM_TEST_LD holding a
#       path that adds the carried libraries (for C binaries linked with them).
set -uo pipefail
cd "$(dirname "$0")/.."

prepare() {
    set -e
    export PATH="/usr/local/cuda/bin:$PATH"
    if [ -f build-gpu/build.ninja ]; then
        meson configure build-gpu -Dcuda=enabled >/dev/null
    else
        meson setup build-gpu -Dcuda=enabled -Dbuildtype=release -Db_ndebug=false
    fi
    ninja -C build-gpu
    rm -rf build-gpu/carry-libs build-gpu/carry-cuda && mkdir -p build-gpu/carry-libs build-gpu/carry-cuda
    # Libraries present on the GPU machine's base system are not carried.
    local skip='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libz|libcuda)\.'
    find build-gpu -type f \( -perm -u+x -o -name '*.so*' \) ! -path '*/carry-libs/*' -print0 |
        while IFS= read -r -d '' f; do
            file "$f" | grep -q ELF || continue
            ldd "$f" 2>/dev/null | awk '/=> \//{print $1, $3}'
        done | sort -u | while read -r name path; do
            [[ "$name" =~ $skip ]] && continue
            [[ "$path" == "$PWD"/* ]] && continue
            case "$name" in
            libcudart*|libcjson*) cp -Lf "$path" build-gpu/carry-cuda/ ;;  # what libvmem.so itself needs
            *) cp -Lf "$path" build-gpu/carry-libs/ ;;
            esac
        done
    mkdir -p .carry/traces
    cp -f ../shared/traces/*.txt.gz .carry/traces/ 2>/dev/null || true
    cp -f tests/data/*.txt.gz .carry/traces/  # the repository's own (same names: same files)
    du -sh build-gpu .carry | sed 's/^/carry: /'
    ls build-gpu/carry-libs build-gpu/carry-cuda
}

device() {
    : "${OUT:=/tmp/vmem-out}"
    mkdir -p "$OUT"
    # Python programs (PyTorch, CuPy) must keep the machine's own libraries:
    # only libvmem and the CUDA runtime go on their path.  The C test binaries
    # also get the carried Criterion/Benchmark libraries (VMEM_TEST_LD).
    export LD_LIBRARY_PATH="$PWD/build-gpu/src:$PWD/build-gpu/carry-cuda:${LD_LIBRARY_PATH:-}"
    export VMEM_TEST_LD="$PWD/build-gpu/carry-libs:$LD_LIBRARY_PATH"
    export BUILD=build-gpu TRACES=.carry/traces VMEM_LIBRARY="$PWD/build-gpu/src/libvmem.so.0"
    local steps=("$@")
    [ ${#steps[@]} -eq 0 ] && steps=(tests demo)
    local summary=()
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
    for step in "${steps[@]}"; do
        case "$step" in
        tests)
            local pass=0 fail=0 skip=0 rc
            : >"$OUT/tests.log"
            while IFS= read -r t; do
                echo "=== $t" >>"$OUT/tests.log"
                LD_LIBRARY_PATH="$VMEM_TEST_LD" timeout 300 "$t" --jobs 1 >>"$OUT/tests.log" 2>&1
                rc=$?
                if [ $rc -eq 0 ]; then
                    pass=$((pass + 1))
                elif [ $rc -eq 77 ]; then   # every case skipped (tests/skip77.h)
                    skip=$((skip + 1))
                    summary+=("SKIPPED (all cases): $t")
                else
                    fail=$((fail + 1))
                    summary+=("FAILED: $t")
                fi
            done < <(find build-gpu/tests -maxdepth 2 -type f -perm -u+x -name 'test_*' | sort)
            grep -E '^=== |Synthesis|\[FAIL\]|SKIP' "$OUT/tests.log" | tail -60
            summary+=("test binaries: $pass passed, $fail failed, $skip skipped")
            ;;
        demo)
            if LD_LIBRARY_PATH="$VMEM_TEST_LD" ./build-gpu/examples/vmem-demo >"$OUT/demo.log" 2>&1; then
                summary+=("demo: ok ($(grep -m1 "libvmem demo on" "$OUT/demo.log"))")
            else
                summary+=("demo: FAILED")
            fi
            cat "$OUT/demo.log"
            ;;
        *)
            local name
            name=$(basename "$step")
            mkdir -p "$OUT/$name.out"
            if OUT="$OUT/$name.out" bash "$step" >"$OUT/$name.log" 2>&1; then
                summary+=("$step: ok")
            else
                summary+=("$step: FAILED (exit $?)")
            fi
            tail -40 "$OUT/$name.log"
            ;;
        esac
    done
    # Only a few files come back from the machine: pack everything into one.
    (cd "$OUT" && tar czf /tmp/vmem-gpu-results.tgz . && find . -mindepth 1 -delete &&
        mv /tmp/vmem-gpu-results.tgz results.tgz)
    echo "===== summary (all logs in \$OUT/results.tgz)"
    printf '%s\n' "${summary[@]}"
}

case "${1:-}" in
prepare) shift; prepare "$@" ;;
device) shift; device "$@" ;;
*) sed -n '2,20p' "$0"; exit 2 ;;
esac
