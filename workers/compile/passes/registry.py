"""The steps of pass_pipeline.txt by name: every project pass, and how one step of any kind runs."""
from __future__ import annotations

from typing import Callable

from workers.compile import host, mlir
from workers.compile.passes import (alignment, block_sync, bool_bytes, collapse_contraction_loops,
                                    collapse_reduction_loops, contraction_operands_apart, copy_returned_views,
                                    extracted_scalars, full_rank_inserts,
                                    hoist_accumulators, interleave_columns, k_loops, kernel_arguments,
                                    narrow_matmul_operands, outline_kernels, reduce_in_stages, reuse_reads,
                                    scalar_unit_loop, scales_after_contractions, separate_fill_inits, shared_memory,
                                    splat_fills, tensor_core_conversion, unit_dim_transposes, vector_products,
                                    views_into_kernels, warp_merge, wgmma)
from workers.compile.pipeline import TENSOR_CORE_PASSES, TRANSFORM_STEP
from workers.compile.tensor_core import COPIES_AHEAD, K_LOOP, STAGED, padded_columns
from workers.records import VECTOR_BYTES

Pass = Callable[[mlir.ir.Module], "list[str] | None"]

PASSES: dict[str, Pass] = {
    vector_products.NAME: vector_products.run,
    extracted_scalars.NAME: extracted_scalars.run,
    "farm-narrow-matmul-operands": narrow_matmul_operands.narrow_matmul_operands,
    scales_after_contractions.NAME: scales_after_contractions.run,
    contraction_operands_apart.NAME: contraction_operands_apart.run,
    reduce_in_stages.NAME: reduce_in_stages.run,
    collapse_reduction_loops.NAME: collapse_reduction_loops.run,
    collapse_contraction_loops.NAME: collapse_contraction_loops.run,
    unit_dim_transposes.NAME: unit_dim_transposes.run,
    scalar_unit_loop.NAME: scalar_unit_loop.run,
    copy_returned_views.NAME: copy_returned_views.run,
    splat_fills.NAME: splat_fills.run,
    separate_fill_inits.NAME: separate_fill_inits.run,
    full_rank_inserts.NAME: full_rank_inserts.run,
    "farm-wgmma-k-loops": wgmma.warpgroup_matmuls,
    views_into_kernels.NAME: views_into_kernels.run,
    outline_kernels.NAME: outline_kernels.run,
    "farm-tensor-core-conversion": lambda m: tensor_core_conversion.run_on_contracting_kernels(m, TENSOR_CORE_PASSES),
    "farm-overlap-tiles-dead-in-k-loops": lambda m: k_loops.overlap_tiles_dead_in_k_loops(m, STAGED, K_LOOP),
    "farm-trim-k-loop-barriers": lambda m: k_loops.trim_k_loop_barriers(m, K_LOOP, COPIES_AHEAD),
    "farm-pad-tensor-core-tiles": lambda m: shared_memory.pad_tensor_core_tiles(m, padded_columns),
    "farm-large-shared-to-dynamic": shared_memory.large_shared_to_dynamic,
    "farm-sync-after-block-loops": block_sync.sync_after_block_loops,
    "farm-reuse-reads": reuse_reads.reuse_reads,
    "farm-merge-kernel-modules": host.merge_kernel_modules,
    "farm-merge-in-a-warp": warp_merge.merge_in_a_warp,
    "farm-interleave-thread-columns": lambda m: interleave_columns.interleave_thread_columns(m, VECTOR_BYTES),
    "farm-workgroup-allocs-to-shared": shared_memory.workgroup_allocs_to_shared,
    "farm-scratch-to-stack": shared_memory.scratch_to_stack,
    "farm-align-kernel-pointers": kernel_arguments.align_kernel_pointers,
    "farm-unaliased-kernel-pointers": kernel_arguments.mark_unaliased_kernel_pointers,
    hoist_accumulators.NAME: hoist_accumulators.run,
    "farm-align-global-vector-accesses": alignment.align_global_vector_accesses,
    "farm-tensor-maps-as-pointers": kernel_arguments.tensor_maps_as_pointers,
    bool_bytes.NAME: bool_bytes.run,
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
