"""Operand tiles of a matmul's K step staged in shared memory, as Transform steps: what the tensor-core
kernels (tensor_core.py, promote_shared) and the SIMT ones (schedule/staged_matmul.py) share.

The block-level op, tiled to one K step, gets its input operands padded with `nofold` (structured.pad):
each becomes a copy into a block-local tensor, which bufferization allocates in workgroup memory
(tensor_core.emit_shared_accumulator's annotation). The copies are spread over the block's threads, up to
128 bits per thread and row; after bufferization emit_staged_copies turns each row into a vector transfer.
"""
from __future__ import annotations

from collections.abc import Sequence

from numba_cuda_mlir._mlir.dialects.transform import structured

from workers.compile import transform_builder as tb

ir = tb.ir

LOAD_BYTES = 16  # one 128-bit global load when staging operand tiles
LINEAR_THREADS = "#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>"


def copy_tile(shape: tuple[int, ...], threads: int, element_bytes: int) -> tuple[int, int]:
    """A thread's (rows, columns) of a block-wide copy of a tile whose last two dims are `shape`'s: rows of
    up to one 128-bit load of neighbouring elements, every thread busy where the shape allows it; else (a
    row of 9, a 3x3 kernel's K step) an element per thread and row, the rows shared by as many threads as
    divide them."""
    rows, columns = shape[-2:]
    widest = LOAD_BYTES // element_bytes
    for v in (widest, widest // 2, widest // 4, 1):
        cols = columns // v if v and columns % v == 0 else 0
        if cols and threads % cols == 0 and rows % (threads // cols) == 0:
            return rows // (threads // cols), v
    if columns <= threads:
        sharing = max(d for d in range(1, threads // columns + 1) if rows % d == 0)
        return rows // sharing, 1
    return rows, columns if columns <= widest else 1


def transpose_tile(shape: tuple[int, int], threads: int, element_bytes: int) -> tuple[int, int]:
    """A thread's (rows, columns) of a tile that the block's threads transpose as they stage it (a K step's
    [k, n] tile of W.T, read from W's [n, k] rows): a run of rows that is one load of up to 128 bits of
    neighbouring source elements, and the fewest columns that make no more pieces than threads; a warp's
    neighbouring threads take neighbouring columns, so that their stores to shared memory fall in distinct banks."""
    rows, columns = shape
    widest = LOAD_BYTES // element_bytes
    run = max(v for v in (widest, widest // 2, widest // 4, 1) if v and rows % v == 0)
    cols = 1
    while (rows // run) * (columns // cols) > threads and columns % (cols * 2) == 0:
        cols *= 2
    return run, cols


def copy_pieces(shape: tuple[int, ...], threads: int, element_bytes: int, transposed: bool = False) -> int:
    """Threads a block-wide copy of the tile takes (copy_tile's pieces, or transpose_tile's): at most the
    block's."""
    rows, cols = (transpose_tile if transposed else copy_tile)(shape[-2:], threads, element_bytes)
    return (shape[-2] // rows) * (shape[-1] // cols)


def zero_paddings(types: list[str]) -> ir.ArrayAttr:
    """structured.pad's padding values: a zero of each operand's element type."""
    return ir.ArrayAttr.get([ir.FloatAttr.get(ir.Type.parse(t), 0.0) for t in types])


def emit_operand_tiles(k: str, op: tb.Handle, inputs: list[str], result: str, loops: int,
                       copied: list[bool] | None = None) -> tb.Handle:
    """The K step `op` (of `loops` loops) reading copies of its input tiles (element types `inputs`; those
    `copied`, default all), its result (`result`) in place; returns the padded op."""
    copied = copied or [True] * len(inputs)
    return structured.PadOp(op, padding_values=zero_paddings([*inputs, result]), padding_dimensions=list(range(loops)),
                            nofold_flags=[int(c) for c in copied] + [0], copy_back_op="none",
                            loc=ir.Location.name(f"{k}_pd")).padded


def emit_operand_copies(k: str, padded: tb.Handle, tiles: list[tuple[tuple[int, ...], int]], threads: int,
                        row_mark: str | None = None, vectorize: Sequence[int] = (),
                        inputs: Sequence[int] | None = None) -> None:
    """Each input i of `padded` ((its tile's shape, element bytes) in `tiles`) copied by the block's
    `threads`: the pad becomes a linalg.copy into a tensor.empty, tiled over the threads (copy_tile),
    each thread's piece in a loop of rows. `row_mark`: annotate each row loop with its trip count (the
    pipeliner unrolls them). The rows of the inputs in `vectorize` become vector transfers on tensors
    already (emit_staged_copies does the others after bufferization), for patterns that fold their
    source's pad into the reads. `inputs`: only these (default all)."""
    for i, (shape, element_bytes) in enumerate(tiles):
        if inputs is not None and i not in inputs:
            continue
        rows, cols = copy_tile(shape, threads, element_bytes)
        outer = [0] * (len(shape) - 2)
        structured.RewriteInDestinationPassingStyleOp(tb.any_op(), tb.producer_of(padded, i, f"{k}_pad{i}"),
                                                      loc=ir.Location.name(f"{k}_dps{i}"))
        thread_copy, _ = tb.tile_forall(tb.producer_of(padded, i, f"{k}_cp{i}"), LINEAR_THREADS,
                                        tile_sizes=outer + [rows, cols], name=f"{k}_ct{i}")
        row, row_loop = tb.tile_for(thread_copy, outer + [1, 0], f"{k}_cr{i}")
        if i in vectorize:
            tb.vectorize(row)
        if row_mark:
            tb.mark(row_loop, row_mark, rows, name=f"{k}_nrows{i}")


def emit_partial_tile_copy(k: str, copy: tb.Handle, shape: tuple[int, ...], threads: int, element_bytes: int) -> None:
    """A block-wide copy of a tile that the loops' extents fill in part (its static bound `shape`), spread
    over the block's `threads` as emit_operand_copies does, but by thread count (a forall mapped to threads
    needs a static trip count), each thread's piece vectorized masked on tensors (a copy left to
    bufferization would be one of dynamic size, which emit_staged_copies cannot vectorize)."""
    rows, cols = copy_tile(shape, threads, element_bytes)
    thread_copy, _ = tb.tile_forall(copy, LINEAR_THREADS, num_threads=[shape[-2] // rows, shape[-1] // cols],
                                    name=f"{k}_mt")
    tb.vectorize(thread_copy, [rows, cols])


def emit_staged_copies(kernel: int, grid: tb.Handle) -> None:
    """After bufferization (`grid`: the kernel's block forall): the rows of a staged K step's operand copies
    become 128-bit vector transfers. On tensors, a vectorized copy folds back into a slice insertion, which
    bufferizes to a scalar memref.copy."""
    tb.vectorize(tb.match(grid, ["linalg.copy"], name=f"tc{kernel}_copies"))
