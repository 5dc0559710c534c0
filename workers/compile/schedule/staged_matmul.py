"""promote_shared on a SIMT (CUDA-core) matmul kernel: the block steps over K, each step's operand tiles
copied into shared memory by all its threads (staging.py), then each thread computes its register tile
(thread_tile) of the step from them. Without it each thread reads its own rows and columns of A and B
through L1, and the 16 threads that share a row of A each load it.

    block forall (the anchor's block_tile)
      fill (over the threads)
      K loop (reduction_tile)
        copy A's tile, copy B's tile (over the threads, 128 bits per load)   <- barrier after each
        the step's matmul (thread forall, vectorized)                          <- barrier
      epilogue, if the matmul is fused into an elementwise consumer (over the threads)

After the thread mapping each thread's accumulator tile is read and written at the same indices in every K
step; with the memref subviews folded into those accesses, hoist_redundant_vector_transfers keeps it in
registers across the loop. A fused matmul's block tile is a block-local tensor (shared memory) that the
epilogue reads.

Tiles that a loop's extent fills in part (any M, N, K; a matmul alone in its kernel): the block's matmul is
padded to whole tiles first (structured.pad over the partial loops, to multiples of the block tile and the K
step). Its accumulator's pad folds into the fill; each K step's copies read the input through the pad, and
the pad-vectorization patterns fold it into those reads (out of bounds: the padding value, zero), so no
padded copy of an input exists; a padded result tile is block-local and copied back to the output's part,
masked (staging.emit_partial_tile_copy). The padded rows and columns cost the work of whole tiles.

An NCHW conv through img2col stages the same way (emit_staged_img2col): its filter tile is copied, and its
gather, fused into the K loop and spread over the block's threads, writes the step's image tile into shared
memory, where without staging each thread gathered its own columns (the threads of a pixel column each again).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from numba_cuda_mlir._mlir.dialects import transform
from numba_cuda_mlir._mlir.dialects.transform import structured
from numba_cuda_mlir._mlir.dialects.transform import loop as loop_transforms
from numba_cuda_mlir._mlir.dialects.transform import memref as memref_transforms
from numba_cuda_mlir._mlir.dialects.transform import tensor as tensor_patterns
from numba_cuda_mlir._mlir.dialects.transform import vector as vector_patterns

from workers.compile import kernel_marks
from workers.compile import transform_builder as tb
from workers.compile.analysis import LinalgOpFacts
from workers.compile.schedule.grouping import Group
from workers.compile.schedule.tiles import forall_mapping, linear_grid, threads_per_loop
from workers.compile.staging import (LINEAR_THREADS, LOAD_BYTES, copy_pieces, copy_tile, emit_operand_copies,
                                     emit_operand_tiles, emit_partial_tile_copy, transpose_tile, zero_paddings)
from workers.compile.tensor_core import COPY_ROWS, K_LOOP
from workers.records import ELEMENT_BYTES, OpInfo, OpSchedule, img2col_op
from workers.target import Target

ir = tb.ir
COLUMN_PIECE = "farm.column_piece"  # i64 on a thread loop of a staged matmul's column piece, until they are fused


@dataclass
class StagedMatmul:
    """A validated staged SIMT kernel: its ops and, in the matmul's loops, its tiles."""

    matmul: int  # op index of the contraction
    epilogue: int | None  # the elementwise anchor it is fused into, if any
    k_loop: int  # the matmul's reduction loop
    k_step: int
    threads: list[int]  # per matmul loop, threads of the block along it (0: none; the K loop's is 0)
    operand_tiles: list[tuple[tuple[int, ...], int]]  # per input: its tile of a K step, element bytes
    block: list[int] = field(default_factory=list)  # per matmul loop, the block's tile (the K loop's: the K step)
    partial: list[int] = field(default_factory=list)  # matmul loops whose extent the block tile (K step) does not divide
    padded: list[int] = field(default_factory=list)  # the inputs a partial loop indexes: each reads through a pad
    result_bytes: int = 4  # of an output element
    stages: int = 1  # K steps in flight (pipeline_depth), copied by cp.async; 1: copied synchronously
    copies_ahead: bool = False  # one buffer more than stages, filled before the step's FMAs
    transposed: list[int] = field(default_factory=list)  # inputs whose tiles the threads transpose (Group.transposed)
    interleaved: bool = False  # a thread's columns as 128-bit vectors interleaved across the block (interleave_columns)
    fills: int = 0  # the block's fills (its accumulator's): their threads' tiles interleaved alike

    @property
    def buffers(self) -> int:
        return self.stages + self.copies_ahead

    @property
    def copy_tiles(self) -> list[tuple[tuple[int, ...], int]]:
        return self.operand_tiles

    @property
    def result_tile(self) -> tuple[int, ...]:
        """The block's output tile (padded where partial)."""
        return tuple(b for d, b in enumerate(self.block) if d != self.k_loop)

    @property
    def partial_result(self) -> bool:
        """Whether the block's output tile is padded (a partial output loop): it is copied back, masked."""
        return any(d != self.k_loop for d in self.partial)

    @property
    def column_loop(self) -> int:
        """The matmul's innermost output loop (its columns: B's and the result's innermost dim)."""
        return max(d for d in range(len(self.threads)) if d != self.k_loop)

    @property
    def column_pieces(self) -> int:
        """128-bit vectors of a thread's columns, interleaved across the block (1: one run of columns; whole
        tiles only)."""
        n = self.column_loop
        width = self.block[n] // self.threads[n] if self.threads[n] else 0
        vector = LOAD_BYTES // self.operand_tiles[-1][1]
        whole = width > vector and width % vector == 0 and not self.partial
        return width // vector if self.interleaved and whole else 1

    @property
    def block_threads(self) -> int:
        return math.prod(n for n in self.threads if n)


