"""farm-contraction-operands-apart: a contraction into which linalg-fuse-elementwise-ops fused the elementwise
producer of an operand, `out + f(a...) * g(b...)` over K, computes f(a...) (and g(b...)) in a linalg.generic of
its own first and then the contraction `out + x * y`.

The fused body is no contraction (is_contraction: `out + a * b`), so the schedule ran the op as a reduction of
one output per thread, each reading its own row and column with no reuse: scaled_dot_product_attention's
scores (its queries and keys each scaled by 1/sqrt(sqrt(d)), 550 GFLOP) and its product with the
probabilities, where a row of -inf masks to zeros (a select), ran at 0.10x of eager. Apart, the contraction
takes the matmul templates (staged tiles); each operand's computation is an elementwise kernel over that
operand's loops, which writes it once (the fused form computed it again for every output that reads it).

Only where the body is exactly the add of the product, each factor is computed from inputs the other factor
does not read (and from values the body does not define, such as a constant's truncation) over fewer than
all of the loops, every input's map is a plain permutation of loops, and the body reads no loop index. A factor that is an input already
stays one. farm-scales-after-contractions runs first: a scale that no K loop reads moves after the
contraction without writing the scaled operand. Runs after linalg-fuse-elementwise-ops and before
farm-collapse-contraction-loops, which may then collapse the new contraction's loops.
"""
from __future__ import annotations

from dataclasses import dataclass

from numba_cuda_mlir._mlir.dialects import arith, linalg, tensor

from workers.compile.mlir import (accumulated_product, body_ops, indexing_maps, ir, is_contraction, iterator_types,
                                  main_func, operand_loops, reads_loop_index)

NAME = "farm-contraction-operands-apart"


@dataclass
class Factor:
    """One factor of the product: the value the body multiplies, the body ops that compute it (body order) and
    the input positions it reads."""

    value: ir.Value
    ops: list
    inputs: list[int]


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name == "linalg.generic" and (factors := fused_factors(op)) is not None:
            _apart(op, factors)


def fused_factors(op) -> tuple[Factor, Factor] | None:
    """The two factors of `op`'s product where `op` is a contraction with an operand's computation fused into
    its body (see the module's docstring), else None."""
    o = op.operation
    if len(o.results) != 1 or "reduction" not in iterator_types(op) or is_contraction(op) or reads_loop_index(op):
        return None
    maps = indexing_maps(op)
    if any(None in operand_loops(m) for m in maps) or (product := accumulated_product(op, floats_only=True)) is None:
        return None
    add, mul = product
    factors = [factor_of(v, o) for v in mul.operands]
    if None in factors:
        return None
    x, y = factors
    if any({d for i in f.inputs for d in operand_loops(maps[i])} == set(range(len(iterator_types(op))))
           for f in factors):
        return None  # a factor over every loop is no operand of a product: written apart, as large as the loops
    computed = {inner.operation for f in factors for inner in f.ops}
    operations = list(o.regions[0].blocks[0].operations)[:-1]  # but the yield
    others = [inner for inner in operations if inner.operation not in (add.operation, mul.operation)]
    if set(x.inputs) & set(y.inputs) or not x.inputs or not y.inputs or (not x.ops and not y.ops) \
            or any(inner.operation not in computed for inner in others):
        return None
    return x, y


def factor_of(value: ir.Value, generic) -> Factor | None:
    """`value`, in the body of `generic`, as a Factor: the body ops it is computed by and the inputs they
    read (none: a value invariant in the body); None where it reads the accumulator, or an op with a region."""
    block = generic.regions[0].blocks[0]
    args, operations = list(block.arguments), list(block.operations)
    if value in args:
        return Factor(value, [], [args.index(value)]) if value != args[-1] else None
    needed, inputs, todo = set(), set(), [value]
    while todo:
        v = todo.pop()
        if v in args:
            if v == args[-1]:
                return None
            inputs.add(args.index(v))
            continue
        owner = v.owner
        if not isinstance(owner, ir.OpView) or owner.operation.parent != generic or owner.operation in needed:
            continue  # defined outside the body (a constant): read as it is
        if len(owner.operation.regions):
            return None
        needed.add(owner.operation)
        todo += list(owner.operands)
    return Factor(value, [inner for inner in operations if inner.operation in needed], sorted(inputs))


