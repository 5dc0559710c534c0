"""Schedule parameters: one edit changes one thing, and each knob reaches the generated code."""
from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import lower_zoo

from workers.compile import ScheduleError, apply_edit, compile_iteration, initial_params
from workers.compile.pipeline import PassPipeline
from workers.compile.schedule.templates import (STAGED_SIMT_STAGES, chunk_k_step, default_op_schedule,
                                                split_k_to_fill_the_grid)
from workers.compile.schedule.tiles import block_dims, threads_per_loop
from workers.records import OpInfo, OpSchedule, ScheduleEdit



@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    return lower_zoo(tmp_path_factory, "matmul_square", "elementwise_chain", "mlp")


def test_apply_edit_changes_exactly_one_field(jobs):
    params = initial_params(str(jobs / "matmul_square"))
    edited = apply_edit(params, ScheduleEdit(op_index=params.ops[0].op_index, field="thread_tile", value=[8, 4, 0]))
    assert edited.ops[0].thread_tile == [8, 4, 0] and params.ops[0].thread_tile == [4, 4, 0]
    assert {k: v for k, v in edited.ops[0].to_dict().items() if k != "thread_tile"} == \
        {k: v for k, v in params.ops[0].to_dict().items() if k != "thread_tile"}
    with pytest.raises(ScheduleError):
        apply_edit(params, ScheduleEdit(op_index=params.ops[0].op_index, field="no_such_knob", value=1))
    with pytest.raises(ScheduleError):
        apply_edit(params, ScheduleEdit(op_index=999, field="vectorize", value=True))


def test_the_kernels_digest_tells_the_same_gpu_code_from_another(jobs):
    """Two versions of the same schedule have one digest (the loop then measures only the first); a
    different thread tile gives another."""
    job = str(jobs / "matmul_square")
    params = initial_params(job)
    op = params.ops[0].op_index
    digests = [compile_iteration(job, v, p).kernels_digest
               for v, p in enumerate([params, params, apply_edit(params, ScheduleEdit(op, "thread_tile", [8, 4, 0]))],
                                     start=10)]
    assert len(digests[0]) == 64 and digests[0] == digests[1] != digests[2]


def test_vectorize_emits_vector_code(jobs):
    job = str(jobs / "elementwise_chain")
    params = initial_params(job)
    op = params.ops[0].op_index
    params = apply_edit(params, ScheduleEdit(op, "thread_tile", [1, 4]))
    params = apply_edit(params, ScheduleEdit(op, "vectorize", True))
    result = compile_iteration(job, 1, params)
    assert result.ok, result.error
    assert "structured.vectorize" in (jobs / "elementwise_chain" / "v1" / "transform.mlir").read_text()
    assert "vector.load" in (jobs / "elementwise_chain" / "v1" / "gpu.mlir").read_text()


def test_a_transform_op_that_cannot_be_built_fails_the_version_with_its_reason(jobs, monkeypatch):
    """The bindings refusing one Transform op (here every vectorize step, as for an attribute of the wrong
    type) is a failed version at the schedule stage, not a crash of the compile task."""
    from workers.compile.schedule import emission

    def refuse(*_, **__):
        raise TypeError("an attribute of the wrong type")

    monkeypatch.setattr(emission.tb, "vectorize", refuse)
    job = str(jobs / "elementwise_chain")
    result = compile_iteration(job, 8, initial_params(job))
    assert (result.ok, result.stage) == (False, "schedule")
    assert "cannot be built from these params: an attribute of the wrong type" in result.error


