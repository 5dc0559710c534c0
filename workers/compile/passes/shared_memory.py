"""Where a kernel's tiles live: farm-pad-tensor-core-tiles (tile rows padded free of bank conflicts),
farm-large-shared-to-dynamic (tiles past 48 KB as views of dynamic shared memory),
farm-workgroup-allocs-to-shared (block-local tensors to shared memory) and farm-scratch-to-stack (per-thread
scratch to entry-block allocas, which LLVM keeps in registers). The first two run after the tensor-core
conversion, the last two after the module merge.
"""
from __future__ import annotations

import math
from typing import Callable

from workers.compile.mlir import (ir, arith_dialect, memref_dialect, MlirError, main_func, ops_named, kernel_ops,
                                  WORKGROUP, shared_tiles, enclosing, INDEXED_ACCESSES)
from workers.compile.passes.k_loops import OVERLAPS_STAGED
from workers.compile.passes.tensor_core_conversion import _named_attributes
from workers.records import STATIC_SHARED_BYTES


def workgroup_allocs_to_shared(module: ir.Module) -> None:
    """A memref.alloc in workgroup memory inside a kernel is a tile the whole block shares (a
    tensor-core kernel's accumulator tile); device malloc cannot give shared memory, so it becomes
    a `.shared` array: a memref.global of the kernel module read through memref.get_global."""
    for n, alloc in enumerate(shared_tiles(kernel_ops(module, "memref.alloc"))):
        kernel_module = enclosing(alloc, "gpu.module")
        memref_type = alloc.results[0].type
        name = f"__farm_shared_{n}"
        alignment = alloc.attributes["alignment"] if "alignment" in alloc.attributes else None
        with ir.InsertionPoint.at_block_begin(kernel_module.regions[0].blocks[0]), alloc.location:
            memref_dialect.GlobalOp(name, ir.TypeAttr.get(memref_type), sym_visibility="private",
                                    alignment=alignment)
        with ir.InsertionPoint(alloc), alloc.location:
            shared = memref_dialect.GetGlobalOp(memref_type, name)
        alloc.results[0].replace_all_uses_with(shared.result)
        alloc.erase()


