#!/usr/bin/env bash
# Builds pycuda (the `gpu` extra; it has no wheels) on a GPU node without package access, from its
# sdist and the wheels of its build and run dependencies, against the node's CUDA and libcuda.
# Idempotent: an existing build in the target is reused; so is WHEEL_DIR/pycuda-site.tgz, a TARGET
# built on an identical node (`tar czf pycuda-site.tgz -C /tmp pycuda-site`), where it imports.
#
#   deploy/gpu_node_setup.sh [WHEEL_DIR (default .whl)] [TARGET (default /tmp/pycuda-site)]
#   then: export PYTHONPATH=TARGET:$PYTHONPATH
# WHEEL_DIR holds pycuda-*.tar.gz and wheels of mako, markupsafe, platformdirs, pytools, siphash24,
# setuptools and wheel for the node's Python (see deploy/README.md for the download commands).
set -euo pipefail
WHEELS=$(readlink -f "${1:-.whl}")
TARGET=${2:-/tmp/pycuda-site}
PY=${PYTHON:-python3}
if PYTHONPATH="$TARGET" "$PY" -c "import pycuda.driver" 2>/dev/null; then
    echo "pycuda already built in $TARGET"; exit 0
fi
if [ -f "$WHEELS/pycuda-site.tgz" ] && [ ! -e "$TARGET" ]; then
    UNPACK=$(mktemp -d)
    tar xzf "$WHEELS/pycuda-site.tgz" -C "$UNPACK"
    if PYTHONPATH="$UNPACK/pycuda-site" "$PY" -c "import pycuda.driver" 2>/dev/null; then
        mkdir -p "$(dirname "$TARGET")" && mv "$UNPACK/pycuda-site" "$TARGET" && rm -rf "$UNPACK"
        echo "pycuda unpacked into $TARGET from $WHEELS/pycuda-site.tgz"; exit 0
    fi
    rm -rf "$UNPACK"  # built for another node: build here
fi
mkdir -p "$TARGET"
"$PY" -m pip install -q --no-index --no-deps --target "$TARGET" \
    "$WHEELS"/mako-*.whl "$WHEELS"/markupsafe-*.whl "$WHEELS"/platformdirs-*.whl "$WHEELS"/pytools-*.whl \
    "$WHEELS"/siphash24-*.whl
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
LIBCUDA=$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so[ .]/ {print $NF; exit}') || true)
[ -n "$LIBCUDA" ] || LIBCUDA=$(find /usr/lib /usr/lib64 /usr/local/nvidia -name 'libcuda.so*' 2>/dev/null | head -1)
[ -n "$LIBCUDA" ] || { echo "libcuda.so not found: is the NVIDIA driver installed?" >&2; exit 1; }
BUILD=$(mktemp -d)
BUILD_TOOLS=$(mktemp -d)
"$PY" -m pip install -q --no-index --no-deps --target "$BUILD_TOOLS" "$WHEELS"/setuptools-*.whl "$WHEELS"/wheel-*.whl
tar xzf "$WHEELS"/pycuda-*.tar.gz -C "$BUILD"
cd "$BUILD"/pycuda-*
export PYTHONPATH="$BUILD_TOOLS:$TARGET:${PYTHONPATH:-}"
"$PY" configure.py --cuda-root="$CUDA_ROOT" --cudadrv-lib-dir="$(dirname "$LIBCUDA")" > /dev/null
MAX_JOBS=$(nproc) "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target "$TARGET" .
rm -rf "$BUILD" "$BUILD_TOOLS"
PYTHONPATH="$TARGET" "$PY" -c "import pycuda, pycuda.driver as d; d.init(); print('pycuda', pycuda.VERSION_TEXT, 'sees', d.Device.count(), 'GPU(s)')"
