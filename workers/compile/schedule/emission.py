"""Schedule parameters -> transform.mlir: each kernel's Transform steps, bufferization, the mapping to blocks
and threads, and each launch's marks (kernel_marks)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from numba_cuda_mlir._mlir.dialects import transform
from numba_cuda_mlir._mlir.dialects._vector_transform_enum_gen import (VectorContractLowering,
                                                                       VectorMultiReductionLowering)
from numba_cuda_mlir._mlir.dialects.transform import bufferization, structured, vector
from numba_cuda_mlir._mlir.dialects.transform import gpu as gpu_transforms
from numba_cuda_mlir._mlir.dialects.transform import tensor as tensor_patterns

from workers.compile import kernel_marks, mlir
from workers.compile import transform_builder as tb
from workers.compile.analysis import LinalgOpFacts
from workers.compile.staging import emit_staged_copies
from workers.compile.pipeline import (KERNEL_ARITHMETIC_SEQUENCE, MAIN_SEQUENCE, PIPELINE_COPIES_SEQUENCE, prepare,
                                      schedule_module)
from workers.compile.schedule.grouping import Group, plan_groups, row_loops, group_family, reduction_member, feeding
from workers.compile.schedule.templates import PARTIAL_LOADS, img2col_op, split_over_blocks, partial_kernel_schedule
from workers.compile.schedule.tiles import (ScheduleError, largest_divisor_at_most, block_dims, forall_mapping,
                                            linear_grid, threads_per_loop)
from workers.compile.schedule.v0 import with_every_kernel
from workers.compile.schedule.staged_matmul import (StagedMatmul, emit_interleaved_columns,
                                                    emit_registers_across_k_steps, emit_staged_img2col,
                                                    emit_staged_matmul)
from workers.compile.schedule.validation import (interleaved_columns, masked_tiles, masked_vector_sizes, mma_plan,
                                                 staged_plan, validate)
from workers.compile.tensor_core import (MmaPlan, emit_mma_contracts, emit_mma_group, emit_multibuffers,
                                         emit_pipelined_k_loop, emit_shared_accumulator, emit_staged_tiles)
from workers.records import OpInfo, OpSchedule, ScheduleParams, reduction_extents
from workers.target import Target, target

ir = tb.ir


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


@dataclass
class Payload:
    """The handles a group's steps start from: the function, each linalg op by position, and each
    img2col conv's gather and matmul-like op."""

    func: tb.Handle
    ops: list[tb.Handle]
    img2col: dict[int, tuple[tb.Handle, tb.Handle]]


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


def complete_params(facts: list[LinalgOpFacts], params: ScheduleParams) -> ScheduleParams:
    """`params` with a schedule for every kernel (v0.with_every_kernel): what params.json records."""
    try:
        return with_every_kernel(params, facts, target(params.chip))
    except ValueError as e:  # an unknown chip; a ScheduleError passes through
        raise ScheduleError(str(e)) from None


def emit_transform(facts: list[LinalgOpFacts], params: ScheduleParams) -> tuple[str, list[Kernel]]:
    """transform.mlir for the payload described by `facts`; also returns its kernels in launch order."""
    params = complete_params(facts, params)
    gpu = target(params.chip)
    groups = plan_groups(facts, params)
    by_index = {s.op_index: s for s in params.ops}
    schedules = {g.anchor: by_index[g.anchor] for g in groups}
    kernels = plan_kernels(groups, schedules, facts, gpu)
    group_of = {g.anchor: g for g in groups}
    tensor_cores = {i: mma_plan(schedules[c.anchor], group_of[c.anchor], facts, gpu) for i, c in enumerate(kernels)
                    if not c.partial and schedules[c.anchor].tensor_core != "none"}
    tf32 = [plan.matmul for plan in tensor_cores.values() if plan.operand == "f32"]
    if tf32 and params.precision != "tf32":
        raise ScheduleError(f"op {tf32[0]}: f32 matmuls run on tensor cores as TF32, which needs precision "
                            f"\"tf32\" (its tolerance), not {params.precision!r}")
    # SIMT matmuls whose operand tiles are staged in shared memory
    staged_simt = {i: staged_plan(schedules[c.anchor], group_of[c.anchor], facts, gpu) for i, c in enumerate(kernels)
                   if not c.partial and schedules[c.anchor].promote_shared and i not in tensor_cores}
    # mma.sync kernels whose staged tiles are in a K loop (a single K step leaves no loop, nothing to
    # pipeline), and those of them with copies in flight
    staged = {k: plan for k, plan in tensor_cores.items() if not plan.warpgroup
              and schedules[kernels[k].anchor].promote_shared and plan.k_steps > 1}
    pipelined = {k: plan for k, plan in [*staged.items(), *staged_simt.items()] if plan.stages > 1}
    with mlir.context():
        module = schedule_module()
        try:
            with module.sequence(MAIN_SEQUENCE) as root:
                _emit_main(root, groups, schedules, facts, kernels, tensor_cores, staged_simt, staged, pipelined)
            if pipelined:
                with module.sequence(PIPELINE_COPIES_SEQUENCE, "readonly") as root:
                    for k, plan in pipelined.items():
                        emit_pipelined_k_loop(k, plan, root)
            with module.sequence(KERNEL_ARITHMETIC_SEQUENCE, "readonly") as root:
                _emit_kernel_arithmetic(root, [kernels[k].anchor for k, plan in tensor_cores.items()
                                               if plan.operand == "f32" and not plan.warpgroup])
            return module.text(), kernels
        except ScheduleError:
            raise
        except (ir.MLIRError, mlir.MlirError, ValueError, TypeError) as e:
            # a Transform op the bindings refuse to build (an attribute of the wrong type): the params' fault
            raise ScheduleError(f"transform.mlir cannot be built from these params: {e}") from None