def plan_staged_matmul(s: OpSchedule, g: Group, facts: list[LinalgOpFacts], target: Target) -> StagedMatmul:
    """The staged plan of a SIMT group whose schedule has promote_shared, or a ValueError that says why
    its kernel cannot stage its operands."""
    anchor = facts[g.anchor].info
    if s.img2col:
        return _plan_staged_img2col(s, anchor, facts[g.anchor].input_dtypes, target)
    if anchor.family == "matmul" and g.producer is None:
        matmul, epilogue = facts[g.anchor], None
    elif g.producer is not None and facts[g.producer].info.family == "matmul" and anchor.family == "elementwise":
        matmul, epilogue = facts[g.producer], g.anchor
    else:
        raise ValueError("promote_shared stages a matmul's operands: the kernel must be a matmul, alone or fused "
                         f"into an elementwise consumer, not {anchor.name} ({anchor.family})")
    op = matmul.info
    _check_knobs(s, pipelines=True)
    reductions = [d for d, it in enumerate(op.iterator_types) if it == "reduction"]
    parallel = [d for d, it in enumerate(op.iterator_types) if it == "parallel"]
    if len(reductions) != 1:
        raise ValueError(f"op {op.index} has {len(reductions)} reduction loops; staging steps over one")
    if epilogue is not None and len(anchor.loop_ranges) != len(parallel):
        raise ValueError(f"the epilogue op {anchor.index} must iterate over the matmul's outputs")
    k_loop, k_extent = reductions[0], op.loop_ranges[reductions[0]]
    if not s.reduction_tile or s.reduction_tile >= k_extent:
        raise ValueError(f"the K step (reduction_tile {s.reduction_tile}) must be shorter than K={k_extent}")
    # the schedule's tiles are the anchor's: the matmul's own loops, or an epilogue's, which are the matmul's
    # parallel loops in order (grouping fuses through identity maps)
    anchor_loops = parallel if epilogue is not None else range(len(op.loop_ranges))
    block, threads = [0] * len(op.loop_ranges), [0] * len(op.loop_ranges)
    for d, b, n in zip(anchor_loops, s.block_tile, threads_per_loop(s, anchor)):
        if d in parallel:
            block[d], threads[d] = b or op.loop_ranges[d], n
    block[k_loop] = s.reduction_tile
    tiles = []
    for i, loops in enumerate(matmul.input_loops):
        if None in loops:
            raise ValueError(f"op {op.index}'s input {i} is not indexed by loops alone")
        shape = tuple(block[d] for d in loops)
        if len(shape) < 2 or any(n != 1 for n in shape[:-2]):
            raise ValueError(f"op {op.index}'s input {i} has a {list(shape)} tile per K step; staging copies "
                             "2-D tiles")
        tiles.append((shape, ELEMENT_BYTES.get(matmul.input_dtypes[i], 4)))
    partial = [d for d in range(len(block)) if op.loop_ranges[d] % block[d]]
    if partial and epilogue is not None:
        raise ValueError("a staged matmul fused into an epilogue takes whole tiles: the block tile and the K step "
                         "must divide their loops")
    padded = [i for i, loops in enumerate(matmul.input_loops) if set(loops) & set(partial)]
    plan = StagedMatmul(op.index, epilogue, k_loop, s.reduction_tile, threads, tiles, block, partial, padded,
                        ELEMENT_BYTES.get(op.dtype, 4), stages=max(s.pipeline_depth, 1), copies_ahead=s.copies_ahead,
                        transposed=[i for i, _ in g.transposed], interleaved=s.interleave_columns,
                        fills=len(g.fills))
    if s.copies_ahead and plan.stages < 2:
        raise ValueError("copies_ahead fills a pipelined kernel's spare buffer: it needs pipeline_depth 2 or more")
    if plan.stages > 1 and partial:
        raise ValueError("pipeline_depth copies whole tiles by cp.async: the block tile and the K step must divide "
                         f"their loops (partial loops {partial})")
    if plan.stages > 1 and k_extent // s.reduction_tile < plan.stages:
        raise ValueError(f"pipeline_depth {plan.stages} needs at least that many K steps, K={k_extent} has "
                         f"{k_extent // s.reduction_tile} of {s.reduction_tile}")
    # a fused matmul's block tile, or a partial one padded, is a block-local tensor
    _check_fits(plan, math.prod(plan.result_tile) * plan.result_bytes if epilogue or plan.partial_result else 0,
                target)
    return plan


