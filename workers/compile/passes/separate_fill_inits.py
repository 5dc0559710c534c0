"""farm-separate-fill-inits: the inits of fills (and transposes) that CSE merged are separated again.

A fill that initialises several ops, one of them a reduction of two results (an argmax's index and a row's
integer sum, both from zeros), becomes one fill per op: the pair's kernel fuses no fill it shares, and the
shared one was left on the host. (Fills shared among single-result reductions, topk's rounds, fuse into each.)

A matmul's accumulator fill, or a transpose, whose tensor.empty other ops write too gets a tensor.empty of
its own.

CSE merges equal tensor.empty ops: an f32 Linear's accumulator fill and the epilogue after it (bias, ReLU)
then start from one empty tensor. Fused into the epilogue's kernel, the fill initialises a slice of the
epilogue's own output, which the epilogue overwrites while it reads the matmul's result from it; one-shot
bufferization resolves that by copying the output slice into a scratch tile per kernel. With an empty of
its own, the fill's tile is block-local (a staged matmul's accumulator tile in shared memory,
schedule/staged_matmul.py). A Linear's weight transpose, staged into the matmul's kernel a K step at a time,
is bitten the same way where the weight is square like the output (an MLP's 1024x1024 layers): its tile
was a slice of the kernel's own output, copied per thread into a private 32x64 scratch tile (8 KB of stack a
thread, 92 s of ptxas, a kernel that timed out). No upstream pass undoes CSE for one op.
"""
from __future__ import annotations

from numba_cuda_mlir._mlir.dialects import tensor

from workers.compile.mlir import body_ops, ir, main_func

NAME = "farm-separate-fill-inits"
MATMULS = ("linalg.matmul", "linalg.batch_matmul")


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        if op.operation.name == "linalg.fill":
            _fill_per_user(op.operation)
    for op in body_ops(main_func(module)):
        if not (_fills_a_matmul(op) or op.operation.name == "linalg.transpose"):
            continue
        last = len(op.operation.operands) - 1
        init = op.operation.operands[last]
        owner = init.owner
        if not isinstance(owner, ir.OpView) or owner.name != "tensor.empty" or owner.operands \
                or len(list(init.uses)) < 2:
            continue
        with ir.InsertionPoint(op), op.location:
            op.operation.operands[last] = _empty_like(init)


def _fills_a_matmul(op) -> bool:
    return op.operation.name == "linalg.fill" and any(use.owner.name in MATMULS for use in op.operation.results[0].uses)


def _empty_like(value: ir.Value) -> ir.Value:
    """A tensor.empty of `value`'s type, at the current insertion point."""
    return tensor.EmptyOp(value.type.shape, value.type.element_type).result


def _initialises(use) -> bool:
    """`use` is an init (outs) operand of a linalg op on tensors: its inits are its last operands, one per result."""
    owner = use.owner.operation
    return owner.name.startswith("linalg.") and use.operand_number >= len(owner.operands) - len(owner.results)


def _fill_per_user(fill) -> None:
    """Where `fill`'s result initialises several ops, one of them of two results or more, each op after the
    first gets a clone of the fill over an empty tensor of its own (a fill read as an input stays shared)."""
    users = []
    for use in fill.results[0].uses:
        if _initialises(use) and not any(use.owner.operation == user for user in users):
            users.append(use.owner.operation)
    if not any(len(user.results) > 1 for user in users):
        return
    for user in users[1:]:
        with ir.InsertionPoint(user), fill.location:
            own = _empty_like(fill.operands[1])
            clone = fill.clone(ir.InsertionPoint(user))
        clone.operands[1] = own
        for use in list(fill.results[0].uses):
            if use.owner.operation == user and _initialises(use):
                user.operands[use.operand_number] = clone.results[0]
