"""Probe: is the gap between our memory-bound kernels and torch.compile's in the kernels or in how each is
launched and timed? Under ncu the two sides' kernels took the same time (the elementwise chain 124.9 us
each) while the timing protocol gave ours about 1 us more (probes_h200.md).

    python3 benchmarks/probes/launch_paths.py JOB... [--rounds N]   # GPU node; JOB: a compiled job folder

Per job, in one process and in alternating rounds, the measure worker's timing (workers/measure/timing.py)
of: our v0 as the worker launches it (PTX, JIT-compiled by the driver), our v0 from a cubin that CUDA's
ptxas built from the same PTX, and torch.compile of the model. Prints each round's medians and the ratios.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from workers.measure.gpu_run import Runner  # noqa: E402
from workers.measure.timing import time_gpu  # noqa: E402


def cubin_launches(runner: Runner, chip: str) -> list:
    """The runner's launches, their functions loaded from a cubin that ptxas built from its PTX."""
    import pycuda.driver as cuda

    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        Path(ptx).write_bytes(runner.ptx)
        subprocess.run([shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas", f"-arch={chip}", "-O3", ptx,
                        "-o", cubin], check=True)
        return runner.launches_from(cuda.module_from_buffer(Path(cubin).read_bytes()))


def compare(job: Path, runner: Runner, rounds: int) -> None:
    """Print each round's medians of the three sides for one job, then their medians."""
    import torch

    if not all(o.passed for o in runner.check()):
        print(f"| {job.name} | wrong result | | | | | |")
        return
    launches = cubin_launches(runner, runner.config.chip)
    fast = torch.compile(runner.model)
    sides = {"ptx": runner.run, "cubin": lambda: runner.run(launches), "compile": lambda: fast(*runner.inputs)}
    medians = {name: [] for name in sides}
    with torch.no_grad():
        for r in range(rounds):
            # the order turns each round, so no side always runs first
            for name in list(sides)[r % 3:] + list(sides)[:r % 3]:
                medians[name].append(time_gpu(sides[name]).median_us)
            p, c, t = (medians[n][-1] for n in ("ptx", "cubin", "compile"))
            print(f"| {job.name} | {r} | {p:.1f} | {c:.1f} | {t:.1f} | {t / p:.3f}x | {t / c:.3f}x |", flush=True)
    p, c, t = (statistics.median(medians[n]) for n in ("ptx", "cubin", "compile"))
    print(f"| {job.name} | median | {p:.1f} | {c:.1f} | {t:.1f} | {t / p:.3f}x | {t / c:.3f}x |", flush=True)


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("jobs", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("| job | round | ours PTX us | ours cubin us | torch.compile us | PTX vs compile | cubin vs compile |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for job in args.jobs:
        runner = Runner(str(job), 0)
        try:
            compare(job, runner, args.rounds)
        finally:  # the runner pushed torch's context for pycuda, which aborts at exit on a pushed one
            runner.context.pop()
        del runner
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
