"""Records exchanged by the frontend, compile and measure stages (and read by rules and orchestrator).

They are the whole interface between stages: each is a dataclass serialized as JSON, so a task
message, a file in the job folder and a test fixture all carry the same thing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from workers.jsonrecord import JsonRecord

# Operator families the schedules and the advisor's routes are keyed on.
OP_FAMILIES = ("matmul", "conv", "reduction", "elementwise", "pooling", "fill", "copy")

# Precision modes and their correctness tolerances (atol, rtol), stated in every report.
TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": (1e-4, 1e-4),
    "tf32": (5e-3, 5e-3),
    "f16": (1e-2, 1e-2),
    "bf16": (3e-2, 3e-2),
}

# Bytes per element of the MLIR element types the stages meet.
ELEMENT_BYTES = {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2, "i8": 1, "i1": 1}
VECTOR_BYTES = 16  # one ld.global.v4.b32 / st.global.v4.b32


def interleave_lanes(run: int, vector: int) -> int:
    """Elements per access where a thread's run of `run` columns is interleaved across its block: the largest
    power of two that divides the run, up to `vector` (one 128-bit access), so that every access stays
    aligned in a row of any length; 1 for an odd run (scalar accesses, neighbouring across a warp)."""
    return math.gcd(run, vector)


# Register tiling that measured 15x faster than scalar per-thread loops for a 1024^3 f32 matmul on
# the H200 (benchmarks/results/gpu_smoke_h200.md): K tiled by 8, the per-thread tile vectorized. v0 of
# matmul-like kernels starts there, and the advisor's reduction_tiling proposes it.
V0_REDUCTION_TILE = 8

WARP_SIZE = 32
WARPGROUP_THREADS = 128  # four warps issue one wgmma together (OpSchedule.tensor_core "wgmma")
WGMMA_ROW_BYTES = 128  # a wgmma kernel's staged rows: 128-byte swizzled, as wgmma reads them


def wgmma_k_step(dtype: str) -> int:
    """A wgmma kernel's K step for operands of `dtype`: the elements of one staged row."""
    return WGMMA_ROW_BYTES // ELEMENT_BYTES[dtype]


# ---------------------------------------------------------------------------------------------
# Frontend: what the model is made of.


@dataclass
class OpInfo(JsonRecord):
    """One linalg op of the model as the schedule sees it (after the pre-schedule pipeline)."""

    index: int  # position among the function's linalg ops, in payload order
    name: str  # e.g. "linalg.matmul", "linalg.generic"
    family: str  # one of OP_FAMILIES
    loop_ranges: list[int]  # static trip count per loop dimension
    iterator_types: list[str]  # "parallel" / "reduction" per loop dimension
    dtype: str  # element type of the first result, e.g. "f32"
    flops: int = 0  # rough arithmetic count, for reports
    # per loop, the extents a tile of it must divide or be a multiple of (img2col_op: the gather takes
    # the loop's index apart by them); empty: tiles only divide the loop
    tile_alignments: list[list[int]] = field(default_factory=list)
    dilations: list[int] = field(default_factory=list)  # a named conv's or pooling's dilations; empty elsewhere
    strides: list[int] = field(default_factory=list)  # a named conv's or pooling's strides; empty elsewhere
    # per dim of the (first) result, the loop that indexes it (None: an expression); empty where not known
    output_loops: list[int | None] = field(default_factory=list)


@dataclass
class ModelInfo(JsonRecord):
    """Result of lowering one model file to linalg-on-tensors."""

    name: str
    model_path: str
    ops: list[OpInfo]
    input_shapes: list[list[int]]
    input_dtypes: list[str]
    weight_names: list[str]  # state_dict names lifted to function arguments, in argument order
    output_shapes: list[list[int]]
    export_seconds: float
    seed: int = 0


# ---------------------------------------------------------------------------------------------
# Compile: schedule parameters in, PTX and a launch config out.


