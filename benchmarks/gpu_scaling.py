"""Measured iterations per minute with 1 and with N GPU measure workers on the same batch, and the check
that no two measurements ever shared a GPU.

Each run starts its own farm on this host: a redis-server (password, no persistence), compile workers,
then 1 or N measure workers, worker i pinned with CUDA_VISIBLE_DEVICES=i (all to GPU 0 with --same-gpu,
the single-GPU test of the pinning and of the per-GPU lock), every process with NCCL_NVLS_ENABLE=0. The
batch (the same models and --iterations) goes into a fresh output folder with its own experience log,
so the advisor decides alike in both runs, and its own empty compile caches (torch.compile of the
reference, Triton, CUDA's JIT), so both start equally cold; the models are lowered once beforehand (or
taken from --lowered, for a GPU node where torch-mlir does not install). Throughput = measured
iterations / wall time of `orchestrator submit`.

Where there is no GPU (or with --double), the measurement is the TEST DOUBLE FakeGpuMeasure holding
each "GPU" --double-measure-s seconds, and the output says so.

    python benchmarks/gpu_scaling.py [--workers N] [--same-gpu] [--iterations 3] [--lowered DIR] [--results FILE]
    python benchmarks/gpu_scaling.py --lower-to DIR     # lower the batch here, to carry it to a GPU node
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ["NCCL_NVLS_ENABLE"] = "0"  # inherited by every process this script starts

from conftest import RedisServer  # noqa: E402  (the tests' redis-server: a free port, a password, a wait until up)
from orchestrator.embedded import WorkerPool, WorkerSpec, local_gpus  # noqa: E402
from orchestrator.gpus import GpuUsage, gpu_usage, usage_text  # noqa: E402
from orchestrator.settings import FarmSettings  # noqa: E402
from orchestrator.state import open_store  # noqa: E402

ZOO = REPO / "tests" / "data" / "zoo"
# the six zoo models measured correct on the H200 (benchmarks/results/measure_h200.md)
MODELS = ("matmul_square", "mlp", "softmax", "elementwise_chain", "conv_bn_relu", "small_cnn")
DOUBLE = "test_orchestrator_doubles:FakeGpuMeasure.measure_iteration"
LOWERED_FILES = ("model_linalg.mlir", "model_info.json", "model.py")


@dataclass
class Run:
    label: str
    gpu_workers: int
    pinning: str  # the CUDA_VISIBLE_DEVICES of the workers, comma-separated
    seconds: float
    usage: GpuUsage

    @property
    def measured(self) -> int:
        return sum(d.measurements for d in self.usage.devices)

    @property
    def per_minute(self) -> float:
        return self.measured / self.seconds * 60


def lower(models: list[str], folder: Path) -> None:
    from workers.frontend import lower_model

    for name in models:
        lower_model(str(ZOO / f"{name}.py"), str(folder / name))
        print(f"lowered {name} into {folder / name}", flush=True)


def run_batch(args, work: Path, label: str, pinning: list[str], worker_env: dict[str, str]) -> Run:
    """One farm, one batch: returns its wall time and every measurement's GPU use."""
    out = work / label
    caches = {var: str(out / "caches" / name) for var, name in
              (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"), ("CUDA_CACHE_PATH", "nv"))}
    for name in args.models:  # the lowered model, so the frontend task reuses it
        (out / name).mkdir(parents=True)
        for file in LOWERED_FILES:
            shutil.copy(args.lowered / name / file, out / name / file)
    redis = RedisServer(out / "redis", persistent=False)
    redis.start()
    url = redis.url
    try:
        with WorkerPool(FarmSettings.redis(url, out_root=str(out)), str(out / "worker-logs"),
                        {**worker_env, **caches}) as pool:
            for i in range(args.compile_workers):
                pool.start(WorkerSpec(f"compile{i + 1}", "compile"))
            for i, gpu in enumerate(pinning):
                pool.start(WorkerSpec(f"gpu{i}", "gpu", gpu=gpu))
            pool.wait_ready()
            env = {k: v for k, v in os.environ.items() if not k.startswith("MLIR_FARM_")}
            started = time.perf_counter()
            with open(out / "submit.log", "w") as log:
                done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit",
                                       *[str(ZOO / f"{m}.py") for m in args.models], "--out", str(out), "--broker",
                                       url, "--iterations", str(args.iterations)], env=env, cwd=REPO, stdout=log,
                                      stderr=subprocess.STDOUT)
            seconds = time.perf_counter() - started
        if done.returncode != 0:
            print(f"{label}: submit exited {done.returncode}, a model failed (its measured iterations still count); "
                  f"see {out / 'submit.log'}", flush=True)
        return Run(label, len(pinning), ",".join(pinning), seconds, gpu_usage(open_store(url).jobs()))
    finally:
        redis.stop()


