"""The alignment of kernels' vector accesses to global memory, proven from their index arithmetic.

LLVM gives a vector load or store the alignment of its element unless it proves more from the address,
and NVPTX splits a vector access it cannot prove aligned into scalar ones: a wgmma epilogue's 4 x f16
stores became four st.global.b16 each (the thread's column runs through a floordiv that LLVM's known
bits lose), 9% of the f16 matmul's time (perf_targets_h200.md run 44). Here the element offset of each
access to a buffer the kernel takes as an argument (16-byte aligned: kernel_arguments.POINTER_ALIGNMENT) is the sum
of its views' offsets and its indices times their strides, and what divides each term follows from the
ops that compute it: constants, sums, products, affine maps, loop induction variables. The access then
states that alignment (vector.load and vector.store take it), up to its vector's bytes.
"""
from __future__ import annotations

import math

from workers.compile import mlir
from workers.compile.passes import kernel_arguments
from workers.compile.tensor_core import K_LOOP
from workers.compile.mlir import arith_dialect, ir, vector_dialect

UNKNOWN = 1  # what divides a value nothing is known of
LARGE = 1 << 20  # stands for the divisor of 0 (every number divides it), beyond any alignment asked
DYNAMIC = ir.ShapedType.get_dynamic_stride_or_offset()
ACCESSES = ("vector.transfer_read", "vector.transfer_write", "vector.load", "vector.store")


def align_global_vector_accesses(module: ir.Module) -> None:
    """Give each 1-D vector access of every kernel to a buffer argument the alignment its address is
    proven to have, where that is more than its element's: in-bounds, unmasked transfers whose vector
    runs along the memref's last dimension become vector.load / vector.store to carry it. So too each access
    to a shared tile through a loop-carried view (a pipelined K loop's buffers, rotated by its iterations:
    LLVM's known bits do not cross the loop's block arguments, and NVPTX split a SIMT thread's 128-bit reads
    of its staged operands into scalar ones), a 2-D read of such a tile row by row."""
    for kernel in mlir.ops_named(module.operation, "gpu.func"):
        divisors = Divisors()
        accesses = [access for name in ACCESSES for access in mlir.ops_named(kernel, name)]
        for access in accesses:
            memref = access.operands[mlir.memref_position(access)]
            carried = _loop_carried(memref)
            if ir.MemRefType(memref.type).memory_space and not carried:
                continue
            rows = _rows_of_2d_read(access) if carried else []
            for row in rows or [access]:
                alignment = _proven_alignment(row, divisors)
                if alignment:
                    _state_alignment(row, alignment)


def _loop_carried(memref: ir.Value) -> bool:
    """Whether the view `memref` is, or views, a block argument of a pipelined K loop (tensor_core.K_LOOP)."""
    while isinstance(memref.owner, ir.OpView) and memref.owner.operation.name in ("memref.subview", "memref.cast"):
        memref = memref.owner.operands[0]
    return isinstance(memref.owner, ir.Block) and memref.owner.owner.operation.name == "scf.for" \
        and K_LOOP in memref.owner.owner.operation.attributes


def _rows_of_2d_read(access) -> list:
    """A 2-D in-bounds, unmasked vector.transfer_read along its memref's last dims as one 1-D read per row,
    inserted into the vector it read (replacing it); [] for any other access."""
    if access.name != "vector.transfer_read" or len(access.operands) != 2 + ir.MemRefType(access.operands[0].type).rank:
        return []
    memref, vector = access.operands[0], ir.VectorType(access.results[0].type)
    rank = ir.MemRefType(memref.type).rank
    permutation = ir.AffineMapAttr(access.attributes["permutation_map"]).value
    if vector.rank != 2 or rank < 2 or permutation != ir.AffineMap.get_minor_identity(rank, 2) \
            or not all(ir.BoolAttr(b).value for b in ir.ArrayAttr(access.attributes["in_bounds"])):
        return []
    indices, padding = list(access.operands[1:1 + rank]), access.operands[-1]
    row_type = ir.VectorType.get(vector.shape[-1:], vector.element_type)
    rows = []
    with ir.InsertionPoint(access), access.location:
        zero = ir.FloatAttr.get(vector.element_type, 0.0) if isinstance(vector.element_type, ir.FloatType) \
            else ir.IntegerAttr.get(vector.element_type, 0)
        value = arith_dialect.ConstantOp(vector, ir.DenseElementsAttr.get_splat(vector, zero)).result
        for r in range(vector.shape[0]):
            at = arith_dialect.AddIOp(indices[-2], arith_dialect.ConstantOp(ir.IndexType.get(), r).result).result
            row = vector_dialect.TransferReadOp(row_type, memref, [*indices[:-2], at, indices[-1]],
                                                ir.AffineMap.get_minor_identity(rank, 1), padding, [True])
            rows.append(row.operation)
            value = vector_dialect.InsertOp(row.result, value, static_position=[r], dynamic_position=[]).result
    access.results[0].replace_all_uses_with(value)
    access.erase()
    return rows


