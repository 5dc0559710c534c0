"""Schedule variants of one model side by side: which tiles and knobs v0 templates should take.

Two steps, as with perf_targets.py (the GPU node cannot lower models):

    .venv/bin/python benchmarks/schedule_sweep.py compile OUT [SWEEP...]   # CPU: v0 + one vN per variant
                                                                          # (exit 1 if one did not compile)
    python3 benchmarks/schedule_sweep.py measure OUT [--record FILE]       # GPU node: every vN of every job

A variant is a set of OpSchedule fields given to every op of one family in the v0 schedule of its
`reductions` mode (initial_params_for: "rows", v0 itself, or "block": a kernel per row reduction), and
`block_reductions`: every block reduction with N threads per row.
The table shows each variant's median time as a ratio to v0 of the same job, measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELBENCH = REPO.parent / "shared" / "kernelbench"
sys.path.insert(0, str(REPO))

from benchmarks.perf_targets import MODELS, ZOO, append_record, compiled_versions  # noqa: E402


@dataclass(frozen=True)
class Variant:
    name: str
    family: str = ""  # ops of this family get `fields`
    fields: dict = field(default_factory=dict)
    block_reductions: int = 0  # threads per row; 0: as the template has them
    reductions: str = "rows"  # the v0 template's mode of row reductions (schedule.initial_params_for)
    row_kernel_reductions: int = 0  # row pipelines of up to this many reductions become row kernels


# v0 of an f16 or bf16 matmul at 4096 on wgmma: 128x256 blocks of two warpgroups of 64x256, K steps of 64,
# 3 in flight (TMA into 128-byte swizzled rows), 144 KB of buffers shared with the accumulator tile,
# one block per SM (perf_targets_h200.md run 32: 4 steps 0.98x; one warpgroup per 128x128 block with 4 steps
# 0.87x, with 3 0.84x (run 31); two warpgroups of 64x128 in 128x128 blocks 0.83x with 4 steps, 0.80x with
# 3). mma.sync's best: 256x128 blocks of eight 64x64 warps, 2 stages (0.69x of v0)
MMA_VARIANTS = [
    Variant("mma.sync, 256x128 block of eight 64x64 warps, 2 stages", "matmul",
            {"tensor_core": "mma_sync", "block_tile": [256, 128], "thread_tile": [64, 64], "pipeline_depth": 2}),
    Variant("4 stages", "matmul", {"pipeline_depth": 4}),
    Variant("one warpgroup per 128x128 block, 4 stages", "matmul",
            {"block_tile": [128, 128], "thread_tile": [128, 128], "pipeline_depth": 4}),
    Variant("two warpgroups of 64x128, 4 stages", "matmul",
            {"block_tile": [128, 128], "thread_tile": [64, 128], "pipeline_depth": 4}),
    Variant("64x256 block, one warpgroup", "matmul", {"block_tile": [64, 256]}),
]
# v0 of an f32 matmul in TF32 at 4096: wgmma as for f16 (128x256 blocks of two 64x256 warpgroups, 3 steps
# in flight) with K steps of 32, B transposed by a kernel of its own first (wgmma reads TF32 K-major only):
# 1.60x over mma.sync's best (perf_targets_h200.md run 35: 4 steps 1.00x, 128x128 blocks of two 64x128
# warpgroups 0.83x, 2 steps 0.74x; B through registers instead of the transposed copy 0.47x, run 33).
# mma.sync's best: 128x64 blocks of two 64x64 warps, K32, 2 stages in 3 buffers, the copies ahead of the mma
TF32_VARIANTS = [
    Variant("mma.sync, two 64x64 warps, copies ahead of the mma (2 stages in 3 buffers)", "matmul",
            {"tensor_core": "mma_sync", "block_tile": [128, 64], "thread_tile": [64, 64], "pipeline_depth": 2,
             "copies_ahead": True}),
    Variant("4 stages", "matmul", {"pipeline_depth": 4}),
    Variant("two warpgroups of 64x128, 4 stages", "matmul",
            {"block_tile": [128, 128], "thread_tile": [64, 128], "pipeline_depth": 4}),
]
# v0 of an f32 matmul on FMAs (SIMT) whose grid fills the GPU: its operand tiles staged in shared memory
# (promote_shared, schedule/staged_matmul.py) in 128x128 blocks of 8x8, K steps of 8 (templates.STAGED_SIMT_TILES,
# from the 2026-12-06 08:05 run of schedule_sweep_h200.md), a thread's 8 columns two 128-bit vectors 64 columns
# apart (interleave_columns: a warp's reads of the B tile on distinct banks); against it, the run of 8 columns
# per thread before, the unstaged v0 before that, the same tiles unstaged, and the other staged tiles
SIMT_VARIANTS = [
    Variant("a run of 8 columns per thread (v0 before 2026-12-07)", "matmul", {"interleave_columns": False}),
    Variant("unstaged, 64x64 blocks of 4x4, K32 (v0 before 2026-12-06)", "matmul",
            {"promote_shared": False, "block_tile": [64, 64], "thread_tile": [4, 4], "reduction_tile": 32}),
    Variant("unstaged", "matmul", {"promote_shared": False}),
    Variant("staged, K16", "matmul", {"reduction_tile": 16}),
    Variant("staged, 8x4 per thread, 128x64 block, K16", "matmul",
            {"block_tile": [128, 64], "thread_tile": [8, 4], "reduction_tile": 16}),
    Variant("staged, 4x4 per thread, 64x64 block, K32", "matmul",
            {"block_tile": [64, 64], "thread_tile": [4, 4], "reduction_tile": 32}),
]
# the staged tiles filled by cp.async, 2 or 3 K steps in flight (nvgpu's software pipelining, as mma.sync's; the
# thread's reads of its staged operands proven 128-bit aligned through the rotated buffers). v0 keeps 2 steps in
# flight where the matmul is alone in its kernel and its operands are staged as they are (4096^3 f32, H100,
# 2026-12-08: 1.07x over synchronous staging, whose Nsight Compute stalls were its loads and barriers; 0.97x on
# 2026-12-07, before the interleaved columns); a Linear's staged W.T or a fused epilogue stays synchronous
PIPELINED_SIMT_VARIANTS = [
    Variant("staged, 3 K steps in flight", "matmul", {"pipeline_depth": 3}),
    Variant("staged, K16, 2 K steps in flight", "matmul", {"reduction_tile": 16, "pipeline_depth": 2}),
    Variant("staged, 2 K steps in flight in 3 buffers, copies ahead of the FMAs", "matmul",
            {"pipeline_depth": 2, "copies_ahead": True}),
    Variant("the same, registers capped for 2 blocks per SM", "matmul",
            {"pipeline_depth": 2, "copies_ahead": True, "min_blocks_per_sm": 2}),
]
SYNCHRONOUS = Variant("synchronous staging (v0 before 2026-12-08)", "matmul", {"pipeline_depth": 0})
TWO_STEPS = Variant("staged, 2 K steps in flight (cp.async)", "matmul", {"pipeline_depth": 2})


def large_simt_variants(pipelined_v0: bool) -> list[Variant]:
    """The run of columns first, then the pipelined ones (a short run measures those); against a pipelined v0
    its synchronous staging, against a synchronous one its 2 steps in flight."""
    return SIMT_VARIANTS[:1] + [SYNCHRONOUS if pipelined_v0 else TWO_STEPS] + PIPELINED_SIMT_VARIANTS + SIMT_VARIANTS[1:]


# the zoo's small f16 matmuls keep mma.sync v0 (128x64 blocks of two 64x64 warps, K32, 3 stages): wgmma's
# 128x128 blocks would not fill the GPU
SMALL_MMA_VARIANTS = [
    Variant("synchronous staging", "matmul", {"pipeline_depth": 0}),
    Variant("128x128 block, 4 warps of 64x64", "matmul", {"block_tile": [128, 128]}),
]
# small SIMT matmuls (the zoo's MLP: 256x1024 and 256x256 outputs): v0 takes blocks of one warp, 16x8
# outputs of 2x2 per thread, where 64x64 blocks would not fill the GPU (1.47x over 32x32 and 16x32 blocks,
# run 15); blocks of more warps (0.66-0.67x), 16x16 of 2x4 (0.86-0.87x) and K steps of 16 or 64 (0.92x,
# 1.01x) were no faster (runs 16-17). v0 then splits K in chunks until a grid has 2048 warps: the 256x256
# matmul in 4 (run 18 and perf_targets_h200.md run 17). The variants split both matmuls in 2, 4 and 8.
# The 256x1024 matmul, unsplit, keeps the L1 84% busy (2x2 per thread: 8 bytes loaded per FMA): one-warp
# blocks of 4x4 per thread (half the bytes per FMA) split in 4 or 8 for warps (64 registers, no spill).
# The f32 weights' transposes: v0 takes blocks of 32x64, 4x4 per thread reading four 128-bit rows and
# writing four (a transpose in registers; 1.03x, run 19); the variant, v0 before, one element per thread
# (4.8 and 3.8 us under ncu for 2 and 1 MB, perf_targets_h200.md run 17)
SMALL_MATMUL_VARIANTS = [
    *(Variant(f"split-K {n} in chunks", "matmul", {"split_reduction": n, "reduction_tile": n}) for n in (2, 4, 8)),
    *(Variant(f"32x16 blocks of 4x4 per thread, split-K {n}", "matmul",
              {"block_tile": [32, 16], "thread_tile": [4, 4], "split_reduction": n, "reduction_tile": n})
      for n in (4, 8)),
    Variant("weight transposes of one element per thread", "copy",
            {"block_tile": [4, 64], "thread_tile": [1, 1], "vectorize": False}),
]
REDUCTION_VARIANTS = [Variant(f"block reduction {n}", block_reductions=n, reductions="block")
                      for n in (128, 256, 512, 1024)] + \
    [Variant("block reduction 128, merges ended in warp shuffles", "reduction", {"warp_merge": True},
             block_reductions=128, reductions="block")]
# v0: softmax and layernorm each in one row kernel of 512 threads per row of 8192, their 128-bit vectors
# interleaved across the block (run 20: 1.14x and 1.23x over a run of columns per thread, which had held
# every variant with more columns per thread back, runs 18-19), merges ended in warp shuffles (1.07x on
# softmax, run 14); two-step merges and a kernel per reduction lost (runs 18-20).
ROW_VARIANTS = [
    Variant("two-step merges (no warp shuffles)", "reduction", {"warp_merge": False}),
    Variant("a run of columns per thread (not interleaved)", "reduction", {"interleave_columns": False}),
    Variant("1024 threads per row", "reduction", {"row_kernel": 1024}, row_kernel_reductions=3),
    Variant("512 threads per row, 4 blocks per SM", "reduction", {"row_kernel": 512, "min_blocks_per_sm": 4},
            row_kernel_reductions=3),
    Variant("256 threads per row", "reduction", {"row_kernel": 256}, row_kernel_reductions=3),
    Variant("256 threads per row, 4 blocks per SM", "reduction", {"row_kernel": 256, "min_blocks_per_sm": 4},
            row_kernel_reductions=3),
    Variant("a kernel per reduction", reductions="block"),
]
# the ResNet conv through img2col, loops (n, f, oh*ow, c*kh*kw): v0 takes 112 pixels (two output rows) x
# 64 channels per block (1.14x over 56, run 14), 8 channels x 8 pixels per thread, K steps of 9
IMG2COL_VARIANTS = [
    Variant("56-pixel blocks", "matmul", {"block_tile": [1, 0, 56, 0]}),
    Variant("8x4 per thread", "matmul", {"thread_tile": [0, 8, 4, 0]}),
    Variant("16x4 per thread", "matmul", {"thread_tile": [0, 16, 4, 0]}),
    Variant("16x8 per thread", "matmul", {"thread_tile": [0, 16, 8, 0]}),
    # the block gathers each K step's image tile and copies its filter tile into shared memory once
    Variant("staged (promote_shared)", "matmul", {"promote_shared": True}),
    Variant("staged, 8x4 per thread", "matmul", {"promote_shared": True, "thread_tile": [0, 8, 4, 0]}),
]


# a matmul over 8 x 197 tokens, one loop of 1576 rows since farm-collapse-contraction-loops (loops rows, n, k): v0
# took 32x64 blocks of 2x4 per thread, the last block of rows masked (now staged 128x128 blocks, padded). Over
# (batch, tokens, n, k), on the H100: 1.87x over the divisor template it replaces (a block per token row of 64
# outputs, one each) and 2.03x over 64x64 blocks of 4x4 (schedule_sweep_h200.md 2026-12-05 09:26)
UNSTAGED = {"promote_shared": False, "reduction_tile": 32}  # the masked kernels' K steps before staging
MASKED_VARIANTS = [
    Variant("the divisor template: a block per row, one output per thread", "matmul",
            {"block_tile": [1, 64, 0], "thread_tile": [1, 1, 0], **UNSTAGED}),
    Variant("64x64 blocks of 4x4", "matmul", {"block_tile": [64, 64, 0], "thread_tile": [4, 4, 0], **UNSTAGED}),
    Variant("16x64 blocks of 1x4", "matmul", {"block_tile": [16, 64, 0], "thread_tile": [1, 4, 0], **UNSTAGED}),
    Variant("32x32 blocks of 2x2", "matmul", {"block_tile": [32, 32, 0], "thread_tile": [2, 2, 0], **UNSTAGED}),
    Variant("32x128 blocks of 2x8", "matmul", {"block_tile": [32, 128, 0], "thread_tile": [2, 8, 0], **UNSTAGED}),
    # v0 stages its tiles padded since 2026-12-06 (STAGED_PADDING_WORK): against the masked v0 before
    Variant("unstaged 32x64 blocks of 2x4, masked (v0 before)", "matmul",
            {"block_tile": [32, 64, 0], "thread_tile": [2, 4, 0], **UNSTAGED}),
]


# scalar kernels (one output per thread): the divisor template's blocks against 64 x 4 threads, the last blocks
# partial (templates.warp_aligned_blocks), on KernelBench's shapes. The depthwise 3x3 conv (level 1 #82), loops
# (n, oh, ow, c, kh, kw) over 510 x 510 outputs: v0 keeps 5 x 51 (255 of 256 lanes busy)
DEPTHWISE_VARIANTS = [
    Variant("64 x 4 per block, the last partial", "conv", {"block_tile": [1, 4, 64, 1]}),
    Variant("a row of 255 outputs per block", "conv", {"block_tile": [1, 1, 255, 1], "thread_tile": [0, 1, 1, 0]}),
    Variant("5 x 102 per block, 2 along a row per thread", "conv",
            {"block_tile": [1, 5, 102, 1], "thread_tile": [0, 1, 2, 0]}),
    Variant("10 x 51 per block, 2 rows per thread", "conv",
            {"block_tile": [1, 10, 51, 1], "thread_tile": [0, 2, 1, 0]}),
]
# max pooling 4x4 over 512 x 512 padded by 1 (level 1 #42): v0 takes 64 x 4 for the pooling over 511 x 511
# (73 threads, 3 warps, before) and fills the padded input over one loop, two 128-bit vectors per thread (a
# fill over 514 x 514 before, 64 x 4 threads of a scalar store each)
POOLING_VARIANTS = [
    Variant("the divisor template's pooling: 73 wide", "pooling", {"block_tile": [1, 1, 1, 73]}),
    Variant("the padded input's fill, one 128-bit vector per thread", "fill", {"thread_tile": [4]}),
]


@dataclass(frozen=True)
class Sweep:
    model: Path
    variants: list[Variant]
    tf32: bool = False  # the job allows TF32 (submit --tf32)


# the row sum's v0: 1024 interleaved threads per row (1.06x over 512, run 24); the elementwise chain's: a
# 128-bit vector in each of two rows per thread (1.01x over a run of two in one row, run 23)
SWEEPS = {
    "softmax_large": Sweep(MODELS / "softmax_large.py", ROW_VARIANTS),
    "layernorm_large": Sweep(MODELS / "layernorm_large.py", ROW_VARIANTS),
    "reduce_sum_large": Sweep(MODELS / "reduce_sum_large.py", [
        Variant(f"block reduction {n}", block_reductions=n) for n in (256, 512)]),
    "elementwise_large": Sweep(MODELS / "elementwise_large.py", [
        Variant("a run of two vectors in one row per thread", "elementwise", {"thread_tile": [1, 8]}),
        Variant("a vector in each of four rows per thread", "elementwise",
                {"block_tile": [8, 256], "thread_tile": [4, 4]})]),
    "matmul4096_f16": Sweep(MODELS / "matmul4096_f16.py", MMA_VARIANTS),
    "matmul4096_f16_relu": Sweep(MODELS / "matmul4096_f16_relu.py", MMA_VARIANTS),
    "matmul_f16": Sweep(ZOO / "matmul_f16.py", SMALL_MMA_VARIANTS),
    "linear_f16": Sweep(ZOO / "linear_f16.py", SMALL_MMA_VARIANTS),
    "linear_bias_f16": Sweep(ZOO / "linear_bias_f16.py", SMALL_MMA_VARIANTS[:1]),
    "matmul4096_tf32": Sweep(MODELS / "matmul4096_f32.py", TF32_VARIANTS, tf32=True),
    "matmul4096_f32": Sweep(MODELS / "matmul4096_f32.py", large_simt_variants(pipelined_v0=True)),
    "gemm_add_relu": Sweep(MODELS / "gemm_add_relu.py", large_simt_variants(pipelined_v0=False)),
    # the same variants on bmm's loops (batch, m, n, k): a block per batch, no threads along it; its v0 is the
    # staged 64x64 blocks (128x128 and 128x64 ones would not fill the GPU)
    "matmul_batched": Sweep(ZOO / "matmul_batched.py", [
        Variant(x.name, x.family, {k: [1 if k == "block_tile" else 0, *v] if isinstance(v, list) else v
                                   for k, v in x.fields.items()})
        for x in SIMT_VARIANTS[1:-1] + [SYNCHRONOUS] + PIPELINED_SIMT_VARIANTS]),
    "matmul4096_bf16": Sweep(MODELS / "matmul4096_bf16.py", MMA_VARIANTS),
    "mlp": Sweep(ZOO / "mlp.py", SMALL_MATMUL_VARIANTS),
    "vit_tokens_matmul": Sweep(MODELS / "vit_tokens_matmul.py", MASKED_VARIANTS),
    "conv3x3_resnet": Sweep(MODELS / "conv3x3_resnet.py", IMG2COL_VARIANTS),
    "depthwise_conv3x3": Sweep(MODELS / "depthwise_conv3x3.py", DEPTHWISE_VARIANTS),
    "max_pool2d": Sweep(KERNELBENCH / "level1" / "42_Max_Pooling_2D.py", POOLING_VARIANTS),
    "softmax": Sweep(ZOO / "softmax.py", REDUCTION_VARIANTS),
    "layernorm": Sweep(ZOO / "layernorm.py", REDUCTION_VARIANTS),
}


def variant_params(job: str, variant: Variant, tf32: bool = False):
    from workers.compile.analysis import analyze
    from workers.compile.schedule.v0 import initial_params_for, with_row_kernels
    from workers.layout import LINALG_FILE
    from workers.target import target

    facts = analyze(Path(job, LINALG_FILE).read_text())
    params = initial_params_for(facts, tf32=tf32, reductions=variant.reductions)
    if variant.row_kernel_reductions:
        params = with_row_kernels(params, facts, target(params.chip).sms, variant.row_kernel_reductions)
    for s in params.ops:
        if s.block_reduction and variant.block_reductions:
            s.block_reduction = variant.block_reductions
        if s.family == variant.family:
            for name, value in variant.fields.items():
                # tiles keep the anchor's trailing loop entries (0: not tiled) past the ones given
                setattr(s, name, value + getattr(s, name)[len(value):] if isinstance(value, list) else value)
    return params


def compile_sweep(name: str, out: str) -> list[str]:
    from workers.compile import compile_iteration, initial_params
    from workers.frontend import FrontendError, lower_model

    sweep = SWEEPS[name]
    job = os.path.join(out, name)
    try:
        lower_model(str(sweep.model), job)
    except FrontendError as e:
        return [f"{name}: not lowered: {e}"]
    lines = []
    for v, (label, params) in enumerate([("v0", initial_params(job, tf32=sweep.tf32))]
                                        + [(x.name, variant_params(job, x, sweep.tf32)) for x in sweep.variants]):
        result = compile_iteration(job, v, params)
        lines.append(f"{name} v{v} ({label}): " + ("compiled" if result.ok else
                                                    f"failed at {result.stage}: {result.error[:300]}"))
    return lines


# with --profile, the Nsight Compute metrics of each version's longest kernel beside its time: what limits it
PROFILED = ("issue_slot_util_pct", "stall_long_scoreboard", "stall_barrier", "stall_mio_throttle",
            "stall_short_scoreboard", "shared_bank_conflicts", "registers_per_thread")


def measure(out: Path, names: list[str], timeout_s: float, budget_s: float, profile: bool = False) -> list[str]:
    """The table's rows, versions in order, none started past `budget_s` seconds (a row for what is left)."""
    from workers.measure import measure_iteration

    extra = [f" {name} |" for name in PROFILED] if profile else []
    rows = ["| job | version | variant | status | ours us | vs v0 | eager us | vs eager |" + "".join(extra),
            "|---|---|---|---|---:|---:|---:|---:|" + "---:|" * len(extra)]
    started = time.monotonic()
    for name in names:
        job, sweep = out / name, SWEEPS[name]
        labels = ["v0"] + [x.name for x in sweep.variants]
        base = None
        for v in compiled_versions(job):
            if time.monotonic() - started > budget_s:
                rows.append(f"| {name} | v{v}.. | unmeasured: the budget of {budget_s:.0f} s was spent | | | | | |")
                break
            r = measure_iteration(str(job), v, profile=profile, timeout_s=timeout_s)
            ours = r.time.median_us if r.time and r.correct else None
            base = ours if v == 0 else base
            status = r.status if r.correct or r.status != "ok" else f"wrong ({r.max_abs_err:.2g})"
            eager = r.eager.median_us if r.eager else None
            rows.append(f"| {name} | v{v} | {labels[v]} | {status} | {ours or float('nan'):.1f} "
                        f"| {(base / ours) if ours and base else float('nan'):.2f}x | {eager or float('nan'):.1f} "
                        f"| {(eager / ours) if ours and eager else float('nan'):.2f}x |"
                        + _profiled(r.kernels if profile else []))
            print(rows[-1], flush=True)
    return rows


