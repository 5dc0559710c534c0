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
from workers.compile.mlir import ir, vector_dialect

UNKNOWN = 1  # what divides a value nothing is known of
LARGE = 1 << 20  # stands for the divisor of 0 (every number divides it), beyond any alignment asked
DYNAMIC = ir.ShapedType.get_dynamic_stride_or_offset()
ACCESSES = ("vector.transfer_read", "vector.transfer_write", "vector.load", "vector.store")


def align_global_vector_accesses(module: ir.Module) -> None:
    """Give each 1-D vector access of every kernel to a buffer argument the alignment its address is
    proven to have, where that is more than its element's: in-bounds, unmasked transfers whose vector
    runs along the memref's last dimension become vector.load / vector.store to carry it."""
    for kernel in mlir.ops_named(module.operation, "gpu.func"):
        divisors = Divisors()
        accesses = [access for name in ACCESSES for access in mlir.ops_named(kernel, name)]
        for access in accesses:
            alignment = _proven_alignment(access, divisors)
            if alignment:
                _state_alignment(access, alignment)


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


def _offset_divisor(memref: ir.Value, divisors: Divisors) -> int | None:
    """What divides the element offset of the view `memref` from the start of the kernel's buffer argument
    it views, or None where it views no argument (shared memory, a local buffer) or a stride is unknown."""
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
    in_kernel_argument = isinstance(owner, ir.Block) and owner.owner.operation.name == "gpu.func"
    if not in_kernel_argument or ir.MemRefType(memref.type).memory_space:  # workgroup attributions are arguments too
        return None
    layout = _strides(ir.MemRefType(memref.type))
    if layout is None or layout[1] == DYNAMIC:
        return None
    return math.gcd(divisor, layout[1])


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
