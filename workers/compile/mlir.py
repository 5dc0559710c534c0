"""The one place that touches the MLIR Python bindings that carry the NVPTX back end.

torch-mlir's own bundled MLIR lacks NVPTX, so it is used only to import models; everything from
model_linalg.mlir on goes through the upstream bindings shipped in numba-cuda-mlir.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
from typing import Callable, Iterator

from numba_cuda_mlir._mlir import ir, passmanager  # noqa: F401  (re-exported)
from numba_cuda_mlir._mlir.dialects import builtin as builtin_dialect
from numba_cuda_mlir._mlir.dialects import arith as arith_dialect
from numba_cuda_mlir._mlir.dialects import gpu as gpu_dialect
from numba_cuda_mlir._mlir.dialects import linalg as linalg_dialect
from numba_cuda_mlir._mlir.dialects import memref as memref_dialect
from numba_cuda_mlir._mlir.dialects import nvgpu as nvgpu_dialect
from numba_cuda_mlir._mlir.dialects import vector as vector_dialect
from numba_cuda_mlir._mlir.dialects.transform import interpreter

from workers.compile import kernel_marks
from workers.records import STATIC_SHARED_BYTES, WARP_SIZE


class MlirError(Exception):
    """An MLIR parse, pass or transform failure, with MLIR's diagnostics as the message."""


@contextlib.contextmanager
def context() -> Iterator[ir.Context]:
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = False
        yield ctx


def parse(text: str, what: str) -> ir.Module:
    """A module from text; its ops' locations are loc("-":line:col) (PAYLOAD_LINE finds them in diagnostics)."""
    try:
        return ir.Module.parse(text)
    except ir.MLIRError as e:
        raise MlirError(f"cannot parse {what}: {e}") from None


def parse_file(path: str) -> ir.Module:
    """A module from a file; its ops' locations name the file (a schedule's diagnostics then say which of
    its lines failed, apart from the payload's, which parse() reads from text)."""
    try:
        return ir.Module.parseFile(path)
    except ir.MLIRError as e:
        raise MlirError(f"cannot parse {os.path.basename(path)}: {e}") from None


PAYLOAD_LINE = re.compile(r'"-":(\d+):')  # a payload op's location in a diagnostic (parsed by parse())


def source_lines(op) -> list[int]:
    """The payload lines an op's location names (several where fusion merged ops)."""
    return [int(n) for n in PAYLOAD_LINE.findall(str(op.location))]


def run_pipeline(module: ir.Module, pipeline: str) -> None:
    try:
        passmanager.PassManager.parse(pipeline).run(module.operation)
    except (ir.MLIRError, ValueError) as e:
        raise MlirError(f"pass pipeline {pipeline!r} failed: {e}") from None


def _sequence(transform_module: ir.Module, name: str):
    return next((op for op in transform_module.body.operations
                 if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == name), None)


def apply_transform(payload: ir.Module, transform_module: ir.Module, entry: str) -> None:
    sequence = _sequence(transform_module, entry)
    if sequence is None:
        raise MlirError(f"transform.mlir has no @{entry} named sequence")
    try:
        interpreter.apply_named_sequence(payload.operation, sequence, transform_module.operation)
    except (ir.MLIRError, ValueError) as e:  # the interpreter reports failures as ValueError
        raise MlirError(f"the transform schedule failed: {e}") from None


def run_on_contracting_kernels(module: ir.Module, pipeline: str) -> None:
    """Run `pipeline` (anchored on gpu.func) on each kernel that still holds a vector.contract; a
    kernel that stages bf16 operand tiles goes through it with them typed f16 (stage_bf16_as_f16), and
    gets them back as bf16 after it (restore_bf16_tiles)."""
    for kernel in _kernel_ops(module, "gpu.func"):
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


def _views(value: ir.Value) -> list[ir.Value]:
    """`value` (a memref) and the subviews of it, transitively (a multi-buffered tile's buffers)."""
    found = [value]
    for use in value.uses:
        if use.owner.name == "memref.subview":
            found += _views(use.owner.results[0])
    return found


def _retype(value: ir.Value, element: ir.Type) -> None:
    old = ir.MemRefType(value.type)
    value.set_type(ir.MemRefType.get(old.shape, element, old.layout, memory_space=old.memory_space))


def _accesses(value: ir.Value) -> list:
    """The ops that read or write the tile `value` other than through its subviews."""
    return [use.owner for view in _views(value) for use in view.uses if use.owner.name != "memref.subview"]


