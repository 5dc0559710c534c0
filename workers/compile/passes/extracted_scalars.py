"""farm-extracted-scalars-as-operands: a scalar read out of a one-element tensor and used inside a
linalg.generic becomes an operand of that generic.

A model that scales by `x.abs().max().item()` lowers to a reduction into tensor<f32>, a `tensor.extract` of
its element, and a generic whose body uses the extracted scalar. That read is host code (a memref.load after
bufferization), which the host check refuses. As an input of the generic, read through a map of no results
(or of zeros), the element is a broadcast operand like any other: the reduction fuses or stays a kernel of its
own, and no value crosses to the host. No upstream pass turns a captured tensor.extract into an operand.
Runs with the clean-up, before the schedule.
"""
from __future__ import annotations

from workers.compile.mlir import body_ops, ir, indexing_maps, linalg_dialect, main_func

NAME = "farm-extracted-scalars-as-operands"


def _single_element_read(op) -> bool:
    """`op` is a tensor.extract of the one element of a static tensor (rank 0, or every dim 1)."""
    if op.name != "tensor.extract":
        return False
    source = op.operands[0].type
    return isinstance(source, ir.RankedTensorType) and source.has_static_shape and all(d == 1 for d in source.shape)


def _users_in_generics(value: ir.Value) -> list:
    """The linalg.generics whose bodies use `value` (captured from above)."""
    generics = []
    for use in value.uses:
        owner = use.owner.operation
        while owner is not None and owner.name not in ("linalg.generic", "func.func"):
            owner = owner.parent.operation if owner.parent is not None else None
        if owner is not None and owner.name == "linalg.generic" and owner not in generics:
            generics.append(owner)
    return generics


def _with_operand(generic, source: ir.Value, scalar: ir.Value) -> None:
    """Rebuild `generic` with `source` as one more input (after the others, read at its only element), its
    block argument taking the place of `scalar` in the body."""
    o = generic.operation
    n_inputs = len(o.operands) - len(o.results)
    operands = list(o.operands)
    maps = indexing_maps(o)
    loops = maps[0].n_dims
    element = ir.AffineMap.get(loops, 0, [ir.AffineConstantExpr.get(0) for _ in source.type.shape])
    with ir.InsertionPoint(o), o.location:
        new = linalg_dialect.GenericOp([r.type for r in o.results], [*operands[:n_inputs], source], operands[n_inputs:],
                                       ir.ArrayAttr.get([ir.AffineMapAttr.get(m)
                                                         for m in [*maps[:n_inputs], element, *maps[n_inputs:]]]),
                                       o.attributes["iterator_types"])
    body = o.regions[0].blocks[0]
    types = [a.type for a in body.arguments]
    block = new.regions[0].blocks.append(*types[:n_inputs], scalar.type, *types[n_inputs:])
    for i, old in enumerate(body.arguments):
        old.replace_all_uses_with(block.arguments[i if i < n_inputs else i + 1])
    for inner in list(body.operations):
        inner.operation.detach_from_parent()
        ir.InsertionPoint(block).insert(inner.operation)
    inside = block.arguments[n_inputs]
    for use in list(scalar.uses):
        if _within(use.owner, new.operation):
            use.owner.operands[use.operand_number] = inside
    for old, result in zip(o.results, new.results):
        old.replace_all_uses_with(result)
    o.erase()


def _within(op, ancestor) -> bool:
    """`op` is `ancestor` or nested in it."""
    while op is not None:
        if op.operation == ancestor:
            return True
        op = op.operation.parent
    return False


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if not _single_element_read(op.operation):
            continue
        scalar, source = op.operation.results[0], op.operation.operands[0]
        for generic in _users_in_generics(scalar):
            _with_operand(generic, source, scalar)
        if not list(scalar.uses):
            op.operation.erase()
