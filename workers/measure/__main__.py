"""Measure one version of several job folders on this node's GPU, one table row per job.

    python -m workers.measure JOB_DIR... [--version N] [--no-profile] [--timeout S]

The batch form of `measure_iteration` (each job writes its own vN/*.md); the rows it prints are the
results table of benchmarks/results/measure_h200.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from workers.measure import measure_iteration
from workers.records import MeasureResult, Timing

HEADER = ("| model | status | kernels | correct (max abs err) | ours us | eager us | torch.compile us "
          "| ours vs eager | ours vs compile | top kernel SM % / mem % | wall s |\n"
          "|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|")


def _us(t: Timing | None) -> str:
    return f"{t.median_us:.1f}" if t else "n/a"


def _speedup(peer: Timing | None, ours: Timing | None) -> str:
    return f"{peer.median_us / ours.median_us:.2f}x" if peer and ours else "n/a"


def row(name: str, r: MeasureResult, wall_s: float) -> str:
    top = max(r.kernels, key=lambda k: k.duration_us) if r.kernels else None
    correct = f"{'yes' if r.correct else 'no'} ({r.max_abs_err:.2g})" if r.max_abs_err is not None else "n/a"
    sol = f"{top.sm_throughput_pct:.1f} / {top.memory_throughput_pct:.1f}" if top else "n/a"
    n_kernels = len(r.kernels) if r.kernels else "n/a"
    return (f"| {name} | {r.status} | {n_kernels} | {correct} | {_us(r.time)} | {_us(r.eager)} | {_us(r.compiled)} "
            f"| {_speedup(r.eager, r.time)} | {_speedup(r.compiled, r.time)} | {sol} | {wall_s:.0f} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.measure", description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="+", help="job folders (each holds vN/config.json and vN/kernels.ptx)")
    parser.add_argument("--version", type=int, default=0)
    parser.add_argument("--no-profile", action="store_true", help="skip Nsight Compute")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per job (run and profile together)")
    args = parser.parse_args(argv)
    print(HEADER, flush=True)
    for job in args.jobs:
        start = time.monotonic()
        result = measure_iteration(job, args.version, profile=not args.no_profile, timeout_s=args.timeout)
        print(row(os.path.basename(os.path.normpath(job)), result, time.monotonic() - start), flush=True)
        if result.error:
            print(f"  {result.status}: {result.error[:400]}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
