"""farm-copy-returned-views: a model output that is a strided view of a larger tensor (a slice, possibly
reshaped: `states[:, -1]`) is copied by a linalg.copy into a tensor of its own before the return.

The function's results are contiguous buffers, so bufferization would copy such a view itself, as a copy on
the host, which the compile stage refuses. As a linalg op the copy is scheduled, tiled and run as a kernel
like any other. Views that are contiguous already (a run of whole rows from the start) are returned as they are.
"""
from __future__ import annotations

from numba_cuda_mlir._mlir.dialects import linalg, tensor

from workers.compile.mlir import ir, main_func

NAME = "farm-copy-returned-views"
RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


def _strided_slice(value: ir.Value) -> bool:
    """`value` is (a reshape of) a tensor.extract_slice whose elements are not one contiguous run from the
    start of its tensor (an output is a buffer of its own, at offset 0)."""
    owner = value.owner
    while isinstance(owner, ir.OpView) and owner.name in RESHAPES:
        owner = owner.operands[0].owner
    if not isinstance(owner, ir.OpView) or owner.name != "tensor.extract_slice":
        return False
    source = owner.operands[0].type.shape
    if any(ir.DenseI64ArrayAttr(owner.attributes["static_offsets"])):
        return True
    sizes = list(ir.DenseI64ArrayAttr(owner.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(owner.attributes["static_strides"]))
    partial = [d for d, (size, whole) in enumerate(zip(sizes, source)) if size != whole]
    # contiguous: unit strides, and past the first partial dim every dim whole, before it every size 1
    return any(s != 1 for s in strides) or bool(partial) and (
        any(sizes[d] != source[d] for d in range(partial[0] + 1, len(sizes)))
        or any(sizes[d] != 1 for d in range(partial[0])))


def run(module: ir.Module) -> None:
    block = main_func(module).regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    for i, value in enumerate(list(ret.operands)):
        if not _strided_slice(value):
            continue
        with ir.InsertionPoint(ret), ret.location:
            empty = tensor.EmptyOp(value.type.shape, value.type.element_type).result
            ret.operands[i] = linalg.copy(value, outs=[empty])
