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
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from workers.compile.analysis import LinalgOpFacts
from workers.compile.pipeline import ANY, vectorize
from workers.compile.schedule.grouping import Group
from workers.compile.schedule.tiles import forall_mapping, ints, linear_grid, threads_per_loop
from workers.compile.staging import copy_pieces, emit_operand_copies, emit_operand_tiles
from workers.records import ELEMENT_BYTES, OpSchedule
from workers.target import Target


@dataclass
class StagedMatmul:
    """A validated staged SIMT kernel: its ops and, in the matmul's loops, its tiles."""

    matmul: int  # op index of the contraction
    epilogue: int | None  # the elementwise anchor it is fused into, if any
    k_loop: int  # the matmul's reduction loop
    k_step: int
    threads: list[int]  # per matmul loop, threads of the block along it (0: none; the K loop's is 0)
    operand_tiles: list[tuple[tuple[int, ...], int]]  # per input: its tile of a K step, element bytes

    @property
    def block_threads(self) -> int:
        return math.prod(n for n in self.threads if n)


def plan_staged_matmul(s: OpSchedule, g: Group, facts: list[LinalgOpFacts], target: Target) -> StagedMatmul:
    """The staged plan of a SIMT group whose schedule has promote_shared, or a ValueError that says why
    its kernel cannot stage its operands."""
    anchor = facts[g.anchor].info
    if anchor.family == "matmul" and g.producer is None:
        matmul, epilogue = facts[g.anchor], None
    elif g.producer is not None and facts[g.producer].info.family == "matmul" and anchor.family == "elementwise":
        matmul, epilogue = facts[g.producer], g.anchor
    else:
        raise ValueError("promote_shared stages a matmul's operands: the kernel must be a matmul, alone or fused "
                         f"into an elementwise consumer, not {anchor.name} ({anchor.family})")
    op = matmul.info
    if s.img2col or s.split_reduction or s.block_reduction or s.pipeline_depth or s.copies_ahead:
        raise ValueError("a SIMT kernel stages its operands without img2col, split_reduction, block_reduction, "
                         "pipeline_depth or copies_ahead")
    reductions = [d for d, it in enumerate(op.iterator_types) if it == "reduction"]
    parallel = [d for d, it in enumerate(op.iterator_types) if it == "parallel"]
    if len(reductions) != 1:
        raise ValueError(f"op {op.index} has {len(reductions)} reduction loops; staging steps over one")
    if epilogue is not None and len(anchor.loop_ranges) != len(parallel):
        raise ValueError(f"the epilogue op {anchor.index} must iterate over the matmul's outputs")
    k_loop, k_extent = reductions[0], op.loop_ranges[reductions[0]]
    if not s.reduction_tile or s.reduction_tile >= k_extent or k_extent % s.reduction_tile:
        raise ValueError(f"the K step (reduction_tile {s.reduction_tile}) must divide K={k_extent} and be shorter")
    if not any(s.thread_tile):
        raise ValueError("the block's threads each compute a tile of the step's outputs: thread_tile must be set")
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
    plan = StagedMatmul(op.index, epilogue, k_loop, s.reduction_tile, threads, tiles)
    for i, (shape, element_bytes) in enumerate(tiles):
        if copy_pieces(shape, plan.block_threads, element_bytes) > plan.block_threads:
            raise ValueError(f"the {plan.block_threads} threads cannot copy input {i}'s {list(shape)} tile "
                             "in one pass")
    result_bytes = math.prod(block[d] for d in parallel) * ELEMENT_BYTES.get(op.dtype, 4) if epilogue else 0
    staged = sum(math.prod(shape) * b for shape, b in tiles) + result_bytes
    if staged > target.shared_bytes_per_block:  # past 48 KB: farm-large-shared-to-dynamic
        raise ValueError(f"the staged tiles ({staged} bytes{' with the result tile' if epilogue else ''}) exceed "
                         f"the {target.shared_bytes_per_block} bytes of shared memory a block has on {target.chip}")
    return plan


