"""farm-separate-fill-inits: a matmul's accumulator fill whose tensor.empty other ops write too gets a tensor.empty
of its own.

CSE merges equal tensor.empty ops: an f32 Linear's accumulator fill and the epilogue after it (bias, ReLU)
then start from one empty tensor. Fused into the epilogue's kernel, the fill initialises a slice of the
epilogue's own output, which the epilogue overwrites while it reads the matmul's result from it; one-shot
bufferization resolves that by copying the output slice into a scratch tile per kernel. With an empty of
its own, the fill's tile is block-local (a staged matmul's accumulator tile in shared memory,
schedule/staged_matmul.py). No upstream pass undoes CSE for one op.
"""
from __future__ import annotations

from numba_cuda_mlir._mlir.dialects import tensor

from workers.compile.mlir import ir, main_func

NAME = "farm-separate-fill-inits"
MATMULS = ("linalg.matmul", "linalg.batch_matmul")


def run(module: ir.Module) -> None:
    for op in main_func(module).regions[0].blocks[0].operations:
        if op.operation.name != "linalg.fill":
            continue
        init = op.operation.operands[1]
        if not any(use.owner.name in MATMULS for use in op.operation.results[0].uses):
            continue
        owner = init.owner
        if not isinstance(owner, ir.OpView) or owner.name != "tensor.empty" or owner.operands \
                or len(list(init.uses)) < 2:
            continue
        with ir.InsertionPoint(op), op.location:
            own = tensor.EmptyOp(init.type.shape, init.type.element_type).result
        op.operation.operands[1] = own
