"""farm-unit-dim-transposes-as-reshapes: a linalg.transpose that moves only dims of extent 1 (its other dims keep
their order) is a reshape of its input, not a copy.

torch-mlir lowers a 4-D tensor times a matrix (KernelBench level 1 #11, torch.einsum) to a batch_matmul of one
batch whose result is transposed by [0, 1, 2, 4, 3] over a dim of 1: a copy kernel of all 3.2 GB of the output
(linalg-fold-unit-extent-dims folds the unit dims of generic ops, not of a named transpose). The transpose becomes
a tensor.collapse_shape of its input to the dims of more than one element and a tensor.expand_shape to its result's
shape: views, no kernel. Runs after the clean-up.
"""
from __future__ import annotations

from numba_cuda_mlir._mlir.dialects import tensor

from workers.compile.mlir import body_ops, ir, main_func, reassociation_attr
from workers.compile.passes import full_rank_inserts

NAME = "farm-unit-dim-transposes-as-reshapes"


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name == "linalg.transpose" and _moves_unit_dims_only(op.operation):
            _as_reshape(op.operation)


def _moves_unit_dims_only(transpose) -> bool:
    source = ir.RankedTensorType(transpose.operands[0].type)
    permutation = list(ir.DenseI64ArrayAttr(transpose.attributes["permutation"]))
    kept = [d for d in permutation if source.shape[d] != 1] if source.has_static_shape else []
    return bool(kept) and kept == sorted(kept) and permutation != list(range(source.rank))


def _dropping_unit_dims(shape: list[int]) -> list[list[int]]:
    """The reassociation that drops the unit dims of `shape` (each joins the dim after it, trailing ones the
    last): full_rank_inserts' expansion of the dims of more than one element back to `shape`."""
    return full_rank_inserts.reassociation([n for n in shape if n != 1], shape)


def _as_reshape(transpose) -> None:
    source, result = transpose.operands[0], transpose.results[0]
    source_type, result_type = ir.RankedTensorType(source.type), ir.RankedTensorType(result.type)
    flat = ir.RankedTensorType.get([n for n in source_type.shape if n != 1], source_type.element_type)
    with ir.InsertionPoint(transpose), transpose.location:
        collapsed = tensor.CollapseShapeOp(flat, source,
                                           reassociation_attr(_dropping_unit_dims(list(source_type.shape))))
        expanded = tensor.ExpandShapeOp(result_type, collapsed.result,
                                        reassociation_attr(_dropping_unit_dims(list(result_type.shape))), [],
                                        ir.DenseI64ArrayAttr.get(list(result_type.shape)))
    result.replace_all_uses_with(expanded.result)
    init = transpose.operands[1].owner
    transpose.erase()
    if isinstance(init, ir.OpView) and init.name == "tensor.empty" and not list(init.results[0].uses):
        init.operation.erase()
