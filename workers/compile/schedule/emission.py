"""Schedule parameters -> transform.mlir: each kernel's Transform steps, bufferization, the mapping to blocks
and threads, and each launch's marks (kernel_marks)."""
from __future__ import annotations

from dataclasses import dataclass

from workers.compile import kernel_marks
from workers.compile.analysis import LinalgOpFacts
from workers.compile.staging import emit_staged_copies
from workers.compile.pipeline import ANY, PIPELINE_COPIES_SEQUENCE, transform_module_head, vectorize
from workers.compile.schedule.grouping import Group, plan_groups, ROW_LOOPS, group_family, reduction_member, feeding
from workers.compile.schedule.templates import PARTIAL_LOADS, img2col_op, split_over_blocks, partial_kernel_schedule
from workers.compile.schedule.tiles import (ScheduleError, largest_divisor_at_most, block_dims, forall_mapping, ints,
                                            linear_grid, threads_per_loop)
from workers.compile.schedule.v0 import default_group_schedule
from workers.compile.schedule.staged_matmul import StagedMatmul, emit_registers_across_k_steps, emit_staged_matmul
from workers.compile.schedule.validation import mma_plan, staged_plan, validate, interleaved_columns
from workers.compile.tensor_core import (MmaPlan, emit_mma_contracts, emit_mma_group, emit_multibuffers,
                                         emit_pipelined_k_loop, emit_shared_accumulator, emit_staged_tiles)
from workers.records import OpInfo, OpSchedule, ScheduleParams, reduction_extents
from workers.target import Target, target


@dataclass
class Kernel:
    """One launch, in launch order: a group's kernel, or the partial-reduction kernel that its
    split_reduction runs first. Both are tuned through the group's schedule (the anchor's)."""

    anchor: int
    family: str
    block: list[int]  # thread block shape [x, y, z]
    partial: bool = False
    min_blocks_per_sm: int = 0  # the schedule's (.minnctapersm)
    warp_merge: bool = False  # the schedule's (warp_merge.merge_in_a_warp)
    interleave_columns: bool = False  # the schedule's (interleave_columns.interleave_thread_columns)
    linear_grid: int = 0  # blocks of a 1-D grid of linear block ids (linear_grid()); 0: grid x, y, z


HOIST = "    transform.loop.hoist_loop_invariant_subsets"


def plan_kernels(groups: list[Group], schedules: dict[int, OpSchedule], facts: list[LinalgOpFacts],
                 gpu: Target) -> list[Kernel]:
    """Every launch, in launch order (payload order): a partial-reduction kernel runs where its
    reduction op was, which can be before the kernels of ops between it and its group's anchor."""
    placed = []  # ((payload position, 0 for a partial kernel), kernel)
    for g in groups:
        s = schedules[g.anchor]
        block = validate(s, g, facts, gpu)
        if s.split_reduction:
            member = reduction_member(g, facts)
            partial = partial_kernel_schedule(facts[member].info, s.split_reduction, s)
            placed.append(((member, 0), Kernel(g.anchor, "reduction", block_dims(*partial), True, s.min_blocks_per_sm,
                                               linear_grid=linear_grid(*partial))))
        tiled = img2col_op(facts[g.anchor].info) if s.img2col else facts[g.anchor].info
        placed.append(((g.anchor, 1), Kernel(g.anchor, "matmul" if s.img2col else group_family(g, facts), block,
                                              min_blocks_per_sm=s.min_blocks_per_sm, warp_merge=s.warp_merge,
                                              interleave_columns=interleaved_columns(s, facts[g.anchor].info),
                                              linear_grid=linear_grid(s, tiled))))
    return [kernel for _, kernel in sorted(placed, key=lambda p: p[0])]