def stage_bf16_as_f16(kernel) -> bool:
    """convert-vector-to-gpu has no mma fragments for bf16 (mma.sync has m16n8k16 for it, as for f16):
    the kernel's bf16 operand tiles in shared memory (and their subviews, a multi-buffered tile's
    buffers) are typed f16 (the same 16 bits, copied in through a vector.bitcast), so that the
    contractions reading them become ldmatrix + mma.sync on "f16" fragments; restore_bf16_tiles types
    them back after the conversion. Only where every access to such a tile is a copy into it
    (vector.transfer_write) or a read that only contractions take (no arithmetic ever sees the f16
    typing); the tiles are marked BF16_AS_F16; returns whether the kernel was retyped."""
    bf16, f16 = ir.BF16Type.get(), ir.F16Type.get()
    tiles = [a for a in _shared_tiles(ops_named(kernel, "memref.alloc"))
             if ir.MemRefType(a.results[0].type).element_type == bf16]

    def staged(op) -> bool:
        return op.name == "vector.transfer_write" or op.name == "vector.transfer_read" and all(
            u.owner.name == "vector.contract" for u in op.results[0].uses)

    if not tiles or not all(staged(op) for a in tiles for op in _accesses(a.results[0])):
        return False
    for alloc in tiles:
        accesses = _accesses(alloc.results[0])
        for view in _views(alloc.results[0]):
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
        for view in _views(alloc.results[0]):
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


def _extended(value) -> ir.Value | None:
    """The tensor that `value` extends elementwise (by a linalg.generic of identity maps whose body is
    one arith.extf), else None."""
    op = getattr(value.owner, "operation", None)
    if op is None or op.name != "linalg.generic" or len(op.operands) != 2:
        return None
    if [o.operation.name for o in op.regions[0].blocks[0].operations] != ["arith.extf", "linalg.yield"]:
        return None
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return op.operands[0] if all(m == ir.AffineMap.get_identity(m.n_dims) for m in maps) else None


PLAIN_MATMUL_MAPS = ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"]


def narrow_matmul_operands(module: ir.Module) -> None:
    """A linalg.matmul of two tensors of one narrow float type extended by elementwise ops (torch's
    addmm of an f16 nn.Linear with a bias extends x and W^T to f32) multiplies the narrow tensors
    instead: linalg.matmul extends its operands to the accumulator's type itself (the same arithmetic),
    and tensor cores take 16-bit operands. The extensions, left without uses, go at the next cleanup."""
    for op in list(main_func(module).regions[0].blocks[0].operations):
        if op.operation.name != "linalg.matmul":
            continue
        maps = [str(ir.AffineMapAttr(a).value) for a in ir.ArrayAttr(op.operation.attributes["indexing_maps"])]
        if maps != PLAIN_MATMUL_MAPS:
            continue  # the rebuilt matmul would have the plain ones
        a, b, init = op.operation.operands
        narrow = [_extended(a), _extended(b)]
        if any(v is None for v in narrow) or narrow[0].type.element_type != narrow[1].type.element_type:
            continue
        with ir.InsertionPoint(op), op.location:
            narrowed = linalg_dialect.matmul(*narrow, outs=[init])
        op.operation.results[0].replace_all_uses_with(narrowed)
        op.operation.erase()


def symbol(op) -> str | None:
    """An op's sym_name, or None."""
    return ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes else None


def launched_kernels(module: ir.Module) -> list:
    """The gpu.func each gpu.launch_func of the host launches, in launch order."""
    funcs = {(symbol(gm), symbol(func)): func for gm in module.body.operations
             if gm.operation.name == "gpu.module" for func in ops_named(gm, "gpu.func")}
    return [funcs[tuple(part.lstrip("@") for part in str(launch.attributes["kernel"]).split("::"))]
            for launch in ops_named(main_func(module), "gpu.launch_func")]


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


def ops_named(root, name: str, first_only: bool = False) -> list:
    """The ops called `name` inside `root` (itself included), in walk order; the first only, if asked."""
    found = []

    def collect(op):
        if op.name == name:
            found.append(op)
            if first_only:
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.operation.walk(collect)
    return found


def _kernel_ops(module: ir.Module, name: str) -> list:
    return [found for op in module.body.operations if op.operation.name == "gpu.module"
            for found in ops_named(op, name)]


WORKGROUP = "#gpu.address_space<workgroup>"


def _is_memref(value: ir.Value) -> bool:
    return value.type.typeid == ir.MemRefType.static_typeid


def in_shared_memory(value: ir.Value) -> bool:
    """Whether `value` is a memref in workgroup (shared) memory."""
    return _is_memref(value) and str(ir.MemRefType(value.type).memory_space) == WORKGROUP


def _shared_tiles(ops: list) -> list:
    """The memref.allocs among `ops` that are in shared memory."""
    return [a for a in ops if in_shared_memory(a.results[0])]


def enclosing(op, name: str):
    """`op` itself, or the nearest op around it called `name`; None where none is."""
    while op is not None and op.name != name:
        op = op.parent
    return op


def siblings(op) -> tuple[list, int]:
    """The ops of `op`'s block, in order, and `op`'s position among them."""
    ops = [o.operation for o in op.operation.block.operations]
    return ops, ops.index(op.operation)


def workgroup_allocs_to_shared(module: ir.Module) -> None:
    """A memref.alloc in workgroup memory inside a kernel is a tile the whole block shares (a
    tensor-core kernel's accumulator tile); device malloc cannot give shared memory, so it becomes
    a `.shared` array: a memref.global of the kernel module read through memref.get_global."""
    for n, alloc in enumerate(_shared_tiles(_kernel_ops(module, "memref.alloc"))):
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


