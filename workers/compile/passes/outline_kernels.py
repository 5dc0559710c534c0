"""farm-outline-kernels: MLIR's gpu-kernel-outlining, each launch's kernel attributes kept on its kernel.

transform.mlir annotates each gpu.launch with its kernel's schedule choices (KERNEL_MARKS: the anchor op
and family, warp_merge, interleave_columns, nvvm.minctasm). Outlining makes a gpu.func of each launch's
body in a gpu.module of its own and drops the launch's attributes; this pass puts them on that gpu.func,
where the passes after it read them. Launches keep their order, the order in which it pairs them.
"""
from __future__ import annotations

from workers.compile import mlir
from workers.compile.mlir import ir

NAME = "farm-outline-kernels"
KERNEL_MARKS = ("farm.", "nvvm.")  # prefixes of the attributes that travel from a launch to its kernel


def _marks(op) -> dict[str, ir.Attribute]:
    return {a.name: a.attr for a in (op.attributes[i] for i in range(len(op.attributes)))
            if a.name.startswith(KERNEL_MARKS)}


def run(module: ir.Module) -> None:
    marks = [_marks(launch) for launch in mlir.ops_named(module.operation, "gpu.launch")]
    mlir.run_pipeline(module, "builtin.module(gpu-kernel-outlining)")
    kernels = mlir.launched_kernels(module)
    if len(kernels) != len(marks):
        raise mlir.MlirError(f"{NAME}: {len(marks)} launches became {len(kernels)} kernel launches")
    for kernel, attributes in zip(kernels, marks):
        for name, value in attributes.items():
            kernel.attributes[name] = value
