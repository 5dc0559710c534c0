"""farm-vector-products-as-generics: a named contraction that multiplies a matrix by a vector (linalg.matvec,
linalg.vecmat, a linalg.matmul or linalg.batch_matmul with one row or one column: a batch-1 nn.Linear, a
matrix-vector product) becomes a linalg.generic, and so does a linalg.transpose that only it reads (a Linear's
weight); upstream `transform.structured.generalize` on the ops this pass marks.

The pipeline's cleanup then does the rest with upstream passes: linalg-fuse-elementwise-ops folds the transpose
into the generic (it reads the weight's (n, k) rows in place) and linalg-fold-unit-extent-dims drops the unit
loop, leaving a row reduction `out[n] += w[n, k] * x[k]`, which analysis.py counts as a reduction, not a matmul:
a product that reads each matrix element once has no operand reuse for a matmul's tiles to exploit, and is
bound by reading the matrix. As a matmul it ran as a weight transpose kernel (the matrix read and written once
more), a split matmul and a merge; as a reduction it takes a block per output whose threads read its row
together (templates.wants_block_per_row). Runs first, before the cleanup pipeline.
"""
from __future__ import annotations

from workers.compile.mlir import apply_transform, body_ops, ir, main_func, parse

NAME = "farm-vector-products-as-generics"
MARK = "farm.vector_product"
VECTOR_PRODUCTS = ("linalg.matvec", "linalg.vecmat", "linalg.batch_matvec", "linalg.batch_vecmat")
GENERALIZE = f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @generalize(%root: !transform.any_op {{transform.readonly}}) {{
    %ops = transform.structured.match attributes {{{MARK}}} in %root : (!transform.any_op) -> !transform.any_op
    %generic = transform.structured.generalize %ops : (!transform.any_op) -> !transform.any_op
    transform.yield
  }}
}}"""


def is_vector_product(op) -> bool:
    """Whether `op` is a named contraction of a matrix and a vector: a matvec/vecmat, or a (batch) matmul whose
    result has a single row or a single column."""
    name = op.operation.name
    if name in VECTOR_PRODUCTS:
        return True
    if name not in ("linalg.matmul", "linalg.batch_matmul"):
        return False
    *_, rows, columns = ir.RankedTensorType(op.operation.results[0].type).shape
    return rows == 1 or columns == 1


def run(module: ir.Module) -> None:
    marked = False
    for op in body_ops(main_func(module)):
        if op.operation.name.startswith("linalg.") and len(op.operation.results) == 1 and is_vector_product(op):
            op.operation.attributes[MARK] = ir.UnitAttr.get()
            marked = True
            for operand in op.operation.operands:
                producer = operand.owner
                if isinstance(producer, ir.OpView) and producer.operation.name == "linalg.transpose" \
                        and len(list(producer.operation.results[0].uses)) == 1:
                    producer.operation.attributes[MARK] = ir.UnitAttr.get()
    if not marked:
        return
    apply_transform(module, parse(GENERALIZE, NAME), "generalize")
    for op in body_ops(main_func(module)):
        if MARK in op.operation.attributes:
            del op.operation.attributes[MARK]
