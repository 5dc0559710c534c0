"""v0: each kernel's operator-aware schedule (templates.py per op, tensor cores, block reductions and row
kernels across the model); initial_params_for is the entry."""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from workers.compile.analysis import LinalgOpFacts
from workers.compile.schedule.grouping import (Group, plan_groups, row_kernel_members, group_family,
                                               reduction_member)
from workers.compile.schedule.templates import (MERGE_LOADS, wants_split, wants_shared_outputs, wants_img2col,
                                                wants_block_per_row, default_op_schedule, transpose_schedule,
                                                V0_MATMUL_K_TILES, fill_the_grid, split_k_to_fill_the_grid,
                                                img2col_schedule, img2col_filling_the_grid, maskable_matmul,
                                                partial_matmul_schedule, warp_aligned_blocks, packed_short_rows,
                                                row_kernel_threads, row_kernel_step, row_block_tile,
                                                block_per_output, block_reduction_threads, STAGED_SIMT_TILES,
                                                STAGED_PADDING_WORK, STAGED_SIMT_STAGES, direct_conv_tiles)
from workers.compile.schedule.staged_matmul import plan_staged_matmul
from workers.compile.schedule.tiles import largest_divisor_at_most, grid_blocks, vector_elements
from workers.compile.schedule.validation import scalar_partial_tiles
from workers.compile.tensor_core import plan_mma
from workers.records import (OpInfo, OpSchedule, ScheduleParams, default_split_factor, leaves_partial_tiles,
                             reduction_extents, warp_can_merge, interleave_lanes)
from workers.target import Target, target


def default_group_schedule(g: Group, facts: list[LinalgOpFacts], precision: str, target: Target) -> OpSchedule:
    family = group_family(g, facts)
    if wants_img2col(facts[g.anchor].info):
        # a producer (a transposed conv's flipped weights) gets a kernel of its own: img2col fuses none
        conv = facts[g.anchor].info
        return dataclasses.replace(img2col_filling_the_grid(img2col_schedule(conv), conv),
                                   fuse_producers=g.producer is None)
    if g.producer is None and (transpose := transpose_schedule(facts[g.anchor].info)):
        return transpose
    if (direct := direct_conv_schedule(g, facts, family, target.sms)) is not None:
        return direct
    schedule = default_op_schedule(facts[g.anchor].info, family)
    member = reduction_member(g, facts)
    if member is not None and wants_split(facts[member]):
        # the kernel merges a few partials per output: one output per thread, whatever the family
        schedule = dataclasses.replace(default_op_schedule(facts[g.anchor].info, "reduction"), family=family)
        schedule.split_reduction = default_split_factor(reduction_extents(facts[member].info)[0])
        # the merge reads its row's partials MERGE_LOADS at a time into a vector, accumulator hoisted
        if any(schedule.thread_tile):
            schedule.reduction_tile = largest_divisor_at_most(schedule.split_reduction, MERGE_LOADS)
            schedule.vectorize = True
        return schedule
    if family != "matmul":
        anchor = facts[g.anchor].info
        aligned = warp_aligned_blocks(schedule, anchor)
        if aligned is not None and scalar_partial_tiles(aligned, g, facts):
            return aligned
        packed = packed_short_rows(schedule, anchor, partial=True)
        if packed is not None and not scalar_partial_tiles(packed, g, facts):
            packed = packed_short_rows(schedule, anchor, partial=False)
        return packed or schedule
    mma = tensor_core_schedule(g, facts, precision, target)
    if mma is not None:
        return mma
    matmul = facts[member].info if member is not None else None
    if matmul is not None and (staged := staged_simt_schedule(schedule, g, facts, target)) is not None:
        return staged
    if matmul is not None and maskable_matmul(matmul):
        anchor, k_extent = facts[g.anchor].info, reduction_extents(matmul)[0]
        tiled = partial_matmul_schedule(schedule, anchor, k_extent, target.sms)
        if tiled is not None and (g.producer is None or not leaves_partial_tiles(tiled, anchor, k_extent)):
            return tiled
        if tiled is not None and anchor.family == "elementwise":
            # its elementwise consumer (a bias) as a kernel of its own, the matmul alone in its kernel to take
            # the masked tiles: fused, the matmul's per-thread result would have a dynamic size, which
            # bufferization cannot place
            return dataclasses.replace(default_op_schedule(anchor, "elementwise"), fuse_producers=False)
    if matmul is not None and any(schedule.thread_tile):
        reductions = reduction_extents(matmul)
        k_step = next((t for t in V0_MATMUL_K_TILES if len(reductions) == 1 and reductions[0] % t == 0), 0)
        if k_step:
            schedule.reduction_tile, schedule.vectorize = k_step, True
        fill_the_grid(schedule, facts[g.anchor].info, target.sms)
        split_k_to_fill_the_grid(schedule, facts[g.anchor].info, matmul)
    return schedule


