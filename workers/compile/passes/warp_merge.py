"""farm-merge-in-a-warp: the schedule knob warp_merge.

A block reduction's merge (schedule.emission._emit_merge's) ends in warp shuffles instead of a warp and then
one thread after another barrier. A kernel where no merge has that form is left as it was, with a note.
Runs after the module merge, before farm-workgroup-allocs-to-shared.
"""
from __future__ import annotations

from workers.compile import kernel_marks
from workers.compile.mlir import (ir, arith_dialect, gpu_dialect, memref_dialect, ops_named, kernel_ops, siblings,
                                  known_block_size, root_alloc)
from workers.records import WARP_SIZE


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
    for kernel in kernel_ops(module, "gpu.func"):
        name = ir.StringAttr(kernel.attributes["sym_name"]).value
        if kernel_marks.WARP_MERGE not in kernel.attributes:
            continue
        x, y, z = known_block_size(kernel)
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
    results = root_alloc(load.operands[0])
    stores = [op for op in ops_named(warp, "memref.store") if results is not None and root_alloc(op.operands[1]) == results]
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
    partials = root_alloc(load.operands[0])
    stores = [op for op in before if op.name == "memref.store" and partials is not None
              and root_alloc(op.operands[1]) == partials]
    if not stores:
        return
    store = stores[-1]
    with ir.InsertionPoint(store), store.location:
        store.operands[0] = _butterfly(store.operands[0], combine, lanes)
    with ir.InsertionPoint(load), load.location:
        group = memref_dialect.LoadOp(load.operands[0], list(load.operands[1:])).result
    _reduce_to(reduction, load, group, combine)
