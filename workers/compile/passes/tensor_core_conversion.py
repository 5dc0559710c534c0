"""farm-tensor-core-conversion: convert-vector-to-gpu on each kernel that kept vector.contracts (a
tensor-core kernel's; other schedules lower theirs to FMAs, and the pass mistakes scalar arithmetic for
fragments), bf16 tiles typed f16 during it (it has no bf16 fragments). Runs after outlining.
"""
from __future__ import annotations

from workers.compile.mlir import (ir, passmanager, arith_dialect, vector_dialect, MlirError, views, ops_named,
                                  kernel_ops, shared_tiles)


def run_on_contracting_kernels(module: ir.Module, pipeline: str) -> None:
    """Run `pipeline` (anchored on gpu.func) on each kernel that still holds a vector.contract; a
    kernel that stages bf16 operand tiles goes through it with them typed f16 (stage_bf16_as_f16), and
    gets them back as bf16 after it (restore_bf16_tiles)."""
    for kernel in kernel_ops(module, "gpu.func"):
        if ops_named(kernel, "vector.contract", first_only=True):
            bf16 = stage_bf16_as_f16(kernel)
            marks = _loop_marks(kernel)
            try:
                passmanager.PassManager.parse(pipeline).run(kernel)
            except (ir.MLIRError, ValueError) as e:
                raise MlirError(f"pass pipeline {pipeline!r} failed: {e}") from None
            _restore_loop_marks(kernel, marks)
            if bf16:
                restore_bf16_tiles(kernel)


def _named_attributes(op) -> list:
    return [op.attributes[i] for i in range(len(op.attributes))]


def _loop_marks(kernel) -> list[dict[str, ir.Attribute]]:
    """The farm.* marks of each scf.for of the kernel, in walk order."""
    return [{a.name: a.attr for a in _named_attributes(loop) if a.name.startswith("farm.")}
            for loop in ops_named(kernel, "scf.for")]


def _restore_loop_marks(kernel, marks: list[dict[str, ir.Attribute]]) -> None:
    """convert-vector-to-gpu rebuilds the loops that carry mma fragments without their attributes; the
    loops themselves stay, in the same order."""
    loops = ops_named(kernel, "scf.for")
    if len(loops) != len(marks):
        raise MlirError(f"the tensor-core conversion changed the kernel's loops ({len(marks)} -> {len(loops)})")
    for loop, loop_marks in zip(loops, marks):
        for name, value in loop_marks.items():
            loop.attributes[name] = value


BF16_AS_F16 = "farm.bf16_as_f16"  # a bf16 tile that stage_bf16_as_f16 typed f16


def _retype(value: ir.Value, element: ir.Type) -> None:
    old = ir.MemRefType(value.type)
    value.set_type(ir.MemRefType.get(old.shape, element, old.layout, memory_space=old.memory_space))


def _accesses(value: ir.Value) -> list:
    """The ops that read or write the tile `value` other than through its subviews."""
    return [use.owner for view in views(value) for use in view.uses if use.owner.name != "memref.subview"]


def stage_bf16_as_f16(kernel) -> bool:
    """convert-vector-to-gpu has no mma fragments for bf16 (mma.sync has m16n8k16 for it, as for f16):
    the kernel's bf16 operand tiles in shared memory (and their subviews, a multi-buffered tile's
    buffers) are typed f16 (the same 16 bits, copied in through a vector.bitcast), so that the
    contractions reading them become ldmatrix + mma.sync on "f16" fragments; restore_bf16_tiles types
    them back after the conversion. Only where every access to such a tile is a copy into it
    (vector.transfer_write) or a read that only contractions take (no arithmetic ever sees the f16
    typing); the tiles are marked BF16_AS_F16; returns whether the kernel was retyped."""
    bf16, f16 = ir.BF16Type.get(), ir.F16Type.get()
    tiles = [a for a in shared_tiles(ops_named(kernel, "memref.alloc"))
             if ir.MemRefType(a.results[0].type).element_type == bf16]

    def staged(op) -> bool:
        return op.name == "vector.transfer_write" or op.name == "vector.transfer_read" and all(
            u.owner.name == "vector.contract" for u in op.results[0].uses)

    if not tiles or not all(staged(op) for a in tiles for op in _accesses(a.results[0])):
        return False
    for alloc in tiles:
        accesses = _accesses(alloc.results[0])
        for view in views(alloc.results[0]):
            _retype(view, f16)
        alloc.attributes[BF16_AS_F16] = ir.UnitAttr.get()
        for op in accesses:
            with ir.InsertionPoint(op), op.location:
                if op.name == "vector.transfer_write":
                    value = ir.VectorType(op.operands[0].type)
                    op.operands[0] = vector_dialect.BitCastOp(ir.VectorType.get(value.shape, f16), op.operands[0]).result
                else:  # a read: its f16 fragment and padding
                    read, padding = ir.VectorType(op.results[0].type), _transfer_padding(op)
                    op.operands[padding] = arith_dialect.BitcastOp(f16, op.operands[padding]).result
                    op.results[0].set_type(ir.VectorType.get(read.shape, f16))
    return True


def _transfer_padding(read) -> int:
    """Operand index of a vector.transfer_read's padding value: after the source and its indices."""
    return 1 + ir.DenseI32ArrayAttr(read.attributes["operandSegmentSizes"])[1]


def restore_bf16_tiles(kernel) -> None:
    """After the tensor-core conversion: the tiles stage_bf16_as_f16 typed f16 are bf16 again, their
    copies store the bf16 values themselves (cp.async can then copy them: it takes one element type),
    and the ldmatrix fragments read from them are bf16, which the mma.sync take as such."""
    bf16 = ir.BF16Type.get()
    for alloc in [a for a in ops_named(kernel, "memref.alloc") if BF16_AS_F16 in a.attributes]:
        accesses = _accesses(alloc.results[0])
        for view in views(alloc.results[0]):
            _retype(view, bf16)
        for op in accesses:
            if op.name == "vector.transfer_write" and op.operands[0].owner.name == "vector.bitcast":
                cast = op.operands[0].owner
                op.operands[0] = cast.operands[0]
                if not list(cast.results[0].uses):
                    cast.erase()
            elif op.name == "nvgpu.ldmatrix" and all(u.owner.name == "nvgpu.mma.sync" for u in op.results[0].uses):
                fragment = ir.VectorType(op.results[0].type)
                op.results[0].set_type(ir.VectorType.get(fragment.shape, bf16))
            else:
                raise MlirError(f"a bf16 tile typed f16 for the tensor-core conversion is accessed by {op.name}, "
                                "which restore_bf16_tiles cannot type back")
