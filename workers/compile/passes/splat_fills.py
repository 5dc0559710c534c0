"""farm-splat-constants-as-fills: a splat tensor constant too large to travel in config.json (a zero phase of
a transposed conv's interleave, workers/decompositions.py; `torch.cat([x, torch.zeros(...)])`) becomes a
linalg.fill of a tensor.empty, which the schedule runs as a kernel.

torch-mlir folds torch.zeros and torch.full of static shape into `arith.constant dense<v>`. Where an
elementwise op reads it the clean-up folds it into a scalar; read as data (a concat's piece) it may stay a
host constant (a transposed conv's untapped phase did), which the host check refuses past
host.MAX_CONSTANT_ELEMENTS elements. As a fill it is a kernel in every case (a scan's pieces of identity
values, which copy kernels had written from the constant, are fill kernels since). No upstream pass turns a
constant into a fill. Runs after the clean-up (whose canonicalization folds small fills into constants) and
before farm-separate-fill-inits.
"""
from __future__ import annotations

import math

from numba_cuda_mlir._mlir.dialects import arith, linalg, tensor

from workers.compile.host import MAX_CONSTANT_ELEMENTS
from workers.compile.mlir import body_ops, ir, main_func

NAME = "farm-splat-constants-as-fills"


def run(module: ir.Module) -> None:
    for op in body_ops(main_func(module)):
        kind = op.results[0].type if op.operation.name == "arith.constant" else None
        if not isinstance(kind, ir.RankedTensorType) or math.prod(kind.shape) <= MAX_CONSTANT_ELEMENTS:
            continue
        value = op.attributes["value"]
        if not isinstance(value, ir.DenseElementsAttr) or not value.is_splat:
            continue
        with ir.InsertionPoint(op), op.location:
            scalar = arith.ConstantOp(kind.element_type, value.get_splat_value()).result
            filled = linalg.fill(scalar, outs=[tensor.EmptyOp(kind.shape, kind.element_type).result])
        op.results[0].replace_all_uses_with(filled)
        op.operation.erase()
