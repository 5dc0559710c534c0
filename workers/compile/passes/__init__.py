"""The project's own passes: each a named step of pass_pipeline.txt (`farm-...`), run on the whole module
by workers/compile/build.py, where no upstream MLIR pass or Transform op does the job. Each returns notes
on what it left as it was (an optimization a kernel does not have the form for), else nothing.

A pass's docstring says what it does and what it must run after; the README lists them.
"""
from __future__ import annotations

from typing import Callable

from workers.compile import alignment, host, mlir, wgmma
from workers.compile.passes import copy_returned_views, outline_kernels, scalar_unit_loop
from workers.compile.pipeline import TENSOR_CORE_PASSES, TRANSFORM_STEP
from workers.compile.tensor_core import COPIES_AHEAD, K_LOOP, STAGED, padded_columns
from workers.records import VECTOR_BYTES

Pass = Callable[[mlir.ir.Module], "list[str] | None"]

PASSES: dict[str, Pass] = {
    "farm-narrow-matmul-operands": mlir.narrow_matmul_operands,
    scalar_unit_loop.NAME: scalar_unit_loop.run,
    copy_returned_views.NAME: copy_returned_views.run,
    "farm-wgmma-k-loops": wgmma.warpgroup_matmuls,
    outline_kernels.NAME: outline_kernels.run,
    "farm-tensor-core-conversion": lambda m: mlir.run_on_contracting_kernels(m, TENSOR_CORE_PASSES),
    "farm-overlap-tiles-dead-in-k-loops": lambda m: mlir.overlap_tiles_dead_in_k_loops(m, STAGED, K_LOOP),
    "farm-trim-k-loop-barriers": lambda m: mlir.trim_k_loop_barriers(m, K_LOOP, COPIES_AHEAD),
    "farm-pad-tensor-core-tiles": lambda m: mlir.pad_tensor_core_tiles(m, padded_columns),
    "farm-large-shared-to-dynamic": mlir.large_shared_to_dynamic,
    "farm-sync-after-block-loops": mlir.sync_after_block_loops,
    "farm-reuse-reads": mlir.reuse_reads,
    "farm-merge-kernel-modules": host.merge_kernel_modules,
    "farm-merge-in-a-warp": mlir.merge_in_a_warp,
    "farm-interleave-thread-columns": lambda m: mlir.interleave_thread_columns(m, VECTOR_BYTES),
    "farm-workgroup-allocs-to-shared": mlir.workgroup_allocs_to_shared,
    "farm-scratch-to-stack": mlir.scratch_to_stack,
    "farm-align-kernel-pointers": mlir.align_kernel_pointers,
    "farm-align-global-vector-accesses": alignment.align_global_vector_accesses,
    "farm-tensor-maps-as-pointers": mlir.tensor_maps_as_pointers,
    "farm-allow-fp-contraction": mlir.allow_fp_contraction,
    "farm-enable-tf32-mma": mlir.enable_tf32_mma,
}


def run_step(step: str, module: mlir.ir.Module, schedule: mlir.ir.Module | None = None) -> list[str]:
    """Run one step of pass_pipeline.txt on `module`: an upstream pipeline, a named sequence of the
    transform module `schedule`, or a project pass. Returns the project pass's notes."""
    if step.startswith("builtin.module("):
        mlir.run_pipeline(module, step)
        return []
    if step.startswith(TRANSFORM_STEP):
        if schedule is None:
            raise mlir.MlirError(f"the step {step!r} needs transform.mlir")
        mlir.apply_transform(module, schedule, step[len(TRANSFORM_STEP):])
        return []
    if step not in PASSES:
        raise mlir.MlirError(f"pass_pipeline.txt names {step!r}, which is neither an MLIR pipeline "
                             f"(builtin.module(...)), `{TRANSFORM_STEP}SEQUENCE` nor a pass of this project "
                             f"({', '.join(sorted(PASSES))})")
    return PASSES[step](module) or []
