"""Measure worker on a machine without a GPU: config checks, argument packing, the NCU CSV parser on
CSV recorded on the H200, the reports, and the skip path. The GPU paths themselves ran on the H200
(benchmarks/results/measure_h200.md); test_gpu_* here run only where a GPU and pycuda are."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from workers.measure import gpu_unavailable, measure_iteration, report
from workers.measure.gpu_run import RunOutcome, _classify
from workers.measure.launch import ConfigError, check_config, pack_args, pathological_launches
from workers.measure.ncu import NcuError, _unknown_metrics, parse_csv
from workers.measure.timing import summarize
from workers.records import LaunchConfig, MeasureResult, Timing

DATA = Path(__file__).parent / "data"
POC = DATA / "poc_matmul"


def poc_config() -> LaunchConfig:
    return LaunchConfig.from_json((POC / "config.json").read_text())


def test_hand_written_config_of_the_first_kernel_is_valid():
    config = poc_config()
    check_config(config)
    assert [l.kernel for l in config.launches] == ["forward_kernel"]
    assert not pathological_launches(config)


def test_arguments_are_packed_as_the_bare_pointer_abi_wants():
    config = poc_config()
    pointers = {b.name: 0x7F0000000000 + 0x1000 * i for i, b in enumerate(config.buffers)}
    args = pack_args(config.launches[0], pointers)
    assert [type(a) for a in args] == [np.uintp] * 4 + [np.float32]
    assert [int(a) for a in args[:4]] == [pointers[a.buffer] for a in config.launches[0].args[:4]]
    assert np.dtype(type(args[4])).itemsize == 4 and float(args[4]) == 0.0


def test_unknown_buffer_and_bad_constants_are_config_errors():
    config = poc_config()
    with pytest.raises(ConfigError):
        pack_args(config.launches[0], {})
    config.buffers[0].role, config.buffers[0].values = "constant", [1.0]
    with pytest.raises(ConfigError):
        check_config(config)


def test_block_size_one_with_a_huge_grid_is_refused(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(POC, job / "v0")
    config = poc_config()
    config.launches[0].block, config.launches[0].grid = [1, 1, 1], [131072, 1, 1]
    (job / "v0" / "config.json").write_text(config.to_json())
    (job / "v0" / "compile_result.json").write_text(json.dumps({"ok": True, "stage": "done"}))
    assert pathological_launches(config)
    if gpu_unavailable() is None:
        result = measure_iteration(str(job), 0)
        assert result.status == "pathological_launch"


def test_without_a_gpu_every_file_is_written_with_the_reason(tmp_path):
    if gpu_unavailable() is None:
        pytest.skip("this machine has a GPU and pycuda: the skip path does not apply")
    job = tmp_path / "job"
    shutil.copytree(POC, job / "v0")
    (job / "v0" / "compile_result.json").write_text(json.dumps({"ok": True, "stage": "done"}))
    result = measure_iteration(str(job), 0)
    assert result.status == "skipped" and "pycuda" in result.error
    for name in ("benchmark.md", "ncu_summary.md", "ncu_details.md"):
        text = (job / "v0" / name).read_text()
        assert "n/a: not measured" in text and "pycuda" in text


def test_an_iteration_that_did_not_compile_is_not_measured(tmp_path):
    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / "compile_result.json").write_text(json.dumps({"ok": False, "stage": "transform"}))
    result = measure_iteration(str(tmp_path), 3)
    assert result.status == "skipped" and "failed to compile at stage transform" in result.error
    assert "not measured" in (tmp_path / "v3" / "benchmark.md").read_text()


def test_ncu_csv_recorded_on_the_h200_parses_into_kernel_metrics():
    kernels = parse_csv((DATA / "measure" / "ncu_raw_mlp_h200.csv").read_text())
    assert [k.kernel for k in kernels] == ["forward_kernel", "forward_kernel_0", "forward_kernel_1", "forward_kernel_2"]
    first = kernels[0]
    assert first.duration_us == pytest.approx(4.768)  # 4,768 ns in the CSV
    assert (first.sm_throughput_pct, first.memory_throughput_pct) == (16.36, 47.74)
    assert (first.grid_size, first.block_size, first.registers_per_thread) == (2048, 256, 16)
    assert first.waves_per_sm == pytest.approx(1.94) and first.sectors_per_request == 32.0
    assert kernels[3].grid_size == 16 and kernels[3].waves_per_sm < 0.05  # the small-grid matmul


@pytest.mark.parametrize("name", ["conv_bn_relu", "small_cnn"])
def test_every_recorded_profile_parses(name):
    kernels = parse_csv((DATA / "measure" / f"ncu_raw_{name}_h200.csv").read_text())
    assert kernels and all(k.duration_us > 0 and 0 <= k.sm_throughput_pct <= 100 for k in kernels)


def test_ncu_output_without_kernels_or_with_unknown_metrics():
    with pytest.raises(NcuError):
        parse_csv("==PROF== Disconnected\n")
    assert _unknown_metrics("==ERROR== Failed to find metric sm__pipe_tensor_op_hmma_cycles_active.avg") == \
        ["sm__pipe_tensor_op_hmma_cycles_active.avg"]


def test_errors_are_classified():
    assert _classify(RuntimeError("cuCtxSynchronize failed: an illegal memory access was encountered")) == "illegal_address"
    assert _classify(RuntimeError("cuLaunchKernel failed: too many resources requested for launch")) == "launch_error"
    assert _classify(ValueError("buffer arg0: the model gives [2] float32")) == "error"


def test_timing_summary_is_median_and_quantiles():
    t = summarize([float(x) for x in range(1, 101)])
    assert (t.median_us, t.p20_us, t.p80_us, t.runs) == (50.5, 21.0, 81.0, 100)


def test_benchmark_report_states_tolerance_and_speedups(tmp_path):
    (tmp_path / "v1").mkdir()
    result = MeasureResult(version=1, status="ok", device="NVIDIA H200", correct=True, max_abs_err=1e-6,
                           max_rel_err=1e-5, atol=1e-4, rtol=1e-4, time=Timing(10.0, 9.0, 11.0, 50),
                           eager=Timing(20.0, 19.0, 21.0, 50), compiled=None)
    report.write_benchmark(str(tmp_path), result, "BackendCompilerFailed: x")
    text = (tmp_path / "v1" / "benchmark.md").read_text()
    assert "atol=0.0001, rtol=0.0001" in text and "2.000x" in text and "BackendCompilerFailed" in text
    report.write_ncu(str(tmp_path), 1, parse_csv((DATA / "measure" / "ncu_raw_mlp_h200.csv").read_text()), "raw", [])
    assert (tmp_path / "v1" / "ncu_summary.md").read_text().count("forward_kernel") == 4


def test_run_outcome_round_trips_as_json():
    outcome = RunOutcome(status="wrong_result", device="NVIDIA H200", time=Timing(1.0, 1.0, 1.0, 1))
    assert RunOutcome.from_json(outcome.to_json()) == outcome


@pytest.mark.gpu
def test_gpu_measures_the_first_kernel(tmp_path):
    reason = gpu_unavailable()
    if reason:
        pytest.skip(f"GPU-only: {reason}")
    job = tmp_path / "job"
    shutil.copytree(POC, job / "v0")
    shutil.copy(POC / "model.py", job / "model.py")
    (job / "v0" / "compile_result.json").write_text(json.dumps({"ok": True, "stage": "done"}))
    result = measure_iteration(str(job), 0)
    assert result.status == "ok" and result.correct and result.time.median_us > 0
