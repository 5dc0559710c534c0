"""Schedule parameters -> a Transform-dialect script (transform.mlir).

Each kernel is one "group": an anchor op tiled to a grid of blocks and then to threads, with the
fill that initialises it and (optionally) one producer fused into both levels. The script is
generated against the payload after the pre-schedule pipeline and addresses ops by their position
among the function's linalg ops.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from workers.compile.analysis import LinalgOpFacts
from workers.compile.pipeline import PREPARE_STEPS
from workers.records import OpInfo, OpSchedule, ScheduleEdit, ScheduleParams

MAX_THREADS = 1024
TARGET_THREADS = 256
SCHEDULE_FIELDS = {f.name for f in dataclasses.fields(OpSchedule)} - {"op_index", "family"}
PARAM_FIELDS = {f.name for f in dataclasses.fields(ScheduleParams)} - {"ops"}


class ScheduleError(ValueError):
    """Schedule parameters that no valid kernel can come from (bad tile sizes, unsupported knob)."""


@dataclass
class Group:
    """One kernel: the anchor op, its fused producer (if any) and the fills they start from."""

    anchor: int
    producer: int | None
    fills: list[tuple[int, int]]  # (op whose init the fill is, that init's operand index)


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def default_op_schedule(op: OpInfo, family: str) -> OpSchedule:
    """The v0 launch shape of one op: threads along the innermost parallel dims, one or a few
    outputs per thread, the rest of the parallel dims spread over the grid. Tiles divide the loop
    extents, so every per-thread tile has a static shape."""
    ranges, iters = op.loop_ranges, op.iterator_types
    parallel = [d for d, it in enumerate(iters) if it == "parallel" and ranges[d] > 1]
    block = [0] * len(ranges)
    thread = [0] * len(ranges)
    for d in parallel:
        block[d] = 1
    inner = parallel[-2:]  # up to two dims mapped to threads: (y, x)
    # matmul-like work reuses operands across a register tile; elementwise work gets 1 per thread
    per_thread = 4 if family in ("matmul", "conv") and all(ranges[d] % 64 == 0 for d in inner) else 1
    # x first: a 16x16 square for register-tiled work, else 64 wide for coalesced rows
    x_cap = 16 if per_thread > 1 else 64
    budget = TARGET_THREADS
    for d in reversed(inner):
        cap = budget if d != inner[-1] or len(inner) == 1 else x_cap
        threads = _largest_divisor_at_most(ranges[d] // per_thread, cap)
        block[d] = threads * per_thread
        thread[d] = per_thread
        budget = max(budget // threads, 1)
    # a block tile that covers the whole loop is no grid dimension at all
    block = [0 if b >= ranges[d] else b for d, b in enumerate(block)]
    if not any(block) and parallel:  # the kernel still needs a (one-block) grid to map
        block[parallel[0]] = ranges[parallel[0]]
    return OpSchedule(op_index=op.index, family=family, block_tile=block, thread_tile=thread)


def plan_groups(facts: list[LinalgOpFacts], params: ScheduleParams | None) -> list[Group]:
    """Which ops form which kernel. Fills are fused into the op they initialise; a producer is fused
    into its only consumer when it feeds it through an identity map (no recomputation)."""
    by_index = {s.op_index: s for s in params.ops} if params else {}
    fused: set[int] = set()
    groups: list[Group] = []
    for f in reversed(facts):  # consumers first, so producers know whether they were taken
        i = f.info.index
        if i in fused or f.info.family == "fill" and not _is_unconsumed_fill(f, facts):
            continue
        producer = None
        schedule = by_index.get(i)
        if schedule is None or schedule.fuse_producers:
            for p, identity in zip(f.operand_producers, f.input_maps_identity):
                if p is not None and identity and facts[p].single_use and facts[p].info.family != "fill" \
                        and p not in fused:
                    producer = p
                    break
        # a fill shared by several ops is cloned into each of them
        fills = [(c.info.index, c.n_inputs) for c in [f] + ([facts[producer]] if producer is not None else [])
                 if c.init_producer is not None and facts[c.init_producer].info.family == "fill"]
        fused.update([i] + ([producer] if producer is not None else []))
        groups.append(Group(anchor=i, producer=producer, fills=fills))
    return list(reversed(groups))


def _is_unconsumed_fill(fill: LinalgOpFacts, facts: list[LinalgOpFacts]) -> bool:
    return not any(f.init_producer == fill.info.index for f in facts)


def group_family(group: Group, facts: list[LinalgOpFacts]) -> str:
    """A group is as heavy as its heaviest member: a matmul fused into a bias-add is a matmul."""
    order = ("matmul", "conv", "pooling", "reduction", "elementwise", "copy", "fill")
    members = [group.anchor] + ([group.producer] if group.producer is not None else [])
    return min((facts[m].info.family for m in members), key=order.index)


# Register tiling that measured 15x faster than scalar per-thread loops for a 1024^3 f32 matmul on
# the H200 (benchmarks/results/gpu_smoke_h200.md): K tiled by 8, the per-thread tile vectorized.
V0_REDUCTION_TILE = 8


def default_group_schedule(g: Group, facts: list[LinalgOpFacts]) -> OpSchedule:
    family = group_family(g, facts)
    schedule = default_op_schedule(facts[g.anchor].info, family)
    member = _reduction_member(g, facts)
    if family == "matmul" and member is not None and any(schedule.thread_tile):
        info = facts[member].info
        reductions = [r for r, it in zip(info.loop_ranges, info.iterator_types) if it == "reduction"]
        if len(reductions) == 1 and reductions[0] % V0_REDUCTION_TILE == 0:
            schedule.reduction_tile, schedule.vectorize = V0_REDUCTION_TILE, True
    return schedule


def precision_of(facts: list[LinalgOpFacts]) -> str:
    """The correctness mode follows the narrowest float type the model computes in."""
    dtypes = {f.info.dtype for f in facts}
    return next((p for p in ("f16", "bf16") if p in dtypes), "fp32")


def initial_params_for(facts: list[LinalgOpFacts], chip: str = "sm_90a") -> ScheduleParams:
    return ScheduleParams(ops=[default_group_schedule(g, facts) for g in plan_groups(facts, None)],
                          chip=chip, precision=precision_of(facts))


def apply_edit(params: ScheduleParams, edit: ScheduleEdit) -> ScheduleParams:
    """A copy of `params` with exactly one field changed."""
    new = ScheduleParams.from_dict(params.to_dict())
    if edit.op_index == -1:
        if edit.field not in PARAM_FIELDS:
            raise ScheduleError(f"unknown schedule parameter {edit.field!r}")
        setattr(new, edit.field, edit.value)
        return new
    targets = [s for s in new.ops if s.op_index == edit.op_index]
    if not targets or edit.field not in SCHEDULE_FIELDS:
        raise ScheduleError(f"no op {edit.op_index} field {edit.field!r} in the schedule")
    setattr(targets[0], edit.field, edit.value)
    return new


def validate(schedule: OpSchedule, g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """Check one kernel's tiles; returns the thread block shape [x, y, z]."""
    op = facts[g.anchor].info
    members = [g.anchor] + ([g.producer] if g.producer is not None else [])
    n = len(op.loop_ranges)
    if len(schedule.block_tile) != n or len(schedule.thread_tile) != n:
        raise ScheduleError(f"op {op.index}: tiles must have {n} entries (one per loop)")
    if schedule.vectorize and not schedule.reduction_tile and any(
            "reduction" in facts[m].info.iterator_types for m in members):
        raise ScheduleError(f"op {op.index}: vectorizing a reduction needs a reduction_tile (else the whole "
                            "reduction loop becomes one vector)")
    if schedule.tensor_core != "none" or schedule.promote_shared:
        raise ScheduleError(f"op {op.index}: tensor_core/promote_shared are not expressible by this "
                            "compile stage's schedules yet")
    for d, (b, t) in enumerate(zip(schedule.block_tile, schedule.thread_tile)):
        if op.iterator_types[d] == "reduction" and (b or t):
            raise ScheduleError(f"op {op.index}: loop {d} is a reduction; a parallel forall over it is a data race")
        if b < 0 or t < 0:
            raise ScheduleError(f"op {op.index}: loop {d} has a negative tile size")
        # partial tiles would give per-thread scratch a dynamic size (device malloc in the kernel)
        extent = op.loop_ranges[d]
        if (b and extent % b) or (t and (b or extent) % t):
            raise ScheduleError(f"op {op.index}: loop {d} of extent {extent} is not divided evenly by "
                                f"block tile {b} and thread tile {t}")
    threads = [n for n in threads_per_loop(schedule, op) if n]
    if len(threads) > 3:
        raise ScheduleError(f"op {op.index}: at most 3 loops can be mapped to threads, got {len(threads)}")
    block = list(reversed(threads)) + [1] * (3 - len(threads))
    if math.prod(block) > MAX_THREADS:
        raise ScheduleError(f"op {op.index}: {math.prod(block)} threads per block exceed {MAX_THREADS}")
    return block


