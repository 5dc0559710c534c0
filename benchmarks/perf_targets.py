"""The performance targets of the H200, each line measured against its peer in the same run.

Two steps, because the GPU node cannot lower models (no torch-mlir there):

    .venv/bin/python benchmarks/perf_targets.py compile OUT [JOB...]  # CPU: lower + compile v0 of each model
                                                                      # (exit 1 if one did not compile)
    python3 benchmarks/perf_targets.py measure OUT [--record FILE]    # GPU node: every compiled vN, peers, table

(JOB...: only those targets, e.g. matmul4096_f16 conv3x3_resnet, for a short confirmation run.)

Lines (ratios = peer time / our time, i.e. our throughput as a fraction of the peer's):
- matmul 4096^3 f16, bf16, f32 and f32 in TF32 (tensor cores, job option --tf32) against torch.matmul
  (cuBLAS) in the same precision: target 0.5x;
- memory-bound ops over 256 MB: our bandwidth (bytes of inputs + outputs / our time) against a device
  copy of 256 MB timed here: target 0.8x; and no slower than torch.compile (1.0x);
- ResNet 3x3 conv, batch 32, against cuDNN through torch: target 0.5x;
- the zoo's whole small networks: geometric mean against PyTorch eager: target 1.0x (torch.compile shown).
Timing is the measure worker's protocol (warm-up, L2 flushed, kernel time only: the GPU held back until
the run's launches are queued, CUDA events, median) for ours, eager and torch.compile; the copy peer uses
the same function.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workers.layout import COMPILE_RESULT_FILE, MODEL_INFO_FILE  # noqa: E402
from workers.records import ELEMENT_BYTES, CompileResult, MeasureResult, ModelInfo  # noqa: E402

MODELS = REPO / "benchmarks" / "models"
ZOO = REPO / "tests" / "data" / "zoo"
COPY_BYTES = 256 << 20


@dataclass(frozen=True)
class Target:
    line: str
    model: Path
    peer: str  # "eager" (the library call torch makes) or "copy" (device copy bandwidth)
    goal: float  # ratio to reach
    tf32: bool = False  # compiled in precision tf32 (submit --tf32); the peer then uses TF32 too

    @property
    def job(self) -> str:
        return self.model.stem + ("_tf32" if self.tf32 else "")


TARGETS = [
    Target("matmul f16 (tensor cores)", MODELS / "matmul4096_f16.py", "eager", 0.5),
    Target("matmul bf16 (tensor cores)", MODELS / "matmul4096_bf16.py", "eager", 0.5),
    Target("matmul f32", MODELS / "matmul4096_f32.py", "eager", 0.5),
    Target("matmul tf32 (tensor cores)", MODELS / "matmul4096_f32.py", "eager", 0.5, tf32=True),
    Target("memory: elementwise chain", MODELS / "elementwise_large.py", "copy", 0.8),
    Target("memory: softmax", MODELS / "softmax_large.py", "copy", 0.8),
    Target("memory: layernorm", MODELS / "layernorm_large.py", "copy", 0.8),
    Target("memory: row sum", MODELS / "reduce_sum_large.py", "copy", 0.8),
    Target("conv 3x3 ResNet, batch 32", MODELS / "conv3x3_resnet.py", "eager", 0.5),
    Target("network", ZOO / "mlp.py", "eager", 1.0),
    Target("network", ZOO / "small_cnn.py", "eager", 1.0),
]


def compile_one(target: Target, out: str) -> str:
    from workers.compile import compile_iteration, initial_params
    from workers.frontend import FrontendError, lower_model

    job = os.path.join(out, target.job)
    try:
        lower_model(str(target.model), job)
    except FrontendError as e:
        return f"{target.job}: not lowered: {e}"
    result = compile_iteration(job, 0, initial_params(job, tf32=target.tf32))
    return f"{target.job}: v0 " + ("compiled" if result.ok else f"failed at {result.stage}: {result.error[:300]}")


def compiled_versions(job: Path) -> list[int]:
    versions = []
    for vdir in job.glob("v*"):
        result = vdir / COMPILE_RESULT_FILE
        if vdir.name[1:].isdigit() and result.exists() and CompileResult.from_json(result.read_text()).ok:
            versions.append(int(vdir.name[1:]))
    return sorted(versions)


def moved_bytes(info: ModelInfo) -> int:
    """Bytes a perfect kernel reads and writes once: the inputs and the outputs (weights are small here)."""
    inputs = sum(math.prod(s) * ELEMENT_BYTES.get(d, 4) for s, d in zip(info.input_shapes, info.input_dtypes))
    outputs = sum(math.prod(s) * ELEMENT_BYTES.get(info.input_dtypes[0], 4) for s in info.output_shapes)
    return inputs + outputs


def copy_bandwidth_gbs() -> float:
    import torch

    from workers.measure.timing import time_gpu

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = time_gpu(lambda: dst.copy_(src))
    return 2 * COPY_BYTES / t.median_us / 1e3


def best(results: list[MeasureResult]) -> MeasureResult | None:
    good = [r for r in results if r.status == "ok" and r.correct and r.time]
    return min(good, key=lambda r: r.time.median_us) if good else None


def measure(out: Path, profile: bool, timeout_s: float) -> list[str]:
    from workers.measure import measure_iteration

    copy_gbs = copy_bandwidth_gbs()
    rows = [f"device copy of {COPY_BYTES >> 20} MB: {copy_gbs:.0f} GB/s (the memory lines' peer)", "",
            "| line | model | best of | ours us | peer | peer us | ratio | goal | met | torch.compile us | vs compile |",
            "|---|---|---|---:|---|---:|---:|---:|---|---:|---:|"]
    network_ratios = []
    absent = [t.job for t in TARGETS if not (out / t.job).is_dir()]
    for target in TARGETS:
        job = out / target.job
        if target.job in absent:
            continue
        versions = compiled_versions(job)
        if not versions:
            rows.append(f"| {target.line} | {target.job} | no compiled version in {job} | | | | | | no | | |")
            continue
        results = [measure_iteration(str(job), v, profile=profile, timeout_s=timeout_s) for v in versions]
        for v, r in zip(versions, results):
            print(f"{target.job} v{v}: {r.status} correct={r.correct} "
                  f"{r.time.median_us if r.time else 'n/a'} us {r.error[:200]}", flush=True)
        r = best(results)
        if r is None:
            statuses = ", ".join(f"v{v} {x.status}{'' if x.correct else ' (wrong)'}" for v, x in zip(versions, results))
            rows.append(f"| {target.line} | {target.job} | {statuses} | | | | | {target.goal} | no | | |")
            continue
        ours = r.time.median_us
        if target.peer == "copy":
            info = ModelInfo.from_json((job / MODEL_INFO_FILE).read_text())
            ours_gbs = moved_bytes(info) / ours / 1e3
            peer, peer_us, ratio = "copy bandwidth", moved_bytes(info) / copy_gbs / 1e3, ours_gbs / copy_gbs
        else:
            peer, peer_us, ratio = "eager", r.eager.median_us, r.eager.median_us / ours
        compiled = r.compiled.median_us if r.compiled else float("nan")
        vs_compile = compiled / ours
        met = ratio >= target.goal and (target.peer != "copy" or vs_compile >= 1.0)
        if target.line == "network":
            network_ratios.append(ratio)
        rows.append(f"| {target.line} | {target.job} | v{r.version} of {len(versions)} | {ours:.1f} | {peer} "
                    f"| {peer_us:.1f} | {ratio:.3f}x | {target.goal}x | {'yes' if met else 'no'} | {compiled:.1f} "
                    f"| {vs_compile:.3f}x |")
    if network_ratios:
        geomean = math.exp(sum(math.log(x) for x in network_ratios) / len(network_ratios))
        rows += ["", f"networks: geometric mean vs eager {geomean:.3f}x over {len(network_ratios)} (goal 1.0x)"]
    if absent:
        rows += ["", f"not compiled into {out} (not in this run): {', '.join(absent)}"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["compile", "measure"])
    parser.add_argument("out", type=Path, help="folder of the job folders (one per model)")
    parser.add_argument("jobs", nargs="*", help=f"compile: only these jobs (default: all of "
                                                f"{', '.join(t.job for t in TARGETS)}); measure takes the "
                                                "jobs the folder holds")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="compile: processes")
    parser.add_argument("--profile", action="store_true", help="measure: also run Nsight Compute")
    parser.add_argument("--timeout", type=float, default=240, help="measure: seconds per version")
    parser.add_argument("--record", type=Path, help="measure: append the table to this markdown file")
    args = parser.parse_args()
    if args.step == "compile":
        unknown = set(args.jobs) - {t.job for t in TARGETS}
        if unknown:
            parser.error(f"no such target job: {', '.join(sorted(unknown))}")
        targets = [t for t in TARGETS if not args.jobs or t.job in args.jobs]
        failed = False
        with ProcessPoolExecutor(args.workers) as pool:
            for line in pool.map(compile_one, targets, [str(args.out)] * len(targets)):
                print(line, flush=True)
                failed |= not line.endswith(": v0 compiled")
        return 1 if failed else 0
    rows = measure(args.out, args.profile, args.timeout)
    print("\n".join(rows))
    if args.record:
        append_record(args.record, "perf_targets.py", args.out, rows, " --profile" if args.profile else "")
    return 0


def append_record(path: Path, script: str, out: Path, rows: list[str], options: str = "") -> None:
    """Append a table measured on this GPU node to a results file, headed by when, on which device and
    torch, and by which commands its job folders were compiled (on a CPU machine) and measured."""
    import torch  # the node's

    header = [f"## {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
              f"- device: {torch.cuda.get_device_name()}, torch {torch.__version__}",
              f"- command: `python3 benchmarks/{script} measure {out}{options}` (job folders compiled on the CPU "
              f"machine by `benchmarks/{script} compile {out}`)", ""]
    with open(path, "a") as f:
        f.write("\n".join(header + rows) + "\n\n")


if __name__ == "__main__":
    sys.exit(main())