def report(header: list[str], runs: list[Run]) -> str:
    """The result as markdown: the runs so far, their ratio, and every measurement's overlap check."""
    lines = header + [
        "", "| run | GPU workers | CUDA_VISIBLE_DEVICES | measured iterations | seconds | iterations/min | "
        "GPU busy s | lock wait s | overlaps |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        busy, waited = (sum(getattr(d, f) for d in r.usage.devices) for f in ("busy_s", "waited_s"))
        lines.append(f"| {r.label} | {r.gpu_workers} | {r.pinning} | {r.measured} | {r.seconds:.1f} | "
                     f"{r.per_minute:.2f} | {busy:.1f} | {waited:.1f} | {len(r.usage.overlaps)} |")
    if len(runs) == 2:
        lines += ["", f"throughput ratio {runs[1].label} / {runs[0].label}: **{runs[1].per_minute / runs[0].per_minute:.2f}x**"]
    for r in runs:
        lines += ["", f"GPU usage of {r.label} (`orchestrator gpus`):", "", "```", usage_text(r.usage), "```"]
    overlaps = sum(len(r.usage.overlaps) for r in runs)
    lines += ["", "overlap check over every measurement above: "
              + (f"FAIL, {overlaps} overlap(s)" if overlaps else "PASS, no two measurements shared a GPU")]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, help="GPU workers of the second run (default: GPUs here, at least 2)")
    parser.add_argument("--same-gpu", action="store_true", help="pin every worker to GPU 0 (a single-GPU node)")
    parser.add_argument("--iterations", type=int, default=3, help="most versions per model (default 3)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="zoo model names (default: six)")
    parser.add_argument("--compile-workers", type=int, default=min(4, max(1, (os.cpu_count() or 2) // 2)))
    parser.add_argument("--lowered", type=Path, help="folder with <model>/model_linalg.mlir... (from --lower-to)")
    parser.add_argument("--lower-to", type=Path, help="only lower the models into this folder, then stop")
    parser.add_argument("--double", action="store_true", help="measure with the TEST DOUBLE even on a GPU node")
    parser.add_argument("--double-measure-s", type=float, default=2.0, help="seconds each double measurement holds")
    parser.add_argument("--work", type=Path, help="folder for the runs' outputs and logs (default: a new temp folder)")
    parser.add_argument("--results", type=Path, help="also write the result (markdown) here")
    args = parser.parse_args()
    # a `timeout` around the script: unwind, so the farms it started are stopped and the results kept
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.lower_to:
        lower(args.models, args.lower_to)
        return 0

    gpus = local_gpus()
    double = args.double or not gpus
    workers = args.workers or max(2, len(gpus))
    if not double and not args.same_gpu and workers > len(gpus):
        raise SystemExit(f"{workers} workers but {len(gpus)} GPU(s): pass --same-gpu or fewer --workers")
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.lowered is None:
        args.lowered = work / "lowered"
        lower(args.models, args.lowered)
    worker_env = {}
    if double:
        worker_env = {"MLIR_FARM_MEASURE": DOUBLE, "FAKE_GPU_MEASURE_SLEEP_S": str(args.double_measure_s),
                      "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    pinning = ["0"] * workers if args.same_gpu else [str(i) for i in range(workers)]

    measure = (f"TEST DOUBLE FakeGpuMeasure (`{DOUBLE}`), each measurement holding its GPU "
               f"{args.double_measure_s:g} s" if double else "the real measure stage (pycuda, ncu)")
    header = [
        "# GPU scaling: measured iterations per minute, 1 vs N measure workers", "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- device: {platform.node()}: {os.cpu_count()} CPU cores; {'; '.join(gpus) or 'no GPU'}",
        f"- command: `NCCL_NVLS_ENABLE=0 {Path(sys.executable).name} benchmarks/gpu_scaling.py {' '.join(sys.argv[1:])}`",
        f"- measure: {measure}",
        f"- batch: {', '.join(args.models)}; up to {args.iterations} iterations each; {args.compile_workers} compile "
        f"worker(s); GPU workers pinned {'all to GPU 0 (--same-gpu)' if args.same_gpu else 'one per GPU'}; "
        f"outputs in {work}",
    ]
    runs = []
    for label, pins in (("1-worker", pinning[:1]), (f"{workers}-workers", pinning)):
        print(f"{label}: {len(args.models)} models x up to {args.iterations} iterations, CUDA_VISIBLE_DEVICES "
              f"{','.join(pins)}", flush=True)
        runs.append(run_batch(args, work, label, pins, worker_env))
        text = report(header, runs)
        if args.results:  # after each run, so a run cut short still leaves what was measured
            args.results.parent.mkdir(parents=True, exist_ok=True)
            args.results.write_text(text)
    print(text)
    overlaps = sum(len(r.usage.overlaps) for r in runs)
    return 1 if overlaps else 0


if __name__ == "__main__":
    sys.exit(main())