class Divisors:
    """A number known to divide an index value (memoized): UNKNOWN where nothing is known."""

    def __init__(self):
        self.known: dict = {}

    def of(self, value: ir.Value) -> int:
        if value not in self.known:
            self.known[value] = UNKNOWN  # a cycle through a loop's block arguments proves nothing
            self.known[value] = min(self._compute(value), LARGE)
        return self.known[value]

    def _compute(self, value: ir.Value) -> int:
        owner = value.owner
        if isinstance(owner, ir.Block):
            loop = owner.owner.operation
            # an scf.for's induction variable: lower bound plus multiples of the step
            if loop.name == "scf.for" and value == owner.arguments[0]:
                lower, _, step = loop.operands[:3]
                return math.gcd(self.of(lower), self.of(step))
            return UNKNOWN
        name = owner.operation.name
        operands = list(owner.operands)
        if name == "arith.constant":
            attr = owner.attributes["value"]
            return abs(ir.IntegerAttr(attr).value) or LARGE if isinstance(attr, ir.IntegerAttr) else UNKNOWN
        if name in ("arith.addi", "arith.subi", "arith.select", "arith.minui", "arith.minsi", "arith.maxui",
                    "arith.maxsi"):
            return math.gcd(*(self.of(v) for v in operands[-2:]))
        if name == "arith.muli":
            return self.of(operands[0]) * self.of(operands[1])
        if name in ("arith.remui", "arith.remsi"):
            return math.gcd(self.of(operands[0]), self.of(operands[1]))
        if name in ("arith.index_cast", "arith.index_castui"):
            return self.of(operands[0])
        if name == "affine.apply":
            map_ = ir.AffineMapAttr(owner.attributes["map"]).value
            return self._of_expr(map_.results[0], operands, map_.n_dims)
        return UNKNOWN

    def _of_expr(self, expr, operands: list, dims: int) -> int:
        expr = expr.maybe_downcast()
        if isinstance(expr, ir.AffineConstantExpr):
            return abs(expr.value) or LARGE
        if isinstance(expr, ir.AffineDimExpr):
            return self.of(operands[expr.position])
        if isinstance(expr, ir.AffineSymbolExpr):
            return self.of(operands[dims + expr.position])
        if isinstance(expr, (ir.AffineAddExpr, ir.AffineModExpr)):
            return math.gcd(self._of_expr(expr.lhs, operands, dims), self._of_expr(expr.rhs, operands, dims))
        if isinstance(expr, ir.AffineMulExpr):
            return self._of_expr(expr.lhs, operands, dims) * self._of_expr(expr.rhs, operands, dims)
        return UNKNOWN  # floordiv, ceildiv


def _strides(memref_type: ir.MemRefType) -> tuple[list[int], int] | None:
    strides, offset = memref_type.get_strides_and_offset()
    return None if DYNAMIC in strides else (list(strides), offset)


def _offset_divisor(memref: ir.Value, divisors: Divisors, carried: frozenset = frozenset()) -> int | None:
    """What divides the element offset of the view `memref` from the start of the kernel's buffer argument
    it views, or of the 16-byte aligned shared memory (_shared_base_divisor), or None where it views neither
    (a local buffer) or a stride is unknown. A loop's block argument: what divides every value it takes, its
    initial one and the one each iteration yields (`carried`: those being followed, which add nothing)."""
    divisor = 0
    while isinstance(memref.owner, ir.OpView) and memref.owner.operation.name in ("memref.subview", "memref.cast"):
        view = memref.owner
        source = view.operands[0]
        if view.operation.name == "memref.subview":
            layout = _strides(ir.MemRefType(source.type))
            if layout is None:
                return None
            dynamic = iter(view.operands[1:])
            for offset, stride in zip(ir.DenseI64ArrayAttr(view.attributes["static_offsets"]), layout[0]):
                known = divisors.of(next(dynamic)) if offset == DYNAMIC else abs(offset) or LARGE
                divisor = math.gcd(divisor, known * stride)
        memref = source
    owner = memref.owner
    if isinstance(owner, ir.Block) and owner.owner.operation.name == "scf.for" and memref != owner.arguments[0]:
        if memref in carried:
            return divisor
        loop, position = owner.owner.operation, list(owner.arguments).index(memref) - 1
        values = [loop.operands[3 + position], owner.operations[len(owner.operations) - 1].operands[position]]
        for value in values:
            known = _offset_divisor(value, divisors, carried | {memref})
            if known is None:
                return None
            divisor = math.gcd(divisor, known)
        return divisor
    if isinstance(owner, ir.OpView) and owner.operation.name in ("memref.view", "memref.get_global"):
        base = _shared_base_divisor(owner, divisors)
        return None if base is None else math.gcd(divisor, base)
    in_kernel_argument = isinstance(owner, ir.Block) and owner.owner.operation.name == "gpu.func"
    if not in_kernel_argument or ir.MemRefType(memref.type).memory_space:  # workgroup attributions are arguments too
        return None
    layout = _strides(ir.MemRefType(memref.type))
    if layout is None or layout[1] == DYNAMIC:
        return None
    return math.gcd(divisor, layout[1])