@dataclass
class OpSchedule(JsonRecord):
    """How one anchor op is mapped to the GPU. The advisor edits these fields, one at a time."""

    op_index: int
    family: str
    block_tile: list[int]  # tile size per loop dim at block level (0 = not tiled)
    thread_tile: list[int]  # tile size per loop dim inside a block, one tile per thread (0 = whole)
    reduction_tile: int = 0  # tile the reduction loops by this size inside a thread (0 = no tiling)
    vectorize: bool = False  # structured.vectorize the per-thread work
    promote_shared: bool = False  # structured.promote the reduction-tile operands to shared memory
    tensor_core: str = "none"  # "none" | "mma_sync"
    fuse_producers: bool = True  # fuse elementwise/fill producers into this op's forall
    # split the kernel's reduction (one loop of extent K) into this many partial reductions per output:
    # a first kernel gives each partial (K/split elements) its own thread, the kernel itself then merges
    # the partials (0 = one thread reduces all K elements of an output)
    split_reduction: int = 0
    # reduce each output with this many threads of one block (tile_reduction_using_forall): their
    # partials in shared memory, merged by one thread per output in the same kernel; one output per
    # block (block_tile 1 on the parallel loops, thread_tile all 0); 0 = off
    block_reduction: int = 0
    # lower a 2-D convolution (linalg.conv_2d_nchw_fchw / nhwc_hwcf / nhwc_fhwc) through
    # structured.convert_conv2d_to_img2col: the tiles then address the matmul-like op it becomes, loops
    # (batch, out channels, output pixels, reduction) for nchw_fchw and (batch, pixels, out channels,
    # reduction) for nhwc; the img2col gather is fused into that kernel's reduction loop (never
    # materialized)
    img2col: bool = False
    # one kernel for a row pipeline (softmax, layernorm): this elementwise op over [rows, columns] and
    # every op feeding it (row reductions over the columns, elementwise ops), a block per row of this
    # many threads; each reduction over the block's threads as in block_reduction, the elementwise ops
    # computed again where they are read (never stored); block_tile [1, 0], thread_tile [0, 0]; 0 = off
    row_kernel: int = 0
    # a tensor-core kernel's staged A and B tiles (promote_shared) in this many shared-memory buffers
    # each (one more with copies_ahead), filled that many K steps ahead (mma.sync: by cp.async,
    # nvgpu.device_async_copy; wgmma: by TMA): while the warps compute one step, the copies of the next
    # depth-1 are in flight (nvgpu.pipeline_shared_memory_copies); 0 or 1: one buffer, copied synchronously
    # every K step
    pipeline_depth: int = 0
    # a pipelined kernel's staged tiles get one buffer more than pipeline_depth: step i + depth's copies
    # go into the buffer the warps finished at step i - 1, so they are issued before step i's mma, and
    # the K loop keeps one barrier per step instead of two (k_loops.trim_k_loop_barriers)
    copies_ahead: bool = False
    # ptxas fits this many blocks of the kernel on an SM (.minnctapersm): fewer registers per thread,
    # spilling if it must; 0 = ptxas's choice
    min_blocks_per_sm: int = 0
    # a block reduction's (or row kernel's) merge in warp shuffles (gpu.shuffle xor): the lanes combine
    # their partials in groups before storing them, and the warp that merges those combines its 32
    # values itself instead of writing them to shared memory for one thread after another barrier
    warp_merge: bool = False
    # a row kernel's (or block reduction's) threads read and write their columns interleaved: thread t's
    # j-th 128-bit vector at column (j threads + t) x the vector's width instead of in one run of its own,
    # so that a warp-wide access covers neighbouring columns (interleave_columns.interleave_thread_columns); only where
    # each thread reads one run of whole vectors, more than one (schedule.interleaved_columns). On a staged SIMT
    # matmul, a thread's columns as 128-bit vectors interleaved across the block (StagedMatmul.column_pieces)
    interleave_columns: bool = False


def reduction_extents(op: OpInfo) -> list[int]:
    """The extents of an op's reduction loops, in loop order."""
    return [r for r, it in zip(op.loop_ranges, op.iterator_types) if it == "reduction"]


def default_split_factor(extent: int) -> int:
    """The split_reduction of a reduction loop: the largest power of two that divides its extent and is
    at most its square root, so that the partial loops (extent / split) and the merge loop (split) are
    both short."""
    split = 1
    while extent % (split * 2) == 0 and (split * 2) ** 2 <= extent:
        split *= 2
    return split


IMG2COL_CONVS = ("linalg.conv_2d_nchw_fchw", "linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nhwc_fhwc")