def clone_ops(ops: list, mapped: dict) -> None:
    """Clone `ops` (region-less, in order) at the current insertion point, their operands through `mapped`
    (old value -> new), which gains their results."""
    for inner in ops:
        clone = ir.Operation.create(inner.operation.name, results=[r.type for r in inner.results],
                                    operands=[mapped.get(v, v) for v in inner.operands],
                                    attributes={name: inner.operation.attributes[name]
                                                for name in inner.operation.attributes})
        for old, new in zip(inner.results, clone.results):
            mapped[old] = new


def _apart(op, factors: tuple[Factor, Factor]) -> None:
    o = op.operation
    maps = indexing_maps(op)
    ranges = _loop_ranges(op, maps)
    n_loops = len(ranges)
    init = o.operands[-1]
    with ir.InsertionPoint(o), o.location:
        operands, operand_maps = [], []
        for factor in factors:
            if not factor.ops:  # an input already
                operands.append(o.operands[factor.inputs[0]])
                operand_maps.append(maps[factor.inputs[0]])
                continue
            loops = sorted({d for i in factor.inputs for d in operand_loops(maps[i])})
            operands.append(_computed(op, factor, loops, [ranges[d] for d in loops], maps))
            operand_maps.append(ir.AffineMap.get(n_loops, 0, [ir.AffineDimExpr.get(d) for d in loops]))
        element = init.type.element_type
        contraction = linalg.GenericOp([init.type], operands, [init],
                                       ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in operand_maps + [maps[-1]]]),
                                       o.attributes["iterator_types"])
        body = contraction.regions[0].blocks.append(*[ir.RankedTensorType(v.type).element_type for v in operands],
                                                    element)
        with ir.InsertionPoint(body):
            product = arith.MulFOp(body.arguments[0], body.arguments[1]).result
            linalg.YieldOp([arith.AddFOp(body.arguments[2], product).result])
        o.results[0].replace_all_uses_with(contraction.result)
    o.erase()


def _computed(op, factor: Factor, loops: list[int], shape: list[int], maps: list) -> ir.Value:
    """A linalg.generic over `loops` (of extents `shape`) that computes `factor` from its inputs, as `op`'s
    body did: the factor's ops cloned in order."""
    o = op.operation
    element = factor.value.type
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    inputs = [o.operands[i] for i in factor.inputs]
    input_maps = [ir.AffineMap.get(len(loops), 0, [ir.AffineDimExpr.get(loops.index(d))
                                                    for d in operand_loops(maps[i])]) for i in factor.inputs]
    empty = tensor.EmptyOp(shape, element).result
    generic = linalg.GenericOp([empty.type], inputs, [empty],
                               ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in
                                                 input_maps + [ir.AffineMap.get_identity(len(loops))]]),
                               ir.ArrayAttr.get([parallel] * len(loops)))
    args = list(o.regions[0].blocks[0].arguments)
    block = generic.regions[0].blocks.append(*[args[i].type for i in factor.inputs], element)
    mapped = {args[i]: block.arguments[j] for j, i in enumerate(factor.inputs)}
    with ir.InsertionPoint(block):
        clone_ops(factor.ops, mapped)
        linalg.YieldOp([mapped[factor.value]])
    return generic.result


def _loop_ranges(op, maps: list) -> list[int]:
    """Each loop's extent, from the static shapes of the operands that read it."""
    ranges: dict[int, int] = {}
    for amap, value in zip(maps, op.operation.operands):
        for dim, loop in zip(ir.RankedTensorType(value.type).shape, operand_loops(amap)):
            ranges.setdefault(loop, dim)
    return [ranges[d] for d in range(len(iterator_types(op)))]