def pad_tensor_core_tiles(module: ir.Module, padded_columns: Callable[[int, int, bool], int]) -> None:
    """Widen the rows of a tensor-core kernel's 2-D shared tiles (workgroup allocations: the operand tiles
    it stages per K step, [rows, columns] or [buffers, rows, columns] where they are multi-buffered, and
    the epilogue's accumulator tile) to `padded_columns(columns, element_bytes, scalar_fragments)`, the
    tile becoming a view of the first columns: the warps' fragment accesses (ldmatrix: 8 rows of 16 bytes;
    scalar_fragments where no ldmatrix reads the tile, as TF32's B and the accumulator tile, whose
    fragments are 8 rows x 4 lanes of 1 or 2 words) of rows that are a multiple of 128 bytes apart fall
    in the same banks and are serialized. Run it after `fold-memref-alias-ops` (no subviews of the tile
    left); the new tile keeps the old one's attributes (its marks)."""
    for kernel in kernel_ops(module, "gpu.func"):
        if not ops_named(kernel, "nvgpu.mma.sync"):
            continue
        for alloc in shared_tiles(ops_named(kernel, "memref.alloc")):
            old = ir.MemRefType(alloc.results[0].type)
            accesses = [use.owner.name for use in alloc.results[0].uses]
            if old.rank < 2 or any(a not in INDEXED_ACCESSES for a in accesses):
                continue
            *outer, columns = old.shape
            width = padded_columns(columns, old.element_type.width // 8, "nvgpu.ldmatrix" not in accesses)
            if width != columns:
                widen_rows(alloc, width)


def widen_rows(alloc, width: int) -> ir.Value:
    """Replace the allocation `alloc` (rank 2 or more) by one whose rows hold `width` elements, the old
    shape becoming a view of its first columns (the new allocation keeps the old one's attributes: its
    marks); the subviews of it are retyped to the new strides. The view."""
    old = ir.MemRefType(alloc.results[0].type)
    *outer, _ = old.shape
    strides = [math.prod(outer[i + 1:]) * width for i in range(len(outer))] + [1]
    with ir.InsertionPoint(alloc), alloc.location:
        wide = memref_dialect.AllocOp(ir.MemRefType.get([*outer, width], old.element_type,
                                                        memory_space=old.memory_space), [], [])
        for attribute in _named_attributes(alloc):
            wide.operation.attributes[attribute.name] = attribute.attr
        view = memref_dialect.SubViewOp(
            ir.MemRefType.get(old.shape, old.element_type, ir.StridedLayoutAttr.get(0, strides),
                              memory_space=old.memory_space),
            wide.result, [], [], [], [0] * old.rank, old.shape, [1] * old.rank)
    alloc.results[0].replace_all_uses_with(view.result)
    alloc.erase()
    _restride_subviews(view.result)
    return view.result


def _restride_subviews(value: ir.Value) -> None:
    """Retype the subviews of `value`, and theirs, after its strides changed: a subview's strides are its
    source's times its own steps, its offset theirs where every offset is static."""
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    source_strides, source_offset = ir.MemRefType(value.type).get_strides_and_offset()
    for use in list(value.uses):
        view = use.owner
        if view.name != "memref.subview":
            continue
        result = view.results[0]
        t = ir.MemRefType(result.type)
        steps = list(ir.DenseI64ArrayAttr(view.attributes["static_strides"]))
        offsets = list(ir.DenseI64ArrayAttr(view.attributes["static_offsets"]))
        if t.rank != len(source_strides) or dynamic in steps:
            raise MlirError(f"cannot restride {view.name} to {t}: rank-reducing or dynamic steps")
        strides = [stride * step for stride, step in zip(source_strides, steps)]
        offset = dynamic if dynamic in (source_offset, *offsets) else \
            source_offset + sum(o * stride for o, stride in zip(offsets, source_strides))
        result.set_type(ir.MemRefType.get(t.shape, t.element_type, ir.StridedLayoutAttr.get(offset, strides),
                                          memory_space=t.memory_space))
        _restride_subviews(result)


SHARED_ALIGNMENT = 128  # bytes between the starts of two tiles in dynamic shared memory
# gpu.launch_func's operand groups, in order (its operandSegmentSizes)
LAUNCH_SEGMENTS = ["asyncDependencies", "gridSizeX", "gridSizeY", "gridSizeZ", "blockSizeX", "blockSizeY",
                   "blockSizeZ", "clusterSizeX", "clusterSizeY", "clusterSizeZ", "dynamicSharedMemorySize",
                   "kernelOperands", "asyncObject"]


def _bytes(memref_type: ir.MemRefType) -> int:
    return math.prod(memref_type.shape) * memref_type.element_type.width // 8


def large_shared_to_dynamic(module: ir.Module) -> None:
    """A kernel whose shared tiles (workgroup allocations) need more than STATIC_SHARED_BYTES, or some of
    which overlap others (OVERLAPS_STAGED: from offset 0 again, after the rest), gets them as views of its
    dynamic shared memory (an extern .shared array), each SHARED_ALIGNMENT-aligned, and its launch asks
    for what they span (dynamicSharedMemorySize; the measure worker lets the kernel use more than 48 KB).
    Run it before the launches are read (host.LaunchSequence)."""
    for kernel in kernel_ops(module, "gpu.func"):
        tiles = shared_tiles(ops_named(kernel, "memref.alloc"))
        overlapping = [a for a in tiles if OVERLAPS_STAGED in a.attributes]
        if sum(_bytes(ir.MemRefType(a.results[0].type)) for a in tiles) <= STATIC_SHARED_BYTES and not overlapping:
            continue
        memory = _dynamic_shared_memory(kernel)
        span = 0
        for group in ([a for a in tiles if OVERLAPS_STAGED not in a.attributes], overlapping):
            offset = 0
            for alloc in group:
                tile = ir.MemRefType(alloc.results[0].type)
                with ir.InsertionPoint(alloc), alloc.location:
                    shift = arith_dialect.ConstantOp(ir.IndexType.get(), offset).result
                    view = memref_dialect.ViewOp(tile, memory, shift, [])
                alloc.results[0].replace_all_uses_with(view.result)
                alloc.erase()
                offset += -(-_bytes(tile) // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
            span = max(span, offset)
        _set_launch_shared_bytes(module, kernel, span)


DYNAMIC_SHARED = "__farm_dynamic_shared"
# the array's start: a wgmma kernel's 128-byte swizzled tiles (at offset 0) start at a multiple of 1024 bytes
DYNAMIC_SHARED_ALIGNMENT = 1024


def _dynamic_shared_memory(kernel) -> ir.Value:
    """The kernel's dynamic shared memory as a memref<?xi8>: an external zero-length .shared array
    (gpu.dynamic_shared_memory's is internal, which the NVPTX back end demotes to one static byte)."""
    workgroup = ir.Attribute.parse(WORKGROUP)
    i8 = ir.IntegerType.get_signless(8)
    declared = ir.MemRefType.get([0], i8, memory_space=workgroup)
    gpu_module = kernel.parent
    if not any(op.name == "memref.global" and ir.StringAttr(op.attributes["sym_name"]).value == DYNAMIC_SHARED
               for op in gpu_module.regions[0].blocks[0].operations):
        with ir.InsertionPoint.at_block_begin(gpu_module.regions[0].blocks[0]), kernel.location:
            memref_dialect.GlobalOp(DYNAMIC_SHARED, ir.TypeAttr.get(declared), alignment=DYNAMIC_SHARED_ALIGNMENT)
    with ir.InsertionPoint.at_block_begin(kernel.regions[0].blocks[0]), kernel.location:
        array = memref_dialect.GetGlobalOp(declared, DYNAMIC_SHARED).result
        return memref_dialect.CastOp(ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], i8, memory_space=workgroup),
                                     array).result