def _check_knobs(s: OpSchedule, pipelines: bool = False) -> None:
    """`pipelines`: whether the kernel takes pipeline_depth and copies_ahead (a matmul's copies; an img2col's
    gather is none)."""
    if s.split_reduction or s.block_reduction or (s.pipeline_depth or s.copies_ahead) and not pipelines:
        raise ValueError("a SIMT kernel stages its operands without split_reduction or block_reduction"
                         f"{'' if pipelines else ', pipeline_depth or copies_ahead (an img2col gather is no copy)'}")
    if not any(s.thread_tile):
        raise ValueError("the block's threads each compute a tile of the step's outputs: thread_tile must be set")


def _check_fits(plan: StagedMatmul, result_bytes: int, target: Target) -> None:
    """That the block's threads copy each K step's tiles in one pass, and that the tiles (with the
    block-local result tile of `result_bytes`) fit the target's shared memory."""
    for i, (shape, element_bytes) in enumerate(plan.operand_tiles):
        if copy_pieces(shape, plan.block_threads, element_bytes, i in plan.transposed) > plan.block_threads:
            raise ValueError(f"the {plan.block_threads} threads cannot copy input {i}'s {list(shape)} tile "
                             "in one pass")
    staged = plan.buffers * sum(math.prod(shape) * b for shape, b in plan.operand_tiles) + result_bytes
    if staged > target.shared_bytes_per_block:  # past 48 KB: farm-large-shared-to-dynamic
        raise ValueError(f"the staged tiles ({staged} bytes{' with the result tile' if result_bytes else ''}) exceed "
                         f"the {target.shared_bytes_per_block} bytes of shared memory a block has on {target.chip}")


def _plan_staged_img2col(s: OpSchedule, conv: OpInfo, dtypes: list[str], target: Target) -> StagedMatmul:
    """An NCHW conv's img2col matmul (n, f, pixels, k) staged: each K step's filter tile [f, k] copied, its
    gathered image tile [1, k, pixels] computed by the block's threads straight into shared memory."""
    if conv.name != "linalg.conv_2d_nchw_fchw":
        raise ValueError(f"staging an img2col conv takes linalg.conv_2d_nchw_fchw, not {conv.name}")
    _check_knobs(s)
    op = img2col_op(conv)
    k_extent = op.loop_ranges[3]
    if not s.reduction_tile or s.reduction_tile >= k_extent or k_extent % s.reduction_tile:
        raise ValueError(f"the K step (reduction_tile {s.reduction_tile}) must divide K={k_extent} and be shorter")
    block = [b or r for b, r in zip(s.block_tile, op.loop_ranges)]
    block[3] = s.reduction_tile
    if block[0] != 1 or any(r % b for r, b in zip(op.loop_ranges, block)):
        raise ValueError(f"a staged img2col conv takes a block of one image and tiles that divide its loops "
                         f"{op.loop_ranges}, not {block}")
    element_bytes = ELEMENT_BYTES.get(dtypes[0], 4)
    tiles = [((block[1], block[3]), element_bytes), ((1, block[3], block[2]), element_bytes)]
    plan = StagedMatmul(conv.index, None, 3, s.reduction_tile, threads_per_loop(s, op), tiles, block)
    _check_fits(plan, 0, target)
    return plan