# ops that take a shared tile through indices alone (no result type derived from its layout), so
# the tile may become a strided view of a wider buffer
INDEXED_ACCESSES = ("memref.load", "memref.store", "vector.load", "vector.store", "vector.transfer_read",
                    "vector.transfer_write", "nvgpu.ldmatrix", "nvgpu.device_async_copy")


def pad_tensor_core_tiles(module: ir.Module, padded_columns: Callable[[int, int, bool], int]) -> None:
    """Widen the rows of a tensor-core kernel's 2-D shared tiles (workgroup allocations: the operand tiles
    it stages per K step, [rows, columns] or [buffers, rows, columns] where they are multi-buffered, and
    the epilogue's accumulator tile) to `padded_columns(columns, element_bytes, scalar_fragments)`, the
    tile becoming a view of the first columns: the warps' fragment accesses (ldmatrix: 8 rows of 16 bytes;
    scalar_fragments where no ldmatrix reads the tile, as TF32's B and the accumulator tile, whose
    fragments are 8 rows x 4 lanes of 1 or 2 words) of rows that are a multiple of 128 bytes apart fall
    in the same banks and are serialized. Run it after `fold-memref-alias-ops` (no subviews of the tile
    left); the new tile keeps the old one's attributes (its marks)."""
    for kernel in _kernel_ops(module, "gpu.func"):
        if not ops_named(kernel, "nvgpu.mma.sync"):
            continue
        for alloc in _shared_tiles(ops_named(kernel, "memref.alloc")):
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


OVERLAPS_STAGED = "farm.overlaps_staged"  # a shared tile dead while its kernel's staged tiles are in use


def overlap_tiles_dead_in_k_loops(module: ir.Module, staged_mark: str, loop_mark: str) -> None:
    """In a kernel whose K loop (marked `loop_mark`) fills its staged tiles (marked `staged_mark`) by
    cp.async, the other shared tiles are dead while the loop runs when no op from the first cp.async of
    the loop's prologue to the loop's end touches them (the epilogue's accumulator tile: the fill's zeros
    read into registers before, the warps' results written after): they are marked OVERLAPS_STAGED, to
    share memory with the staged tiles (large_shared_to_dynamic), and the kernel gets the barriers that
    sharing needs: one before that first cp.async (no copy overwrites zeros a warp has yet to read), and
    after the loop a wait for all of the thread's copies (also the zero-filling ones of the predicated
    last steps) and a barrier (everyone's)."""
    for loop in _kernel_ops(module, "scf.for"):
        if loop_mark not in loop.attributes:
            continue
        block, at = siblings(loop)
        copies = [i for i, op in enumerate(block[:at]) if op.name == "nvgpu.device_async_copy"]
        others = [a for a in _shared_tiles(ops_named(enclosing(loop, "gpu.func"), "memref.alloc"))
                  if staged_mark not in a.attributes]
        if not copies or not others:
            continue

        def position(op) -> int:  # of the op's ancestor in the loop's block
            while op.block != loop.operation.block:
                op = op.parent.operation
            return block.index(op)

        if any(copies[0] <= position(use.owner.operation) <= at for a in others for use in a.results[0].uses):
            continue
        with ir.InsertionPoint(block[copies[0]]), loop.location:
            gpu_dialect.BarrierOp()
        token = next(r for r in loop.results if "async.token" in str(r.type))
        with ir.InsertionPoint(block[at + 1] if at + 1 < len(block) else loop.operation.block), loop.location:
            nvgpu_dialect.DeviceAsyncWaitOp(token, numGroups=0)
            gpu_dialect.BarrierOp()
        for alloc in others:
            alloc.attributes[OVERLAPS_STAGED] = ir.UnitAttr.get()


def _barrier_segments(block) -> tuple[list[list], list]:
    """A block's ops (its terminator left out) split at its gpu.barriers: the segments between them, and
    the barriers."""
    segments, barriers = [[]], []
    for op in list(block.operations)[:-1]:
        if op.operation.name == "gpu.barrier":
            barriers.append(op.operation)
            segments.append([])
        else:
            segments[-1].append(op.operation)
    return segments, barriers


def _issues_copies_only(segment: list) -> bool:
    """Whether the ops issue cp.async copies into shared memory and touch it in no other way."""
    return any(op.name == "nvgpu.device_async_copy" for op in segment) and all(
        op.name in ("nvgpu.device_async_copy", "nvgpu.device_async_create_group")
        or not op.regions and not any(in_shared_memory(v) for v in op.operands) for op in segment)


