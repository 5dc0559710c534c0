"""The toolchain a worker runs with (for env_check.md), read without importing torch or MLIR."""
from __future__ import annotations

import platform
import shutil
import subprocess
from importlib import metadata

from orchestrator.records import EnvFacts


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _run(cmd: list[str]) -> list[str]:
    if shutil.which(cmd[0]) is None:
        return []
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def gather(worker: str) -> EnvFacts:
    ptxas = _run(["ptxas", "--version"])
    return EnvFacts(worker=worker, python=platform.python_version(), torch=_version("torch"),
                    torch_mlir=_version("torch-mlir"), mlir_bindings=f"numba-cuda-mlir {_version('numba-cuda-mlir')}",
                    ptxas=ptxas[-1] if ptxas else "not found", gpus=_run(["nvidia-smi", "-L"]))
