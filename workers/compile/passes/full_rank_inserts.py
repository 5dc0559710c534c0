"""farm-full-rank-inserts: a tensor.insert_slice whose source drops unit dims of its slice (rank-reducing)
inserts a tensor.expand_shape of the source to the slice's own shape instead.

The schedule turns every insert into a copy kernel (structured.insert_slice_to_copy), which builds an invalid
linalg.copy from a rank-reducing insert (a rank-1 source into a rank-2 slice: "expected operand rank to
match the result rank of indexing_map"). Such inserts come from the clean-up: unit-dim folding and
canonicalization drop a batch of 1 from an insert's source (an unbatched GRU's state, a row written into a
[1, N] slice); no upstream pass or pattern in these bindings makes such an insert full-rank again. Runs last
before the schedule, after every canonicalization, which would fold the expansion back into the insert.
"""
from __future__ import annotations

from numba_cuda_mlir._mlir.dialects import tensor

from workers.compile.mlir import body_ops, ir, main_func, reassociation_attr

NAME = "farm-full-rank-inserts"


def reassociation(source: list[int], sizes: list[int]) -> list[list[int]] | None:
    """The groups of slice dims (`sizes`) that each source dim expands to, the dropped unit dims joining
    the source dim after them (the last one's before them); None where the sizes are no such expansion."""
    groups, at = [], 0
    for dim in source:
        group = []
        while at < len(sizes) and sizes[at] == 1 and dim != 1:
            group.append(at)
            at += 1
        if at == len(sizes) or sizes[at] != dim:
            return None
        groups.append(group + [at])
        at += 1
    if any(size != 1 for size in sizes[at:]):
        return None
    if groups:
        groups[-1] += list(range(at, len(sizes)))
    return groups


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name != "tensor.insert_slice":
            continue
        source = op.operands[0]
        sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
        if source.type.rank == len(sizes) or ir.ShapedType.get_dynamic_size() in sizes:
            continue
        groups = reassociation(list(source.type.shape), sizes)
        if groups is None:
            continue
        full = ir.RankedTensorType.get(sizes, source.type.element_type)
        with ir.InsertionPoint(op), op.location:
            op.operands[0] = tensor.ExpandShapeOp(full, source, reassociation_attr(groups), [], sizes).result