def test_tiles_that_leave_a_partial_block_or_k_step_are_refused_unless_masked(jobs):
    """A K step that does not divide K (512 % 24) in a kernel that cannot mask it (the MLP's ReLU with its
    matmul fused), or a partial block in an unvectorized matmul, is a schedule error with its reason, not a
    failed vectorization in the transform stage; the matmul alone in its kernel, unstaged, masks its last K step."""
    mlp = str(jobs / "mlp")
    fused = compile_iteration(mlp, 5, apply_edit(initial_params(mlp), ScheduleEdit(3, "reduction_tile", 24)))
    assert (fused.ok, fused.stage) == (False, "schedule") and "must divide the reduction loop" in fused.error
    job = str(jobs / "matmul_square")
    synchronous = apply_edit(initial_params(job), ScheduleEdit(1, "pipeline_depth", 0))  # cp.async: whole tiles
    unvectorized = apply_edit(synchronous, ScheduleEdit(1, "vectorize", False))
    partial = compile_iteration(job, 6, apply_edit(unvectorized, ScheduleEdit(1, "block_tile", [48, 64, 0])))
    assert (partial.ok, partial.stage) == (False, "schedule") and "not divided evenly" in partial.error
    unstaged = apply_edit(synchronous, ScheduleEdit(1, "promote_shared", False))
    masked = compile_iteration(job, 7, apply_edit(unstaged, ScheduleEdit(1, "reduction_tile", 24)))
    assert masked.ok, masked.error
    assert "selp.f32" in (jobs / "matmul_square" / "v7" / "kernels.ptx").read_text()


def test_reduction_tile_and_fp_contraction_reach_the_ptx(jobs):
    job = str(jobs / "matmul_square")
    unstaged = apply_edit(initial_params(job), ScheduleEdit(1, "promote_shared", False))
    result = compile_iteration(job, 2, apply_edit(unstaged, ScheduleEdit(1, "reduction_tile", 8)))
    assert result.ok, result.error
    v2 = jobs / "matmul_square" / "v2"
    assert "tile_using_for %g1_t tile_sizes [0, 0, 8]" in (v2 / "transform.mlir").read_text()
    assert "transform @__farm_kernel_arithmetic" in PassPipeline.from_text((v2 / "pass_pipeline.txt").read_text()).steps
    assert "fma.rn.f32" in (v2 / "kernels.ptx").read_text()


@pytest.mark.parametrize("model, field, value, reason", [
    ("matmul_square", "tensor_core", "mma_sync", 'f32 matmuls run on tensor cores as TF32, which needs precision "tf32"'),
    ("matmul_square", "thread_tile", [1, 1, 0], "exceed 1024"),
    ("elementwise_chain", "promote_shared", True, "promote_shared stages a matmul's operands"),
])
def test_unsupported_or_invalid_knobs_fail_at_the_schedule_stage(jobs, model, field, value, reason):
    job = str(jobs / model)
    shutil.rmtree(jobs / model / "v3", ignore_errors=True)
    params = initial_params(job)
    result = compile_iteration(job, 3, apply_edit(params, ScheduleEdit(params.ops[0].op_index, field, value)))
    assert not result.ok and result.stage == "schedule" and reason in result.error


def _ptx_counts(vdir) -> dict[str, int]:
    text = (vdir / "kernels.ptx").read_text().replace("ld.global.nc.", "ld.global.")  # read-only or not
    return {i: len(re.findall(rf"\b{re.escape(i)}\b", text))
            for i in ("ld.global.v4.b32", "ld.shared.v4.b32", "st.shared.v4.b32", "ld.local", "st.local")}


def test_promote_shared_stages_a_simt_matmuls_operand_tiles_in_shared_memory(jobs):
    """The 1024^2 f32 matmul's block copies each K step's A and B tiles into shared memory with 128-bit
    loads, its threads read their register tiles from there, and each thread's accumulators stay in
    registers across the K loop (v0 stages it, with 2 K steps in flight by cp.async; here synchronously): an
    eighth of the unstaged kernel's global loads, none through local memory."""
    job = jobs / "matmul_square"
    v0 = initial_params(str(job))
    staged = apply_edit(v0, ScheduleEdit(v0.ops[0].op_index, "pipeline_depth", 0))
    params = apply_edit(staged, ScheduleEdit(staged.ops[0].op_index, "promote_shared", False))
    for version, p in ((20, params), (21, staged)):
        assert compile_iteration(str(job), version, p).ok
    v0, v1 = _ptx_counts(job / "v20"), _ptx_counts(job / "v21")
    assert v0["ld.shared.v4.b32"] == 0 and v1["ld.shared.v4.b32"] > 0 and v1["st.shared.v4.b32"] > 0
    assert v1["ld.global.v4.b32"] * 8 <= v0["ld.global.v4.b32"]
    assert v1["ld.local"] == v1["st.local"] == 0
    assert "scf.for" in (job / "v21" / "gpu.mlir").read_text().split("gpu.func")[1]


