# Sourced by bench/compare-gpu.sh and scripts/gpu/replay-alternate.sh, from
# the repository root: build_torch builds bench/torch_replay.cc against the
# PyTorch of $PYTHON into $TORCH_BIN (sets TORCH_VERSION).  Defaults: REPO
# the current directory, PYTHON python3, CUDA_HOME the toolkit of nvcc (else
# /usr/local/cuda), TORCH_BUILD $REPO/build-compare/torch-build (not under
# $OUT: no binaries in the results).
REPO=${REPO:-$PWD}
PYTHON=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
TORCH_BUILD=${TORCH_BUILD:-$REPO/build-compare/torch-build}
TORCH_BIN=$TORCH_BUILD/torch-replay
build_torch() {
    local dir=$TORCH_BUILD paths inc libs abi
    mkdir -p "$dir"
    paths=$("$PYTHON" -c "import torch, torch.utils.cpp_extension as c; print(';'.join(c.include_paths())); print(';'.join(c.library_paths())); print(int(torch.compiled_with_cxx11_abi())); print(torch.__version__)") || return 1
    inc=$(sed -n 1p <<<"$paths" | tr ';' '\n' | sed 's/^/-I/' | tr '\n' ' ')
    libs=$(sed -n 2p <<<"$paths" | tr ';' '\n' | sed -e 's/^/-L/' | tr '\n' ' ')
    local rpath
    rpath=$(sed -n 2p <<<"$paths" | tr ';' '\n' | sed -e 's/^/-Wl,-rpath,/' | tr '\n' ' ')
    abi=$(sed -n 3p <<<"$paths")
    TORCH_VERSION=$(sed -n 4p <<<"$paths")
    # $inc, $libs and $rpath are lists of flags, split on purpose
    # shellcheck disable=SC2086
    cc -O2 -std=c11 -D_GNU_SOURCE -Ibench -c bench/trace.c -o "$dir/trace.o" &&
        cc -O2 -std=c11 -D_GNU_SOURCE -Ibench -c bench/replay.c -o "$dir/replay.o" &&
        cc -O2 -std=c11 -D_GNU_SOURCE -Ibench -c bench/steps.c -o "$dir/steps.o" &&
        c++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" -Ibench -Iinclude $inc -I"$CUDA_HOME/include" \
            bench/torch_replay.cc "$dir/trace.o" "$dir/replay.o" "$dir/steps.o" -o "$TORCH_BIN" \
            $libs $rpath -Wl,--allow-shlib-undefined -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -lc10_cuda \
            -Wl,--as-needed -ldl -lz -lm
}
