#!/usr/bin/env bash
# Builds an offline bundle for a node with no package access (e.g. the GPU node): a wheelhouse of
# mlir-farm and every dependency for that node's Python, plus pycuda's sdist and the wheels its
# build needs (pycuda has no wheels: it is built on the node, where CUDA and libcuda are).
#
#   deploy/offline_bundle.sh [--python 3.12] [--out mlir-farm-bundle.tar.gz]     # on a connected machine
#   scp mlir-farm-bundle.tar.gz node: && ssh node 'tar xzf mlir-farm-bundle.tar.gz && cd mlir-farm-bundle && ./install.sh'
set -euo pipefail
cd "$(dirname "$0")/.."
PY=3.12
OUT=mlir-farm-bundle.tar.gz
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PY="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
PIP="${PIP:-.venv/bin/python -m pip}"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
BUNDLE="$STAGE/mlir-farm-bundle"
mkdir -p "$BUNDLE/wheelhouse" "$BUNDLE/pycuda"
TARGET=(--python-version "$PY" --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --only-binary=:all:)

echo "== mlir-farm wheel"
$PIP wheel -q --no-deps -w "$BUNDLE/wheelhouse" .
echo "== dependencies for CPython $PY"
$PIP download -q -d "$BUNDLE/wheelhouse" "${TARGET[@]}" "$(ls "$BUNDLE"/wheelhouse/mlir_farm-*.whl)[test]"
echo "== pycuda sdist and its build dependencies"
# pip reads the sdist's metadata by running its setup; isolated, that setup's own build dependencies
# (numpy) would have to be built from source as well, and fail
$PIP download -q -d "$BUNDLE/pycuda" --no-deps --no-binary=:all: --no-build-isolation "pycuda>=2024.1"
$PIP download -q -d "$BUNDLE/pycuda" "${TARGET[@]}" mako platformdirs pytools siphash24 typing-extensions
cp -r deploy "$BUNDLE/deploy"

cat > "$BUNDLE/install.sh" <<'NODE'
#!/usr/bin/env bash
# On the node: a venv from the wheelhouse (no network), then pycuda built against the local CUDA.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --no-index --find-links wheelhouse "mlir-farm[test]"
.venv/bin/python -m pip install -q --no-index --find-links pycuda mako platformdirs pytools siphash24 typing-extensions
if [ -x deploy/gpu_node_setup.sh ]; then
    VENV="$PWD/.venv" PYCUDA_DIR="$PWD/pycuda" deploy/gpu_node_setup.sh
else
    echo "deploy/gpu_node_setup.sh not in the bundle: build pycuda as deploy/README.md says" >&2
fi
echo "installed: $(.venv/bin/python -c 'import orchestrator, celery; print("mlir-farm with celery", celery.__version__)')"
NODE
chmod +x "$BUNDLE/install.sh"
tar czf "$OUT" -C "$STAGE" mlir-farm-bundle
echo "bundle: $OUT ($(du -h "$OUT" | cut -f1))"