def img2col_op(op: OpInfo) -> OpInfo:
    """The matmul-like op that structured.convert_conv2d_to_img2col makes of a 2-D conv (the loops an
    img2col schedule's tiles address): (n, f, oh*ow, c*kh*kw) for nchw_fchw, (n, oh*ow, f, kh*kw*c)
    for the nhwc forms. ValueError for any other op."""
    alignments = img2col_alignments(op)
    r = op.loop_ranges
    if op.name == "linalg.conv_2d_nchw_fchw":  # (n, f, oh, ow, c, kh, kw)
        ranges = [r[0], r[1], r[2] * r[3], r[4] * r[5] * r[6]]
    else:  # (n, oh, ow, f, kh, kw, c)
        ranges = [r[0], r[1] * r[2], r[3], r[4] * r[5] * r[6]]
    return OpInfo(index=op.index, name="linalg.generic", family="matmul", loop_ranges=ranges,
                  iterator_types=["parallel", "parallel", "parallel", "reduction"], dtype=op.dtype, flops=op.flops,
                  tile_alignments=[alignments.get(d, []) for d in range(len(ranges))])


def img2col_of_nchw(op: OpInfo) -> bool:
    """Whether `op`, an img2col_op, is an NCHW conv's (n, f, pixels, k): its pixel loop, which the gather takes
    apart by the output width, is loop 2 (an NHWC conv's is loop 1)."""
    return len(op.tile_alignments) == 4 and bool(op.tile_alignments[2])


def img2col_applies(op: OpInfo) -> bool:
    """Whether structured.convert_conv2d_to_img2col takes the op: a 2-D conv of IMG2COL_CONVS, undilated."""
    return op.name in IMG2COL_CONVS and len(op.loop_ranges) == 7 and all(d == 1 for d in op.dilations)


def img2col_alignments(op: OpInfo) -> dict[int, list[int]]:
    """Per loop of img2col_op(op), the extents that its flattened index is taken apart by (floordiv and
    mod in the gather): the output pixels by the output width, the reduction by kh*kw and kw (nchw: k =
    (c*kh + i)*kw + j) or kw*c and c (nhwc: k = (i*kw + j)*c + c'). Tiling maps such an index right only
    where each tile divides, or is a multiple of, every one of these extents: an unaligned tile splits
    its slice of the input at the wrong place (wrong results on the GPU, nothing wrong in the IR)."""
    if not img2col_applies(op):
        raise ValueError(f"img2col applies to undilated {', '.join(IMG2COL_CONVS)}, not {op.name}"
                         + (f" with dilations {op.dilations}" if op.name in IMG2COL_CONVS else ""))
    r = op.loop_ranges
    if op.name == "linalg.conv_2d_nchw_fchw":  # (n, f, oh, ow, c, kh, kw)
        return {2: [r[3]], 3: [r[5] * r[6], r[6]]}
    return {1: [r[2]], 3: [r[5] * r[6], r[6]]}  # (n, oh, ow, f, kh, kw, c)


def img2col_aligned(tile: int, extents: list[int]) -> bool:
    return all(tile % e == 0 or e % tile == 0 for e in extents)


def leaves_partial_tiles(schedule: OpSchedule, op: OpInfo, k_extent: int = 0) -> bool:
    """Whether a block tile of `op`'s loops, or the K step over a K loop of `k_extent`, does not divide it."""
    return any(b and r % b for b, r in zip(schedule.block_tile, op.loop_ranges)) \
        or bool(k_extent and schedule.reduction_tile and k_extent % schedule.reduction_tile)


def tile_error(block: list[int], thread: list[int], op: OpInfo, partial: bool = False) -> str | None:
    """Why one kernel's per-loop block and thread tiles cannot be compiled, or None. The compile stage's
    validation and the advisor's edits (rules/routing.py) share it. `partial`: the kernel takes a last block
    that a loop's extent fills only in part (validation.masked_tiles), its thread tiles still dividing the block's."""
    for d, extents in enumerate(op.tile_alignments):  # an img2col gather's index arithmetic
        for tile in filter(None, (block[d], thread[d])):
            if not img2col_aligned(tile, extents):
                return (f"img2col: the tile {tile} of loop {d} must divide or be a multiple of each of {extents}: "
                        "the gather takes that loop's index apart by them, and an unaligned tile reads the wrong "
                        "input elements")
    for d, (b, t, extent) in enumerate(zip(block, thread, op.loop_ranges)):
        if b < 0 or t < 0:
            return f"loop {d} has a negative tile size"
        # partial tiles would give per-thread scratch a dynamic size (device malloc in the kernel), unless
        # the kernel vectorizes them masked
        if (b and extent % b and not partial) or (t and (b or extent) % t):
            return f"loop {d} of extent {extent} is not divided evenly by block tile {b} and thread tile {t}"
    return None