def emit_staged_img2col(kernel: int, k: str, s: OpSchedule, plan: StagedMatmul, conv: OpInfo, gather: tb.Handle,
                        matmul: tb.Handle, fill: tb.Handle | None) -> None:
    """An img2col conv staged (_plan_staged_img2col): the block steps over K, its threads copying the step's
    filter tile and gathering its image tile into shared memory, then each computing its register tile."""
    op = img2col_op(conv)
    mapping = forall_mapping("thread", sum(1 for n in plan.threads if n))
    block, grid = tb.tile_forall(matmul, forall_mapping("block", sum(1 for b in s.block_tile if b),
                                                        bool(linear_grid(s, op))), tile_sizes=s.block_tile,
                                 name=f"{k}_b")
    gathered, grid = tb.fuse_into(gather, grid, f"{k}_gb")
    if fill is not None:
        fill, grid = tb.fuse_into(fill, grid, f"{k}_f0b")
    tb.mark(grid, kernel_marks.KERNEL, kernel, name=f"{k}_id")
    if fill is not None:
        tb.vectorize(tb.tile_forall(fill, mapping, num_threads=plan.threads[:3], name=f"{k}_f0t")[0])
    step, k_loop = tb.tile_for(block, [0, 0, 0, plan.k_step], f"{k}_mk")
    gathered, _ = tb.fuse_into(gathered, k_loop, f"{k}_gk")
    # the gathered tile's tensor.empty, block-local (shared memory) instead of a slice of the whole image's
    tb.apply_patterns(grid, tensor_patterns.ApplyFoldTensorEmptyPatternsOp)
    padded = emit_operand_tiles(k, step, [conv.dtype, conv.dtype], conv.dtype, 4, copied=[True, False])
    emit_operand_copies(k, padded, plan.operand_tiles, plan.block_threads, inputs=[0])
    shape, element_bytes = plan.operand_tiles[1]
    rows, cols = copy_tile(shape, plan.block_threads, element_bytes)
    tb.tile_forall(gathered, LINEAR_THREADS, tile_sizes=[0, rows, cols], name=f"{k}_gt")
    thread_op, _ = tb.tile_forall(padded, mapping, num_threads=plan.threads, name=f"{k}_t")
    if s.vectorize:
        tb.vectorize(thread_op)