def _emit_main(root: tb.Handle, groups: list[Group], schedules: dict[int, OpSchedule], facts: list[LinalgOpFacts],
               kernels: list[Kernel], tensor_cores: dict[int, MmaPlan], staged_simt: dict[int, StagedMatmul],
               staged: dict[int, MmaPlan], pipelined: dict[int, MmaPlan | StagedMatmul]) -> None:
    """The main sequence: every kernel tiled and fused on tensors, then bufferized, mapped to blocks and
    threads, and its vector code lowered."""
    func = prepare(root)
    ops = tb.split(tb.match(func, interface="LinalgOp", name="ops"), len(facts), name="op")
    payload = Payload(func, ops, emit_img2col_conversions(groups, schedules, facts, func, ops))
    ids = {(c.anchor, c.partial): i for i, c in enumerate(kernels)}
    # a producer that several kernels compute again is fused into the last consumer first: fusion into a
    # kernel that runs before another consumer would write the producer's result out for it
    recomputed = any(g.producer is not None and not facts[g.producer].single_use for g in groups)
    # loop-invariant subsets are found once CSE has made the accumulator's read and write indices the
    # same values: those steps run after it
    hoists = [loop for g in (reversed(groups) if recomputed else groups)
              for loop in _emit_group(ids, g, schedules[g.anchor], facts, payload, tensor_cores, staged_simt)]
    tb.canonicalize(func)
    # inside the kernels only: CSE would merge the function's equal tensor.empty ops, and one written by two
    # kernels is copied on the host (a concat's, whose pieces a kernel each writes)
    tb.cse(tb.match(func, ["scf.forall"], name="tiled"))
    for loop in hoists:
        tb.hoist_subsets(loop)
    # a kernel writing a piece of a concat into a tensor.empty of its own (canonicalization folds a slice
    # of an empty tensor into one) writes into the concat's slice instead, else the host copies it there
    bufferization.EliminateEmptyTensorsOp(func)
    empties = structured.MatchOp(transform.OperationType.get("tensor.empty"), root, ops=["tensor.empty"],
                                 loc=ir.Location.name("empties")).result
    bufferization.EmptyTensorToAllocTensorOp(transform.OperationType.get("bufferization.alloc_tensor"), empties)
    # block-local tensors in shared memory: a tensor-core kernel's accumulator tile, a block reduction's partials
    for k, kernel in enumerate(kernels):
        s = schedules[kernel.anchor]
        if k in tensor_cores or k in staged_simt or not kernel.partial and (s.block_reduction or s.row_kernel):
            emit_shared_accumulator(k, root)
    bufferized = bufferization.OneShotBufferizeOp(
        root, bufferize_function_boundaries=True, memcpy_op="linalg.copy", loc=ir.Location.name("bufferized"),
        function_boundary_type_conversion=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)).result
    # bufferization leaves self-copies of identical subviews behind; CSE + folding removes them
    bufferized_func = tb.match(bufferized, ["func.func"], name="bufferized_func")
    tb.cse(bufferized_func)
    tb.canonicalize(bufferized_func)
    tb.cse(bufferized_func)
    warp_mmas = {k: plan for k, plan in tensor_cores.items() if not plan.warpgroup}
    for k, kernel in enumerate(kernels):
        grid = tb.match(bufferized, ["scf.forall"], attributes={kernel_marks.KERNEL: k}, name=f"kernel{k}")
        if k in staged_simt or k in warp_mmas and schedules[kernel.anchor].promote_shared:
            emit_staged_copies(k, grid)
        if k in staged_simt and staged_simt[k].column_pieces > 1:
            emit_interleaved_columns(k, grid, staged_simt[k])
        launch = gpu_transforms.MapForallToBlocks(grid, grid_dims=[kernel.linear_grid, 1, 1] if kernel.linear_grid
                                                  else None, generate_gpu_launch=True,
                                                  loc=ir.Location.name(f"launch{k}")).result
        _annotate_launch(launch, kernel)
        mapped = gpu_transforms.MapNestedForallToThreads(launch, block_dims=kernel.block,
                                                         loc=ir.Location.name(f"mapped{k}")).result
        if k in warp_mmas:
            emit_mma_contracts(mapped, tensor_cores[k])
        if k in staged_simt:
            emit_registers_across_k_steps(mapped)
    gpu_func = tb.match(bufferized, ["func.func"], name="gpu_func")
    # accumulators of a vectorized reduction loop stay in registers across its iterations
    func = structured.HoistRedundantVectorTransfersOp(tb.any_op(), gpu_func, loc=ir.Location.name("hoisted")).result
    for k, plan in {**staged, **pipelined}.items():
        emit_staged_tiles(k, plan, func)
    if pipelined:
        # the staged tiles out of their K loops (static shapes), so that they can be multi-buffered
        func = tb.registered_pass(func, "buffer-loop-hoisting", "staged_hoisted")
        for k, plan in pipelined.items():
            emit_multibuffers(k, plan, func)
    # the rest lowers contractions to FMAs: tensor-core kernels keep theirs for convert-vector-to-gpu
    plain = [k for k in range(len(kernels)) if k not in tensor_cores]
    if not plain:
        return
    if tensor_cores:
        launches = tb.split(tb.match(func, ["gpu.launch"], name="gpu_launches"), len(kernels), name="gpu_launch")
        func = tb.merge([launches[k] for k in plain], name="plain_launches")
    # then contractions become FMAs, and contiguous 1-D transfers become vector loads/stores
    tb.apply_patterns(func, vector.ApplyVectorReductionToContractPatternsOp, vector.ApplyTransferPermutationPatternsOp,
                      transform.ApplyCanonicalizationPatternsOp)
    inner = VectorMultiReductionLowering.InnerReduction
    tb.apply_patterns(
        func, partial(vector.ApplyLowerContractionPatternsOp, lowering_strategy=VectorContractLowering.OuterProduct),
        vector.ApplyLowerOuterProductPatternsOp, vector.ApplyRankReducingSubviewPatternsOp,
        vector.ApplyCastAwayVectorLeadingOneDimPatternsOp, vector.ApplyLowerMaskedTransfersPatternsOp,
        # what reduction_to_contract leaves of a vectorized reduction (a max, a sum of partials) unrolls
        # to scalar ops
        partial(vector.ApplyReorderMultiReductionPatternsOp, lowering_strategy=inner),
        partial(vector.ApplyMultiReductionFlatteningPatternsOp, lowering_strategy=inner),
        partial(vector.ApplyMultiReductionUnrollingPatternsOp, lowering_strategy=inner),
        vector.ApplyTransferPermutationPatternsOp, partial(vector.ApplyLowerTransferPatternsOp, max_transfer_rank=1))


