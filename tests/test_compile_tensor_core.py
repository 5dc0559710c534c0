"""Tensor cores from the schedule: an f16 matmul compiles to mma.sync or wgmma that ptxas accepts, and a
tensor_core schedule the kernel cannot take fails at the schedule stage with the reason.

v0 of a small f16 matmul kernel uses mma.sync (128x64 blocks of two 64x64 warps, A and B tiles of K
steps of 32 staged in shared memory, three buffers each filled by cp.async), one whose grid fills the
GPU wgmma (two 64x256 warpgroups per 128x256 block), also
where the epilogue is only the f32->f16 cast (a @ b in f16, benchmarks/models/matmul4096_f16.py): the
epilogue works on rows of 1-D vectors, which convert-vector-to-gpu leaves alone (a 2-D chain of one
truncf it took for MMA fragments and failed on: "unhandled vector to mma type: arith.truncf").
Each warp's mma accumulators stay in registers across the K loop. An f32 matmul takes tensor cores
(as TF32, mma.sync m16n8k8) only in a job whose precision is tf32."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import MODELS, lower_zoo
from test_compile_memory_bound import vector_loads

from workers.compile import apply_edit, compile_iteration, initial_params
from workers.compile.tensor_core import padded_columns
from workers.frontend import lower_model
from workers.records import LaunchConfig, ScheduleEdit

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks" / "models"
MEASURE_DATA = Path(__file__).resolve().parent / "data" / "measure"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    return lower_zoo(tmp_path_factory, "matmul_f16", "elementwise_chain", "matmul_square")


def k_loop_accumulators(version_dir: Path) -> list[str]:
    """The types the tensor-core kernel's K loop carries from one step to the next (gpu.mlir): with the
    accumulators in registers, one mma fragment per 16x8 tile of the warp's output."""
    gpu = (version_dir / "gpu.mlir").read_text()
    loop = re.search(r"scf\.for %\w+ = %\w+ to %\w+ step %\w+ iter_args\([^)]*\) -> \(([^)]*)\)", gpu)
    return loop.group(1).split(", ") if loop else []


def k_loop_ptx(ptx: str) -> str:
    """The body of the tensor-core kernel's K loop in PTX: from the label before its first mma.sync to the
    branch back to it."""
    first_mma = ptx.index("mma.sync")
    label = re.findall(r"^(\$L__BB\d+_\d+):", ptx[:first_mma], re.M)[-1]
    start = ptx.index(f"{label}:")
    return ptx[start:ptx.index(f"bra \t{label};", first_mma)]


def mma_params(job: Path, block_tile=(64, 64), thread_tile=(32, 32), reduction_tile=16):
    params = initial_params(str(job))
    op = params.ops[0].op_index
    for field, value in [("block_tile", list(block_tile)), ("thread_tile", list(thread_tile)),
                         ("reduction_tile", reduction_tile), ("tensor_core", "mma_sync")]:
        params = apply_edit(params, ScheduleEdit(op, field, value))
    return params


def test_v0_of_an_f16_matmul_is_on_tensor_cores(jobs):
    job = jobs / "matmul_f16"
    (s,) = initial_params(str(job)).ops
    assert (s.tensor_core, s.block_tile, s.thread_tile, s.reduction_tile, s.promote_shared, s.pipeline_depth) == \
        ("mma_sync", [128, 64], [64, 64], 32, True, 3)
    assert initial_params(str(jobs / "elementwise_chain")).ops[0].tensor_core == "none"


def test_a_thread_tile_that_is_no_warp_tile_gets_one(jobs):
    """Switching tensor cores on is one edit of a SIMT schedule: its 4x4 thread tile is no warp tile,
    so the compile stage picks 32x32 warps (eight of them for a 128x64 block)."""
    job = jobs / "matmul_f16"
    params = apply_edit(initial_params(str(job)), ScheduleEdit(2, "thread_tile", [4, 4]))
    result = compile_iteration(str(job), 3, params)
    assert result.ok, result.error
    # a 32x32 warp tile is 2x4 mma tiles, twice per 32-wide K step
    assert (job / "v3" / "kernels.ptx").read_text().count("mma.sync.aligned.m16n8k16") == 16
    (launch,) = LaunchConfig.from_json((job / "v3" / "config.json").read_text()).launches
    assert launch.block == [256, 1, 1]


MMA_SYNC_4096 = {"tensor_core": "mma_sync", "block_tile": [256, 128], "thread_tile": [64, 64], "reduction_tile": 64,
                 "pipeline_depth": 2}


def mma_sync_4096(job: Path):
    """v0 of a 4096^3 matmul job with its tensor-core kernel on mma.sync instead of wgmma."""
    params = initial_params(str(job))
    (s,) = [s for s in params.ops if s.family == "matmul"]
    return apply_edit(params, ScheduleEdit(s.op_index, "tensor_core", MMA_SYNC_4096))


@pytest.fixture(scope="module")
def matmul4096_f16(tmp_path_factory):
    job = tmp_path_factory.mktemp("benchmarks") / "matmul4096_f16"
    lower_model(str(BENCHMARKS / "matmul4096_f16.py"), str(job))
    return job


