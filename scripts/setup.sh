#!/usr/bin/env bash
# Set up libvmem on a fresh Debian 12 machine: install the Debian packages that
# are missing, configure and build into build/, then run the demo.
#
#   scripts/setup.sh            install what is missing, build, run the demo
#   scripts/setup.sh --no-demo  the same without the demo (used by .ci/run)
#
# Extra meson options can be passed in MESON_OPTIONS, e.g. MESON_OPTIONS=-Dcuda=disabled.
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
[ "${1:-}" = "--no-demo" ] && run_demo=0

packages=(meson ninja-build pkg-config gcc g++ python3 libcriterion-dev libbenchmark-dev
          libjemalloc-dev libcjson-dev zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing missing packages: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
else
    echo "setup: all required Debian packages are present"
fi

# The CUDA toolkit is optional (meson option cuda=auto); use it where it is.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi

if [ -d build ] && [ -f build/build.ninja ]; then
    meson configure build ${MESON_OPTIONS:-} >/dev/null
else
    rm -rf build
    meson setup build ${MESON_OPTIONS:-}
fi
ninja -C build

if [ "$run_demo" = 1 ]; then
    echo
    ./build/examples/vmem-demo
fi