CONTRACTIBLE = ("arith.mulf", "arith.addf", "arith.subf")


def _emit_kernel_arithmetic(root: tb.Handle, tf32_anchors: list[int]) -> None:
    """KERNEL_ARITHMETIC_SEQUENCE, on the outlined kernels: float multiply/add/sub marked `contract`, so that
    LLVM may fuse them into FMA; the mma.sync ops of the kernels of `tf32_anchors` (f32 operands) marked
    tf32Enabled, which convert-vector-to-gpu does not set and without which convert-nvgpu-to-nvvm leaves
    them unconverted."""
    kernels = tb.match(root, ["gpu.module"], name="kernel_modules")
    contract = tb.param(tb.attribute("#arith.fastmath<contract>"), name="contract")
    tb.annotate(tb.match(kernels, CONTRACTIBLE, name="float_ops"), "fastmath", contract)
    for anchor in tf32_anchors:
        kernel = tb.match(kernels, ["gpu.func"], attributes={kernel_marks.ANCHOR: anchor}, name=f"tf32_kernel{anchor}")
        tb.annotate(tb.match(kernel, ["nvgpu.mma.sync"], name=f"tf32_mmas{anchor}"), "tf32Enabled")


def _annotate_launch(launch: tb.Handle, kernel: Kernel) -> None:
    """The kernel's schedule choices on its gpu.launch (kernel_marks), which farm-outline-kernels carries
    onto its gpu.func for the passes after it."""
    tb.mark(launch, kernel_marks.ANCHOR, kernel.anchor, name="anchor")
    tb.annotate(launch, kernel_marks.FAMILY, tb.param(kernel.family, name="family"))
    for mark, on in ((kernel_marks.WARP_MERGE, kernel.warp_merge),
                     (kernel_marks.INTERLEAVE_COLUMNS, kernel.interleave_columns)):
        if on:
            tb.annotate(launch, mark)
    if kernel.min_blocks_per_sm:
        tb.mark(launch, kernel_marks.MIN_BLOCKS_PER_SM, kernel.min_blocks_per_sm, bits=32, name="ctas")