def test_plain_f16_matmul_compiles_on_tensor_cores(matmul4096_f16):
    """a @ b in f16 (matmul f16 x f16 -> f32, then a truncf-only epilogue) at 4096^3 on mma.sync: 256x128
    blocks of eight 64x64 warps (mma.sync's best on the H200 for a grid that fills the GPU), K steps of 64
    staged in two buffers per tile, filled by cp.async while the warps compute on the other."""
    job = matmul4096_f16
    result = compile_iteration(str(job), 0, mma_sync_4096(job))
    assert result.ok, result.error
    ptx = (job / "v0" / "kernels.ptx").read_text()
    # a 64x64 warp tile is 4x8 mma tiles, 4 times per 64-wide K step
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 128
    assert "ldmatrix.sync.aligned" in ptx, "A and B fragments from the staged tiles"
    # 256 threads copy A (256x64) and B (64x128) in 16-byte pieces: 8 + 4 each per K step, for the steps
    # 0 and 1 before the K loop and for step i+2 in it (predicated off past the last step)
    assert ptx.count("cp.async.cg.shared.global") + ptx.count("cp.async.ca.shared.global") == 3 * 12
    assert not vector_loads(ptx), "no synchronous copies left"
    # two groups per step (A, B): the waits at step i let the 2 groups of step i+1 stay in flight
    assert ptx.count("cp.async.commit_group") == 3 * 2 and ptx.count("cp.async.wait_group \t2;") == 2
    # the 4x8 fragments of 16x8 f32 that the K loop carries (none re-read from shared memory), beside
    # the cp.async tokens of the steps in flight
    carried = k_loop_accumulators(job / "v0")
    assert [t for t in carried if t.startswith("vector")] == ["vector<2x2xf32>"] * 32
    assert set(carried) - {"vector<2x2xf32>"} <= {"!nvgpu.device.async.token", "index"}
    (launch,) = LaunchConfig.from_json((job / "v0" / "config.json").read_text()).launches
    # the epilogue's 256x128 f32 accumulator tile (rows padded by 8 words: the fragments' 8 rows x 8 words
    # in two wavefronts) is dead during the K loop: it shares dynamic shared memory with the two buffers
    # of A 256x(64+8) and B 64x(128+8) f16 ...
    assert launch.shared_bytes == max(256 * 136 * 4, 2 * (256 * 72 + 64 * 136) * 2)
    assert ".extern .shared .align 1024 .b8 __farm_dynamic_shared[];" in ptx
    # ... behind a barrier before the first copy (after the warps read the fill's zeros) and, after the K
    # loop, a wait for every copy and a barrier before the warps' results land there
    before_copies = ptx[:ptx.index("cp.async")]
    assert before_copies.rindex("bar.sync") > before_copies.rindex("ld.shared")
    after_k_loop = ptx[ptx.rindex("mma.sync"):].split("bra", 1)[1]
    assert after_k_loop.index("cp.async.wait_group \t0;") < after_k_loop.index("bar.sync") \
        < after_k_loop.index("st.shared")
    # and the epilogue's threads read the results only after another barrier (wrong results without it)
    results = after_k_loop.index("st.shared")
    assert after_k_loop.index("bar.sync", results) < after_k_loop.index("ld.shared", results)
    # the epilogue: each thread casts rows of 4 accumulators and stores 4 halves at once
    assert "st.global.v2.b32" in ptx and "st.global.b16" not in ptx
    # the fill writes its zeros in rows of vectors too: no column of them staged in local memory
    assert ".local" not in ptx
    if shutil.which("ptxas"):
        done = subprocess.run(["ptxas", "-arch=sm_90a", str(job / "v0" / "kernels.ptx"), "-o", "/dev/null"])
        assert done.returncode == 0
    (launch,) = LaunchConfig.from_json((job / "v0" / "config.json").read_text()).launches
    assert (launch.grid, launch.block) == ([32, 16, 1], [256, 1, 1])


@pytest.mark.parametrize("model, lowered_with, reads", [("linear_f16", "linalg.transpose", ["arg0", "arg1"]),
                                                          ("linear_bias_f16", "arith.extf", ["arg0", "arg1", "arg2"])])
def test_a_linear_layer_is_one_tensor_core_kernel_reading_its_weight_untransposed(tmp_path, model, lowered_with,
                                                                                   reads):
    """nn.Linear computes x @ W^T: torch-mlir transposes W (out, in) into a tensor of its own. The
    preparation steps fold that transpose into the matmul (which then reads W as (n, k)): one kernel,
    whose B fragments come from rows of W in shared memory by ldmatrix without .trans (a @ b's (k, n)
    rows need .trans); before the fold the transposed operand failed in the lowering. With a bias,
    torch's addmm extends x and W^T to f32 in elementwise ops and multiplies those (a SIMT f32 matmul
    plus two extension kernels): the matmul takes the f16 tensors instead (it extends them itself, the
    same arithmetic), and the bias is the kernel's epilogue. The kernel reads x, W (and b) as the model
    holds them."""
    job = tmp_path / model
    lower_model(str(Path(__file__).parent / "data" / "zoo" / f"{model}.py"), str(job))
    assert lowered_with in (job / "model_linalg.mlir").read_text()
    result = compile_iteration(str(job), 0, initial_params(str(job)))
    assert result.ok, result.error
    (launch,) = LaunchConfig.from_json((job / "v0" / "config.json").read_text()).launches
    assert [arg.buffer for arg in launch.args][:len(reads)] == reads
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned" in ptx and ".trans" not in ptx


def test_f16_matmul_runs_on_tensor_cores(jobs):
    job = jobs / "matmul_f16"
    result = compile_iteration(str(job), 0, mma_params(job))
    assert result.ok, result.error
    ptx = (job / "v0" / "kernels.ptx").read_text()
    # f16 operands, f32 accumulators as torch-mlir's IR has them; 2x4 mma tiles per warp and K step
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 8
    if shutil.which("ptxas"):  # compile_iteration already ran it; this says so explicitly
        done = subprocess.run(["ptxas", "-arch=sm_90a", str(job / "v0" / "kernels.ptx"), "-o", "/dev/null"])
        assert done.returncode == 0
    (launch,) = LaunchConfig.from_json((job / "v0" / "config.json").read_text()).launches
    assert (launch.grid, launch.block) == ([4, 4, 1], [128, 1, 1]), "64x64 blocks of four warps"
    # the 64x(64+8) f32 accumulator tile, sharing memory with v0's three buffers of A 64x(16+8), B 16x(64+8)
    assert launch.shared_bytes == 64 * 72 * 4 > 3 * (64 * 24 + 16 * 72) * 2