def direct_conv_schedule(g: Group, facts: list[LinalgOpFacts], family: str, sms: int) -> OpSchedule | None:
    """templates.direct_conv_tiles for a group whose conv is the anchor or the producer of its elementwise
    anchor (a bias, an activation: the same output loops, read in place) or of a linalg.copy (into its part of
    a concatenation: GoogleNet's and DenseNet's branches), each thread's tile a vector multiply-add per input
    channel and kernel tap; None where they do not apply or leave SMs idle."""
    member = reduction_member(g, facts)
    if member is None or (tiles := direct_conv_tiles(facts[member].info)) is None:
        return None
    anchor, (block, thread) = facts[g.anchor].info, tiles
    takes_tile = anchor.family == "elementwise" or anchor.name == "linalg.copy"
    if member != g.anchor and (not takes_tile or len(anchor.loop_ranges) != len(block)
                               or not facts[g.anchor].input_maps_identity[
                                   facts[g.anchor].operand_producers.index(member)]):
        return None
    taps = [0] * (len(anchor.loop_ranges) - len(block))
    schedule = OpSchedule(op_index=anchor.index, family=family, block_tile=block + taps, thread_tile=thread + taps,
                          reduction_tile=1, vectorize=True)
    return schedule if grid_blocks(schedule, anchor) >= sms else None


class MmaTiles(NamedTuple):
    """A v0 tensor-core template: tiles, staging, and whether it is for grids that fill the GPU only."""

    block: tuple[int, int]
    warp: tuple[int, int]  # wgmma: a warpgroup's tile
    k_step: int
    staged: bool  # A/B staged in shared memory
    stages: int = 0  # pipeline_depth: K steps in flight, copied by cp.async or, on wgmma, TMA (0: synchronous)
    copies_ahead: bool = False  # a spare buffer, filled before the step's mma
    fills_gpu: bool = False  # taken only where the grid has a block for every SM
    instruction: str = "mma_sync"  # the tensor_core knob: "mma_sync" or "wgmma"


# v0 tensor-core tiles by operand type, the first that the kernel takes. Measured fastest on the H200:
# f16 and bf16 on wgmma in 128x256 blocks of two warpgroups of 64x256 with 3 K steps of 64 in flight
# (1.16x over one warpgroup of 128x128 with 4, benchmarks/results/perf_targets_h200.md run 32; that one
# 1.24x and 1.26x over mma.sync's best, run 31), TF32 so too with K steps of 32 (B transposed by a kernel
# of its own first: 1.60x over mma.sync's best, run 35); of the mma.sync tiles
# (benchmarks/results/schedule_sweep_h200.md runs 3-27), f16 and bf16 in 256x128 blocks of eight 64x64
# warps (1.01-1.02x over 128x256 in runs 18, 20, 26 and 27; 128x256 where 256 does not divide M), K
# steps of 64 filled by cp.async two steps ahead (128x256: 1.04x over 128x128 blocks of four warps, the
# accumulator tile sharing the buffers' memory; those 1.24x over 128x64 blocks of two warps with K32 and
# 3 stages and 1.82x over synchronous staging; bf16 2.06x over synchronous staging), where the grid
# fills the GPU; TF32 in two 64x64 warps with K steps of 32, 2 stages in 3 buffers, the copies ahead of
# the mma (1.07x over 3 stages in 3 buffers, sweep run 26; those 1.12x over 128x128 blocks of four warps,
# 1.52x over synchronous staging); the unstaged tiles are for kernels that staging does not fit.
_UNSTAGED_MMA_TILES = [MmaTiles((128, 64), (64, 32), 64, False), MmaTiles((128, 64), (64, 32), 32, False),
                       MmaTiles((64, 64), (32, 32), 32, False), MmaTiles((64, 64), (32, 32), 16, False),
                       MmaTiles((32, 32), (16, 16), 16, False)]
