"""The auxiliary pass pipeline: every step from model_linalg.mlir to PTX besides the schedule, which only
cleans up before it and lowers after it; the schedule's own steps (transform.mlir) are two of its steps.

pass_pipeline.txt holds one step per line (PassPipeline), so that a user can read, edit and replay it
(workers/compile/build.py runs them). Also the steps every schedule starts with (prepare), which the
analysis applies alone.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from numba_cuda_mlir._mlir.dialects import transform
from numba_cuda_mlir._mlir.dialects.transform import structured
from numba_cuda_mlir._mlir.dialects.transform import tensor as tensor_patterns

from workers.compile import transform_builder as tb
from workers.jsonrecord import JsonRecord

ir = tb.ir

ANY = "!transform.any_op"  # the handle type of PREPARE_SEQUENCES' text
MAIN_SEQUENCE = "__transform_main"
MATCH_TRANSPOSED_RHS, READ_UNTRANSPOSED = "__farm_matmul_of_transpose", "__farm_read_untransposed"
MATCH_FILLED_DEST, YIELD_MATCHED = "__farm_fill_of_an_insert", "__farm_yield_matched"
# the matchers (a linalg.matmul of 16-bit operands whose rhs a linalg.transpose makes; the linalg.fill an
# insert_slice writes into: a padded buffer) and the actions of prepare()'s foreach_matches; text, as the
# bindings have no classes for transform.match.structured's ops
PREPARE_SEQUENCES = f"""
transform.named_sequence @{MATCH_TRANSPOSED_RHS}(%op: {ANY} {{transform.readonly}}) -> {ANY} {{
  transform.match.operation_name %op ["linalg.matmul"] : {ANY}
  %rhs = transform.get_producer_of_operand %op[1] : ({ANY}) -> {ANY}
  transform.match.operation_name %rhs ["linalg.transpose"] : {ANY}
  %half = transform.match.structured failures(propagate) %op : ({ANY}) -> {ANY} {{
  ^bb0(%matmul: {ANY}):
    %b = transform.match.structured.input %matmul[1] : ({ANY}) -> !transform.any_value
    %bits = transform.match.structured.elemental_bitwidth %b : (!transform.any_value) -> !transform.param<i64>
    %sixteen = transform.param.constant 16 : i64 -> !transform.param<i64>
    transform.match.param.cmpi eq %bits, %sixteen : !transform.param<i64>
    transform.match.structured.yield %matmul : {ANY}
  }}
  transform.yield %half : {ANY}
}}
transform.named_sequence @{READ_UNTRANSPOSED}(%op: {ANY} {{transform.consumed}}) {{
  %transposed_rhs = transform.structured.transpose_matmul %op <rhs> : ({ANY}) -> {ANY}
  transform.yield
}}
transform.named_sequence @{MATCH_FILLED_DEST}(%op: {ANY} {{transform.readonly}}) -> {ANY} {{
  transform.match.operation_name %op ["tensor.insert_slice"] : {ANY}
  %dest = transform.get_producer_of_operand %op[1] : ({ANY}) -> {ANY}
  transform.match.operation_name %dest ["linalg.fill"] : {ANY}
  transform.yield %dest : {ANY}
}}
transform.named_sequence @{YIELD_MATCHED}(%op: {ANY} {{transform.readonly}}) -> {ANY} {{
  transform.yield %op : {ANY}
}}"""


def schedule_module() -> tb.TransformModule:
    """A transform module that holds the sequences prepare() applies (in the caller's MLIR context)."""
    module = tb.TransformModule()
    module.add_text(PREPARE_SEQUENCES)
    return module


def prepare(root: tb.Handle) -> tb.Handle:
    """The steps every schedule starts with; returns the function's handle.

    A matmul on 16-bit operands whose right operand is a transposed tensor (nn.Linear's weight) reads that
    tensor in its own layout instead, so no kernel transposes it (transpose_matmul makes the operand a
    transpose of the transpose, which canonicalization folds away); mma.sync takes B as (n, k) fragments,
    loaded by ldmatrix without .trans. A SIMT matmul keeps the transpose: its threads read B's (k, n) rows
    coalesced, W's (n, k) rows made the MLP 1.46x slower on the H200 (benchmarks/results/perf_targets_h200.md
    run 10). tensor.concat (torch.cat) becomes one insert_slice per piece, each then a copy kernel;
    tensor.pad a fill plus a linalg.copy into the padded buffer, so that the padding runs in a kernel instead
    of a memref.copy on the host; the fill of a padded buffer (a pad's, a transposed conv's dilated input's)
    runs over one loop of the whole buffer (`flatten_elementwise`), its threads storing 128-bit vectors (rows
    of 65 or 114 had scalar stores: SqueezeNet's 69 MB fill ran at 54 GB/s), generalized so that
    canonicalization does not fold the reshape back into a fill of the padded shape (FoldFillWithTensorReshape);
    unit dims of generic ops are folded away."""
    funcs = tb.match(root, ["func.func"], name="funcs")
    symbol = lambda name: ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(name)])  # noqa: E731
    func = transform.ForeachMatchOp(tb.any_op(), [], funcs, [], symbol(MATCH_TRANSPOSED_RHS),
                                    symbol(READ_UNTRANSPOSED), loc=ir.Location.name("func")).updated
    tb.apply_patterns(func, tensor_patterns.ApplyDecomposeTensorConcatPatternsOp)
    pads = tb.match(func, ["tensor.pad"], name="pads")
    structured.RewriteInDestinationPassingStyleOp(tb.any_op(), pads, loc=ir.Location.name("pads_dps"))
    func, filled = transform.ForeachMatchOp(tb.any_op(), [tb.any_op()], func, [], symbol(MATCH_FILLED_DEST),
                                            symbol(YIELD_MATCHED), flatten_results=True,
                                            loc=ir.Location.name("padded")).results
    fills = transform.MergeHandlesOp([filled], deduplicate=True, loc=ir.Location.name("pad_fills")).result
    flat_fills = structured.FlattenElementwiseLinalgOp(tb.any_op(), fills, loc=ir.Location.name("pad_fills_1d"))
    tb.generalize(flat_fills.result, "pad_fills_generic")
    inserts = tb.match(func, ["tensor.insert_slice"], name="inserts")
    structured.InsertSliceToCopyOp(tb.any_op(), inserts, loc=ir.Location.name("pad_copies"))
    tb.canonicalize(func)
    return func


