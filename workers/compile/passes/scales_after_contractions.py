"""farm-scales-after-contractions: a contraction one of whose factors is scaled by a tensor that no reduction
loop reads, `out + (a / s) * b` over K, becomes the contraction `out + a * b` followed by an elementwise op
that divides (or multiplies) its result by s.

linalg-fuse-elementwise-ops fuses softmax's normalization into attention's product with V: the probabilities
divided by their row sums are a producer of that matmul, so the matmul's body reads the exponentials, the
sums and V. The op is then no contraction (is_contraction: a body of `out + a * b`), and the schedule ran it
as a reduction of one output per thread, each reading its own row and column (MinGPT's attention at 0.14x of
eager). With s constant along K, sum_k (a_k / s) b_k = (sum_k a_k b_k) / s: the contraction takes the matmul
templates (staged tiles), and the division is its epilogue, as flash attention defers the normalization.
Only where the accumulator starts at zero (a fill of 0.0), so that the scale applies to the whole sum.

Runs after linalg-fuse-elementwise-ops (which would fuse the scale back in) and before
farm-collapse-contraction-loops, which may then collapse the new contraction's loops.
"""
from __future__ import annotations

from numba_cuda_mlir._mlir.dialects import arith, linalg, tensor

from workers.compile.mlir import body_ops, defining_op, indexing_maps, ir, iterator_types, main_func, operand_loops

NAME = "farm-scales-after-contractions"
SCALES = ("arith.divf", "arith.mulf")


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name == "linalg.generic" and (match := scaled_contraction(op)) is not None:
            _factor_out(op, *match)


def _zero_fill(value: ir.Value) -> bool:
    fill = defining_op(value, ("linalg.fill",))
    constant = fill and defining_op(fill.operands[0], ("arith.constant",))
    return constant is not None and isinstance(constant.attributes["value"], ir.FloatAttr) \
        and ir.FloatAttr(constant.attributes["value"]).value == 0.0


def scaled_contraction(op) -> tuple[list[int], list[tuple[int, str]]] | None:
    """For `op` of body `out + x * y`, each of x and y an input or an input scaled (`/ s`, `* s`) by an input s
    that only the output's loops index, with at least one scale and an accumulator filled with zero: the
    positions of the two factors' inputs and each scale (position, arith op). Else None."""
    o = op.operation
    iterators = iterator_types(op)
    if len(o.results) != 1 or "reduction" not in iterators or not _zero_fill(o.operands[-1]):
        return None
    maps = indexing_maps(op)
    if any(loop is None for loop in operand_loops(maps[-1])):
        return None
    block = o.regions[0].blocks[0]
    args = list(block.arguments)
    out = args[-1]
    operations = list(block.operations)
    add = defining_op(operations[-1].operands[0], ("arith.addf",))
    if add is None or out not in list(add.operands) or len(operations) > 5:
        return None
    mul = defining_op(add.operands[1] if add.operands[0] == out else add.operands[0], ("arith.mulf",))
    if mul is None:
        return None
    factors, scales = [], []
    for value in mul.operands:
        scaled = defining_op(value, SCALES)
        if scaled is not None:
            u, s = scaled.operands
            if scaled.name == "arith.mulf" and _scale_position(s, args, maps, iterators) is None:
                u, s = s, u
            position = _scale_position(s, args, maps, iterators)
            if position is None or u not in args[:-1]:
                return None
            scales.append((position, scaled.name))
            value = u
        if value not in args[:-1]:
            return None
        factors.append(args.index(value))
    expected = 3 + len(scales)  # mul, add, yield and the scales: nothing else reads the factors
    if not scales or len(operations) != expected:
        return None
    return factors, scales


def _scale_position(value: ir.Value, args: list, maps: list, iterators: list[str]) -> int | None:
    """The input position of `value` if it is an input that only parallel loops index, each a plain dim."""
    if value not in args[:-1]:
        return None
    loops = operand_loops(maps[args.index(value)])
    return args.index(value) if all(d is not None and iterators[d] == "parallel" for d in loops) else None


def _factor_out(op, factors: list[int], scales: list[tuple[int, str]]) -> None:
    o = op.operation
    maps = indexing_maps(op)
    init = o.operands[-1]
    element = init.type.element_type
    out_loops = operand_loops(maps[-1])
    n_out = len(out_loops)
    identity = ir.AffineMap.get_identity(n_out)
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(o), o.location:
        contraction = linalg.GenericOp([init.type], [o.operands[i] for i in factors], [init],
                                       ir.ArrayAttr.get([ir.AffineMapAttr.get(maps[i]) for i in factors + [-1]]),
                                       o.attributes["iterator_types"])
        body = contraction.regions[0].blocks.append(element, element, element)
        with ir.InsertionPoint(body):
            product = arith.MulFOp(body.arguments[0], body.arguments[1]).result
            linalg.YieldOp([arith.AddFOp(body.arguments[2], product).result])
        result = contraction.result
        for position, name in scales:  # the scale over the output's loops: its dims where the output has them
            scale_map = ir.AffineMap.get(n_out, 0, [ir.AffineDimExpr.get(out_loops.index(d))
                                                    for d in operand_loops(maps[position])])
            empty = tensor.EmptyOp(list(init.type.shape), element).result
            scaled = linalg.GenericOp([init.type], [result, o.operands[position]], [empty],
                                      ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in (identity, scale_map, identity)]),
                                      ir.ArrayAttr.get([parallel] * n_out))
            body = scaled.regions[0].blocks.append(element, element, element)
            with ir.InsertionPoint(body):
                applied = ir.Operation.create(name, results=[element], operands=list(body.arguments[:2]))
                linalg.YieldOp([applied.result])
            result = scaled.result
        o.results[0].replace_all_uses_with(result)
    o.erase()
