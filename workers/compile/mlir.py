"""The one place that touches the MLIR Python bindings that carry the NVPTX back end: parsing, pass
pipelines, the transform interpreter, and the walks of the IR that the project's passes share
(workers/compile/passes/, one module per pass; they import the bindings from here).

torch-mlir's own bundled MLIR lacks NVPTX, so it is used only to import models; everything from
model_linalg.mlir on goes through the upstream bindings shipped in numba-cuda-mlir.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Iterator

# the bindings and dialects the passes build IR with, re-exported from here
from numba_cuda_mlir._mlir import ir, passmanager  # noqa: F401
from numba_cuda_mlir._mlir.dialects import arith as arith_dialect  # noqa: F401
from numba_cuda_mlir._mlir.dialects import builtin as builtin_dialect  # noqa: F401
from numba_cuda_mlir._mlir.dialects import gpu as gpu_dialect
from numba_cuda_mlir._mlir.dialects import linalg as linalg_dialect
from numba_cuda_mlir._mlir.dialects import memref as memref_dialect  # noqa: F401
from numba_cuda_mlir._mlir.dialects import nvgpu as nvgpu_dialect  # noqa: F401
from numba_cuda_mlir._mlir.dialects import vector as vector_dialect  # noqa: F401
from numba_cuda_mlir._mlir.dialects.transform import interpreter


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


def views(value: ir.Value) -> list[ir.Value]:
    """`value` (a memref) and the subviews of it, transitively (a multi-buffered tile's buffers)."""
    found = [value]
    for use in value.uses:
        if use.owner.name == "memref.subview":
            found += views(use.owner.results[0])
    return found


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


def body_ops(func) -> list:
    """The ops of a function's body in walk order (pre-order), those in the loops of its body included (a
    recurrent layer's time loop: workers/recurrent.py), not those inside a linalg op's or a launch's region."""
    found = []

    def visit(block):
        for op in block.operations:
            found.append(op)
            if not op.operation.name.startswith(("linalg.", "gpu.")):
                for region in op.operation.regions:
                    for inner in region.blocks:
                        visit(inner)

    visit(func.regions[0].blocks[0])
    return found


def rebuilt_generic(generic, inputs: list[ir.Value], inits: list[ir.Value], maps: list[ir.AffineMap],
                    iterators: ir.ArrayAttr):
    """A linalg.generic over a new iteration space (`maps`, `iterators`) and operands, before `generic`,
    with `generic`'s body moved into it (the body's block arguments still one per operand)."""
    new = linalg_dialect.GenericOp([v.type for v in inits], inputs, inits,
                                   ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]), iterators)
    body = generic.operation.regions[0].blocks[0]
    block = new.regions[0].blocks.append(*[a.type for a in body.arguments])
    for old, arg in zip(body.arguments, block.arguments):
        old.replace_all_uses_with(arg)
    for inner in list(body.operations):
        inner.operation.detach_from_parent()
        ir.InsertionPoint(block).insert(inner.operation)
    return new


def reassociation_attr(groups: list[list[int]]) -> ir.ArrayAttr:
    """A reshape's reassociation attribute: the source dims (collapse) or result dims (expand) of each group."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in groups])


def indexing_maps(op) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.operation.attributes["indexing_maps"])]


def iterator_types(op) -> list[str]:
    """"parallel" / "reduction" per loop of a linalg op."""
    return [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.operation.attributes["iterator_types"])]


def operand_loops(amap) -> list[int | None]:
    """Per dim of an operand, the loop its indexing map reads there (None for a compound expression, e.g.
    a conv input's h + kh, or a constant)."""
    loops = []
    for expr in amap.results:
        try:
            loops.append(ir.AffineDimExpr(expr).position)
        except ValueError:
            loops.append(None)
    return loops


def loop_ranges(maps: list, shapes: list[list[int]], n_loops: int) -> list[int]:
    """Each loop's extent, read off the operand dims that are that loop (0 where none is)."""
    ranges = [0] * n_loops
    for amap, shape in zip(maps, shapes):
        for loop, size in zip(operand_loops(amap), shape):
            if loop is not None:
                ranges[loop] = size
    return ranges


# the operations a reduction's body may fold a value into its accumulator with, such that the reduction
# splits into partials (upstream's split_reduction and tile_reduction_using_forall recognize these)
COMBINING_OPS = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
                 "arith.addi", "arith.muli", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui",
                 "arith.andi", "arith.ori", "arith.xori")


def reduction_combiner(generic) -> str | None:
    """The operation a one-result linalg.generic folds each value into its accumulator with, where its
    body ends `acc <op> value` (or `value <op> acc`) and reads the accumulator nowhere else (an argmax's
    value-and-index pair does not split); else None. The body may read a loop index (reads_loop_index)."""
    o = generic.operation
    if len(o.results) != 1:
        return None
    block = o.regions[0].blocks[0]
    acc = block.arguments[len(block.arguments) - 1]
    owner = list(block.operations)[-1].operands[0].owner
    if isinstance(owner, ir.Block):
        return None
    owner = owner.operation
    uses = [use.owner for use in acc.uses]
    if owner.name not in COMBINING_OPS or len(uses) != 1 or uses[0] != owner or list(owner.operands).count(acc) != 1:
        return None
    return owner.name


def is_generic_fill(op) -> bool:
    """Whether a linalg.generic only writes a scalar input to every element (a generalized linalg.fill: the
    schedule's preparation makes a pad's fill one of these, pipeline.prepare)."""
    o = op.operation
    if o.name != "linalg.generic":
        return False
    body = list(o.regions[0].blocks[0].operations)
    value = body[-1].operands[0] if len(body) == 1 and len(body[-1].operands) == 1 else None
    return isinstance(value, ir.BlockArgument) and value.arg_number < len(o.operands) - len(o.results) \
        and not isinstance(o.operands[value.arg_number].type, ir.ShapedType)