# subviews folded into the accesses: the shared tiles are then padded (farm-pad-tensor-core-tiles)
TENSOR_CORE_PASSES = "gpu.func(convert-vector-to-gpu{use-nvgpu=true},fold-memref-alias-ops,canonicalize)"
TRANSFORM_STEP = "transform @"  # a step that applies a named sequence of transform.mlir
PIPELINE_COPIES_SEQUENCE = "__farm_pipeline_copies"  # after the tensor-core conversion (tensor_core.py)
KERNEL_ARITHMETIC_SEQUENCE = "__farm_kernel_arithmetic"  # just before the lowering (emission.py)
HOST_CHECK = "farm-host-check"  # the host code is final: it must only allocate, view and launch (host.py)
PIPELINE_HEADER = """\
# pass_pipeline.txt: the steps that turn model_linalg.mlir and transform.mlir into kernels.ptx, in order.
# A step is an upstream MLIR pass pipeline, a project pass (farm-*: workers/compile/passes, listed in the
# README), or `transform @SEQUENCE` (a named sequence of transform.mlir). `orchestrator replay JOB vN`
# runs them again and compares the PTX.
"""


@dataclass
class PassPipeline(JsonRecord):
    """The auxiliary pipeline of one version: every step from model_linalg.mlir to PTX, in order."""

    steps: list[str]

    def to_text(self) -> str:
        return PIPELINE_HEADER + "".join(f"{step}\n" for step in self.steps)

    @classmethod
    def from_text(cls, text: str) -> "PassPipeline":
        steps = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if not any(step == f"{TRANSFORM_STEP}{MAIN_SEQUENCE}" for step in steps):
            raise ValueError(f"pass_pipeline.txt has no step `{TRANSFORM_STEP}{MAIN_SEQUENCE}` (the schedule)")
        return cls(steps)

    def before_schedule(self) -> list[str]:
        """The steps that prepare the payload the schedule addresses (analysis.analyze runs them too)."""
        return self.steps[:self.steps.index(f"{TRANSFORM_STEP}{MAIN_SEQUENCE}")]


# Before the schedule: integer powers with a constant exponent (x ** 3 of a tanh-GELU) become
# multiplications (libdevice's __nv_powif takes an i32 exponent, torch-mlir's fpowi an i64: called with a
# .b64 argument it computed garbage on the H200), any other one powf; unit dims are dropped (a keepdim row
# reduction writes tensor<Nx1> through the map (d0, d1) -> (d0, 0): structured.split_reduction misreads a
# constant in an output map and builds invalid IR). No CSE after the folding: it would merge the fills of
# several reductions into one, which the row kernels' schedules fuse once per reduction.
PRE_SCHEDULE_LOWERING = "func.func(math-expand-ops{ops=fpowi}),linalg-fold-unit-extent-dims,canonicalize"