def test_warp_tile_and_k_step_are_schedule_knobs(jobs):
    job = jobs / "matmul_f16"
    result = compile_iteration(str(job), 1, mma_params(job, (128, 64), (64, 32), 32))
    assert result.ok, result.error
    transform = (job / "v1" / "transform.mlir").read_text()
    assert "num_threads [2, 2, 0](mapping = [#gpu.warp<linear_dim_1>, #gpu.warp<linear_dim_0>])" in transform
    assert "tile_sizes [0, 0, 32]" in transform
    # a 64x32 warp tile is 4x4 mma tiles, twice per 32-wide K step
    assert (job / "v1" / "kernels.ptx").read_text().count("mma.sync.aligned.m16n8k16") == 32


def test_promote_shared_stages_the_operand_tiles_of_each_k_step(jobs):
    """promote_shared: per K step the block copies its 128x32 A and 32x64 B tiles into shared memory
    (128-bit global loads), the warps read their mma fragments from there with ldmatrix."""
    job = jobs / "matmul_f16"
    params = initial_params(str(job))
    # from an unstaged schedule of four 64x32 warps, the edit under test
    for field, value in [("promote_shared", False), ("thread_tile", [64, 32]), ("promote_shared", True),
                         ("pipeline_depth", 0)]:
        params = apply_edit(params, ScheduleEdit(2, field, value))
    result = compile_iteration(str(job), 4, params)
    assert result.ok, result.error
    ptx = (job / "v4" / "kernels.ptx").read_text()
    # A's rows of 32 f16 padded to 40, B's of 64 to 72: ldmatrix's 8 rows in 8 different bank groups;
    # the f32 accumulator tile's rows of 64 padded to 72: its fragments' 8 rows in two wavefronts (past
    # 48 KB in all, the tiles are views of dynamic shared memory)
    (launch,) = LaunchConfig.from_json((job / "v4" / "config.json").read_text()).launches
    assert launch.shared_bytes == 128 * 72 * 4 + 128 * 40 * 2 + 32 * 72 * 2
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 32
    assert "ldmatrix.sync.aligned" in ptx and vector_loads(ptx) == 6  # (128x32 + 32x64) / 128 threads
    assert k_loop_accumulators(job / "v4") == ["vector<2x2xf32>"] * 16
    # the accumulators leave the K loop into shared memory after its last barrier: another barrier must
    # come before the epilogue's threads read them (without it: wrong results at 4096^3 on the H200)
    after_k_loop = ptx[ptx.rindex("mma.sync"):].split("bra", 1)[1]
    assert after_k_loop.index("bar.sync") < after_k_loop.index("ld.shared")
    if shutil.which("ptxas"):
        done = subprocess.run(["ptxas", "-arch=sm_90a", str(job / "v4" / "kernels.ptx"), "-o", "/dev/null"])
        assert done.returncode == 0


@pytest.mark.parametrize("columns, element_bytes, padded", [
    (32, 2, 40), (64, 2, 72), (40, 2, 40), (16, 4, 20), (64, 4, 68), (4, 2, 4)])
def test_staged_rows_are_an_odd_number_of_16_byte_chunks_apart(columns, element_bytes, padded):
    assert padded_columns(columns, element_bytes) == padded
    stride = padded * element_bytes
    if stride % 16 == 0:  # the 16-byte rows that one ldmatrix reads start in 8 different bank groups
        assert len({i * stride % 128 for i in range(8)}) == 8


