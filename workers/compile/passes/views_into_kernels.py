"""farm-views-into-kernels: a view that a kernel reads at an offset known only on the host (a time step's
slice, states[t], in a recurrent layer's time loop) is made inside the kernel instead, from its buffer and
the loop index.

With the bare-pointer ABI a kernel argument is a buffer's aligned pointer, and the kernel applies the static
offset and strides of the view it was compiled for; a dynamic offset would be lost (host.py refuses such a
view). Each launch that uses a view of dynamic layout made outside it gets a copy of the view, and of the
index arithmetic its offsets come from, at the start of its body: outlining then passes the buffer and the
loop index (a scalar argument the host sets per iteration). Runs after the schedule, before
farm-outline-kernels; the views left unused go at the next canonicalization.
"""
from __future__ import annotations

from workers.compile import mlir
from workers.compile.host import VIEW_OPS, dynamic_layout
from workers.compile.mlir import ir

NAME = "farm-views-into-kernels"
INDEX_ARITHMETIC = ("arith.constant", "arith.addi", "arith.subi", "arith.muli", "affine.apply")


def _made_outside(value: ir.Value, launch) -> ir.OpView | None:
    """The op that makes `value`, where it is outside `launch` (the bindings' operation objects are not
    stable keys once operands change, so the test climbs the parents)."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    parent = owner.operation.parent
    while parent is not None:
        if parent == launch.operation:
            return None
        parent = parent.parent
    return owner


def _dynamic_view(op: ir.OpView) -> bool:
    return op.name in VIEW_OPS and dynamic_layout(op.results[0].type)


def run(module: ir.Module) -> None:
    for launch in mlir.ops_named(module.operation, "gpu.launch"):
        at = ir.InsertionPoint(launch.regions[0].blocks[0].operations[0])
        copies: list[tuple] = []  # (op made outside, its copy at the start of the launch)

        def copy(op: ir.OpView) -> ir.Operation:
            made = next((c for original, c in copies if original == op.operation), None)
            if made is None:
                operands = {}  # its operands' copies, made first so that they come before it
                for i, operand in enumerate(op.operands):
                    source = _made_outside(operand, launch)
                    if source is not None and (source.name in INDEX_ARITHMETIC or _dynamic_view(source)):
                        operands[i] = copy(source).results[operand.result_number]
                made = op.operation.clone(at)
                for i, value in operands.items():
                    made.operands[i] = value
                copies.append((op.operation, made))
            return made

        for op in mlir.ops_where(launch, lambda op: op != launch.operation):  # the ops inside it
            for i, operand in enumerate(op.operands):
                source = _made_outside(operand, launch)
                if source is not None and _dynamic_view(source):
                    op.operands[i] = copy(source).results[operand.result_number]