_HALF_MMA_TILES = [MmaTiles((128, 256), (64, 256), 64, True, 3, fills_gpu=True, instruction="wgmma"),
                   MmaTiles((128, 128), (128, 128), 64, True, 4, fills_gpu=True, instruction="wgmma"),
                   MmaTiles((256, 128), (64, 64), 64, True, 2, fills_gpu=True),
                   MmaTiles((128, 256), (64, 64), 64, True, 2, fills_gpu=True),
                   MmaTiles((128, 128), (64, 64), 64, True, 2, fills_gpu=True),
                   MmaTiles((128, 64), (64, 64), 32, True, 3), MmaTiles((128, 64), (64, 64), 32, True),
                   MmaTiles((128, 64), (64, 32), 32, True), *_UNSTAGED_MMA_TILES]
V0_MMA_TILES = {
    "f16": _HALF_MMA_TILES,
    # bf16 takes no unstaged tile (plan_mma): small ones staged instead, for matrices of 32-64 rows
    "bf16": [*_HALF_MMA_TILES, MmaTiles((64, 64), (32, 32), 32, True), MmaTiles((32, 32), (16, 16), 16, True)],
    "f32": [MmaTiles((128, 256), (64, 256), 32, True, 3, fills_gpu=True, instruction="wgmma"),
            MmaTiles((128, 64), (64, 64), 32, True, 2, copies_ahead=True), MmaTiles((128, 64), (64, 32), 16, True),
            *_UNSTAGED_MMA_TILES]}


def tensor_core_schedule(g: Group, facts: list[LinalgOpFacts], precision: str, target: Target) -> OpSchedule | None:
    """The v0 schedule of an f16 x f16 or bf16 x bf16 matmul kernel (alone or fused into an elementwise
    consumer) on tensor cores, with the first V0_MMA_TILES entry of its operand type that the kernel
    and the target (wgmma on sm_90a) take, and of an f32 one in precision tf32; None where tensor
    cores do not apply (other dtypes, ops, shapes)."""
    op = facts[g.anchor].info
    matmul = facts[g.anchor] if op.name == "linalg.matmul" or g.producer is None else facts[g.producer]
    operand = matmul.input_dtypes[0] if matmul.input_dtypes else ""
    if operand == "f32" and precision != "tf32":
        return None
    n = len(op.loop_ranges)
    for t in V0_MMA_TILES.get(operand, []):
        if t.instruction == "wgmma" and not target.wgmma:
            continue
        tail = [0] * (n - 2)
        schedule = OpSchedule(op_index=op.index, family="matmul", block_tile=[*t.block, *tail],
                              thread_tile=[*t.warp, *tail], reduction_tile=t.k_step, tensor_core=t.instruction,
                              promote_shared=t.staged, pipeline_depth=t.stages, copies_ahead=t.copies_ahead)
        if t.fills_gpu and grid_blocks(schedule, op) < target.sms:
            continue
        try:
            plan_mma(schedule, facts[g.anchor], facts[g.producer] if g.producer is not None else None, facts, target)
        except ValueError:
            continue
        return schedule
    return None


