"""farm-scalar-unit-loop: every linalg.generic with a 0-D result gets a unit parallel loop.

A kernel is a tiled loop nest (scf.forall), and an op without loops cannot be tiled: a loss's mean, a
reduction to one value, and the scalar arithmetic after it (`sum / n`) would be left on the host. With a
leading unit loop whose result is tensor<1xT> (the 0-D init expanded, the result collapsed back for its
users) such an op is tiled, fused and mapped like any other. Its body's `linalg.index d` become
`linalg.index d+1` (cross-entropy's gather of each row's target read row 0 for every row before). Runs after
`linalg-fold-unit-extent-dims`, which would drop the loop again; canonicalization folds the init's
expand_shape into its fill.
"""
from __future__ import annotations

from workers.compile.mlir import body_ops, ir, main_func, ops_named, rebuilt_generic
from numba_cuda_mlir._mlir.dialects import linalg, tensor

NAME = "farm-scalar-unit-loop"


def _shifted(amap: ir.AffineMap, loops: int) -> ir.AffineMap:
    """`amap` over one more loop, in front: its dims renumbered d_i -> d_(i+1)."""
    dims = [ir.AffineDimExpr.get(i + 1) for i in range(amap.n_dims)]
    return ir.AffineMap.get(loops, amap.n_symbols, [e.compose(ir.AffineMap.get(amap.n_dims, 0, dims))
                                                     for e in amap.results])


def _rank0(value: ir.Value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) and value.type.rank == 0


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name != "linalg.generic" or not any(_rank0(r) for r in op.operation.results):
            continue
        _with_unit_loop(op)


def _with_unit_loop(op) -> None:
    o = op.operation
    n_inputs = len(o.operands) - len(o.results)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(o.attributes["indexing_maps"])]
    loops = maps[0].n_dims + 1
    unit = ir.AffineMap.get(loops, 0, [ir.AffineDimExpr.get(0)])
    with ir.InsertionPoint(o), o.location:
        inits = []
        for init in list(o.operands)[n_inputs:]:
            if _rank0(init):
                grown = ir.RankedTensorType.get([1], init.type.element_type)
                init = tensor.ExpandShapeOp(grown, init, ir.ArrayAttr.get([]), [], [1]).result
            inits.append(init)
        new_maps = [_shifted(m, loops) for m in maps[:n_inputs]] + [
            unit if _rank0(init) else _shifted(m, loops) for m, init in zip(maps[n_inputs:], list(o.operands)[n_inputs:])]
        iterators = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>"),
                                      *ir.ArrayAttr(o.attributes["iterator_types"])])
        new = rebuilt_generic(o, list(o.operands)[:n_inputs], inits, new_maps, iterators)
        for old, result in zip(o.results, new.results):
            if _rank0(old):
                result = tensor.CollapseShapeOp(old.type, result, ir.ArrayAttr.get([])).result
            old.replace_all_uses_with(result)
    o.erase()
    _shift_index_ops(new)


def _shift_index_ops(generic) -> None:
    """Each `linalg.index d` of the generic's body (not of a linalg op nested in it) reads loop d+1."""
    for index in ops_named(generic, "linalg.index"):
        if _owning_linalg(index) != generic.operation:
            continue
        dim = ir.IntegerAttr(index.attributes["dim"]).value
        with ir.InsertionPoint(index), index.location:
            index.results[0].replace_all_uses_with(linalg.IndexOp(dim + 1).result)
        index.erase()


def _owning_linalg(op):
    """The innermost linalg op whose region holds `op`."""
    parent = op.parent
    while not parent.name.startswith("linalg."):
        parent = parent.parent
    return parent.operation