def test_pipeline_depth_fills_a_staged_simt_matmuls_tiles_by_cp_async_steps_ahead(jobs):
    """The 1024^2 f32 matmul's staged tiles with 2 K steps in flight: filled by cp.async (16 bytes), the K loop
    software-pipelined with two barriers a step (the one between A's and B's copies dropped), the threads'
    reads of the rotated buffers still 128-bit (farm-align-global-vector-accesses: LLVM proves no alignment
    through the loop's block arguments, and split them into scalar loads); with copies_ahead one barrier a
    step. An img2col conv (a gather) and a partial tile take no pipeline. v0 keeps STAGED_SIMT_STAGES steps in
    flight: the matmul is alone in its kernel, its operands staged as they are."""
    job = jobs / "matmul_square"
    pipelined = initial_params(str(job))
    op = pipelined.ops[0].op_index
    assert pipelined.ops[0].pipeline_depth == STAGED_SIMT_STAGES == 2
    staged = apply_edit(pipelined, ScheduleEdit(op, "pipeline_depth", 0))
    ahead = apply_edit(pipelined, ScheduleEdit(op, "copies_ahead", True))
    for version, p in ((24, staged), (25, pipelined), (26, ahead)):
        assert compile_iteration(str(job), version, p).ok
    counts = {v: _ptx_counts(job / f"v{v}") for v in (24, 25, 26)}
    assert counts[25]["ld.shared.v4.b32"] == counts[24]["ld.shared.v4.b32"] > 0
    assert counts[26]["ld.shared.v4.b32"] == counts[24]["ld.shared.v4.b32"]
    assert "ld.shared.b32" not in (job / "v25" / "kernels.ptx").read_text()
    assert "cp.async.cg.shared.global" in (job / "v25" / "kernels.ptx").read_text()
    assert counts[25]["ld.global.v4.b32"] < counts[24]["ld.global.v4.b32"]  # the copies are cp.async's

    def k_loop_barriers(version: int) -> int:
        gpu = (job / f"v{version}" / "gpu.mlir").read_text()
        body = gpu[gpu.index("scf.for"):]
        return body[:body.index("farm.k_loop")].count("gpu.barrier")

    assert (k_loop_barriers(25), k_loop_barriers(26)) == (2, 1)
    padded = apply_edit(pipelined, ScheduleEdit(op, "block_tile", [48, 64, 0]))
    result = compile_iteration(str(job), 27, apply_edit(padded, ScheduleEdit(op, "thread_tile", [3, 4, 0])))
    assert not result.ok and "pipeline_depth copies whole tiles" in result.error, result.error


def test_v0_stages_a_simt_matmul_whose_grid_fills_the_gpu_in_the_largest_tiles_that_do(jobs):
    """1024^2 f32: 128 x 128 or 128 x 64 blocks would leave H100 SMs idle (64 and 128 blocks for 132), so
    v0 stages 64 x 64 blocks with K steps of 32; the MLP's 256-row Linears fill no grid staged and stay
    unstaged."""
    square = initial_params(str(jobs / "matmul_square")).ops[0]
    assert (square.promote_shared, square.block_tile, square.thread_tile, square.reduction_tile) == \
        (True, [64, 64, 0], [4, 4, 0], 32)
    assert not any(op.promote_shared for op in initial_params(str(jobs / "mlp")).ops)


def test_a_staged_matmul_fused_into_its_epilogue_keeps_its_tile_in_shared_memory(jobs):
    """The MLP's first Linear + ReLU (the f32 accumulator's fill and the ReLU's output once one tensor.empty,
    farm-separate-fill-inits): the matmul's block tile is a third shared array beside A's and B's tiles,
    not a per-thread copy of the output slice."""
    job = jobs / "mlp"
    params = initial_params(str(job))
    group = next(s for s in params.ops if s.family == "matmul" and not s.split_reduction)
    result = compile_iteration(str(job), 22, apply_edit(params, ScheduleEdit(group.op_index, "promote_shared", True)))
    assert result.ok, result.error
    gpu = (job / "v22" / "gpu.mlir").read_text()
    assert "memref.alloca" not in gpu
    assert len(set(re.findall(r"memref.global \"private\" @__farm_shared_\d+", gpu))) == 3


