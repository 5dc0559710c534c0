"""One kernel's schedule checked before any transform is emitted: a ScheduleError says what no valid kernel
can come from; returns the thread block shape."""
from __future__ import annotations

from workers.compile.analysis import LinalgOpFacts
from workers.compile.schedule.grouping import Group, reduction_member
from workers.compile.schedule.staged_matmul import StagedMatmul, plan_staged_matmul
from workers.compile.schedule.templates import (img2col_op, maskable_matmul, reductions_trail, row_block_tile,
                                                split_over_blocks)
from workers.compile.schedule.tiles import (MAX_THREADS, ScheduleError, vector_elements, grid_blocks, block_dims,
                                            MAX_GRID_X)
from workers.compile.tensor_core import MmaPlan, plan_mma
from workers.records import (WARP_SIZE, OpInfo, OpSchedule, interleave_lanes, img2col_aligned, leaves_partial_tiles,
                             reduction_extents, tile_error, warp_can_merge)
from workers.target import Target


def mma_plan(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts], target: Target) -> MmaPlan:
    """The tensor-core plan of a kernel whose schedule asks for tensor cores."""
    op = facts[g.anchor].info
    if schedule.tensor_core not in ("mma_sync", "wgmma"):
        raise ScheduleError(f"op {op.index}: tensor_core must be 'none', 'mma_sync' or 'wgmma', "
                            f"not {schedule.tensor_core!r}")
    if schedule.split_reduction:
        raise ScheduleError(f"op {op.index}: a tensor-core kernel does not split its reduction")
    try:
        return plan_mma(schedule, facts[g.anchor], facts[g.producer] if g.producer is not None else None, facts,
                        target)
    except ValueError as e:
        raise ScheduleError(f"op {op.index}: tensor_core {schedule.tensor_core}: {e}") from None


def staged_plan(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts], target: Target) -> StagedMatmul:
    """The staging plan of a SIMT kernel whose schedule asks for promote_shared."""
    try:
        return plan_staged_matmul(schedule, g, facts, target)
    except ValueError as e:
        raise ScheduleError(f"op {g.anchor}: promote_shared: {e}") from None


