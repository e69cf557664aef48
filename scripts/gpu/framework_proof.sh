#!/usr/bin/env bash
# Issue 5's proof on a real GPU: PyTorch and CuPy on libvmem, a limit cut
# mid-run, train_mlp.  Prints a summary table last; logs and JSON in $OUT.
#
# Through the lead's runner (builds build-gpu/ here, carries it):
#   scripts/gpu-run.sh device scripts/gpu/framework_proof.sh
# Standalone on the GPU machine (builds build-proof/ if nothing is built):
#   OUT=/tmp/proof bash scripts/gpu/framework_proof.sh [--parts 1,2,3,4,5] [--quick]
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/vmem-proof}"
export OUT
mkdir -p "$OUT"

if [ -z "${VMEM_LIBRARY:-}" ] || [ ! -e "${VMEM_LIBRARY}" ]; then
    for b in "${BUILD:-build-gpu}" build-proof; do
        if [ -e "$b/src/libvmem.so" ]; then
            export BUILD="$b" VMEM_LIBRARY="$PWD/$b/src/libvmem.so"
            break
        fi
    done
fi
if [ -z "${VMEM_LIBRARY:-}" ] || [ ! -e "${VMEM_LIBRARY}" ]; then
    echo "framework_proof: building libvmem and train_mlp in build-proof/ (log: $OUT/build.log)"
    export PATH="/usr/local/cuda/bin:$PATH"
    if ! { [ -f build-proof/build.ninja ] ||
           meson setup build-proof -Dcuda=enabled -Dtests=false -Dbench=false \
               -Dbuildtype=release; } >"$OUT/build.log" 2>&1 ||
       ! ninja -C build-proof >>"$OUT/build.log" 2>&1; then
        tail -20 "$OUT/build.log"
        echo "framework_proof: build failed"
        exit 2
    fi
    export BUILD=build-proof VMEM_LIBRARY="$PWD/build-proof/src/libvmem.so"
fi
export BUILD="${BUILD:-build-gpu}"
# libvmem and the CUDA runtime for the C binaries; Python keeps its own
# libraries (framework_proof.py preloads what libvmem lacks from carry-libs).
export LD_LIBRARY_PATH="$(dirname "$VMEM_LIBRARY"):${LD_LIBRARY_PATH:-}"
echo "framework_proof: libvmem $VMEM_LIBRARY, build $BUILD, logs $OUT"
exec python3 "scripts/gpu/${VMEM_PROOF_SCRIPT:-framework_proof.py}" "$@"