def test_a_linears_transposed_weight_is_transposed_as_its_tiles_are_staged(tmp_path):
    """x @ W.T + b, GELU: torch-mlir's linalg.transpose of W ran as a kernel of its own, writing W.T out every
    forward. With the matmul staged, its kernel is the only one: each K step's [k, n] tile of W.T is read from
    W's rows (128-bit loads along k) and stored down the tile's columns in shared memory, where the threads
    read it as they read any staged B tile; unstaged, the transpose is a kernel again. The GELU epilogue goes
    a row of the thread's tile at a time: ptxas fits the kernel in 128 registers, two blocks of 256 threads
    per SM (over the whole tile, erf's temporaries took 164: one block)."""
    from workers.frontend import lower_model

    job = tmp_path / "staged_linear"
    lower_model(str(Path(__file__).parent / "data" / "breadth" / "staged_linear.py"), str(job))
    params = initial_params(str(job))
    (group,) = params.ops
    assert group.promote_shared
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error
    assert result.kernel_count == 1
    gpu = (job / "v0" / "gpu.mlir").read_text()
    k_loop = gpu[gpu.index("scf.for"):]
    # W (2048 x 512, the kernel's first argument) read along its rows, 4 floats a load, in the K loop
    assert re.search(r"vector.load %arg0\[.*memref<2048x512xf32>, vector<4xf32>", k_loop), k_loop
    counts = _ptx_counts(job / "v0")
    assert counts["ld.local"] == counts["st.local"] == 0 and counts["ld.shared.v4.b32"] > 0
    ptxas = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(job / "v0" / "kernels.ptx"), "-o", "/dev/null"],
                           capture_output=True, text=True, check=True).stderr
    assert int(re.search(r"Used (\d+) registers", ptxas).group(1)) <= 128, ptxas
    unstaged = apply_edit(params, ScheduleEdit(group.op_index, "promote_shared", False))
    result = compile_iteration(str(job), 1, unstaged)
    assert result.ok and result.kernel_count == 2, result.error



def _shared_vector_offsets(ptx: str) -> list[set[int]]:
    """Per base register of the kernel's 128-bit shared loads: their offsets within a 512-byte row."""
    offsets: dict[str, set[int]] = {}
    for base, offset in re.findall(r"ld\.shared\.v4\.b32\s+\{[^}]*\}, \[(%rd\d+)(?:\+(\d+))?\]", ptx):
        offsets.setdefault(base, set()).add(int(offset or 0) % 512)
    return list(offsets.values())


def test_a_staged_matmuls_thread_reads_its_columns_as_vectors_interleaved_across_the_block(tmp_path):
    """interleave_columns on a staged 128 x 128 block of 8 x 8 (v0's): a thread's 8 columns are two 128-bit
    vectors 64 columns (256 bytes) apart, so a warp's reads of a B tile row cover neighbouring vectors (a run
    of 8 columns put lanes t and t + 4 on the same banks). The step's matmul is split in two column pieces,
    fused back into one thread loop: the thread reads its A rows once, and its accumulators stay in registers."""
    from workers.frontend import lower_model

    job = tmp_path / "staged_linear"
    lower_model(str(Path(__file__).parent / "data" / "breadth" / "staged_linear.py"), str(job))
    params = initial_params(str(job))
    (group,) = params.ops
    assert group.promote_shared and group.interleave_columns and group.thread_tile == [8, 8]
    runs = apply_edit(params, ScheduleEdit(group.op_index, "interleave_columns", False))
    for version, schedule in ((0, params), (1, runs)):
        result = compile_iteration(str(job), version, schedule)
        assert result.ok, result.error
    interleaved, run = ((job / f"v{v}" / "kernels.ptx").read_text() for v in (0, 1))
    # B's reads (and the accumulator tile's, shared memory here: the GELU epilogue reads it, as a run of 8)
    assert {0, 256} in _shared_vector_offsets(interleaved) and {0, 256} not in _shared_vector_offsets(run)
    assert _shared_vector_offsets(interleaved).count({0, 16}) < _shared_vector_offsets(run).count({0, 16})
    # as many reads of A's rows (once for both pieces) and B's, as many FMAs, no accumulator through local memory
    for instruction in ("ld.shared.v4.b32", "fma.rn.f32", "ld.global"):
        assert interleaved.count(instruction) == run.count(instruction), instruction
    assert interleaved.count("ld.local") == 0