def trim_k_loop_barriers(module: ir.Module, loop_mark: str, ahead_mark: str) -> None:
    """The barriers of a pipelined K loop (marked `loop_mark`) that order nothing: the thread mapping's
    between one step's A copies and its B copies (cp.async into different buffers, nothing reads shared
    memory between them). A loop also marked `ahead_mark` fills a buffer the warps left a step earlier
    (one more buffer than steps in flight): its copies move from after the step's mma to right after the
    barrier that follows the waits for the step's tiles, which orders them after every warp's reads of
    that buffer, and the barrier between the mma and the copies goes; one barrier per step remains."""
    for loop in _kernel_ops(module, "scf.for"):
        if loop_mark not in loop.attributes:
            continue
        segments, barriers = _barrier_segments(loop.regions[0].blocks[0])
        for i in reversed(range(len(barriers))):
            if _issues_copies_only(segments[i]) and _issues_copies_only(segments[i + 1]):
                barriers.pop(i).erase()
                segments[i] += segments.pop(i + 1)
        if ahead_mark not in loop.attributes:
            continue
        # the pipelined step: waits, barrier, the warps' mma, barrier, the copies of a later step
        if len(barriers) != 2 or not _issues_copies_only(segments[2]) or not segments[1]:
            raise MlirError(f"{ahead_mark}: the K loop is not waits, barrier, mma, barrier, copies")
        mma = set(segments[1])
        if any(v.owner in mma for op in segments[2] for v in op.operands):
            raise MlirError(f"{ahead_mark}: the copies use a value the mma computes")
        for op in segments[2]:
            op.move_before(segments[1][0])
        barriers[1].erase()


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
    for kernel in _kernel_ops(module, "gpu.func"):
        tiles = _shared_tiles(ops_named(kernel, "memref.alloc"))
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


STORES = ("vector.store", "vector.transfer_write", "memref.store")  # (value, memref, indices...)
# every op that may write memory through a memref operand, in the kernels this stage makes
WRITES = (*STORES, "vector.maskedstore", "vector.scatter", "memref.copy", "memref.atomic_rmw",
          "memref.generic_atomic_rmw", "nvgpu.device_async_copy")


def _writes_workgroup_memory(op) -> bool:
    return op.name in STORES and in_shared_memory(op.operands[1])


def sync_after_block_loops(module: ir.Module) -> None:
    """A barrier after what a block-wide loop (one with a gpu.barrier inside, e.g. a tensor-core K loop
    over operand tiles staged in shared memory) leaves to write to shared memory after it: the warps'
    accumulators that hoisting moved out of the loop, which the epilogue's threads read next. The thread
    mapping put its barrier inside the loop, before them; a barrier between the loop and those writes
    (overlap_tiles_dead_in_k_loops puts one there) does not order them before the reads."""
    for loop in _kernel_ops(module, "scf.for"):
        if not ops_named(loop, "gpu.barrier", first_only=True):
            continue
        ops, at = siblings(loop)
        last_write, synced = None, False
        for op in ops[at + 1:]:
            if op.regions or op.name == "gpu.barrier" and last_write is not None:
                synced = op.name == "gpu.barrier"
                break
            if _writes_workgroup_memory(op):
                last_write = op
        if last_write is not None and not synced:
            with ir.InsertionPoint(last_write), last_write.location:
                barrier = gpu_dialect.BarrierOp()
            barrier.operation.move_after(last_write)


READS = ("vector.load", "memref.load", "vector.transfer_read")


def _outside_shared_memory(value: ir.Value) -> bool:
    return _is_memref(value) and not in_shared_memory(value)


def _written_memory(op) -> tuple[bool, set]:
    """What `op`, or an op inside it, may write: (memory other than shared memory, the shared-memory
    allocations written, None among them for a shared memref of unknown allocation)."""
    outside, shared = False, set()

    def visit(o):
        nonlocal outside
        if o.name in WRITES:
            for v in o.operands:
                if _outside_shared_memory(v):
                    outside = True
                elif in_shared_memory(v):
                    shared.add(_root_alloc(v))
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return outside, shared


def _clobbered(alloc, outside: bool, allocs: set) -> bool:
    """Whether writes (`outside`: to memory other than shared memory; `allocs`: to these shared
    allocations, None for one unknown) may change what a load read from global memory (`alloc` None) or
    from the shared allocation `alloc`."""
    return outside if alloc is None else alloc in allocs or None in allocs


def reuse_reads(module: ir.Module) -> None:
    """A kernel that reads the same memory again reads it once: a load with the same operands,
    attributes and type as an earlier one of its block takes the earlier one's value where nothing in
    between may have written that memory. Global memory: a row kernel's passes over its row (max, sum,
    normalize, with barriers between them), read again up to a write to memory outside shared memory.
    Shared memory: a reduction's result read by every thread after each later merge (softmax's max for
    its sum and again for its output, whose exponentials then are computed once), read again up to a
    write to the same allocation; every thread runs the same ops, and the barriers that order the
    allocation's earlier writes before the first read order them before the second. LLVM keeps such
    loads, as the barriers between them clobber memory."""
    def blocks(op):
        for region in op.regions:
            for block in region.blocks:
                yield block
                for inner in block.operations:
                    yield from blocks(inner.operation)

    for kernel in _kernel_ops(module, "gpu.func"):
        for block in list(blocks(kernel.operation)):
            seen, repeated = {}, []  # key -> (first load, its shared allocation or None for global memory)
            for op in block.operations:
                source = op.operands[0] if op.name in READS else None
                alloc = _root_alloc(source) if source is not None and in_shared_memory(source) else None
                if source is not None and (_outside_shared_memory(source) or alloc is not None):
                    key = (op.name, tuple(op.operands), str(op.results[0].type),
                           tuple((a.name, str(a.attr)) for a in _named_attributes(op)))
                    if key in seen:
                        repeated.append((op, seen[key][0]))
                    else:
                        seen[key] = (op, alloc)
                    continue
                outside, allocs = _written_memory(op.operation)
                seen = {key: (load, alloc) for key, (load, alloc) in seen.items()
                        if not _clobbered(alloc, outside, allocs)}
            for op, first in repeated:
                op.results[0].replace_all_uses_with(first.results[0])
                op.erase()