def pre_schedule_steps(fuse_elementwise: bool = True) -> list[str]:
    cleanup = "canonicalize,linalg-fuse-elementwise-ops,cse" if fuse_elementwise else "canonicalize,cse"
    return ["farm-vector-products-as-generics", f"builtin.module({cleanup},{PRE_SCHEDULE_LOWERING})",
            "farm-extracted-scalars-as-operands", "farm-narrow-matmul-operands",
            "farm-scales-after-contractions", "farm-contraction-operands-apart", "farm-reduce-in-stages",
            "farm-collapse-reduction-loops",
            "farm-collapse-contraction-loops", "farm-unit-dim-transposes-as-reshapes", "farm-scalar-unit-loop", "farm-copy-returned-views", "farm-splat-constants-as-fills",
            "farm-separate-fill-inits", "farm-full-rank-inserts"]


def pipeline_for(chip: str, fuse_elementwise: bool = True, pipelined_copies: bool = False) -> PassPipeline:
    """The steps of a version: the schedule's transform.mlir (its copy pipelining, where it has one, and its
    kernels' arithmetic marks), the project's passes, and MLIR's lowering to PTX for `chip`."""
    return PassPipeline([
        *pre_schedule_steps(fuse_elementwise),
        f"{TRANSFORM_STEP}{MAIN_SEQUENCE}",
        "farm-wgmma-k-loops",
        "builtin.module(canonicalize,cse,func.func(buffer-loop-hoisting),gpu-launch-sink-index-computations)",
        "farm-views-into-kernels",
        "farm-outline-kernels",
        "builtin.module(canonicalize,gpu.module(gpu.func(convert-linalg-to-loops,canonicalize)))",
        "farm-tensor-core-conversion",
        *([f"{TRANSFORM_STEP}{PIPELINE_COPIES_SEQUENCE}", "farm-overlap-tiles-dead-in-k-loops",
           "farm-trim-k-loop-barriers"] if pipelined_copies else []),
        "farm-pad-tensor-core-tiles",
        "farm-large-shared-to-dynamic",
        "farm-sync-after-block-loops",
        "farm-reuse-reads",
        HOST_CHECK,
        "farm-merge-kernel-modules",
        "farm-merge-in-a-warp",
        "farm-interleave-thread-columns",
        "farm-workgroup-allocs-to-shared",
        "farm-scratch-to-stack",
        "farm-align-kernel-pointers",
        "farm-unaliased-kernel-pointers",
        "farm-hoist-kernel-accumulators",
        "farm-align-global-vector-accesses",
        "farm-tensor-maps-as-pointers",
        "farm-bool-memory-as-bytes",
        f"{TRANSFORM_STEP}{KERNEL_ARITHMETIC_SEQUENCE}",
        lowering_pipeline(chip),
    ])


def libdevice_path() -> str | None:
    """CUDA's libdevice, which math ops (tanh, exp, sqrt...) lower to inside kernels."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_ROOT"), "/usr/local/cuda"]
    ptxas = shutil.which("ptxas")
    if ptxas:
        roots.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(ptxas))))
    for root in filter(None, roots):
        candidate = os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc")
        if os.path.exists(candidate):
            return candidate
    return None


def lowering_pipeline(chip: str) -> str:
    """MLIR's gpu-lower-to-nvvm-pipeline spelled out, to link libdevice and use the bare-pointer ABI
    (one pointer per memref kernel argument); n-D vector transfers left to convert-vector-to-scf are
    fully unrolled: its default, a loop over a stack copy of the vector, put a thread's tile in local
    memory."""
    libdevice = libdevice_path()
    target = f"chip={chip} O=3" + (f" l={libdevice}" if libdevice else "")
    return ("builtin.module(convert-nvgpu-to-nvvm,convert-vector-to-scf{full-unroll=true},convert-scf-to-cf,convert-nvvm-to-llvm,"
            "convert-func-to-llvm,expand-strided-metadata,"
            f"nvvm-attach-target{{{target}}},"
            "lower-affine,convert-arith-to-llvm,convert-index-to-llvm,canonicalize,cse,"
            "gpu.module(convert-vector-to-llvm,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true},canonicalize,cse,"
            "reconcile-unrealized-casts),"
            "gpu-to-llvm{use-bare-pointers-for-kernels=true},gpu-module-to-binary{format=isa},"
            "convert-math-to-llvm,canonicalize,cse,reconcile-unrealized-casts)")