@pytest.mark.parametrize("columns, padded", [(8, 8), (32, 40), (64, 72), (128, 136)])
def test_rows_read_by_scalar_fragment_loads_are_8_banks_apart(columns, padded):
    """TF32's B fragments: lane l of a warp loads row l % 4, column l / 4 (+ the fragment's offsets); with
    rows 8 banks apart modulo 32 the 32 lanes hit 32 different banks (rows of 68 floats: 2 lanes a bank)."""
    assert padded_columns(columns, 4, scalar_fragments=True) == padded
    assert len({(lane % 4 * padded + lane // 4) % 32 for lane in range(32)}) == 32


@pytest.mark.parametrize("job, field, value, reason", [
    ("elementwise_chain", "tensor_core", "mma_sync", "tensor_core applies to a linalg.matmul kernel"),
    ("matmul_f16", "block_tile", [64, 12], "block_tile [64, 12] must divide the output 256x256"),
    ("matmul_f16", "block_tile", [8, 8], "block_tile [8, 8] is no multiple of the 16x8 mma tile"),
    ("matmul_f16", "tensor_core", "wmma", "tensor_core must be 'none', 'mma_sync' or 'wgmma'"),
    ("matmul_f16", "promote_shared", False, "pipeline_depth multi-buffers the staged A and B tiles: it needs promote_shared"),
])
def test_tensor_cores_where_they_do_not_apply_fail_at_the_schedule_stage(jobs, job, field, value, reason):
    params = initial_params(str(jobs / job))
    op = params.ops[0].op_index
    params = apply_edit(params, ScheduleEdit(op, "tensor_core", "mma_sync"))
    shutil.rmtree(jobs / job / "v2", ignore_errors=True)
    result = compile_iteration(str(jobs / job), 2, apply_edit(params, ScheduleEdit(op, field, value)))
    assert not result.ok and result.stage == "schedule" and reason in result.error, result.error


WGMMA = {"tensor_core": "wgmma", "block_tile": [128, 128], "thread_tile": [0, 0], "reduction_tile": 64,
         "pipeline_depth": 4}
# TF32 in v0's wgmma tiles (a small job's TF32 v0 is mma.sync with copies ahead, which wgmma's does not take)
TF32_WGMMA = {"tensor_core": "wgmma", "block_tile": [128, 256, 0], "thread_tile": [64, 256, 0], "reduction_tile": 32,
              "pipeline_depth": 3, "copies_ahead": False}


def test_v0_of_a_4096_f16_matmul_is_on_wgmma(matmul4096_f16):
    """v0 at 4096^3 on the H200's wgmma: 128x256 blocks of two warpgroups of 64x256, 3 K steps of 64 in
    flight (test_two_warpgroups_share_a_block_stacked_along_m has them in detail)."""
    (s,) = initial_params(str(matmul4096_f16)).ops
    assert (s.tensor_core, s.block_tile, s.thread_tile, s.reduction_tile, s.promote_shared, s.pipeline_depth) == \
        ("wgmma", [128, 256], [64, 256], 64, True, 3)


def test_one_warpgroup_computes_a_128x128_block_on_wgmma(matmul4096_f16):
    """A warpgroup per 128x128 block (two m64 halves), its accumulators in registers through the K loop;
    4 K steps of 64 in flight, A (128x64) and B (64x128) tiles copied by TMA into 128-byte swizzled rows
    (descriptors of A and B made on the host); the epilogue's accumulator tile shares their memory."""
    job = matmul4096_f16
    params = apply_edit(initial_params(str(job)), ScheduleEdit(2, "tensor_core", WGMMA))
    result = compile_iteration(str(job), 1, params)
    assert result.ok, result.error
    ptx = (job / "v1" / "kernels.ptx").read_text()
    # one step: two m64 halves x four k16 of the 64-wide step, B read N-major (tnsp-b 1, tnsp-a 0)
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 \{[^}]*\}, %rd\d+, %rd\d+, p, 1,  1, 0,  1;",
                      ptx)
    assert len(mmas) == 8 == ptx.count("wgmma.mma_async")
    # four mbarriers, one per buffer; a step starts once its buffer's completed the phase of its fill
    assert ptx.count("mbarrier.init.shared.b64") == 4
    assert ptx.count("mbarrier.try_wait.parity.shared.b64") == 1 and \
        ptx.index("mbarrier.try_wait.parity") < ptx.index("wgmma.fence")
    # one thread copies a step's tiles: A's in one box, B's in two boxes of 64 columns, expecting their
    # 32 KB on the buffer's mbarrier; 3 steps before the loop, 1 in it. No thread copies by cp.async.
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 4 * 3
    assert ptx.count("mbarrier.arrive.expect_tx") == 4 and "cp.async.ca" not in ptx and "cp.async.cg" not in ptx
    # each step's wgmmas stay in flight until the next step's are issued; all are done before the store
    assert ptx.count("wgmma.wait_group.sync.aligned \t1;") == 1
    assert "wgmma.wait_group.sync.aligned \t0;" in ptx[ptx.rindex("wgmma.mma_async"):]
    # no fragment loads: wgmma reads its operands from shared memory itself
    assert "ldmatrix" not in ptx and "mma.sync" not in ptx
    config = LaunchConfig.from_json((job / "v1" / "config.json").read_text())
    (launch,) = config.launches
    # one warpgroup per block; 4 buffers of A and B (128 + 128 rows of 128 bytes), which the 64 KB
    # accumulator tile overlaps, from a 1024-byte aligned start (the swizzle's 8 rows of 128 bytes)
    assert (launch.grid, launch.block) == ([32, 32, 1], [128, 1, 1])
    assert launch.shared_bytes == 4 * (128 + 128) * 128
    assert ".extern .shared .align 1024 .b8 __farm_dynamic_shared[];" in ptx
    # the kernel takes the addresses of A's and B's tensor maps, which the measure worker encodes
    maps = {b.name: b.tensor_map for b in config.buffers if b.role == "tensor_map"}
    assert {arg.buffer for arg in launch.args} == {*maps, "buf2"}  # the output, and A and B through their maps
    assert [(m.buffer, m.shape, m.box, m.swizzle) for m in maps.values()] == \
        [("arg0", [4096, 4096], [128, 64], 128), ("arg1", [4096, 4096], [64, 64], 128)]
    if shutil.which("ptxas"):
        done = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(job / "v1" / "kernels.ptx"), "-o", "/dev/null"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        # no wait that ptxas had to add itself (C7517): the accumulators are read after the explicit one
        assert "warpgroup.wait is injected" not in done.stderr


def test_two_warpgroups_share_a_block_stacked_along_m(matmul4096_f16):
    """v0's 128x256 blocks of two warpgroups of 64x256 (thread_tile: a warpgroup's tile): one thread copies
    A (128x64) and B (64x256, four boxes of 64 columns) by TMA, each warpgroup multiplies its 64 rows of A
    with all of B (one m64n256k16 per k16) and stores them at its rows of the accumulator tile."""
    job = matmul4096_f16
    result = compile_iteration(str(job), 2, initial_params(str(job)))
    assert result.ok, result.error
    ptx = (job / "v2" / "kernels.ptx").read_text()
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    # A's box and B's four per step, 2 steps before the loop, 1 in it
    assert ptx.count("cp.async.bulk.tensor.2d") == 3 * 5
    # a buffer is refilled only once both warpgroups are done with the step before it: a barrier after
    # the wait for that step's wgmmas (without it the faster warpgroup overwrites what the other reads)
    waited = ptx.index("wgmma.wait_group.sync.aligned \t1;")
    assert ptx.index("bar.sync", waited) < ptx.index("cp.async.bulk.tensor", waited)
    (launch,) = LaunchConfig.from_json((job / "v2" / "config.json").read_text()).launches
    # a warpgroup per y index: thread (x, y) is thread x of warpgroup y, as the accumulators' store takes it
    assert (launch.grid, launch.block, launch.shared_bytes) == ([16, 32, 1], [128, 2, 1], 3 * (128 + 256) * 128)
    gpu = (job / "v2" / "gpu.mlir").read_text()
    assert "!nvgpu.warpgroup.accumulator<fragmented = vector<64x256xf32>>" in gpu
    # warpgroup y reads A's tile from row 64 y (64 rows of 128 bytes further) and stores C's rows from 64 y
    assert "arith.constant 8192 : index" in gpu
    # into rows of 264 f32: 8 banks further each, a warp's 8 rows of fragments in two wavefronts, not eight
    assert re.search(r"memref\.subview %\w+\[%\w+, 0\] \[64, 256\] \[1, 1\] : memref<128x256xf32, strided<\[264, 1\]>", gpu)
    assert "to memref<128x264xf32, #gpu.address_space<workgroup>>" in gpu
    # the epilogue's 4 x f16 per row proven 8-byte aligned (workers/compile/passes/alignment.py): one store each,
    # not four st.global.b16 (1.09x, perf_targets_h200.md run 44)
    assert "st.global.v2.b32" in ptx and "st.global.b16" not in ptx


def test_bf16_matmuls_run_on_wgmma(tmp_path):
    job = tmp_path / "matmul4096_bf16"
    lower_model(str(BENCHMARKS / "matmul4096_bf16.py"), str(job))
    assert initial_params(str(job)).ops[0].tensor_core == "wgmma"
    result = compile_iteration(str(job), 0, initial_params(str(job)))
    assert result.ok, result.error
    assert (job / "v0" / "kernels.ptx").read_text().count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") == 4


def test_a_64_row_wgmma_tile_and_a_fused_relu(jobs):
    """The zoo's relu(a @ b) (256x512x256 f16) in 64x256 blocks, 3 steps in flight: one m64n256k16 per
    k16, the epilogue (ReLU, cast) over the warpgroup's 128 threads."""
    job = jobs / "matmul_f16"
    params = apply_edit(initial_params(str(job)), ScheduleEdit(2, "tensor_core", {
        **WGMMA, "block_tile": [64, 256], "pipeline_depth": 3}))
    result = compile_iteration(str(job), 20, params)
    assert result.ok, result.error
    ptx = (job / "v20" / "kernels.ptx").read_text()
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    assert "selp.b16" in ptx, "the ReLU: a half set to 0 where it is below"
    (launch,) = LaunchConfig.from_json((job / "v20" / "config.json").read_text()).launches
    assert (launch.grid, launch.block, launch.shared_bytes) == ([1, 4, 1], [128, 1, 1], 3 * (64 + 256) * 128)


@pytest.mark.parametrize("job, tf32, data", [("matmul_f16", False, "matmul_f16_wgmma_v0"),
                                              ("matmul_square", True, "matmul_square_tf32_wgmma_v0")])
def test_the_gpu_tests_wgmma_kernels_are_what_the_compile_stage_makes(jobs, job, tf32, data):
    """test_measure_gpu.py runs tests/data/measure/{data} on the GPU: the zoo's relu(a @ b) in 128x128
    blocks with 4 steps in flight, its TF32 1024^3 matmul in v0's TF32 wgmma tiles. After a change to the
    wgmma path, copy the new v23's config.json and kernels.ptx there (and run that test on the GPU node)."""
    params = initial_params(str(jobs / job), tf32=tf32)
    edit = TF32_WGMMA if tf32 else {**WGMMA, "thread_tile": [128, 128]}
    params = apply_edit(params, ScheduleEdit(params.ops[0].op_index, "tensor_core", edit))
    result = compile_iteration(str(jobs / job), 23, params)
    assert result.ok, result.error
    for name in ("config.json", "kernels.ptx"):
        assert (jobs / job / "v23" / name).read_text() == (MEASURE_DATA / data / name).read_text(), \
            f"{jobs / job / 'v23' / name} changed"


@pytest.mark.parametrize("edit, reason", [
    ({"block_tile": [64, 32]}, "a warpgroup's tile (thread_tile; zeros: the block's) is 64 rows by 64 or 128 or 256"),
    ({"block_tile": [128, 256]}, "or 128x128; not [128, 256]"),
    # two m64 halves of other than 128 columns: nvgpu.warpgroup.mma.store would put the second at the wrong rows
    ({"block_tile": [128, 64]}, "or 128x128; not [128, 64]"),
    ({"block_tile": [256, 128], "thread_tile": [64, 128]}, "stacks up to 2 warpgroup tiles of 64 rows"),
    ({"reduction_tile": 32}, "a wgmma K step of f16 is 64 elements"),
    ({"pipeline_depth": 1}, "promote_shared with pipeline_depth 2 or more"),
    ({"pipeline_depth": 9}, "pipeline_depth 9 needs at least that many K steps, K=512 has 8"),
    ({"thread_tile": [64, 64]}, "block_tile [128, 128] with warpgroups of [64, 64]"),
])
def test_wgmma_tiles_the_kernel_cannot_take_fail_at_the_schedule_stage(jobs, edit, reason):
    job = jobs / "matmul_f16"
    params = apply_edit(initial_params(str(job)), ScheduleEdit(2, "tensor_core", {**WGMMA, **edit}))
    shutil.rmtree(job / "v21", ignore_errors=True)
    result = compile_iteration(str(job), 21, params)
    assert not result.ok and result.stage == "schedule" and reason in result.error, result.error


def test_wgmma_needs_sm_90a(jobs):
    job = jobs / "matmul_f16"
    params = apply_edit(initial_params(str(job)), ScheduleEdit(2, "tensor_core", WGMMA))
    result = compile_iteration(str(job), 22, apply_edit(params, ScheduleEdit(-1, "chip", "sm_80")))
    assert not result.ok and "wgmma runs on sm_90a, not sm_80" in result.error, result.error
    assert initial_params(str(job), chip="sm_80").ops[0].tensor_core == "mma_sync"




def test_tf32_on_wgmma_reads_a_transposed_copy_of_b(jobs):
    """TF32 (a tf32 job's f32 matmul, 1024^3) on wgmma, which reads TF32 operands K-major only: a kernel of
    its own first copies B transposed (blocks of 32x8 threads through a padded 32x33 tile in shared
    memory) into a temporary buffer, whose rows of K the wgmma kernel copies by TMA as it does A's;
    32 of K per step in four m64n256k8 wgmmas, each leaving at most the step's four in flight."""
    square = jobs / "matmul_square"
    params = initial_params(str(square), tf32=True)
    params = apply_edit(params, ScheduleEdit(params.ops[0].op_index, "tensor_core", TF32_WGMMA))
    result = compile_iteration(str(square), 25, params)
    assert result.ok, result.error
    assert (result.kernel_count, result.kernel_families) == (2, ["copy", "matmul"])
    ptx = (square / "v25" / "kernels.ptx").read_text()
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n256k8\.f32\.tf32\.tf32 \{[^}]*\}, %rd\d+, %rd\d+, p, 1,  1;", ptx)
    assert len(mmas) == 4 == ptx.count("wgmma.mma_async")
    assert ptx.count("wgmma.wait_group.sync.aligned \t4;") == 4
    # A's 128 and B's 256 rows of 128 bytes per step: a box each, 3 steps issued
    assert ptx.count("cp.async.bulk.tensor.2d") == 3 * 2
    config = LaunchConfig.from_json((square / "v25" / "config.json").read_text())
    transpose, matmul = config.launches
    assert (transpose.grid, transpose.block) == ([32, 32, 1], [32, 8, 1])
    assert (matmul.block, matmul.shared_bytes) == ([128, 2, 1], 3 * (128 + 256) * 128)
    (copy,) = [b for b in config.buffers if b.role == "temporary"]
    assert copy.shape == [1024, 1024] and transpose.args[-1].buffer == copy.name
    # the wgmma kernel reads A and the copy through their tensor maps, B not at all
    maps = {b.name: b.tensor_map for b in config.buffers if b.role == "tensor_map"}
    assert [(m.buffer, m.box) for m in maps.values()] == [("arg0", [128, 32]), (copy.name, [256, 32])]
    assert set(maps) <= {arg.buffer for arg in matmul.args} and not {"arg0", "arg1", copy.name} & {arg.buffer for arg in matmul.args}