@dataclass
class ScheduleParams(JsonRecord):
    """Everything the compile stage needs to emit transform.mlir and pass_pipeline.txt."""

    ops: list[OpSchedule]
    fuse_elementwise: bool = True  # run linalg-fuse-elementwise-ops before the schedule
    chip: str = "sm_90a"
    precision: str = "fp32"


@dataclass
class ScheduleEdit(JsonRecord):
    """One change to ScheduleParams: `field` of op `op_index` (or of the params if -1) := value."""

    op_index: int
    field: str
    value: object


@dataclass
class TensorMap(JsonRecord):
    """A TMA descriptor (CUtensorMap) of a buffer, for kernels that copy its tiles by cp.async.bulk.tensor:
    the buffer's view (shape, strides and offset in elements, outermost dimension first) and the box one
    copy moves, its rows swizzled in `swizzle` bytes (0: not swizzled)."""

    buffer: str
    dtype: str
    shape: list[int]
    strides: list[int]
    offset: int
    box: list[int]
    swizzle: int
    l2_promotion: int = 0  # bytes of L2 promotion (0: none)


TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap): what a tensor map's buffer holds


@dataclass
class BufferSpec(JsonRecord):
    """A device buffer the launches use."""

    name: str
    role: str  # "input" | "weight" | "constant" | "temporary" | "output" | "tensor_map"
    dtype: str
    shape: list[int]
    source: str  # "input:<i>", "weight:<state_dict name>", "constant", "alloc", "tensor_map"
    values: list[float] | None = None  # only for small "constant" buffers
    tensor_map: TensorMap | None = None  # only for "tensor_map" buffers: what the measure worker encodes
    storage: str | None = None  # a temporary in the memory of this one, dead before it is first used (memory_plan)

    def size_bytes(self) -> int:
        return math.prod(self.shape) * ELEMENT_BYTES[self.dtype]


@dataclass
class KernelArg(JsonRecord):
    """One PTX parameter: a buffer's base pointer (bare-pointer ABI: the kernel applies the static
    offset and strides of the view it was compiled for) or a scalar."""

    kind: str  # "buffer" | "scalar" | "loop_index" (the current index of host loop `loop`, as an i64)
    dtype: str
    buffer: str | None = None
    value: float | int | None = None
    loop: int | None = None  # for "loop_index": its position in LaunchConfig.loops


# the most shared memory a kernel gets as static .shared arrays; past it, dynamic shared memory that the
# kernel must be allowed before its launch (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES)
STATIC_SHARED_BYTES = 48 * 1024


@dataclass
class KernelLaunch(JsonRecord):
    kernel: str  # PTX entry name
    grid: list[int]
    block: list[int]
    shared_bytes: int  # dynamic shared memory
    args: list[KernelArg]


@dataclass
class HostLoop(JsonRecord):
    """A loop the host runs around consecutive launches (a recurrent layer's time steps): launches[first:end]
    run once per index start, start + step, ... (trip_count indices), in order."""

    first: int  # position in LaunchConfig.launches of the loop's first launch
    end: int  # one past its last launch
    start: int
    step: int
    trip_count: int

    def indices(self) -> range:
        return range(self.start, self.start + self.step * self.trip_count, self.step)


@dataclass
class OutputSpec(JsonRecord):
    """A model output: a (contiguous) view of a buffer with the model's shape."""

    buffer: str
    shape: list[int]
    dtype: str