def _profiled(kernels: list) -> str:
    """The PROFILED metrics of the longest of `kernels` as table cells (none where it was not profiled)."""
    if not kernels:
        return ""
    longest = max(kernels, key=lambda k: k.duration_us)
    values = [getattr(longest, name) for name in PROFILED]
    return "".join(" - |" if v is None else f" {v} |" if isinstance(v, int) else f" {v:.3g} |" for v in values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["compile", "measure"])
    parser.add_argument("out", type=Path, help="folder of the job folders (one per sweep)")
    parser.add_argument("sweeps", nargs="*", help=f"these sweeps (default: all of {', '.join(SWEEPS)}; measure: "
                                                  "those with a job folder in OUT)")
    parser.add_argument("--timeout", type=float, default=120, help="measure: seconds per version")
    parser.add_argument("--record", type=Path, help="measure: append the table to this markdown file")
    parser.add_argument("--profile", action="store_true",
                        help="measure: Nsight Compute metrics of each version's longest kernel (stalls, bank "
                             "conflicts) in the table")
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="measure: start no version after this many seconds (the table keeps what ran)")
    args = parser.parse_args()
    names = args.sweeps or list(SWEEPS)
    unknown = sorted(set(names) - set(SWEEPS))
    if unknown:
        parser.error(f"no sweep named {', '.join(unknown)}; the sweeps: {', '.join(SWEEPS)}")
    if args.step == "compile":
        from concurrent.futures import ProcessPoolExecutor

        failed = False
        with ProcessPoolExecutor(os.cpu_count() or 2) as pool:
            for lines in pool.map(compile_sweep, names, [str(args.out)] * len(names)):
                print("\n".join(lines), flush=True)
                failed |= any(not line.endswith(": compiled") for line in lines)
        return 1 if failed else 0
    names = [n for n in names if (args.out / n).is_dir()]
    if not names:  # e.g. a sweep's own job folder given as OUT
        parser.error(f"{args.out} holds no sweep's job folder (OUT/<sweep>, as `compile OUT` writes them)")
    rows = measure(args.out, names, args.timeout, args.budget, args.profile)
    if args.record:
        append_record(args.record, "schedule_sweep.py", args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