def reads_loop_index(generic) -> bool:
    """Whether the op's body reads a loop index (linalg.index: a gather at each row's own target)."""
    return bool(ops_named(generic.operation, "linalg.index", first_only=True))


EXTENSIONS = ("arith.extf", "arith.extsi", "arith.extui", "arith.sitofp", "arith.uitofp")


def defining_op(value: ir.Value, names: tuple[str, ...]):
    """The op that defines `value` where it is one of `names`, else None (a block argument, another op)."""
    owner = value.owner
    return owner if isinstance(owner, ir.OpView) and owner.name in names else None


def accumulated_product(generic, floats_only: bool = False):
    """(the add, the multiply) where the body of `generic` yields its accumulator plus a product, `out + x * y`
    (the accumulator its last block argument), else None; integer ops too unless `floats_only`."""
    block = generic.operation.regions[0].blocks[0]
    out = block.arguments[len(block.arguments) - 1]
    adds, muls = ("arith.addf",) + (() if floats_only else ("arith.addi",)), \
        ("arith.mulf",) + (() if floats_only else ("arith.muli",))
    add = defining_op(block.operations[len(block.operations) - 1].operands[0], adds)
    if add is None or out not in list(add.operands):
        return None
    mul = defining_op(add.operands[1] if add.operands[0] == out else add.operands[0], muls)
    return (add, mul) if mul is not None else None


def is_contraction(generic) -> bool:
    """A generic of two inputs that accumulates their product, `out + a * b` (a matmul whose operand
    reshape canonicalization folded in; the operands possibly extended first), belongs with the matmuls;
    a sum of squared differences does not."""
    o = generic.operation
    block = o.regions[0].blocks[0]
    if len(o.operands) - len(o.results) != 2 or len(o.results) != 1:
        return False
    inputs = list(block.arguments)[:2]

    def read(value):  # an input, possibly extended
        ext = defining_op(value, EXTENSIONS)
        return ext.operands[0] if ext is not None else value

    product = accumulated_product(generic)
    return product is not None and sorted(map(str, map(read, product[1].operands))) == sorted(map(str, inputs))


def ptx_of_binaries(module: ir.Module) -> dict[str, bytes]:
    """PTX text of every gpu.binary (format=isa), keyed by the binary's symbol name."""
    out = {}
    for op in module.body.operations:
        if op.operation.name == "gpu.binary":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            for obj in ir.ArrayAttr(op.attributes["objects"]):
                out[name] = gpu_dialect.ObjectAttr(obj).object
    return out


def ops_where(root, keep, first_only: bool = False) -> list:
    """The ops inside `root` (itself included, last: the walk is post-order) for which keep(op), in walk
    order; the first only, if asked."""
    found = []

    def collect(op):
        if keep(op):
            found.append(op)
            if first_only:
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.operation.walk(collect)
    return found


def ops_named(root, name: str, first_only: bool = False) -> list:
    """The ops called `name` inside `root` (itself included), in walk order; the first only, if asked."""
    return ops_where(root, lambda op: op.name == name, first_only)


def kernel_ops(module: ir.Module, name: str) -> list:
    return [found for op in module.body.operations if op.operation.name == "gpu.module"
            for found in ops_named(op, name)]


WORKGROUP = "#gpu.address_space<workgroup>"


def is_memref(value: ir.Value) -> bool:
    return value.type.typeid == ir.MemRefType.static_typeid


def in_shared_memory(value: ir.Value) -> bool:
    """Whether `value` is a memref in workgroup (shared) memory."""
    return is_memref(value) and str(ir.MemRefType(value.type).memory_space) == WORKGROUP


def shared_tiles(ops: list) -> list:
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


# ops that take a shared tile through indices alone (no result type derived from its layout), so
# the tile may become a strided view of a wider buffer
INDEXED_ACCESSES = ("memref.load", "memref.store", "vector.load", "vector.store", "vector.transfer_read",
                    "vector.transfer_write", "nvgpu.ldmatrix", "nvgpu.device_async_copy")


STORES = ("vector.store", "vector.transfer_write", "memref.store")  # (value, memref, indices...)
# every op that may write memory through a memref operand, in the kernels this stage makes
WRITES = (*STORES, "vector.maskedstore", "vector.scatter", "memref.copy", "memref.atomic_rmw",
          "memref.generic_atomic_rmw", "nvgpu.device_async_copy")


READS = ("vector.load", "memref.load", "vector.transfer_read")


def outside_shared_memory(value: ir.Value) -> bool:
    return is_memref(value) and not in_shared_memory(value)


def memref_position(access) -> int:
    """The operand position of the memref that an indexed access (INDEXED_ACCESSES) reads or writes."""
    return 1 if access.name in STORES else 0


def known_block_size(kernel) -> tuple[int, int, int]:
    """A gpu.func's known_block_size, or (0, 0, 0) where it has none."""
    if "known_block_size" not in kernel.attributes:
        return 0, 0, 0
    x, y, z = ir.DenseI32ArrayAttr(kernel.attributes["known_block_size"])
    return x, y, z


def root_alloc(value: ir.Value):
    """The memref.alloc that `value` views (through subviews), or None."""
    while isinstance(value.owner, ir.OpView) and value.owner.name == "memref.subview":
        value = value.owner.operands[0]
    return value.owner.operation if isinstance(value.owner, ir.OpView) and value.owner.name == "memref.alloc" else None
