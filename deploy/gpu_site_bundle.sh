#!/usr/bin/env bash
# Packs what a GPU node with no package access needs to run the whole farm, for a node whose
# python3 already has torch, numpy, pandas, matplotlib, click and CUDA's Python bindings (the H200 image):
#   - a site folder for that Python: the MLIR bindings with NVPTX (numba-cuda-mlir, slimmed to what
#     the compile stage loads), celery[redis], durable-rules and einops (which model files import);
#   - a redis-server binary and the shared libraries it needs beyond glibc.
# The result is one .tar.xz (about 45 MB) small enough to travel with the working tree.
#
#   deploy/gpu_site_bundle.sh [--python /path/to/python3.12] [--out .gpu-bundle/site.tar.xz]
#   on the node:  mkdir -p /tmp/farm && tar xJf site.tar.xz -C /tmp/farm
#                 export PYTHONPATH=/tmp/farm/site:$PWD PATH=/tmp/farm/bin:$PATH LD_LIBRARY_PATH=/tmp/farm/lib
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=$(command -v python3.12 || true)
OUT=.gpu-bundle/site.tar.xz
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PYTHON="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$PYTHON" ] || { echo "needs a Python of the node's version (3.12): pass --python" >&2; exit 2; }
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
echo "== site packages for $("$PYTHON" --version)"
# only what the node lacks: its own torch, numpy, pandas, matplotlib, click and CUDA bindings stay
"$PYTHON" -m pip install -q --no-deps --target "$STAGE/site" numba-cuda-mlir==0.6.0 "celery[redis]==5.7.0" \
    kombu amqp vine billiard redis tzlocal tzdata click-didyoumean click-plugins click-repl prompt_toolkit \
    wcwidth durable-rules==2.0.28 einops
rm -rf "$STAGE"/site/bin "$STAGE"/site/numba_cuda_mlir/lib
# the compile stage loads only these of the bindings' extension modules (workers/compile/mlir.py's
# dialect imports among them: a module left out fails every compile task on the node)
find "$STAGE/site/numba_cuda_mlir/_mlir/_mlir_libs" -name '_mlir*.so' \
    ! -name '_mlir.cpython*' ! -name '_mlirDialectsGPU*' ! -name '_mlirDialectsTransform*' \
    ! -name '_mlirRegisterEverything*' ! -name '_mlirTransformInterpreter*' ! -name '_mlirDialectsLinalg*' \
    ! -name '_mlirGPUPasses*' ! -name '_mlirLinalgPasses*' ! -name '_mlirDialectsNVGPU*' -delete
echo "== redis-server and its libraries"
mkdir -p "$STAGE/bin" "$STAGE/lib"
cp "$(readlink -f "$(command -v redis-server)")" "$STAGE/bin/redis-server"
for lib in liblzf.so.1 libjemalloc.so.2; do cp -L "/lib/x86_64-linux-gnu/$lib" "$STAGE/lib/"; done
mkdir -p "$(dirname "$OUT")"
tar cf - -C "$STAGE" site bin lib | xz -T0 -6 > "$OUT"
echo "bundle: $OUT ($(du -h "$OUT" | cut -f1))"
