#!/usr/bin/env bash
# Installs everything mlir-farm needs on a CPU machine: redis-server (Debian) and a .venv with the
# package, its pinned toolchain (torch 2.13 CPU, torch-mlir, numba-cuda-mlir) and the test tools.
# GPU nodes add the `gpu` extra (pycuda) as deploy/README.md describes.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -q && $SUDO apt-get install -y -q redis-server
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
echo "installed: $(.venv/bin/python -c 'import torch, torch_mlir, numba_cuda_mlir, celery; print("torch", torch.__version__, "celery", celery.__version__)')"
