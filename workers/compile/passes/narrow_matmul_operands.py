"""farm-narrow-matmul-operands: a matmul of operands extended from one narrow float type multiplies the
narrow tensors (torch's addmm of an f16 nn.Linear with a bias extends x and W^T to f32), so it reaches tensor
cores. Runs after the clean-up, before the schedule.
"""
from __future__ import annotations

from workers.compile.mlir import body_ops, ir, linalg_dialect, main_func


def _extended(value) -> ir.Value | None:
    """The tensor that `value` extends elementwise (by a linalg.generic of identity maps whose body is
    one arith.extf), else None."""
    op = getattr(value.owner, "operation", None)
    if op is None or op.name != "linalg.generic" or len(op.operands) != 2:
        return None
    if [o.operation.name for o in op.regions[0].blocks[0].operations] != ["arith.extf", "linalg.yield"]:
        return None
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return op.operands[0] if all(m == ir.AffineMap.get_identity(m.n_dims) for m in maps) else None


PLAIN_MATMUL_MAPS = ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"]


def narrow_matmul_operands(module: ir.Module) -> None:
    """A linalg.matmul of two tensors of one narrow float type extended by elementwise ops (torch's
    addmm of an f16 nn.Linear with a bias extends x and W^T to f32) multiplies the narrow tensors
    instead: linalg.matmul extends its operands to the accumulator's type itself (the same arithmetic),
    and tensor cores take 16-bit operands. The extensions, left without uses, go at the next cleanup."""
    for op in body_ops(main_func(module)):
        if op.operation.name != "linalg.matmul":
            continue
        maps = [str(ir.AffineMapAttr(a).value) for a in ir.ArrayAttr(op.operation.attributes["indexing_maps"])]
        if maps != PLAIN_MATMUL_MAPS:
            continue  # the rebuilt matmul would have the plain ones
        a, b, init = op.operation.operands
        narrow = [_extended(a), _extended(b)]
        if any(v is None for v in narrow) or narrow[0].type.element_type != narrow[1].type.element_type:
            continue
        with ir.InsertionPoint(op), op.location:
            narrowed = linalg_dialect.matmul(*narrow, outs=[init])
        op.operation.results[0].replace_all_uses_with(narrowed)
        op.operation.erase()