def _emit_group(ids: dict[tuple[int, bool], int], g: Group, s: OpSchedule, facts: list[LinalgOpFacts],
                payload: Payload, plans: dict[int, MmaPlan], staged: dict[int, StagedMatmul]) -> list[tb.Handle]:
    """The group's kernel (and first, where its reduction is split, the partial-reduction kernel);
    `ids` numbers the kernels by (anchor, partial) in launch order, `plans` holds the tensor-core kernels'
    plans, `staged` the staged SIMT matmuls'. Returns the loops whose invariant subsets are hoisted after CSE."""
    op = facts[g.anchor].info
    k = f"g{g.anchor}"
    kernel = ids[(g.anchor, False)]
    if s.tensor_core != "none":
        plan = plans[kernel]
        fill = next((tb.producer_of(payload.ops[op], operand, f"{k}_fill") for op, operand in g.fills
                     if op == plan.matmul), None)
        emit_mma_group(kernel, k, plan, payload.ops, fill, s)
        return []
    if s.img2col and kernel in staged:
        gather, matmul = payload.img2col[g.anchor]
        fill = tb.producer_of(matmul, 2, f"{k}_fill0") if g.fills else None
        emit_staged_img2col(kernel, k, s, staged[kernel], facts[g.anchor].info, gather, matmul, fill)
        return []
    if s.img2col:
        return _emit_img2col_group(kernel, k, g, s, facts, payload.img2col[g.anchor])
    # fusion consumes the producer's handle, so a shared fill is looked up afresh from each consumer
    fills = [tb.producer_of(payload.ops[op], operand, f"{k}_fill{j}") for j, (op, operand) in enumerate(g.fills)]
    if s.row_kernel:
        return _emit_row_kernel(kernel, k, g, s, facts, payload, fills)
    handles = {m: payload.ops[m] for m in [g.anchor] + ([g.producer] if g.producer is not None else [])}
    if g.producer is not None and not facts[g.producer].single_use:  # recomputed in each consumer
        operand = facts[g.anchor].operand_producers.index(g.producer)
        handles[g.producer] = tb.producer_of(payload.ops[g.anchor], operand, f"{k}_producer")
    if kernel in staged:
        emit_staged_matmul(kernel, k, g, s, staged[kernel], facts, payload.ops[g.anchor], fills,
                           handles.get(g.producer), [payload.ops[t] for _, t in g.transposed])
        return []
    member = reduction_member(g, facts)
    hoists = []
    if s.split_reduction:
        # the merge of the partials takes the reduction's place
        handles[member], hoists = _emit_split(ids[(g.anchor, True)], k, handles[member], s, facts[member].info)
    if s.block_reduction:  # with a split, its merge is the block reduction
        return hoists + _emit_block_reduction(kernel, k, g, s, facts, handles.get(g.producer), handles[g.anchor],
                                              fills)
    members = ([handles[g.producer]] if g.producer is not None else []) + fills
    tiles = _emit_tiles(kernel, k, handles[g.anchor], members, s, op)
    if tiles.thread is None:
        return hoists
    thread_ops = {g.anchor: tiles.thread} | ({g.producer: tiles.members[0]} if g.producer is not None else {})
    if s.vectorize and member is not None and facts[member].info.family == "conv":
        _emit_conv_register_tile(k, thread_ops.pop(member), s.reduction_tile, facts[member].info)
    # a tile that covers the whole loop would leave a one-trip loop that canonicalization folds away
    # under the handles of the steps after it: the loop then stays untiled
    tiled = member in thread_ops and bool(s.reduction_tile) and s.reduction_tile < (
        s.split_reduction or reduction_extents(facts[member].info)[0])
    if tiled:
        member_op = facts[member].info
        first = member_op.iterator_types.index("reduction")
        # a split's merge has the op's loops with its (first) K loop as the partials, the others gone
        loops = len(member_op.loop_ranges) - (len(reduction_extents(member_op)) - 1 if s.split_reduction else 0)
        sizes = [s.reduction_tile if d == first else 0 for d in range(loops)]
        thread_ops[member], reduction_loop = tb.tile_for(thread_ops[member], sizes, f"{k}_r")
    if s.vectorize:
        sizes = masked_vector_sizes(s, op) if masked_tiles(s, g, facts) else None
        for handle in tiles.members[g.producer is not None:]:  # the fills, over the anchor's output
            tb.vectorize(handle, sizes and [sizes[d] for d in op.output_loops])
        for handle in thread_ops.values():
            tb.vectorize(handle, sizes)
        if s.split_reduction and tiled:
            # the merge's accumulator: read and written at the same place every iteration, it becomes a
            # vector carried by the loop (registers) instead of a store to global memory per step
            hoists.append(reduction_loop)
    return hoists


