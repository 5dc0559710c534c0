"""Schedule parameters -> a Transform-dialect script (transform.mlir).

Each kernel is one "group": an anchor op tiled to a grid of blocks and then to threads, with the
fill that initialises it and (optionally) one producer fused into both levels (a row kernel: all the
ops feeding its anchor). The script is generated against the payload after the pre-schedule pipeline
and addresses ops by their position among the function's linalg ops.

A group whose schedule sets split_reduction launches twice: structured.split_reduction turns its
reduction into partial reductions (their own kernel, many threads per output) and a merge of the
partials that takes the reduction's place in the group's kernel. A group whose schedule sets
block_reduction instead stays one kernel: a block per output, its threads' partials in shared memory
(structured.tile_reduction_using_forall), merged by a warp and then one thread after the block's
barriers; it can fuse its producer, and an elementwise producer that such a kernel and other consumers
all read is computed again in each of them instead of being written to memory (recomputed_producers).
A group whose schedule sets row_kernel is a whole row pipeline (softmax: max, sum of exponentials,
divide) in one kernel, a block per row: its ops are fused into the block, then each reduction runs as a
block reduction and the elementwise ops are computed again in the thread loops that read them.

A conv whose schedule sets img2col becomes, right after the ops are split into handles, a gather and
a matmul-like op (structured.convert_conv2d_to_img2col); its kernel tiles that matmul (the schedule's
tiles address its 4 loops) and fuses the gather into each thread's reduction loop.

Elementwise kernels give each thread one 128-bit vector of the innermost loop (4 f32); kernel pointer
arguments are marked 16-byte aligned so that these become ld.global.v4 / st.global.v4. Reduction loops
that a kernel tiles and vectorizes keep their accumulator in registers
(loop.hoist_loop_invariant_subsets on tensors, after CSE).

Tensor-core kernels are emitted by tensor_core.py; one whose staged tiles are filled by cp.async
(pipeline_depth) adds a second named sequence to transform.mlir, pipeline.PIPELINE_COPIES_SEQUENCE, which the
compile driver applies after the tensor-core conversion.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import NamedTuple

from workers.compile import kernel_marks
from workers.compile.analysis import LinalgOpFacts
from workers.compile.pipeline import ANY, PIPELINE_COPIES_SEQUENCE, transform_module_head, vectorize
from workers.compile.tensor_core import (WGMMA_CHIPS, MmaPlan, emit_mma_contracts,
                                        emit_mma_group, emit_multibuffers, emit_pipelined_k_loop,
                                        emit_shared_accumulator, emit_staged_copies, emit_staged_tiles, plan_mma)
from workers.records import (ELEMENT_BYTES, MAX_BLOCKS_PER_SM, V0_REDUCTION_TILE, VECTOR_BYTES, WARP_SIZE,
                             OpInfo, OpSchedule, ScheduleEdit, ScheduleParams, default_split_factor, img2col_aligned,
                             img2col_applies, img2col_op as records_img2col_op, reduction_extents, warp_can_merge)

MAX_THREADS = 1024
TARGET_THREADS = 256
SCHEDULE_FIELDS = {f.name for f in dataclasses.fields(OpSchedule)} - {"op_index", "family"}
PARAM_FIELDS = {f.name for f in dataclasses.fields(ScheduleParams)} - {"ops"}


class ScheduleError(ValueError):
    """Schedule parameters that no valid kernel can come from (bad tile sizes, unsupported knob)."""


@dataclass
class Group:
    """One kernel: the anchor op, its fused producer (if any) and the fills (or a direct conv's bias
    broadcast) they start from."""

    anchor: int
    producer: int | None
    fills: list[tuple[int, int]]  # (op whose init the fill is, that init's operand index)
    members: list[int] = field(default_factory=list)  # a row kernel's other ops (not fills), payload order


@dataclass
class Kernel:
    """One launch, in launch order: a group's kernel, or the partial-reduction kernel that its
    split_reduction runs first. Both are tuned through the group's schedule (the anchor's)."""

    anchor: int
    family: str
    block: list[int]  # thread block shape [x, y, z]
    partial: bool = False
    min_blocks_per_sm: int = 0  # the schedule's (.minnctapersm)
    warp_merge: bool = False  # the schedule's (mlir.merge_in_a_warp)
    interleave_columns: bool = False  # the schedule's (mlir.interleave_thread_columns)
    linear_grid: int = 0  # blocks of a 1-D grid of linear block ids (linear_grid()); 0: grid x, y, z


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


# A reduction is split over many threads per output when one thread per output leaves the GPU nearly
# idle (an H200 keeps 132 x 2048 threads resident) and each thread would loop over a long row.
SPLIT_MAX_OUTPUTS = 1 << 16
SPLIT_MIN_EXTENT = 256
PARTIAL_LOADS = 8  # elements a thread of a partial-reduction kernel loads at once
MERGE_LOADS = 8  # partials a thread of a merge kernel loads at once


def _wants_split(op: OpInfo) -> bool:
    """A row-like reduction (not a named matmul/conv/pooling, which v0 tiles otherwise) with few outputs
    and a long reduction loop."""
    extents = reduction_extents(op)
    outputs = math.prod(r for r, it in zip(op.loop_ranges, op.iterator_types) if it == "parallel")
    return op.name == "linalg.generic" and len(extents) == 1 and extents[0] >= SPLIT_MIN_EXTENT \
        and outputs <= SPLIT_MAX_OUTPUTS


def _splits_in_chunks(op: OpInfo, schedule: OpSchedule) -> bool:
    """A register-tiled matmul's split: partial p reduces the p-th contiguous chunk of K, so that its
    threads read their operands' K runs as the matmul's do (vector loads); other splits interleave."""
    return op.family == "matmul" and any(schedule.thread_tile)


def partial_reduction_op(op: OpInfo, split: int, chunks: bool = False) -> OpInfo:
    """The partial reduction that structured.split_reduction makes of `op`: its reduction loop r of
    extent K becomes two loops at r, r + 1. Interleaved (inner_parallel): (K / split, reduction) and
    (split, parallel); partial p of an output reduces elements p, p + split, p + 2 split..., so
    neighbouring threads read neighbouring elements. In chunks: (split, parallel) and (K / split,
    reduction), partial p reduces elements p K / split ... (p + 1) K / split - 1."""
    r = op.iterator_types.index("reduction")
    loops = [(split, "parallel"), (op.loop_ranges[r] // split, "reduction")]
    if not chunks:
        loops.reverse()
    ranges = op.loop_ranges[:r] + [extent for extent, _ in loops] + op.loop_ranges[r + 1:]
    iterators = op.iterator_types[:r] + [it for _, it in loops] + op.iterator_types[r + 1:]
    return OpInfo(index=op.index, name=op.name, family="matmul" if chunks else "reduction", loop_ranges=ranges,
                  iterator_types=iterators, dtype=op.dtype, flops=op.flops)


# v0 lowers a conv through img2col where it has a window (not 1x1) and its img2col matmul gets the
# register-tiled template (more than one output per thread); other convs keep the direct schedule. The
# ResNet 3x3 conv runs 3.8x faster so; small_cnn's convs (3 and 16 input channels) are faster direct
# (benchmarks/results/perf_targets_h200.md run 4)
IMG2COL_MIN_WINDOW = 2


def wants_img2col(op: OpInfo) -> bool:
    if not img2col_applies(op):
        return False
    r = op.loop_ranges
    window = r[5] * r[6] if op.name == "linalg.conv_2d_nchw_fchw" else r[4] * r[5]
    return window >= IMG2COL_MIN_WINDOW and max(img2col_schedule(op).thread_tile) > 1


def img2col_op(op: OpInfo) -> OpInfo:
    try:
        return records_img2col_op(op)
    except ValueError as e:
        raise ScheduleError(f"op {op.index}: {e}") from None


def default_op_schedule(op: OpInfo, family: str) -> OpSchedule:
    """The v0 launch shape of one op: threads along the innermost parallel dims, one or a few
    outputs per thread, the rest of the parallel dims spread over the grid. Tiles divide the loop
    extents, so every per-thread tile has a static shape."""
    ranges, iters = op.loop_ranges, op.iterator_types
    parallel = [d for d, it in enumerate(iters) if it == "parallel" and ranges[d] > 1]
    block = [0] * len(ranges)
    thread = [0] * len(ranges)
    for d in parallel:
        block[d] = 1
    inner = parallel[-2:]  # up to two dims mapped to threads: (y, x)
    # matmul-like work reuses operands across a register tile; elementwise work gets 1 per thread
    per_thread = 4 if family in ("matmul", "conv") and all(ranges[d] % 64 == 0 for d in inner) else 1
    # elementwise work: ELEMENTWISE_VECTORS 128-bit vectors per thread along the innermost loop
    vector = elementwise_vector_width(op) if family == "elementwise" and per_thread == 1 else 1
    # x first: a 16x16 square for register-tiled work, else 64 wide for coalesced rows
    x_cap = 16 if per_thread > 1 else 64
    budget = TARGET_THREADS
    for d in reversed(inner):
        cap = budget if d != inner[-1] or len(inner) == 1 else x_cap
        run = vector if d == inner[-1] and vector > 1 else per_thread
        threads = _largest_divisor_at_most(ranges[d] // run, cap)
        block[d] = threads * run
        thread[d] = run
        budget = max(budget // threads, 1)
    # the same block tile, fewer threads: a vector in each of ELEMENTWISE_VECTORS rows, so that a warp-wide
    # access covers 32 neighbouring vectors (1.01x over a run of them in one row, schedule_sweep_h200.md
    # run 23), else (one row per block) a run of them
    if vector > 1 and len(inner) == 2 and block[inner[0]] % ELEMENTWISE_VECTORS == 0:
        thread[inner[0]] = ELEMENTWISE_VECTORS
    elif vector > 1 and block[inner[-1]] % (vector * ELEMENTWISE_VECTORS) == 0:
        thread[inner[-1]] = vector * ELEMENTWISE_VECTORS
    # a block tile that covers the whole loop is no grid dimension at all
    block = [0 if b >= ranges[d] else b for d, b in enumerate(block)]
    whole = parallel or [d for d, it in enumerate(iters) if it == "parallel"]  # unit loops: a loss's one value
    if not any(block) and whole:  # the kernel still needs a (one-block) grid to map
        block[whole[0]] = ranges[whole[0]]
    return OpSchedule(op_index=op.index, family=family, block_tile=block, thread_tile=thread, vectorize=vector > 1)


# 128-bit vectors an elementwise thread loads (and stores): two loads in flight
# per thread, the elementwise chain 1.07x over one (131.1 vs 139.9 us on the H200, the loop's v1 in
# benchmarks/results/loop_h200.md 2026-12-04 06:07)
ELEMENTWISE_VECTORS = 2


def vector_elements(dtype: str) -> int:
    """Elements of `dtype` in one 128-bit access (1 where the dtype is unknown)."""
    return VECTOR_BYTES // ELEMENT_BYTES.get(dtype, VECTOR_BYTES)


def elementwise_vector_width(op: OpInfo) -> int:
    """Elements of one 128-bit access along an elementwise op's innermost loop (1 where that loop is
    not the innermost dim, the dtype is unknown or the extent is not a multiple). Kernel pointer
    arguments are 16-byte aligned (mlir.align_kernel_pointers), so a thread's run starting at a
    multiple of this width of a row whose length is a multiple of it loads as one vector."""
    ranges, iters = op.loop_ranges, op.iterator_types
    if not ranges or iters[-1] != "parallel" or "reduction" in iters:
        return 1
    width = vector_elements(op.dtype)
    return width if width > 1 and ranges[-1] % width == 0 and ranges[-1] >= width * 8 else 1


def plan_groups(facts: list[LinalgOpFacts], params: ScheduleParams | None) -> list[Group]:
    """Which ops form which kernel. Fills are fused into the op they initialise; a producer is fused
    into its only consumer when it feeds it through an identity map (no recomputation)."""
    by_index = {s.op_index: s for s in params.ops} if params else {}
    fused: set[int] = set()
    shared = recomputed_producers(facts, by_index)
    groups: list[Group] = []
    for f in reversed(facts):  # consumers first, so producers know whether they were taken
        i = f.info.index
        if i in fused or f.info.family == "fill" and not _is_unconsumed_fill(f, facts) \
                or _initialised_conv(i, facts, by_index) is not None:
            continue
        producer = None
        schedule = by_index.get(i)
        if schedule is not None and schedule.row_kernel:
            members = row_kernel_members(i, facts)
            if members is None:
                raise ScheduleError(f"op {i}: row_kernel needs an elementwise op over [rows, columns] fed only by "
                                    "row reductions and elementwise ops over the same rows and columns")
            fused.update([i, *members])
            groups.append(Group(anchor=i, producer=None, fills=_fills_of([*members, i], facts, by_index),
                                members=members))
            continue
        # a split reduction reads its input through a reshape that producer fusion cannot cross: its
        # producer gets a kernel of its own
        split_anchor = schedule is not None and schedule.split_reduction and "reduction" in f.info.iterator_types
        if (schedule is None or schedule.fuse_producers) and not split_anchor:
            for p, identity in zip(f.operand_producers, f.input_maps_identity):
                if p is not None and identity and facts[p].info.family != "fill" and not _img2col_anchor(p, facts, by_index) \
                        and (facts[p].single_use and p not in fused or p in shared):
                    producer = p
                    break
        fused.update([i] + ([producer] if producer is not None else []))
        groups.append(Group(anchor=i, producer=producer,
                            fills=_fills_of([i] + ([producer] if producer is not None else []), facts, by_index)))
    return list(reversed(groups))


def group_ops(g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """Every op the group's kernel computes: its anchor, producer, row-kernel members and fills."""
    ops = [g.anchor, *([g.producer] if g.producer is not None else []), *g.members]
    return ops + [facts[op].init_producer for op, _ in g.fills]