def test_tf32_on_wgmma_with_one_column_of_blocks_transposes_all_of_b(tmp_path):
    """N = 256, one block's columns: the kernel reads B whole (no view of it), and its copy whole."""
    job = tmp_path / "matmul_narrow"
    lower_model(str(MODELS / "matmul_narrow.py"), str(job))
    params = initial_params(str(job), tf32=True)
    params = apply_edit(params, ScheduleEdit(params.ops[0].op_index, "tensor_core", TF32_WGMMA))
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error
    transpose, matmul = LaunchConfig.from_json((job / "v0" / "config.json").read_text()).launches
    assert (transpose.grid, matmul.grid) == ([8, 16, 1], [1, 4, 1])


@pytest.mark.parametrize("edit, reason", [
    ({"reduction_tile": 64}, "a wgmma K step of f32 is 32 elements"),
    ({"block_tile": [128, 128, 0], "thread_tile": [128, 128, 0]}, "TF32 on wgmma takes warpgroups of 64 rows"),
])
def test_tf32_wgmma_tiles_the_kernel_cannot_take(jobs, edit, reason):
    square = jobs / "matmul_square"
    params = initial_params(str(square), tf32=True)
    params = apply_edit(params, ScheduleEdit(params.ops[0].op_index, "tensor_core", {**TF32_WGMMA, **edit}))
    shutil.rmtree(square / "v24", ignore_errors=True)
    result = compile_iteration(str(square), 24, params)
    assert not result.ok and reason in result.error, result.error


