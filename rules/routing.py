"""Hypothesis families -> one concrete ScheduleEdit each (or None where the family does not apply).

Every edit keeps the schedule valid for the compile stage: tiles keep dividing the loop extents (or, in a
kernel that already takes partial last blocks with one output per thread, stay scalar), thread counts stay
within guide.json's bounds (`edits`).
"""
from __future__ import annotations

import math
from typing import Callable

from rules.guide import load
from workers.records import (V0_REDUCTION_TILE, WARP_SIZE, WARPGROUP_THREADS,
                             OpInfo, OpSchedule, ScheduleEdit, default_split_factor, img2col_applies, img2col_of_nchw,
                             leaves_partial_tiles, reduction_extents, tile_error, warp_can_merge, wgmma_k_step)
from workers.target import Target


def _bound(name: str) -> int:
    """A bound the edits keep, from guide.json's `edits` (versioned with the rules)."""
    return load().edits[name]


def _threads(block: list[int], thread: list[int], op: OpInfo) -> int:
    return math.prod(math.ceil((b or r) / t) for b, t, r in zip(block, thread, op.loop_ranges) if t)


def _valid(block: list[int], thread: list[int], op: OpInfo, s: OpSchedule) -> bool:
    """Tiles the compile stage takes (tile_error) within guide.json's thread bounds. Partial last blocks only
    where the kernel `s` already has them (the compile stage took them for its group: no fused producer
    needing scratch) and the threads keep one output each (validation.scalar_partial_tiles)."""
    partial = leaves_partial_tiles(s, op) and set(thread) <= {0, 1} and not s.vectorize
    return tile_error(block, thread, op, partial=partial) is None and \
        _bound("min_threads") <= _threads(block, thread, op) <= _bound("max_threads")


def _parallel_dims(op: OpInfo, s: OpSchedule) -> list[int]:
    """Thread-mapped dims first, innermost first: where a shape change matters most."""
    dims = [d for d, it in enumerate(op.iterator_types) if it == "parallel"]
    return sorted(dims, key=lambda d: (not s.thread_tile[d], -d))


def halve_block_tile(s: OpSchedule, op: OpInfo) -> ScheduleEdit | None:
    for d in _parallel_dims(op, s):
        extent = s.block_tile[d] or op.loop_ranges[d]
        if extent % 2 == 0 and extent // 2 >= max(s.thread_tile[d], 1):
            block = list(s.block_tile)
            block[d] = extent // 2
            if _valid(block, s.thread_tile, op, s):
                return ScheduleEdit(s.op_index, "block_tile", block)
    return None


def _scale_thread_tile(s: OpSchedule, op: OpInfo, factor: float) -> ScheduleEdit | None:
    for d in _parallel_dims(op, s):
        if not s.thread_tile[d]:
            continue
        new = s.thread_tile[d] * factor
        if new >= 1 and new == int(new):
            thread = list(s.thread_tile)
            thread[d] = int(new)
            if _valid(s.block_tile, thread, op, s):
                return ScheduleEdit(s.op_index, "thread_tile", thread)
    return None


