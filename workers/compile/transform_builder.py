"""transform.mlir built from the bindings' typed Transform ops.

Each schedule step is a call that takes handles (ir.Value) and returns the handles it makes, so steps are
linked by Python values, not by names in text. A step's results are named after it (a NameLoc, which the
printer uses as the SSA prefix: `name=` below), so the printed transform.mlir reads as before. Calls build at
the current insertion point (TransformModule.sequence opens one); `ip=` is never passed.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from workers.compile import mlir
from numba_cuda_mlir._mlir.dialects import transform
from numba_cuda_mlir._mlir.dialects.transform import structured
from numba_cuda_mlir._mlir.dialects.transform import loop as loop_ops

ir = mlir.ir
Handle = ir.Value


def any_op() -> ir.Type:
    return transform.AnyOpType.get()


def _named(name: str | None) -> ir.Location | None:
    return ir.Location.name(name) if name else None


class TransformModule:
    """A transform module: named sequences of Transform ops, printed with each handle's name."""

    def __init__(self) -> None:
        self.module = ir.Module.create()
        self.module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()

    @contextlib.contextmanager
    def sequence(self, name: str, root: str = "consumed") -> Iterator[Handle]:
        """A named sequence of one payload handle (`root`: how it treats it, "consumed" or "readonly");
        the block yields that handle, and the sequence ends with transform.yield."""
        with ir.InsertionPoint(self.module.body):
            seq = transform.NamedSequenceOp(name, [any_op()], [], arg_attrs=[{f"transform.{root}": ir.UnitAttr.get()}])
        with ir.InsertionPoint(seq.body):
            yield seq.bodyTarget
            transform.YieldOp()

    def add_text(self, text: str) -> None:
        """Named sequences given as text, for ops the bindings have no class for (transform.match.structured)."""
        parsed = ir.Module.parse(f"module attributes {{transform.with_named_sequence}} {{\n{text}\n}}")
        for op in list(parsed.body.operations):
            self.module.body.append(op)

    def text(self) -> str:
        if not self.module.operation.verify():
            raise mlir.MlirError("the transform module does not verify")
        return self.module.operation.get_asm(use_name_loc_as_prefix=True, assume_verified=True)


def attribute(text: str) -> ir.Attribute:
    """An attribute of a dialect that the bindings give no builder for (#gpu.block<x>, ...)."""
    return ir.Attribute.parse(text)


def i64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)


def match(target: Handle, ops: Sequence[str] | None = None, *, interface: str | None = None,
          attributes: dict[str, int] | None = None, name: str | None = None) -> Handle:
    """The ops in `target` named `ops` (or of `interface`), with these i64 attributes."""
    op_attrs = {k: i64(v) for k, v in attributes.items()} if attributes else None
    return structured.MatchOp(any_op(), target, ops=ops, op_attrs=op_attrs, loc=_named(name),
                              interface=getattr(structured.MatchInterfaceEnum, interface) if interface else None).result


def split(handle: Handle, n: int, name: str) -> list[Handle]:
    return list(transform.SplitHandleOp([any_op()] * n, handle, loc=_named(name)).results)


def merge(handles: Sequence[Handle], name: str) -> Handle:
    return transform.MergeHandlesOp(handles, loc=_named(name)).result


def producer_of(op: Handle, operand: int, name: str) -> Handle:
    return transform.GetProducerOfOperand(any_op(), op, operand, loc=_named(name)).result


def param(value: int | str | ir.Attribute, bits: int = 64, name: str | None = None) -> Handle:
    """A transform.param.constant: an integer of `bits`, a string or any attribute."""
    if isinstance(value, int):
        kind = ir.IntegerType.get_signless(bits)
        return transform.ParamConstantOp(transform.ParamType.get(kind), ir.IntegerAttr.get(kind, value),
                                         loc=_named(name)).result
    value = ir.StringAttr.get(value) if isinstance(value, str) else value
    return transform.ParamConstantOp(transform.AnyParamType.get(), value, loc=_named(name)).result


def annotate(target: Handle, key: str, value: Handle | None = None) -> None:
    """The attribute `key` on every op of `target`: the param's value, or a unit attribute."""
    transform.AnnotateOp(target, key, param=value)


def mark(target: Handle, key: str, value: int, bits: int = 64, name: str | None = None) -> None:
    """annotate with an integer param made for it."""
    annotate(target, key, param(value, bits, name))


def tile_forall(op: Handle, mapping: str, *, tile_sizes: Sequence[int] | None = None,
                num_threads: Sequence[int] | None = None, name: str) -> tuple[Handle, Handle]:
    """structured.tile_using_forall: (the tiled op, the forall), mapped by `mapping` (its attributes'
    text, e.g. "#gpu.block<y>, #gpu.block<x>")."""
    tiled = structured.TileUsingForallOp(any_op(), any_op(), op, tile_sizes=tile_sizes, num_threads=num_threads,
                                         mapping=attribute(f"[{mapping}]"), loc=_named(name))
    return tiled.tiled_op, tiled.forall_op


def tile_for(op: Handle, sizes: Sequence[int], name: str) -> tuple[Handle, Handle]:
    """structured.tile_using_for with one non-zero size: (the tiled op, its loop)."""
    tiled, (loop,) = tile_for_loops(op, sizes, name)
    return tiled, loop


def tile_for_loops(op: Handle, sizes: Sequence[int], name: str) -> tuple[Handle, list[Handle]]:
    """structured.tile_using_for: (the tiled op, its loops, outermost first)."""
    tiled = structured.TileUsingForOp(op, sizes=sizes, loc=_named(name))
    return tiled.tiled_linalg_op, list(tiled.loops)


def generalize(op: Handle, name: str) -> Handle:
    return structured.GeneralizeOp(op, loc=_named(name)).result


def fuse_into(producer: Handle, containing: Handle, name: str) -> tuple[Handle, Handle]:
    """structured.fuse_into_containing_op: (the fused op, the new containing op)."""
    fused = structured.FuseIntoContainingOp(producer, containing, loc=_named(name))
    return fused.fused_op, fused.new_containing_op


def vectorize(op: Handle, sizes: Sequence[int] | None = None) -> None:
    """tensor.extract at computed indices (a flip, a gather of class scores) becomes vector loads or gathers,
    which the vectorizer refuses by default. `sizes`: vectors of these sizes per loop, masked where the
    op's (dynamic) extents are smaller."""
    structured.VectorizeOp(op, sizes, vectorize_nd_extract=True)


def hoist_subsets(loop: Handle) -> None:
    """Loop-invariant subsets of a loop's tensors (an accumulator) carried by the loop instead."""
    loop_ops.HoistLoopInvariantSubsetsOp(loop)


def cse(target: Handle) -> None:
    transform.ApplyCommonSubexpressionEliminationOp(target)


Pattern = Callable[[], object]  # builds one pattern op in an apply_patterns region


def apply_patterns(target: Handle, *patterns: Pattern) -> None:
    """transform.apply_patterns with these pattern ops (classes, or partials of them with their options)."""
    op = transform.ApplyPatternsOp(target)
    with ir.InsertionPoint(op.patterns):
        for pattern in patterns:
            pattern()


def canonicalize(target: Handle) -> None:
    apply_patterns(target, transform.ApplyCanonicalizationPatternsOp)


def registered_pass(target: Handle, pass_name: str, name: str) -> Handle:
    return transform.ApplyRegisteredPassOp(any_op(), target, pass_name, loc=_named(name)).result