def _set_launch_shared_bytes(module: ir.Module, kernel, size: int) -> None:
    """Give every launch of `kernel` (an outlined gpu.func) `size` bytes of dynamic shared memory."""
    gpu_module = kernel.parent
    target = f"@{ir.StringAttr(gpu_module.attributes['sym_name']).value}::@{ir.StringAttr(kernel.attributes['sym_name']).value}"
    for launch in ops_named(main_func(module), "gpu.launch_func"):
        if str(launch.attributes["kernel"]) != target:
            continue
        counts = list(ir.DenseI32ArrayAttr(launch.attributes["operandSegmentSizes"]))
        at = LAUNCH_SEGMENTS.index("dynamicSharedMemorySize")
        start = sum(counts[:at])
        operands = list(launch.operands)
        with ir.InsertionPoint(launch), launch.location:
            bytes_ = arith_dialect.ConstantOp(ir.IntegerType.get_signless(32), size).result
            operands[start:start + counts[at]] = [bytes_]
            counts[at] = 1
            attributes = {a.name: a.attr for a in _named_attributes(launch)}
            attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(counts)
            sized = ir.Operation.create("gpu.launch_func", results=[r.type for r in launch.results],
                                        operands=operands, attributes=attributes)
        for old, new in zip(launch.results, sized.results):
            old.replace_all_uses_with(new)
        launch.erase()


def scratch_to_stack(module: ir.Module) -> None:
    """A memref.alloc inside a kernel is per-thread scratch (e.g. a fused producer's tile); as an
    alloca it lives in registers/local memory instead of calling device malloc. The alloca goes to the
    kernel's entry block: LLVM's SROA promotes only entry-block allocas to registers, and one inside a
    loop (an img2col gather's tile per K step) stayed a local-memory array. Run it after
    `workgroup_allocs_to_shared`."""
    for alloc in kernel_ops(module, "memref.alloc"):
        if alloc.operands:
            raise MlirError("a kernel needs per-thread scratch of dynamic size; use tiles that divide the "
                            "loop extents")
        kernel = enclosing(alloc, "gpu.func")
        # an alloc's lifetime ends with its iteration unless a loop carries it on (yields it)
        carried = any(use.owner.name == "scf.yield" for use in alloc.results[0].uses)
        point = ir.InsertionPoint(alloc) if carried else ir.InsertionPoint.at_block_begin(kernel.regions[0].blocks[0])
        with point, alloc.location:
            alloca = ir.Operation.create("memref.alloca", results=[alloc.results[0].type],
                                         operands=[], attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])})
        alloc.results[0].replace_all_uses_with(alloca.results[0])
        alloc.erase()