@dataclass
class LaunchConfig(JsonRecord):
    """config.json: all a GPU worker needs to run the model from kernels.ptx alone."""

    model_path: str  # relative paths are relative to the job folder (the frontend copies the model there)
    chip: str
    precision: str
    atol: float
    rtol: float
    seed: int
    buffers: list[BufferSpec]
    launches: list[KernelLaunch]
    outputs: list[OutputSpec]
    ptx_file: str = "kernels.ptx"
    loops: list[HostLoop] = field(default_factory=list)  # host loops, in launch order, none nested


@dataclass
class CompileResult(JsonRecord):
    version: int
    ok: bool
    stage: str  # last stage reached: "schedule" | "transform" | "host-check" | "lowering" | "ptxas" | "done"
    error: str = ""
    compile_seconds: float = 0.0
    kernel_count: int = 0
    ptx_bytes: int = 0
    kernel_ops: list[int] = field(default_factory=list)  # anchor op index of each launch, in launch order
    kernel_families: list[str] = field(default_factory=list)  # op family of each launch
    # sha256 of kernels.ptx and the launches: versions with the same digest run the same GPU code
    kernels_digest: str = ""
    # what the compile stage left as it was, and why: an optimization a kernel does not have the form for
    notes: list[str] = field(default_factory=list)
    # the anchor op of the kernel a failure is attributed to (a diagnostic at one of its ops), else None
    failing_op: int | None = None


# ---------------------------------------------------------------------------------------------
# Measure: correctness, timing and NCU metrics of one iteration.


@dataclass
class Timing(JsonRecord):
    median_us: float
    p20_us: float
    p80_us: float
    runs: int


@dataclass
class KernelMetrics(JsonRecord):
    """NCU metrics of one kernel (percentages are 0-100; None where NCU gave nothing)."""

    kernel: str
    duration_us: float
    sm_throughput_pct: float
    memory_throughput_pct: float  # busiest of DRAM/L2/L1
    dram_throughput_pct: float
    achieved_occupancy_pct: float
    theoretical_occupancy_pct: float
    registers_per_thread: int
    spill_bytes: int  # bytes stored to local memory: spills, and per-thread arrays not kept in registers
    grid_size: int
    block_size: int
    waves_per_sm: float
    issue_slot_util_pct: float | None = None
    tensor_pipe_util_pct: float | None = None
    # stall_*: NCU's average number of warps stalled for that reason per issue-active cycle
    stall_long_scoreboard: float | None = None
    stall_short_scoreboard: float | None = None
    stall_barrier: float | None = None
    stall_mio_throttle: float | None = None
    stall_no_instruction: float | None = None
    l1_hit_rate_pct: float | None = None
    l2_hit_rate_pct: float | None = None
    sectors_per_request: float | None = None
    shared_bank_conflicts: int | None = None
    runs: int = 1  # times the launch runs in one forward (a host loop's trip count; NCU profiles it once)

    def time_us(self) -> float:
        """The kernel's time in one forward: its profiled duration times its runs."""
        return self.duration_us * self.runs


@dataclass
class MeasureResult(JsonRecord):
    version: int
    # "ok" | "wrong_result" | "launch_error" | "illegal_address" | "timeout" | "pathological_launch"
    # | "skipped" (no GPU / not compiled) | "error"
    status: str
    error: str = ""
    device: str = "n/a"
    correct: bool = False
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    library_abs_err: float | None = None  # PyTorch's own max error in the model's precision (vs float64)
    atol: float | None = None
    rtol: float | None = None
    draws: int = 0  # input draws the outputs were checked on
    time: Timing | None = None
    eager: Timing | None = None
    compiled: Timing | None = None  # torch.compile of the same model
    kernels: list[KernelMetrics] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of the GPU child's steps
    # per kernel, the median time of all its launches run alone (L2 flushed first): where the time goes,
    # without a profiler
    kernel_us: dict[str, float] = field(default_factory=dict)
    launched_as: str = ""  # how `time` ran the launches: one CUDA graph (from 2026-12-07 on), else from the host


def warp_can_merge(schedule: OpSchedule) -> bool:
    """Whether warp_merge can take the schedule's block reduction (block_reduction or row_kernel threads
    per output): its merge has a warp's step, one lane per run of partials (32 divides the threads, which
    are at least two warps), before the last thread's."""
    threads = schedule.block_reduction or schedule.row_kernel
    return threads % WARP_SIZE == 0 and threads >= 2 * WARP_SIZE