def _emit_conv_register_tile(k: str, conv: tb.Handle, channel_step: int, op: OpInfo) -> None:
    """A thread's tile of a direct conv (channels x neighbouring outputs) as vector multiply-adds: generalized,
    its reduction loops tiled (input channels by `channel_step`, kernel taps by 1), the unit dims that leaves
    folded away (the input's `oh + kh` then reads a plain dim), and vectorized. The accumulator tile, read
    and written at the same place every step, is hoisted into registers after bufferization (fused into an
    epilogue, it is the thread's scratch, which LLVM keeps in registers)."""
    first = op.iterator_types.index("reduction")
    sizes = [0] * first + [channel_step] + [1] * (len(op.loop_ranges) - first - 1)
    _, loops = tb.tile_for_loops(tb.generalize(conv, f"{k}_generic"), sizes, f"{k}_taps")
    tb.apply_patterns(loops[0], structured.ApplyFoldUnitExtentDimsViaSlicesPatternsOp)
    tb.vectorize(tb.match(loops[0], ["linalg.generic"], name=f"{k}_tap"))


def emit_img2col_conversions(groups: list[Group], schedules: dict[int, OpSchedule], facts: list[LinalgOpFacts],
                             func: tb.Handle, ops: list[tb.Handle]) -> dict[int, tuple[tb.Handle, tb.Handle]]:
    """Every img2col conv becomes its gather and matmul-like op (by anchor) before any kernel is tiled;
    canonicalization then moves each conv's fill past the reshape of its init, so that the fill
    initialises the matmul's init directly and fuses into its kernel."""
    converted = {}
    for g in groups:
        if schedules[g.anchor].img2col:
            k = f"g{g.anchor}"
            im2col = structured.ConvertConv2DToImg2ColOp(tb.any_op(), tb.any_op(), ops[g.anchor],
                                                          loc=ir.Location.name(f"{k}_im2col"))
            converted[g.anchor] = (im2col.img2col_tensor,
                                   tb.producer_of(im2col.transformed, 0, f"{k}_mm"))
    if converted:
        tb.canonicalize(func)
    return converted


def _emit_img2col_group(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts],
                        converted: tuple[tb.Handle, tb.Handle]) -> list[tb.Handle]:
    """The img2col matmul tiled like a matmul (blocks, a register tile per thread, the reduction loop
    tiled), its fill fused; the gather is fused into each thread's reduction loop, so a thread gathers
    the reduction_tile x thread_tile slice of the img2col matrix it multiplies next (never in memory)."""
    op = img2col_op(facts[g.anchor].info)
    gather, matmul = converted
    # the matmul's fill: its init's producer after the conversion and canonicalization
    fill = [tb.producer_of(matmul, 2, f"{k}_fill0")] if g.fills else []
    tiles = _emit_tiles(kernel, k, matmul, [gather, *fill], s, op)
    if not any(s.thread_tile):
        return []
    mm, hoists = tiles.thread, []
    if s.reduction_tile and s.reduction_tile < op.loop_ranges[3]:
        mm, reduction_loop = tb.tile_for(tiles.thread, [0, 0, 0, s.reduction_tile], f"{k}_r")
        # the gather stays scalar loads: its indexing map does not vectorize
        _, reduction_loop = tb.fuse_into(tiles.members[0], reduction_loop, f"{k}_gr")
        hoists.append(reduction_loop)
    if s.vectorize:
        for handle in tiles.members[1:] + [mm]:
            tb.vectorize(handle)
        return hoists
    return []


def _emit_block_reduction(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts],
                          producer: tb.Handle | None, anchor: tb.Handle, fills: list[tb.Handle]) -> list[tb.Handle]:
    """One kernel per reduction (`anchor`: the op, or with split_reduction the merge of its partials): a
    block per output (fill and producer fused); its threads reduce contiguous chunks of the reduction loop
    into a block-local (shared) tensor of partials (tile_reduction_using_forall), and after the barrier that
    ends that forall one thread merges them into the output. No partials in global memory, no second
    launch (but the split's)."""
    op = facts[g.anchor].info
    r = op.iterator_types.index("reduction")
    position = op.iterator_types[:r].count("parallel")  # where the partials dim sits among the outputs
    n_parallel = op.iterator_types.count("parallel")
    members = ([producer] if g.producer is not None else []) + fills
    # the block level as for any kernel (thread_tile is all 0: no thread forall there)
    tiles = _emit_tiles(kernel, k, anchor, members, s, op)
    threads = [s.block_reduction if d == r else 0 for d in range(len(op.loop_ranges))]
    partials = _emit_partials(k, tiles.block, threads, r)
    vectorized = [partials.fill]
    if g.producer is not None:
        fused, _ = tb.fuse_into(tiles.block_members[0], partials.threads, f"{k}_prt")
        vectorized.append(fused)
    split, hoists = partials.split, []
    if s.reduction_tile:
        sizes = [s.reduction_tile if d == r else 0 for d in range(len(op.loop_ranges))]
        split, reduction_loop = tb.tile_for(partials.split, sizes, f"{k}_sr")
        hoists.append(reduction_loop)
    vectorized.append(split)
    merge, containing = _emit_merge(k, partials.combine, s.block_reduction, n_parallel, position)
    vectorized += merge
    for j, fill in enumerate(tiles.block_members[g.producer is not None:]):
        fused, containing = tb.fuse_into(fill, containing, f"{k}_f{j}t")
        vectorized.append(fused)
    for handle in vectorized:
        tb.vectorize(handle)
    return hoists