def test_tf32_jobs_run_f32_matmuls_on_tensor_cores(jobs):
    """A job that allows TF32 (submit --tf32): v0 of an f32 matmul is on mma.sync m16n8k8 with TF32
    operands, judged with TF32's tolerance; without it, v0 stays on f32 FMAs."""
    job = jobs / "matmul_square"
    assert initial_params(str(job)).ops[0].tensor_core == "none"
    params = initial_params(str(job), tf32=True)
    assert params.precision == "tf32" and params.ops[0].tensor_core == "mma_sync"
    result = compile_iteration(str(job), 5, params)
    assert result.ok, result.error
    ptx = (job / "v5" / "kernels.ptx").read_text()
    # a 64x64 warp tile is 4x8 mma tiles, 4 times per 32-wide K step staged in shared memory by cp.async
    s = params.ops[0]
    assert (s.thread_tile[:2], s.promote_shared, s.reduction_tile, s.pipeline_depth, s.copies_ahead) == \
        ([64, 64], True, 32, 2, True)
    assert ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 128 and "cp.async" in ptx
    assert [t for t in k_loop_accumulators(job / "v5") if t.startswith("vector")] == ["vector<2x2xf32>"] * 32
    # A's fragments come by ldmatrix (rows of 32 + 4 floats), B's by scalar loads (rows of 64 + 8 floats);
    # two steps in flight in three buffers, the copies issued before the step's mma
    gpu = (job / "v5" / "gpu.mlir").read_text()
    assert "memref<3x128x32xf32, strided<[4608, 36, 1]>" in gpu and "memref<3x32x64xf32, strided<[2304, 72, 1]>" in gpu
    assert k_loop_ptx(ptx).count("bar.sync") == 1
    config = LaunchConfig.from_json((job / "v5" / "config.json").read_text())
    assert (config.precision, config.atol) == ("tf32", 5e-3)