def emit_transform(facts: list[LinalgOpFacts], params: ScheduleParams) -> tuple[str, list[Kernel]]:
    """transform.mlir for the payload described by `facts`; also returns its kernels in launch order."""
    groups = plan_groups(facts, params)
    by_index = {s.op_index: s for s in params.ops}
    try:
        gpu = target(params.chip)
    except ValueError as e:
        raise ScheduleError(str(e)) from None
    schedules = {g.anchor: by_index.get(g.anchor) or default_group_schedule(g, facts, params.precision, gpu)
                 for g in groups}
    kernels = plan_kernels(groups, schedules, facts, gpu)
    ids = {(c.anchor, c.partial): i for i, c in enumerate(kernels)}
    group_of = {g.anchor: g for g in groups}
    tensor_cores = {i: mma_plan(schedules[c.anchor], group_of[c.anchor], facts, gpu) for i, c in enumerate(kernels)
                    if not c.partial and schedules[c.anchor].tensor_core != "none"}
    # SIMT matmuls whose operand tiles are staged in shared memory
    staged_simt = {i: staged_plan(schedules[c.anchor], group_of[c.anchor], facts, gpu) for i, c in enumerate(kernels)
                   if not c.partial and schedules[c.anchor].promote_shared and i not in tensor_cores}
    # mma.sync kernels: their warps' K steps vectorized into contracts, their staging in transform.mlir
    warp_mmas = {k: plan for k, plan in tensor_cores.items() if not plan.warpgroup}
    tf32 = [plan.matmul for plan in tensor_cores.values() if plan.operand == "f32"]
    if tf32 and params.precision != "tf32":
        raise ScheduleError(f"op {tf32[0]}: f32 matmuls run on tensor cores as TF32, which needs precision "
                            f"\"tf32\" (its tolerance), not {params.precision!r}")
    lines = transform_module_head("consumed")
    lines.append(f"    %ops = transform.structured.match interface{{LinalgOp}} in %func : ({ANY}) -> {ANY}")
    handles = ", ".join(f"%op{i}" for i in range(len(facts)))
    lines.append(f"    {handles} = transform.split_handle %ops : ({ANY}) -> ({', '.join([ANY] * len(facts))})")
    lines += emit_img2col_conversions(groups, schedules, facts)
    # a producer that several kernels compute again is fused into the last consumer first: fusion into a
    # kernel that runs before another consumer would write the producer's result out for it
    recomputed = any(g.producer is not None and not facts[g.producer].single_use for g in groups)
    order = list(reversed(groups)) if recomputed else groups
    group_lines = [line for g in order for line in _emit_group(ids, g, schedules[g.anchor], facts, tensor_cores,
                                                                  staged_simt)]
    # loop-invariant subsets are found once CSE has made the accumulator's read and write indices the
    # same values: those steps run after it
    hoists = [line for line in group_lines if line.startswith(HOIST)]
    lines += [line for line in group_lines if not line.startswith(HOIST)]
    lines += [
        f"    transform.apply_patterns to %func {{ transform.apply_patterns.canonicalization }} : {ANY}",
        # inside the kernels only: CSE would merge the function's equal tensor.empty ops, and one written by two
        # kernels is copied on the host (a concat's, whose pieces a kernel each writes)
        f'    %tiled = transform.structured.match ops{{["scf.forall"]}} in %func : ({ANY}) -> {ANY}',
        f"    transform.apply_cse to %tiled : {ANY}",
        *hoists,
        # a kernel writing a piece of a concat into a tensor.empty of its own (canonicalization folds a slice
        # of an empty tensor into one) writes into the concat's slice instead, else the host copies it there
        f"    transform.bufferization.eliminate_empty_tensors %func : {ANY}",
        f'    %empties = transform.structured.match ops{{["tensor.empty"]}} in %root : ({ANY}) -> !transform.op<"tensor.empty">',
        '    transform.bufferization.empty_tensor_to_alloc_tensor %empties : (!transform.op<"tensor.empty">) '
        '-> !transform.op<"bufferization.alloc_tensor">',
    ]
    # block-local tensors in shared memory: a tensor-core kernel's accumulator tile, a block reduction's partials
    for k, kernel in enumerate(kernels):
        s = schedules[kernel.anchor]
        if k in tensor_cores or k in staged_simt or not kernel.partial and (s.block_reduction or s.row_kernel):
            lines += emit_shared_accumulator(k)
    lines += [
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
    for k, kernel in enumerate(kernels):
        lines += [
            f'    %kernel{k} = transform.structured.match ops{{["scf.forall"]}} attributes{{farm.kernel = {k} : i64}} '
            f"in %bufferized : ({ANY}) -> {ANY}",
            *(emit_staged_copies(k) if k in staged_simt
              or k in warp_mmas and schedules[kernel.anchor].promote_shared else []),
            f"    %launch{k} = transform.gpu.map_forall_to_blocks %kernel{k} "
            f"{f'grid_dims = [{kernel.linear_grid}, 1, 1] ' if kernel.linear_grid else ''}"
            f"{{ generate_gpu_launch }} : ({ANY}) -> {ANY}",
            *_annotate_launch(k, kernel),
            f"    {f'%mapped{k} = ' if k in warp_mmas or k in staged_simt else ''}"
            f"transform.gpu.map_nested_forall_to_threads %launch{k} block_dims = {ints(kernel.block)} : ({ANY}) -> {ANY}",
        ]
        if k in warp_mmas:
            lines += emit_mma_contracts(f"%mapped{k}", tensor_cores[k])
        if k in staged_simt:
            lines += emit_registers_across_k_steps(f"%mapped{k}")
    lines += [
        f'    %gpu_func = transform.structured.match ops{{["func.func"]}} in %bufferized : ({ANY}) -> {ANY}',
        # accumulators of a vectorized reduction loop stay in registers across its iterations
        f"    %hoisted = transform.structured.hoist_redundant_vector_transfers %gpu_func : ({ANY}) -> {ANY}",
    ]
    # staged tiles in a K loop (a single K step leaves no loop, and nothing to pipeline)
    staged = {k: plan for k, plan in warp_mmas.items()
              if schedules[kernels[k].anchor].promote_shared and plan.k_steps > 1}
    pipelined = {k: plan for k, plan in staged.items() if plan.stages > 1}
    func = "%hoisted"
    for k, plan in staged.items():
        lines += emit_staged_tiles(k, plan, func)
    if pipelined:
        # the staged tiles out of their K loops (static shapes), so that they can be multi-buffered
        lines.append(f'    %staged_hoisted = transform.apply_registered_pass "buffer-loop-hoisting" to {func} '
                     f": ({ANY}) -> {ANY}")
        func = "%staged_hoisted"
        for k, plan in pipelined.items():
            lines += emit_multibuffers(k, plan, func)
    # the rest lowers contractions to FMAs: tensor-core kernels keep theirs for convert-vector-to-gpu
    plain = [k for k in range(len(kernels)) if k not in tensor_cores]
    fma_launches = func
    if tensor_cores:
        launches = ", ".join(f"%gpu_launch{k}" for k in range(len(kernels)))
        lines += [f'    %gpu_launches = transform.structured.match ops{{["gpu.launch"]}} in {func} : ({ANY}) -> {ANY}',
                  f"    {launches} = transform.split_handle %gpu_launches : ({ANY}) -> ({', '.join([ANY] * len(kernels))})"]
        fma_launches = "%plain_launches"
        if plain:
            lines.append(f"    {fma_launches} = transform.merge_handles {', '.join(f'%gpu_launch{k}' for k in plain)} : {ANY}")
    lines += [] if not plain else [
        # then contractions become FMAs, and contiguous 1-D transfers become vector loads/stores
        f"    transform.apply_patterns to {fma_launches} {{ transform.apply_patterns.vector.reduction_to_contract "
        "transform.apply_patterns.vector.transfer_permutation_patterns "
        f"transform.apply_patterns.canonicalization }} : {ANY}",
        f"    transform.apply_patterns to {fma_launches} {{ transform.apply_patterns.vector.lower_contraction "
        'lowering_strategy = "outerproduct" transform.apply_patterns.vector.lower_outerproduct '
        "transform.apply_patterns.vector.rank_reducing_subview_patterns "
        "transform.apply_patterns.vector.cast_away_vector_leading_one_dim "
        "transform.apply_patterns.vector.lower_masked_transfers "
        # what reduction_to_contract leaves of a vectorized reduction (a max, a sum of partials) unrolls
        # to scalar ops
        'transform.apply_patterns.vector.reorder_multi_reduction_dims lowering_strategy = "innerreduction" '
        'transform.apply_patterns.vector.multi_reduction_flattening lowering_strategy = "innerreduction" '
        'transform.apply_patterns.vector.multi_reduction_unrolling lowering_strategy = "innerreduction" '
        "transform.apply_patterns.vector.transfer_permutation_patterns "
        f"transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1 }} : {ANY}",
    ]
    lines += ["    transform.yield", "  }"]
    if pipelined:
        lines.append(f"  transform.named_sequence @{PIPELINE_COPIES_SEQUENCE}(%root: {ANY} {{transform.readonly}}) {{")
        for k, plan in pipelined.items():
            lines += emit_pipelined_k_loop(k, plan)
        lines += ["    transform.yield", "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n", kernels


def _annotate_launch(k: int, kernel: Kernel) -> list[str]:
    """The kernel's schedule choices on its gpu.launch (kernel_marks), which farm-outline-kernels carries
    onto its gpu.func for the passes after it."""
    launch, i64, i32 = f"%launch{k}", "!transform.param<i64>", "!transform.param<i32>"
    out = [f"    {launch}_anchor = transform.param.constant {kernel.anchor} : i64 -> {i64}",
           f'    transform.annotate {launch} "{kernel_marks.ANCHOR}" = {launch}_anchor : {ANY}, {i64}',
           f'    {launch}_family = transform.param.constant "{kernel.family}" -> !transform.any_param',
           f'    transform.annotate {launch} "{kernel_marks.FAMILY}" = {launch}_family : {ANY}, !transform.any_param']
    out += [f'    transform.annotate {launch} "{mark}" : {ANY}' for mark, on in (
        (kernel_marks.WARP_MERGE, kernel.warp_merge), (kernel_marks.INTERLEAVE_COLUMNS, kernel.interleave_columns)) if on]
    if kernel.min_blocks_per_sm:
        out += [f"    {launch}_ctas = transform.param.constant {kernel.min_blocks_per_sm} : i32 -> {i32}",
                f'    transform.annotate {launch} "{kernel_marks.MIN_BLOCKS_PER_SM}" = {launch}_ctas : {ANY}, {i32}']
    return out


def _emit_group(ids: dict[tuple[int, bool], int], g: Group, s: OpSchedule, facts: list[LinalgOpFacts],
                plans: dict[int, MmaPlan], staged: dict[int, StagedMatmul]) -> list[str]:
    """The group's kernel (and first, where its reduction is split, the partial-reduction kernel);
    `ids` numbers the kernels by (anchor, partial) in launch order, `plans` holds the tensor-core kernels'
    plans, `staged` the staged SIMT matmuls'."""
    op = facts[g.anchor].info
    k = f"g{g.anchor}"
    if s.tensor_core != "none":
        kernel = ids[(g.anchor, False)]
        return _emit_mma_group(kernel, k, g, s, plans[kernel])
    if s.img2col:
        return _emit_img2col_group(ids[(g.anchor, False)], k, g, s, facts)
    if s.row_kernel:
        return _emit_row_kernel(ids[(g.anchor, False)], k, g, s, facts)
    handles = {m: f"%op{m}" for m in [g.anchor] + ([g.producer] if g.producer is not None else [])}
    # fusion consumes the producer's handle, so a shared fill is looked up afresh from each consumer
    out = [f"    %{k}_fill{j} = transform.get_producer_of_operand %op{op}[{operand}] : ({ANY}) -> {ANY}"
           for j, (op, operand) in enumerate(g.fills)]
    if g.producer is not None and not facts[g.producer].single_use:  # recomputed in each consumer
        operand = facts[g.anchor].operand_producers.index(g.producer)
        out.append(f"    %{k}_producer = transform.get_producer_of_operand %op{g.anchor}[{operand}] : ({ANY}) -> {ANY}")
        handles[g.producer] = f"%{k}_producer"
    if ids[(g.anchor, False)] in staged:
        kernel = ids[(g.anchor, False)]
        return out + emit_staged_matmul(kernel, k, g, s, staged[kernel], facts, handles.get(g.producer))
    member = reduction_member(g, facts)
    if s.split_reduction:
        out += _emit_split(ids[(g.anchor, True)], k, handles[member], s, facts[member].info)
        handles[member] = f"%{k}_merge"  # the merge of the partials takes the reduction's place
    if s.block_reduction:  # with a split, its merge is the block reduction
        return out + _emit_block_reduction(ids[(g.anchor, False)], k, g, s, facts, handles.get(g.producer),
                                           handles[g.anchor])
    members = ([handles[g.producer]] if g.producer is not None else []) + [f"%{k}_fill{j}" for j in range(len(g.fills))]
    out.append(f"    // kernel of op {g.anchor} ({s.family})"
               + (f", fused producer op {g.producer}" if g.producer is not None else "")
               + (f", {len(g.fills)} fill(s)" if g.fills else ""))
    out += _emit_tiles(ids[(g.anchor, False)], k, handles[g.anchor], members, s, op)
    n_thread = sum(1 for t in s.thread_tile if t)
    thread_ops = {g.anchor: f"%{k}_t"} | ({g.producer: f"%{k}_m0t"} if g.producer is not None else {})
    # a tile that covers the whole loop would leave a one-trip loop that canonicalization folds away
    # under the handles of the steps after it: the loop then stays untiled
    tiled = bool(s.reduction_tile and member and n_thread) and s.reduction_tile < (
        s.split_reduction or reduction_extents(facts[member].info)[0])
    if tiled:
        member_op = facts[member].info
        first = member_op.iterator_types.index("reduction")
        # a split's merge has the op's loops with its (first) K loop as the partials, the others gone
        loops = len(member_op.loop_ranges) - (len(reduction_extents(member_op)) - 1 if s.split_reduction else 0)
        sizes = [s.reduction_tile if d == first else 0 for d in range(loops)]
        out.append(f"    %{k}_r, %{k}_rloop = transform.structured.tile_using_for {thread_ops[member]} tile_sizes "
                   f"{ints(sizes)} : ({ANY}) -> ({ANY}, {ANY})")
        thread_ops[member] = f"%{k}_r"
    if s.vectorize and n_thread:
        fills = [f"%{k}_m{j}t" for j in range(len(members)) if j >= (g.producer is not None)]
        for handle in [*fills, *thread_ops.values()]:
            out.append(vectorize(handle))
        if s.split_reduction and tiled:
            # the merge's accumulator: read and written at the same place every iteration, it becomes a
            # vector carried by the loop (registers) instead of a store to global memory per step
            out.append(f"{HOIST} %{k}_rloop : {ANY}")
    return out


def emit_img2col_conversions(groups: list[Group], schedules: dict[int, OpSchedule],
                             facts: list[LinalgOpFacts]) -> list[str]:
    """Every img2col conv becomes its gather (%g<i>_im2col) and matmul-like op (%g<i>_mm) before any
    kernel is tiled; canonicalization then moves each conv's fill past the reshape of its init, so that
    the fill initialises the matmul's init directly and fuses into its kernel."""
    out = []
    for g in groups:
        if schedules[g.anchor].img2col:
            k = f"g{g.anchor}"
            out += [f"    // op {g.anchor} ({facts[g.anchor].info.name}) through img2col",
                    f"    %{k}_im2col, %{k}_reshaped = transform.structured.convert_conv2d_to_img2col %op{g.anchor} "
                    f": ({ANY}) -> ({ANY}, {ANY})",
                    f"    %{k}_mm = transform.get_producer_of_operand %{k}_reshaped[0] : ({ANY}) -> {ANY}"]
    if out:
        out.append(f"    transform.apply_patterns to %func {{ transform.apply_patterns.canonicalization }} : {ANY}")
    return out


def _emit_img2col_group(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts]) -> list[str]:
    """The img2col matmul tiled like a matmul (blocks, a register tile per thread, the reduction loop
    tiled), its fill fused; the gather is fused into each thread's reduction loop, so a thread gathers
    the reduction_tile x thread_tile slice of the img2col matrix it multiplies next (never in memory)."""
    op = img2col_op(facts[g.anchor].info)
    fill = [f"%{k}_fill0"] if g.fills else []
    out = [f"    %{k}_fill0 = transform.get_producer_of_operand %{k}_mm[2] : ({ANY}) -> {ANY}"] if g.fills else []
    out.append(f"    // kernel of op {g.anchor} (img2col matmul, loops {op.loop_ranges})")
    out += _emit_tiles(kernel, k, f"%{k}_mm", [f"%{k}_im2col"] + fill, s, op)
    if not any(s.thread_tile):
        return out
    mm = f"%{k}_t"
    if s.reduction_tile and s.reduction_tile < op.loop_ranges[3]:
        out += [f"    %{k}_r, %{k}_rloop = transform.structured.tile_using_for %{k}_t tile_sizes "
                f"{ints([0, 0, 0, s.reduction_tile])} : ({ANY}) -> ({ANY}, {ANY})",
                f"    %{k}_gr, %{k}_rloop1 = transform.structured.fuse_into_containing_op %{k}_m0t into %{k}_rloop "
                f": ({ANY}, {ANY}) -> ({ANY}, {ANY})"]
        mm = f"%{k}_r"  # the gather (%{k}_gr) stays scalar loads: its indexing map does not vectorize
    if s.vectorize:
        out += [vectorize(h) for h in ([f"%{k}_m1t"] if fill else []) + [mm]]
        if mm == f"%{k}_r":
            out.append(f"{HOIST} %{k}_rloop1 : {ANY}")
    return out


def _emit_block_reduction(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts],
                          producer: str | None, anchor: str) -> list[str]:
    """One kernel per reduction (`anchor`: the op, or with split_reduction the merge of its partials): a
    block per output (fill and producer fused); its threads reduce contiguous chunks of the reduction loop
    into a block-local (shared) tensor of partials (tile_reduction_using_forall), and after the barrier that
    ends that forall one thread merges them into the output. No partials in global memory, no second
    launch (but the split's)."""
    op = facts[g.anchor].info
    r = op.iterator_types.index("reduction")
    position = op.iterator_types[:r].count("parallel")  # where the partials dim sits among the outputs
    n_parallel = op.iterator_types.count("parallel")
    members = ([producer] if g.producer is not None else []) + [f"%{k}_fill{j}" for j in range(len(g.fills))]
    out = [f"    // kernel of op {g.anchor} ({s.family}): {s.block_reduction} threads per output"
           + (f", fused producer op {g.producer}" if g.producer is not None else "")]
    # the block level as for any kernel (thread_tile is all 0: no thread forall there)
    out += _emit_tiles(kernel, k, anchor, members, s, op)
    out += _emit_partials(k, f"%{k}_b", [s.block_reduction if d == r else 0 for d in range(len(op.loop_ranges))], r)
    vectorized = [f"%{k}_pft"]
    if g.producer is not None:
        out.append(f"    %{k}_prt, %{k}_tf1 = transform.structured.fuse_into_containing_op %{k}_m0b into %{k}_tf0 "
                   f": ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        vectorized.append(f"%{k}_prt")
    split = f"%{k}_split"
    if s.reduction_tile:
        sizes = [s.reduction_tile if d == r else 0 for d in range(len(op.loop_ranges))]
        out.append(f"    %{k}_sr, %{k}_srloop = transform.structured.tile_using_for %{k}_split tile_sizes {ints(sizes)} "
                   f": ({ANY}) -> ({ANY}, {ANY})")
        out.append(f"{HOIST} %{k}_srloop : {ANY}")
        split = f"%{k}_sr"
    vectorized.append(split)
    merge, handles = _emit_merge(k, f"%{k}_comb", s.block_reduction, n_parallel, position)
    out += merge
    vectorized += handles
    containing = f"%{k}_cf"
    for j in range(len(g.fills)):
        handle = f"%{k}_m{j + (g.producer is not None)}b"
        out.append(f"    %{k}_f{j}t, %{k}_cf{j} = transform.structured.fuse_into_containing_op {handle} into "
                   f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_cf{j}"
        vectorized.append(f"%{k}_f{j}t")
    return out + [vectorize(h) for h in vectorized]


ROW_OP = "farm.row_op"


def _emit_row_kernel(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts]) -> list[str]:
    """One kernel for a row pipeline: a block per row with every op fused into it (CSE then merges the
    copies that fusing a producer once per use makes); then, consumers first, the anchor over the
    block's threads and each reduction over them as a block reduction (partials in shared memory,
    merged by a warp then one thread, the result in shared memory), each fusing the elementwise ops it reads
    (recomputed there, never stored). The ops are found again after CSE by a `farm.row_op` mark."""
    fills = [f"%{k}_fill{j}" for j in range(len(g.fills))]
    fill_of = {op: f"%{k}_fill{j}" for j, (op, _) in enumerate(g.fills)}
    out = [f"    {fills[j]} = transform.get_producer_of_operand %op{op}[{operand}] : ({ANY}) -> {ANY}"
           for j, (op, operand) in enumerate(g.fills)]
    out.append(f"    // kernel of op {g.anchor}: one block per row of {s.row_kernel} threads, with ops "
               f"{', '.join(map(str, g.members))}")
    # results that only the kernel reads (a reduction's row of maxima or sums) become block-local
    # tensors, i.e. shared memory, also through a reshape of their tensor.empty
    out.append(f"    transform.apply_patterns to %func {{ transform.apply_patterns.tensor.fold_tensor_empty }} : {ANY}")
    marks = {m: f"%op{m}" for m in g.members} | {f"f{m}": fill_of[m] for m in fill_of}
    for m, handle in marks.items():
        out += [f"    %{k}_mark_{m} = transform.param.constant {_mark(m)} : i64 -> !transform.param<i64>",
                f"    transform.annotate {handle} \"{ROW_OP}\" = %{k}_mark_{m} : {ANY}, !transform.param<i64>"]
    out += [
        f"    %{k}_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
        f"    %{k}_b, %{k}_grid = transform.structured.tile_using_forall %op{g.anchor} tile_sizes [1, 0] "
        f"(mapping = [#gpu.block<x>]) : ({ANY}) -> ({ANY}, {ANY})",
    ]
    containing = f"%{k}_grid"
    for j, handle in enumerate([*(f"%op{m}" for m in reversed(g.members)), *fills]):
        out.append(f"    %{k}_fused{j}, %{k}_grid{j} = transform.structured.fuse_into_containing_op {handle} into "
                   f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_grid{j}"
    out += [f"    transform.annotate {containing} \"farm.kernel\" = %{k}_id : {ANY}, !transform.param<i64>",
            f"    transform.apply_patterns to {containing} {{ transform.apply_patterns.tensor.fold_tensor_empty }} : {ANY}",
            f"    transform.apply_cse to {containing} : {ANY}",
            f"    %{k}_done = transform.param.constant -1 : i64 -> !transform.param<i64>"]
    grid = containing

    def find(m) -> str:
        out.append(f"    %{k}_op{m}_{len(out)} = transform.structured.match attributes{{{ROW_OP} = {_mark(m)} : i64}} "
                   f"in {grid} : ({ANY}) -> {ANY}")
        return f"%{k}_op{m}_{len(out) - 1}"

    vectorized = []
    elementwise = [m for m in g.members if facts[m].info.iterator_types == ROW_LOOPS[0]]
    for d in [g.anchor, *reversed([m for m in g.members if m not in elementwise])]:
        if d == g.anchor:
            out.append(f"    %{k}_t{d}, %{k}_threads{d} = transform.structured.tile_using_forall %{k}_b num_threads "
                       f"[0, {s.row_kernel}] (mapping = [#gpu.thread<x>]) : ({ANY}) -> ({ANY}, {ANY})")
            vectorized.append(f"%{k}_t{d}")
        else:
            out += _emit_partials(f"{k}{d}", find(d), [0, s.row_kernel], 1)
            merge, handles = _emit_merge(f"{k}{d}", f"%{k}{d}_comb", s.row_kernel, 1, 1)
            out += merge
            vectorized += [f"%{k}{d}_pft", f"%{k}{d}_split", *handles]
            if d in fill_of:
                fill = find(f"f{d}")
                out.append(f"    %{k}_ft{d}, %{k}_ff{d} = transform.structured.fuse_into_containing_op {fill} into "
                           f"%{k}{d}_cf : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
                vectorized.append(f"%{k}_ft{d}")
        # the elementwise ops it reads, consumers first: a copy of each in its thread forall, marked
        # done so that the next search finds only the block's original
        containing = f"%{k}_threads{d}" if d == g.anchor else f"%{k}{d}_tf0"
        for j, m in enumerate(sorted(feeding(d, facts, lambda p: p in elementwise), reverse=True)):
            out += [f"    %{k}_e{d}_{m}, %{k}_threads{d}_{j} = transform.structured.fuse_into_containing_op {find(m)} into "
                    f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})",
                    f"    transform.annotate %{k}_e{d}_{m} \"{ROW_OP}\" = %{k}_done : {ANY}, !transform.param<i64>"]
            containing = f"%{k}_threads{d}_{j}"
            vectorized.append(f"%{k}_e{d}_{m}")
    return out + [vectorize(h) for h in vectorized]


def _mark(m: int | str) -> int:
    """The farm.row_op mark of a row kernel's op m, or of the fill of op m ("f<m>")."""
    return int(m[1:]) + 1_000_000 if isinstance(m, str) else m


def _emit_partials(p: str, target: str, threads: list[int], reduction_dim: int) -> list[str]:
    """The first step of a block reduction of `target`: `threads` (per loop; the reduction loop's entry
    non-zero) each reduce a contiguous run of it into a block-local tensor of partials, each thread
    initialising its own partial (a fill left in the block would race with the forall). Handles:
    %{p}_split (the partial reduction), %{p}_comb (what combines the partials), %{p}_pft (the partials'
    fill) and %{p}_tf0 (the threads' forall)."""
    return [
        f"    %{p}_pfill, %{p}_split, %{p}_comb, %{p}_tf = transform.structured.tile_reduction_using_forall {target} "
        f"reduction_dims = [{reduction_dim}] by num_threads = {ints(threads)} tile_sizes = {ints([0] * len(threads))} "
        f"mapping = [#gpu.thread<x>] : ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})",
        f"    %{p}_pft, %{p}_tf0 = transform.structured.fuse_into_containing_op %{p}_pfill into %{p}_tf "
        f": ({ANY}, {ANY}) -> ({ANY}, {ANY})",
    ]


MERGE_THREADS = 32  # one warp merges a block reduction's partials, in two steps


def _emit_merge(k: str, comb: str, partials: int, n_parallel: int, position: int) -> tuple[list[str], list[str]]:
    """The merge of a block reduction's `partials` (the combining op `comb`, after the barrier that ends
    the partial forall): up to MERGE_THREADS threads each reduce a run of them into a second row of
    partials in shared memory, then one thread per output (the block has one) reduces those, after
    another barrier: two short serial chains instead of one of `partials`. Returns the steps and the
    handles to vectorize; the single-thread forall is %{k}_cf."""
    threads = largest_divisor_at_most(partials, MERGE_THREADS)
    one = [1] * n_parallel
    one.insert(position, 0)
    out, vectorized = [], []
    if threads > 1 and partials // threads > 1:
        # the combining op's loops: the outputs', then the partials' (its reduction), whatever `position`
        spread = [0] * n_parallel + [threads]
        out += _emit_partials(f"{k}_m", comb, spread, n_parallel)
        vectorized += [f"%{k}_m_pft", f"%{k}_m_split"]
        comb = f"%{k}_m_comb"
    out.append(f"    %{k}_ct, %{k}_cf = transform.structured.tile_using_forall {comb} num_threads {ints(one)} "
               f"(mapping = [{forall_mapping('thread', n_parallel)}]) : ({ANY}) -> ({ANY}, {ANY})")
    return out, [*vectorized, f"%{k}_ct"]


def _emit_mma_group(kernel: int, k: str, g: Group, s: OpSchedule, plan: MmaPlan) -> list[str]:
    fills = [(op, operand) for op, operand in g.fills if op == plan.matmul]
    out = [f"    %{k}_fill = transform.get_producer_of_operand %op{op}[{operand}] : ({ANY}) -> {ANY}"
           for op, operand in fills]
    return out + emit_mma_group(kernel, k, plan, f"%{k}_fill" if fills else None, s)


def _emit_tiles(kernel: int, k: str, anchor: str, members: list[str], s: OpSchedule, op: OpInfo) -> list[str]:
    """Tile `anchor` to a forall over blocks, then one over threads, fusing `members` (producer first,
    then fills) into both; the thread-level handles are %{k}_t and %{k}_m{j}t."""
    threads = threads_per_loop(s, op)
    n_block = sum(1 for b in s.block_tile if b)
    n_thread = sum(1 for t in s.thread_tile if t)
    out = [
        f"    %{k}_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
        f"    %{k}_b, %{k}_grid = transform.structured.tile_using_forall {anchor} tile_sizes {ints(s.block_tile)} "
        f"(mapping = [{forall_mapping('block', n_block, bool(linear_grid(s, op)))}]) : ({ANY}) -> ({ANY}, {ANY})",
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
                   f"{ints(threads)} (mapping = [{forall_mapping('thread', n_thread)}]) : ({ANY}) -> ({ANY}, {ANY})")
        containing = f"%{k}_threads"
        for j, m in enumerate(block_members):
            out.append(f"    %{k}_m{j}t, %{k}_threads{j} = transform.structured.fuse_into_containing_op {m} into "
                       f"{containing} : ({ANY}, {ANY}) -> ({ANY}, {ANY})")
            containing = f"%{k}_threads{j}"
    return out


def _emit_split_over_blocks(kernel: int, k: str, reduction: str, split: int, schedule: OpSchedule,
                            partial: OpInfo, op: OpInfo) -> list[str]:
    """split_over_blocks: the forall of `split` chunks of the first K loop is the partial kernel's grid;
    its threads tile the outputs as `schedule` does on `partial` (partial_kernel_schedule's), each reducing
    its chunk in one vector. Then, as _emit_split's, %{k}_merge reduces the partials (the split dim last)."""
    r = op.iterator_types.index("reduction")
    k_loops = len(op.loop_ranges) - r
    threads = threads_per_loop(schedule, partial)[:r]
    mapping = f"(mapping = [{forall_mapping('thread', sum(1 for n in threads if n))}])"
    # the fill of each block's partials gets a thread forall of its own: fusion cannot reach through the
    # rank-reducing slice between it and the partial's forall (each thread fills the element it reduces
    # into, so no barrier is needed between the two)
    return [
        f"    // partial-reduction kernel: a block per chunk of the first K loop ({split} chunks)",
        f"    %{k}_pfill, %{k}_partial, %{k}_merge, %{k}p_grid = transform.structured.tile_reduction_using_forall "
        f"{reduction} reduction_dims = [{r}] by num_threads = {ints([0] * r + [split] + [0] * (k_loops - 1))} "
        f"mapping = [#gpu.block<x>] : ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})",
        f"    %{k}p_id = transform.param.constant {kernel} : i64 -> !transform.param<i64>",
        f"    %{k}p_m0b, %{k}p_grid0 = transform.structured.fuse_into_containing_op %{k}_pfill into %{k}p_grid "
        f": ({ANY}, {ANY}) -> ({ANY}, {ANY})",
        f"    transform.annotate %{k}p_grid0 \"farm.kernel\" = %{k}p_id : {ANY}, !transform.param<i64>",
        f"    %{k}p_m0t, %{k}p_fill_threads = transform.structured.tile_using_forall %{k}p_m0b num_threads "
        f"{ints(threads + [0])} {mapping} : ({ANY}) -> ({ANY}, {ANY})",
        f"    %{k}p_t, %{k}p_threads = transform.structured.tile_using_forall %{k}_partial num_threads "
        f"{ints(threads + [0] * k_loops)} {mapping} : ({ANY}) -> ({ANY}, {ANY})",
        vectorize(f"%{k}p_t"),
    ]


def _emit_split(kernel: int, k: str, reduction: str, group: OpSchedule, op: OpInfo) -> list[str]:
    """Split `reduction` into a partial reduction, tiled here as its own kernel, and %{k}_merge, which
    reduces the partials into the original result."""
    r, split = op.iterator_types.index("reduction"), group.split_reduction
    # the partials dim goes where the reduction loop was among the output dims, so the merge op has the
    # loops of the op it replaces (with extent `split` for the reduction) and the group's tiles fit it
    position = op.iterator_types[:r].count("parallel")
    schedule, partial = partial_kernel_schedule(op, split, group)
    if split_over_blocks(op):
        return _emit_split_over_blocks(kernel, k, reduction, split, schedule, partial, op)
    chunks = partial.family == "matmul"  # partial_kernel_schedule split it in chunks
    out = [
        f"    %{k}_partials, %{k}_partials_fill, %{k}_partial, %{k}_merge = transform.structured.split_reduction "
        f"{reduction} "
        f"{{ split_factor = {split}, insert_split_dimension = {position}{'' if chunks else ', inner_parallel'} }} "
        f": ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})",
        f"    // partial-reduction kernel of op {op.index}: {split} partials per output"
        + (", each of a chunk of K, tiled as the matmul" if chunks else ""),
    ]
    out += _emit_tiles(kernel, f"{k}p", f"%{k}_partial", [f"%{k}_partials_fill"], schedule, partial)
    if chunks:
        if not schedule.reduction_tile:  # a chunk of one K step
            return out + [vectorize(f"%{k}p_{h}") for h in ("m0t", "t")]
        chunk_loop = r + 1
        sizes = [schedule.reduction_tile if d == chunk_loop else 0 for d in range(len(partial.loop_ranges))]
        return out + [
            f"    %{k}p_r, %{k}p_rloop = transform.structured.tile_using_for %{k}p_t tile_sizes {ints(sizes)} "
            f": ({ANY}) -> ({ANY}, {ANY})",
            vectorize(f"%{k}p_m0t"),
            vectorize(f"%{k}p_r"),
            f"{HOIST} %{k}p_rloop : {ANY}",  # the thread's partials stay in registers across the chunk
        ]
    # a thread's strided elements are read PARTIAL_LOADS at a time into a vector, so that many loads
    # are in flight instead of one load, add and store of the accumulator per element
    loads = largest_divisor_at_most(partial.loop_ranges[r], PARTIAL_LOADS)
    if loads == partial.loop_ranges[r]:  # one vector covers a thread's elements: no loop to tile
        return out + [vectorize(f"%{k}p_m0t"),
                      vectorize(f"%{k}p_t")]
    sizes = [loads if d == r else 0 for d in range(len(partial.loop_ranges))]
    return out + [
        f"    %{k}p_r, %{k}p_rloop = transform.structured.tile_using_for %{k}p_t tile_sizes {ints(sizes)} "
        f": ({ANY}) -> ({ANY}, {ANY})",
        vectorize(f"%{k}p_m0t"),
        vectorize(f"%{k}p_r"),
        # each thread's partial stays in a register across the loop (one store at the end)
        f"{HOIST} %{k}p_rloop : {ANY}",
    ]
