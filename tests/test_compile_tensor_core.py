"""Tensor cores from the schedule: an f16 matmul compiles to mma.sync that ptxas accepts, and a
tensor_core schedule the kernel cannot take fails at the schedule stage with the reason.

v0 does not use tensor cores: a matmul whose epilogue is only the f32->f16 cast (a @ b in f16, e.g.
benchmarks/models/matmul4096_f16.py) fails in convert-vector-to-gpu ("unhandled vector to mma type:
arith.truncf"), while the zoo's matmul + ReLU compiles."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from workers.compile import apply_edit, compile_iteration, initial_params
from workers.frontend import lower_model
from workers.records import LaunchConfig, ScheduleEdit

ZOO = Path(__file__).parent / "data" / "zoo"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out = tmp_path_factory.mktemp("jobs")
    for name in ("matmul_f16", "elementwise_chain"):
        lower_model(str(ZOO / f"{name}.py"), str(out / name))
    return out


def mma_params(job: Path, block_tile=(64, 64), thread_tile=(32, 32), reduction_tile=16):
    params = initial_params(str(job))
    op = params.ops[0].op_index
    for field, value in [("block_tile", list(block_tile)), ("thread_tile", list(thread_tile)),
                         ("reduction_tile", reduction_tile), ("tensor_core", "mma_sync")]:
        params = apply_edit(params, ScheduleEdit(op, field, value))
    return params


def test_switching_tensor_cores_on_is_one_edit(jobs):
    """The advisor's edit: v0's thread tile is no warp tile, so the compile stage picks 32x32 warps."""
    job = jobs / "matmul_f16"
    params = initial_params(str(job))
    assert params.ops[0].tensor_core == "none", "v0 stays on CUDA cores (see the module doc)"
    result = compile_iteration(str(job), 3, apply_edit(params, ScheduleEdit(2, "tensor_core", "mma_sync")))
    assert result.ok, result.error
    assert "mma.sync.aligned.m16n8k16" in (job / "v3" / "kernels.ptx").read_text()


def test_f16_matmul_runs_on_tensor_cores(jobs):
    job = jobs / "matmul_f16"
    result = compile_iteration(str(job), 0, mma_params(job))
    assert result.ok, result.error
    ptx = (job / "v0" / "kernels.ptx").read_text()
    # f16 operands, f32 accumulators as torch-mlir's IR has them; 2x4 mma tiles per warp and K step
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 8
    assert ".shared .align 64 .b8 __farm_shared_0[16384]" in ptx, "the 64x64 f32 accumulator tile"
    if shutil.which("ptxas"):  # compile_iteration already ran it; this says so explicitly
        done = subprocess.run(["ptxas", "-arch=sm_90a", str(job / "v0" / "kernels.ptx"), "-o", "/dev/null"])
        assert done.returncode == 0
    (launch,) = LaunchConfig.from_json((job / "v0" / "config.json").read_text()).launches
    assert (launch.grid, launch.block) == ([4, 4, 1], [128, 1, 1]), "64x64 blocks of four warps"


def test_warp_tile_and_k_step_are_schedule_knobs(jobs):
    job = jobs / "matmul_f16"
    result = compile_iteration(str(job), 1, mma_params(job, (128, 64), (64, 32), 32))
    assert result.ok, result.error
    transform = (job / "v1" / "transform.mlir").read_text()
    assert "num_threads [2, 2, 0] (mapping = [#gpu.warp<linear_dim_1>, #gpu.warp<linear_dim_0>])" in transform
    assert "tile_sizes [0, 0, 32]" in transform
    # a 64x32 warp tile is 4x4 mma tiles, twice per 32-wide K step
    assert (job / "v1" / "kernels.ptx").read_text().count("mma.sync.aligned.m16n8k16") == 32


@pytest.mark.parametrize("job, field, value, reason", [
    ("elementwise_chain", "tensor_core", "mma_sync", "tensor_core applies to a linalg.matmul kernel"),
    ("matmul_f16", "block_tile", [64, 12], "block_tile [64, 12] must divide the output 256x256"),
    ("matmul_f16", "block_tile", [8, 8], "block_tile [8, 8] is no multiple of the 16x8 mma tile"),
    ("matmul_f16", "tensor_core", "wmma", "tensor_core must be 'none' or 'mma_sync'"),
])
def test_tensor_cores_where_they_do_not_apply_fail_at_the_schedule_stage(jobs, job, field, value, reason):
    params = initial_params(str(jobs / job))
    op = params.ops[0].op_index
    params = apply_edit(params, ScheduleEdit(op, "tensor_core", "mma_sync"))
    shutil.rmtree(jobs / job / "v2", ignore_errors=True)
    result = compile_iteration(str(jobs / job), 2, apply_edit(params, ScheduleEdit(op, field, value)))
    assert not result.ok and result.stage == "schedule" and reason in result.error, result.error