def test_a_square_linears_staged_transpose_writes_shared_memory_not_its_output(tmp_path):
    """Square Linears over as many rows (DeepNarrowMLP's 1024 x 1024 layers): torch-mlir's CSE gives W.T and the
    layer's output one tensor.empty. Each staged K step's tile of W.T was then a slice of the kernel's own
    output, which bufferization copied into a private 32 x 64 scratch tile per thread (stack, local memory);
    farm-separate-fill-inits gives the transpose an empty of its own, so its tile is shared memory."""
    from workers.frontend import lower_model

    job = tmp_path / "square_linears"
    lower_model(str(Path(__file__).parent / "data" / "breadth" / "square_linears.py"), str(job))
    params = initial_params(str(job))
    assert [s.promote_shared for s in params.ops] == [True, True]
    result = compile_iteration(str(job), 0, params)
    assert result.ok and result.kernel_count == 2, result.error
    assert "memref.alloca" not in (job / "v0" / "gpu.mlir").read_text()
    counts = _ptx_counts(job / "v0")
    assert counts["ld.local"] == counts["st.local"] == 0 and counts["ld.shared.v4.b32"] > 0, counts

def test_a_staged_matmul_fused_into_its_epilogue_takes_whole_tiles_only(jobs):
    """A partial block tile pads the matmul's result, which its fused epilogue would then read through a
    copy: the compile stage says so instead of compiling it (alone in its kernel it may be partial)."""
    job = jobs / "mlp"
    params = initial_params(str(job))
    group = next(s for s in params.ops if s.family == "matmul" and not s.split_reduction)
    for field, value in (("promote_shared", True), ("block_tile", [96, 64]), ("thread_tile", [6, 4]),
                         ("reduction_tile", 16), ("vectorize", True)):
        params = apply_edit(params, ScheduleEdit(group.op_index, field, value))
    result = compile_iteration(str(job), 23, params)
    assert not result.ok and "takes whole tiles" in result.error, result.error


def test_pass_pipeline_text_round_trips_and_names_the_schedule_step():
    pipeline = PassPipeline(["builtin.module(cse)", "farm-scalar-unit-loop", "transform @__transform_main",
                             "builtin.module(x)"])
    assert PassPipeline.from_text(pipeline.to_text()) == pipeline
    assert pipeline.before_schedule() == ["builtin.module(cse)", "farm-scalar-unit-loop"]
    with pytest.raises(ValueError, match="no step `transform @__transform_main`"):
        PassPipeline.from_text("builtin.module(cse)\n")


@pytest.mark.parametrize("outputs, block, thread, k_loops, split", [
    ([256, 256], [16, 8], [2, 2], [1024], 4),  # 512 one-warp blocks: to 2048 warps
    ([256, 1024], [16, 8], [2, 2], [512], 0),  # 2048 one-warp blocks already
    ([256, 256], [16, 8], [2, 2], [48], 2),  # K 48: chunks of 24, not of 12 (under SPLIT_K_MIN_CHUNK)
    ([16, 10], [16, 0], [1, 1], [32, 8, 8], 32),  # K over three loops, one block: its first loop, whole
    ([32, 10], [16, 0], [1, 1], [32, 8, 8], 0),  # ... over two blocks: tile_reduction_using_forall cannot
])
def test_a_simt_matmul_splits_k_until_its_grid_has_2048_warps(outputs, block, thread, k_loops, split):
    iterators = ["parallel"] * 2
    anchor = OpInfo(1, "linalg.generic", "elementwise", outputs, iterators, "f32")
    matmul = OpInfo(0, "linalg.generic", "matmul", outputs + k_loops, iterators + ["reduction"] * len(k_loops), "f32")
    schedule = OpSchedule(1, "matmul", list(block), list(thread), reduction_tile=8, vectorize=True)
    split_k_to_fill_the_grid(schedule, anchor, matmul)
    assert schedule.split_reduction == split
    assert schedule.reduction_tile == (min(split, 8) if split else 8)  # the merge's loads, or the K step