ROW_OP = "farm.row_op"


def _emit_row_kernel(kernel: int, k: str, g: Group, s: OpSchedule, facts: list[LinalgOpFacts], payload: Payload,
                     fills: list[tb.Handle]) -> list[tb.Handle]:
    """One kernel for a row pipeline: a block per row with every op fused into it (CSE then merges the
    copies that fusing a producer once per use makes); then, consumers first, the anchor over the
    block's threads and each reduction over them as a block reduction (partials in shared memory,
    merged by a warp then one thread, the result in shared memory), each fusing the elementwise ops it reads
    (recomputed there, never stored). With reduction_tile, each thread goes through its run of columns in
    steps of that many (a loop, the elementwise ops fused into it): a whole run of a long row's columns was
    one vector per thread, spilled to local memory (rows of 393216 f32: 384 columns a thread, 7 KB of
    spills). The ops are found again after CSE by a `farm.row_op` mark. Returns the step loops whose
    accumulators are hoisted after CSE."""
    fill_of = {op: fills[j] for j, (op, _) in enumerate(g.fills)}
    # results that only the kernel reads (a reduction's row of maxima or sums) become block-local
    # tensors, i.e. shared memory, also through a reshape of their tensor.empty
    tb.apply_patterns(payload.func, tensor_patterns.ApplyFoldTensorEmptyPatternsOp)
    marks = {m: payload.ops[m] for m in g.members} | {f"f{m}": fill_of[m] for m in fill_of}
    for m, handle in marks.items():
        tb.mark(handle, ROW_OP, _mark(m), name=f"{k}_mark_{m}")
    op = facts[g.anchor].info
    rows = len(op.loop_ranges) - 1  # loops over the rows; the last, loop `rows`, over the columns
    block_op, containing = tb.tile_forall(payload.ops[g.anchor], forall_mapping(
        "block", sum(1 for b in s.block_tile if b), bool(linear_grid(s, op))), tile_sizes=s.block_tile, name=f"{k}_b")
    for j, handle in enumerate([*(payload.ops[m] for m in reversed(g.members)), *fills]):
        _, containing = tb.fuse_into(handle, containing, f"{k}_fused{j}")
    tb.mark(containing, kernel_marks.KERNEL, kernel, name=f"{k}_id")
    tb.apply_patterns(containing, tensor_patterns.ApplyFoldTensorEmptyPatternsOp)
    tb.cse(containing)
    done = tb.param(-1, name=f"{k}_done")
    grid = containing

    def find(m: int | str) -> tb.Handle:
        return tb.match(grid, attributes={ROW_OP: _mark(m)}, name=f"{k}_op{m}")

    vectorized, hoists = [], []
    along_columns = [0] * rows + [s.row_kernel]
    elementwise = [m for m in g.members if facts[m].info.iterator_types == row_loops(rows + 1)[0]]
    order = _block_order(g, facts)
    for d in sorted([g.anchor, *(m for m in g.members if m not in elementwise)], key=order.index, reverse=True):
        if d == g.anchor:
            thread_op, containing = tb.tile_forall(block_op, "#gpu.thread<x>", num_threads=along_columns,
                                                   name=f"{k}_t{d}")
        else:
            partials = _emit_partials(f"{k}{d}", find(d), along_columns, rows)
            merge, merge_forall = _emit_merge(f"{k}{d}", partials.combine, s.row_kernel, rows, rows)
            thread_op, containing = partials.split, partials.threads
            vectorized += [partials.fill, *merge]
            if d in fill_of:
                fill, _ = tb.fuse_into(find(f"f{d}"), merge_forall, f"{k}_ft{d}")
                vectorized.append(fill)
        # the elementwise ops it reads, consumers first: a copy of each in its thread forall, marked done so
        # that the next search finds only the block's original
        copies = []
        for m in sorted(feeding(d, facts, lambda p: p in elementwise), reverse=True):
            copy, containing = tb.fuse_into(find(m), containing, f"{k}_e{d}_{m}")
            tb.annotate(copy, ROW_OP, done)
            copies.append(copy)
        if s.reduction_tile:
            # the thread's run in steps, the copies moved into the step loop
            thread_op, loop = tb.tile_for(thread_op, [0] * rows + [s.reduction_tile], f"{k}_s{d}")
            hoists.append(loop)
            for j, copy in enumerate(copies):
                copies[j], loop = tb.fuse_into(copy, loop, f"{k}_se{d}_{j}")
        vectorized += [thread_op, *copies]
    for handle in vectorized:
        tb.vectorize(handle)
    return hoists


