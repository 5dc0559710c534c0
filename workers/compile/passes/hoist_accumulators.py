"""farm-hoist-kernel-accumulators: a kernel loop that reads a tile of a global buffer at the start of each step
and writes it back at the end (a matmul thread's accumulator tile, every K step) carries the tile in
registers instead: read once before the loop, a loop-carried vector, written once after it.

The schedule asks for this on the host function (structured.hoist_redundant_vector_transfers), but upstream
refuses a buffer that has a view anywhere, and the result of a matmul that the model reads through a reshape
or slice (q, k and v sliced from one projection; a 3-D output of rows collapsed into one matmul) has one on
the host: each thread then stored its tile in every K step (KernelBench's 3-D tensor x matrix 8.4 ms staged,
1.7 ms before). In the outlined kernel the buffer is an argument that farm-unaliased-kernel-pointers proved
no other argument of any launch views (llvm.noalias), and the host's views are out of sight. A pair moves
where the read and the write are ops of the loop's own body, the read first, on the same memref with the
same indices, padding, vector type and attributes (all defined outside the loop), and no other op in the
loop touches that argument but transfers of tiles disjoint from it (a thread's accumulator tile in column
pieces, interleave_columns: indices of one affine map's results, apart by at least the vector's extent along
one dim). Runs after farm-unaliased-kernel-pointers, before the vector lowering.
"""
from __future__ import annotations

from numba_cuda_mlir._mlir.dialects import scf

from workers.compile.host import viewed_buffer
from workers.compile.mlir import ir, is_memref, kernel_ops, memref_position, ops_named

NAME = "farm-hoist-kernel-accumulators"


def run(module: ir.Module) -> list[str]:
    notes = []
    for kernel in kernel_ops(module, "gpu.func"):
        hoisted = 0
        while (found := _hoistable(kernel)) is not None:
            _hoist(*found)
            hoisted += 1
        if hoisted:
            notes.append(f"{NAME}: {ir.StringAttr(kernel.attributes['sym_name']).value}: {hoisted} tiles carried "
                         "in registers across their loops")
    return notes


def _inside(value: ir.Value, loop) -> bool:
    """Whether `value` is defined inside `loop` (an op of its body, nested, or one of its block arguments)."""
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner.operation
    while op is not None:
        if op == loop:
            return True
        op = op.parent
    return False


def _unaliased_argument(value: ir.Value, kernel) -> bool:
    """Whether `value` (a memref root) is an argument of `kernel` marked llvm.noalias."""
    if not isinstance(value.owner, ir.Block) or value.owner.owner != kernel:
        return False
    attrs = kernel.attributes["arg_attrs"] if "arg_attrs" in kernel.attributes else None
    return attrs is not None and "llvm.noalias" in str(ir.ArrayAttr(attrs)[value.arg_number])


def _hoistable(kernel):
    """The first (loop, read, write) of `kernel` that the module's docstring lets move, or None."""
    for loop in [op.operation for op in ops_named(kernel, "scf.for")]:
        body = [op.operation for op in loop.regions[0].blocks[0].operations]
        reads = [op for op in body if op.name == "vector.transfer_read"]
        writes = [op for op in body if op.name == "vector.transfer_write"]
        for write in writes:
            for read in reads:
                if not _pair(read, write, body) or any(_inside(v, loop) for v in read.operands):
                    continue
                root = viewed_buffer(read.operands[0])
                if not _unaliased_argument(root, kernel) or _inside(read.operands[0], loop):
                    continue
                if all(_disjoint(op, read) for op in _touching(loop, root, {read, write})):
                    return loop, read, write
    return None


def _pair(read, write, body: list) -> bool:
    """A read and a write of the same tile: the same memref, indices, type and attributes, the read first."""
    return (read.operands[0] == write.operands[1] and list(read.operands[1:-1]) == list(write.operands[2:])
            and read.results[0].type == write.operands[0].type
            and all(str(read.attributes[a]) == str(write.attributes[a]) for a in ("permutation_map", "in_bounds"))
            and not _masked(read) and not _masked(write) and body.index(read) < body.index(write))