def emit_staged_matmul(kernel: int, k: str, g: Group, s: OpSchedule, plan: StagedMatmul,
                       facts: list[LinalgOpFacts], anchor_op: tb.Handle, fills: list[tb.Handle],
                       producer: tb.Handle | None, transposes: list[tb.Handle]) -> None:
    """The kernel's Transform steps (module docstring); `producer`: the handle of a fused matmul;
    `transposes`: those of the transposes of plan.transposed's inputs, in its order."""
    anchor = facts[g.anchor].info
    n_thread, n_block = sum(1 for n in plan.threads if n), sum(1 for b in s.block_tile if b)
    mapping = forall_mapping("thread", n_thread)
    block, grid = tb.tile_forall(anchor_op, forall_mapping("block", n_block, bool(linear_grid(s, anchor))),
                                 tile_sizes=s.block_tile, name=f"{k}_b")
    matmul_block = block
    if plan.epilogue is not None:
        matmul_block, grid = tb.fuse_into(producer, grid, f"{k}_mm")
    block_fills = []
    for j, fill in enumerate(fills):
        fused, grid = tb.fuse_into(fill, grid, f"{k}_f{j}b")
        block_fills.append(fused)
    block_transposes = []
    for i, transpose in zip(plan.transposed, transposes):
        fused, grid = tb.fuse_into(transpose, grid, f"{k}_tr{i}b")
        block_transposes.append(fused)
    tb.mark(grid, kernel_marks.KERNEL, kernel, name=f"{k}_id")
    if plan.epilogue is not None:
        # the matmul's block tile becomes a block-local tensor (shared memory), not a slice of a temporary
        tb.apply_patterns(grid, tensor_patterns.ApplyFoldTensorEmptyPatternsOp)
    matmul = facts[plan.matmul]
    if plan.partial:
        matmul_block, copy_back = _emit_padded_block(k, matmul_block, plan, matmul, grid)
        block_fills = [tb.match(grid, ["linalg.fill"], name=f"{k}_fills")]
    output_threads = [n for n, it in zip(plan.threads, matmul.info.iterator_types) if it == "parallel"]
    for j, fill in enumerate(block_fills):
        tb.vectorize(_emit_thread_tiles(f"{k}_f{j}", fill, output_threads, mapping, len(output_threads) - 1,
                                        plan.block[plan.column_loop], plan.column_pieces, group=j))
    sizes = [plan.k_step if d == plan.k_loop else 0 for d in range(len(plan.threads))]
    step, k_loop = tb.tile_for(matmul_block, sizes, f"{k}_mk")
    if plan.stages > 1:  # marks that outlive bufferization, for the pipelining (tensor_core.py's steps)
        tb.mark(k_loop, K_LOOP, kernel, name=f"{k}_kloop")
    step_transposes = [tb.fuse_into(t, k_loop, f"{k}_tr{i}k")[0] for i, t in zip(plan.transposed, block_transposes)]
    if step_transposes:  # each step's transposed tile block-local (shared memory), not a slice of a temporary
        tb.apply_patterns(grid, tensor_patterns.ApplyFoldTensorEmptyPatternsOp)
    copied = [i not in plan.transposed for i in range(len(matmul.input_dtypes))]
    padded = emit_operand_tiles(k, step, matmul.input_dtypes, matmul.info.dtype, len(plan.threads), copied)
    emit_operand_copies(k, padded, plan.operand_tiles, plan.block_threads, COPY_ROWS if plan.stages > 1 else None,
                        vectorize=plan.padded, inputs=[i for i, c in enumerate(copied) if c])
    for i, transpose in zip(plan.transposed, step_transposes):
        shape, element_bytes = plan.operand_tiles[i]
        piece, _ = tb.tile_forall(transpose, LINEAR_THREADS, tile_sizes=list(transpose_tile(shape, plan.block_threads,
                                                                                           element_bytes)),
                                  name=f"{k}_tr{i}t")
        tb.vectorize(piece)
    thread_op = _emit_thread_tiles(k, padded, plan.threads, mapping, plan.column_loop, plan.block[plan.column_loop],
                                   plan.column_pieces, group=len(block_fills))
    if s.vectorize:
        tb.vectorize(thread_op)
    if plan.partial:
        # each K step's copy reads its input's tile through the block's pad: read in place, out of bounds
        # reads taking the padding value instead
        tb.apply_patterns(grid, structured.ApplyPadVectorizationPatternsOp,
                          tensor_patterns.ApplyFoldTensorSubsetOpsIntoVectorTransfersPatternsOp)
    if plan.partial_result:
        emit_partial_tile_copy(f"{k}_out", copy_back, plan.result_tile, plan.block_threads, plan.result_bytes)
    if plan.epilogue is not None:
        epilogue, _ = tb.tile_forall(block, mapping, num_threads=threads_per_loop(s, anchor), name=f"{k}_et")
        # a row of the thread's tile a step: vectorized whole, a GELU's or Mish's temporaries over 8 x 8 outputs
        # took 164-214 registers, a block per SM where a ReLU's kernel takes 128 and two
        last = max(d for d, t in enumerate(s.thread_tile) if t)
        rows = [1 if t > 1 and d < last else 0 for d, t in enumerate(s.thread_tile)]
        if s.vectorize and any(rows):
            epilogue, _ = tb.tile_for(epilogue, rows, f"{k}_er")
        if s.vectorize:
            tb.vectorize(epilogue)


