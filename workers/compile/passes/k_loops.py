"""farm-overlap-tiles-dead-in-k-loops and farm-trim-k-loop-barriers: a pipelined tensor-core K loop.

An epilogue's accumulator tile, dead while the K loop's staged buffers are in use, shares their shared memory
(with the barriers and the last cp.async wait that needs); a loop whose copies go ahead of the mma keeps one
barrier per K step. Run right after transform.mlir's @__farm_pipeline_copies.
"""
from __future__ import annotations

from workers.compile.mlir import (ir, gpu_dialect, nvgpu_dialect, MlirError, ops_named, kernel_ops, in_shared_memory, shared_tiles,
                                  enclosing, siblings)


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
    for loop in kernel_ops(module, "scf.for"):
        if loop_mark not in loop.attributes:
            continue
        block, at = siblings(loop)
        copies = [i for i, op in enumerate(block[:at]) if op.name == "nvgpu.device_async_copy"]
        others = [a for a in shared_tiles(ops_named(enclosing(loop, "gpu.func"), "memref.alloc"))
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
    """Whether the ops issue cp.async copies into shared memory and touch it in no other way (a view of a
    buffer, which the next step's copies write through, touches none)."""
    return any(op.name == "nvgpu.device_async_copy" for op in segment) and all(
        op.name in ("nvgpu.device_async_copy", "nvgpu.device_async_create_group", "memref.subview")
        or not op.regions and not any(in_shared_memory(v) for v in op.operands) for op in segment)


def trim_k_loop_barriers(module: ir.Module, loop_mark: str, ahead_mark: str) -> None:
    """The barriers of a pipelined K loop (marked `loop_mark`) that order nothing: the thread mapping's
    between one step's A copies and its B copies (cp.async into different buffers, nothing reads shared
    memory between them). A loop also marked `ahead_mark` fills a buffer the warps left a step earlier
    (one more buffer than steps in flight): its copies move from after the step's mma to right after the
    barrier that follows the waits for the step's tiles, which orders them after every warp's reads of
    that buffer, and the barrier between the mma and the copies goes; one barrier per step remains."""
    for loop in kernel_ops(module, "scf.for"):
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