def _disjoint(op, transfer) -> bool:
    """Whether `op` is an unmasked vector transfer of the memref of `transfer` (unmasked, minor identity) whose
    tile cannot overlap that one's: along some dim their indices are apart by at least the vector's extent."""
    if op.name not in ("vector.transfer_read", "vector.transfer_write") or _masked(op):
        return False
    firsts = [memref_position(t) for t in (op, transfer)]  # (vector,) memref, indices
    memrefs = [t.operands[first] for t, first in zip((op, transfer), firsts)]
    if memrefs[0] != memrefs[1]:
        return False
    rank = ir.MemRefType(memrefs[0].type).rank
    indices = [list(t.operands)[first + 1:first + 1 + rank] for t, first in zip((op, transfer), firsts)]
    shapes = [ir.VectorType((t.results[0] if t.name == "vector.transfer_read" else t.operands[0]).type).shape
              for t in (op, transfer)]
    if any(str(t.attributes["permutation_map"]) != str(ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(
            rank, len(shape)))) for t, shape in zip((op, transfer), shapes)):
        return False
    for dim in range(rank):
        vector_dim = dim - (rank - len(shapes[0]))
        if vector_dim < 0 or len(shapes[0]) != len(shapes[1]):
            continue
        apart = _constant_difference(indices[0][dim], indices[1][dim])
        if apart is not None and (apart >= shapes[1][vector_dim] or -apart >= shapes[0][vector_dim]):
            return True
    return False


def _constant_difference(a: ir.Value, b: ir.Value) -> int | None:
    """a - b where it is a constant: both results of affine.apply ops of the same operands whose maps differ by
    a constant, or the same value; else None."""
    if a == b:
        return 0
    ops = [v.owner for v in (a, b)]
    if not all(isinstance(op, ir.OpView) and op.name == "affine.apply" for op in ops) \
            or list(ops[0].operands) != list(ops[1].operands):
        return None
    maps = [ir.AffineMapAttr(op.attributes["map"]).value for op in ops]
    difference = (maps[0].results[0] - maps[1].results[0]).maybe_downcast()
    return difference.value if isinstance(difference, ir.AffineConstantExpr) else None


def _masked(transfer) -> bool:
    """Whether a transfer_read (memref, indices, padding) or transfer_write (vector, memref, indices) has a mask."""
    memref = transfer.operands[memref_position(transfer)]
    return len(transfer.operands) > 2 + ir.MemRefType(memref.type).rank


def _touching(loop, root: ir.Value, pair: set) -> list:
    """The ops inside `loop`, other than `pair`, with a memref operand that views `root`."""
    found = []

    def visit(op):
        if op not in pair and any(is_memref(v) and viewed_buffer(v) == root for v in op.operands):
            found.append(op)
        return ir.WalkResult.ADVANCE

    loop.walk(visit)
    return found


def _hoist(loop, read, write) -> None:
    """The read before `loop`, its value a new iteration argument, the write after the loop of its last value."""
    old_body, for_op = loop.regions[0].blocks[0], loop.opview
    inner_uses = [(use.owner, use.operand_number) for use in read.results[0].uses]
    read.move_before(loop)
    with ir.InsertionPoint(loop), loop.location:
        new = scf.ForOp(for_op.lowerBound, for_op.upperBound, for_op.step, [*for_op.initArgs, read.results[0]])
    new_body = new.regions[0].blocks[0]
    old_yield = list(old_body.operations)[-1].operation
    with ir.InsertionPoint(new_body), loop.location:
        new_yield = scf.YieldOp([*old_yield.operands, write.operands[0]])
    for op in [o.operation for o in old_body.operations][:-1]:
        if op != write:
            op.move_before(new_yield.operation)
    for old, arg in zip(old_body.arguments, new_body.arguments):
        old.replace_all_uses_with(arg)
    for owner, number in inner_uses:
        owner.operands[number] = new_body.arguments[len(new_body.arguments) - 1]
    for old, result in zip(loop.results, new.results):
        old.replace_all_uses_with(result)
    write.move_after(new.operation)
    write.operands[0] = new.results[len(new.results) - 1]
    loop.erase()