def test_copies_ahead_fill_a_spare_buffer_before_the_steps_mma(jobs):
    """copies_ahead: the staged tiles get one buffer more than the K steps in flight, and the copies of
    step i + depth, which go into the buffer the warps left at step i - 1, are issued before step i's mma:
    the K loop keeps one barrier, the one after the waits for step i's tiles. Without it the copies
    overwrite step i's own buffer, after the mma and a barrier: two barriers (the thread mapping's third,
    between A's copies and B's, is dropped either way: nothing reads shared memory between them). It
    needs a pipeline (pipeline_depth 2 or more)."""
    job = jobs / "matmul_f16"
    params = initial_params(str(job))
    (s,) = [s for s in params.ops if s.tensor_core == "mma_sync"]
    assert (s.block_tile, s.reduction_tile, s.pipeline_depth, s.copies_ahead) == ([128, 64], 32, 3, False)
    ahead = apply_edit(params, ScheduleEdit(s.op_index, "copies_ahead", True))
    loops, shared = [], []
    for version, schedule in [(10, params), (11, ahead)]:
        result = compile_iteration(str(job), version, schedule)
        assert result.ok, result.error
        loops.append(k_loop_ptx((job / f"v{version}" / "kernels.ptx").read_text()))
        (launch,) = LaunchConfig.from_json((job / f"v{version}" / "config.json").read_text()).launches
        shared.append(launch.shared_bytes)
    behind, ahead_loop = loops
    assert behind.count("bar.sync") == 2 and ahead_loop.count("bar.sync") == 1
    assert behind.rindex("cp.async.commit_group") > behind.rindex("mma.sync")
    assert ahead_loop.rindex("cp.async.commit_group") < ahead_loop.index("ldmatrix") < ahead_loop.index("mma.sync")
    for loop in loops:  # per iteration one step's copies (128x32 and 32x64 f16 over two warps' 64 threads)
        assert loop.count("cp.async.ca.shared.global") == (128 * 32 + 32 * 64) // 8 // 64 and loop.count("mma.sync") == 64
    # a fourth buffer of A (128 rows of 32 + 8 f16) and of B (32 rows of 64 + 8 f16)
    assert shared[1] - shared[0] == 128 * 40 * 2 + 32 * 72 * 2
    synchronous = apply_edit(ahead, ScheduleEdit(s.op_index, "pipeline_depth", 0))
    refused = compile_iteration(str(job), 12, synchronous)
    assert not refused.ok and refused.stage == "schedule" and "copies_ahead" in refused.error


def test_a_tf32_mlp_transposes_its_weights_then_runs_tensor_core_kernels(tmp_path_factory):
    """The zoo's MLP in a TF32 job: each f32 weight is transposed by a kernel of its own, then read by a
    tensor-core kernel whose staged tiles live in dynamic shared memory; the kernels share one PTX
    module, which declares the extern shared array once (the kernels of later modules brought theirs
    along into the first: before, that array was left behind and the lowering failed)."""
    job = lower_zoo(tmp_path_factory, "mlp") / "mlp"
    params = initial_params(str(job), tf32=True)
    assert [s.tensor_core for s in params.ops] == ["none", "mma_sync", "none", "mma_sync"]
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert ptx.count(".extern .shared .align 1024 .b8 __farm_dynamic_shared[];") == 1
    launches = LaunchConfig.from_json((job / "v0" / "config.json").read_text()).launches
    assert [launch.shared_bytes > 48 * 1024 for launch in launches] == [False, True, False, True]


def test_bf16_matmuls_run_on_tensor_cores_through_f16_fragments(tmp_path):
    """a @ b in bf16: convert-vector-to-gpu has no bf16 fragments, so the staged tiles are typed f16 for
    it (tensor_core_conversion.stage_bf16_as_f16) and bf16 again after it (tensor_core_conversion.restore_bf16_tiles), the ldmatrix fragments
    and the mma.sync with them: m16n8k16 with bf16 operands, v0's tiles as for f16, filled by cp.async
    bf16 to bf16; synchronous staging (pipeline_depth 0) loads them through registers."""
    job = tmp_path / "matmul4096_bf16"
    lower_model(str(BENCHMARKS / "matmul4096_bf16.py"), str(job))
    params = mma_sync_4096(job)
    (s,) = [s for s in params.ops if s.family == "matmul"]
    synchronous = apply_edit(params, ScheduleEdit(s.op_index, "pipeline_depth", 0))
    for version, schedule in enumerate([params, synchronous]):
        result = compile_iteration(str(job), version, schedule)
        assert result.ok, result.error
        ptx = (job / f"v{version}" / "kernels.ptx").read_text()
        # a 64x64 warp tile per K step of 64: 4 x 8 x 4 m16n8k16
        assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 128
        assert "f16.f16" not in ptx and "ldmatrix.sync.aligned" in ptx
        assert ("cp.async.commit_group" in ptx) == (version == 0) and bool(vector_loads(ptx)) == (version == 1)
        assert LaunchConfig.from_json((job / f"v{version}" / "config.json").read_text()).precision == "bf16"
    assert k_loop_accumulators(job / "v1") == ["vector<2x2xf32>"] * 32


