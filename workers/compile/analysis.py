"""What the schedule works on: the linalg ops of the model after the pre-schedule pipeline.

The schedule addresses ops by their position among the function's linalg ops (payload order), the
same order `transform.structured.match interface{LinalgOp}` returns, so transform.mlir and the
records agree without annotating the payload.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from workers.compile import mlir
from workers.compile.passes import registry
from workers.compile.pipeline import MAIN_SEQUENCE, pre_schedule_steps, prepare, schedule_module
from workers.records import OpInfo

ir = mlir.ir


@dataclass
class LinalgOpFacts:
    """Structure of one linalg op, read from its generalized form."""

    info: OpInfo
    operand_producers: list[int | None]  # per input operand: index of the linalg op defining it
    input_maps_identity: list[bool]  # per input operand: indexing map is the identity
    input_loops: list[list[int | None]]  # per input operand, per dim: the loop read there (mlir.operand_loops)
    init_producer: int | None  # linalg op defining the (first) init operand, e.g. a linalg.fill
    n_inputs: int  # operand index of the first init
    single_use: bool  # its result has exactly one use
    uses: int = 0  # uses of its results by any op (a reshape's and the return's too)
    input_dtypes: list[str] = field(default_factory=list)  # element type per input operand
    # its reduction folds each value into one accumulator (mlir.reduction_combiner), so a block's threads
    # share each output (tile_reduction_using_forall offsets each thread's linalg.index); an argmax's
    # value-and-index pair does not
    block_reducible: bool = False
    # ... and its body reads no loop index, so it also splits into partials over blocks:
    # structured.split_reduction reshapes the reduction loop without renumbering linalg.index
    splittable: bool = False
    lines: list[int] = field(default_factory=list)  # lines of model_linalg.mlir it comes from (mlir.source_lines)


def _family(op, iterator_types: list[str]) -> str:
    name = op.operation.name
    if name in ("linalg.matmul", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat",
                "linalg.batch_matvec", "linalg.contract"):
        return "matmul"
    if name.startswith("linalg.conv") or name.startswith("linalg.depthwise_conv"):
        return "conv"
    if name.startswith("linalg.pooling"):
        return "pooling"
    if name == "linalg.fill" or mlir.is_generic_fill(op):
        return "fill"
    if name in ("linalg.copy", "linalg.transpose", "linalg.broadcast"):
        return "copy"
    return "reduction" if "reduction" in iterator_types else "elementwise"


def _reads_an_operand_once(maps: list, n_inputs: int) -> bool:
    """Whether an input of a contraction is read over every loop (a matrix-vector product's matrix, as
    farm-vector-products-as-generics leaves it): each of its elements once, so the op has no operand reuse for a
    matmul's tiles and is a row reduction bound by reading that input."""
    return any(set(mlir.operand_loops(m)) == set(range(m.n_dims)) for m in maps[:n_inputs])


def _ints(op, attribute: str) -> list[int]:
    """A named op's integer list attribute (a conv's dilations, strides); [] where it has none."""
    return [int(d) for d in op.operation.attributes[attribute]] if attribute in op.operation.attributes else []


def linalg_ops(func) -> list:
    return [op for op in mlir.body_ops(func) if op.operation.name.startswith("linalg.")]


def _prepare_module() -> ir.Module:
    """The schedule's preparation steps alone (pipeline.prepare), in the caller's context."""
    module = schedule_module()
    with module.sequence(MAIN_SEQUENCE, "readonly") as root:
        prepare(root)
    return module.module


def prepared_payload(payload_text: str, fuse_elementwise: bool = True) -> ir.Module:
    """model_linalg.mlir as the schedule takes it: after pass_pipeline.txt's steps before the schedule
    (pipeline.pre_schedule_steps). In the caller's context."""
    module = mlir.parse(payload_text, "model_linalg.mlir")
    for step in pre_schedule_steps(fuse_elementwise):
        registry.run_step(step, module)
    return module


def analyze(payload_text: str, fuse_elementwise: bool = True) -> list[LinalgOpFacts]:
    """Prepare the payload (prepared_payload and the schedule's preparation steps) and describe each
    top-level linalg op."""
    with mlir.context():
        named = prepared_payload(payload_text, fuse_elementwise)
        mlir.apply_transform(named, _prepare_module(), MAIN_SEQUENCE)
        generic = ir.Module.parse(str(named))
        mlir.run_pipeline(generic, "builtin.module(linalg-generalize-named-ops)")
        named_ops = linalg_ops(mlir.main_func(named))
        generic_ops = linalg_ops(mlir.main_func(generic))
        position = {op.operation: i for i, op in enumerate(generic_ops)}
        facts = []
        for i, (named_op, op) in enumerate(zip(named_ops, generic_ops)):
            o = op.operation
            maps = mlir.indexing_maps(op)
            iterators = mlir.iterator_types(op)
            shapes = [list(v.type.shape) if isinstance(v.type, ir.ShapedType) else [] for v in o.operands]
            n_inputs = len(o.operands) - len(o.results)
            ranges = mlir.loop_ranges(maps, shapes, len(iterators))
            producers = []
            for v in o.operands:
                owner = v.owner if isinstance(v.owner, ir.Operation) else getattr(v.owner, "operation", None)
                producers.append(position.get(owner) if owner is not None else None)
            result = o.results[0]
            dtype = str(result.type.element_type)
            name = named_op.operation.name
            family = _family(named_op, iterators)
            if family == "reduction" and mlir.is_contraction(op) and not _reads_an_operand_once(maps, n_inputs):
                family = "matmul"
            flops = math.prod(ranges) * (2 if family in ("matmul", "conv") else 1)
            one_accumulator = "reduction" in iterators and mlir.reduction_combiner(op) is not None
            facts.append(LinalgOpFacts(
                info=OpInfo(index=i, name=name, family=family, loop_ranges=ranges,
                            iterator_types=iterators, dtype=dtype, flops=flops,
                            dilations=_ints(named_op, "dilations"), strides=_ints(named_op, "strides"),
                            output_loops=mlir.operand_loops(maps[n_inputs]) if len(maps) > n_inputs else []),
                operand_producers=producers[:n_inputs],
                input_maps_identity=[m == ir.AffineMap.get_identity(len(iterators)) for m in maps[:n_inputs]],
                input_loops=[mlir.operand_loops(m) for m in maps[:n_inputs]],
                init_producer=producers[n_inputs] if len(producers) > n_inputs else None,
                n_inputs=n_inputs,
                single_use=len(list(result.uses)) == 1,
                uses=sum(len(list(r.uses)) for r in o.results),
                block_reducible=one_accumulator,
                splittable=one_accumulator and not mlir.reads_loop_index(op),
                input_dtypes=[str(ir.ShapedType(v.type).element_type) if isinstance(v.type, ir.ShapedType)
                              else str(v.type) for v in o.operands[:n_inputs]],
                lines=mlir.source_lines(named_op.operation),
            ))
        return facts
