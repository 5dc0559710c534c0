"""v0's per-op templates: the launch shape one op gets, whatever kernel it anchors, and the always-legal
conservative path beneath them (the constants say what was measured where)."""
from __future__ import annotations

import dataclasses
import math

from workers.compile.analysis import LinalgOpFacts
from workers.compile.schedule.tiles import (MAX_BLOCK_Z, MAX_THREADS, TARGET_THREADS, ScheduleError,
                                            largest_divisor_at_most, vector_elements, grid_blocks, threads_per_loop)
from workers.records import (V0_REDUCTION_TILE, WARP_SIZE, OpInfo, OpSchedule, default_split_factor,
                             img2col_aligned, img2col_applies, img2col_op as records_img2col_op, reduction_extents)


# A reduction is split over many threads per output when one thread per output leaves the GPU nearly
# idle (an H200 keeps 132 x 2048 threads resident) and each thread would loop over a long row.
SPLIT_MAX_OUTPUTS = 1 << 16
SPLIT_MIN_EXTENT = 256
PARTIAL_LOADS = 8  # elements a thread of a partial-reduction kernel loads at once
MERGE_LOADS = 8  # partials a thread of a merge kernel loads at once


def wants_split(facts: LinalgOpFacts) -> bool:
    """wants_shared_outputs, and the op splits into partials over blocks (its body reads no loop index:
    LinalgOpFacts.splittable)."""
    return facts.splittable and wants_shared_outputs(facts)


def wants_shared_outputs(facts: LinalgOpFacts) -> bool:
    """A row-like reduction (not a named matmul/conv/pooling, which v0 tiles otherwise) with few outputs
    and a long reduction loop whose threads share each output (an even extent: an odd one, e.g. 13 x 29 x
    29 collapsed, keeps a thread per output; one accumulator: an argmax keeps a thread per output)."""
    op = facts.info
    if not facts.block_reducible:
        return False
    extents = reduction_extents(op)
    outputs = math.prod(r for r, it in zip(op.loop_ranges, op.iterator_types) if it == "parallel")
    return op.name == "linalg.generic" and len(extents) == 1 and extents[0] >= SPLIT_MIN_EXTENT \
        and outputs <= SPLIT_MAX_OUTPUTS and default_split_factor(extents[0]) > 1


def wants_block_per_row(facts: LinalgOpFacts) -> bool:
    """A reduction over its innermost loop alone, of at least SPLIT_MIN_EXTENT elements, with any number of
    outputs (attention's row sums of its 1024 x 512 x 512 scores): a thread per output made each warp-wide
    access touch 32 rows; a block per output reads its row's neighbouring elements together."""
    op = facts.info
    return facts.block_reducible and op.family == "reduction" and op.name == "linalg.generic" \
        and op.iterator_types[-1] == "reduction" \
        and op.iterator_types.count("reduction") == 1 and op.loop_ranges[-1] >= SPLIT_MIN_EXTENT


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


# a direct conv (one that img2col does not take: 3-D, 1-D, dilated...) computes DIRECT_CONV_CHANNELS output
# channels x DIRECT_CONV_PIXELS neighbouring outputs along its innermost loop per thread, accumulated in
# registers across its input channels and kernel taps (emission._emit_conv_register_tile): each input read
# feeds its channels' multiply-adds, each weight its outputs'. The direct template before: one output (or a
# 4 x 4 patch of one channel) per thread, two loads per multiply-add. Strided along the innermost loop, the
# outputs' inputs are not neighbours (no vector read): channels only. Unmeasured.
DIRECT_CONVS = ("linalg.conv_1d_ncw_fcw", "linalg.conv_2d_nchw_fchw", "linalg.conv_3d_ncdhw_fcdhw",
                "linalg.conv_2d_ngchw_gfchw")
DIRECT_CONV_CHANNELS = 4
DIRECT_CONV_PIXELS = 4
DIRECT_CONV_THREADS = 128
DIRECT_CONV_X_THREADS = 32