def masked_tiles(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> bool:
    """Whether the kernel may take tiles that its loops' extents fill only in part (the last block of a loop,
    the last K step): a SIMT matmul alone in its kernel (its fill fused, no producer, split or tensor cores)
    whose threads vectorize their tiles. Emission then vectorizes with the tiles' full sizes (vector_sizes),
    masked where a tile is partial (masked_vector_sizes); a staged one pads its partial block tiles
    (staged_matmul.py)."""
    op = facts[g.anchor].info
    staged_simt = schedule.promote_shared and schedule.tensor_core == "none"  # pads its partial tiles
    return maskable_matmul(op) and g.producer is None and schedule.vectorize and any(schedule.thread_tile) \
        and (_plain(schedule) or staged_simt)


def _plain(schedule: OpSchedule) -> bool:
    """No tensor cores, img2col, split, block reduction, row kernel or staging: the kernel's tiles alone."""
    return schedule.tensor_core == "none" and not (schedule.img2col or schedule.split_reduction or
                                                   schedule.block_reduction or schedule.row_kernel or
                                                   schedule.promote_shared)


def scalar_partial_tiles(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> bool:
    """Whether the kernel may take a last block that a loop's extent fills only in part with scalar code: one
    output per thread (each thread's tile then holds one element or none), no fused producer, at most one
    fill and nothing staged, split or vectorized, so that no thread needs scratch of the tile's (dynamic)
    size. A fused fill writes the output tile in place; an argmin's pair of accumulators (a reduction that does
    not fold into one) would be scratch."""
    anchor = facts[g.anchor]
    return g.producer is None and len(g.fills) <= 1 and not schedule.vectorize and _plain(schedule) \
        and (anchor.block_reducible or "reduction" not in anchor.info.iterator_types) \
        and set(schedule.thread_tile) <= {0, 1} and any(schedule.thread_tile)


def masked_vector_sizes(schedule: OpSchedule, op: OpInfo) -> list[int] | None:
    """The vector sizes of a masked_tiles kernel's thread-level op (per loop: its thread tile, else its block
    tile, else its extent; the K loop's step), where some tile is partial; None where every tile divides its
    loop (the kernel vectorizes as any other)."""
    k = op.iterator_types.index("reduction")
    sizes = [t or b or r for t, b, r in zip(schedule.thread_tile, schedule.block_tile, op.loop_ranges)]
    sizes[k] = schedule.reduction_tile or op.loop_ranges[k]
    return sizes if leaves_partial_tiles(schedule, op, op.loop_ranges[k]) else None


def validate(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts], target: Target) -> list[int]:
    """Check one kernel's tiles for `target`; returns the thread block shape [x, y, z]."""
    op = facts[g.anchor].info
    if not 0 <= schedule.min_blocks_per_sm <= target.max_blocks_per_sm:
        raise ScheduleError(f"op {op.index}: min_blocks_per_sm must be 0..{target.max_blocks_per_sm} on "
                            f"{target.chip}, not {schedule.min_blocks_per_sm}")
    if schedule.warp_merge and not (schedule.block_reduction or schedule.row_kernel):
        raise ScheduleError(f"op {op.index}: warp_merge merges the partials of a block reduction: it needs "
                            "block_reduction or row_kernel")
    # on a matmul's kernel it interleaves a staged SIMT matmul's thread columns (StagedMatmul.column_pieces) and
    # changes nothing elsewhere, so that an edit unstaging the kernel stands alone
    matmul = op.family == "matmul" or g.producer is not None and facts[g.producer].info.family == "matmul"
    if schedule.interleave_columns and not (schedule.row_kernel or schedule.block_reduction or matmul):
        raise ScheduleError(f"op {op.index}: interleave_columns interleaves the columns that the threads of a row "
                            "kernel, a block reduction or a staged SIMT matmul share: it needs row_kernel, "
                            "block_reduction, or a matmul")
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
    if schedule.promote_shared and schedule.tensor_core == "none" and not schedule.row_kernel:
        staged_plan(schedule, g, facts, target)
    if schedule.row_kernel:
        return _check_row_kernel(schedule, g, facts)
    if schedule.tensor_core != "none":
        return mma_plan(schedule, g, facts, target).block_dims
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
    masked = masked_tiles(schedule, g, facts)
    if error := tile_error(schedule.block_tile, schedule.thread_tile, op,
                           partial=masked or scalar_partial_tiles(schedule, g, facts)):
        raise ScheduleError(f"op {op.index}: {error}")
    member = reduction_member(g, facts)
    if member is not None and schedule.vectorize and not schedule.img2col and facts[member].info.family == "conv":
        _check_conv_register_tile(schedule, facts[member].info)
    # (an img2col kernel's K is its gather's, checked above; a split's reduction_tile is its merge's)
    if member is not None and schedule.vectorize and schedule.reduction_tile and not masked \
            and not (schedule.img2col or schedule.split_reduction) \
            and reduction_extents(facts[member].info)[0] % schedule.reduction_tile:
        raise ScheduleError(f"op {op.index}: reduction_tile {schedule.reduction_tile} must divide the reduction "
                            f"loop ({reduction_extents(facts[member].info)[0]}) of a vectorized kernel that "
                            "takes no masked tiles")
    return block_dims(schedule, op)


def _check_conv_register_tile(schedule: OpSchedule, conv: OpInfo) -> None:
    """A vectorized direct conv (emission._emit_conv_register_tile): a thread's outputs along a spatial loop are
    one vector read of the input only where the conv's stride along it is 1 (the vectorizer refuses a strided
    read); its spatial loops are the last parallel ones, as many as it has strides."""
    parallel = [d for d, it in enumerate(conv.iterator_types) if it == "parallel"]
    for d, stride in zip(parallel[len(parallel) - len(conv.strides):], conv.strides):
        if stride != 1 and d < len(schedule.thread_tile) and schedule.thread_tile[d] > 1:
            raise ScheduleError(f"op {conv.index}: a vectorized conv takes one output per thread along loop {d}, "
                                f"whose stride is {stride} (its neighbouring outputs' inputs are no vector)")


def _check_img2col_alignment(schedule: OpSchedule, op: OpInfo) -> None:
    """op: the img2col matmul of a conv (img2col_op), its tile_alignments the gather's; the parallel
    loops' tiles are checked with every kernel's (tile_error)."""
    for d, extents in enumerate(op.tile_alignments):
        if op.iterator_types[d] == "reduction" and schedule.reduction_tile \
                and not img2col_aligned(schedule.reduction_tile, extents):
            raise ScheduleError(f"op {op.index}: img2col: the reduction_tile must divide or be a multiple of "
                                f"each of {extents}: the gather takes that loop's index apart by them, and "
                                "an unaligned tile reads the wrong input elements")


def _check_split(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> None:
    op, split = facts[g.anchor].info, schedule.split_reduction
    member = reduction_member(g, facts)
    if member is None:
        raise ScheduleError(f"op {op.index}: split_reduction needs a reduction in the kernel, and it has none")
    info = facts[member].info
    extents = reduction_extents(info)
    if not facts[member].splittable:
        raise ScheduleError(f"op {op.index}: split_reduction needs op {member} to fold into one accumulator and "
                            "read no loop index (structured.split_reduction does not renumber linalg.index)")
    if split_over_blocks(info):
        if grid_blocks(schedule, op) != 1 or not reductions_trail(info):
            raise ScheduleError(f"op {op.index}: a matmul whose K spans {len(extents)} loops splits only with all "
                                f"its outputs in one block (block_tile {schedule.block_tile} makes "
                                f"{grid_blocks(schedule, op)}) and its K loops last")
    elif info.family not in ("reduction", "matmul") or len(extents) != 1:
        raise ScheduleError(f"op {op.index}: split_reduction splits one reduction loop; op {member} "
                            f"({info.name}) has {len(extents)}")
    if split < 2 or extents[0] % split:
        raise ScheduleError(f"op {op.index}: split_reduction {split} must be at least 2 and divide the "
                            f"reduction loop extent {extents[0]} of op {member} (0 = no split)")
    if schedule.reduction_tile and split % schedule.reduction_tile and not schedule.block_reduction:
        raise ScheduleError(f"op {op.index}: reduction_tile {schedule.reduction_tile} must divide "
                            f"split_reduction {split}: the kernel's reduction loop merges {split} partials")


def _check_block_reduction(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """One output per block, its reduction loop spread over `block_reduction` threads."""
    op, threads = facts[g.anchor].info, schedule.block_reduction
    if reduction_member(g, facts) != g.anchor or len(reduction_extents(op)) != 1:
        raise ScheduleError(f"op {op.index}: block_reduction needs a kernel whose anchor op has one reduction loop")
    if not facts[g.anchor].block_reducible:
        raise ScheduleError(f"op {op.index}: block_reduction needs an op that folds into one accumulator (an "
                            "argmax's value-and-index pair does not)")
    if schedule.split_reduction and (op.family != "reduction" or split_over_blocks(op)):
        raise ScheduleError(f"op {op.index}: block_reduction merges a split's partials only for a reduction op "
                            f"(not a {op.family})")
    # with a split the block reduces the merge's loop: the partials
    extent = schedule.split_reduction or reduction_extents(op)[0]
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
    if schedule.block_tile != row_block_tile(op) or any(schedule.thread_tile):
        raise ScheduleError(f"op {op.index}: a row kernel has block_tile {row_block_tile(op)} (a block per row) and "
                            f"thread_tile all 0, not {schedule.block_tile}, {schedule.thread_tile}")
    columns = op.loop_ranges[-1]
    if not 2 <= threads <= MAX_THREADS or columns % threads:
        raise ScheduleError(f"op {op.index}: row_kernel {threads} must be 2..{MAX_THREADS} and divide the "
                            f"{columns} columns")
    run = columns // threads
    if schedule.reduction_tile and (run % schedule.reduction_tile or schedule.reduction_tile == run):
        raise ScheduleError(f"op {op.index}: a row kernel's reduction_tile (a thread's step through its run of "
                            f"{run} columns) must divide the run and be shorter, not {schedule.reduction_tile}")
    _check_warp_merge(schedule, op)
    return [threads, 1, 1]


def interleaved_columns(schedule: OpSchedule, op: OpInfo) -> bool:
    """Whether the kernel of `schedule` (anchor `op`) interleaves its threads' columns: interleave_columns
    is on, and each thread of the row kernel or block reduction (over the innermost loop) reads one run of
    columns longer than one access (interleave_lanes: a 128-bit vector, or fewer elements where the run is
    not whole vectors), whole or in steps of reduction_tile that are whole accesses. Elsewhere the knob
    changes nothing (a thread's one access is interleaved already)."""
    if not schedule.interleave_columns or schedule.split_reduction:
        return False
    if schedule.row_kernel:
        columns = op.loop_ranges[-1] // schedule.row_kernel
    elif schedule.block_reduction and op.iterator_types[-1] == "reduction":
        columns = reduction_extents(op)[0] // schedule.block_reduction
    else:
        return False
    lanes = interleave_lanes(columns, vector_elements(op.dtype))
    return columns > lanes and schedule.reduction_tile % lanes == 0
