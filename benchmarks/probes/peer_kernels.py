"""Probe: what torch.compile's kernels for the memory lines look like under Nsight Compute, to set beside
ours (perf_targets.py measure --profile records the same metrics for our kernels).

    python3 benchmarks/probes/peer_kernels.py OUT [MODEL...]   # GPU node; MODEL: a benchmarks/models stem

For each model: Inductor's generated code goes to OUT/<model>.inductor.py (its Triton kernels and their
launch heuristics), and one warmed-up call of the compiled model runs under ncu with the measure
worker's metrics (workers/measure/ncu.py); the table prints one row per kernel launch.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from workers.measure.ncu import METRICS, NcuError, ncu_path, parse_csv  # noqa: E402

MODELS = REPO / "benchmarks" / "models"
MEMORY_LINES = ["elementwise_large", "reduce_sum_large", "layernorm_large", "softmax_large"]


def run_compiled(model_name: str, out: Path) -> None:
    """One profiled call of the compiled model, after its compilation and autotuning (outside the
    profiled range: ncu runs with --profile-from-start off)."""
    import torch
    from torch._inductor.utils import run_and_get_code

    spec = importlib.util.spec_from_file_location(model_name, MODELS / f"{model_name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() for x in module.get_inputs()]
    compiled = torch.compile(model)
    with torch.no_grad():
        _, code = run_and_get_code(compiled, *inputs)
        (out / f"{model_name}.inductor.py").write_text("\n\n".join(code))
        for _ in range(3):
            compiled(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        compiled(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def profile(model_name: str, out: Path) -> list[str]:
    ncu = ncu_path()
    if ncu is None:
        raise NcuError("ncu is not installed here")
    cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--csv", "--page", "raw",
           "--metrics", ",".join(METRICS.values()), sys.executable, __file__, str(out), "--run", model_name]
    output = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    rows = []
    for k in parse_csv(output):
        rows.append(f"| {model_name} | {k.kernel[:40]} | {k.grid_size} | {k.block_size} | {k.registers_per_thread} "
                    f"| {k.duration_us:.1f} | {k.dram_throughput_pct:.1f} | {k.memory_throughput_pct:.1f} "
                    f"| {k.achieved_occupancy_pct:.1f} | {k.theoretical_occupancy_pct:.1f} | {k.waves_per_sm:.2f} "
                    f"| {k.issue_slot_util_pct or 0:.1f} | {k.stall_long_scoreboard or 0:.1f} "
                    f"| {k.stall_barrier or 0:.2f} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for the generated code")
    parser.add_argument("models", nargs="*", default=MEMORY_LINES)
    parser.add_argument("--run", metavar="MODEL", help=argparse.SUPPRESS)  # the profiled child
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.run:
        run_compiled(args.run, args.out)
        return 0
    print("| model | kernel | grid | block | regs | us | DRAM % | memory SOL % | achieved occ % | theoretical occ % "
          "| waves/SM | issue % | long-scoreboard stall | barrier stall |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        try:
            print("\n".join(profile(name, args.out)), flush=True)
        except (NcuError, subprocess.TimeoutExpired) as e:
            print(f"| {name} | not profiled: {e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