def _block_order(g: Group, facts: list[LinalgOpFacts]) -> list[int]:
    """The order of a row kernel's ops in its block once fused (consumers first, each producer at its first
    use: the slices of a consumer's operands come before it in operand order). The anchor and the reductions
    tile over the threads last to first: an elementwise op fused into a thread forall that some op after it
    still reads is yielded by it (fuse_into_containing_op), and the later fusions of that op found no use to
    fuse (attention's scaled scores, read by the max, the exponentials and the check for rows of -inf)."""
    order = [g.anchor]

    def slice_position(m: int, consumer: int) -> int:
        """Where m goes for `consumer`: before it, and before its operands' ops after m's operand."""
        operands = facts[consumer].operand_producers
        after = operands[operands.index(m) + 1:]
        return min([order.index(p) for p in after if p in order and order.index(p) < order.index(consumer)],
                   default=order.index(consumer))

    for m in sorted(g.members, reverse=True):
        order.insert(min(slice_position(m, c) for c in order if m in facts[c].operand_producers), m)
    return order


def _mark(m: int | str) -> int:
    """The farm.row_op mark of a row kernel's op m, or of the fill of op m ("f<m>")."""
    return int(m[1:]) + 1_000_000 if isinstance(m, str) else m


@dataclass
class Partials:
    """What the first step of a block reduction makes (_emit_partials)."""

    fill: tb.Handle  # each thread's fill of its partial
    split: tb.Handle  # the partial reduction
    combine: tb.Handle  # what combines the partials
    threads: tb.Handle  # the threads' forall


def _emit_partials(p: str, target: tb.Handle, threads: list[int], reduction_dim: int) -> Partials:
    """The first step of a block reduction of `target`: `threads` (per loop; the reduction loop's entry
    non-zero) each reduce a contiguous run of it into a block-local tensor of partials, each thread
    initialising its own partial (a fill left in the block would race with the forall)."""
    any_op = tb.any_op()
    tiled = structured.TileReductionUsingForallOp(
        [any_op], any_op, any_op, any_op, target, reduction_dims=[reduction_dim], num_threads=threads,
        tile_sizes=[0] * len(threads), mapping=tb.attribute("[#gpu.thread<x>]"), loc=ir.Location.name(f"{p}_split"))
    fill, forall = tb.fuse_into(tiled.fill_op[0], tiled.forall_op, f"{p}_pft")
    return Partials(fill, tiled.split_op, tiled.combining_op, forall)


MERGE_THREADS = 32  # one warp merges a block reduction's partials, in two steps


def _emit_merge(k: str, combine: tb.Handle, partials: int, n_parallel: int,
                position: int) -> tuple[list[tb.Handle], tb.Handle]:
    """The merge of a block reduction's `partials` (the combining op `combine`, after the barrier that ends
    the partial forall): up to MERGE_THREADS threads each reduce a run of them into a second row of
    partials in shared memory, then one thread per output (the block has one) reduces those, after
    another barrier: two short serial chains instead of one of `partials`. Returns the handles to
    vectorize and the single-thread forall."""
    threads = largest_divisor_at_most(partials, MERGE_THREADS)
    one = [1] * n_parallel
    one.insert(position, 0)
    vectorized = []
    if threads > 1 and partials // threads > 1:
        # the combining op's loops: the outputs', then the partials' (its reduction), whatever `position`
        second = _emit_partials(f"{k}_m", combine, [0] * n_parallel + [threads], n_parallel)
        vectorized += [second.fill, second.split]
        combine = second.combine
    last, forall = tb.tile_forall(combine, forall_mapping("thread", n_parallel), num_threads=one, name=f"{k}_ct")
    return [*vectorized, last], forall


@dataclass
class Tiles:
    """What _emit_tiles makes: the anchor and its members at block level, and at thread level (where the
    schedule maps threads)."""

    block: tb.Handle
    block_members: list[tb.Handle]
    grid: tb.Handle  # the block forall, members fused
    thread: tb.Handle | None = None
    members: list[tb.Handle] = field(default_factory=list)


def _emit_tiles(kernel: int, k: str, anchor: tb.Handle, members: list[tb.Handle], s: OpSchedule,
                op: OpInfo) -> Tiles:
    """Tile `anchor` to a forall over blocks, then one over threads, fusing `members` (producer first,
    then fills) into both."""
    n_block = sum(1 for b in s.block_tile if b)
    n_thread = sum(1 for t in s.thread_tile if t)
    block, grid = tb.tile_forall(anchor, forall_mapping("block", n_block, bool(linear_grid(s, op))),
                                 tile_sizes=s.block_tile, name=f"{k}_b")
    block_members = []
    for j, m in enumerate(members):
        fused, grid = tb.fuse_into(m, grid, f"{k}_m{j}b")
        block_members.append(fused)
    tb.mark(grid, kernel_marks.KERNEL, kernel, name=f"{k}_id")
    tiles = Tiles(block, block_members, grid)
    if n_thread:
        # num_threads, not tile sizes: a partial block tile must still give a static thread forall
        tiles.thread, containing = tb.tile_forall(block, forall_mapping("thread", n_thread),
                                                  num_threads=threads_per_loop(s, op), name=f"{k}_t")
        for j, m in enumerate(block_members):
            fused, containing = tb.fuse_into(m, containing, f"{k}_m{j}t")
            tiles.members.append(fused)
    return tiles


