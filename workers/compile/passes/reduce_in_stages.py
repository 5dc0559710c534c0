"""farm-reduce-in-stages: a reduction over several loops that farm-collapse-reduction-loops cannot make one
reduces in two linalg.generics: over its inner reduction loops into partials, then over the rest.

The templates spread a reduction over threads along one reduction loop, so a reduction over loops that do
not collapse kept one thread per output looping over all of them: HingeLoss's mean of
clamp(1 - p * t) over 32768 x 32768 (t is read per column, through one of the two loops) in one thread,
BatchNorm's statistics over N, H and W (C lies between N and H) in one thread per channel. In two stages,
the first reduces every (output, outer loop) pair's inner loops, as many outputs as the templates fill a
GPU with (a row reduction per row of p; H x W per image and channel, which farm-collapse-reduction-loops
then makes one loop), and the second reduces those partials over the outer loops.

It applies to a linalg.generic with one result, no loop index in its body, no contraction, plain dims in
every indexing map, static shapes, fewer than STAGE_MAX_OUTPUTS outputs, and a body that combines one
value into the accumulator with an associative operation (COMBINERS: sum, product, max, min; the partials
start at its identity). The sum's order changes, as any split of a reduction changes it. The first stage
reduces over the longest innermost run of consecutive reduction loops that collapses (every operand reads
it as consecutive dims or not at all) and leaves the second stage a loop.

Runs before farm-collapse-reduction-loops, which leaves alone what it collapses and collapses the stages'
runs; after linalg-fuse-elementwise-ops and linalg-fold-unit-extent-dims.
"""
from __future__ import annotations

import math

from numba_cuda_mlir._mlir.dialects import arith, linalg, tensor

from workers.compile.mlir import (body_ops, ir, indexing_maps, is_contraction, iterator_types, loop_ranges, main_func,
                                  rebuilt_generic, reduction_combiner)
from workers.compile.passes.collapse_reduction_loops import collapsible_loops, run_position

NAME = "farm-reduce-in-stages"
# more outputs than this fill the GPU with one thread each (132 SMs x 256 threads)
STAGE_MAX_OUTPUTS = 1 << 15
# the float accumulators' operations (mlir.reduction_combiner) -> their identity, the partials' start
COMBINERS = {"arith.addf": 0.0, "arith.mulf": 1.0, "arith.maximumf": -math.inf, "arith.maxnumf": -math.inf,
             "arith.minimumf": math.inf, "arith.minnumf": math.inf}


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name == "linalg.generic" and (stages := staged_loops(op)):
            _split(op, *stages)


def staged_loops(op) -> tuple[list[int], list[int]] | None:
    """(the first stage's reduction loops, the second's) of `op` where it reduces in two stages (see the
    module's docstring); else None."""
    o = op.operation
    iterators = iterator_types(op)
    loops = [d for d, it in enumerate(iterators) if it == "reduction"]
    if len(loops) < 2 or len(o.results) != 1 or not isinstance(o.results[0].type.element_type, ir.FloatType) \
            or collapsible_loops(op):
        return None
    if is_contraction(op) or reduction_combiner(op) not in COMBINERS:
        return None
    if not all(isinstance(e, ir.AffineDimExpr) for m in indexing_maps(op) for e in m.results):
        return None
    if not all(isinstance(v.type, ir.RankedTensorType) and v.type.has_static_shape for v in o.operands):
        return None
    ranges = _loop_ranges(op)
    if ranges is None or math.prod(r for r, it in zip(ranges, iterators) if it == "parallel") >= STAGE_MAX_OUTPUTS:
        return None
    start = len(loops) - 1
    while start > 0 and loops[start - 1] == loops[start] - 1:
        start -= 1
    start = max(start, 1)  # the second stage keeps at least one loop
    maps = indexing_maps(op)
    while start < len(loops) - 1 and any(run_position(m, loops[start:]) is None for m in maps):
        start += 1  # a run that farm-collapse-reduction-loops can make one loop
    return loops[start:], loops[:start]


def _loop_ranges(op) -> list[int] | None:
    """Each loop's extent; None where an operand dim fixes none."""
    o = op.operation
    ranges = loop_ranges(indexing_maps(op), [list(v.type.shape) for v in o.operands], len(iterator_types(op)))
    return None if 0 in ranges else ranges


def _renumbered(amap: ir.AffineMap, kept: list[int]) -> ir.AffineMap:
    return ir.AffineMap.get(len(kept), 0, [ir.AffineDimExpr.get(kept.index(e.position)) for e in amap.results])


def _split(op, inner: list[int], outer: list[int]) -> None:
    o = op.operation
    iterators = iterator_types(op)
    ranges = _loop_ranges(op)
    maps = indexing_maps(op)
    n_loops, n_inputs = len(iterators), len(o.operands) - 1
    kept = [d for d in range(n_loops) if d not in inner]  # the partials' dims, in loop order
    init = o.operands[n_inputs]
    element = init.type.element_type
    name = reduction_combiner(op)
    with ir.InsertionPoint(o), o.location:
        identity = arith.ConstantOp(element, ir.FloatAttr.get(element, COMBINERS[name])).result
        empty = tensor.EmptyOp([ranges[d] for d in kept], element).result
        partials_init = linalg.fill(identity, outs=[empty])
        # stage 1: the op itself, its outer reduction loops now parallel, into the partials
        partial_map = ir.AffineMap.get(n_loops, 0, [ir.AffineDimExpr.get(d) for d in kept])
        stage1_iterators = ir.ArrayAttr.get([ir.Attribute.parse(
            f"#linalg.iterator_type<{'reduction' if d in inner else 'parallel'}>") for d in range(n_loops)])
        stage1 = rebuilt_generic(o, list(o.operands[:n_inputs]), [partials_init], maps[:n_inputs] + [partial_map],
                                 stage1_iterators)
        # stage 2: the partials over the outer loops, into the op's own init
        stage2_iterators = ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{iterators[d]}>")
                                             for d in kept])
        identity_map = ir.AffineMap.get_identity(len(kept))
        stage2 = linalg.GenericOp([init.type], [stage1.result], [init],
                                  ir.ArrayAttr.get([ir.AffineMapAttr.get(identity_map),
                                                    ir.AffineMapAttr.get(_renumbered(maps[n_inputs], kept))]),
                                  stage2_iterators)
        block = stage2.regions[0].blocks.append(element, element)
        with ir.InsertionPoint(block):
            folded = ir.Operation.create(name, results=[element], operands=[block.arguments[0], block.arguments[1]])
            linalg.YieldOp([folded.result])
        o.results[0].replace_all_uses_with(stage2.result)
    o.erase()