def interleave_thread_columns(module: ir.Module, vector_bytes: int) -> list[str]:
    """In the kernels marked kernel_marks.INTERLEAVE_COLUMNS (schedule knob interleave_columns: a row kernel or block reduction
    of T threads, thread t owning the run of W columns from t W of each row it reads or writes), thread t's j-th
    vector of V columns (`vector_bytes` of them) moves to column (j T + t) V: each warp-wide access then
    covers 32 V neighbouring columns (512 bytes of f32) instead of one vector in every W, which held a
    LayerNorm over rows of 8192 f32 at 0.67x of copy bandwidth (0.94x interleaved, on the H200:
    benchmarks/probes/row_layout.cu). The same bijection of the columns applies to every access of
    global memory through a thread's run (a `memref.subview` at offset `thread_id.x * W` of W columns,
    read or written whole by a vector.load or vector.store), so each elementwise result still meets its
    own operands, and each row reduction adds the same columns in another order. A named kernel with no
    such access, runs of two widths, or a global access of another form that depends on the thread (a
    gather) is left as it was; the returned notes name it. Run it after `reuse_reads` (which matches loads
    by their operands)."""
    notes = []
    for kernel in _kernel_ops(module, "gpu.func"):
        name = ir.StringAttr(kernel.attributes["sym_name"]).value
        if kernel_marks.INTERLEAVE_COLUMNS not in kernel.attributes:
            continue
        runs = {op.results[0]: width for op in ops_named(kernel, "affine.apply") if (width := _thread_run_width(op))}
        moved, others = [], []
        for access in [op for n in INDEXED_ACCESSES for op in ops_named(kernel, n)]:
            if _outside_shared_memory(access.operands[memref_position(access)]):
                view = _whole_run_view(access, runs)
                (moved if view is not None else others).append((access, view))
        widths = {runs[_run_start(view)] for _, view in moved}
        threads = _known_block_size(kernel)[0]
        depends = _thread_dependence()
        lanes = {vector_bytes * 8 // ir.VectorType(_accessed_vector(access)).element_type.width for access, _ in moved}
        if not moved or len(widths) != 1 or len(lanes) != 1 or min(widths) % min(lanes) or not threads \
                or any(depends(v) for access, _ in others for v in _address_operands(access)) \
                or any(depends(v) for _, view in moved for v in list(view.operands)[1:-1]):
            notes.append(f"interleave_columns left kernel {name} as it was: it has no thread runs of whole vectors "
                         "that each of its global accesses depending on the thread reads or writes whole")
            continue
        for access, view in moved:
            _interleave(access, view, min(lanes), threads)
    return notes


def _accessed_vector(access) -> ir.Type:
    """The type of the vector that a vector.load reads or a vector.store writes."""
    return access.operands[0].type if access.name == "vector.store" else access.results[0].type


def memref_position(access) -> int:
    """The operand position of the memref that an indexed access (INDEXED_ACCESSES) reads or writes."""
    return 1 if access.name in STORES else 0


def _thread_run_width(apply) -> int:
    """W where `apply` is `affine.apply ()[s0] -> (s0 * W)` of thread_id.x (the start of a thread's run of
    W columns), else 0."""
    if len(apply.operands) != 1 or not _is_thread_id_x(apply.operands[0]):
        return 0
    head, _, width = str(ir.AffineMapAttr(apply.attributes["map"]).value).rpartition(" * ")
    return int(width[:-1]) if head == "()[s0] -> (s0" and width[:-1].isdigit() and int(width[:-1]) > 1 else 0


def _is_constant_zero(value: ir.Value) -> bool:
    owner = value.owner
    return isinstance(owner, ir.OpView) and owner.name == "arith.constant" \
        and value.type.typeid == ir.IndexType.static_typeid and ir.IntegerAttr(owner.attributes["value"]).value == 0


def _whole_run_view(access, runs: dict) -> ir.OpView | None:
    """The subview of a thread's run (its last offset a run start, on its source's last dim, W columns of
    stride 1; no dynamic size or stride) that the vector.load or vector.store `access` reads or writes
    whole (a 1-D vector of W elements at index 0, through views without dynamic operands), or None."""
    if access.name not in ("vector.load", "vector.store"):
        return None
    at = memref_position(access)
    vector = ir.VectorType(_accessed_vector(access))
    if vector.rank != 1 or not all(_is_constant_zero(i) for i in access.operands[at + 1:]):
        return None
    view = access.operands[at].owner
    while isinstance(view, ir.OpView) and view.name == "memref.subview":
        if len(view.operands) > 1:
            offsets, sizes, strides = (list(ir.DenseI64ArrayAttr(view.attributes[f"static_{k}"]))
                                       for k in ("offsets", "sizes", "strides"))
            dynamic = offsets.count(ir.ShapedType.get_dynamic_stride_or_offset())
            start = _run_start(view)
            whole = len(view.operands) == 1 + dynamic and offsets[-1] == ir.ShapedType.get_dynamic_stride_or_offset() \
                and start in runs and sizes[-1] == runs[start] == vector.shape[0] and strides[-1] == 1
            return view if whole else None
        view = view.operands[0].owner
    return None


def _run_start(run_view) -> ir.Value:
    """The last offset of a thread's run subview: the start of the run."""
    return run_view.operands[len(run_view.operands) - 1]


def _address_operands(access) -> list[ir.Value]:
    """What the address of `access` is made of: its indices and the operands of the views it goes through."""
    at = memref_position(access)
    values, view = list(access.operands[at + 1:]), access.operands[at].owner
    while isinstance(view, ir.OpView) and view.name == "memref.subview":
        values += list(view.operands[1:])
        view = view.operands[0].owner
    return values


def _thread_dependence() -> Callable[[ir.Value], bool]:
    """A memoized test: whether a value is computed from gpu.thread_id."""
    known: dict = {}

    def depends(value: ir.Value) -> bool:
        owner = value.owner
        if not isinstance(owner, ir.OpView):
            return False
        if owner not in known:
            known[owner] = owner.name == "gpu.thread_id" or any(depends(v) for v in owner.operands)
        return known[owner]
    return depends


def _interleave(access, run_view, lanes: int, threads: int) -> None:
    """Replace `access` (a whole run of W columns through `run_view`) by its W / V vectors of V = `lanes`
    elements, the j-th at column (j threads + thread_id.x) V instead of thread_id.x W + j V."""
    at = memref_position(access)
    whole = ir.VectorType(_accessed_vector(access))
    element, width = whole.element_type, whole.shape[0]
    tid = _run_start(run_view).owner.operands[0]
    run_type = ir.MemRefType(run_view.results[0].type)
    part_type = ir.MemRefType.get([*run_type.shape[:-1], lanes], element, run_type.layout,
                                  memory_space=run_type.memory_space)
    part_vector = ir.VectorType.get([lanes], element)
    offsets, sizes, strides = (list(ir.DenseI64ArrayAttr(run_view.attributes[f"static_{k}"]))
                               for k in ("offsets", "sizes", "strides"))
    index = ir.IndexType.get()
    with ir.InsertionPoint(access), access.location:
        zeros = [arith_dialect.ConstantOp(index, 0).result] * part_type.rank
        parts = []
        for j in range(width // lanes):
            column = ir.Operation.create("affine.apply", results=[index], operands=[tid], attributes={
                "map": ir.AffineMapAttr.get(ir.AffineMap.get(0, 1, [
                    ir.AffineSymbolExpr.get(0) * lanes + j * lanes * threads]))}).results[0]
            dynamic_offsets = [*list(run_view.operands)[1:-1], column]
            parts.append(memref_dialect.SubViewOp(part_type, run_view.operands[0], dynamic_offsets, [], [], offsets,
                                                  [*sizes[:-1], lanes], strides).result)
        if at:
            for j, part in enumerate(parts):
                piece = vector_dialect.extract_strided_slice(part_vector, access.operands[0], [j * lanes], [lanes], [1])
                vector_dialect.store(piece, part, zeros)
        else:
            value = arith_dialect.ConstantOp(whole, ir.DenseElementsAttr.get_splat(
                whole, ir.FloatAttr.get(element, 0.0) if isinstance(element, ir.FloatType)
                else ir.IntegerAttr.get(element, 0))).result
            for j, part in enumerate(parts):
                value = vector_dialect.insert_strided_slice(vector_dialect.load(part_vector, part, zeros), value,
                                                            [j * lanes], [1])
            access.results[0].replace_all_uses_with(value)
    access.erase()


THREAD_BELOW = 6  # arith.cmpi predicate ult: `thread_id.x < bound` guards a merge step's threads
WARP_COMBINE = {"add": arith_dialect.AddFOp, "mul": arith_dialect.MulFOp, "maximumf": arith_dialect.MaximumFOp,
                "minimumf": arith_dialect.MinimumFOp, "maxnumf": arith_dialect.MaxNumFOp,
                "minnumf": arith_dialect.MinNumFOp}


def merge_in_a_warp(module: ir.Module) -> list[str]:
    """In the kernels marked kernel_marks.WARP_MERGE (schedule knob warp_merge), a block reduction's merge (as
    schedule.emission._emit_merge emits it: each thread's partial into shared memory, a barrier, a warp,
    `scf.if thread_id.x < 32`, whose lane t reduces the partials of threads n t .. n t + n - 1, a barrier,
    one thread, `scf.if thread_id.x < 1`, combining the warp's 32 values and storing the result) runs in
    warp shuffles (gpu.shuffle xor; a 64-bit value takes two): each group of n lanes combines its partials
    before storing them, so that lane t of the merging warp reads one value, and the merging warp
    combines its 32 values itself, its first thread storing the result. Per reduction a barrier and two
    serial chains (n and 32 long) less. Float reductions of a block whose warps lie along x only; a named
    kernel where no merge takes it is left as it was, and the returned notes name it. Run it before
    `workgroup_allocs_to_shared` (it follows the tiles' memref.allocs)."""
    notes = []
    for kernel in _kernel_ops(module, "gpu.func"):
        name = ir.StringAttr(kernel.attributes["sym_name"]).value
        if kernel_marks.WARP_MERGE not in kernel.attributes:
            continue
        x, y, z = _known_block_size(kernel)
        lasts = [op for op in ops_named(kernel, "scf.if") if _thread_below(op.operands[0], 1)
                 and op.operation.parent.name == "gpu.func"]  # every thread of the block reaches it
        rewritten = [_merge_in_a_warp(last) for last in lasts] if x % WARP_SIZE == 0 and y == z == 1 else []
        if not any(rewritten):
            notes.append(f"warp_merge left kernel {name} as it was: it has no block reduction whose merge a warp can "
                         f"take (32 partials of partials of a float reduction, threads along x: block {[x, y, z]})")
    return notes


def _thread_below(value: ir.Value, bound: int) -> bool:
    """`value` is `arith.cmpi ult, thread_id.x, bound`."""
    cmp = value.owner
    if not isinstance(cmp, ir.OpView) or cmp.name != "arith.cmpi" \
            or ir.IntegerAttr(cmp.attributes["predicate"]).value != THREAD_BELOW:
        return False
    tid, limit = cmp.operands
    return _is_thread_id_x(tid) and isinstance(limit.owner, ir.OpView) \
        and limit.owner.name == "arith.constant" and ir.IntegerAttr(limit.owner.attributes["value"]).value == bound


def _is_thread_id_x(value: ir.Value) -> bool:
    """`value` is `gpu.thread_id x`."""
    return isinstance(value.owner, ir.OpView) and value.owner.name == "gpu.thread_id" \
        and str(value.owner.attributes["dimension"]) == "#gpu<dim x>"


def _known_block_size(kernel) -> tuple[int, int, int]:
    """A gpu.func's known_block_size, or (0, 0, 0) where it has none."""
    if "known_block_size" not in kernel.attributes:
        return 0, 0, 0
    x, y, z = ir.DenseI32ArrayAttr(kernel.attributes["known_block_size"])
    return x, y, z


def _root_alloc(value: ir.Value):
    """The memref.alloc that `value` views (through subviews), or None."""
    while isinstance(value.owner, ir.OpView) and value.owner.name == "memref.subview":
        value = value.owner.operands[0]
    return value.owner.operation if isinstance(value.owner, ir.OpView) and value.owner.name == "memref.alloc" else None


def _merge_step(step):
    """The one float vector.reduction in the merge step `step`, of a vector.load of up to 32 values
    (a power of two): (reduction, combining op, load, values), or None."""
    reductions = ops_named(step, "vector.reduction")
    if len(reductions) != 1:
        return None
    reduction = reductions[0]
    kind = str(reduction.attributes["kind"]).removeprefix("#vector.kind<").removesuffix(">")
    load, vector = reduction.operands[0].owner, ir.VectorType(reduction.operands[0].type)
    values = vector.shape[0] if vector.rank == 1 else 0
    if kind not in WARP_COMBINE or not isinstance(load, ir.OpView) or load.name != "vector.load" \
            or not isinstance(vector.element_type, ir.FloatType) or not values or WARP_SIZE % values:
        return None
    return reduction, WARP_COMBINE[kind], load, values


def _butterfly(value: ir.Value, combine, lanes: int) -> ir.Value:
    """At the insertion point: `value` combined over each aligned group of `lanes` lanes by xor shuffles."""
    i32 = ir.IntegerType.get_signless(32)
    width = arith_dialect.ConstantOp(i32, WARP_SIZE).result
    offset = lanes // 2
    while offset:
        other = gpu_dialect.ShuffleOp(value, arith_dialect.ConstantOp(i32, offset).result, width,
                                      gpu_dialect.ShuffleMode.XOR).results[0]
        value, offset = combine(value, other).result, offset // 2
    return value


def _reduce_to(reduction, load, value: ir.Value, combine) -> None:
    """`reduction` (of `load`) becomes `value` combined with the reduction's initial value."""
    if len(reduction.operands) > 1:
        with ir.InsertionPoint(reduction), reduction.location:
            value = combine(value, reduction.operands[1]).result
    reduction.results[0].replace_all_uses_with(value)
    reduction.operation.erase()
    if not list(load.results[0].uses):
        load.operation.erase()


def _merge_in_a_warp(last) -> bool:
    """Rewrite the merge whose last step is the one-thread `scf.if` `last` (see merge_in_a_warp). The
    partials: each group of n lanes (n: what a lane of the merging warp reduces) combines them before
    the stores, and that lane reads its group's first. The last step: the ops between the warp's step and
    `last` (allocations, constants, conditions) move before the warp's step, `last` moves into it after
    the shuffles of its 32 values, its load and reduction become their total, and the barrier goes.
    False where the merge has another shape."""
    ops, at = siblings(last)
    barriers = [i for i in range(at) if ops[i].name == "gpu.barrier"]
    if not barriers or barriers[-1] == 0:
        return False
    barrier, warp, between = ops[barriers[-1]], ops[barriers[-1] - 1], ops[barriers[-1] + 1:at]
    final, first = _merge_step(last), _merge_step(warp)
    if warp.name != "scf.if" or not _thread_below(warp.operands[0], WARP_SIZE) or final is None \
            or final[3] != WARP_SIZE or any(op.name not in ("memref.alloc", "arith.constant", "arith.cmpi")
                                            for op in between):
        return False
    reduction, combine, load, _ = final
    results = _root_alloc(load.operands[0])
    stores = [op for op in ops_named(warp, "memref.store") if results is not None and _root_alloc(op.operands[1]) == results]
    if not stores:
        return False
    if first is not None:
        _partials_in_groups(first, ops[:barriers[-1] - 1])
    for op in between:
        op.move_before(warp)
    then = warp.regions[0].blocks[0].operations
    terminator = then[len(then) - 1]
    with ir.InsertionPoint(terminator), last.location:
        total = _butterfly(stores[-1].operands[0], combine, WARP_SIZE)
    last.operation.move_before(terminator)
    _reduce_to(reduction, load, total, combine)
    barrier.erase()
    return True


def _partials_in_groups(step, before: list) -> None:
    """The merging warp's `step` (reduction, combine, load, n): the threads' last stores of their
    partials (among the ops `before` it) store their group of n lanes' combined partial instead, and the
    step reads its group's first value in place of reducing n."""
    reduction, combine, load, lanes = step
    partials = _root_alloc(load.operands[0])
    stores = [op for op in before if op.name == "memref.store" and partials is not None
              and _root_alloc(op.operands[1]) == partials]
    if not stores:
        return
    store = stores[-1]
    with ir.InsertionPoint(store), store.location:
        store.operands[0] = _butterfly(store.operands[0], combine, lanes)
    with ir.InsertionPoint(load), load.location:
        group = memref_dialect.LoadOp(load.operands[0], list(load.operands[1:])).result
    _reduce_to(reduction, load, group, combine)


def scratch_to_stack(module: ir.Module) -> None:
    """A memref.alloc inside a kernel is per-thread scratch (e.g. a fused producer's tile); as an
    alloca it lives in registers/local memory instead of calling device malloc. The alloca goes to the
    kernel's entry block: LLVM's SROA promotes only entry-block allocas to registers, and one inside a
    loop (an img2col gather's tile per K step) stayed a local-memory array. Run it after
    `workgroup_allocs_to_shared`."""
    for alloc in _kernel_ops(module, "memref.alloc"):
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


def allow_fp_contraction(module: ir.Module) -> None:
    """Mark float multiply/add/sub inside kernels `contract`, so LLVM may fuse them into FMA."""
    contract = ir.Attribute.parse("#arith.fastmath<contract>")
    for op in [o for name in CONTRACTIBLE for o in _kernel_ops(module, name)]:
        op.attributes["fastmath"] = contract


def enable_tf32_mma(module: ir.Module) -> None:
    """Let mma.sync on f32 operands run as TF32: convert-vector-to-gpu does not set nvgpu.mma.sync's
    tf32Enabled, without which convert-nvgpu-to-nvvm leaves the op unconverted."""
    for op in _kernel_ops(module, "nvgpu.mma.sync"):
        if ir.VectorType(op.operands[0].type).element_type == ir.F32Type.get():
            op.attributes["tf32Enabled"] = ir.UnitAttr.get()


POINTER_ALIGNMENT = 16


def align_kernel_pointers(module: ir.Module) -> None:
    """Mark each memref argument of a kernel `llvm.align = 16`: with the bare-pointer ABI it is the base
    pointer of a whole device buffer (host views keep their source's pointer; the kernel applies the
    offset), and device allocations are at least 256-byte aligned (the measure worker copies any
    buffer that is not 16-byte aligned). LLVM then proves which loads and stores of 4 x 32 bits are
    16-byte aligned and emits ld.global.v4 / st.global.v4 for them."""
    align = ir.DictAttr.get({"llvm.align": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), POINTER_ALIGNMENT)})
    for func in _kernel_ops(module, "gpu.func"):
        if "kernel" not in func.attributes:
            continue
        inputs = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs
        old = list(ir.ArrayAttr(func.attributes["arg_attrs"])) if "arg_attrs" in func.attributes else []
        attrs = []
        for i, t in enumerate(inputs):
            d = ir.DictAttr(old[i]) if i < len(old) else None
            entries = {d[j].name: d[j].attr for j in range(len(d))} if d is not None else {}
            if isinstance(t, ir.MemRefType):
                entries["llvm.align"] = align["llvm.align"]
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

    for func in _kernel_ops(module, "gpu.func"):
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
