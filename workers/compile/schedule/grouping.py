"""Which ops form which kernel: an anchor op, its fills, an elementwise producer fused into it, or a whole row
pipeline; and the facts grouping rests on."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from workers.compile.analysis import LinalgOpFacts
from workers.compile.schedule.templates import wants_img2col
from workers.compile.schedule.tiles import ScheduleError
from workers.records import OpSchedule, ScheduleParams, leaves_partial_tiles, reduction_extents


@dataclass
class Group:
    """One kernel: the anchor op, its fused producer (if any) and the fills (or a direct conv's bias
    broadcast) they start from."""

    anchor: int
    producer: int | None
    fills: list[tuple[int, int]]  # (op whose init the fill is, that init's operand index)
    members: list[int] = field(default_factory=list)  # a row kernel's other ops (not fills), payload order
    # a staged matmul's operands that are 2-D transposes of another tensor (a Linear's weight): (input index,
    # transpose op); each K step's tile is transposed by the block's threads into shared memory, as it is read
    transposed: list[tuple[int, int]] = field(default_factory=list)


def plan_groups(facts: list[LinalgOpFacts], params: ScheduleParams | None) -> list[Group]:
    """Which ops form which kernel. Fills are fused into the op they initialise; a producer is fused
    into its only consumer when it feeds it through an identity map (no recomputation)."""
    by_index = {s.op_index: s for s in params.ops} if params else {}
    fused: set[int] = set()
    shared = recomputed_producers(facts, by_index)
    groups: list[Group] = []
    for f in reversed(facts):  # consumers first, so producers know whether they were taken
        i = f.info.index
        if i in fused or f.info.family == "fill" and not _is_unconsumed_fill(f, facts) \
                or _initialised_conv(i, facts, by_index) is not None:
            continue
        producer = None
        schedule = by_index.get(i)
        if schedule is not None and schedule.row_kernel:
            members = row_kernel_members(i, facts)
            if members is None:
                raise ScheduleError(f"op {i}: row_kernel needs an elementwise op over [rows..., columns] fed by "
                                    "row reductions over its columns")
            fused.update([i, *members])
            groups.append(Group(anchor=i, producer=None, fills=_fills_of([*members, i], facts, by_index),
                                members=members))
            continue
        # a split reduction reads its input through a reshape that producer fusion cannot cross: its
        # producer gets a kernel of its own
        split_anchor = schedule is not None and schedule.split_reduction and "reduction" in f.info.iterator_types
        if (schedule is None or schedule.fuse_producers) and not split_anchor:
            for p, identity in zip(f.operand_producers, f.input_maps_identity):
                if p is not None and identity and facts[p].info.family != "fill" and not _img2col_anchor(p, facts, by_index) \
                        and (facts[p].single_use and p not in fused or p in shared):
                    producer = p
                    break
        transposed = staged_transposes(i, producer if producer is not None else i, facts, schedule) \
            if schedule is not None else []
        fused.update([i] + ([producer] if producer is not None else []) + [t for _, t in transposed])
        groups.append(Group(anchor=i, producer=producer,
                            fills=_fills_of([i] + ([producer] if producer is not None else []), facts, by_index),
                            transposed=transposed))
    return list(reversed(groups))


def staged_transposes(anchor: int, matmul: int, facts: list[LinalgOpFacts],
                      schedule: OpSchedule) -> list[tuple[int, int]]:
    """(input index, transpose op) of each input of a staged 2-D matmul that a single-use 2-D linalg.transpose
    produces (torch-mlir lowers a Linear's x @ W.T so): its kernel transposes each K step's tile as it stages
    it, instead of a kernel of its own writing the transposed weight out every forward. SIMT (CUDA-core)
    kernels of whole tiles only, and not with pipeline_depth (cp.async copies bytes as they are)."""
    f = facts[matmul]
    staged_simt = schedule.promote_shared and schedule.tensor_core == "none" and not schedule.img2col
    if not staged_simt or f.info.family != "matmul" or len(f.info.loop_ranges) != 3 or schedule.pipeline_depth > 1 \
            or leaves_partial_tiles(schedule, facts[anchor].info, reduction_extents(f.info)[0]):
        return []
    return [(n, p) for n, p in enumerate(f.operand_producers[:f.n_inputs])
            if p is not None and facts[p].info.name == "linalg.transpose" and facts[p].single_use
            and len(facts[p].info.loop_ranges) == 2]


def group_ops(g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """Every op the group's kernel computes: its anchor, producer, row-kernel members and fills."""
    ops = [g.anchor, *([g.producer] if g.producer is not None else []), *g.members, *(t for _, t in g.transposed)]
    return ops + [facts[op].init_producer for op, _ in g.fills]


def kernel_of_line(line: int, facts: list[LinalgOpFacts], params: ScheduleParams) -> int | None:
    """The anchor op of the kernel that computes the op of model_linalg.mlir's `line`, if any."""
    return next((g.anchor for g in plan_groups(facts, params)
                 if any(line in facts[m].lines for m in group_ops(g, facts))), None)


def _fills_of(ops: list[int], facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> list[tuple[int, int]]:
    """(op, operand index of its init) of each of `ops` whose init is a fill (a fill shared by several
    ops is cloned into each of them), or the bias broadcast of a direct conv."""
    return [(m, facts[m].n_inputs) for m in ops if facts[m].init_producer is not None and (
        facts[facts[m].init_producer].info.family == "fill" or _initialised_conv(facts[m].init_producer, facts,
                                                                                 by_index) == m)]


def _initialised_conv(i: int, facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> int | None:
    """The direct (not img2col) conv whose init op `i` broadcasts (a conv's bias, as torch-mlir lowers
    it), if any: the conv's kernel computes it as it does a fill, one launch and one write of the output
    fewer (small_cnn: two kernels of 2.5-2.7 us under ncu, perf_targets_h200.md run 15)."""
    if facts[i].info.name != "linalg.broadcast" or not facts[i].single_use:
        return None
    conv = next((f.info.index for f in facts if f.init_producer == i), None)
    if conv is None or facts[conv].info.family != "conv" or _img2col_anchor(conv, facts, by_index):
        return None
    return conv


def row_loops(n: int) -> tuple[list[str], list[str]]:
    """The iterator types of a row pipeline's ops over `n` loops, the last the columns: elementwise, and a row
    reduction over the columns."""
    return ["parallel"] * n, ["parallel"] * (n - 1) + ["reduction"]


def row_kernel_members(anchor: int, facts: list[LinalgOpFacts]) -> list[int] | None:
    """The ops a row kernel on `anchor` takes (payload order), or None where it does not apply: the
    anchor is elementwise over [rows..., columns] (a softmax over attention scores has three dims of rows);
    the ops feeding it, transitively, that are elementwise over the same loops or reduce them over the
    columns, and feed nothing outside; at least one reduces. Other producers (the matmul of the scores, a
    mask over fewer loops, a LayerNorm's output that the next LayerNorm and a residual both read) are kernels
    of their own, which the row kernel reads."""
    op = facts[anchor].info
    elementwise, reduction = row_loops(len(op.loop_ranges))
    if op.family != "elementwise" or op.iterator_types != elementwise or len(op.loop_ranges) < 2:
        return None
    members = feeding(anchor, facts, lambda p: facts[p].info.loop_ranges == op.loop_ranges
                      and facts[p].info.iterator_types in (elementwise, reduction))
    while True:  # an op that anything outside also reads (through a reshape, say) is read by the kernel instead
        read_in_group = Counter(p for m in members | {anchor}
                                for p in [*facts[m].operand_producers, facts[m].init_producer])
        outside = {m for m in members if read_in_group[m] != facts[m].uses}
        if not outside:
            break
        members = feeding(anchor, facts, lambda p: p in members and p not in outside)
    if not any(facts[m].info.iterator_types == reduction for m in members):
        return None
    return sorted(members)


def _img2col_anchor(i: int, facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> bool:
    """A conv lowered through img2col (by its schedule, or by v0 where it has none) is a kernel's anchor:
    its result leaves the img2col matmul through a reshape that producer fusion cannot cross."""
    s = by_index.get(i)
    return s.img2col if s is not None else wants_img2col(facts[i].info)


def recomputed_producers(facts: list[LinalgOpFacts], by_index: dict[int, OpSchedule]) -> set[int]:
    """Elementwise ops with several consumers that each compute it again instead of reading it from
    memory (softmax's exp(x - max), read by the sum and by the divide): where one consumer is a block
    reduction (which can fuse a producer, unlike a split one) and every consumer reads it through an
    identity map as its first such operand, and fuses producers. (A split reduction whose partials a block
    merges is no such consumer: its partial kernel reads the producer through a reshape.)"""
    def fusing_block_reduction(s: OpSchedule | None) -> bool:
        return s is not None and bool(s.block_reduction) and not s.split_reduction

    shared = set()
    for f in facts:
        p = f.info.index
        consumers = [c for c in facts if p in c.operand_producers]
        if f.info.family != "elementwise" or f.single_use or len(consumers) < 2:
            continue
        def takes(c):
            s = by_index.get(c.info.index)
            firsts = [q for q, identity in zip(c.operand_producers, c.input_maps_identity)
                      if q is not None and identity and facts[q].info.family != "fill"]
            return (s is None or s.fuse_producers) and firsts[:1] == [p] and \
                c.operand_producers.count(p) == 1 and (c.info.family == "elementwise" or fusing_block_reduction(s))
        if all(takes(c) for c in consumers) and any(fusing_block_reduction(by_index.get(c.info.index)) for c in consumers):
            shared.add(p)
    return shared


def _is_unconsumed_fill(fill: LinalgOpFacts, facts: list[LinalgOpFacts]) -> bool:
    return not any(f.init_producer == fill.info.index for f in facts)


def group_family(group: Group, facts: list[LinalgOpFacts]) -> str:
    """A group is as heavy as its heaviest member: a matmul fused into a bias-add is a matmul."""
    order = ("matmul", "conv", "pooling", "reduction", "elementwise", "copy", "fill")
    if group.members:  # a row kernel's work is its reductions (a variance's sum of products included)
        return "reduction"
    members = [group.anchor] + ([group.producer] if group.producer is not None else [])
    return min((facts[m].info.family for m in members), key=order.index)


def reduction_member(g: Group, facts: list[LinalgOpFacts]) -> int | None:
    """The group member that has reduction loops, if any."""
    for m in ([g.producer] if g.producer is not None else []) + [g.anchor]:
        if "reduction" in facts[m].info.iterator_types:
            return m
    return None


def feeding(op: int, facts: list[LinalgOpFacts], through=lambda p: True) -> set[int]:
    """The ops whose results `op` reads, directly or through each other, taking only those `through` accepts."""
    found, todo = set(), [op]
    while todo:
        for p in facts[todo.pop()].operand_producers:
            if p is not None and p not in found and through(p):
                found.add(p)
                todo.append(p)
    return found