def _emit_split_over_blocks(kernel: int, k: str, reduction: tb.Handle, split: int, schedule: OpSchedule,
                            partial: OpInfo, op: OpInfo) -> tb.Handle:
    """split_over_blocks: the forall of `split` chunks of the first K loop is the partial kernel's grid;
    its threads tile the outputs as `schedule` does on `partial` (partial_kernel_schedule's), each reducing
    its chunk in one vector. Returns, as _emit_split, the merge that reduces the partials (the split dim last)."""
    r = op.iterator_types.index("reduction")
    k_loops = len(op.loop_ranges) - r
    threads = threads_per_loop(schedule, partial)[:r]
    mapping = forall_mapping("thread", sum(1 for n in threads if n))
    any_op = tb.any_op()
    tiled = structured.TileReductionUsingForallOp(
        [any_op], any_op, any_op, any_op, reduction, reduction_dims=[r],
        num_threads=[0] * r + [split] + [0] * (k_loops - 1), mapping=tb.attribute("[#gpu.block<x>]"),
        loc=ir.Location.name(f"{k}_partial"))
    # the fill of each block's partials gets a thread forall of its own: fusion cannot reach through the
    # rank-reducing slice between it and the partial's forall (each thread fills the element it reduces
    # into, so no barrier is needed between the two)
    fill, grid = tb.fuse_into(tiled.fill_op[0], tiled.forall_op, f"{k}p_m0b")
    tb.mark(grid, kernel_marks.KERNEL, kernel, name=f"{k}p_id")
    tb.tile_forall(fill, mapping, num_threads=threads + [0], name=f"{k}p_fill_t")
    thread, _ = tb.tile_forall(tiled.split_op, mapping, num_threads=threads + [0] * k_loops, name=f"{k}p_t")
    tb.vectorize(thread)
    return tiled.combining_op


def _emit_split(kernel: int, k: str, reduction: tb.Handle, group: OpSchedule,
                op: OpInfo) -> tuple[tb.Handle, list[tb.Handle]]:
    """Split `reduction` into a partial reduction, tiled here as its own kernel, and a merge, which
    reduces the partials into the original result. Returns the merge and the loops to hoist."""
    r, split = op.iterator_types.index("reduction"), group.split_reduction
    # the partials dim goes where the reduction loop was among the output dims, so the merge op has the
    # loops of the op it replaces (with extent `split` for the reduction) and the group's tiles fit it
    position = op.iterator_types[:r].count("parallel")
    schedule, partial = partial_kernel_schedule(op, split, group)
    if split_over_blocks(op):
        return _emit_split_over_blocks(kernel, k, reduction, split, schedule, partial, op), []
    chunks = partial.family == "matmul"  # partial_kernel_schedule split it in chunks
    any_op = tb.any_op()
    parts = structured.SplitReductionOp(any_op, any_op, any_op, any_op, reduction, split_factor=split,
                                        insert_split_dimension=position, inner_parallel=None if chunks else True,
                                        loc=ir.Location.name(f"{k}_split"))
    tiles = _emit_tiles(kernel, f"{k}p", parts.split_linalg_op, [parts.fill_op], schedule, partial)
    if chunks:
        if not schedule.reduction_tile:  # a chunk of one K step
            sizes = None
        else:
            chunk_loop = r + 1
            sizes = [schedule.reduction_tile if d == chunk_loop else 0 for d in range(len(partial.loop_ranges))]
    else:
        # a thread's strided elements are read PARTIAL_LOADS at a time into a vector, so that many loads
        # are in flight instead of one load, add and store of the accumulator per element
        loads = largest_divisor_at_most(partial.loop_ranges[r], PARTIAL_LOADS)
        # one vector covers a thread's elements: no loop to tile
        sizes = None if loads == partial.loop_ranges[r] else [loads if d == r else 0
                                                              for d in range(len(partial.loop_ranges))]
    if sizes is None:
        tb.vectorize(tiles.members[0])
        tb.vectorize(tiles.thread)
        return parts.combining_linalg_op, []
    # each thread's partials stay in registers across the loop (one store at the end)
    thread, loop = tb.tile_for(tiles.thread, sizes, f"{k}p_r")
    tb.vectorize(tiles.members[0])
    tb.vectorize(thread)
    return parts.combining_linalg_op, [loop]