def kernel_of_line(line: int, facts: list[LinalgOpFacts], params: ScheduleParams) -> int | None:
    """The anchor op of the kernel that computes the op of model_linalg.mlir's `line`, if any."""
    return next((g.anchor for g in plan_groups(facts, params)
                 if any(line in facts[m].lines for m in group_ops(g, facts))), None)


def _fills_of(ops: list[int], facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> list[tuple[int, int]]:
    """(op, operand index of its init) of each of `ops` whose init is a fill (a fill shared by several
    ops is cloned into each of them), or the bias broadcast of a direct conv."""
    return [(m, facts[m].n_inputs) for m in ops if facts[m].init_producer is not None and (
        facts[facts[m].init_producer].info.family == "fill" or _initialised_conv(facts[m].init_producer, facts,
                                                                                 by_index) == m)]


def _initialised_conv(i: int, facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> int | None:
    """The direct (not img2col) conv whose init op `i` broadcasts (a conv's bias, as torch-mlir lowers
    it), if any: the conv's kernel computes it as it does a fill, one launch and one write of the output
    fewer (small_cnn: two kernels of 2.5-2.7 us under ncu, perf_targets_h200.md run 15)."""
    if facts[i].info.name != "linalg.broadcast" or not facts[i].single_use:
        return None
    conv = next((f.info.index for f in facts if f.init_producer == i), None)
    if conv is None or facts[conv].info.family != "conv" or _img2col_anchor(conv, facts, by_index):
        return None
    return conv


ROW_LOOPS = (["parallel", "parallel"], ["parallel", "reduction"])  # an elementwise op, a row reduction


def row_kernel_members(anchor: int, facts: list[LinalgOpFacts]) -> list[int] | None:
    """The ops a row kernel on `anchor` takes (payload order), or None where it does not apply: the
    anchor is elementwise over [rows, columns]; every op feeding it, transitively, is elementwise over
    the same loops or reduces them over the columns, and feeds nothing outside; at least one reduces."""
    op = facts[anchor].info
    if op.family != "elementwise" or op.iterator_types != ROW_LOOPS[0]:
        return None
    members = _feeding(anchor, facts)
    if any(facts[m].info.loop_ranges != op.loop_ranges or facts[m].info.iterator_types not in ROW_LOOPS
           for m in members):
        return None
    group = members | {anchor}
    if any(p in members and f.info.index not in group for f in facts for p in f.operand_producers):
        return None
    if not any(facts[m].info.iterator_types == ROW_LOOPS[1] for m in members):
        return None
    return sorted(members)


def _img2col_anchor(i: int, facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> bool:
    """A conv lowered through img2col (by its schedule, or by v0 where it has none) is a kernel's anchor:
    its result leaves the img2col matmul through a reshape that producer fusion cannot cross."""
    s = by_index.get(i)
    return s.img2col if s is not None else wants_img2col(facts[i].info)


def recomputed_producers(facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> set[int]:
    """Elementwise ops with several consumers that each compute it again instead of reading it from
    memory (softmax's exp(x - max), read by the sum and by the divide): where one consumer is a block
    reduction (which can fuse a producer, unlike a split one) and every consumer reads it through an
    identity map as its first such operand, and fuses producers."""
    shared = set()
    for f in facts:
        p = f.info.index
        consumers = [c for c in facts if p in c.operand_producers]
        if f.info.family != "elementwise" or f.single_use or len(consumers) < 2:
            continue
        def takes(c):
            s = by_index.get(c.info.index)
            firsts = [q for q, identity in zip(c.operand_producers, c.input_maps_identity)
                      if q is not None and identity and facts[q].info.family != "fill"]
            return (s is None or s.fuse_producers) and firsts[:1] == [p] and \
                c.operand_producers.count(p) == 1 and (c.info.family == "elementwise" or s is not None and s.block_reduction)
        if all(takes(c) for c in consumers) and any(by_index.get(c.info.index) and by_index[c.info.index].block_reduction
                                                   for c in consumers):
            shared.add(p)
    return shared


def _is_unconsumed_fill(fill: LinalgOpFacts, facts: list[LinalgOpFacts]) -> bool:
    return not any(f.init_producer == fill.info.index for f in facts)


def group_family(group: Group, facts: list[LinalgOpFacts]) -> str:
    """A group is as heavy as its heaviest member: a matmul fused into a bias-add is a matmul."""
    order = ("matmul", "conv", "pooling", "reduction", "elementwise", "copy", "fill")
    if group.members:  # a row kernel's work is its reductions (a variance's sum of products included)
        return "reduction"
    members = [group.anchor] + ([group.producer] if group.producer is not None else [])
    return min((facts[m].info.family for m in members), key=order.index)


def default_group_schedule(g: Group, facts: list[LinalgOpFacts], precision: str, chip: str) -> OpSchedule:
    family = group_family(g, facts)
    if g.producer is None and wants_img2col(facts[g.anchor].info):
        return img2col_schedule(facts[g.anchor].info)
    if g.producer is None and (transpose := transpose_schedule(facts[g.anchor].info)):
        return transpose
    schedule = default_op_schedule(facts[g.anchor].info, family)
    member = _reduction_member(g, facts)
    if member is not None and _wants_split(facts[member].info):
        # the kernel merges a few partials per output: one output per thread, whatever the family
        schedule = dataclasses.replace(default_op_schedule(facts[g.anchor].info, "reduction"), family=family)
        schedule.split_reduction = default_split_factor(reduction_extents(facts[member].info)[0])
        # the merge reads its row's partials MERGE_LOADS at a time into a vector, accumulator hoisted
        if any(schedule.thread_tile):
            schedule.reduction_tile = _largest_divisor_at_most(schedule.split_reduction, MERGE_LOADS)
            schedule.vectorize = True
        return schedule
    if family == "matmul":
        mma = tensor_core_schedule(g, facts, precision, chip)
        if mma is not None:
            return mma
    if family == "matmul" and member is not None and any(schedule.thread_tile):
        reductions = reduction_extents(facts[member].info)
        k_step = next((t for t in V0_MATMUL_K_TILES if len(reductions) == 1 and reductions[0] % t == 0), 0)
        if k_step:
            schedule.reduction_tile, schedule.vectorize = k_step, True
        _fill_the_grid(schedule, facts[g.anchor].info)
        split_k_to_fill_the_grid(schedule, facts[g.anchor].info, facts[member].info)
    return schedule


CONSERVATIVE_THREADS = 128
MIN_THREADS_ALONG_X = 32  # fewer threads along the innermost loop (an odd extent) take the next loop too


def conservative_schedule(op: OpInfo, family: str) -> OpSchedule:
    """The always-legal path beneath the templates: one output per thread, up to CONSERVATIVE_THREADS
    threads of a block along the innermost parallel loop (its largest divisor; the next loop too where that
    gives fewer than a warp), every other parallel loop one block per index (a linear grid past three
    loops), reductions whole in each thread; no vectors, shared memory, split reductions or tensor cores.
    Repairs put a kernel that failed, or every op, on it (rules/repair.py)."""
    ranges, iters = op.loop_ranges, op.iterator_types
    parallel = [d for d, it in enumerate(iters) if it == "parallel" and ranges[d] > 1]
    block, thread = [0] * len(ranges), [0] * len(ranges)
    for d in parallel:
        block[d] = 1
    budget = CONSERVATIVE_THREADS
    for d in reversed(parallel[-2:]):
        block[d] = _largest_divisor_at_most(ranges[d], budget)
        thread[d] = 1
        budget //= block[d]
        if block[d] >= MIN_THREADS_ALONG_X:
            break
    if not parallel and "parallel" in iters:  # one output (a loss's unit loop): one block of one thread
        block[iters.index("parallel")] = 1
    return OpSchedule(op_index=op.index, family=family, block_tile=block, thread_tile=thread)


# a 2-D transpose of 32-bit elements (an f32 weight that a SIMT matmul reads in (k, n) rows): blocks of
# 32x64, 4x4 per thread read as four 128-bit rows and written as four (a transpose in registers): the
# MLP 1.03x over one element per thread (schedule_sweep_h200.md run 19)
TRANSPOSE_TILES = ((32, 64), (4, 4))


def transpose_schedule(op: OpInfo) -> OpSchedule | None:
    """v0 of a 2-D linalg.transpose of 32-bit elements whose loops TRANSPOSE_TILES' blocks divide; else None."""
    block, thread = TRANSPOSE_TILES
    if op.name != "linalg.transpose" or len(op.loop_ranges) != 2 or vector_elements(op.dtype) != thread[1] \
            or any(r % b for r, b in zip(op.loop_ranges, block)):
        return None
    return OpSchedule(op_index=op.index, family="copy", block_tile=list(block), thread_tile=list(thread),
                      vectorize=True)


# K steps of a register-tiled (SIMT) matmul, the first that divides K: at 4096^3 f32 on the H200, 16 was
# 1.43x over 8 and 32 1.10x over 16 (benchmarks/results/schedule_sweep_h200.md runs 4 and 5)
V0_MATMUL_K_TILES = (32, 16, V0_REDUCTION_TILE)
# a SIMT matmul grid of fewer blocks than the H200's SMs leaves SMs idle: blocks of one warp, 16x8
# outputs of 2x2 per thread, then (the zoo's MLP: 2.0x over 64x64 blocks of 4x4; 1.47x over 32x32 and
# 16x32 blocks of 2x2 with the same threads per SM: ptxas gives one-warp blocks up to 64 registers, 62
# here, and blocks of more warps 32, fewer loads in flight; schedule_sweep_h200.md runs 4-5 and 15-17)
MIN_GRID_BLOCKS = 132
SMALL_GRID_TILE = ((16, 8), (2, 2))


def grid_blocks(schedule: OpSchedule, op: OpInfo) -> int:
    return math.prod(math.ceil(r / b) for b, r in zip(schedule.block_tile, op.loop_ranges) if b)


def _fill_the_grid(schedule: OpSchedule, op: OpInfo) -> None:
    """SMALL_GRID_TILE on the two thread-mapped loops when the grid has fewer than MIN_GRID_BLOCKS
    blocks and the loops take it."""
    dims = [d for d, t in enumerate(schedule.thread_tile) if t]
    block, thread = SMALL_GRID_TILE
    if grid_blocks(schedule, op) >= MIN_GRID_BLOCKS or len(dims) != 2:
        return
    if any(op.loop_ranges[d] % b for d, b in zip(dims, block)):
        return
    for d, b, t in zip(dims, block, thread):
        schedule.block_tile[d], schedule.thread_tile[d] = b, t


# a SIMT matmul whose grid holds fewer than SPLIT_K_WARPS warps after SMALL_GRID_TILE (about 16 per SM:
# the MLP's 256x1024 matmul, 2048 one-warp blocks, runs its L1 at 84% of peak; split in two it took 1.02x
# as long, plus its merge) splits K in chunks until it has them, each chunk at least SPLIT_K_MIN_CHUNK
# elements (two K steps of V0_REDUCTION_TILE). On the H200 under ncu (perf_targets_h200.md runs 15 and
# 17): the MLP's 256x256 matmul (K 1024, 512 one-warp blocks) 47.5 -> 18.0 us in 4 chunks (2.8 us merge);
# small_cnn's classifier (16x10 outputs; K 2048 over three loops, as the flatten before it folds into it;
# one block of 160 threads) 103.0 -> 5.8 us in 32 chunks (2.9 us merge). K over several loops splits only
# where all the outputs are one block's (split_over_blocks).
SPLIT_K_WARPS = 2048
SPLIT_K_MIN_CHUNK = 2 * V0_REDUCTION_TILE


def split_k_to_fill_the_grid(schedule: OpSchedule, anchor: OpInfo, matmul: OpInfo) -> None:
    """The rule above on a SIMT matmul group's `schedule` (tiles of its `anchor`; `matmul` has the K
    loops): sets its split_reduction, the merge's loads and vectorize, or leaves it unsplit."""
    blocks, split = grid_blocks(schedule, anchor), 1
    warps = blocks * math.ceil(math.prod(n for n in threads_per_loop(schedule, anchor) if n) / WARP_SIZE)
    first, *rest = reduction_extents(matmul)
    if rest and (blocks > 1 or not _reductions_trail(matmul)):
        return
    while warps * split < SPLIT_K_WARPS and first % (split * 2) == 0 \
            and first // (split * 2) * math.prod(rest) >= SPLIT_K_MIN_CHUNK:
        split *= 2
    if split > 1:  # the group's reduction_tile is now the merge's: partials read MERGE_LOADS at a time
        schedule.split_reduction = split
        schedule.reduction_tile = _largest_divisor_at_most(split, MERGE_LOADS)
        schedule.vectorize = True


def _reductions_trail(op: OpInfo) -> bool:
    r = op.iterator_types.index("reduction")
    return all(it == "reduction" for it in op.iterator_types[r:])


def split_over_blocks(op: OpInfo) -> bool:
    """A split matmul whose K spans several loops: tile_reduction_using_forall makes a block of each chunk
    of its first K loop (split_reduction takes one reduction loop, and tile_reduction_using_forall tiles no
    parallel loop: each block computes all the outputs' partials)."""
    return op.family == "matmul" and len(reduction_extents(op)) > 1


class MmaTiles(NamedTuple):
    """A v0 tensor-core template: tiles, staging, and the smallest grid it is for."""

    block: tuple[int, int]
    warp: tuple[int, int]  # wgmma: a warpgroup's tile
    k_step: int
    staged: bool  # A/B staged in shared memory
    stages: int = 0  # pipeline_depth: K steps in flight, copied by cp.async or, on wgmma, TMA (0: synchronous)
    copies_ahead: bool = False  # a spare buffer, filled before the step's mma
    min_blocks: int = 0  # taken only where the grid has this many blocks
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
_HALF_MMA_TILES = [MmaTiles((128, 256), (64, 256), 64, True, 3, min_blocks=MIN_GRID_BLOCKS, instruction="wgmma"),
                   MmaTiles((128, 128), (128, 128), 64, True, 4, min_blocks=MIN_GRID_BLOCKS, instruction="wgmma"),
                   MmaTiles((256, 128), (64, 64), 64, True, 2, min_blocks=MIN_GRID_BLOCKS),
                   MmaTiles((128, 256), (64, 64), 64, True, 2, min_blocks=MIN_GRID_BLOCKS),
                   MmaTiles((128, 128), (64, 64), 64, True, 2, min_blocks=MIN_GRID_BLOCKS),
                   MmaTiles((128, 64), (64, 64), 32, True, 3), MmaTiles((128, 64), (64, 64), 32, True),
                   MmaTiles((128, 64), (64, 32), 32, True), *_UNSTAGED_MMA_TILES]
V0_MMA_TILES = {
    "f16": _HALF_MMA_TILES,
    "bf16": _HALF_MMA_TILES,
    "f32": [MmaTiles((128, 256), (64, 256), 32, True, 3, min_blocks=MIN_GRID_BLOCKS, instruction="wgmma"),
            MmaTiles((128, 64), (64, 64), 32, True, 2, copies_ahead=True), MmaTiles((128, 64), (64, 32), 16, True),
            *_UNSTAGED_MMA_TILES]}


def tensor_core_schedule(g: Group, facts: list[LinalgOpFacts], precision: str, chip: str) -> OpSchedule | None:
    """The v0 schedule of an f16 x f16 or bf16 x bf16 matmul kernel (alone or fused into an elementwise
    consumer) on tensor cores, with the first V0_MMA_TILES entry of its operand type that the kernel
    and the chip (wgmma: WGMMA_CHIPS) take, and of an f32 one in precision tf32; None where tensor
    cores do not apply (other dtypes, ops, shapes)."""
    op = facts[g.anchor].info
    matmul = facts[g.anchor] if op.name == "linalg.matmul" or g.producer is None else facts[g.producer]
    operand = matmul.input_dtypes[0] if matmul.input_dtypes else ""
    if operand == "f32" and precision != "tf32":
        return None
    n = len(op.loop_ranges)
    for t in V0_MMA_TILES.get(operand, []):
        if t.instruction == "wgmma" and chip not in WGMMA_CHIPS:
            continue
        tail = [0] * (n - 2)
        schedule = OpSchedule(op_index=op.index, family="matmul", block_tile=[*t.block, *tail],
                              thread_tile=[*t.warp, *tail], reduction_tile=t.k_step, tensor_core=t.instruction,
                              promote_shared=t.staged, pipeline_depth=t.stages, copies_ahead=t.copies_ahead)
        if grid_blocks(schedule, op) < t.min_blocks:
            continue
        try:
            plan_mma(schedule, facts[g.anchor], facts[g.producer] if g.producer is not None else None, facts)
        except ValueError:
            continue
        return schedule
    return None


# output channels x pixels per thread of an img2col matmul: each gathered input element feeds 8 channels,
# each weight 8 pixels (on the H200: 8x4 was 1.48x over 4x4, benchmarks/results/schedule_sweep_h200.md run
# 2; 8x8 1.19x over 8x4 once the gathered tile stayed in registers, run 13)
IMG2COL_CHANNELS_PER_THREAD = 8
IMG2COL_PIXELS_PER_THREAD = 8
# pixels per block with 8x8 per thread: about 128, as many as the 64 channels' weights are reused for
# (112-pixel blocks of the 56-wide ResNet image 1.14x over 56, schedule_sweep_h200.md run 14)
IMG2COL_PIXELS_PER_BLOCK = 128


def img2col_schedule(conv: OpInfo) -> OpSchedule:
    """A conv's schedule through img2col: the v0 matmul template on its img2col matmul (blocks of 64
    output channels, 8 channels x 8 pixels per thread and then 128 pixels per block, the reduction loop
    tiled by about 8 and the thread's tile vectorized), with the pixel and reduction tiles moved to the
    nearest ones aligned to the gather's index arithmetic (OpInfo.tile_alignments), e.g. 112-pixel blocks of
    a 56-wide image and K steps of 9 for a 3x3 kernel."""
    op = img2col_op(conv)
    schedule = default_op_schedule(op, "matmul")
    schedule.img2col = True
    alignments = {d: extents for d, extents in enumerate(op.tile_alignments) if extents}
    channel = next(d for d in range(1, len(op.loop_ranges))
                   if op.iterator_types[d] == "parallel" and d not in alignments)
    channels_tiled = schedule.thread_tile[channel] and \
        (schedule.block_tile[channel] or op.loop_ranges[channel]) % IMG2COL_CHANNELS_PER_THREAD == 0
    if channels_tiled:
        schedule.thread_tile[channel] = IMG2COL_CHANNELS_PER_THREAD
    for d, extents in alignments.items():
        thread = schedule.thread_tile[d]
        if op.iterator_types[d] == "reduction":
            if any(schedule.thread_tile):
                schedule.reduction_tile = _nearest_aligned(op.loop_ranges[d], V0_REDUCTION_TILE, extents)
                schedule.vectorize = True
            continue
        if channels_tiled and thread and op.loop_ranges[d] % IMG2COL_PIXELS_PER_THREAD == 0:
            thread = schedule.thread_tile[d] = IMG2COL_PIXELS_PER_THREAD
            schedule.block_tile[d] = schedule.block_tile[d] and IMG2COL_PIXELS_PER_BLOCK
        if thread and not img2col_aligned(thread, extents):
            thread = schedule.thread_tile[d] = max(t for t in range(1, thread + 1)
                                                   if thread % t == 0 and img2col_aligned(t, extents))
        if schedule.block_tile[d]:
            schedule.block_tile[d] = _nearest_aligned(op.loop_ranges[d], schedule.block_tile[d], extents,
                                                      multiple_of=thread or 1)
    return schedule


def _nearest_aligned(extent: int, want: int, extents: list[int], multiple_of: int = 1) -> int:
    """The divisor of `extent` closest to `want` (by ratio; the smaller on a tie) that is a multiple of
    `multiple_of` and aligned to `extents`."""
    tiles = [t for t in range(multiple_of, extent + 1, multiple_of) if extent % t == 0 and img2col_aligned(t, extents)]
    return min(tiles, key=lambda t: (abs(math.log(t / want)), t))


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
    params = ScheduleParams(ops=[default_group_schedule(g, facts, precision, chip) for g in plan_groups(facts, None)],
                            chip=chip, precision=precision)
    # producers that a split reduction leaves out of its kernel get a schedule of their own
    planned = {s.op_index for s in params.ops}
    params.ops += [default_group_schedule(g, facts, precision, chip) for g in plan_groups(facts, params)
                   if g.anchor not in planned]
    params.ops.sort(key=lambda s: s.op_index)
    if reductions == "split":
        return params
    params = with_block_reductions(params, facts)
    return with_row_kernels(params, facts) if reductions == "rows" else params


RETILING_FIELDS = ("img2col", "tensor_core")
WHOLE_SCHEDULE = "schedule"  # op X's "schedule": its whole OpSchedule (a repair: the conservative path)
ALL_SCHEDULES = "ops"  # the params' "ops": every op's OpSchedule (a repair: all on the conservative path)


def apply_edit(params: ScheduleParams, edit: ScheduleEdit) -> ScheduleParams:
    """A copy of `params` with exactly one field changed; op X's `schedule` and the params' `ops` replace whole
    OpSchedules (dicts)."""
    new = ScheduleParams.from_dict(params.to_dict())
    if edit.op_index == -1 and edit.field == ALL_SCHEDULES:
        new.ops = [_whole_schedule(value, value.get("op_index") if isinstance(value, dict) else None)
                   for value in edit.value]
        return new
    if edit.op_index == -1:
        if edit.field not in PARAM_FIELDS:
            raise ScheduleError(f"unknown schedule parameter {edit.field!r}")
        setattr(new, edit.field, edit.value)
        return new
    if edit.field == WHOLE_SCHEDULE:
        replacement = _whole_schedule(edit.value, edit.op_index)
        new.ops = sorted([s for s in new.ops if s.op_index != edit.op_index] + [replacement], key=lambda s: s.op_index)
        return new
    targets = [s for s in new.ops if s.op_index == edit.op_index]
    if not targets or edit.field not in SCHEDULE_FIELDS:
        raise ScheduleError(f"no op {edit.op_index} field {edit.field!r} in the schedule")
    if edit.field in RETILING_FIELDS and isinstance(edit.value, dict):
        # what the tiles address changes with these fields (img2col: the loops; tensor_core: warps or the
        # warpgroup): the edit carries the new tiles
        unknown = set(edit.value) - (SCHEDULE_FIELDS | {"family"})
        if unknown or edit.field not in edit.value:
            raise ScheduleError(f"op {edit.op_index}: a {edit.field} edit sets {edit.field} and tile fields, "
                                f"not {sorted(unknown)}")
        for field, value in edit.value.items():
            setattr(targets[0], field, value)
        return new
    setattr(targets[0], edit.field, edit.value)
    return new


def _whole_schedule(value, op_index: int | None) -> OpSchedule:
    try:
        schedule = OpSchedule.from_dict(value)
    except (TypeError, ValueError, AttributeError) as e:
        raise ScheduleError(f"op {op_index}: a schedule edit carries a whole OpSchedule: {e}") from None
    if schedule.op_index != op_index:
        raise ScheduleError(f"op {op_index}: the schedule edit carries op {schedule.op_index}'s schedule")
    return schedule


def mma_plan(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> MmaPlan:
    """The tensor-core plan of a kernel whose schedule asks for tensor cores."""
    op = facts[g.anchor].info
    if schedule.tensor_core not in ("mma_sync", "wgmma"):
        raise ScheduleError(f"op {op.index}: tensor_core must be 'none', 'mma_sync' or 'wgmma', "
                            f"not {schedule.tensor_core!r}")
    if schedule.split_reduction:
        raise ScheduleError(f"op {op.index}: a tensor-core kernel does not split its reduction")
    try:
        return plan_mma(schedule, facts[g.anchor], facts[g.producer] if g.producer is not None else None, facts)
    except ValueError as e:
        raise ScheduleError(f"op {op.index}: tensor_core {schedule.tensor_core}: {e}") from None


def validate(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """Check one kernel's tiles; returns the thread block shape [x, y, z]."""
    op = facts[g.anchor].info
    if not 0 <= schedule.min_blocks_per_sm <= MAX_BLOCKS_PER_SM:
        raise ScheduleError(f"op {op.index}: min_blocks_per_sm must be 0..{MAX_BLOCKS_PER_SM}, not "
                            f"{schedule.min_blocks_per_sm}")
    if schedule.warp_merge and not (schedule.block_reduction or schedule.row_kernel):
        raise ScheduleError(f"op {op.index}: warp_merge merges the partials of a block reduction: it needs "
                            "block_reduction or row_kernel")
    if schedule.interleave_columns and not (schedule.row_kernel or schedule.block_reduction):
        raise ScheduleError(f"op {op.index}: interleave_columns interleaves the columns that the threads of a row "
                            "kernel or block reduction share: it needs row_kernel or block_reduction")
    members = [g.anchor] + ([g.producer] if g.producer is not None else [])
    if schedule.img2col:
        op = img2col_op(op)  # raises ScheduleError for a non-conv op
        if g.producer is not None or schedule.tensor_core != "none" or schedule.split_reduction \
                or schedule.block_reduction:
            raise ScheduleError(f"op {op.index}: img2col kernels fuse no producer and take no tensor_core, "
                                "split_reduction or block_reduction")
        members = []
        if schedule.vectorize and not schedule.reduction_tile:
            raise ScheduleError(f"op {op.index}: vectorizing an img2col matmul needs a reduction_tile")
        _check_img2col_alignment(schedule, op)
    n = len(op.loop_ranges)
    if len(schedule.block_tile) != n or len(schedule.thread_tile) != n:
        raise ScheduleError(f"op {op.index}: tiles must have {n} entries (one per loop)")
    if schedule.vectorize and not schedule.reduction_tile and not schedule.block_reduction and any(
            "reduction" in facts[m].info.iterator_types for m in members):
        raise ScheduleError(f"op {op.index}: vectorizing a reduction needs a reduction_tile (else the whole "
                            "reduction loop becomes one vector)")
    if schedule.promote_shared and schedule.tensor_core == "none":
        raise ScheduleError(f"op {op.index}: promote_shared is not expressible by this compile stage's "
                            "schedules yet, except for tensor-core (tensor_core mma_sync) kernels")
    if schedule.row_kernel:
        return _check_row_kernel(schedule, g, facts)
    if schedule.tensor_core != "none":
        return mma_plan(schedule, g, facts).block_dims
    if schedule.split_reduction:
        _check_split(schedule, g, facts)
    if schedule.block_reduction:
        return _check_block_reduction(schedule, g, facts)
    if grid_blocks(schedule, op) > MAX_GRID_X:
        raise ScheduleError(f"op {op.index}: block_tile {schedule.block_tile} makes {grid_blocks(schedule, op)} blocks, "
                            f"more than a grid holds ({MAX_GRID_X})")
    for d, (b, t) in enumerate(zip(schedule.block_tile, schedule.thread_tile)):
        if op.iterator_types[d] == "reduction" and (b or t):
            raise ScheduleError(f"op {op.index}: loop {d} is a reduction; a parallel forall over it is a data race")
        if b < 0 or t < 0:
            raise ScheduleError(f"op {op.index}: loop {d} has a negative tile size")
        # partial tiles would give per-thread scratch a dynamic size (device malloc in the kernel)
        extent = op.loop_ranges[d]
        if (b and extent % b) or (t and (b or extent) % t):
            raise ScheduleError(f"op {op.index}: loop {d} of extent {extent} is not divided evenly by "
                                f"block tile {b} and thread tile {t}")
    return _block_dims(schedule, op)


def _check_img2col_alignment(schedule: OpSchedule, op: OpInfo) -> None:
    """op: the img2col matmul of a conv (img2col_op), its tile_alignments the gather's."""
    for d, extents in enumerate(op.tile_alignments):
        is_reduction = op.iterator_types[d] == "reduction"
        tiles = [schedule.reduction_tile] if is_reduction else [schedule.block_tile[d], schedule.thread_tile[d]]
        for tile in filter(None, tiles):
            if not img2col_aligned(tile, extents):
                what = "reduction_tile" if is_reduction else f"tile {tile} of loop {d}"
                raise ScheduleError(f"op {op.index}: img2col: the {what} must divide or be a multiple of "
                                    f"each of {extents}: the gather takes that loop's index apart by them, and "
                                    "an unaligned tile reads the wrong input elements")


def _check_split(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> None:
    op, split = facts[g.anchor].info, schedule.split_reduction
    member = _reduction_member(g, facts)
    if member is None:
        raise ScheduleError(f"op {op.index}: split_reduction needs a reduction in the kernel, and it has none")
    info = facts[member].info
    extents = reduction_extents(info)
    if split_over_blocks(info):
        if grid_blocks(schedule, op) != 1 or not _reductions_trail(info):
            raise ScheduleError(f"op {op.index}: a matmul whose K spans {len(extents)} loops splits only with all "
                                f"its outputs in one block (block_tile {schedule.block_tile} makes "
                                f"{grid_blocks(schedule, op)}) and its K loops last")
    elif info.family not in ("reduction", "matmul") or len(extents) != 1:
        raise ScheduleError(f"op {op.index}: split_reduction splits one reduction loop; op {member} "
                            f"({info.name}) has {len(extents)}")
    if split < 2 or extents[0] % split:
        raise ScheduleError(f"op {op.index}: split_reduction {split} must be at least 2 and divide the "
                            f"reduction loop extent {extents[0]} of op {member} (0 = no split)")
    if schedule.reduction_tile and split % schedule.reduction_tile:
        raise ScheduleError(f"op {op.index}: reduction_tile {schedule.reduction_tile} must divide "
                            f"split_reduction {split}: the kernel's reduction loop merges {split} partials")


def _check_block_reduction(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """One output per block, its reduction loop spread over `block_reduction` threads."""
    op, threads = facts[g.anchor].info, schedule.block_reduction
    if _reduction_member(g, facts) != g.anchor or len(reduction_extents(op)) != 1:
        raise ScheduleError(f"op {op.index}: block_reduction needs a kernel whose anchor op has one reduction loop")
    if schedule.split_reduction:
        raise ScheduleError(f"op {op.index}: block_reduction and split_reduction exclude each other")
    extent = reduction_extents(op)[0]
    if not 2 <= threads <= MAX_THREADS or extent % threads:
        raise ScheduleError(f"op {op.index}: block_reduction {threads} must be 2..{MAX_THREADS} and divide the "
                            f"reduction loop extent {extent}")
    if any(schedule.thread_tile):
        raise ScheduleError(f"op {op.index}: with block_reduction the threads of a block reduce one output: "
                            "thread_tile must be all 0")
    if schedule.reduction_tile and (extent // threads) % schedule.reduction_tile:
        raise ScheduleError(f"op {op.index}: reduction_tile {schedule.reduction_tile} must divide the "
                            f"{extent // threads} elements each thread reduces")
    for d, b in enumerate(schedule.block_tile):
        parallel = op.iterator_types[d] == "parallel"
        if (not parallel and b) or (parallel and b != 1 and not (b == 0 and op.loop_ranges[d] == 1)):
            raise ScheduleError(f"op {op.index}: with block_reduction each block computes one output: block "
                                f"tile 1 on every parallel loop, 0 on the reduction, not {schedule.block_tile}")
    if not any(schedule.block_tile):
        raise ScheduleError(f"op {op.index}: block_reduction needs at least one parallel loop over blocks")
    _check_warp_merge(schedule, op)
    return [threads, 1, 1]


def _check_warp_merge(schedule: OpSchedule, op: OpInfo) -> None:
    if schedule.warp_merge and not warp_can_merge(schedule):
        raise ScheduleError(f"op {op.index}: warp_merge merges the partials in a warp: it needs "
                            f"{schedule.block_reduction or schedule.row_kernel} threads per output to be whole warps, "
                            f"at least {2 * WARP_SIZE}")


def _check_row_kernel(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """A block per row, `row_kernel` threads sharing each of its ops' columns."""
    op, threads = facts[g.anchor].info, schedule.row_kernel
    if schedule.tensor_core != "none" or schedule.split_reduction or schedule.block_reduction \
            or schedule.promote_shared:
        raise ScheduleError(f"op {op.index}: a row kernel takes no tensor_core, split_reduction, block_reduction "
                            "or promote_shared")
    if schedule.block_tile != [1, 0] or schedule.thread_tile != [0, 0] or schedule.reduction_tile:
        raise ScheduleError(f"op {op.index}: a row kernel has block_tile [1, 0] (a block per row), thread_tile "
                            f"[0, 0] and no reduction_tile, not {schedule.block_tile}, {schedule.thread_tile}, "
                            f"{schedule.reduction_tile}")
    columns = op.loop_ranges[1]
    if not 2 <= threads <= MAX_THREADS or columns % threads:
        raise ScheduleError(f"op {op.index}: row_kernel {threads} must be 2..{MAX_THREADS} and divide the "
                            f"{columns} columns")
    _check_warp_merge(schedule, op)
    return [threads, 1, 1]


def block_reduction_schedule(g: Group, facts: list[LinalgOpFacts], family: str) -> OpSchedule | None:
    """The one-kernel shape of a group whose anchor is a row-like reduction: a block per output,
    block_reduction_threads(K) threads reducing its K elements; None where it does not apply."""
    op = facts[g.anchor].info
    if _reduction_member(g, facts) != g.anchor or not _wants_split(op):
        return None
    extent = reduction_extents(op)[0]
    block = [1 if it == "parallel" and r > 1 else 0 for r, it in zip(op.loop_ranges, op.iterator_types)]
    if not any(block):  # one output (a loss's unit loop): one block
        block[op.iterator_types.index("parallel")] = 1
    threads = block_reduction_threads(extent)
    per_thread = extent // threads
    return OpSchedule(op_index=op.index, family=family, block_tile=block, thread_tile=[0] * len(block),
                      block_reduction=threads, vectorize=True, interleave_columns=True,
                      reduction_tile=_largest_divisor_at_most(per_thread, 32) if per_thread > 64 else 0)


def with_block_reductions(params: ScheduleParams, facts: list[LinalgOpFacts]) -> ScheduleParams:
    """A copy of `params` where every split row reduction is a one-kernel block reduction instead
    (block_reduction_schedule), and producers that this lets kernels fuse lose their own schedule."""
    new = ScheduleParams.from_dict(params.to_dict())
    groups = {g.anchor: g for g in plan_groups(facts, None)}
    new.ops = [(block_reduction_schedule(groups[s.op_index], facts, s.family) if s.split_reduction
                and s.op_index in groups else None) or s for s in new.ops]
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


def with_row_kernels(params: ScheduleParams, facts: list[LinalgOpFacts],
                     max_reductions: int = ROW_KERNEL_MAX_REDUCTIONS) -> ScheduleParams:
    """A copy of `params` where each row pipeline (row_kernel_members) of at most `max_reductions`
    reductions is one kernel of row_kernel_threads(columns) threads per row, its ops losing their own
    schedules; its merges end in warp shuffles unless a reduction is in f64; its threads' columns
    interleaved (interleaved_columns: softmax over rows of 8192 f32 1.14x, layernorm 1.23x on the H200,
    schedule_sweep_h200.md run 20)."""
    new = ScheduleParams.from_dict(params.to_dict())
    taken: set[int] = set()
    for f in reversed(facts):
        i = f.info.index
        members = None if i in taken else row_kernel_members(i, facts)
        if members is None or sum(facts[m].info.iterator_types == ROW_LOOPS[1] for m in members) > max_reductions:
            continue
        taken.update(members)
        columns = f.info.loop_ranges[1]
        reductions = [facts[m].info for m in members if facts[m].info.iterator_types == ROW_LOOPS[1]]
        new.ops = [s for s in new.ops if s.op_index not in [i, *members]]
        row = OpSchedule(op_index=i, family="reduction", block_tile=[1, 0], thread_tile=[0, 0], vectorize=True,
                         row_kernel=row_kernel_threads(columns), interleave_columns=True)
        row.warp_merge = all(r.dtype != "f64" for r in reductions) and warp_can_merge(row)
        new.ops.append(row)
    new.ops.sort(key=lambda s: s.op_index)
    return new


def interleaved_columns(schedule: OpSchedule, op: OpInfo) -> bool:
    """Whether the kernel of `schedule` (anchor `op`) interleaves its threads' columns: interleave_columns
    is on, and each thread of the row kernel or block reduction (without reduction_tile, over the innermost
    loop) reads one run of columns that is more than one 128-bit vector, in whole vectors. Elsewhere the
    knob changes nothing (a thread's one vector is interleaved already)."""
    if not schedule.interleave_columns:
        return False
    if schedule.row_kernel:
        columns = op.loop_ranges[1] // schedule.row_kernel
    elif schedule.block_reduction and not schedule.reduction_tile and op.iterator_types[-1] == "reduction":
        columns = reduction_extents(op)[0] // schedule.block_reduction
    else:
        return False
    vector = vector_elements(op.dtype)
    return vector > 1 and columns % vector == 0 and columns > vector


ROW_KERNEL_COLUMNS = 16  # columns per thread of a v0 row kernel
ROW_KERNEL_MIN_THREADS = 128  # threads per row of a v0 row kernel over short rows, at least 8 columns each


def row_kernel_threads(columns: int) -> int:
    """Threads per row of a v0 row kernel: ROW_KERNEL_COLUMNS columns each, up to 1024; rows of up to
    1024 columns keep the ROW_KERNEL_MIN_THREADS (8 columns each, or all columns) that v0 gave them before
    (not measured since). With interleaved columns, over rows of 8192 f32 on the H200
    (schedule_sweep_h200.md run 20): softmax 1024 threads 141.8 us, 512 132.2, 256 133.5; layernorm
    133.0, 132.2, 134.5. (With a run of columns per thread 1024 threads were the fastest: softmax
    178.6 us, 512 210.9, 256 339.4; runs 5 and 6.)"""
    wanted = max(columns // ROW_KERNEL_COLUMNS, min(ROW_KERNEL_MIN_THREADS, columns // 8))
    return _largest_divisor_at_most(columns, max(min(wanted, MAX_THREADS), 1))


# a block reduction over rows at least this long takes MAX_THREADS threads per row: the row sum over rows
# of 8192 f32 1.06x over 512 threads (65.6 vs 69.6 us) once its loads were interleaved and streamed
# (schedule_sweep_h200.md run 24, the loop's v2 in loop_h200.md 12:37)
LONG_ROW = 8192


def block_reduction_threads(extent: int) -> int:
    """Threads per output of a v0 block reduction: about extent / 16, within 128..512, each reducing at
    least 4 elements (the fastest measured on the H200: 128 for rows of 1024, 256 for 4096;
    benchmarks/results/schedule_sweep_h200.md, perf_targets_h200.md); MAX_THREADS from LONG_ROW on."""
    if extent >= LONG_ROW:
        return _largest_divisor_at_most(extent, MAX_THREADS)
    return _largest_divisor_at_most(extent, max(min(max(extent // 16, 128), 512, extent // 4), 1))


def _block_dims(schedule: OpSchedule, op: OpInfo) -> list[int]:
    threads = [n for n in threads_per_loop(schedule, op) if n]
    if len(threads) > 3:
        raise ScheduleError(f"op {op.index}: at most 3 loops can be mapped to threads, got {len(threads)}")
    block = list(reversed(threads)) + [1] * (3 - len(threads))
    if math.prod(block) > MAX_THREADS:
        raise ScheduleError(f"op {op.index}: {math.prod(block)} threads per block exceed {MAX_THREADS}")
    return block


_BLOCK_IDS = ["x", "y", "z"]
MAX_GRID_X = 2**31 - 1  # CUDA's limit on gridDim.x
MAX_GRID_YZ = 65535  # and on gridDim.y and gridDim.z


def linear_grid(schedule: OpSchedule, op: OpInfo) -> int:
    """The blocks of a kernel whose block loops do not fit grid x, y and z (more than three loops, or more
    than MAX_GRID_YZ blocks along y or z: an NCHW conv, a 4-D attention score), else 0. Such a kernel runs
    on a 1-D grid of that many blocks, whose linear block id is delinearized over the block loops
    (#gpu.block<linear_dim_i>, with map_forall_to_blocks' grid_dims set to the 1-D grid: left to infer the
    grid from linear ids it launches too few blocks)."""
    loops = [math.ceil(r / b) for b, r in zip(schedule.block_tile, op.loop_ranges) if b]
    return math.prod(loops) if len(loops) > 3 or any(n > MAX_GRID_YZ for n in loops[:-1]) else 0


def _mapping(kind: str, n: int, linear: bool = False) -> str:
    """Forall dims in loop order; the innermost maps to x. Past three dims (or where asked) linear ids,
    the innermost the fastest."""
    if n <= 3 and not linear:
        ids = list(reversed(_BLOCK_IDS[:n]))
        return ", ".join(f"#gpu.{kind}<{i}>" for i in ids)
    return ", ".join(f"#gpu.{kind}<linear_dim_{n - 1 - k}>" for k in range(n))


def _ints(xs: list[int]) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


HOIST = "    transform.loop.hoist_loop_invariant_subsets"


def plan_kernels(groups: list[Group], schedules: dict[int, OpSchedule], facts: list[LinalgOpFacts]) -> list[Kernel]:
    """Every launch, in launch order (payload order): a partial-reduction kernel runs where its
    reduction op was, which can be before the kernels of ops between it and its group's anchor."""
    placed = []  # ((payload position, 0 for a partial kernel), kernel)
    for g in groups:
        s = schedules[g.anchor]
        block = validate(s, g, facts)
        if s.split_reduction:
            member = _reduction_member(g, facts)
            partial = partial_kernel_schedule(facts[member].info, s.split_reduction, s)
            placed.append(((member, 0), Kernel(g.anchor, "reduction", _block_dims(*partial), True, s.min_blocks_per_sm,
                                               linear_grid=linear_grid(*partial))))
        tiled = img2col_op(facts[g.anchor].info) if s.img2col else facts[g.anchor].info
        placed.append(((g.anchor, 1), Kernel(g.anchor, "matmul" if s.img2col else group_family(g, facts), block,
                                              min_blocks_per_sm=s.min_blocks_per_sm, warp_merge=s.warp_merge,
                                              interleave_columns=interleaved_columns(s, facts[g.anchor].info),
                                              linear_grid=linear_grid(s, tiled))))
    return [kernel for _, kernel in sorted(placed, key=lambda p: p[0])]


def emit_transform(facts: list[LinalgOpFacts], params: ScheduleParams) -> tuple[str, list[Kernel]]:
    """transform.mlir for the payload described by `facts`; also returns its kernels in launch order."""
    groups = plan_groups(facts, params)
    by_index = {s.op_index: s for s in params.ops}
    schedules = {g.anchor: by_index.get(g.anchor) or default_group_schedule(g, facts, params.precision, params.chip)
                 for g in groups}
    kernels = plan_kernels(groups, schedules, facts)
    ids = {(c.anchor, c.partial): i for i, c in enumerate(kernels)}
    group_of = {g.anchor: g for g in groups}
    tensor_cores = {i: mma_plan(schedules[c.anchor], group_of[c.anchor], facts) for i, c in enumerate(kernels)
                    if not c.partial and schedules[c.anchor].tensor_core != "none"}
    # mma.sync kernels: their warps' K steps vectorized into contracts, their staging in transform.mlir
    warp_mmas = {k: plan for k, plan in tensor_cores.items() if not plan.warpgroup}
    tf32 = [plan.matmul for plan in tensor_cores.values() if plan.operand == "f32"]
    wgmma = [plan.matmul for plan in tensor_cores.values() if plan.warpgroup]
    if wgmma and params.chip not in WGMMA_CHIPS:
        raise ScheduleError(f"op {wgmma[0]}: wgmma runs on {', '.join(WGMMA_CHIPS)}, not {params.chip}")
    if tf32 and params.precision != "tf32":
        raise ScheduleError(f"op {tf32[0]}: f32 matmuls run on tensor cores as TF32, which needs precision "
                            f"\"tf32\" (its tolerance), not {params.precision!r}")
    lines = transform_module_head("consumed")
    lines.append(f"    %ops = transform.structured.match interface{{LinalgOp}} in %func : ({ANY}) -> {ANY}")
    handles = ", ".join(f"%op{i}" for i in range(len(facts)))
    lines.append(f"    {handles} = transform.split_handle %ops : ({ANY}) -> ({', '.join([ANY] * len(facts))})")
    lines += emit_img2col_conversions(groups, schedules, facts)
    # a producer that several kernels compute again is fused into the last consumer first: fusion into a
    # kernel that runs before another consumer would write the producer's result out for it
    recomputed = any(g.producer is not None and not facts[g.producer].single_use for g in groups)
    order = list(reversed(groups)) if recomputed else groups
    group_lines = [line for g in order for line in _emit_group(ids, g, schedules[g.anchor], facts)]
    # loop-invariant subsets are found once CSE has made the accumulator's read and write indices the
    # same values: those steps run after it
    hoists = [line for line in group_lines if line.startswith(HOIST)]
    lines += [line for line in group_lines if not line.startswith(HOIST)]
    lines += [
        f"    transform.apply_patterns to %func {{ transform.apply_patterns.canonicalization }} : {ANY}",
        # inside the kernels only: CSE would merge the function's equal tensor.empty ops, and one written by two
        # kernels is copied on the host (a concat's, whose pieces a kernel each writes)
        f'    %tiled = transform.structured.match ops{{["scf.forall"]}} in %func : ({ANY}) -> {ANY}',
        f"    transform.apply_cse to %tiled : {ANY}",
        *hoists,
        f'    %empties = transform.structured.match ops{{["tensor.empty"]}} in %root : ({ANY}) -> !transform.op<"tensor.empty">',
        '    transform.bufferization.empty_tensor_to_alloc_tensor %empties : (!transform.op<"tensor.empty">) '
        '-> !transform.op<"bufferization.alloc_tensor">',
    ]
    # block-local tensors in shared memory: a tensor-core kernel's accumulator tile, a block reduction's partials
    for k, kernel in enumerate(kernels):
        s = schedules[kernel.anchor]
        if k in tensor_cores or not kernel.partial and (s.block_reduction or s.row_kernel):
            lines += emit_shared_accumulator(k)
    lines += [
        "    %bufferized = transform.bufferization.one_shot_bufferize %root {bufferize_function_boundaries = true, "
        f"function_boundary_type_conversion = 1 : i32, memcpy_op = \"linalg.copy\"}} : ({ANY}) -> {ANY}",
    ]
    # bufferization leaves self-copies of identical subviews behind; CSE + folding removes them
    lines += [
        f'    %bufferized_func = transform.structured.match ops{{["func.func"]}} in %bufferized : ({ANY}) -> {ANY}',
        f"    transform.apply_cse to %bufferized_func : {ANY}",
        f"    transform.apply_patterns to %bufferized_func {{ transform.apply_patterns.canonicalization }} : {ANY}",
        f"    transform.apply_cse to %bufferized_func : {ANY}",
    ]
    for k, kernel in enumerate(kernels):
        lines += [
            f'    %kernel{k} = transform.structured.match ops{{["scf.forall"]}} attributes{{farm.kernel = {k} : i64}} '
            f"in %bufferized : ({ANY}) -> {ANY}",
            *(emit_staged_copies(k) if k in warp_mmas and schedules[kernel.anchor].promote_shared else []),
            f"    %launch{k} = transform.gpu.map_forall_to_blocks %kernel{k} "
            f"{f'grid_dims = [{kernel.linear_grid}, 1, 1] ' if kernel.linear_grid else ''}"
            f"{{ generate_gpu_launch }} : ({ANY}) -> {ANY}",
            *_annotate_launch(k, kernel),
            f"    {f'%mapped{k} = ' if k in warp_mmas else ''}transform.gpu.map_nested_forall_to_threads %launch{k} "
            f"block_dims = {_ints(kernel.block)} : ({ANY}) -> {ANY}",
        ]
        if k in warp_mmas:
            lines += emit_mma_contracts(f"%mapped{k}", tensor_cores[k])
    lines += [
        f'    %gpu_func = transform.structured.match ops{{["func.func"]}} in %bufferized : ({ANY}) -> {ANY}',
        # accumulators of a vectorized reduction loop stay in registers across its iterations
        f"    %hoisted = transform.structured.hoist_redundant_vector_transfers %gpu_func : ({ANY}) -> {ANY}",
    ]
    # staged tiles in a K loop (a single K step leaves no loop, and nothing to pipeline)
    staged = {k: plan for k, plan in warp_mmas.items()
              if schedules[kernels[k].anchor].promote_shared and plan.k_steps > 1}
    pipelined = {k: plan for k, plan in staged.items() if plan.stages > 1}
    func = "%hoisted"
    for k, plan in staged.items():
        lines += emit_staged_tiles(k, plan, func)
    if pipelined:
        # the staged tiles out of their K loops (static shapes), so that they can be multi-buffered
        lines.append(f'    %staged_hoisted = transform.apply_registered_pass "buffer-loop-hoisting" to {func} '
                     f": ({ANY}) -> {ANY}")
        func = "%staged_hoisted"
        for k, plan in pipelined.items():
            lines += emit_multibuffers(k, plan, func)
    # the rest lowers contractions to FMAs: tensor-core kernels keep theirs for convert-vector-to-gpu
    plain = [k for k in range(len(kernels)) if k not in tensor_cores]
    target = func
    if tensor_cores:
        launches = ", ".join(f"%gpu_launch{k}" for k in range(len(kernels)))
        lines += [f'    %gpu_launches = transform.structured.match ops{{["gpu.launch"]}} in {func} : ({ANY}) -> {ANY}',
                  f"    {launches} = transform.split_handle %gpu_launches : ({ANY}) -> ({', '.join([ANY] * len(kernels))})"]
        target = "%plain_launches"
        if plain:
            lines.append(f"    {target} = transform.merge_handles {', '.join(f'%gpu_launch{k}' for k in plain)} : {ANY}")
    lines += [] if not plain else [
        # then contractions become FMAs, and contiguous 1-D transfers become vector loads/stores
        f"    transform.apply_patterns to {target} {{ transform.apply_patterns.vector.reduction_to_contract "
        "transform.apply_patterns.vector.transfer_permutation_patterns "
        f"transform.apply_patterns.canonicalization }} : {ANY}",
        f"    transform.apply_patterns to {target} {{ transform.apply_patterns.vector.lower_contraction "
        'lowering_strategy = "outerproduct" transform.apply_patterns.vector.lower_outerproduct '
        "transform.apply_patterns.vector.rank_reducing_subview_patterns "
        "transform.apply_patterns.vector.cast_away_vector_leading_one_dim "
        "transform.apply_patterns.vector.lower_masked_transfers "
        # what reduction_to_contract leaves of a vectorized reduction (a max, a sum of partials) unrolls
        # to scalar ops
        'transform.apply_patterns.vector.reorder_multi_reduction_dims lowering_strategy = "innerreduction" '
        'transform.apply_patterns.vector.multi_reduction_flattening lowering_strategy = "innerreduction" '
        'transform.apply_patterns.vector.multi_reduction_unrolling lowering_strategy = "innerreduction" '
        "transform.apply_patterns.vector.transfer_permutation_patterns "
        f"transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1 }} : {ANY}",
    ]
    lines += ["    transform.yield", "  }"]
    if pipelined:
        lines.append(f"  transform.named_sequence @{PIPELINE_COPIES_SEQUENCE}(%root: {ANY} {{transform.readonly}}) {{")
        for k, plan in pipelined.items():
            lines += emit_pipelined_k_loop(k, plan)
        lines += ["    transform.yield", "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n", kernels


def _annotate_launch(k: int, kernel: Kernel) -> list[str]:
    """The kernel's schedule choices on its gpu.launch (kernel_marks), which farm-outline-kernels carries
    onto its gpu.func for the passes after it."""
    launch, i64, i32 = f"%launch{k}", "!transform.param<i64>", "!transform.param<i32>"
    out = [f"    {launch}_anchor = transform.param.constant {kernel.anchor} : i64 -> {i64}",
           f'    transform.annotate {launch} "{kernel_marks.ANCHOR}" = {launch}_anchor : {ANY}, {i64}',
           f'    {launch}_family = transform.param.constant "{kernel.family}" -> !transform.any_param',
           f'    transform.annotate {launch} "{kernel_marks.FAMILY}" = {launch}_family : {ANY}, !transform.any_param']
    out += [f'    transform.annotate {launch} "{mark}" : {ANY}' for mark, on in (
        (kernel_marks.WARP_MERGE, kernel.warp_merge), (kernel_marks.INTERLEAVE_COLUMNS, kernel.interleave_columns)) if on]
    if kernel.min_blocks_per_sm:
        out += [f"    {launch}_ctas = transform.param.constant {kernel.min_blocks_per_sm} : i32 -> {i32}",
                f'    transform.annotate {launch} "{kernel_marks.MIN_BLOCKS_PER_SM}" = {launch}_ctas : {ANY}, {i32}']
    return out


def threads_per_loop(schedule: OpSchedule, op: OpInfo) -> list[int]:
    """Threads along each loop of a block tile (0 = loop not mapped to threads)."""
    return [math.ceil((b or r) / t) if t else 0
            for b, t, r in zip(schedule.block_tile, schedule.thread_tile, op.loop_ranges)]


def _reduction_member(g: Group, facts: list[LinalgOpFacts]) -> int | None:
    """The group member that has reduction loops, if any."""
    for m in ([g.producer] if g.producer is not None else []) + [g.anchor]:
        if "reduction" in facts[m].info.iterator_types:
            return m
    return None


def _emit_group(ids: dict[tuple[int, bool], int], g: Group, s: OpSchedule, facts: list[LinalgOpFacts]) -> list[str]:
    """The group's kernel (and first, where its reduction is split, the partial-reduction kernel);
    `ids` numbers the kernels by (anchor, partial) in launch order."""
    op = facts[g.anchor].info
    k = f"g{g.anchor}"
    if s.tensor_core != "none":
        return _emit_mma_group(ids[(g.anchor, False)], k, g, s, facts)
    if s.img2col:
        return _emit_img2col_group(ids[(g.anchor, False)], k, g, s, facts)
    if s.row_kernel:
        return _emit_row_kernel(ids[(g.anchor, False)], k, g, s, facts)
    handles = {m: f"%op{m}" for m in [g.anchor] + ([g.producer] if g.producer is not None else [])}
    # fusion consumes the producer's handle, so a shared fill is looked up afresh from each consumer
    out = [f"    %{k}_fill{j} = transform.get_producer_of_operand %op{op}[{operand}] : ({ANY}) -> {ANY}"
           for j, (op, operand) in enumerate(g.fills)]
    if g.producer is not None and not facts[g.producer].single_use:  # recomputed in each consumer
        operand = facts[g.anchor].operand_producers.index(g.producer)
        out.append(f"    %{k}_producer = transform.get_producer_of_operand %op{g.anchor}[{operand}] : ({ANY}) -> {ANY}")
        handles[g.producer] = f"%{k}_producer"
    member = _reduction_member(g, facts)
    if s.block_reduction:
        return out + _emit_block_reduction(ids[(g.anchor, False)], k, g, s, facts, handles.get(g.producer))
    if s.split_reduction:
        out += _emit_split(ids[(g.anchor, True)], k, handles[member], s, facts[member].info)
        handles[member] = f"%{k}_merge"  # the merge of the partials takes the reduction's place
    members = ([handles[g.producer]] if g.producer is not None else []) + [f"%{k}_fill{j}" for j in range(len(g.fills))]
    out.append(f"    // kernel of op {g.anchor} ({s.family})"
               + (f", fused producer op {g.producer}" if g.producer is not None else "")
               + (f", {len(g.fills)} fill(s)" if g.fills else ""))
    out += _emit_tiles(ids[(g.anchor, False)], k, handles[g.anchor], members, s, op)
    n_thread = sum(1 for t in s.thread_tile if t)
    thread_ops = {g.anchor: f"%{k}_t"} | ({g.producer: f"%{k}_m0t"} if g.producer is not None else {})
    # a tile that covers the whole loop would leave a one-trip loop that canonicalization folds away
    # under the handles of the steps after it: the loop then stays untiled
    tiled = bool(s.reduction_tile and member and n_thread) and s.reduction_tile < (
        s.split_reduction or reduction_extents(facts[member].info)[0])
    if tiled:
        member_op = facts[member].info
        first = member_op.iterator_types.index("reduction")
        # a split's merge has the op's loops with its (first) K loop as the partials, the others gone
        loops = len(member_op.loop_ranges) - (len(reduction_extents(member_op)) - 1 if s.split_reduction else 0)
        sizes = [s.reduction_tile if d == first else 0 for d in range(loops)]
        out.append(f"    %{k}_r, %{k}_rloop = transform.structured.tile_using_for {thread_ops[member]} tile_sizes "
                   f"{_ints(sizes)} : ({ANY}) -> ({ANY}, {ANY})")
        thread_ops[member] = f"%{k}_r"
    if s.vectorize and n_thread:
        fills = [f"%{k}_m{j}t" for j in range(len(members)) if j >= (g.producer is not None)]
        for handle in [*fills, *thread_ops.values()]:
            out.append(vectorize(handle))
        if s.split_reduction and tiled:
            # the merge's accumulator: read and written at the same place every iteration, it becomes a
            # vector carried by the loop (registers) instead of a store to global memory per step
            out.append(f"{HOIST} %{k}_rloop : {ANY}")
    return out


def emit_img2col_conversions(groups: list[Group], schedules: dict[int, OpSchedule],
                             facts: list[LinalgOpFacts]) -> list[str]:
    """Every img2col conv becomes its gather (%g<i>_im2col) and matmul-like op (%g<i>_mm) before any
    kernel is tiled; canonicalization then moves each conv's fill past the reshape of its init, so that
    the fill initialises the matmul's init directly and fuses into its kernel."""
    out = []
    for g in groups:
        if schedules[g.anchor].img2col:
            k = f"g{g.anchor}"
            out += [f"    // op {g.anchor} ({facts[g.anchor].info.name}) through img2col",
                    f"    %{k}_im2col, %{k}_reshaped = transform.structured.convert_conv2d_to_img2col %op{g.anchor} "
                    f": ({ANY}) -> ({ANY}, {ANY})",
                    f"    %{k}_mm = transform.get_producer_of_operand %{k}_reshaped[0] : ({ANY}) -> {ANY}"]
    if out:
        out.append(f"    transform.apply_patterns to %func {{ transform.apply_patterns.canonicalization }} : {ANY}")
    return out


def _emit_img2col_group(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts]) -> list[str]:
    """The img2col matmul tiled like a matmul (blocks, a register tile per thread, the reduction loop
    tiled), its fill fused; the gather is fused into each thread's reduction loop, so a thread gathers
    the reduction_tile x thread_tile slice of the img2col matrix it multiplies next (never in memory)."""
    op = img2col_op(facts[g.anchor].info)
    fill = [f"%{k}_fill0"] if g.fills else []
    out = [f"    %{k}_fill0 = transform.get_producer_of_operand %{k}_mm[2] : ({ANY}) -> {ANY}"] if g.fills else []
    out.append(f"    // kernel of op {g.anchor} (img2col matmul, loops {op.loop_ranges})")
    out += _emit_tiles(kernel, k, f"%{k}_mm", [f"%{k}_im2col"] + fill, s, op)
    if not any(s.thread_tile):
        return out
    mm = f"%{k}_t"
    if s.reduction_tile and s.reduction_tile < op.loop_ranges[3]:
        out += [f"    %{k}_r, %{k}_rloop = transform.structured.tile_using_for %{k}_t tile_sizes "
                f"{_ints([0, 0, 0, s.reduction_tile])} : ({ANY}) -> ({ANY}, {ANY})",
                f"    %{k}_gr, %{k}_rloop1 = transform.structured.fuse_into_containing_op %{k}_m0t into %{k}_rloop "
                f": ({ANY}, {ANY}) -> ({ANY}, {ANY})"]
        mm = f"%{k}_r"  # the gather (%{k}_gr) stays scalar loads: its indexing map does not vectorize
    if s.vectorize:
        out += [vectorize(h) for h in ([f"%{k}_m1t"] if fill else []) + [mm]]
        if mm == f"%{k}_r":
            out.append(f"{HOIST} %{k}_rloop1 : {ANY}")
    return out


def _emit_block_reduction(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts],
                          producer: str | None) -> list[str]:
    """One kernel per reduction: a block per output (fill and producer fused); its threads reduce
    contiguous chunks of the reduction loop into a block-local (shared) tensor of
    partials (tile_reduction_using_forall), and after the barrier that ends that forall one thread
    merges them into the output. No partials in global memory, no second launch."""
    op = facts[g.anchor].info
    r = op.iterator_types.index("reduction")
    position = op.iterator_types[:r].count("parallel")  # where the partials dim sits among the outputs
    n_parallel = op.iterator_types.count("parallel")
    members = ([producer] if g.producer is not None else []) + [f"%{k}_fill{j}" for j in range(len(g.fills))]
    out = [f"    // kernel of op {g.anchor} ({s.family}): {s.block_reduction} threads per output"
           + (f", fused producer op {g.producer}" if g.producer is not None else "")]
    # the block level as for any kernel (thread_tile is all 0: no thread forall there)
    out += _emit_tiles(kernel, k, f"%op{g.anchor}", members, s, op)
    out += _emit_partials(k, f"%{k}_b", [s.block_reduction if d == r else 0 for d in range(len(op.loop_ranges))], r)
    vectorized = [f"%{k}_pft"]
    if g.producer is not None:
        out.append(f"    %{k}_prt, %{k}_tf1 = transform.structured.fuse_into_containing_op %{k}_m0b into %{k}_tf0 "
                   f": ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        vectorized.append(f"%{k}_prt")
    split = f"%{k}_split"
    if s.reduction_tile:
        sizes = [s.reduction_tile if d == r else 0 for d in range(len(op.loop_ranges))]
        out.append(f"    %{k}_sr, %{k}_srloop = transform.structured.tile_using_for %{k}_split tile_sizes {_ints(sizes)} "
                   f": ({ANY}) -> ({ANY}, {ANY})")
        out.append(f"{HOIST} %{k}_srloop : {ANY}")
        split = f"%{k}_sr"
    vectorized.append(split)
    merge, handles = _emit_merge(k, f"%{k}_comb", s.block_reduction, n_parallel, position)
    out += merge
    vectorized += handles
    containing = f"%{k}_cf"
    for j in range(len(g.fills)):
        handle = f"%{k}_m{j + (g.producer is not None)}b"
        out.append(f"    %{k}_f{j}t, %{k}_cf{j} = transform.structured.fuse_into_containing_op {handle} into "
                   f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_cf{j}"
        vectorized.append(f"%{k}_f{j}t")
    return out + [vectorize(h) for h in vectorized]


ROW_OP = "farm.row_op"


def _emit_row_kernel(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts]) -> list[str]:
    """One kernel for a row pipeline: a block per row with every op fused into it (CSE then merges the
    copies that fusing a producer once per use makes); then, consumers first, the anchor over the
    block's threads and each reduction over them as a block reduction (partials in shared memory,
    merged by a warp then one thread, the result in shared memory), each fusing the elementwise ops it reads
    (recomputed there, never stored). The ops are found again after CSE by a `farm.row_op` mark."""
    fills = [f"%{k}_fill{j}" for j in range(len(g.fills))]
    fill_of = {op: f"%{k}_fill{j}" for j, (op, _) in enumerate(g.fills)}
    out = [f"    {fills[j]} = transform.get_producer_of_operand %op{op}[{operand}] : ({ANY}) -> {ANY}"
           for j, (op, operand) in enumerate(g.fills)]
    out.append(f"    // kernel of op {g.anchor}: one block per row of {s.row_kernel} threads, with ops "
               f"{', '.join(map(str, g.members))}")
    # results that only the kernel reads (a reduction's row of maxima or sums) become block-local
    # tensors, i.e. shared memory, also through a reshape of their tensor.empty
    out.append(f"    transform.apply_patterns to %func {{ transform.apply_patterns.tensor.fold_tensor_empty }} : {ANY}")
    marks = {m: f"%op{m}" for m in g.members} | {f"f{m}": fill_of[m] for m in fill_of}
    for m, handle in marks.items():
        out += [f"    %{k}_mark_{m} = transform.param.constant {_mark(m)} : i64 -> !transform.param<i64>",
                f"    transform.annotate {handle} \"{ROW_OP}\" = %{k}_mark_{m} : {ANY}, !transform.param<i64>"]
    out += [
        f"    %{k}_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
        f"    %{k}_b, %{k}_grid = transform.structured.tile_using_forall %op{g.anchor} tile_sizes [1, 0] "
        f"(mapping = [#gpu.block<x>]) : ({ANY}) -> ({ANY}, {ANY})",
    ]
    containing = f"%{k}_grid"
    for j, handle in enumerate([*(f"%op{m}" for m in reversed(g.members)), *fills]):
        out.append(f"    %{k}_fused{j}, %{k}_grid{j} = transform.structured.fuse_into_containing_op {handle} into "
                   f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_grid{j}"
    out += [f"    transform.annotate {containing} \"farm.kernel\" = %{k}_id : {ANY}, !transform.param<i64>",
            f"    transform.apply_patterns to {containing} {{ transform.apply_patterns.tensor.fold_tensor_empty }} : {ANY}",
            f"    transform.apply_cse to {containing} : {ANY}",
            f"    %{k}_done = transform.param.constant -1 : i64 -> !transform.param<i64>"]
    grid = containing

    def find(m) -> str:
        out.append(f"    %{k}_op{m}_{len(out)} = transform.structured.match attributes{{{ROW_OP} = {_mark(m)} : i64}} "
                   f"in {grid} : ({ANY}) -> {ANY}")
        return f"%{k}_op{m}_{len(out) - 1}"

    vectorized = []
    elementwise = [m for m in g.members if facts[m].info.iterator_types == ROW_LOOPS[0]]
    for d in [g.anchor, *reversed([m for m in g.members if m not in elementwise])]:
        if d == g.anchor:
            out.append(f"    %{k}_t{d}, %{k}_threads{d} = transform.structured.tile_using_forall %{k}_b num_threads "
                       f"[0, {s.row_kernel}] (mapping = [#gpu.thread<x>]) : ({ANY}) -> ({ANY}, {ANY})")
            vectorized.append(f"%{k}_t{d}")
        else:
            out += _emit_partials(f"{k}{d}", find(d), [0, s.row_kernel], 1)
            merge, handles = _emit_merge(f"{k}{d}", f"%{k}{d}_comb", s.row_kernel, 1, 1)
            out += merge
            vectorized += [f"%{k}{d}_pft", f"%{k}{d}_split", *handles]
            if d in fill_of:
                fill = find(f"f{d}")
                out.append(f"    %{k}_ft{d}, %{k}_ff{d} = transform.structured.fuse_into_containing_op {fill} into "
                           f"%{k}{d}_cf : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
                vectorized.append(f"%{k}_ft{d}")
        # the elementwise ops it reads, consumers first: a copy of each in its thread forall, marked
        # done so that the next search finds only the block's original
        containing = f"%{k}_threads{d}" if d == g.anchor else f"%{k}{d}_tf0"
        for j, m in enumerate(sorted(_feeding(d, facts, lambda p: p in elementwise), reverse=True)):
            out += [f"    %{k}_e{d}_{m}, %{k}_threads{d}_{j} = transform.structured.fuse_into_containing_op {find(m)} into "
                    f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})",
                    f"    transform.annotate %{k}_e{d}_{m} \"{ROW_OP}\" = %{k}_done : {ANY}, !transform.param<i64>"]
            containing = f"%{k}_threads{d}_{j}"
            vectorized.append(f"%{k}_e{d}_{m}")
    return out + [vectorize(h) for h in vectorized]


def _mark(m: int | str) -> int:
    """The farm.row_op mark of a row kernel's op m, or of the fill of op m ("f<m>")."""
    return int(m[1:]) + 1_000_000 if isinstance(m, str) else m


def _feeding(op: int, facts: list[LinalgOpFacts], through=lambda p: True) -> set[int]:
    """The ops whose results `op` reads, directly or through each other, taking only those `through` accepts."""
    found, todo = set(), [op]
    while todo:
        for p in facts[todo.pop()].operand_producers:
            if p is not None and p not in found and through(p):
                found.add(p)
                todo.append(p)
    return found


def _emit_partials(p: str, target: str, threads: list[int], reduction_dim: int) -> list[str]:
    """The first step of a block reduction of `target`: `threads` (per loop; the reduction loop's entry
    non-zero) each reduce a contiguous run of it into a block-local tensor of partials, each thread
    initialising its own partial (a fill left in the block would race with the forall). Handles:
    %{p}_split (the partial reduction), %{p}_comb (what combines the partials), %{p}_pft (the partials'
    fill) and %{p}_tf0 (the threads' forall)."""
    return [
        f"    %{p}_pfill, %{p}_split, %{p}_comb, %{p}_tf = transform.structured.tile_reduction_using_forall {target} "
        f"reduction_dims = [{reduction_dim}] by num_threads = {_ints(threads)} tile_sizes = {_ints([0] * len(threads))} "
        f"mapping = [#gpu.thread<x>] : ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})",
        f"    %{p}_pft, %{p}_tf0 = transform.structured.fuse_into_containing_op %{p}_pfill into %{p}_tf "
        f": ({ANY}, {ANY}) -> ({ANY}, {ANY})",
    ]


MERGE_THREADS = 32  # one warp merges a block reduction's partials, in two steps


def _emit_merge(k: str, comb: str, partials: int, n_parallel: int, position: int) -> tuple[list[str], list[str]]:
    """The merge of a block reduction's `partials` (the combining op `comb`, after the barrier that ends
    the partial forall): up to MERGE_THREADS threads each reduce a run of them into a second row of
    partials in shared memory, then one thread per output (the block has one) reduces those, after
    another barrier: two short serial chains instead of one of `partials`. Returns the steps and the
    handles to vectorize; the single-thread forall is %{k}_cf."""
    threads = _largest_divisor_at_most(partials, MERGE_THREADS)
    one = [1] * n_parallel
    one.insert(position, 0)
    out, vectorized = [], []
    if threads > 1 and partials // threads > 1:
        # the combining op's loops: the outputs', then the partials' (its reduction), whatever `position`
        spread = [0] * n_parallel + [threads]
        out += _emit_partials(f"{k}_m", comb, spread, n_parallel)
        vectorized += [f"%{k}_m_pft", f"%{k}_m_split"]
        comb = f"%{k}_m_comb"
    out.append(f"    %{k}_ct, %{k}_cf = transform.structured.tile_using_forall {comb} num_threads {_ints(one)} "
               f"(mapping = [{_mapping('thread', n_parallel)}]) : ({ANY}) -> ({ANY}, {ANY})")
    return out, [*vectorized, f"%{k}_ct"]


def _emit_mma_group(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts]) -> list[str]:
    plan = mma_plan(s, g, facts)
    fills = [(op, operand) for op, operand in g.fills if op == plan.matmul]
    out = [f"    %{k}_fill = transform.get_producer_of_operand %op{op}[{operand}] : ({ANY}) -> {ANY}"
           for op, operand in fills]
    return out + emit_mma_group(kernel, k, plan, f"%{k}_fill" if fills else None, s)


def _emit_tiles(kernel: int, k: str, anchor: str, members: list[str], s: OpSchedule, op: OpInfo) -> list[str]:
    """Tile `anchor` to a forall over blocks, then one over threads, fusing `members` (producer first,
    then fills) into both; the thread-level handles are %{k}_t and %{k}_m{j}t."""
    threads = threads_per_loop(s, op)
    n_block = sum(1 for b in s.block_tile if b)
    n_thread = sum(1 for t in s.thread_tile if t)
    out = [
        f"    %{k}_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
        f"    %{k}_b, %{k}_grid = transform.structured.tile_using_forall {anchor} tile_sizes {_ints(s.block_tile)} "
        f"(mapping = [{_mapping('block', n_block, bool(linear_grid(s, op)))}]) : ({ANY}) -> ({ANY}, {ANY})",
    ]
    containing = f"%{k}_grid"
    block_members = []
    for j, m in enumerate(members):
        out.append(f"    %{k}_m{j}b, %{k}_grid{j} = transform.structured.fuse_into_containing_op {m} into {containing} "
                   f": ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_grid{j}"
        block_members.append(f"%{k}_m{j}b")
    out.append(f"    transform.annotate {containing} \"farm.kernel\" = %{k}_id : {ANY}, !transform.param<i64>")
    if n_thread:
        # num_threads, not tile sizes: a partial block tile must still give a static thread forall
        out.append(f"    %{k}_t, %{k}_threads = transform.structured.tile_using_forall %{k}_b num_threads "
                   f"{_ints(threads)} (mapping = [{_mapping('thread', n_thread)}]) : ({ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_threads"
        for j, m in enumerate(block_members):
            out.append(f"    %{k}_m{j}t, %{k}_threads{j} = transform.structured.fuse_into_containing_op {m} into "
                       f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
            containing = f"%{k}_threads{j}"
    return out


def partial_kernel_schedule(op: OpInfo, split: int, schedule: OpSchedule) -> tuple[OpSchedule, OpInfo]:
    """The launch shape of a split's partial reduction. A register-tiled matmul's (split in chunks): the
    matmul's block and thread tiles, a block per chunk, K steps as v0 takes them. Others: the v0 shape
    of its loops, threads along the partials of each output (and the outputs' innermost dim, for
    coalescing)."""
    chunks = _splits_in_chunks(op, schedule)
    partial = partial_reduction_op(op, split, chunks)
    if not chunks:
        return default_op_schedule(partial, "reduction"), partial
    r = op.iterator_types.index("reduction")
    chunk = partial.loop_ranges[r + 1]
    # the group's tiles are its anchor's loops: the matmul's outputs, then (zeros) its K loops
    block, thread = ((tile[:r] + [middle, 0] + tile[r + 1:] + [0] * len(partial.loop_ranges))[:len(partial.loop_ranges)]
                     for tile, middle in ((schedule.block_tile, 1), (schedule.thread_tile, 0)))
    k_step = 0 if split_over_blocks(op) else next((t for t in V0_MATMUL_K_TILES if t < chunk and chunk % t == 0), 0)
    return OpSchedule(op.index, "matmul", block, thread, reduction_tile=k_step, vectorize=True), partial


def _emit_split_over_blocks(kernel: int, k: str, reduction: str, split: int, schedule: OpSchedule,
                            partial: OpInfo, op: OpInfo) -> list[str]:
    """split_over_blocks: the forall of `split` chunks of the first K loop is the partial kernel's grid;
    its threads tile the outputs as `schedule` does on `partial` (partial_kernel_schedule's), each reducing
    its chunk in one vector. Then, as _emit_split's, %{k}_merge reduces the partials (the split dim last)."""
    r = op.iterator_types.index("reduction")
    k_loops = len(op.loop_ranges) - r
    threads = threads_per_loop(schedule, partial)[:r]
    mapping = f"(mapping = [{_mapping('thread', sum(1 for n in threads if n))}])"
    # the fill of each block's partials gets a thread forall of its own: fusion cannot reach through the
    # rank-reducing slice between it and the partial's forall (each thread fills the element it reduces
    # into, so no barrier is needed between the two)
    return [
        f"    // partial-reduction kernel: a block per chunk of the first K loop ({split} chunks)",
        f"    %{k}_pfill, %{k}_partial, %{k}_merge, %{k}p_grid = transform.structured.tile_reduction_using_forall "
        f"{reduction} reduction_dims = [{r}] by num_threads = {_ints([0] * r + [split] + [0] * (k_loops - 1))} "
        f"mapping = [#gpu.block<x>] : ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})",
        f"    %{k}p_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
        f"    %{k}p_m0b, %{k}p_grid0 = transform.structured.fuse_into_containing_op %{k}_pfill into %{k}p_grid "
        f": ({ANY}, {ANY}) -> ({ANY}, {ANY})",
        f"    transform.annotate %{k}p_grid0 \"farm.kernel\" = %{k}p_id : {ANY}, !transform.param<i64>",
        f"    %{k}p_m0t, %{k}p_fill_threads = transform.structured.tile_using_forall %{k}p_m0b num_threads "
        f"{_ints(threads + [0])} {mapping} : ({ANY}) -> ({ANY}, {ANY})",
        f"    %{k}p_t, %{k}p_threads = transform.structured.tile_using_forall %{k}_partial num_threads "
        f"{_ints(threads + [0] * k_loops)} {mapping} : ({ANY}) -> ({ANY}, {ANY})",
        vectorize(f"%{k}p_t"),
    ]


def _emit_split(kernel: int, k: str, reduction: str, group: OpSchedule, op: OpInfo) -> list[str]:
    """Split `reduction` into a partial reduction, tiled here as its own kernel, and %{k}_merge, which
    reduces the partials into the original result."""
    r, split = op.iterator_types.index("reduction"), group.split_reduction
    # the partials dim goes where the reduction loop was among the output dims, so the merge op has the
    # loops of the op it replaces (with extent `split` for the reduction) and the group's tiles fit it
    position = op.iterator_types[:r].count("parallel")
    schedule, partial = partial_kernel_schedule(op, split, group)
    if split_over_blocks(op):
        return _emit_split_over_blocks(kernel, k, reduction, split, schedule, partial, op)
    chunks = partial.family == "matmul"  # partial_kernel_schedule split it in chunks
    out = [
        f"    %{k}_partials, %{k}_pfill, %{k}_partial, %{k}_merge = transform.structured.split_reduction {reduction} "
        f"{{ split_factor = {split}, insert_split_dimension = {position}{'' if chunks else ', inner_parallel'} }} "
        f": ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})",
        f"    // partial-reduction kernel of op {op.index}: {split} partials per output"
        + (", each of a chunk of K, tiled as the matmul" if chunks else ""),
    ]
    out += _emit_tiles(kernel, f"{k}p", f"%{k}_partial", [f"%{k}_pfill"], schedule, partial)
    if chunks:
        if not schedule.reduction_tile:  # a chunk of one K step
            return out + [vectorize(f"%{k}p_{h}") for h in ("m0t", "t")]
        chunk_loop = r + 1
        sizes = [schedule.reduction_tile if d == chunk_loop else 0 for d in range(len(partial.loop_ranges))]
        return out + [
            f"    %{k}p_r, %{k}p_rloop = transform.structured.tile_using_for %{k}p_t tile_sizes {_ints(sizes)} "
            f": ({ANY}) -> ({ANY}, {ANY})",
            vectorize(f"%{k}p_m0t"),
            vectorize(f"%{k}p_r"),
            f"{HOIST} %{k}p_rloop : {ANY}",  # the thread's partials stay in registers across the chunk
        ]
    # a thread's strided elements are read PARTIAL_LOADS at a time into a vector, so that many loads
    # are in flight instead of one load, add and store of the accumulator per element
    loads = _largest_divisor_at_most(partial.loop_ranges[r], PARTIAL_LOADS)
    if loads == partial.loop_ranges[r]:  # one vector covers a thread's elements: no loop to tile
        return out + [vectorize(f"%{k}p_m0t"),
                      vectorize(f"%{k}p_t")]
    sizes = [loads if d == r else 0 for d in range(len(partial.loop_ranges))]
    return out + [
        f"    %{k}p_r, %{k}p_rloop = transform.structured.tile_using_for %{k}p_t tile_sizes {_ints(sizes)} "
        f": ({ANY}) -> ({ANY}, {ANY})",
        vectorize(f"%{k}p_m0t"),
        vectorize(f"%{k}p_r"),
        # each thread's partial stays in a register across the loop (one store at the end)
        f"{HOIST} %{k}p_rloop : {ANY}",
    ]
