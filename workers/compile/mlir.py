"""The one place that touches the MLIR Python bindings that carry the NVPTX back end.

torch-mlir's own bundled MLIR lacks NVPTX, so it is used only to import models; everything from
model_linalg.mlir on goes through the upstream bindings shipped in numba-cuda-mlir.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from numba_cuda_mlir._mlir import ir, passmanager  # noqa: F401  (re-exported)
from numba_cuda_mlir._mlir.dialects import gpu as gpu_dialect
from numba_cuda_mlir._mlir.dialects.transform import interpreter


class MlirError(Exception):
    """An MLIR parse, pass or transform failure, with MLIR's diagnostics as the message."""


@contextlib.contextmanager
def context() -> Iterator[ir.Context]:
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = False
        yield ctx


def parse(text: str, what: str) -> ir.Module:
    try:
        return ir.Module.parse(text)
    except ir.MLIRError as e:
        raise MlirError(f"cannot parse {what}: {e}") from None


def run_pipeline(module: ir.Module, pipeline: str) -> None:
    try:
        passmanager.PassManager.parse(pipeline).run(module.operation)
    except (ir.MLIRError, ValueError) as e:
        raise MlirError(f"pass pipeline {pipeline!r} failed: {e}") from None


def apply_transform(payload: ir.Module, transform_module: ir.Module) -> None:
    entry = [op for op in transform_module.body.operations
             if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "__transform_main"]
    if not entry:
        raise MlirError("transform.mlir has no @__transform_main named sequence")
    try:
        interpreter.apply_named_sequence(payload.operation, entry[0], transform_module.operation)
    except (ir.MLIRError, ValueError) as e:  # the interpreter reports failures as ValueError
        raise MlirError(f"the transform schedule failed: {e}") from None


def main_func(module: ir.Module):
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise MlirError(f"expected one func.func in the model, found {len(funcs)}")
    return funcs[0]


def ptx_of_binaries(module: ir.Module) -> dict[str, bytes]:
    """PTX text of every gpu.binary (format=isa), keyed by the binary's symbol name."""
    out = {}
    for op in module.body.operations:
        if op.operation.name == "gpu.binary":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            for obj in ir.ArrayAttr(op.attributes["objects"]):
                out[name] = gpu_dialect.ObjectAttr(obj).object
    return out


CONTRACTIBLE = ("arith.mulf", "arith.addf", "arith.subf")


def _kernel_ops(module: ir.Module, name: str) -> list:
    found = []

    def collect(op):
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE

    for op in module.body.operations:
        if op.operation.name == "gpu.module":
            op.operation.walk(collect)
    return found


def scratch_to_stack(module: ir.Module) -> None:
    """A memref.alloc inside a kernel is per-thread scratch (e.g. a fused producer's tile); as an
    alloca it lives in registers/local memory instead of calling device malloc."""
    for alloc in _kernel_ops(module, "memref.alloc"):
        if alloc.operands:
            raise MlirError("a kernel needs per-thread scratch of dynamic size; use tiles that divide the "
                            "loop extents")
        with ir.InsertionPoint(alloc), alloc.location:
            alloca = ir.Operation.create("memref.alloca", results=[alloc.results[0].type],
                                         operands=[], attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])})
        alloc.results[0].replace_all_uses_with(alloca.results[0])
        alloc.erase()


def allow_fp_contraction(module: ir.Module) -> None:
    """Mark float multiply/add/sub inside kernels `contract`, so LLVM may fuse them into FMA."""
    contract = ir.Attribute.parse("#arith.fastmath<contract>")
    for op in [o for name in CONTRACTIBLE for o in _kernel_ops(module, name)]:
        op.attributes["fastmath"] = contract
