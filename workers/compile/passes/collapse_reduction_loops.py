"""farm-collapse-reduction-loops: a linalg.generic that reduces over a run of several loops reduces over
one loop of their product instead.

The templates spread a reduction over the grid or a block's threads along one reduction loop
(templates.wants_split): a loss's mean over 32768 x 32768 elements (two loops once the elementwise fusion
has folded the squared difference into it) ran in one thread, LayerNorm's statistics over 64 x 256 x 256
in one thread per row. The loops d_a..d_b collapse where they are all the op's reduction loops, every
operand that reads them reads them as consecutive dims in that order (a tensor.collapse_shape then makes
those dims one) and through no other dim, the body asks for no loop index, and the op is no contraction
(farm-collapse-contraction-loops collapses a matmul's loops).

Runs after linalg-fuse-elementwise-ops, whose reshape propagation would expand the loops again to fuse a
producer, and after linalg-fold-unit-extent-dims; before farm-scalar-unit-loop.
"""
from __future__ import annotations

import math

from numba_cuda_mlir._mlir.dialects import linalg, tensor

from workers.compile.mlir import (body_ops, ir, indexing_maps, is_contraction, iterator_types, main_func, ops_named,
                                  reassociation_attr, rebuilt_generic)

NAME = "farm-collapse-reduction-loops"


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name == "linalg.generic" and (loops := collapsible_loops(op)):
            collapse_loops(op, loops)


def _dims(expr: ir.AffineExpr) -> set[int]:
    if isinstance(expr, ir.AffineDimExpr):
        return {expr.position}
    if isinstance(expr, ir.AffineBinaryExpr):
        return _dims(expr.lhs) | _dims(expr.rhs)
    return set()


def run_position(amap: ir.AffineMap, loops: list[int]) -> int | None:
    """Where `loops` sit among `amap`'s results as consecutive plain dims in order; -1 where no result
    reads them; None where they are read otherwise."""
    reading = [i for i, e in enumerate(amap.results) if _dims(e) & set(loops)]
    if not reading:
        return -1
    plain = [e.position if isinstance(e, ir.AffineDimExpr) else None for e in amap.results]
    if reading != list(range(reading[0], reading[0] + len(loops))) or [plain[i] for i in reading] != loops:
        return None
    return reading[0]


def collapsible_loops(op) -> list[int]:
    """The run of reduction loops of `op` that collapses into one (see the module's docstring), or []."""
    iterators = iterator_types(op)
    loops = [d for d, it in enumerate(iterators) if it == "reduction"]
    if len(loops) < 2 or loops != list(range(loops[0], loops[-1] + 1)):
        return []
    if is_contraction(op) or not reads_run_in_order(op, loops):
        return []
    return loops


def reads_run_in_order(op, loops: list[int]) -> bool:
    """Whether every operand of `op` reads the loops `loops` as consecutive static dims in their order, or not
    at all, and the body asks for no loop index: then they can collapse into one loop (collapse_loops)."""
    o = op.operation
    if ops_named(o, "linalg.index", first_only=True):
        return False
    for amap, value in zip(indexing_maps(op), o.operands):
        at = run_position(amap, loops)
        if at is None or at >= 0 and (not isinstance(value.type, ir.RankedTensorType)
                                      or any(value.type.is_dynamic_dim(at + i) for i in range(len(loops)))):
            return False
    return True


def collapse_loops(op, loops: list[int]) -> None:
    """Replace `op` by a generic whose loops `loops` (reads_run_in_order) are one loop of their product: each
    operand that reads them through a tensor.collapse_shape (an init that is a fill of a tensor.empty through
    a fill of its own, which the schedule fuses as before), each collapsed result expanded back."""
    o = op.operation
    first, removed = loops[0], len(loops) - 1
    n_loops = len(ir.ArrayAttr(o.attributes["iterator_types"]))
    # old loop -> new loop: the run becomes its first loop, the loops after it move up
    renumber = ir.AffineMap.get(n_loops - removed, 0, [
        ir.AffineDimExpr.get(d if d <= first else max(d - removed, first)) for d in range(n_loops)])
    n_inputs = len(o.operands) - len(o.results)
    operands, maps, groups_of = [], [], {}
    with ir.InsertionPoint(o), o.location:
        for i, (amap, value) in enumerate(zip(indexing_maps(op), o.operands)):
            results = [e.compose(renumber) for e in amap.results]
            at = run_position(amap, loops)
            if at >= 0:
                shape = list(value.type.shape)
                groups = [[i] for i in range(at)] + [list(range(at, at + len(loops)))] + \
                    [[i] for i in range(at + len(loops), len(shape))]
                collapsed = ir.RankedTensorType.get(shape[:at] + [math.prod(shape[at:at + len(loops)])]
                                                    + shape[at + len(loops):], value.type.element_type)
                value = _fresh_fill(value, collapsed) or tensor.CollapseShapeOp(collapsed, value,
                                                                                reassociation_attr(groups)).result
                groups_of[i] = groups
                results = results[:at + 1] + results[at + len(loops):]
            operands.append(value)
            maps.append(ir.AffineMap.get(n_loops - removed, 0, results))
        iterators = ir.ArrayAttr.get([it for d, it in enumerate(ir.ArrayAttr(o.attributes["iterator_types"]))
                                      if d not in loops[1:]])
        new = rebuilt_generic(o, operands[:n_inputs], operands[n_inputs:], maps, iterators)
        for i, (old, result) in enumerate(zip(o.results, new.results)):
            if n_inputs + i in groups_of:
                result = tensor.ExpandShapeOp(old.type, result, reassociation_attr(groups_of[n_inputs + i]), [],
                                              ir.DenseI64ArrayAttr.get(list(old.type.shape))).result
            old.replace_all_uses_with(result)
    replaced = [v.owner for v in o.operands]
    o.erase()
    for producer in replaced:  # a fill that a fresh one replaced, and its tensor.empty, unless used elsewhere
        while isinstance(producer, ir.OpView) and producer.name in ("linalg.fill", "tensor.empty") \
                and all(not list(r.uses) for r in producer.results):
            before = producer.operands[1].owner if producer.name == "linalg.fill" else None
            producer.operation.erase()
            producer = before


def _fresh_fill(value: ir.Value, collapsed: ir.RankedTensorType) -> ir.Value | None:
    """A fill of `collapsed` with the value that `value`, a fill of a tensor.empty, fills; None for any other
    value."""
    fill = value.owner
    if not (isinstance(fill, ir.OpView) and fill.name == "linalg.fill" and isinstance(fill.operands[1].owner, ir.OpView)
            and fill.operands[1].owner.name == "tensor.empty"):
        return None
    empty = tensor.EmptyOp(collapsed.shape, collapsed.element_type).result
    return linalg.fill(fill.operands[0], outs=[empty])