def set_reduction_tile(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    if not has_reduction or s.reduction_tile:
        return None
    extents = reduction_extents(op)
    if s.block_reduction and (len(extents) != 1 or (extents[0] // s.block_reduction) % V0_REDUCTION_TILE):
        return None  # the tile must divide the elements each thread of a block reduction reduces
    return ScheduleEdit(s.op_index, "reduction_tile", V0_REDUCTION_TILE)


def more_reduction_threads(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    """More threads per output of a reduction: twice the threads of a block reduction (while each keeps
    at least 4 elements), else split its loop (v0's factor), or split it twice as finely once it is split."""
    if s.row_kernel:  # its reductions run over the row's columns, the anchor's last loop
        threads, columns = s.row_kernel * 2, op.loop_ranges[-1]
        fits = threads <= _bound("max_threads") and columns % threads == 0 and columns // threads >= 4 \
            and (not s.reduction_tile or (columns // threads) % s.reduction_tile == 0
                 and columns // threads > s.reduction_tile)
        return ScheduleEdit(s.op_index, "row_kernel", threads) if fits else None
    extents = reduction_extents(op)
    if len(extents) != 1:
        return None  # several reduction loops, or the reduction is a fused producer whose extent op lacks
    if s.block_reduction:
        threads = s.block_reduction * 2
        fits = threads <= _bound("max_threads") and extents[0] % threads == 0 and extents[0] // threads >= 4 \
            and (not s.reduction_tile or (extents[0] // threads) % s.reduction_tile == 0)
        return ScheduleEdit(s.op_index, "block_reduction", threads) if fits else None
    factor = s.split_reduction * 2 if s.split_reduction else default_split_factor(extents[0])
    if factor < 2 or extents[0] % factor:
        return None
    return ScheduleEdit(s.op_index, "split_reduction", factor)


def enable_vectorize(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    if s.vectorize or s.tensor_core != "none":
        return None  # a tensor-core kernel is vectorized whatever the flag says (the same PTX)
    if op.family == "conv" and not s.img2col:
        return _conv_register_tile(s, op)
    if has_reduction and not s.reduction_tile:
        return None  # a reduction is vectorized only once its loop is tiled (reduction_tiling first)
    if not has_reduction and s.thread_tile and all(t == 1 for t in s.thread_tile):
        return None  # one element a thread: the vectorized kernel is the same PTX (seen as "same kernels" in loops)
    return ScheduleEdit(s.op_index, "vectorize", True)


def _conv_register_tile(s: OpSchedule, op: OpInfo) -> ScheduleEdit | None:
    """A direct conv's thread tile as output channels x neighbouring outputs, vectorized
    (templates.direct_conv_tiles, as v0 takes it where the grid fills the GPU): the edit carries the tiles."""
    from workers.compile.schedule.templates import direct_conv_tiles  # the compile stage's conv template
    tiles = direct_conv_tiles(op)
    if tiles is None:
        return None
    taps = [0] * (len(op.loop_ranges) - len(tiles[0]))
    return ScheduleEdit(s.op_index, "vectorize", {"vectorize": True, "block_tile": tiles[0] + taps,
                                                  "thread_tile": tiles[1] + taps, "reduction_tile": 1})


def enable_fusion(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    return None if s.fuse_producers else ScheduleEdit(s.op_index, "fuse_producers", True)


def enable_promote(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    """A matmul kernel's A and B tiles staged in shared memory per K step: an mma.sync kernel's, or a SIMT
    one's that steps over K with a register tile per thread (schedule/staged_matmul.py; not split; through
    img2col, an NCHW conv's in more than one K step)."""
    if s.promote_shared or s.tensor_core == "wgmma":
        return None
    simt = s.tensor_core == "none" and s.family == "matmul" and not s.split_reduction \
        and s.reduction_tile and any(s.thread_tile)
    if s.img2col:  # `op` is its img2col matmul (advisor._route)
        simt = simt and img2col_of_nchw(op) and s.reduction_tile < op.loop_ranges[3]
    if s.tensor_core != "mma_sync" and not simt:
        return None
    return ScheduleEdit(s.op_index, "promote_shared", True)


def enable_mma_sync(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    # f16 and bf16 operands only: f32 matmuls reach tensor cores (as TF32) through v0 of a job that allows
    # TF32 (submit --tf32), as this route does not see the job's precision
    if s.tensor_core != "none" or op.dtype not in ("f16", "bf16"):
        return None
    return ScheduleEdit(s.op_index, "tensor_core", "mma_sync")


def enable_wgmma(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    """An mma.sync kernel on wgmma, as the v0 templates have it: 128x256 blocks of two warpgroups of
    64x256, 3 K steps (of one 128-byte row: 64 16-bit elements, 32 TF32 ones) in flight, where 256 divides
    the columns, else, for 16 bits, one warpgroup per 128x128 block with 4 (at 4096^3 on the H200: 1.44x,
    1.24x and, TF32, 1.60x over mma.sync's best, perf_targets_h200.md runs 31, 32, 35). The compile stage
    refuses it where the shape or the chip (sm_90a) does not take it."""
    if s.tensor_core != "mma_sync" or op.dtype not in ("f16", "bf16", "f32"):
        return None
    tail = [0] * (len(s.block_tile) - 2)
    wide = op.loop_ranges[1] % WGMMA_WIDE[0][1] == 0
    if not wide and op.dtype == "f32":
        return None  # TF32's warpgroups are m64: no 128x128 one
    block, warpgroup, stages = WGMMA_WIDE if wide else WGMMA_SQUARE
    return ScheduleEdit(s.op_index, "tensor_core", {
        "tensor_core": "wgmma", "block_tile": [*block, *tail], "thread_tile": [*warpgroup, *tail],
        "reduction_tile": wgmma_k_step(op.dtype), "promote_shared": True,
        "pipeline_depth": stages, "copies_ahead": False})


# (block tile, warpgroup tile, K steps in flight) of the wgmma v0 templates
WGMMA_WIDE, WGMMA_SQUARE = ((128, 256), (64, 256), 3), ((128, 128), (128, 128), 4)


def deepen_pipeline(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    """A kernel's staged tiles copied one more K step ahead, by cp.async or TMA (two buffers first): a
    tensor-core kernel's, or a staged SIMT matmul's (not an img2col conv's, whose gather is no copy)."""
    if not s.promote_shared or s.img2col or s.pipeline_depth >= _bound("max_pipeline_depth"):
        return None
    return ScheduleEdit(s.op_index, "pipeline_depth", max(s.pipeline_depth + 1, 2))


def issue_copies_ahead(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    """A pipelined mma.sync or staged SIMT kernel's copies issued before the step's mma or FMAs, into one more
    buffer: one barrier per K step instead of two (TF32 1.07x on the H200, f16 0.93x: schedule_sweep_h200.md
    run 26)."""
    if s.tensor_core == "wgmma" or s.img2col or s.pipeline_depth < 2 or s.copies_ahead:
        return None
    return ScheduleEdit(s.op_index, "copies_ahead", True)




def _threads_per_tile(s: OpSchedule) -> int:
    """The threads that share a thread tile: an mma.sync kernel's are its warps', a wgmma kernel's its
    warpgroups'."""
    return {"mma_sync": WARP_SIZE, "wgmma": WARPGROUP_THREADS}.get(s.tensor_core, 1)


def _block_threads(s: OpSchedule, op: OpInfo) -> int:
    if s.row_kernel or s.block_reduction:
        return s.row_kernel or s.block_reduction
    return _threads(s.block_tile, s.thread_tile, op) * _threads_per_tile(s)


def _output_words_per_thread(s: OpSchedule, op: OpInfo) -> int:
    """The outputs a thread holds in registers: its thread tile, or its share of its warp's (warpgroup's)."""
    tile = [t for t, it in zip(s.thread_tile, op.iterator_types) if t and it == "parallel"]
    if not tile:
        return 1  # a reduction's threads each keep a partial
    return math.prod(tile) // _threads_per_tile(s)


def cap_registers(s: OpSchedule, op: OpInfo, gpu: Target) -> ScheduleEdit | None:
    """ptxas fits one more block of the kernel on an SM (.minnctapersm), capping its registers per thread:
    two blocks first (one always fits), while the cap leaves room for the thread's outputs."""
    blocks = max(s.min_blocks_per_sm + 1, 2)
    cap = min(gpu.max_registers_per_thread, gpu.registers_per_sm // (blocks * _block_threads(s, op)) // 8 * 8)
    if blocks > gpu.max_blocks_per_sm or cap < _output_words_per_thread(s, op) + _bound("registers_besides_outputs"):
        return None
    return ScheduleEdit(s.op_index, "min_blocks_per_sm", blocks)


def enable_img2col(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    """A 2-D conv as a gather fused into a register-tiled matmul (structured.convert_conv2d_to_img2col).
    The tiles then address the matmul's loops, so the edit carries the matmul template's tiles too."""
    if s.img2col or not img2col_applies(op) or s.tensor_core != "none" or s.split_reduction \
            or s.block_reduction:
        return None
    from workers.compile.schedule.templates import img2col_schedule  # the compile stage's matmul template
    t = img2col_schedule(op)
    return ScheduleEdit(s.op_index, "img2col", {"img2col": True, "family": t.family, "block_tile": t.block_tile,
                                                "thread_tile": t.thread_tile, "reduction_tile": t.reduction_tile,
                                                "vectorize": t.vectorize})


def enable_warp_merge(s: OpSchedule, op: OpInfo, has_reduction: bool) -> ScheduleEdit | None:
    """A block reduction's (or row kernel's) merge in warp shuffles: a barrier less per reduction."""
    if s.warp_merge or not warp_can_merge(s):
        return None
    return ScheduleEdit(s.op_index, "warp_merge", True)


ROW_KERNEL_GENERATORS = ("more_reduction_threads", "enable_warp_merge")


def edit_for(generator: str, s: OpSchedule, op: OpInfo, has_reduction: bool, gpu: Target) -> ScheduleEdit | None:
    """The edit of a hypothesis family's generator for a kernel on `gpu`. A row kernel's shape is fixed (a
    block per row) but for its threads per row and how its merges end: only ROW_KERNEL_GENERATORS apply to it."""
    if s.row_kernel and generator not in ROW_KERNEL_GENERATORS:
        return None
    return GENERATORS[generator](s, op, has_reduction, gpu)


# generator name -> (schedule, op, the kernel has a reduction, the GPU) -> the edit, or None
GENERATORS: dict[str, Callable[[OpSchedule, OpInfo, bool, Target], ScheduleEdit | None]] = {
    "halve_block_tile": lambda s, op, r, gpu: halve_block_tile(s, op),
    "halve_thread_tile": lambda s, op, r, gpu: _scale_thread_tile(s, op, 0.5),
    "double_thread_tile": lambda s, op, r, gpu: _scale_thread_tile(s, op, 2),
    "set_reduction_tile": lambda s, op, r, gpu: set_reduction_tile(s, op, r),
    "more_reduction_threads": lambda s, op, r, gpu: more_reduction_threads(s, op, r),
    "enable_vectorize": lambda s, op, r, gpu: enable_vectorize(s, op, r),
    "enable_fusion": lambda s, op, r, gpu: enable_fusion(s, op, r),
    "enable_promote": lambda s, op, r, gpu: enable_promote(s, op, r),
    "enable_mma_sync": lambda s, op, r, gpu: enable_mma_sync(s, op, r),
    "enable_wgmma": lambda s, op, r, gpu: enable_wgmma(s, op, r) if gpu.wgmma else None,
    "deepen_pipeline": lambda s, op, r, gpu: deepen_pipeline(s, op, r),
    "issue_copies_ahead": lambda s, op, r, gpu: issue_copies_ahead(s, op, r),
    "cap_registers": lambda s, op, r, gpu: cap_registers(s, op, gpu),
    "enable_img2col": lambda s, op, r, gpu: enable_img2col(s, op, r),
    "enable_warp_merge": lambda s, op, r, gpu: enable_warp_merge(s, op, r),
}
