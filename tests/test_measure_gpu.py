"""The measure worker on a real GPU: every failure class recorded cleanly by the parent, which then
measures a good iteration in the same process. Skipped, with the reason, where there is no GPU or
no pycuda (the CPU CI machines). Ran on the device tool's H200/H100 (benchmarks/results/measure_h200.md).

The good iteration is elementwise_chain v0 as the compile path produced it (tests/data/measure/
elementwise_chain_v0); the bad ones are edits of its config.json, plus one deliberately hanging
kernel (tests/data/measure/spin.ptx, test data only).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pytest

from workers.measure import gpu_unavailable, measure_iteration
from workers.records import BufferSpec, KernelArg, KernelLaunch, LaunchConfig

DATA = Path(__file__).parent / "data"
GOOD = DATA / "measure" / "elementwise_chain_v0"
POC = DATA / "poc_matmul"

pytestmark = pytest.mark.gpu
if gpu_unavailable():
    pytestmark = [pytest.mark.gpu, pytest.mark.skip(reason=f"GPU-only: {gpu_unavailable()}")]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """One job folder for all variants, so eager/torch.compile are timed once (reference_timing.json)."""
    job = tmp_path_factory.mktemp("measure_gpu") / "elementwise_chain"
    shutil.copytree(GOOD, job / "v0")
    shutil.copy(DATA / "zoo" / "elementwise_chain.py", job / "model.py")
    return job


def variant(job: Path, version: int, edit: Callable[[LaunchConfig], None], extra_ptx: str = "") -> None:
    config = LaunchConfig.from_json((GOOD / "config.json").read_text())
    edit(config)
    shutil.copytree(GOOD, job / f"v{version}")
    (job / f"v{version}" / "config.json").write_text(config.to_json(indent=2))
    (job / f"v{version}" / "kernels.ptx").write_text((GOOD / "kernels.ptx").read_text() + extra_ptx)


def test_an_illegal_address_is_recorded(job):
    # the input pointer replaced by address 16: the kernel's first load faults
    variant(job, 1, lambda c: c.launches[0].args.__setitem__(0, KernelArg("scalar", "i64", value=16)))
    result = measure_iteration(str(job), 1, timeout_s=120)
    assert result.status == "illegal_address", result.error
    assert "illegal memory access" in result.error and "\n" not in result.error and "status is illegal_address" in (job / "v1" / "ncu_summary.md").read_text()


def test_a_launch_error_is_recorded(job):
    variant(job, 2, lambda c: setattr(c.launches[0], "block", [2048, 1, 1]))  # over 1024 threads a block
    result = measure_iteration(str(job), 2, timeout_s=120)
    assert result.status == "launch_error", result.error
    assert "invalid argument" in result.error  # seen on the H100: "cuFuncSetBlockShape failed: invalid argument"


def test_a_hung_kernel_is_killed_at_the_timeout(job):
    def spin_first(c: LaunchConfig) -> None:
        c.buffers.append(BufferSpec("flag", "temporary", "i32", [1], "alloc"))  # zeros: never set
        c.launches.insert(0, KernelLaunch("spin_until_set", [1, 1, 1], [1, 1, 1], 0, [KernelArg("buffer", "i32", "flag")]))

    variant(job, 3, spin_first, (DATA / "measure" / "spin.ptx").read_text())
    result = measure_iteration(str(job), 3, timeout_s=20)
    assert result.status == "timeout", result.error
    assert "timeout" in (job / "v3" / "benchmark.md").read_text()


def test_a_wrong_result_is_recorded(job):
    variant(job, 4, lambda c: setattr(c.outputs[0], "buffer", "arg0"))  # compare the input to the output
    result = measure_iteration(str(job), 4, timeout_s=300)
    assert result.status == "wrong_result" and not result.correct and result.max_abs_err > 1e-3
    assert "FAIL" in (job / "v4" / "benchmark.md").read_text()


def test_after_all_that_a_good_iteration_is_checked_timed_and_profiled(job):
    result = measure_iteration(str(job), 0, timeout_s=300)
    assert result.status == "ok" and result.correct, result.error
    assert result.max_abs_err <= result.atol and result.time.median_us > 0 and result.eager.median_us > 0
    assert result.time.p20_us <= result.time.median_us <= result.time.p80_us and result.time.runs >= 20
    (kernel,) = result.kernels
    assert kernel.kernel == "forward_kernel" and kernel.duration_us > 0 and 0 < kernel.memory_throughput_pct <= 100
    # the kernel timed alone: the whole run's one launch
    assert list(result.kernel_us) == ["forward_kernel"]
    assert 0.5 < result.kernel_us["forward_kernel"] / result.time.median_us < 2
    assert (kernel.grid_size, kernel.block_size) == (64 * 256, 256)
    benchmark = (job / "v0" / "benchmark.md").read_text()
    assert "atol=0.0001, rtol=0.0001" in benchmark and "torch.compile" in benchmark
    assert "gpu__time_duration.sum" in (job / "v0" / "ncu_details.md").read_text()


def test_the_first_kernel_from_mlir(tmp_path):
    job = tmp_path / "poc_matmul"
    shutil.copytree(POC, job / "v0")
    shutil.copy(POC / "model.py", job / "model.py")
    result = measure_iteration(str(job), 0, timeout_s=300)
    assert result.correct, result.error  # its first launch computes relu(a @ b + c) right
    # it mallocs per-thread scratch it never frees: repeated timed launches may exhaust the device heap
    assert result.status == "ok" or (result.status == "illegal_address" and "device malloc" in result.error), result.error


BREADTH = sorted(p.name for p in (DATA / "measure" / "breadth").iterdir())


@pytest.mark.parametrize("name", BREADTH)
def test_each_class_of_model_v0_could_not_compile_before_is_correct(tmp_path, name):
    """tests/data/breadth's models as the compile stage makes them (test_compile_breadth.py checks it still
    does): a linear grid past three block loops, a loss to one value, a scalar input, a tanh-GELU's x ** 3, a
    GroupNorm, an odd row, a scan, a gather, a dilated conv, an RNN's state, a constant table, a strided
    output, reductions in two stages, a topk, a small bf16 matmul, a depthwise conv, matmuls with masked
    partial tiles (197 rows; 1000 x 700 x 67), a non-persistent buffer, a masked assignment, a scatter, a
    softmax over rows of 98304 (a row kernel in steps), causal attention (a row kernel over 4-D rows); each
    correct on every one of the 3 input draws."""
    job = tmp_path / name
    shutil.copytree(DATA / "measure" / "breadth" / name, job / "v0")
    shutil.copy(DATA / "breadth" / f"{name}.py", job / "model.py")
    result = measure_iteration(str(job), 0, timeout_s=300, timed=False)  # correctness only: no peers to time
    assert result.status == "ok" and result.correct and result.draws == 3, (result.status, result.error,
                                                                          result.max_abs_err)


@pytest.mark.parametrize("data, model, kernels", [
    # relu(a @ b) in f16 (256x512x256): one warpgroup per 128x128 block, 4 K steps of 64 in flight
    ("matmul_f16_wgmma_v0", "matmul_f16.py", [(4, 128)]),
    # a @ b in TF32 (1024^3): B's transposed copy, then two 64x256 warpgroups per block, 3 steps of 32
    ("matmul_square_tf32_wgmma_v0", "matmul_square.py", [(1024, 256), (32, 256)]),
])
def test_a_wgmma_kernel_computes_the_matmul(tmp_path, data, model, kernels):
    """wgmma kernels from tests/data/measure (what the compile stage makes of those schedules:
    test_compile_tensor_core.py checks it is still), 128-byte swizzled shared rows filled by TMA from the
    tensor maps the measure worker encodes."""
    job = tmp_path / model.removesuffix(".py")
    shutil.copytree(DATA / "measure" / data, job / "v0")
    shutil.copy(DATA / "zoo" / model, job / "model.py")
    result = measure_iteration(str(job), 0, timeout_s=300)
    assert result.status == "ok" and result.correct, result.error
    assert [(k.grid_size, k.block_size) for k in result.kernels] == kernels


def test_a_recurrent_models_launches_are_checked_and_timed_as_one_cuda_graph(tmp_path):
    """long_lstm's forward is a host loop of small launches, once per time step: issued one by one from
    Python they took longer than the GPU ran them, so the run timed the CPU. The measure worker captures every
    launch, in the host's order, into one CUDA graph (workers/measure/graph.py), checks its outputs on each
    input draw and times its replays."""
    from workers.measure.launch import launch_order

    job = tmp_path / "long_lstm"
    shutil.copytree(DATA / "measure" / "breadth" / "long_lstm", job / "v0")
    shutil.copy(DATA / "breadth" / "long_lstm.py", job / "model.py")
    config = LaunchConfig.from_json((job / "v0" / "config.json").read_text())
    assert config.loops and len(launch_order(config)) > len(config.launches)
    result = measure_iteration(str(job), 0, profile=False, timeout_s=300)
    assert result.status == "ok" and result.correct and result.draws == 3, result.error
    assert result.launched_as == f"one CUDA graph of {len(launch_order(config))} launches"
    assert result.time.median_us > 0 and "one CUDA graph" in (job / "v0" / "benchmark.md").read_text()
