"""Schedule parameters -> a Transform-dialect script (transform.mlir).

The modules, in the order a kernel's schedule goes through them (adding an op family touches grouping.py,
templates.py or v0.py, validation.py and emission.py, and rules/guide.json's routes; a knob, records.py's
OpSchedule, validation.py, emission.py, and the README's knob table):

| module | does |
|---|---|
| tiles.py | tile arithmetic: grids, threads per block, linear grids; ScheduleError |
| grouping.py | which ops form which kernel (Group): anchor, fills, fused producer, row pipelines |
| templates.py | v0's per-op launch shapes, and the conservative path beneath them |
| v0.py | v0 of a whole model: templates, tensor cores, block reductions, row kernels (initial_params_for) |
| validation.py | one kernel's schedule checked; its thread block |
| edits.py | one change to the params (the advisor's hypotheses, the repairs) |
| staged_matmul.py | promote_shared on a SIMT matmul: its plan (checked) and Transform steps |
| emission.py | transform.mlir: each kernel's Transform steps and its launch's marks |

Each kernel is one "group": an anchor op tiled to a grid of blocks and then to threads, with the
fill that initialises it and (optionally) one producer fused into both levels (a row kernel: all the
ops feeding its anchor). The script is generated against the payload after the pre-schedule pipeline
and addresses ops by their position among the function's linalg ops.

A group whose schedule sets split_reduction launches twice: structured.split_reduction turns its
reduction into partial reductions (their own kernel, many threads per output) and a merge of the
partials that takes the reduction's place in the group's kernel. A group whose schedule sets
block_reduction instead stays one kernel: a block per output, its threads' partials in shared memory
(structured.tile_reduction_using_forall), merged by a warp and then one thread after the block's
barriers; it can fuse its producer, and an elementwise producer that such a kernel and other consumers
all read is computed again in each of them instead of being written to memory (recomputed_producers).
A group whose schedule sets row_kernel is a whole row pipeline (softmax: max, sum of exponentials,
divide) in one kernel, a block per row: its ops are fused into the block, then each reduction runs as a
block reduction and the elementwise ops are computed again in the thread loops that read them.

A conv whose schedule sets img2col becomes, right after the ops are split into handles, a gather and
a matmul-like op (structured.convert_conv2d_to_img2col); its kernel tiles that matmul (the schedule's
tiles address its 4 loops) and fuses the gather into each thread's reduction loop.

Elementwise kernels give each thread one 128-bit vector of the innermost loop (4 f32); kernel pointer
arguments are marked 16-byte aligned so that these become ld.global.v4 / st.global.v4. Reduction loops
that a kernel tiles and vectorizes keep their accumulator in registers
(loop.hoist_loop_invariant_subsets on tensors, after CSE).

A SIMT matmul whose schedule sets promote_shared steps over K at the block level, each step's operand
tiles copied into shared memory by all its threads (workers/compile/staging.py, shared with the tensor-core
kernels), then each thread's register tile computed from them (staged_matmul.py).

Tensor-core kernels are emitted by tensor_core.py; one whose staged tiles are filled by cp.async
(pipeline_depth) adds a second named sequence to transform.mlir, pipeline.PIPELINE_COPIES_SEQUENCE, which the
compile driver applies after the tensor-core conversion.
"""
from __future__ import annotations

from workers.compile.schedule.edits import apply_edit
from workers.compile.schedule.emission import complete_params, emit_transform
from workers.compile.schedule.grouping import kernel_of_line
from workers.compile.schedule.templates import conservative_schedule
from workers.compile.schedule.tiles import ScheduleError
from workers.compile.schedule.v0 import initial_params_for

__all__ = ["ScheduleError", "apply_edit", "complete_params", "conservative_schedule", "emit_transform",
           "initial_params_for", "kernel_of_line"]