def test_tiles_over_48_kb_of_shared_memory_live_in_dynamic_shared_memory(tmp_path):
    """128x128 blocks staged synchronously (one buffer per tile, K steps of 32): the f32 accumulator tile
    alone is 64 KB, over what static .shared arrays get, so the kernel's tiles become 128-byte-aligned views
    of one extern dynamic shared array and its launch asks for their total (the measure worker allows the
    kernel that much before launching it)."""
    job = tmp_path / "matmul4096_f16"
    lower_model(str(BENCHMARKS / "matmul4096_f16.py"), str(job))
    params = mma_sync_4096(job)
    (s,) = [s for s in params.ops if s.tensor_core == "mma_sync"]
    for field, value in [("block_tile", [128, 128]), ("pipeline_depth", 0), ("reduction_tile", 32)]:
        params = apply_edit(params, ScheduleEdit(s.op_index, field, value))
    result = compile_iteration(str(job), 1, params)
    assert result.ok, result.error
    ptx = (job / "v1" / "kernels.ptx").read_text()
    assert ".extern .shared .align 1024 .b8 __farm_dynamic_shared[];" in ptx
    assert not re.search(r"^\s*\.shared ", ptx, re.M), "no static shared arrays beside it"
    (launch,) = LaunchConfig.from_json((job / "v1" / "config.json").read_text()).launches
    # accumulator 128x(128+8) f32, A 128x(32+8) f16, B 32x(128+8) f16
    assert launch.shared_bytes == 128 * 136 * 4 + 128 * 40 * 2 + 32 * 136 * 2 > 48 * 1024
    assert ptx.count("mma.sync.aligned.m16n8k16") == 64 and launch.block == [128, 1, 1]
    # past the 227 KB a block of the H200 gets: the accumulator tile alone, or with the staged A and B tiles
    too_big = apply_edit(params, ScheduleEdit(s.op_index, "block_tile", [256, 256]))
    refused = compile_iteration(str(job), 2, too_big)
    assert not refused.ok and refused.stage == "schedule" and "over 232448" in refused.error
    too_big = apply_edit(apply_edit(params, ScheduleEdit(s.op_index, "block_tile", [128, 128])),
                         ScheduleEdit(s.op_index, "reduction_tile", 512))
    refused = compile_iteration(str(job), 3, too_big)
    assert not refused.ok and "need more shared memory than 232448 bytes" in refused.error
    # pipelined, the accumulator tile shares memory with the cp.async buffers: 256x128 blocks need the
    # larger of the two (136 KB against 2 x (A 256x(64+8) + B 64x(128+8)) f16), not their sum (242 KB)
    shared_buffers = mma_sync_4096(job)
    result = compile_iteration(str(job), 4, shared_buffers)
    assert result.ok, result.error
    (launch,) = LaunchConfig.from_json((job / "v4" / "config.json").read_text()).launches
    assert launch.shared_bytes == 256 * 136 * 4 > 2 * (256 * 72 + 64 * 136) * 2


def test_a_k_loop_shorter_than_the_pipeline_stages_it_cannot_fill(tmp_path):
    """K = 64: two K steps of 32 cannot fill v0's three cp.async stages (the pipeliner's precondition), so
    v0 stages synchronously; a pipeline as deep as the K steps compiles, a deeper one is refused at the
    schedule stage with the reason, and a single K step (no K loop) compiles staged."""
    job = tmp_path / "job"
    lower_model(str(MODELS / "matmul_f16_short_k.py"), str(job))
    params = initial_params(str(job))
    (s,) = [s for s in params.ops if s.tensor_core == "mma_sync"]
    assert (s.promote_shared, s.reduction_tile, s.pipeline_depth) == (True, 32, 0)
    cases = [({}, True), ({"pipeline_depth": 2}, True), ({"pipeline_depth": 3}, False),
             ({"reduction_tile": 64}, True)]
    for version, (fields, compiles) in enumerate(cases):
        edited = params
        for field, value in fields.items():
            edited = apply_edit(edited, ScheduleEdit(s.op_index, field, value))
        result = compile_iteration(str(job), version, edited)
        assert result.ok == compiles, (fields, result.error)
        if not compiles:
            assert result.stage == "schedule" and "pipeline_depth 3 needs at least 3 K steps" in result.error
    assert "cp.async" in (job / "v1" / "kernels.ptx").read_text()


def test_min_blocks_per_sm_caps_the_registers_through_ptxas(jobs):
    """min_blocks_per_sm asks ptxas to fit that many blocks per SM (.minnctapersm on the kernel's entry),
    which caps its registers per thread; outside 0..32 it fails at the schedule stage."""
    job = jobs / "matmul_f16"
    params = initial_params(str(job))
    op = params.ops[0].op_index
    result = compile_iteration(str(job), 8, apply_edit(params, ScheduleEdit(op, "min_blocks_per_sm", 3)))
    assert result.ok, result.error
    assert ".minnctapersm 3" in (job / "v8" / "kernels.ptx").read_text()
    assert compile_iteration(str(job), 10, params).ok
    assert ".minnctapersm" not in (job / "v10" / "kernels.ptx").read_text(), "ptxas's choice by default"
    refused = compile_iteration(str(job), 9, apply_edit(params, ScheduleEdit(op, "min_blocks_per_sm", 40)))
    assert not refused.ok and refused.stage == "schedule" and "min_blocks_per_sm must be 0..32" in refused.error
