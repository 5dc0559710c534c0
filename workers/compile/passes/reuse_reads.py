"""farm-reuse-reads: a thread's repeated loads of the same global columns (a row kernel's passes over its
row) read once, where nothing between writes them. Runs after the tensor-core and shared-memory passes.
"""
from __future__ import annotations

from workers.compile.mlir import ir, kernel_ops, in_shared_memory, WRITES, READS, outside_shared_memory, root_alloc
from workers.compile.passes.tensor_core_conversion import _named_attributes


def _written_memory(op) -> tuple[bool, set]:
    """What `op`, or an op inside it, may write: (memory other than shared memory, the shared-memory
    allocations written, None among them for a shared memref of unknown allocation)."""
    outside, shared = False, set()

    def visit(o):
        nonlocal outside
        if o.name in WRITES:
            for v in o.operands:
                if outside_shared_memory(v):
                    outside = True
                elif in_shared_memory(v):
                    shared.add(root_alloc(v))
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

    for kernel in kernel_ops(module, "gpu.func"):
        for block in list(blocks(kernel.operation)):
            seen, repeated = {}, []  # key -> (first load, its shared allocation or None for global memory)
            for op in block.operations:
                source = op.operands[0] if op.name in READS else None
                alloc = root_alloc(source) if source is not None and in_shared_memory(source) else None
                if source is not None and (outside_shared_memory(source) or alloc is not None):
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