@pytest.mark.parametrize("chunk, k_step", [
    (1568, 32), (392, 8),  # a v0 K tile divides the chunk
    (196, 28),  # VGG's classifier (K 25088 in 128 chunks): none does; its largest divisor under 32, not all 196
    (197, 1),  # a prime: a scalar loop rather than the whole chunk in registers
    (32, 16), (24, 8), (8, 0),  # a short chunk: a tile under it, else the chunk in one step
])
def test_a_split_matmuls_chunk_is_reduced_in_k_steps_that_divide_it(chunk, k_step):
    assert chunk_k_step(chunk) == k_step


@pytest.mark.parametrize("ranges, x, threads", [
    ([8, 254], 127, 254),  # 254 = 2 x 127: 127 threads along x, not 2
    ([4, 197], 197, 197),  # a prime (ViT's 197 tokens): all of it, not 1
    ([16, 90], 45, 180),  # a divisor under the cap that fills most of a warp stays
])
def test_an_odd_extent_gets_threads_along_x_past_the_cap_rather_than_a_tiny_divisor(ranges, x, threads):
    op = OpInfo(0, "linalg.generic", "elementwise", ranges, ["parallel"] * 2, "f32")  # rows too odd for vectors
    s = default_op_schedule(op, "elementwise")
    assert (s.block_tile[1] or ranges[1]) // s.thread_tile[1] == x
    assert math.prod(n for n in threads_per_loop(s, op) if n) == threads


def test_inner_loops_too_small_for_a_warp_share_their_block_with_the_loop_outside():
    """A transposed conv's 3x3 output pixels per channel: 9 threads a block before, now 16 channels too."""
    op = OpInfo(0, "linalg.generic", "elementwise", [128, 64, 3, 3], ["parallel"] * 4, "f32")
    s = default_op_schedule(op, "elementwise")
    assert threads_per_loop(s, op) == [0, 16, 3, 3] and s.block_tile[0] == 1
    matmul = OpInfo(0, "linalg.batch_matmul", "matmul", [128, 3, 3, 8], ["parallel"] * 3 + ["reduction"], "f32")
    assert threads_per_loop(default_op_schedule(matmul, "matmul"), matmul)[0] == 0  # matmuls: as before


def test_a_block_of_more_than_64_threads_along_z_is_refused():
    """CUDA takes at most 64 threads along a block's z: such a schedule fails at the schedule stage, not at
    launch."""
    op = OpInfo(0, "linalg.generic", "elementwise", [128, 4, 2], ["parallel"] * 3, "f32")
    assert block_dims(OpSchedule(0, "elementwise", [64, 4, 2], [1, 1, 1]), op) == [2, 4, 64]
    with pytest.raises(ScheduleError, match="z exceed 64"):
        block_dims(OpSchedule(0, "elementwise", [128, 4, 2], [1, 1, 1]), op)


LINEAR_RELU = """
func.func @forward(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %v: tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x32xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<8x16xf32>, tensor<16x32xf32>) outs(%acc : tensor<8x32xf32>) -> tensor<8x32xf32>
  %relu = linalg.max ins(%mm, %acc : tensor<8x32xf32>, tensor<8x32xf32>) outs(%empty : tensor<8x32xf32>) -> tensor<8x32xf32>
  %other = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x32xf32>) -> tensor<8x32xf32>
  %sum = linalg.add ins(%other, %v : tensor<8x32xf32>, tensor<8x32xf32>) outs(%empty : tensor<8x32xf32>) -> tensor<8x32xf32>
  return %relu, %sum : tensor<8x32xf32>, tensor<8x32xf32>
}
"""


def test_a_matmuls_fill_gets_an_empty_tensor_of_its_own():
    """farm-separate-fill-inits alone: the matmul's fill starts from a tensor.empty of its own, which its
    epilogue (here a max) no longer shares; a fill that feeds no matmul keeps the shared one."""
    from workers.compile import mlir
    from workers.compile.passes import registry, separate_fill_inits

    with mlir.context():
        module = mlir.parse(LINEAR_RELU, "a linear and its epilogue")
        registry.run_step(separate_fill_inits.NAME, module)
        assert module.operation.verify()
        text = str(module)
    empties = re.findall(r"(%\S+) = tensor.empty\(\)", text)
    fills = re.findall(r"linalg.fill ins\(%\S+ : f32\) outs\((%\S+) :", text)
    assert len(empties) == 2 and fills == [empties[1], empties[0]]  # the matmul's fill: the new one