def direct_conv_tiles(conv: OpInfo) -> tuple[list[int], list[int]] | None:
    """Block and thread tiles over a DIRECT_CONVS conv's output loops (n, [g,] f, spatial...) that give each
    thread a register tile of output channels x neighbouring outputs; None for other ops, or where neither
    divides."""
    if conv.name not in DIRECT_CONVS:
        return None
    ranges = conv.loop_ranges[:conv.iterator_types.index("reduction")]
    f, x = len(ranges) - len(conv.strides) - 1, len(ranges) - 1  # the output channels before the spatial loops
    channels = next((c for c in (DIRECT_CONV_CHANNELS, 2) if ranges[f] % c == 0), 1)
    unit_stride = not conv.strides or conv.strides[-1] == 1
    pixels = next((p for p in (DIRECT_CONV_PIXELS, 2) if ranges[x] % p == 0), 1) if unit_stride else 1
    if channels * pixels == 1:
        return None
    x_threads = largest_divisor_at_most(ranges[x] // pixels, DIRECT_CONV_X_THREADS)
    # a 1-D conv whose width has no divisor for threads (174758 = 2 x 87379) spreads them over its channels
    # instead: no height loop takes them, and blocks of 4 threads ran level1/76 at 0.12x of eager
    spare = x - 1 == f and x_threads < MIN_THREADS_ALONG_LOOP
    z_threads = largest_divisor_at_most(ranges[f] // channels, DIRECT_CONV_THREADS // x_threads if spare else 2)
    block, thread = [1 if r > 1 else 0 for r in ranges], [0] * len(ranges)
    block[f], thread[f] = channels * z_threads, channels
    block[x], thread[x] = pixels * x_threads, pixels
    if x - 1 > f:  # the spatial loop before the innermost (h) takes the rest of the threads, one row each
        block[x - 1] = largest_divisor_at_most(ranges[x - 1], max(DIRECT_CONV_THREADS // (x_threads * z_threads), 1))
        thread[x - 1] = 1 if block[x - 1] > 1 else 0
    return [0 if b >= r else b for b, r in zip(block, ranges)], thread


def wants_img2col(op: OpInfo) -> bool:
    """v0 lowers a conv through img2col where its img2col matmul gets the register-tiled template (more than
    one output per thread); other convs keep the direct schedule. The ResNet 3x3 conv runs 3.8x faster so;
    small_cnn's convs (3 and 16 input channels) are faster direct (benchmarks/results/perf_targets_h200.md
    run 4). A 1x1 conv too: direct, each block re-read the input for each output channel (level1/87, 64 to
    128 channels of 1024x1024, ran at 0.014x of eager on the H100)."""
    return img2col_applies(op) and max(img2col_schedule(op).thread_tile) > 1


def img2col_op(op: OpInfo) -> OpInfo:
    try:
        return records_img2col_op(op)
    except ValueError as e:
        raise ScheduleError(f"op {op.index}: {e}") from None


def thread_loops(op: OpInfo, parallel: list[int]) -> list[int]:
    """Up to two of the `parallel` loops for threads, in loop order (the last maps to x): the loops of the
    result's two innermost dims where the innermost one's comes last, so that a warp's neighbouring threads
    store neighbouring elements (a depthwise NCHW conv's loops run (n, oh, ow, c): x along c put a warp's
    stores H*W apart); else the two innermost loops."""
    by_result = [d for d in op.output_loops if d in parallel]
    inner = sorted(by_result[-2:])
    if len(by_result) == len(parallel) and inner and inner[-1] == by_result[-1]:
        return inner
    return parallel[-2:]


# threads along x under this (the small divisor of an odd extent: 2 of 254, 1 of 197) leave most of each warp
# idle; a larger divisor, up to the block's thread budget, is taken instead (127, 197)
MIN_THREADS_ALONG_LOOP = 16


def threads_along(extent: int, cap: int, budget: int) -> int:
    """Threads of a block along a loop of `extent`: its largest divisor up to `cap`, or where that is under
    MIN_THREADS_ALONG_LOOP (and under cap) its smallest divisor past cap within `budget`, if it has one."""
    threads = largest_divisor_at_most(extent, cap)
    if threads >= min(cap, MIN_THREADS_ALONG_LOOP):
        return threads
    return next((d for d in range(cap + 1, budget + 1) if extent % d == 0), threads)


def _third_thread_loop(block: list[int], thread: list[int], parallel: list[int], inner: list[int],
                       ranges: list[int]) -> None:
    """Where the two thread loops give a block less than a warp (small inner extents: 3x3 pixels of a
    transposed conv's output, 2x2 heads), the parallel loop outside them takes threads too (z), up to
    TARGET_THREADS in all."""
    threads = math.prod(math.ceil(block[d] / thread[d]) for d in inner if thread[d])
    outer = [d for d in parallel if inner and d < min(inner)]
    if len(inner) != 2 or threads >= WARP_SIZE or not outer:
        return
    d = outer[-1]
    block[d], thread[d] = largest_divisor_at_most(ranges[d], min(TARGET_THREADS // threads, MAX_BLOCK_Z)), 1


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
    inner = thread_loops(op, parallel)  # up to two dims mapped to threads: (y, x)
    # matmul-like work reuses operands across a register tile; elementwise work gets 1 per thread
    per_thread = 4 if family in ("matmul", "conv") and all(ranges[d] % 64 == 0 for d in inner) else 1
    # elementwise work and fills: ELEMENTWISE_VECTORS 128-bit vectors per thread along the innermost loop
    vector = elementwise_vector_width(op) if family in ("elementwise", "fill") and per_thread == 1 else 1
    # x first: a 16x16 square for register-tiled work, else 64 wide for coalesced rows
    x_cap = 16 if per_thread > 1 else 64
    budget = TARGET_THREADS
    for d in reversed(inner):
        cap = budget if d != inner[-1] or len(inner) == 1 else x_cap
        run = vector if d == inner[-1] and vector > 1 else per_thread
        # a matmul's (and so an img2col conv's) tiles stay divisors up to cap: the img2col choice rests on them
        threads = (largest_divisor_at_most(ranges[d] // run, cap) if family == "matmul"
                   else threads_along(ranges[d] // run, cap, budget))
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
    if family != "matmul":
        _third_thread_loop(block, thread, parallel, inner, ranges)
    # a block tile that covers the whole loop is no grid dimension at all
    block = [0 if b >= ranges[d] else b for d, b in enumerate(block)]
    whole = parallel or [d for d, it in enumerate(iters) if it == "parallel"]  # unit loops: a loss's one value
    if not any(block) and whole:  # the kernel still needs a (one-block) grid to map
        block[whole[0]] = ranges[whole[0]]
    return OpSchedule(op_index=op.index, family=family, block_tile=block, thread_tile=thread, vectorize=vector > 1)


# a scalar kernel (one output per thread) whose divisor tiles leave over a tenth of its warps' lanes idle (73
# threads along 511 pooled outputs: 3 warps) or give each warp runs of under MIN_CONTIGUOUS_RUN neighbouring
# elements (2 along a padded row of 514, 64 channels in z) takes ALIGNED_X_THREADS along x instead, its last
# block partial (validation.scalar_partial_tiles). A block's threads form warps in order (x fastest): 51 x 5
# threads keep 255 of 256 lanes busy, each warp in at most two runs of a row
ALIGNED_X_THREADS = 64
MIN_LANES_BUSY = 0.9
MIN_CONTIGUOUS_RUN = 16


def lanes_busy(block: list[int], x: int, extent: int) -> float:
    """The share of the lanes launched for a block of `block` threads (per thread loop, x its last) that have
    an element of the x loop of `extent` to compute, its last block partial where x threads do not divide it."""
    threads = math.prod(block)
    return threads / (math.ceil(threads / WARP_SIZE) * WARP_SIZE) * extent / (math.ceil(extent / x) * x)


def warp_aligned_blocks(schedule: OpSchedule, op: OpInfo) -> OpSchedule | None:
    """`schedule` (default_op_schedule's, one output per thread, nothing vectorized) with ALIGNED_X_THREADS
    threads along x and the rest of TARGET_THREADS along y, the last block of either loop partial, where the
    divisor template's threads leave more lanes idle than MIN_LANES_BUSY allows (and the aligned ones fewer) or
    read runs shorter than MIN_CONTIGUOUS_RUN. None where it keeps its tiles."""
    inner = [d for d, t in enumerate(schedule.thread_tile) if t]
    if schedule.vectorize or not inner or any(schedule.thread_tile[d] != 1 for d in inner):
        return None
    x = inner[-1]
    extent = op.loop_ranges[x]
    threads = [schedule.block_tile[d] or op.loop_ranges[d] for d in inner]
    busy = lanes_busy(threads, threads[-1], extent)
    run = threads[-1] if threads[-1] < extent else math.prod(threads[-2:])  # whole rows follow one another
    rows = TARGET_THREADS // ALIGNED_X_THREADS  # y threads of an aligned block
    aligned = [min(rows, op.loop_ranges[inner[-2]]) if len(inner) > 1 else 1, ALIGNED_X_THREADS]
    idle = busy < MIN_LANES_BUSY and lanes_busy(aligned, ALIGNED_X_THREADS, extent) > busy
    if extent <= ALIGNED_X_THREADS or not (idle or run < MIN_CONTIGUOUS_RUN):
        return None
    block, thread = list(schedule.block_tile), list(schedule.thread_tile)
    block[x] = ALIGNED_X_THREADS
    if len(inner) >= 2:
        block[inner[-2]] = rows if op.loop_ranges[inner[-2]] > rows else 0
    for z in inner[:-2]:  # the third thread loop of a block that was under a warp: one index per block now
        block[z], thread[z] = 1, 0
    return OpSchedule(op_index=op.index, family=schedule.family, block_tile=block, thread_tile=thread)


def _share_busy(per_loop: list[tuple[int, int]]) -> float:
    """lanes_busy of a block whose thread loops take (indices per block, extent) each, any of them partial."""
    lanes = math.prod(n for n, _ in per_loop)
    return lanes_busy([lanes], lanes, lanes) * math.prod(e / (math.ceil(e / n) * n) for n, e in per_loop)


def packed_short_rows(schedule: OpSchedule, op: OpInfo, partial: bool) -> OpSchedule | None:
    """`schedule` (default_op_schedule's, one output per thread, nothing vectorized) whose x loop is short
    enough to be whole in a block (up to ALIGNED_X_THREADS: warp_aligned_blocks takes the longer ones), with
    its blocks packed: x, then y, then the loop outside them (z, as _third_thread_loop's) each take their
    whole extent while TARGET_THREADS allow, and the first that does not fit takes the count of indices that
    keeps most lanes busy, its last block partial where `partial` (else a divisor). The divisor template gave
    a 5-D conv's output transpose with rows of 10 blocks of 10 x 2 x 2 threads (16.5M of them, 74% of
    level1/59's time) and 7 x 7 feature maps blocks of 49 threads, one channel each. None where the template
    keeps MIN_LANES_BUSY of its lanes busy, or packing would keep no more."""
    inner = [d for d, t in enumerate(schedule.thread_tile) if t]
    if schedule.vectorize or not inner or any(schedule.thread_tile[d] != 1 for d in inner):
        return None
    ranges = op.loop_ranges
    x = inner[-1]
    if ranges[x] > ALIGNED_X_THREADS or schedule.block_tile[x] not in (0, ranges[x]):
        return None
    parallel = [d for d, it in enumerate(op.iterator_types) if it == "parallel" and ranges[d] > 1]
    outer = [d for d in parallel if d < min(inner[-2:])]
    chain = [x] + inner[-2:-1] + outer[-1:]  # x, y, z
    block, thread = [1 if d in parallel else 0 for d in range(len(ranges))], [0] * len(ranges)
    budget = TARGET_THREADS
    threads = []  # (indices per block, extent) of each thread loop
    for i, d in enumerate(chain):
        cap = min(budget, MAX_BLOCK_Z) if i == 2 else budget
        if ranges[d] <= cap:
            block[d], thread[d] = 0, 1
            threads.append((ranges[d], ranges[d]))
            budget //= ranges[d]
            continue
        others = math.prod(n for n, _ in threads)
        counts = range(1, cap + 1) if partial else [n for n in range(1, cap + 1) if ranges[d] % n == 0]
        best = max(counts, key=lambda n: (lanes_busy([others, n], n, ranges[d]), n))
        block[d], thread[d] = best, 1
        threads.append((best, ranges[d]))
        break
    before = _share_busy([(schedule.block_tile[d] or ranges[d], ranges[d]) for d in inner])
    if before >= MIN_LANES_BUSY or _share_busy(threads) <= before:
        return None
    return OpSchedule(op_index=op.index, family=schedule.family, block_tile=block, thread_tile=thread)


# 128-bit vectors an elementwise thread loads (and stores): two loads in flight
# per thread, the elementwise chain 1.07x over one (131.1 vs 139.9 us on the H200, the loop's v1 in
# benchmarks/results/loop_h200.md 2026-12-04 06:07)
ELEMENTWISE_VECTORS = 2


def elementwise_vector_width(op: OpInfo) -> int:
    """Elements of one 128-bit access along an elementwise op's innermost loop (1 where that loop is
    not the innermost dim, the dtype is unknown or the extent is not a multiple). Kernel pointer
    arguments are 16-byte aligned (kernel_arguments.align_kernel_pointers), so a thread's run starting at a
    multiple of this width of a row whose length is a multiple of it loads as one vector."""
    ranges, iters = op.loop_ranges, op.iterator_types
    if not ranges or iters[-1] != "parallel" or "reduction" in iters:
        return 1
    width = vector_elements(op.dtype)
    return width if width > 1 and ranges[-1] % width == 0 and ranges[-1] >= width * 8 else 1


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
    for d in reversed(thread_loops(op, parallel)):
        block[d] = largest_divisor_at_most(ranges[d], budget)
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
# a SIMT matmul grid of fewer blocks than the GPU's SMs leaves SMs idle: blocks of one warp, 16x8
# outputs of 2x2 per thread, then (the zoo's MLP: 2.0x over 64x64 blocks of 4x4; 1.47x over 32x32 and
# 16x32 blocks of 2x2 with the same threads per SM: ptxas gives one-warp blocks up to 64 registers, 62
# here, and blocks of more warps 32, fewer loads in flight; schedule_sweep_h200.md runs 4-5 and 15-17)
SMALL_GRID_TILE = ((16, 8), (2, 2))


def fill_the_grid(schedule: OpSchedule, op: OpInfo, sms: int) -> None:
    """SMALL_GRID_TILE on the two thread-mapped loops when the grid has fewer blocks than the GPU's `sms`
    and the loops take it."""
    dims = [d for d, t in enumerate(schedule.thread_tile) if t]
    block, thread = SMALL_GRID_TILE
    if grid_blocks(schedule, op) >= sms or len(dims) != 2:
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
    if rest and (blocks > 1 or not reductions_trail(matmul)):
        return
    while warps * split < SPLIT_K_WARPS and first % (split * 2) == 0 \
            and first // (split * 2) * math.prod(rest) >= SPLIT_K_MIN_CHUNK:
        split *= 2
    if split > 1:  # the group's reduction_tile is now the merge's: partials read MERGE_LOADS at a time
        schedule.split_reduction = split
        schedule.reduction_tile = largest_divisor_at_most(split, MERGE_LOADS)
        schedule.vectorize = True


# a SIMT matmul whose grid fills the GPU stages each K step's operand tiles in shared memory (promote_shared,
# staged_matmul.py), in the first of these (block tile, per-thread tile, K step) whose tiles divide its loops
# and whose grid has a block for every SM. On the H100 (schedule_sweep_h200.md, 2026-12-06), against the
# unstaged 64 x 64 blocks of 4 x 4 with K steps of 32: 4096^3 f32 1.46x, 1.42x and 1.34x (0.72x of cuBLAS at
# the first); KernelBench's 1024 x 8192 -> 8192 Gemm + bias + ReLU 1.97x, 1.95x, 1.85x (0.68x of cuBLAS)
STAGED_SIMT_TILES = (((128, 128), (8, 8), 8), ((128, 64), (8, 4), 16), ((64, 64), (4, 4), 32))
# where none divides, a matmul alone in its kernel takes the first whose grid fills the GPU with its tiles
# padded (their loops' extents filling the last in part), if the padded tiles add at most this much work
STAGED_PADDING_WORK = 1.25
# K steps a staged SIMT matmul of whole tiles keeps in flight (pipeline_depth: its tiles copied by cp.async).
# Nsight Compute on the synchronous v0 (4096^3 f32, H100, schedule_sweep_h200.md 2026-12-08 00:32): a third of
# its issue slots idle, stalled on its global loads and its barriers; 2 steps in flight 1.07x over it in that
# run (0.97x before its columns were interleaved, 2026-12-07). One measurement, of a matmul alone in its kernel
# whose operands are staged as they are: only such kernels take it (kb/s33base holds them synchronous for an A/B)
STAGED_SIMT_STAGES = 2


# a matmul whose output loops have no divisor near a register-tiled block (ViT's 197 tokens, Swin's 49 per
# window, KernelBench's 8205 x 5921) got blocks of one row and one output per thread, each thread reading
# two operands per multiply-add; it takes blocks of 32 x 64 of 2 x 4 per thread instead (rows, columns), the
# last block of a loop (and the last K step where K has no divisor of at least a few vectors) partial and
# vectorized masked (validation.masked_tiles). On the H100, 8 x 197 tokens x 768 -> 3072: 1.87x over the
# one-output template, 2.03x over 64 x 64 blocks of 4 x 4 (benchmarks/results/schedule_sweep_h200.md,
# 2026-12-05 09:26)
PARTIAL_BLOCK, PARTIAL_THREAD = (32, 64), (2, 4)


def maskable_matmul(op: OpInfo) -> bool:
    """A matmul whose tiles can be masked at the edges: one K loop, each result dim indexed by one loop."""
    return op.family == "matmul" and len(reduction_extents(op)) == 1 and None not in op.output_loops


def partial_matmul_schedule(schedule: OpSchedule, op: OpInfo, k_extent: int, sms: int) -> OpSchedule | None:
    """`schedule` (the divisor template of a SIMT matmul kernel, over the loops of its anchor `op`: the matmul
    or its elementwise consumer; K of `k_extent`) with PARTIAL_BLOCK tiles of PARTIAL_THREAD per thread on its
    two thread loops (in loop order), where the template gave one output per thread and the new grid has a
    block for every one of `sms` SMs; else None."""
    dims = [d for d, t in enumerate(schedule.thread_tile) if t]
    if len(dims) != 2 or any(schedule.thread_tile[d] != 1 for d in dims):
        return None
    block, thread = list(schedule.block_tile), list(schedule.thread_tile)
    for d, most, per_thread in zip(dims, PARTIAL_BLOCK, PARTIAL_THREAD):
        block[d] = min(most, -(-op.loop_ranges[d] // per_thread) * per_thread)
        thread[d] = per_thread
    k_step = largest_divisor_at_most(k_extent, V0_MATMUL_K_TILES[0])
    if k_step < V0_MATMUL_K_TILES[-1]:  # no K step of a few vectors divides K: the last one is masked
        k_step = min(k_extent, V0_MATMUL_K_TILES[0])
    partial = OpSchedule(op_index=op.index, family=schedule.family, block_tile=block, thread_tile=thread,
                         reduction_tile=k_step, vectorize=True)
    return partial if grid_blocks(partial, op) >= sms else None


def reductions_trail(op: OpInfo) -> bool:
    r = op.iterator_types.index("reduction")
    return all(it == "reduction" for it in op.iterator_types[r:])


def split_over_blocks(op: OpInfo) -> bool:
    """A split matmul whose K spans several loops: tile_reduction_using_forall makes a block of each chunk
    of its first K loop (split_reduction takes one reduction loop, and tile_reduction_using_forall tiles no
    parallel loop: each block computes all the outputs' partials)."""
    return op.family == "matmul" and len(reduction_extents(op)) > 1


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
    if not any(t > 1 for t in schedule.thread_tile):  # pixels not a multiple of 64: one output per thread
        return _aligned_register_tiles(op) or schedule
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
    threads = math.prod(n for n in threads_per_loop(schedule, op) if n)
    if threads > MAX_THREADS and channels_tiled:  # a pixel run of no divisor near the block's (a row of 257)
        per_thread = schedule.thread_tile[channel]
        channel_threads = (schedule.block_tile[channel] or op.loop_ranges[channel]) // per_thread
        schedule.block_tile[channel] = per_thread * largest_divisor_at_most(
            op.loop_ranges[channel] // per_thread, max(1, channel_threads * MAX_THREADS // threads))
    return schedule


IMG2COL_CHANNELS_PER_BLOCK = 64
# a conv of fewer output channels, down to IMG2COL_DEEP_MIN_CHANNELS, takes img2col where its reduction is at
# least IMG2COL_DEEP_K long (a DenseNet layer's 32 channels over 9 x 192 inputs): the direct template re-reads
# each input for every 4 channels, which small_cnn's short reductions (27, 144) could afford
IMG2COL_DEEP_MIN_CHANNELS = 32
IMG2COL_DEEP_K = 256


def _aligned_register_tiles(op: OpInfo) -> OpSchedule | None:
    """img2col's tiles built directly where the matmul template gives one output per thread (the pixels of a
    transposed conv's 1026 x 1026 output are no multiple of 64): IMG2COL_CHANNELS_PER_THREAD channels x the
    longest run of pixels up to IMG2COL_PIXELS_PER_THREAD that the gather's alignment takes, blocks near
    IMG2COL_PIXELS_PER_BLOCK pixels and of up to IMG2COL_CHANNELS_PER_BLOCK channels (fewer where the pixels
    take most of TARGET_THREADS), K steps near V0_REDUCTION_TILE; None where the output channels are fewer than
    IMG2COL_CHANNELS_PER_BLOCK (small_cnn's 16 and 32: the direct conv measured faster than img2col there; down
    to IMG2COL_DEEP_MIN_CHANNELS over a reduction of IMG2COL_DEEP_K) or no multiple of
    IMG2COL_CHANNELS_PER_THREAD, or the block is under a warp (with up to 4 times the pixels) or over MAX_THREADS.
    Channels that are no multiple of a block's (an EfficientNet's 672) take blocks of their largest divisor
    under it (56): the direct template, which took them, reads a 1x1 conv's input once per 8 channels."""
    alignments = {d: extents for d, extents in enumerate(op.tile_alignments) if extents}
    ranges = op.loop_ranges
    (pixels,) = [d for d in alignments if op.iterator_types[d] == "parallel"]
    (k,) = [d for d, it in enumerate(op.iterator_types) if it == "reduction"]
    channel = next(d for d in range(1, len(ranges)) if op.iterator_types[d] == "parallel" and d not in alignments)
    fewest = IMG2COL_DEEP_MIN_CHANNELS if ranges[k] >= IMG2COL_DEEP_K else IMG2COL_CHANNELS_PER_BLOCK
    if ranges[channel] < fewest or ranges[channel] % IMG2COL_CHANNELS_PER_THREAD:
        return None
    block = [1 if it == "parallel" and r > 1 else 0 for r, it in zip(ranges, op.iterator_types)]
    thread = [0] * len(ranges)
    thread[pixels] = max(t for t in range(1, IMG2COL_PIXELS_PER_THREAD + 1)
                         if ranges[pixels] % t == 0 and img2col_aligned(t, alignments[pixels]))
    thread[channel] = IMG2COL_CHANNELS_PER_THREAD
    # channels of few divisors (208 = 8 x 2 x 13: 16 a block) take longer pixel blocks, up to a warp's threads
    for pixels_per_block in (IMG2COL_PIXELS_PER_BLOCK, 2 * IMG2COL_PIXELS_PER_BLOCK, 4 * IMG2COL_PIXELS_PER_BLOCK):
        block[pixels] = _nearest_aligned(ranges[pixels], pixels_per_block, alignments[pixels],
                                         multiple_of=thread[pixels])
        pixel_threads = block[pixels] // thread[pixels]  # a row of 254 pixels, 2 each: 127
        block[channel] = IMG2COL_CHANNELS_PER_THREAD * largest_divisor_at_most(
            ranges[channel] // IMG2COL_CHANNELS_PER_THREAD,
            min(IMG2COL_CHANNELS_PER_BLOCK // IMG2COL_CHANNELS_PER_THREAD, max(TARGET_THREADS // pixel_threads, 1)))
        threads = pixel_threads * block[channel] // IMG2COL_CHANNELS_PER_THREAD
        if threads >= WARP_SIZE or block[pixels] >= ranges[pixels]:
            break
    if not WARP_SIZE <= threads <= MAX_THREADS:
        return None
    block = [0 if b >= r else b for b, r in zip(block, ranges)]
    return OpSchedule(op_index=op.index, family="matmul", block_tile=block, thread_tile=thread, img2col=True,
                      reduction_tile=_nearest_aligned(ranges[k], V0_REDUCTION_TILE, alignments[k]), vectorize=True)


# the warps an img2col conv's grid is filled to (img2col_filling_the_grid), about 8 per SM: on the H100 six CNNs
# took 0.95x the time of filling to 2048 (ResNet101 24.0 -> 20.7 ms, MobileNetV1 1.74 -> 1.55, GoogleNet 5.43 ->
# 5.19) and 0.98x that of 512 (ResNet101 18.7 ms, but GoogleNet 5.95, MobileNetV2 2.36 for 2.16);
# kernelbench_h200.md, 2026-12-07 11:37-11:39
IMG2COL_FILL_WARPS = 1024


def img2col_filling_the_grid(schedule: OpSchedule, conv: OpInfo) -> OpSchedule:
    """An img2col schedule whose grid holds fewer than IMG2COL_FILL_WARPS warps (a small batch's deep layers:
    ResNet18's 7x7 images of 512 channels in 16 blocks of 56 threads, each thread 8 x 7 outputs over K 4608)
    with fewer outputs per thread until it holds them: a thread tile cut to its next aligned divisor (the
    gentlest cut first), the block's channel tile halved while a block has more than
    TARGET_THREADS threads (more, smaller blocks: ResNet18's 64-channel layer ran in 56 blocks).
    Its threads keep their whole K loop; `schedule` where it fills the grid already."""
    op = img2col_op(conv)
    new = dataclasses.replace(schedule, block_tile=list(schedule.block_tile), thread_tile=list(schedule.thread_tile))

    def warps(s: OpSchedule) -> int:
        threads = math.prod(n for n in threads_per_loop(s, op) if n)
        return grid_blocks(s, op) * math.ceil(threads / WARP_SIZE)

    channel = next(c for c in range(1, len(op.loop_ranges))
                   if op.iterator_types[c] == "parallel" and not op.tile_alignments[c])
    while warps(new) < IMG2COL_FILL_WARPS:
        tiled = [d for d, t in enumerate(new.thread_tile) if t > 1 and op.iterator_types[d] == "parallel"]
        if not tiled:
            return new
        step = dataclasses.replace(new, block_tile=list(new.block_tile), thread_tile=list(new.thread_tile))
        cuts = {d: max(t for t in range(1, step.thread_tile[d])
                       if step.thread_tile[d] % t == 0 and img2col_aligned(t, op.tile_alignments[d])) for d in tiled}
        # the gentlest cut (8 -> 4 channels before 7 -> 1 pixels), the larger tile on a tie
        d = max(tiled, key=lambda d: (cuts[d] / step.thread_tile[d], step.thread_tile[d], -d))
        step.thread_tile[d] = cuts[d]
        while math.prod(n for n in threads_per_loop(step, op) if n) > TARGET_THREADS:
            block = step.block_tile[channel] or op.loop_ranges[channel]
            if block % 2 or block // 2 < max(step.thread_tile[channel], 1):
                break
            step.block_tile[channel] = block // 2
        if math.prod(n for n in threads_per_loop(step, op) if n) > MAX_THREADS:
            return new
        new = step
    return new


def _nearest_aligned(extent: int, want: int, extents: list[int], multiple_of: int = 1) -> int:
    """The divisor of `extent` closest to `want` (by ratio; the smaller on a tie) that is a multiple of
    `multiple_of` and aligned to `extents`."""
    tiles = [t for t in range(multiple_of, extent + 1, multiple_of) if extent % t == 0 and img2col_aligned(t, extents)]
    return min(tiles, key=lambda t: (abs(math.log(t / want)), t))


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
    return largest_divisor_at_most(columns, max(min(wanted, MAX_THREADS), 1))


def block_per_output(loop_ranges: list[int], iterator_types: list[str]) -> list[int]:
    """A block tile of a block per output: 1 on every parallel loop but unit ones (on the first parallel loop
    where all are: a loss's one output), 0 on the reduction loops."""
    block = [1 if it == "parallel" and r > 1 else 0 for r, it in zip(loop_ranges, iterator_types)]
    if not any(block):
        block[iterator_types.index("parallel")] = 1
    return block


def row_block_tile(op: OpInfo) -> list[int]:
    """A row kernel's block tile: a block per row, the columns (the last loop) those of its reductions."""
    return block_per_output(op.loop_ranges, ["parallel"] * (len(op.loop_ranges) - 1) + ["reduction"])


def row_kernel_step(run: int, lanes: int) -> int:
    """A v0 row kernel's reduction_tile: a thread's run of more than ROW_KERNEL_COLUMNS columns (rows past
    1024 threads of them) in steps of at most that many, whole interleaved accesses of `lanes` elements
    each; 0 (the run whole) otherwise. A whole run of 384 f32 (softmax over rows of 393216) was one vector
    of a thread, 7 KB of it spilled to local memory."""
    if run <= ROW_KERNEL_COLUMNS:
        return 0
    return largest_divisor_at_most(run // lanes, ROW_KERNEL_COLUMNS // lanes) * lanes


# a block reduction over rows at least this long takes MAX_THREADS threads per row: the row sum over rows
# of 8192 f32 1.06x over 512 threads (65.6 vs 69.6 us) once its loads were interleaved and streamed
# (schedule_sweep_h200.md run 24, the loop's v2 in loop_h200.md 12:37)
LONG_ROW = 8192


def block_reduction_threads(extent: int) -> int:
    """Threads per output of a v0 block reduction: about extent / 16, within 128..512, each reducing at
    least 4 elements (the fastest measured on the H200: 128 for rows of 1024, 256 for 4096;
    benchmarks/results/schedule_sweep_h200.md, perf_targets_h200.md); MAX_THREADS from LONG_ROW on."""
    if extent >= LONG_ROW:
        return largest_divisor_at_most(extent, MAX_THREADS)
    return largest_divisor_at_most(extent, max(min(max(extent // 16, 128), 512, extent // 4), 1))


def chunk_k_step(chunk: int) -> int:
    """A split matmul's K step over its `chunk` of K (0: the chunk in one step): the first v0 K tile that
    divides it, else its largest divisor under the first. A chunk no tile divides (VGG's classifier: K 25088
    in 128 chunks of 196) was read whole, 196 elements of each operand per thread in registers (608 bytes
    spilled)."""
    if chunk <= V0_MATMUL_K_TILES[0]:
        return next((t for t in V0_MATMUL_K_TILES if t < chunk and chunk % t == 0), 0)
    return next((t for t in V0_MATMUL_K_TILES if chunk % t == 0), largest_divisor_at_most(chunk, V0_MATMUL_K_TILES[0]))


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
    k_step = 0 if split_over_blocks(op) else chunk_k_step(chunk)
    return OpSchedule(op.index, "matmul", block, thread, reduction_tile=k_step, vectorize=True), partial
