#!/usr/bin/env bash
# Set up libvmem on a fresh Debian 12 machine: install the Debian packages that
# are missing, configure and build into build/, then run the demo.
#
#   scripts/setup.sh            install what is missing, build, run the demo
#   scripts/setup.sh --no-demo  the same without the demo (used by .ci/run)
#   scripts/setup.sh --python   also the packages `pip install .` and
#                               `python3 -m build` need without network access
#                               (python3-venv, python3-mesonpy, python3-build)
#
# Extra meson options can be passed in MESON_OPTIONS, e.g. MESON_OPTIONS=-Dcuda=disabled.
# The output is a few lines; the full logs are build/setup-*.log.
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
python=0
for arg in "$@"; do
    case "$arg" in
    --no-demo) run_demo=0 ;;
    --python) python=1 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "setup: unknown argument '$arg' (--no-demo, --python)" >&2; exit 2 ;;
    esac
done

mkdir -p build
log_apt=build/setup-apt.log
log_setup=build/setup-meson.log
log_build=build/setup-build.log

# What the default build uses; jemalloc only for the opt-in benchmark.
packages=(meson ninja-build pkg-config gcc g++ python3 libcriterion-dev libbenchmark-dev
          libcjson-dev zlib1g-dev)
case " ${MESON_OPTIONS:-} " in
*-Djemalloc=enabled*) packages+=(libjemalloc-dev) ;;
esac
[ "$python" = 1 ] && packages+=(python3-venv python3-pip python3-mesonpy python3-build)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]} (log: $log_apt)"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    if ! { $sudo apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"; } >"$log_apt" 2>&1; then
        tail -20 "$log_apt"
        echo "setup: apt-get failed (full log: $log_apt)"
        exit 1
    fi
else
    echo "setup: the Debian packages are present"
fi

# The CUDA toolkit is optional (meson option cuda=auto); use it where it is.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi

ok=0
if [ -f build/build.ninja ]; then
    meson configure build ${MESON_OPTIONS:-} >"$log_setup" 2>&1 && ok=1
else
    find build -mindepth 1 -maxdepth 1 ! -name 'setup-*.log' -exec rm -rf {} +
    meson setup build ${MESON_OPTIONS:-} >"$log_setup" 2>&1 && ok=1
fi
if [ "$ok" != 1 ]; then
    tail -30 "$log_setup"
    echo "setup: meson failed (full log: $log_setup)"
    exit 1
fi
# Meson's own messages that matter (CUDA found but not loadable, ...) and the summary.
grep -E 'WITHOUT CUDA|WARNING' "$log_setup" | sed 's/^/setup: /' || true
sed -n '/^libvmem [0-9]/,/^Found ninja/p' "$log_setup" | grep -v '^Found ninja' | sed '/^ *$/d' || true

if ! ninja -C build >"$log_build" 2>&1; then
    grep -E -A12 'FAILED|error:' "$log_build" | head -40
    echo "setup: build failed (full log: $log_build)"
    exit 1
fi
echo "setup: built build/ ($(grep -c '^\[' "$log_build") steps; log: $log_build)"

if [ "$run_demo" = 1 ]; then
    echo
    ./build/examples/vmem-demo
fi
