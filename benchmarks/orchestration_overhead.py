"""Orchestration overhead of the farm, on a real redis-server with real Celery workers.

1. Time per iteration spent outside compile and measure: an iteration's wall time (compile dispatched
   -> outcome known) minus the time inside its compile and measure tasks = queueing, messaging, state
   commits, the advisor and file writes.
2. Compile throughput with 1 vs 2 compile workers: a batch of `--compile-only` jobs (lowering + v0
   compile each), timed from submit to the last job done, workers started and warmed up beforehand.

On a machine without a GPU, measure tasks are served by the TEST DOUBLE FakeGpuMeasure
(tests/test_orchestrator_doubles.py), which returns at once; the results say which measure ran.

    .venv/bin/python benchmarks/orchestration_overhead.py [--copies 3] [--iterations 4]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from conftest import MODELS, Farm, RedisServer  # noqa: E402  (the tests' real-Redis farm)
from orchestrator.embedded import local_gpus  # noqa: E402

GOOD_MODELS = ("matmul64.py", "elementwise_chain.py", "rowsum.py")
ZOO = REPO / "tests" / "data" / "zoo"
RESULTS = REPO / "benchmarks" / "results" / "orchestration_overhead.md"


def _models(folder: Path, copies: int, sources: list[Path]) -> list[str]:
    """`copies` distinct files per model (separate jobs, separate lowering), named after the folder too:
    jobs are named after their model file and the farm refuses a second job of a name."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for c in range(copies):
        for source in sources:
            target = folder / f"{source.stem}_{folder.name}{c}.py"
            shutil.copy(source, target)
            paths.append(str(target))
    return paths


def _submit(farm: Farm, models: list[str], *flags: str) -> float:
    started = time.perf_counter()
    done = farm.cli("submit", *models, "--quiet", *flags)
    if done.returncode != 0:
        raise SystemExit(f"submit failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - started


def overhead(work: Path, copies: int, iterations: int) -> tuple[list[float], list[float], str]:
    redis = RedisServer(work / "redis-overhead")
    redis.start()
    farm = Farm(redis, work / "out-overhead")
    try:
        farm.start_workers(compile_workers=2, gpu_workers=1)
        tests_models = [MODELS / n for n in GOOD_MODELS]
        _submit(farm, _models(work / "warmup", 1, tests_models), "--compile-only")  # warm the workers' imports
        batch_start = len(farm.store.jobs())
        for model in _models(work / "overhead", copies, tests_models):  # one job at a time: no queueing
            _submit(farm, [model], "--iterations", str(iterations))
        jobs = farm.store.jobs()[batch_start:]
        outside, inside = [], []
        for job in jobs:
            for it in job.iterations:
                if it.finished and it.compile and it.compile.ok:
                    wall = it.finished - it.started
                    tasks = it.compile_task_seconds + it.measure_task_seconds
                    outside.append(wall - tasks)
                    inside.append(tasks)
        return outside, inside, jobs[0].measure_impl
    finally:
        farm.stop()
        redis.stop()


def throughput(work: Path, copies: int, workers: int) -> tuple[int, float]:
    redis = RedisServer(work / f"redis-{workers}")
    redis.start()
    farm = Farm(redis, work / f"out-{workers}")
    try:
        farm.start_workers(compile_workers=workers, gpu_workers=1)
        _submit(farm, _models(work / f"warm-{workers}", 1, [MODELS / n for n in GOOD_MODELS]), "--compile-only")
        models = _models(work / f"batch-{workers}", copies, sorted(ZOO.glob("*.py")))
        return len(models), _submit(farm, models, "--compile-only")
    finally:
        farm.stop()
        redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=2, help="copies of each model per batch")
    parser.add_argument("--iterations", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlir-farm-bench-") as tmp:
        work = Path(tmp)
        outside, inside, measure = overhead(work, args.copies, args.iterations)
        runs = {n: throughput(work, args.copies, n) for n in (1, 2)}
    gpus = local_gpus()
    device = (f"{platform.node()}: {os.cpu_count()} CPU cores; "
              + ("; ".join(gpus) if gpus else "no GPU (measure: TEST DOUBLE FakeGpuMeasure)"))
    per_min = {n: jobs / seconds * 60 for n, (jobs, seconds) in runs.items()}
    lines = [
        "# Orchestration overhead", "",
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"- device: {device}",
        f"- command: `{' '.join([Path(sys.executable).name, 'benchmarks/orchestration_overhead.py', *sys.argv[1:]])}`",
        f"- farm: real redis-server and `celery worker` processes on this machine; measure = `{measure}`", "",
        "## Time per iteration outside compile and measure", "",
        f"{len(outside)} iterations ({args.copies * len(GOOD_MODELS)} jobs run one after another, up to "
        f"{args.iterations} iterations each; 2 compile workers, 1 gpu worker):", "",
        "| | median s | mean s | max s |", "|---|---|---|---|",
        f"| outside the tasks (queues, messages, state, advisor, files) | {statistics.median(outside):.3f} | "
        f"{statistics.mean(outside):.3f} | {max(outside):.3f} |",
        f"| inside compile + measure tasks | {statistics.median(inside):.3f} | {statistics.mean(inside):.3f} | "
        f"{max(inside):.3f} |", "",
        f"## Compile throughput (`--compile-only` on tests/data/zoo x {args.copies}: lowering + v0 compile per job)", "",
        "| compile workers | jobs | seconds | jobs/min | speedup |", "|---|---|---|---|---|",
    ] + [f"| {n} | {jobs} | {seconds:.1f} | {per_min[n]:.1f} | {per_min[n] / per_min[1]:.2f}x |"
         for n, (jobs, seconds) in runs.items()]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
