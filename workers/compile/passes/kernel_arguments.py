"""The last project passes before MLIR's lowering, on each kernel's arguments: farm-align-kernel-pointers
(16-byte aligned buffer arguments), farm-unaliased-kernel-pointers (noalias where no other argument shares the
buffer), farm-tensor-maps-as-pointers (TMA descriptors passed as pointers).
"""
from __future__ import annotations

from workers.compile.host import viewed_buffer
from workers.compile.mlir import ir, builtin_dialect, main_func, ops_named, kernel_ops


POINTER_ALIGNMENT = 16


def align_kernel_pointers(module: ir.Module) -> None:
    """Mark each memref argument of a kernel `llvm.align = 16`: with the bare-pointer ABI it is the base
    pointer of a whole device buffer (host views keep their source's pointer; the kernel applies the
    offset), and device allocations are at least 256-byte aligned (the measure worker copies any
    buffer that is not 16-byte aligned). LLVM then proves which loads and stores of 4 x 32 bits are
    16-byte aligned and emits ld.global.v4 / st.global.v4 for them."""
    align = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), POINTER_ALIGNMENT)
    for func in kernel_ops(module, "gpu.func"):
        if "kernel" in func.attributes:
            inputs = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs
            _set_arg_attr(func, "llvm.align", align, [i for i, t in enumerate(inputs) if isinstance(t, ir.MemRefType)])


def mark_unaliased_kernel_pointers(module: ir.Module) -> None:
    """Mark `llvm.noalias` each memref argument of a kernel whose buffer, at every launch of the kernel, no
    other argument of the launch views (the buffers are the host function's arguments, allocations and
    globals; the measure worker gives each its own memory, tied weights aside, which no kernel writes). LLVM
    may then keep an accumulator in a register across the loop it is read and written in (a direct conv stored
    its partial sum after every multiply-add, as the input might have been the same memory) and read
    read-only buffers through the non-coherent cache."""
    unaliased: dict[str, list[bool]] = {}
    for launch in ops_named(main_func(module), "gpu.launch_func"):
        roots = [viewed_buffer(v) if isinstance(v.type, ir.MemRefType) else None for v in launch.opview.kernelOperands]
        alone = [root is not None and sum(r is not None and r == root for r in roots) == 1 for root in roots]
        name = str(launch.opview.kernel).split("::")[-1].lstrip("@")  # the gpu.func launched
        unaliased[name] = [a and b for a, b in zip(unaliased.get(name, alone), alone)]
    unit = ir.UnitAttr.get()
    for func in kernel_ops(module, "gpu.func"):
        name = ir.StringAttr(func.attributes["sym_name"]).value
        if "kernel" in func.attributes and name in unaliased:
            _set_arg_attr(func, "llvm.noalias", unit, [i for i, a in enumerate(unaliased[name]) if a])


def _set_arg_attr(func, name: str, attr: ir.Attribute, args: list[int]) -> None:
    """Set `name` = `attr` in the argument attributes of the gpu.func's arguments `args`."""
    count = len(ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs)
    old = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if "arg_attrs" in func.attributes else []
    attrs = []
    for i in range(count):
        d = ir.DictAttr(old[i]) if i < len(old) else None
        entries = {d[j].name: d[j].attr for j in range(len(d))} if d is not None else {}
        if i in args:
            entries[name] = attr
        attrs.append(ir.DictAttr.get(entries))
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


TENSOR_MAP_TYPE = "!nvgpu.tensormap.descriptor"


def tensor_maps_as_pointers(module: ir.Module) -> None:
    """Pass each kernel's TMA descriptors as !llvm.ptr (the address of the CUtensorMap in device memory):
    convert-nvgpu-to-nvvm lowers the ops that use a descriptor, not a gpu.func argument of its type, which
    convert-gpu-to-nvvm then cannot legalize. Each such argument becomes a pointer cast back to the
    descriptor for its users (the casts fold away once they are lowered), and so does each launch's
    operand on the host."""
    pointer = ir.Type.parse("!llvm.ptr")

    def cast(value: ir.Value, to: ir.Type) -> ir.Value:
        return builtin_dialect.UnrealizedConversionCastOp([to], [value]).results[0]

    for func in kernel_ops(module, "gpu.func"):
        entry = func.regions[0].blocks[0]
        for argument in entry.arguments:
            if str(argument.type).startswith(TENSOR_MAP_TYPE):
                descriptor = argument.type
                argument.set_type(pointer)
                with ir.InsertionPoint.at_block_begin(entry), func.location:
                    typed = cast(argument, descriptor)
                argument.replace_all_uses_except(typed, typed.owner.operation)
        function = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in entry.arguments], function.results))
    for launch in ops_named(main_func(module), "gpu.launch_func"):
        for i, operand in enumerate(launch.operands):
            if str(operand.type).startswith(TENSOR_MAP_TYPE):
                with ir.InsertionPoint(launch), launch.location:
                    launch.operands[i] = cast(operand, pointer)