def emit_staged_matmul(kernel: int, k: str, g: Group, s: OpSchedule, plan: StagedMatmul,
                       facts: list[LinalgOpFacts], producer: str | None) -> list[str]:
    """The kernel's Transform steps (module docstring); `producer`: the handle of a fused matmul."""
    anchor = facts[g.anchor].info
    n_thread, n_block = sum(1 for n in plan.threads if n), sum(1 for b in s.block_tile if b)
    mapping = f"(mapping = [{forall_mapping('thread', n_thread)}])"
    out = [f"    // kernel of op {g.anchor}: SIMT matmul op {plan.matmul}, its operands' tiles of K steps of "
           f"{plan.k_step} staged in shared memory",
           f"    %{k}_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
           f"    %{k}_b, %{k}_grid = transform.structured.tile_using_forall %op{g.anchor} tile_sizes "
           f"{ints(s.block_tile)} (mapping = [{forall_mapping('block', n_block, bool(linear_grid(s, anchor)))}]) "
           f": ({ANY}) -> ({ANY}, {ANY})"]
    grid, matmul_b = f"%{k}_grid", f"%{k}_b"
    if plan.epilogue is not None:
        out.append(f"    %{k}_mm, %{k}_grid_mm = transform.structured.fuse_into_containing_op {producer} into {grid} "
                   f": ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        grid, matmul_b = f"%{k}_grid_mm", f"%{k}_mm"
    fills = []
    for j in range(len(g.fills)):
        out.append(f"    %{k}_f{j}b, %{k}_grid_f{j} = transform.structured.fuse_into_containing_op %{k}_fill{j} into "
                   f"{grid} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        grid = f"%{k}_grid_f{j}"
        fills.append(f"%{k}_f{j}b")
    out.append(f"    transform.annotate {grid} \"farm.kernel\" = %{k}_id : {ANY}, !transform.param<i64>")
    if plan.epilogue is not None:
        # the matmul's block tile becomes a block-local tensor (shared memory), not a slice of a temporary
        out.append(f"    transform.apply_patterns to {grid} {{ transform.apply_patterns.tensor.fold_tensor_empty }} : {ANY}")
    output_threads = [n for n, it in zip(plan.threads, facts[plan.matmul].info.iterator_types) if it == "parallel"]
    for j, fill in enumerate(fills):
        out += [f"    %{k}_f{j}t, %{k}_f{j}threads = transform.structured.tile_using_forall {fill} num_threads "
                f"{ints(output_threads)} {mapping} : ({ANY}) -> ({ANY}, {ANY})",
                vectorize(f"%{k}_f{j}t")]
    sizes = [plan.k_step if d == plan.k_loop else 0 for d in range(len(plan.threads))]
    out += [f"    %{k}_mk, %{k}_kloop = transform.structured.tile_using_for {matmul_b} tile_sizes {ints(sizes)} "
            f": ({ANY}) -> ({ANY}, {ANY})",
            emit_operand_tiles(k, f"%{k}_mk", facts[plan.matmul].input_dtypes, facts[plan.matmul].info.dtype,
                               len(plan.threads))]
    out += emit_operand_copies(k, plan.operand_tiles, plan.block_threads)
    out += [f"    %{k}_t, %{k}_threads = transform.structured.tile_using_forall %{k}_pd num_threads "
            f"{ints(plan.threads)} {mapping} : ({ANY}) -> ({ANY}, {ANY})"]
    if s.vectorize:
        out.append(vectorize(f"%{k}_t"))
    if plan.epilogue is not None:
        out += [f"    %{k}_et, %{k}_ethreads = transform.structured.tile_using_forall %{k}_b num_threads "
                f"{ints(threads_per_loop(s, anchor))} {mapping} : ({ANY}) -> ({ANY}, {ANY})"]
        if s.vectorize:
            out.append(vectorize(f"%{k}_et"))
    return out


def emit_registers_across_k_steps(launch: str) -> list[str]:
    """After the thread mapping (`launch`: the mapped gpu.launch): the subviews folded into the accesses,
    so that hoist_redundant_vector_transfers sees each thread's accumulator tile read and written at the
    same indices of one buffer in every K step (it takes no access through a view)."""
    return [f"    transform.apply_patterns to {launch} {{ transform.apply_patterns.memref.fold_memref_alias_ops "
            f"transform.apply_patterns.canonicalization }} : {ANY}",
            f"    transform.apply_cse to {launch} : {ANY}"]