_BLOCK_IDS = ["x", "y", "z"]


def _mapping(kind: str, n: int) -> str:
    """Forall dims in loop order; the innermost maps to x. Past three dims use linear ids."""
    if n <= 3:
        ids = list(reversed(_BLOCK_IDS[:n]))
        return ", ".join(f"#gpu.{kind}<{i}>" for i in ids)
    return ", ".join(f"#gpu.{kind}<linear_dim_{n - 1 - k}>" for k in range(n))


def _ints(xs: list[int]) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


ANY = "!transform.any_op"


def emit_transform(facts: list[LinalgOpFacts], params: ScheduleParams) -> tuple[str, list[Group]]:
    """transform.mlir for the payload described by `facts`; also returns the kernel groups."""
    groups = plan_groups(facts, params)
    by_index = {s.op_index: s for s in params.ops}
    lines = [
        "module attributes {transform.with_named_sequence} {",
        f"  transform.named_sequence @__transform_main(%root: {ANY} {{transform.consumed}}) {{",
        f'    %func = transform.structured.match ops{{["func.func"]}} in %root : ({ANY}) -> {ANY}',
    ]
    lines += ["    " + step for step in PREPARE_STEPS]
    lines.append(f"    %ops = transform.structured.match interface{{LinalgOp}} in %func : ({ANY}) -> {ANY}")
    handles = ", ".join(f"%op{i}" for i in range(len(facts)))
    lines.append(f"    {handles} = transform.split_handle %ops : ({ANY}) -> ({', '.join([ANY] * len(facts))})")
    launches = []
    for kernel, g in enumerate(groups):
        op = facts[g.anchor].info
        schedule = by_index.get(g.anchor) or default_group_schedule(g, facts)
        block_dims = validate(schedule, g, facts)
        launches.append(block_dims)
        lines += _emit_group(kernel, g, schedule, facts)
    lines += [
        f"    transform.apply_patterns to %func {{ transform.apply_patterns.canonicalization }} : {ANY}",
        f"    transform.apply_cse to %func : {ANY}",
        f'    %empties = transform.structured.match ops{{["tensor.empty"]}} in %root : ({ANY}) -> !transform.op<"tensor.empty">',
        '    transform.bufferization.empty_tensor_to_alloc_tensor %empties : (!transform.op<"tensor.empty">) '
        '-> !transform.op<"bufferization.alloc_tensor">',
        "    %bufferized = transform.bufferization.one_shot_bufferize %root {bufferize_function_boundaries = true, "
        f"function_boundary_type_conversion = 1 : i32, memcpy_op = \"linalg.copy\"}} : ({ANY}) -> {ANY}",
    ]
    # bufferization leaves self-copies of identical subviews behind; CSE + folding removes them
    lines += [
        f'    %bufferized_func = transform.structured.match ops{{["func.func"]}} in %bufferized : ({ANY}) -> {ANY}',
        f"    transform.apply_cse to %bufferized_func : {ANY}",
        f"    transform.apply_patterns to %bufferized_func {{ transform.apply_patterns.canonicalization }} : {ANY}",
        f"    transform.apply_cse to %bufferized_func : {ANY}",
    ]
    for k, block_dims in enumerate(launches):
        lines += [
            f'    %kernel{k} = transform.structured.match ops{{["scf.forall"]}} attributes{{farm.kernel = {k} : i64}} '
            f"in %bufferized : ({ANY}) -> {ANY}",
            f"    %launch{k} = transform.gpu.map_forall_to_blocks %kernel{k} {{ generate_gpu_launch }} : ({ANY}) -> {ANY}",
            f"    transform.gpu.map_nested_forall_to_threads %launch{k} block_dims = {_ints(block_dims)} : ({ANY}) -> {ANY}",
        ]
    lines += [
        f'    %gpu_func = transform.structured.match ops{{["func.func"]}} in %bufferized : ({ANY}) -> {ANY}',
        # accumulators of a vectorized reduction loop stay in registers across its iterations
        f"    %hoisted = transform.structured.hoist_redundant_vector_transfers %gpu_func : ({ANY}) -> {ANY}",
        # then contractions become FMAs, and contiguous 1-D transfers become vector loads/stores
        "    transform.apply_patterns to %hoisted { transform.apply_patterns.vector.reduction_to_contract "
        "transform.apply_patterns.vector.transfer_permutation_patterns "
        f"transform.apply_patterns.canonicalization }} : {ANY}",
        "    transform.apply_patterns to %hoisted { transform.apply_patterns.vector.lower_contraction "
        'lowering_strategy = "outerproduct" transform.apply_patterns.vector.lower_outerproduct '
        "transform.apply_patterns.vector.rank_reducing_subview_patterns "
        "transform.apply_patterns.vector.cast_away_vector_leading_one_dim "
        "transform.apply_patterns.vector.lower_masked_transfers "
        "transform.apply_patterns.vector.transfer_permutation_patterns "
        f"transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1 }} : {ANY}",
        "    transform.yield",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", groups


def threads_per_loop(schedule: OpSchedule, op: OpInfo) -> list[int]:
    """Threads along each loop of a block tile (0 = loop not mapped to threads)."""
    return [math.ceil((b or r) / t) if t else 0
            for b, t, r in zip(schedule.block_tile, schedule.thread_tile, op.loop_ranges)]


def _reduction_member(g: Group, facts: list[LinalgOpFacts]) -> int | None:
    """The group member that has reduction loops, if any."""
    for m in ([g.producer] if g.producer is not None else []) + [g.anchor]:
        if "reduction" in facts[m].info.iterator_types:
            return m
    return None


def _emit_group(kernel: int, g: Group, s: OpSchedule, facts: list[LinalgOpFacts]) -> list[str]:
    op = facts[g.anchor].info
    threads = threads_per_loop(s, op)
    a = f"%op{g.anchor}"
    k = f"g{g.anchor}"
    n_block = sum(1 for b in s.block_tile if b)
    n_thread = sum(1 for t in s.thread_tile if t)
    members = ([f"%op{g.producer}"] if g.producer is not None else []) + [f"%{k}_fill{j}" for j in range(len(g.fills))]
    # fusion consumes the producer's handle, so a shared fill is looked up afresh from each consumer
    out = [f"    %{k}_fill{j} = transform.get_producer_of_operand %op{op}[{operand}] : ({ANY}) -> {ANY}"
           for j, (op, operand) in enumerate(g.fills)]
    out += [
        f"    // kernel of op {g.anchor} ({s.family})"
        + (f", fused producer op {g.producer}" if g.producer is not None else "")
        + (f", {len(g.fills)} fill(s)" if g.fills else ""),
        f"    %{k}_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
        f"    %{k}_b, %{k}_grid = transform.structured.tile_using_forall {a} tile_sizes {_ints(s.block_tile)} "
        f"(mapping = [{_mapping('block', n_block)}]) : ({ANY}) -> ({ANY}, {ANY})",
    ]
    containing = f"%{k}_grid"
    block_members = []
    for j, m in enumerate(members):
        out.append(f"    %{k}_m{j}b, %{k}_grid{j} = transform.structured.fuse_into_containing_op {m} into {containing} "
                   f": ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_grid{j}"
        block_members.append(f"%{k}_m{j}b")
    out.append(f"    transform.annotate {containing} \"farm.kernel\" = %{k}_id : {ANY}, !transform.param<i64>")
    if n_thread:
        # num_threads, not tile sizes: a partial block tile must still give a static thread forall
        out.append(f"    %{k}_t, %{k}_threads = transform.structured.tile_using_forall %{k}_b num_threads "
                   f"{_ints(threads)} (mapping = [{_mapping('thread', n_thread)}]) : ({ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_threads"
        for j, m in enumerate(block_members):
            out.append(f"    %{k}_m{j}t, %{k}_threads{j} = transform.structured.fuse_into_containing_op {m} into "
                       f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
            containing = f"%{k}_threads{j}"
    thread_ops = {g.anchor: f"%{k}_t"} | ({g.producer: f"%{k}_m0t"} if g.producer is not None else {})
    member = _reduction_member(g, facts)
    if s.reduction_tile and member and n_thread:
        member_op = facts[member].info
        first = member_op.iterator_types.index("reduction")
        sizes = [s.reduction_tile if d == first else 0 for d in range(len(member_op.loop_ranges))]
        out.append(f"    %{k}_r, %{k}_rloop = transform.structured.tile_using_for {thread_ops[member]} tile_sizes "
                   f"{_ints(sizes)} : ({ANY}) -> ({ANY}, {ANY})")
        thread_ops[member] = f"%{k}_r"
    if s.vectorize and n_thread:
        fills = [f"%{k}_m{j}t" for j in range(len(members)) if j >= (g.producer is not None)]
        for handle in [*fills, *thread_ops.values()]:
            out.append(f"    transform.structured.vectorize {handle} : {ANY}")
    return out
