"""Operand tiles of a matmul's K step staged in shared memory, as Transform steps: what the tensor-core
kernels (tensor_core.py, promote_shared) and the SIMT ones (schedule/staged_matmul.py) share.

The block-level op, tiled to one K step, gets its input operands padded with `nofold` (structured.pad):
each becomes a copy into a block-local tensor, which bufferization allocates in workgroup memory
(tensor_core.emit_shared_accumulator's annotation). The copies are spread over the block's threads, up to
128 bits per thread and row; after bufferization emit_staged_copies turns each row into a vector transfer.
"""
from __future__ import annotations

from workers.compile.pipeline import ANY, vectorize

LOAD_BYTES = 16  # one 128-bit global load when staging operand tiles
LINEAR_THREADS = "#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>"


def copy_tile(shape: tuple[int, ...], threads: int, element_bytes: int) -> tuple[int, int]:
    """A thread's (rows, columns) of a block-wide copy of a tile whose last two dims are `shape`'s: rows of
    up to one 128-bit load of neighbouring elements, every thread busy where the shape allows it."""
    rows, columns = shape[-2:]
    widest = LOAD_BYTES // element_bytes
    for v in (widest, widest // 2, widest // 4, 1):
        cols = columns // v if v and columns % v == 0 else 0
        if cols and threads % cols == 0 and rows % (threads // cols) == 0:
            return rows // (threads // cols), v
    return rows, columns if columns <= widest else 1


def copy_pieces(shape: tuple[int, ...], threads: int, element_bytes: int) -> int:
    """Threads a block-wide copy of the tile takes (copy_tile's pieces): at most the block's."""
    rows, cols = copy_tile(shape, threads, element_bytes)
    return (shape[-2] // rows) * (shape[-1] // cols)


def emit_operand_tiles(k: str, op: str, inputs: list[str], result: str, loops: int) -> str:
    """The K step `op` (of `loops` loops) reading copies of its input tiles (element types `inputs`), its
    result (`result`) in place: %{k}_pd."""
    values = ", ".join(f"0.0 : {t}" for t in [*inputs, result])
    nofold = ", ".join(["1"] * len(inputs) + ["0"])
    return (f"    %{k}_pd, %{k}_pads, %{k}_cb = transform.structured.pad {op} {{padding_values = [{values}], "
            f"padding_dimensions = {list(range(loops))}, nofold_flags = [{nofold}], copy_back_op = \"none\"}} "
            f": ({ANY}) -> ({ANY}, {ANY}, {ANY})")


def emit_operand_copies(k: str, tiles: list[tuple[tuple[int, ...], int]], threads: int,
                        row_mark: str | None = None) -> list[str]:
    """Each input i of %{k}_pd ((its tile's shape, element bytes) in `tiles`) copied by the block's
    `threads`: the pad becomes a linalg.copy into a tensor.empty, tiled over the threads (copy_tile),
    each thread's piece in a loop of rows. `row_mark`: annotate each row loop with its trip count (the
    pipeliner unrolls them)."""
    out = []
    for i, (shape, element_bytes) in enumerate(tiles):
        rows, cols = copy_tile(shape, threads, element_bytes)
        outer = [0] * (len(shape) - 2)
        out += [
            f"    %{k}_pad{i} = transform.get_producer_of_operand %{k}_pd[{i}] : ({ANY}) -> {ANY}",
            f"    %{k}_dps{i} = transform.structured.rewrite_in_destination_passing_style %{k}_pad{i} "
            f": ({ANY}) -> {ANY}",
            f"    %{k}_cp{i} = transform.get_producer_of_operand %{k}_pd[{i}] : ({ANY}) -> {ANY}",
            f"    %{k}_ct{i}, %{k}_cthreads{i} = transform.structured.tile_using_forall %{k}_cp{i} tile_sizes "
            f"{outer + [rows, cols]} (mapping = [{LINEAR_THREADS}]) : ({ANY}) -> ({ANY}, {ANY})",
            f"    %{k}_cr{i}, %{k}_crows{i} = transform.structured.tile_using_for %{k}_ct{i} tile_sizes "
            f"{outer + [1, 0]} : ({ANY}) -> ({ANY}, {ANY})",
        ]
        if row_mark:
            out += [f"    %{k}_nrows{i} = transform.param.constant {rows} : i64 -> !transform.param<i64>",
                    f'    transform.annotate %{k}_crows{i} "{row_mark}" = %{k}_nrows{i} : {ANY}, !transform.param<i64>']
    return out


def emit_staged_copies(kernel: int) -> list[str]:
    """After bufferization: the rows of a staged K step's operand copies become 128-bit vector
    transfers. On tensors, a vectorized copy folds back into a slice insertion, which bufferizes to a
    scalar memref.copy."""
    return [
        f'    %tc{kernel}_copies = transform.structured.match ops{{["linalg.copy"]}} in %kernel{kernel} '
        f": ({ANY}) -> {ANY}",
        vectorize(f"%tc{kernel}_copies"),
    ]
