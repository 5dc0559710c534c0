"""farm-scales-after-contractions: a contraction one of whose factors is scaled by a tensor that no reduction
loop reads, or by a value the body does not vary (a constant), `out + (a / s) * b` over K, becomes the
contraction `out + a * b` followed by an elementwise op that divides (or multiplies) its result by s.

linalg-fuse-elementwise-ops fuses softmax's normalization into attention's product with V: the probabilities
divided by their row sums are a producer of that matmul, so the matmul's body reads the exponentials, the
sums and V. The op is then no contraction (is_contraction: a body of `out + a * b`), and the schedule ran it
as a reduction of one output per thread, each reading its own row and column (MinGPT's attention at 0.14x of
eager). With s constant along K, sum_k (a_k / s) b_k = (sum_k a_k b_k) / s: the contraction takes the matmul
templates (staged tiles), and the division is its epilogue, as flash attention defers the normalization.
scaled_dot_product_attention scales its queries and its keys each by 1/sqrt(sqrt(d)), a constant: both move
after the scores' contraction, which then reads the inputs as they are (no scaled copy of either).
Only where the accumulator starts at zero (a fill of 0.0), so that the scale applies to the whole sum.

Runs after linalg-fuse-elementwise-ops (which would fuse the scale back in) and before
farm-collapse-contraction-loops, which may then collapse the new contraction's loops.
"""
from __future__ import annotations

from dataclasses import dataclass

from numba_cuda_mlir._mlir.dialects import arith, linalg, tensor

from workers.compile.mlir import (accumulated_product, body_ops, defining_op, indexing_maps, ir, iterator_types,
                                  main_func, operand_loops)
from workers.compile.passes.contraction_operands_apart import Factor, clone_ops, factor_of

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


@dataclass
class Scale:
    """A scale of one factor: `name` (arith.divf or arith.mulf) by the input at `position`, or (position
    None) by `invariant`, a value the body computes from values outside it (a constant's truncation)."""

    name: str
    position: int | None = None
    invariant: Factor | None = None


def scaled_contraction(op) -> tuple[list[int], list[Scale]] | None:
    """For `op` of body `out + x * y`, each of x and y an input or an input scaled (`/ s`, `* s`) by an input s
    that only the output's loops index or by a body invariant, with at least one scale and an accumulator
    filled with zero: the positions of the two factors' inputs and the scales. Else None."""
    o = op.operation
    iterators = iterator_types(op)
    if len(o.results) != 1 or "reduction" not in iterators or not _zero_fill(o.operands[-1]):
        return None
    maps = indexing_maps(op)
    if any(loop is None for loop in operand_loops(maps[-1])):
        return None
    block = o.regions[0].blocks[0]
    args = list(block.arguments)
    operations = list(block.operations)
    product = accumulated_product(op, floats_only=True)
    if product is None or len(operations) > 9:  # more than two scales' worth
        return None
    mul = product[1]
    factors, scales = [], []
    for value in mul.operands:
        scaled = defining_op(value, SCALES)
        if scaled is not None:
            u, s = scaled.operands
            if scaled.name == "arith.mulf" and _scale(s, o, maps, iterators) is None:
                u, s = s, u
            scale = _scale(s, o, maps, iterators)
            if scale is None or u not in args[:-1]:
                return None
            scale.name = scaled.name
            scales.append(scale)
            value = u
        if value not in args[:-1]:
            return None
        factors.append(args.index(value))
    # mul, add, yield, the scales and what computes invariant scales: nothing else reads the factors
    invariant_ops = {inner.operation for scale in scales if scale.invariant for inner in scale.invariant.ops}
    if not scales or len(operations) != 3 + len(scales) + len(invariant_ops):
        return None
    return factors, scales


def _scale(value: ir.Value, generic, maps: list, iterators: list[str]) -> Scale | None:
    """`value` as a Scale (its arith op still to be named): an input that only parallel loops index, each a
    plain dim, or a value the body computes from values defined outside it; else None."""
    args = list(generic.regions[0].blocks[0].arguments)
    if value in args[:-1]:
        loops = operand_loops(maps[args.index(value)])
        ok = all(d is not None and iterators[d] == "parallel" for d in loops)
        return Scale("", position=args.index(value)) if ok else None
    factor = factor_of(value, generic)
    return Scale("", invariant=factor) if factor is not None and not factor.inputs else None


def _factor_out(op, factors: list[int], scales: list[Scale]) -> None:
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
        # one elementwise op applies the scales in turn, as the elementwise fusion would merge them (an input
        # scale over the output's loops: its dims where the output has them)
        tensors = [scale.position for scale in scales if scale.invariant is None]
        inputs = [contraction.result] + [o.operands[position] for position in tensors]
        input_maps = [identity] + [ir.AffineMap.get(n_out, 0, [ir.AffineDimExpr.get(out_loops.index(d))
                                                              for d in operand_loops(maps[position])])
                                   for position in tensors]
        empty = tensor.EmptyOp(list(init.type.shape), element).result
        scaled = linalg.GenericOp([init.type], inputs, [empty],
                                  ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in input_maps + [identity]]),
                                  ir.ArrayAttr.get([parallel] * n_out))
        body = scaled.regions[0].blocks.append(*[element] * (len(inputs) + 1))
        with ir.InsertionPoint(body):
            value, mapped = body.arguments[0], {}
            for scale in scales:
                if scale.invariant is None:
                    by = body.arguments[1 + tensors.index(scale.position)]
                else:
                    clone_ops(scale.invariant.ops, mapped)
                    by = mapped.get(scale.invariant.value, scale.invariant.value)
                value = ir.Operation.create(scale.name, results=[element], operands=[value, by]).result
            linalg.YieldOp([value])
        result = scaled.result
        o.results[0].replace_all_uses_with(result)
    o.erase()
