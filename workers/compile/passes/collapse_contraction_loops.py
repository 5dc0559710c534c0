"""farm-collapse-contraction-loops: a contraction whose operands all read a run of its parallel loops, or of
its reduction loops, as consecutive dims in order (or not at all) runs over one loop of their product instead.

linalg-fuse-elementwise-ops propagates a reshape through a matmul to fuse it: a Linear followed by GroupNorm
(KernelBench's Gemm + GroupNorm problems) becomes a contraction over (batch, group, channel, K) whose output
columns are two loops, which the matmul templates tile as a batch of narrow matmuls; a ViT's Linear over (batch,
197 tokens) or a recurrent layer's input projection over (time, batch) has two row loops where it is one matmul
of their product's rows; an attention block's output projection reads its input as (tokens, heads, head dim),
its K two loops. Collapsing the run gives the 2-D matmul the templates (and shared-memory staging) are
built for: each operand that reads the run through a tensor.collapse_shape, the result expanded back
(collapse_loops). A batch matmul's batch loop is read by both operands but not beside the rows in the second: it
stays. An operand that is a slice (a recurrent layer's input of one direction) stays uncollapsed: bufferization
copies a collapsed slice on the host, which the host check refuses.

Runs after linalg-fuse-elementwise-ops (which would expand the loops again) and farm-collapse-reduction-loops.
"""
from __future__ import annotations

from workers.compile.mlir import body_ops, ir, is_contraction, iterator_types, main_func
from workers.compile.passes.collapse_reduction_loops import collapse_loops, reads_run_in_order

NAME = "farm-collapse-contraction-loops"


def run(module: ir.Module) -> None:
    collapsed = True
    while collapsed:  # a contraction with a run of rows and one of columns collapses twice, one per walk
        collapsed = False
        for op in body_ops(main_func(module)):
            if op.operation.name == "linalg.generic" and is_contraction(op) and (loops := collapsible_run(op)):
                collapse_loops(op, loops)
                collapsed = True
                break


def collapsible_run(op) -> list[int]:
    """The longest run of two or more consecutive loops of `op` of one kind (parallel or reduction) that
    collapses (reads_run_in_order), the first of equal ones; [] where none does, or an operand is a slice."""
    if any(isinstance(v.owner, ir.OpView) and v.owner.name == "tensor.extract_slice" for v in op.operation.operands):
        return []
    iterators = iterator_types(op)
    best: list[int] = []
    for start in range(len(iterators)):
        end = start
        while end + 1 < len(iterators) and len(set(iterators[start:end + 2])) == 1 \
                and reads_run_in_order(op, list(range(start, end + 2))):
            end += 1
        if end - start + 1 >= 2 and end - start + 1 > len(best):
            best = list(range(start, end + 1))
    return best
