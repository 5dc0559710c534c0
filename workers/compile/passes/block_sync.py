"""farm-sync-after-block-loops: a barrier after a block-wide loop whose hoisted stores other threads read.

A loop that every thread of a block runs (a tensor-core kernel's K loop) may leave its last stores to shared
memory after it (hoisted out of it); the threads that read them next need a barrier first. Runs after the
tensor-core conversion and the K loops' passes.
"""
from __future__ import annotations

from workers.compile.mlir import ir, gpu_dialect, ops_named, kernel_ops, in_shared_memory, siblings, READS, STORES


def _writes_workgroup_memory(op) -> bool:
    return op.name in STORES and in_shared_memory(op.operands[1])


def _access(op, base: int) -> tuple:
    """An access's memref and index operands (the values), from its memref operand `base` on."""
    return tuple(op.operands[base:base + 1 + ir.MemRefType(op.operands[base].type).rank])


def _reads_others_writes(op, written: set[tuple]) -> bool:
    """Whether `op` reads shared memory other than at the place a write in `written` (memref and index
    values: a thread's own tile, read back by that thread) wrote."""
    return op.name in READS and in_shared_memory(op.operands[0]) and _access(op, 0) not in written


def sync_after_block_loops(module: ir.Module) -> None:
    """A barrier after what a block-wide loop (one with a gpu.barrier inside, e.g. a tensor-core K loop
    over operand tiles staged in shared memory) leaves to write to shared memory after it: the warps'
    accumulators that hoisting moved out of the loop, which the epilogue's threads read next (a loop of
    them, or straight-line reads: a padded tile's masked copy back). The thread mapping put its barrier
    inside the loop, before them; a barrier between the loop and those writes (overlap_tiles_dead_in_k_loops
    puts one there) does not order them before the reads, nor does one after a read; a thread reading back
    just what it wrote (a staged epilogue's own tile) needs none."""
    for loop in kernel_ops(module, "scf.for"):
        if not ops_named(loop, "gpu.barrier", first_only=True):
            continue
        ops, at = siblings(loop)
        last_write, synced, written = None, False, set()
        for op in ops[at + 1:]:
            if op.regions or last_write is not None and (op.name == "gpu.barrier" or _reads_others_writes(op, written)):
                synced = op.name == "gpu.barrier"
                break
            if _writes_workgroup_memory(op):
                last_write = op
                written.add(_access(op, 1))
        if last_write is not None and not synced:
            with ir.InsertionPoint(last_write), last_write.location:
                barrier = gpu_dialect.BarrierOp()
            barrier.operation.move_after(last_write)