def _emit_thread_tiles(k: str, op: tb.Handle, threads: list[int], mapping: str, column: int, columns: int,
                       pieces: int, group: int) -> tb.Handle:
    """`op` (the K step's matmul, or a fill of the block's result tile) over the block's `threads`, each
    its tile; returns the threads' ops. With `pieces` > 1, a thread's columns (along loop `column`, of
    `columns`) are that many 128-bit vectors interleaved across the block: `op` split along the columns
    into as many ops (structured.split), each tiled over all the threads, its thread loop marked
    COLUMN_PIECE `group` for emit_interleaved_columns, which fuses them into one once bufferized (on
    tensors each piece writes the result the one before returned: they are not siblings)."""
    if pieces == 1:
        return tb.tile_forall(op, mapping, num_threads=threads, name=f"{k}_t")[0]
    split = structured.SplitOp(op, column, columns // pieces, loc=ir.Location.name(f"{k}_cols"))
    split.operation.attributes["multiway"] = ir.UnitAttr.get()  # chunks of that size, not two parts
    ops = []
    for j, piece in enumerate(tb.split(split.split_list, pieces, name=f"{k}_col")):
        tiled, loop = tb.tile_forall(piece, mapping, num_threads=threads, name=f"{k}_t{j}")
        tb.mark(loop, COLUMN_PIECE, group, name=f"{k}_piece{j}")
        ops.append(tiled)
    return tb.merge(ops, name=f"{k}_tops")


def emit_interleaved_columns(kernel: int, grid: tb.Handle, plan: StagedMatmul) -> None:
    """After bufferization (`grid`: the kernel's block forall), before the thread mapping: the thread loops of
    each op's column pieces (_emit_thread_tiles: the fills', then the K step matmul's) fused into one
    (loop.fuse_sibling), each thread computing its vector of every piece."""
    for group in range(plan.fills + 1):
        loops = tb.match(grid, ["scf.forall"], attributes={COLUMN_PIECE: group}, name=f"pc{kernel}_{group}")
        fused, *rest = tb.split(loops, plan.column_pieces, name=f"pc{kernel}_{group}_pieces")
        for j, piece in enumerate(rest):
            # into the later loop: the values the earlier one uses are defined before it (not the reverse)
            fused = loop_transforms.LoopFuseSiblingOp(transform.AnyOpType.get(), fused, piece,
                                                      loc=ir.Location.name(f"pc{kernel}_{group}_{j}")).fused_loop


def _emit_padded_block(k: str, block: tb.Handle, plan: StagedMatmul, matmul: LinalgOpFacts,
                       grid: tb.Handle) -> tuple[tb.Handle, tb.Handle | None]:
    """A block tile that its loops (K: its steps) fill in part, padded to whole tiles (structured.pad over the
    partial loops, to multiples of the block tile and the K step; the accumulator's pad folds into its
    fill), a padded result copied back to the output's part (copy_back_op linalg.copy, block-local).
    Returns the padded op and the copy back (None where the output is not padded)."""
    tiles = [plan.block[d] for d in plan.partial]
    op = structured.PadOp(block, padding_values=zero_paddings([*matmul.input_dtypes, matmul.info.dtype]), padding_dimensions=plan.partial, pad_to_multiple_of=tiles,
                          nofold_flags=[0] * (len(matmul.input_dtypes) + 1),
                          copy_back_op="linalg.copy" if plan.partial_result else "none",
                          loc=ir.Location.name(f"{k}_blockpad"))
    # the fill's zero and the pad's one constant (the function's), so that the pad folds into the fill
    tb.canonicalize(transform.GetParentOp(tb.any_op(), grid, op_name="func.func").result)
    return op.padded, op.copy if plan.partial_result else None


def emit_registers_across_k_steps(launch: tb.Handle) -> None:
    """After the thread mapping (`launch`: the mapped gpu.launch): the subviews folded into the accesses,
    so that hoist_redundant_vector_transfers sees each thread's accumulator tile read and written at the
    same indices of one buffer in every K step (it takes no access through a view). A partial tile's masked
    transfers take their masks as operands first: a view folded into a vector.mask's transfer would leave
    its index arithmetic inside the mask, which holds one op."""
    tb.apply_patterns(launch, vector_patterns.ApplyLowerMaskedTransfersPatternsOp)
    tb.apply_patterns(launch, memref_transforms.ApplyFoldMemrefAliasOpsPatternsOp,
                      transform.ApplyCanonicalizationPatternsOp)
    tb.cse(launch)
