"""Which schedule op each profiled kernel belongs to: the one place that maps NCU's kernels (named
by MLIR's outlining, e.g. forward_kernel_2) to the ops of ScheduleParams."""
from __future__ import annotations

import math

from workers.records import CompileResult, KernelMetrics, ModelInfo, ScheduleParams

# heaviest first, as the compile stage ranks a fused group (workers/compile/schedule/grouping.py group_family)
FAMILY_WEIGHT = ("matmul", "conv", "pooling", "reduction", "elementwise", "copy", "fill")
HELPER_FAMILY = "copy"  # the family of the kernels the compile stage adds for an op of another family


def kernel_op_indices(kernels: list[KernelMetrics], compile: CompileResult, params: ScheduleParams,
                      model: ModelInfo) -> list[int | None]:
    """The anchor op index of each kernel, in the kernels' (launch) order.

    1. the compile stage's launch order (CompileResult.kernel_ops) when it has one entry per kernel, but
       None for a copy kernel that the compile stage puts before an op of another family (a TF32 wgmma
       matmul's transposed copy of B): no knob of that op's schedule changes it;
    2. else the schedule's op order when ScheduleParams has one op per kernel;
    3. else (ncu saw more or fewer launches) every kernel is taken for the op of the heaviest family,
       the largest iteration space among those: where the time most likely goes.
    """
    if compile.kernel_ops and len(compile.kernel_ops) == len(kernels):
        op_family = {s.op_index: s.family for s in params.ops}
        families = compile.kernel_families if len(compile.kernel_families) == len(kernels) else [None] * len(kernels)
        return [None if family == HELPER_FAMILY != op_family.get(op) else op
                for op, family in zip(compile.kernel_ops, families)]
    if len(params.ops) == len(kernels):
        return [s.op_index for s in params.ops]
    if not params.ops:
        return [None] * len(kernels)

    def weight(s) -> tuple:
        rank = FAMILY_WEIGHT.index(s.family) if s.family in FAMILY_WEIGHT else len(FAMILY_WEIGHT)
        size = math.prod(model.ops[s.op_index].loop_ranges) if 0 <= s.op_index < len(model.ops) else 0
        return rank, -size, s.op_index

    heaviest = min(params.ops, key=weight).op_index
    return [heaviest] * len(kernels)
