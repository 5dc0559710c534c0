"""Compile time of the whole model zoo: serially in one process vs a process pool.

Each model is lowered (torch-mlir) and compiled to v0 PTX (MLIR + ptxas) in a fresh job folder.
Prints per-model times and the pool/serial ratio of wall-clock time, measured in the same run.

    .venv/bin/python benchmarks/compile_zoo.py [--workers N]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ZOO = sorted((Path(__file__).resolve().parents[1] / "tests" / "data" / "zoo").glob("*.py"))


def compile_one(model: str, out: str) -> tuple[str, float, float, bool]:
    from workers.compile import compile_iteration, initial_params
    from workers.frontend import lower_model

    job = os.path.join(out, Path(model).stem)
    started = time.perf_counter()
    lower_model(model, job)
    lowered = time.perf_counter()
    result = compile_iteration(job, 0, initial_params(job))
    return Path(model).stem, lowered - started, time.perf_counter() - lowered, result.ok


def run(workers: int) -> tuple[float, list]:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        if workers == 1:
            rows = [compile_one(str(m), out) for m in ZOO]
        else:
            with ProcessPoolExecutor(workers) as pool:
                rows = list(pool.map(compile_one, [str(m) for m in ZOO], [out] * len(ZOO)))
        return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    serial, rows = run(1)
    pooled, _ = run(args.workers)
    print(f"{'model':20} {'lower s':>8} {'compile s':>9} ok")
    for name, lower_s, compile_s, ok in rows:
        print(f"{name:20} {lower_s:8.2f} {compile_s:9.2f} {ok}")
    print(f"serial wall: {serial:.1f} s; pool of {args.workers}: {pooled:.1f} s; "
          f"speedup {serial / pooled:.2f}x over {len(ZOO)} models")


if __name__ == "__main__":
    main()