def staged_simt_schedule(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts],
                         target: Target) -> OpSchedule | None:
    """`schedule` (the template of a SIMT matmul kernel, over its anchor's loops) with its operands staged in
    shared memory, in the first STAGED_SIMT_TILES entry that divides its two thread loops and K, fills the
    GPU and that the staging plan takes, a thread's columns interleaved across the block where they are
    several 128-bit vectors (interleave_columns; whole tiles); else, for a matmul alone in its kernel, the
    first that fills the GPU with padded tiles within STAGED_PADDING_WORK; None where none does. A matmul of
    whole tiles alone in its kernel, its operands staged as they are, keeps STAGED_SIMT_STAGES K steps in
    flight where the staging plan takes them (the case measured)."""
    anchor = facts[g.anchor].info
    dims = [d for d, t in enumerate(schedule.thread_tile) if t]
    reductions = reduction_extents(facts[reduction_member(g, facts)].info)
    if len(dims) != 2 or len(reductions) != 1:
        return None
    extents = [anchor.loop_ranges[d] for d in dims] + reductions

    def padded_work(block: tuple[int, int], k_step: int) -> float:
        return math.prod(-(-e // t) * t / e for e, t in zip(extents, [*block, k_step]))

    whole = [t for t in STAGED_SIMT_TILES if padded_work(t[0], t[2]) == 1]
    padded = [t for t in STAGED_SIMT_TILES if 1 < padded_work(t[0], t[2]) <= STAGED_PADDING_WORK] \
        if g.producer is None and anchor.family == "matmul" else []
    for block, thread, k_step in whole + padded:
        staged = dataclasses.replace(schedule, block_tile=list(schedule.block_tile),
                                     thread_tile=list(schedule.thread_tile), reduction_tile=k_step,
                                     vectorize=True, promote_shared=True, interleave_columns=True)
        for d, b, t in zip(dims, block, thread):
            staged.block_tile[d], staged.thread_tile[d] = b, t
        if grid_blocks(staged, anchor) < target.sms:
            continue
        try:
            plan = plan_staged_matmul(staged, g, facts, target)
        except ValueError:
            continue
        if plan.epilogue is not None or plan.transposed:  # not measured pipelined: a Linear's W.T, an epilogue
            return staged
        pipelined = dataclasses.replace(staged, pipeline_depth=STAGED_SIMT_STAGES)
        try:
            plan_staged_matmul(pipelined, g, facts, target)
        except ValueError:
            return staged
        return pipelined
    return None


def precision_of(facts: list[LinalgOpFacts]) -> str:
    """The correctness mode follows the narrowest float type the model computes in."""
    dtypes = {f.info.dtype for f in facts}
    return next((p for p in ("f16", "bf16") if p in dtypes), "fp32")


def initial_params_for(facts: list[LinalgOpFacts], chip: str = "sm_90a", tf32: bool = False,
                       reductions: str = "rows") -> ScheduleParams:
    """v0: each kernel's operator-aware template. `tf32`: the model's fp32 may be computed in TF32 (its
    tolerance; f32 matmuls then run on tensor cores). `reductions`: how row reductions get many threads
    per output: "rows" (as "block", and a row pipeline such as softmax in one kernel: with_row_kernels),
    "block" (one kernel per reduction, a block per output: 1.0-2.8x over the split on the H200) or
    "split" (a partial and a merge kernel)."""
    precision = precision_of(facts)
    precision = "tf32" if tf32 and precision == "fp32" else precision
    gpu = target(chip)
    params = ScheduleParams(ops=[default_group_schedule(g, facts, precision, gpu) for g in plan_groups(facts, None)],
                            chip=chip, precision=precision)
    # producers that a split reduction (or an unfused consumer) leaves out of its kernel get a schedule of their own
    params = with_every_kernel(params, facts, gpu)
    if reductions == "split":
        return params
    params = with_block_reductions(params, facts, gpu.sms)
    return with_every_kernel(with_row_kernels(params, facts, gpu.sms) if reductions == "rows" else params, facts, gpu)


def with_every_kernel(params: ScheduleParams, facts: list[LinalgOpFacts], gpu: Target) -> ScheduleParams:
    """A copy of `params` with a schedule for every kernel's anchor, v0's where `params` has none (the
    compile stage writes this into params.json, which then says how every kernel is made); a schedule that
    leaves a producer out of its kernel makes one more kernel, which gets its own in turn."""
    new = ScheduleParams.from_dict(params.to_dict())
    while missing := [g for g in plan_groups(facts, new) if g.anchor not in {s.op_index for s in new.ops}]:
        new.ops = sorted(new.ops + [default_group_schedule(g, facts, new.precision, gpu) for g in missing],
                         key=lambda s: s.op_index)
    return new


# A block per output leaves SMs idle where there are fewer outputs than SMs; over rows this long (64
# loads per thread of a 1024-thread block) v0 keeps the split instead, its partials spread over the grid:
# a loss's mean over 2^30 elements, LayerNorm's statistics over 16 rows of 2^22 (a guess from the launch
# shapes, not yet measured on the H200)
GRID_SPLIT_MIN_EXTENT = 1 << 16


def keeps_grid_split(outputs: int, extent: int, sms: int) -> bool:
    """Whether a reduction of `outputs` rows of `extent` keeps its split over the grid rather than a block
    per output (GRID_SPLIT_MIN_EXTENT)."""
    return outputs < sms and extent >= GRID_SPLIT_MIN_EXTENT


def block_reduction_schedule(g: Group, facts: list[LinalgOpFacts], family: str, sms: int) -> OpSchedule | None:
    """The one-kernel shape of a group whose anchor is a row-like reduction: a block per output,
    block_reduction_threads(K) threads reducing its K elements; None where it does not apply or a
    split fills more of the GPU's `sms` (an op that does not split keeps the block reduction)."""
    op = facts[g.anchor].info
    if reduction_member(g, facts) != g.anchor \
            or not (wants_shared_outputs(facts[g.anchor]) or wants_block_per_row(facts[g.anchor])):
        return None
    extent = reduction_extents(op)[0]
    outputs = math.prod(r for r, it in zip(op.loop_ranges, op.iterator_types) if it == "parallel")
    if facts[g.anchor].splittable and keeps_grid_split(outputs, extent, sms):
        return None
    block = block_per_output(op.loop_ranges, op.iterator_types)
    threads = block_reduction_threads(extent)
    per_thread = extent // threads
    return OpSchedule(op_index=op.index, family=family, block_tile=block, thread_tile=[0] * len(block),
                      block_reduction=threads, vectorize=True, interleave_columns=True,
                      reduction_tile=largest_divisor_at_most(per_thread, 32) if per_thread > 64 else 0)


def merge_in_a_block(s: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> OpSchedule:
    """A split reduction kept for its few outputs (a loss over 2^30 elements: 32768 partials; LayerNorm's
    statistics over C x H x W of 16 rows) with its partials merged by a block per output
    (block_reduction_threads of them), not by one thread per output; `s` where the split is not a plain
    reduction's."""
    op = facts[g.anchor].info
    if not s.split_reduction or reduction_member(g, facts) != g.anchor or op.family != "reduction":
        return s
    threads = block_reduction_threads(s.split_reduction)
    per_thread = s.split_reduction // threads
    # a tile of a thread's whole run would leave a one-trip loop, which canonicalization folds away
    tile = largest_divisor_at_most(per_thread, MERGE_LOADS) if per_thread > MERGE_LOADS else 0
    merge = OpSchedule(op_index=op.index, family=s.family,
                       block_tile=block_per_output(op.loop_ranges, op.iterator_types),
                       thread_tile=[0] * len(op.loop_ranges), split_reduction=s.split_reduction,
                       block_reduction=threads, vectorize=True, reduction_tile=tile)
    merge.warp_merge = warp_can_merge(merge)
    return merge


def detached_block_reductions(facts: list[LinalgOpFacts], sms: int) -> list[OpSchedule]:
    """Schedules of elementwise kernels over the outputs of a reduction that wants a block per output
    (wants_block_per_row), which default grouping fuses into them, that fuse it no more, and the reduction's
    block reduction: fused, each thread of the epilogue reduced a whole row, the threads of a warp reading 32
    rows apart. The epilogue is a small kernel of its own over the reduced outputs."""
    detached: list[OpSchedule] = []
    for g in plan_groups(facts, None):
        if g.producer is None or facts[g.anchor].info.family != "elementwise" \
                or not wants_block_per_row(facts[g.producer]):
            continue
        epilogue = dataclasses.replace(default_op_schedule(facts[g.anchor].info, "elementwise"), fuse_producers=False)
        trial = ScheduleParams(ops=[*detached, epilogue])
        own = next(h for h in plan_groups(facts, trial) if h.anchor == g.producer)
        if (block := block_reduction_schedule(own, facts, "reduction", sms)) is not None:
            detached += [epilogue, block]
    return detached


def with_block_reductions(params: ScheduleParams, facts: list[LinalgOpFacts], sms: int) -> ScheduleParams:
    """A copy of `params` where every split row reduction is a one-kernel block reduction instead
    (block_reduction_schedule), or where it keeps its split, merges its partials in a block per output
    (merge_in_a_block); so is a row reduction that cannot split (its body reads a loop index: a
    cross-entropy's gather of each row's target) and one over a long innermost loop (wants_block_per_row);
    producers that this lets kernels fuse lose their own schedule. Such a reduction over a long innermost
    loop that an elementwise epilogue fused (a bias and an activation after a matrix-vector product) is a
    kernel of its own (detached_block_reductions)."""
    new = ScheduleParams.from_dict(params.to_dict())
    detached = detached_block_reductions(facts, sms)
    groups = {g.anchor: g for g in plan_groups(facts, ScheduleParams(ops=detached))}

    def in_a_block(s: OpSchedule) -> OpSchedule | None:
        if s.op_index not in groups:
            return None
        g = groups[s.op_index]
        if s.split_reduction:
            return block_reduction_schedule(g, facts, s.family, sms) or merge_in_a_block(s, g, facts)
        if facts[s.op_index].splittable and not wants_block_per_row(facts[s.op_index]):
            return None
        return block_reduction_schedule(g, facts, s.family, sms)

    own = {d.op_index: d for d in detached}
    new.ops = sorted([own.pop(s.op_index, None) or in_a_block(s) or s for s in new.ops] + list(own.values()),
                     key=lambda s: s.op_index)
    anchors = {g.anchor for g in plan_groups(facts, new)}
    new.ops = [s for s in new.ops if s.op_index in anchors]
    return new


# row pipelines of up to this many reductions become one row kernel in v0: softmax's two, 1.26x over a
# kernel per reduction on the H200; layernorm's (three as torch-mlir decomposed it, two of them in f64;
# two in f32 since the frontend's var_mean) 1.23x with 1024 threads per row of 8192 (0.94x with 512;
# schedule_sweep_h200.md runs 5 and 7). Their merges end in warp shuffles (warp_merge) where no
# reduction is in f64: softmax 1.07x; layernorm with its f64 sums, whose partials take two shuffles
# each, 0.83x (run 14)
ROW_KERNEL_MAX_REDUCTIONS = 3


def with_row_kernels(params: ScheduleParams, facts: list[LinalgOpFacts], sms: int,
                     max_reductions: int = ROW_KERNEL_MAX_REDUCTIONS) -> ScheduleParams:
    """A copy of `params` where each row pipeline (row_kernel_members) of at most `max_reductions`
    reductions (but where its reductions keep their split over the grid: GroupNorm's 8 groups of 2^18) is
    one kernel of row_kernel_threads(columns) threads per row, its
    ops losing their own schedules; its merges end in warp shuffles unless a reduction is in f64; its
    threads' columns interleaved (interleaved_columns: softmax over rows of 8192 f32 1.14x, layernorm 1.23x
    on the H200, schedule_sweep_h200.md run 20)."""
    new = ScheduleParams.from_dict(params.to_dict())
    taken: set[int] = set()
    for f in reversed(facts):
        i = f.info.index
        members = None if i in taken else row_kernel_members(i, facts)
        reductions = [facts[m].info for m in members or [] if facts[m].info.iterator_types[-1] == "reduction"]
        if members is None or len(reductions) > max_reductions:
            continue
        *rows, columns = f.info.loop_ranges
        threads = row_kernel_threads(columns)
        if threads < 2 or keeps_grid_split(math.prod(rows), columns, sms):
            continue  # rows too short to share (under 16 columns), or to be split over the grid: a kernel per op
        taken.update(members)
        new.ops = [s for s in new.ops if s.op_index not in [i, *members]]
        step = row_kernel_step(columns // threads, interleave_lanes(columns // threads, vector_elements(f.info.dtype)))
        row = OpSchedule(op_index=i, family="reduction", block_tile=row_block_tile(f.info),
                         thread_tile=[0] * len(f.info.loop_ranges), vectorize=True,
                         row_kernel=threads, reduction_tile=step, interleave_columns=True)
        row.warp_merge = all(r.dtype != "f64" for r in reductions) and warp_can_merge(row)
        new.ops.append(row)
    new.ops.sort(key=lambda s: s.op_index)
    return new