def _shared_base_divisor(base, divisors: Divisors) -> int | None:
    """What divides the element offset of `base` from a 16-byte boundary: a shared global (memref.get_global)
    of at least that alignment, or a memref.view of one at a byte shift (the dynamic shared array); else None."""
    shift, source = 0, base.results[0]
    if base.operation.name == "memref.view":
        element = ir.MemRefType(base.results[0].type).element_type.width // 8
        shift, source = divisors.of(base.operands[1]), base.operands[0]
        if shift % element:
            return None
        shift //= element
    while isinstance(source.owner, ir.OpView) and source.owner.operation.name == "memref.cast":
        source = source.owner.operands[0]
    if not isinstance(source.owner, ir.OpView) or source.owner.operation.name != "memref.get_global":
        return None
    name = ir.FlatSymbolRefAttr(source.owner.attributes["name"]).value
    module = base.operation.parent
    while module.name != "gpu.module":
        module = module.parent
    (global_op,) = [op for op in module.regions[0].blocks[0].operations
                    if op.name == "memref.global" and ir.StringAttr(op.attributes["sym_name"]).value == name]
    aligned = "alignment" in global_op.attributes and ir.IntegerAttr(global_op.attributes["alignment"]).value \
        >= kernel_arguments.POINTER_ALIGNMENT
    return shift if aligned else None


def _proven_alignment(access, divisors: Divisors) -> int:
    """The bytes that `access`'s address is proven a multiple of, up to its vector's bytes and the buffer's
    alignment, where that is more than its element's bytes; else 0."""
    at = mlir.memref_position(access)
    memref = access.operands[at]
    memref_type = ir.MemRefType(memref.type)
    vector = ir.VectorType(access.operands[0].type if at else access.results[0].type)
    layout = _strides(memref_type)
    if layout is None or not _along_last_dim(access, vector, memref_type.rank, layout[0]):
        return 0
    offset = _offset_divisor(memref, divisors)
    if offset is None:
        return 0
    indices = access.operands[at + 1:at + 1 + memref_type.rank]
    for index, stride in zip(indices, layout[0]):
        offset = math.gcd(offset, divisors.of(index) * stride)
    element = vector.element_type.width // 8 if hasattr(vector.element_type, "width") else 0
    if not element:
        return 0
    alignment = min(kernel_arguments.POINTER_ALIGNMENT, 1 << (element * vector.shape[-1]).bit_length() - 1,
                    (offset * element) & -(offset * element) if offset else kernel_arguments.POINTER_ALIGNMENT)
    return alignment if alignment > element else 0


def _along_last_dim(access, vector: ir.VectorType, rank: int, strides: list[int]) -> bool:
    """Whether `access` reads or writes its vector's elements contiguously along the last dimension of its
    memref (of `rank` and `strides`): a 1-D run, in bounds and unmasked where it is a transfer."""
    if any(n != 1 for n in vector.shape[:-1]) or rank == 0 or strides[-1] != 1:
        return False
    if access.name in ("vector.load", "vector.store"):
        return vector.rank == 1
    # an unmasked transfer's operands: (the written vector,) the memref, an index per dim (, the padding)
    if len(access.operands) > 2 + rank:
        return False
    in_bounds = ir.ArrayAttr(access.attributes["in_bounds"])
    permutation = ir.AffineMapAttr(access.attributes["permutation_map"]).value
    return all(ir.BoolAttr(b).value for b in in_bounds) \
        and permutation == ir.AffineMap.get_minor_identity(rank, vector.rank)


def _state_alignment(access, alignment: int) -> None:
    """Put `alignment` on `access`, a transfer becoming the vector.load or vector.store it amounts to."""
    attr = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), alignment)
    if access.name in ("vector.load", "vector.store"):
        access.attributes["alignment"] = attr
        return
    at = mlir.memref_position(access)
    memref = access.operands[at]
    indices = list(access.operands[at + 1:at + 1 + ir.MemRefType(memref.type).rank])
    with ir.InsertionPoint(access), access.location:
        if at:
            value = access.operands[0]
            vector = ir.VectorType(value.type)
            flat = ir.VectorType.get(vector.shape[-1:], vector.element_type)
            if vector.rank > 1:
                value = vector_dialect.ShapeCastOp(flat, value).result
            store = vector_dialect.StoreOp(value, memref, indices)
            store.attributes["alignment"] = attr
        else:
            vector = ir.VectorType(access.results[0].type)
            flat = ir.VectorType.get(vector.shape[-1:], vector.element_type)
            load = vector_dialect.LoadOp(flat, memref, indices)
            load.attributes["alignment"] = attr
            result = load.result if vector.rank == 1 else vector_dialect.ShapeCastOp(vector, load.result).result
            access.results[0].replace_all_uses_with(result)
    access.erase()
