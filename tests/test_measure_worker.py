"""Measure worker on a machine without a GPU: config checks, argument packing, the NCU CSV parser on
CSV recorded on the H200, the reports, and the skip path. The GPU paths themselves ran on the H200
(benchmarks/results/measure_h200.md); test_gpu_* here run only where a GPU and pycuda are."""
from __future__ import annotations

import copy
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from workers.measure import gpu_unavailable, measure_batch, measure_iteration, report
from workers.measure.gpu_run import Lap, RunOutcome, _classify
from workers.compile.memory_plan import share_dead_temporaries
from workers.measure.launch import (ConfigError, allocation_order, calls_device_malloc, check_config, launch_order,
                                    launch_runs, model_file, pack_args, parameter_buffer, pathological_launches)
from workers.process import run_in_group
from workers.measure.ncu import NcuError, _unknown_metrics, parse_csv
from workers.measure.tensor_map import tiled_arguments
from workers.measure.timing import LAUNCH_HEADSTART_CYCLES, summarize, time_gpu
from workers.records import BufferSpec, HostLoop, KernelArg, KernelLaunch, LaunchConfig, MeasureResult, Timing

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


def test_scalars_are_packed_with_the_width_of_their_ptx_parameter():
    config = poc_config()
    launch = config.launches[0]
    launch.args = [KernelArg("scalar", "index", value=7), KernelArg("scalar", "i32", value=-2),
                   KernelArg("scalar", "f64", value=0.5), KernelArg("buffer", "f32", buffer="arg0")]
    packed = pack_args(launch, {"arg0": 0x7F0012345600})
    assert [a.tobytes() for a in packed] == [(7).to_bytes(8, "little"), (-2).to_bytes(4, "little", signed=True),
                                             np.float64(0.5).tobytes(), (0x7F0012345600).to_bytes(8, "little")]


def test_a_relative_model_path_is_taken_from_the_job_folder():
    config = poc_config()
    assert model_file("/jobs/mlp", config) == "/jobs/mlp/model.py"
    config.model_path = "/models/mlp.py"
    assert model_file("/jobs/mlp", config) == "/models/mlp.py"


def test_unknown_buffer_and_bad_constants_are_config_errors():
    config = poc_config()
    with pytest.raises(ConfigError):
        pack_args(config.launches[0], {})
    config.buffers[0].role, config.buffers[0].values = "constant", [1.0]
    with pytest.raises(ConfigError):
        check_config(config)
    for edit in (lambda l: setattr(l.args[4], "value", None), lambda l: setattr(l.args[0], "buffer", "nope"),
                 lambda l: setattr(l, "block", [16, 16]), lambda l: setattr(l, "grid", [0, 4, 1])):
        config = poc_config()
        edit(config.launches[0])
        with pytest.raises(ConfigError):
            check_config(config)


def looped_config(*loops: HostLoop) -> LaunchConfig:
    """The first kernel launched as k0..k5 around the host loops given; k2 takes loop 0's index."""
    config = poc_config()
    config.launches = [copy.deepcopy(config.launches[0]) for _ in range(6)]
    for i, launch in enumerate(config.launches):
        launch.kernel = f"k{i}"
    config.launches[2].args.append(KernelArg("loop_index", "i64", loop=0))
    config.loops = list(loops)
    return config


def test_a_host_loops_launches_run_once_per_index_in_order():
    config = looped_config(HostLoop(first=1, end=3, start=6, step=-2, trip_count=3),
                           HostLoop(first=4, end=5, start=0, step=1, trip_count=2))
    check_config(config)
    assert launch_order(config) == [(0, {}), (1, {0: 6}), (2, {0: 6}), (1, {0: 4}), (2, {0: 4}), (1, {0: 2}),
                                    (2, {0: 2}), (3, {}), (4, {1: 0}), (4, {1: 1}), (5, {})]
    # a profiler sees each launch once, in launch order: one KernelMetrics per launch of config.json
    assert launch_order(config, first_index_only=True) == [(0, {}), (1, {0: 6}), (2, {0: 6}), (3, {}), (4, {1: 0}),
                                                           (5, {})]
    # the profile of each launch counts for its runs in a forward (the advisor weighs kernels by it)
    assert launch_runs(config) == [1, 3, 3, 1, 2, 1]
    config.loops = []
    assert launch_order(config) == [(i, {}) for i in range(6)]


def test_each_kernel_is_timed_alone_with_all_its_launches(monkeypatch):
    """Runner.time_kernels with a stand-in for the GPU's timer (this machine has no GPU): a loop's kernel is timed
    with every launch of it, at every index, in order, apart from the other kernels."""
    from workers.measure import gpu_run, timing

    config = looped_config(HostLoop(first=1, end=3, start=6, step=-2, trip_count=3))
    runner = gpu_run.Runner.__new__(gpu_run.Runner)
    runner.config = config
    runner.launches = [(config.launches[i].kernel, indices) for i, indices in launch_order(config)]  # stand-ins
    queued = []
    runner.run = queued.append

    def stand_in_timer(fn, runs, warmup):  # the "time" of a run: how many launches it queued
        fn()
        return Timing(median_us=float(len(queued[-1])), p20_us=0, p80_us=0, runs=runs)

    monkeypatch.setattr(timing, "time_gpu", stand_in_timer)
    times = runner.time_kernels()
    assert times == {"k0": 1.0, "k1": 3.0, "k2": 3.0, "k3": 1.0, "k4": 1.0, "k5": 1.0}
    assert queued[1] == [("k1", {0: 6}), ("k1", {0: 4}), ("k1", {0: 2})]


def test_a_recurrent_layers_thousands_of_launches_are_profiled_once_each():
    """A 512-step loop of 5 kernels launches 2560 times per forward; ncu's run (gpu_run --once) launches
    each of them once."""
    config = looped_config(HostLoop(first=0, end=5, start=0, step=1, trip_count=512))
    assert len(launch_order(config)) == 512 * 5 + 1
    assert [i for i, _ in launch_order(config, first_index_only=True)] == list(range(6))


def test_a_loop_index_argument_is_packed_as_its_loops_current_index_in_64_bits():
    launch = looped_config().launches[2]
    pointers = {a.buffer: 0x7F0000000000 for a in launch.args if a.kind == "buffer"}
    index = pack_args(launch, pointers, {0: 511})[-1]
    assert type(index) is np.int64 and index.tobytes() == (511).to_bytes(8, "little")
    with pytest.raises(ConfigError, match="host loop 0"):
        pack_args(launch, pointers)  # run outside its loop: no index to pass
    launch.args[-1].dtype = "i32"  # the kernel's parameter is an i64
    with pytest.raises(ConfigError, match="64-bit"):
        pack_args(launch, pointers, {0: 511})


def test_the_parameters_of_a_launch_are_packed_once_at_their_natural_alignment():
    """The bytes pycuda's Function.__call__ would pack on every launch, made once per launch and index."""
    launch = looped_config().launches[2]
    pointers = {a.buffer: 0x7F0000000010 + i for i, a in enumerate(launch.args) if a.kind == "buffer"}
    args = pack_args(launch, pointers, {0: 511})
    assert parameter_buffer(args) == b"".join(int(a).to_bytes(8, "little") for a in args)
    mixed = [np.uintp(0x7F0000000010), np.int32(-3), np.int64(5), np.float16(1.5), np.bool_(True)]
    packed = parameter_buffer(mixed)
    assert len(packed) == 27  # the i64 after the i32 starts at byte 16, as in the kernel's parameter space
    assert packed[8:12] == (-3).to_bytes(4, "little", signed=True) and packed[12:16] == bytes(4)
    assert packed[16:24] == (5).to_bytes(8, "little") and packed[24:26] == np.float16(1.5).tobytes()
    assert packed[26:] == b"\x01"


@pytest.mark.parametrize("loops, problem", [
    ([HostLoop(first=2, end=2, start=0, step=1, trip_count=4)], "launches of their own"),
    ([HostLoop(first=1, end=7, start=0, step=1, trip_count=4)], "launches of their own"),
    ([HostLoop(first=-1, end=3, start=0, step=1, trip_count=4)], "launches of their own"),
    ([HostLoop(first=1, end=4, start=0, step=1, trip_count=4), HostLoop(first=3, end=5, start=0, step=1, trip_count=4)],
     "none overlapping"),
    ([HostLoop(first=1, end=3, start=0, step=1, trip_count=4), HostLoop(first=0, end=1, start=0, step=1, trip_count=4)],
     "in launch order"),
    ([HostLoop(first=1, end=3, start=0, step=1, trip_count=0)], "at least one index"),
    ([HostLoop(first=1, end=3, start=0, step=0, trip_count=4)], "nonzero step"),
    ([HostLoop(first=3, end=5, start=0, step=1, trip_count=4)], "host loop 0, which does not run"),  # k2 outside
    ([], "host loop 0, which does not run"),
])
def test_host_loops_that_cannot_run_are_config_errors(loops, problem):
    check_config(looped_config(HostLoop(first=1, end=3, start=0, step=1, trip_count=4)))
    with pytest.raises(ConfigError, match=problem):
        check_config(looped_config(*loops))


def test_a_loop_index_naming_a_loop_around_other_launches_is_a_config_error():
    config = looped_config(HostLoop(first=1, end=3, start=0, step=1, trip_count=4),
                           HostLoop(first=4, end=6, start=0, step=1, trip_count=4))
    config.launches[2].args[-1].loop = 1
    with pytest.raises(ConfigError, match="host loop 1, which does not run"):
        check_config(config)
    config.launches[4].args.append(KernelArg("loop_index", "index", loop=1))
    config.launches[2].args[-1].loop = 0
    check_config(config)


def test_a_temporary_a_host_loop_uses_keeps_its_memory_over_the_whole_loop():
    """The hidden state h, updated in place by the loop's first launch, is read again by the next time
    step: the temporary s of the loop's second launch must not take h's memory, as it may in straight-line
    code where h is dead after its last launch; what runs after the loop still takes a dead one's."""
    def plan(loops: list[HostLoop]) -> dict[str, str | None]:
        buffers = [BufferSpec(name, "temporary", "f32", [256], "alloc") for name in ("p", "h", "s", "q")]
        launches = [KernelLaunch(f"k{i}", [1, 1, 1], [256, 1, 1], 0, [KernelArg("buffer", "f32", buffer=name)])
                    for i, name in enumerate(("p", "h", "s", "q"))]
        share_dead_temporaries(buffers, launches, loops)
        return {b.name: b.storage for b in buffers}

    assert plan([]) == {"p": None, "h": "p", "s": "p", "q": "p"}
    assert plan([HostLoop(first=1, end=3, start=0, step=1, trip_count=512)]) == \
        {"p": None, "h": "p", "s": None, "q": "p"}


WGMMA_DATA = DATA / "measure" / "matmul_f16_wgmma_v0"


def wgmma_config() -> LaunchConfig:
    """The GPU test's wgmma kernel: it reads A and B through tensor maps (map3, map4) of arg0 and arg1."""
    return LaunchConfig.from_json((WGMMA_DATA / "config.json").read_text())


def test_a_tensor_map_becomes_the_drivers_arguments_innermost_first():
    (a_map, b_map) = [b.tensor_map for b in wgmma_config().buffers if b.role == "tensor_map"]
    args = tiled_arguments(a_map, 0x7F0000000000)
    # A (256x512 f16): 512 contiguous elements per row of 1024 bytes, boxes of 64 x 128 rows, 128-byte swizzle
    assert (args.dims, args.strides_bytes, args.box) == ([512, 256], [1024], [64, 128])
    assert (args.data_type, args.swizzle, args.l2_promotion, args.address) == (6, 3, 0, 0x7F0000000000)
    b_map.offset = 64 * 256  # a view of B (512x256) from row 64: the map starts there
    assert tiled_arguments(b_map, 0x7F0000000000).address == 0x7F0000000000 + 2 * 64 * 256


@pytest.mark.parametrize("edit, problem", [
    (lambda m: setattr(m, "offset", 3), "multiples of 16 bytes"),
    (lambda m: setattr(m, "box", [128, 128]), "exceeds its 128-byte swizzle"),
    (lambda m: setattr(m, "box", [512, 64]), "a box of 1 to 256 elements"),
    (lambda m: setattr(m, "strides", [512, 2]), "the innermost contiguous"),
])
def test_a_tensor_map_tma_cannot_take_is_a_config_error(edit, problem):
    config = wgmma_config()
    edit(next(b.tensor_map for b in config.buffers if b.role == "tensor_map"))
    with pytest.raises(ConfigError, match=problem):
        check_config(config)


def test_a_tensor_map_must_describe_a_buffer_listed_before_it():
    config = wgmma_config()
    config.buffers.insert(0, config.buffers.pop(next(i for i, b in enumerate(config.buffers) if b.role == "tensor_map")))
    with pytest.raises(ConfigError, match="describes no buffer listed before it"):
        check_config(config)


def test_a_kernel_that_calls_device_malloc_is_recognised():
    assert calls_device_malloc((POC / "kernels.ptx").read_text())
    assert not calls_device_malloc((DATA / "measure" / "elementwise_chain_v0" / "kernels.ptx").read_text())


def _job(tmp_path: Path, config: LaunchConfig | None = None) -> Path:
    """A job folder holding the first kernel as v0 (its model one level up, as the frontend puts it)."""
    job = tmp_path / "job"
    shutil.copytree(POC, job / "v0")
    shutil.copy(POC / "model.py", job / "model.py")
    if config is not None:
        (job / "v0" / "config.json").write_text(config.to_json())
    return job


def test_block_size_one_with_a_huge_grid_is_refused_before_anything_runs(tmp_path):
    config = poc_config()
    config.launches[0].block, config.launches[0].grid = [1, 1, 1], [131072, 1, 1]
    job = _job(tmp_path, config)
    result = measure_iteration(str(job), 0)  # refused on any node: a GPU is not even looked for
    assert result.status == "pathological_launch" and "forward_kernel" in result.error
    for name in report.FILES:
        assert "block size 1 with a huge grid" in (job / "v0" / name).read_text()
    config.launches[0].grid = [4096, 1, 1]  # one thread per block over few blocks is merely slow
    assert not pathological_launches(config)


@pytest.mark.parametrize("text", ["{not json", json.dumps({"model_path": "model.py"}), ""])
def test_an_unreadable_config_is_an_error_not_a_traceback(tmp_path, text):
    job = _job(tmp_path)
    (job / "v0" / "config.json").write_text(text)
    result = measure_iteration(str(job), 0)
    assert result.status == "error" and result.error.startswith("config.json: ")
    assert "config.json" in (job / "v0" / "ncu_details.md").read_text()


def test_without_a_gpu_every_file_is_written_with_the_reason(tmp_path):
    if gpu_unavailable() is None:
        pytest.skip("this machine has a GPU and pycuda: the skip path does not apply")
    job = _job(tmp_path)  # a hand-made job: config.json and kernels.ptx, no compile_result.json
    result = measure_iteration(str(job), 0)
    assert result.status == "skipped" and "pycuda is not installed" in result.error and "gpu extra" in result.error
    for name in report.FILES:
        text = (job / "v0" / name).read_text()
        assert "n/a: not measured" in text and "pycuda" in text


def test_an_iteration_that_did_not_compile_is_not_measured(tmp_path):
    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / "compile_result.json").write_text(json.dumps({"ok": False, "stage": "transform"}))
    result = measure_iteration(str(tmp_path), 3)
    assert result.status == "skipped" and "failed to compile at stage transform" in result.error
    assert "not measured" in (tmp_path / "v3" / "benchmark.md").read_text()
    (tmp_path / "v4").mkdir()
    result = measure_iteration(str(tmp_path), 4)
    assert result.status == "skipped" and "no config.json or kernels.ptx" in result.error


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


def test_every_listed_metric_comes_out_of_a_real_h100_profile():
    # CSV lines of `ncu --csv --page raw` around the worker's own runs on an H100 (2026-12-02)
    (f16,) = parse_csv((DATA / "measure" / "ncu_raw_matmul_f16_h100.csv").read_text())
    assert all(v is not None for v in f16.to_dict().values())  # DESIGN.md's list, all collected
    assert (f16.duration_us, f16.sm_throughput_pct, f16.memory_throughput_pct) == (167.52, 2.0, 1.81)
    assert (f16.grid_size, f16.block_size, f16.registers_per_thread, f16.waves_per_sm) == (16, 256, 40, 0.02)
    assert (f16.achieved_occupancy_pct, f16.theoretical_occupancy_pct, f16.stall_long_scoreboard) == (12.56, 75.0, 9.62)
    (ew,) = parse_csv((DATA / "measure" / "ncu_raw_elementwise_chain_h100.csv").read_text())
    assert ew.duration_us == pytest.approx(15.776) and (ew.sm_throughput_pct, ew.dram_throughput_pct) == (48.3, 34.99)
    assert ew.grid_size == 64 * 256 and ew.sectors_per_request == 4.0 and ew.l2_hit_rate_pct == 52.06


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


class RecordingTorch:
    """TEST DOUBLE of the torch calls time_gpu makes (no GPU here): each enqueues a named step on a
    pretend stream, which the test reads back in order."""

    float32 = "float32"

    def __init__(self):
        self.stream = []
        self.cuda = self

    def empty(self, *shape, **kw):
        torch_double = self

        class Flush:
            def zero_(self):
                torch_double.stream.append("flush")
        return Flush()

    def _sleep(self, cycles):
        self.stream.append(f"sleep {cycles}")

    def synchronize(self):
        pass

    def Event(self, enable_timing):
        torch_double = self

        class Event:
            def record(self):
                torch_double.stream.append("event")

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return 0.001
        return Event()


def test_each_timed_run_starts_after_its_launches_are_queued(monkeypatch):
    """The GPU spins between the L2 flush and the start event while the CPU queues the run: the interval
    between the events holds the run's kernels only, not the CPU's time to issue them."""
    torch_double = RecordingTorch()
    monkeypatch.setitem(sys.modules, "torch", torch_double)
    timing = time_gpu(lambda: torch_double.stream.append("run"), runs=3, warmup=1)
    run = ["flush", f"sleep {LAUNCH_HEADSTART_CYCLES}", "event", "run", "event"]
    assert torch_double.stream == ["run"] + run * 3 and timing.runs == 3 and timing.median_us == 1.0
    assert LAUNCH_HEADSTART_CYCLES >= 1_000_000  # at least 0.5 ms at 1.98 GHz: a small network's launches


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
    outcome = RunOutcome(status="wrong_result", device="NVIDIA H200", time=Timing(1.0, 1.0, 1.0, 1),
                         seconds={"load": 4.2, "check": 1.5})
    assert RunOutcome.from_json(outcome.to_json()) == outcome


def test_the_gpu_childs_steps_are_timed_one_after_another():
    """Each lap records the wall time since the one before it, under its step's name (the harness prints
    them per problem: where a measurement's seconds go)."""
    seconds: dict[str, float] = {}
    lap = Lap(seconds)
    time.sleep(0.05)
    lap("load")
    lap("check")
    assert list(seconds) == ["load", "check"] and seconds["load"] >= 0.05 > seconds["check"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead, just not reaped
    except FileNotFoundError:
        return False


def test_a_timeout_kills_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(TimeoutError, match="ran past"):  # like ncu, the shell has a child of its own
        run_in_group(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], 1.0)
    grandchild = int(pid_file.read_text())
    deadline = time.time() + 5
    while _alive(grandchild) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


# Stand-ins for the GPU child (python -c CODE JOB_DIR VERSION RESULT_JSON): how the parent classifies
# the ways a child can end, with no GPU.
FAKE_CHILDREN = {
    "hangs": "import time; time.sleep(60)",
    "dies": "import os; print('Segmentation fault', flush=True); os.abort()",
    "reports an illegal address": "import sys; open(sys.argv[3], 'w').write('{\"status\": \"illegal_address\", "
                                  "\"error\": \"an illegal memory access was encountered\"}')",
}


@pytest.mark.parametrize("child, status, says", [("hangs", "timeout", "hung kernel"), ("dies", "error", "Segmentation"),
                                                 ("reports an illegal address", "illegal_address", "illegal memory")])
def test_the_parent_classifies_how_the_gpu_child_ended(tmp_path, monkeypatch, child, status, says):
    monkeypatch.setattr("workers.measure.gpu_unavailable", lambda: None)
    monkeypatch.setattr("workers.measure.gpu_run.COMMAND", [sys.executable, "-c", FAKE_CHILDREN[child]])
    job = _job(tmp_path)
    start = time.monotonic()
    result = measure_iteration(str(job), 0, timeout_s=2)
    assert time.monotonic() - start < 10
    assert result.status == status and says in result.error and not result.correct
    assert f"**{status}**" in (job / "v0" / "benchmark.md").read_text()
    assert f"status is {status}" in (job / "v0" / "ncu_summary.md").read_text()


# TEST DOUBLE of the GPU child: it reports a correct check of 3 draws, untimed, if it was asked for the check only
CHECKING_CHILD = """
import json, sys
checked = sys.argv[4:] == ["--check-only"]
open(sys.argv[3], "w").write(json.dumps({"status": "ok" if checked else "error", "draws": 3, "outputs": [
    {"buffer": "out", "max_abs_err": 0.0, "max_rel_err": 0.0, "passed": True}]}))
"""


def test_an_untimed_measurement_asks_the_gpu_child_for_the_check_alone(tmp_path, monkeypatch):
    """measure_iteration(timed=False), the GPU tests' quick check: the child checks the draws and times
    nothing (no peers: torch.compile took 20-40 s of each test), and nothing is profiled."""
    monkeypatch.setattr("workers.measure.gpu_unavailable", lambda: None)
    monkeypatch.setattr("workers.measure.gpu_run.COMMAND", [sys.executable, "-c", CHECKING_CHILD])
    job = _job(tmp_path)
    result = measure_iteration(str(job), 0, timeout_s=30, timed=False)
    assert (result.status, result.correct, result.draws, result.time, result.eager) == ("ok", True, 3, None, None)
    assert "profiling was not asked for" in (job / "v0" / "ncu_summary.md").read_text()
    assert measure_iteration(str(job), 0, profile=False, timeout_s=30).status == "error"  # timed: no flag


# TEST DOUBLE of the GPU child in batch mode (python -c CODE --batch ITEMS --until T): each item's job
# folder name says how its measurement ends; every process it starts appends a line to starts.log.
FAKE_BATCH_CHILD = """
import json, os, sys, time
items = json.load(open(sys.argv[2]))
open(os.path.join(os.path.dirname(items[0][0]), "starts.log"), "a").write("start\\n")
for job, version, result in items:
    if os.path.exists(result):
        continue
    if time.time() >= float(sys.argv[4]):
        sys.exit(0)
    kind = os.path.basename(job).split("-")[0]
    if kind == "hangs":
        time.sleep(60)
    if kind == "dies":
        print("Segmentation fault", flush=True)
        os.abort()
    status = {"fault": "illegal_address"}.get(kind, "ok")
    open(result + ".part", "w").write(json.dumps({"status": status, "device": "fake"}))
    os.replace(result + ".part", result)  # whole, as gpu_run's write_text
    if status != "ok":
        sys.exit(3)
"""


def _jobs(tmp_path: Path, kinds: list[str]) -> list[tuple[str, int]]:
    jobs = []
    for i, kind in enumerate(kinds):
        job = tmp_path / f"{kind}-{i}"
        shutil.copytree(POC, job / "v0")
        shutil.copy(POC / "model.py", job / "model.py")
        jobs.append((str(job), 0))
    return jobs


def test_a_batch_goes_on_past_faults_hangs_and_deaths_in_a_new_process_each(tmp_path, monkeypatch):
    monkeypatch.setattr("workers.measure.gpu_unavailable", lambda: None)
    monkeypatch.setattr("workers.measure.gpu_run.COMMAND", [sys.executable, "-c", FAKE_BATCH_CHILD])
    kinds = ["ok", "fault", "ok", "hangs", "ok", "dies", "ok", "ok"]
    heard = []
    results = measure_batch(_jobs(tmp_path, kinds), timeout_s=2, observe=lambda i, r: heard.append(i))
    assert [r.status for r in results] == ["ok", "illegal_address", "ok", "timeout", "ok", "error", "ok", "ok"]
    assert "Segmentation" in results[5].error and "within 2 s" in results[3].error
    assert heard == list(range(len(kinds))), "each result is heard of as it comes, in order"
    # one process, then one more after each of the three failures
    assert (tmp_path / "starts.log").read_text().count("start") == 4
    assert "**illegal_address**" in (tmp_path / "fault-1" / "v0" / "benchmark.md").read_text()
    assert "not asked for" in (tmp_path / "ok-0" / "v0" / "ncu_summary.md").read_text()


def test_a_batch_version_refused_before_the_gpu_keeps_its_reason(tmp_path, monkeypatch):
    """A version that never compiled is not sent to the GPU process; its reports keep why, and the others run."""
    monkeypatch.setattr("workers.measure.gpu_unavailable", lambda: None)
    monkeypatch.setattr("workers.measure.gpu_run.COMMAND", [sys.executable, "-c", FAKE_BATCH_CHILD])
    jobs = _jobs(tmp_path, ["ok", "uncompiled"])
    (Path(jobs[1][0]) / "v0" / "compile_result.json").write_text(json.dumps({"ok": False, "stage": "ptxas"}))
    ran, refused = measure_batch(jobs, timeout_s=5)
    assert ran.status == "ok" and refused.status == "skipped" and "stage ptxas" in refused.error
    assert "stage ptxas" in (Path(jobs[1][0]) / "v0" / "ncu_summary.md").read_text()


def test_a_batch_starts_no_version_past_its_time(tmp_path, monkeypatch):
    monkeypatch.setattr("workers.measure.gpu_unavailable", lambda: None)
    monkeypatch.setattr("workers.measure.gpu_run.COMMAND", [sys.executable, "-c", FAKE_BATCH_CHILD])
    assert measure_batch(_jobs(tmp_path, ["ok", "ok"]), timeout_s=5, until=time.time() - 1) == [None, None]


def test_the_real_gpu_child_reports_each_version_of_a_batch_without_a_gpu(tmp_path, monkeypatch):
    """gpu_run's own batch mode on this GPU-less machine: a model that hangs while it is built times out,
    and the next version is still measured, in a new process, and fails for want of CUDA."""
    monkeypatch.setattr("workers.measure.gpu_unavailable", lambda: None)
    jobs = _jobs(tmp_path, ["hangs", "plain"])
    model = Path(jobs[0][0]) / "model.py"
    model.write_text(model.read_text().replace("def get_inputs", "import time\ntime.sleep(60)\n\ndef get_inputs"))
    hung, failed = measure_batch(jobs, timeout_s=8)
    assert hung.status == "timeout"
    assert failed.status == "error" and "CUDA" in failed.error, failed.error


def test_tolerance_is_widened_by_twice_pytorchs_own_error():
    """Hand-made outputs near a zero sum (where a long fp32 reduction's rounding exceeds atol): ours
    passes within atol + rtol*|exact| + 2E, E = PyTorch's own error in the model's precision, and only
    there; a non-finite output never passes."""
    import torch

    from workers.measure.gpu_run import compare

    exact = torch.tensor([0.0, 10.0], dtype=torch.float64)
    library = exact + torch.tensor([4e-4, 0.0], dtype=torch.float64)
    ours = (exact + torch.tensor([5e-4, 0.0], dtype=torch.float64)).float()
    assert not compare("out", ours, exact, exact, 1e-4, 1e-4).passed, "without E: 5e-4 > atol"
    within = compare("out", ours, exact, library, 1e-4, 1e-4)
    assert within.passed and within.library_abs_err == pytest.approx(4e-4)
    assert not compare("out", ours + torch.tensor([2e-3, 0.0]), exact, library, 1e-4, 1e-4).passed
    assert not compare("out", torch.tensor([float("nan"), 10.0]), exact, library, 1e-4, 1e-4).passed


def test_outputs_are_compared_a_chunk_at_a_time_with_the_same_verdict(monkeypatch):
    """KernelBench's outputs of 6-16 GB are compared COMPARE_CHUNK elements at a time (whole, the float64
    temporaries ran an 80 GB H100 out of memory): chunks of 3 give the whole comparison's errors and verdict,
    a NaN included."""
    import torch

    from workers.measure import gpu_run

    exact = torch.linspace(-1, 1, 10, dtype=torch.float64)
    library = exact + 1e-5
    ours = exact.float().clone()
    ours[8] += 0.01  # in the last full chunk
    whole = gpu_run.compare("out", ours, exact, library, 1e-4, 1e-4)
    monkeypatch.setattr(gpu_run, "COMPARE_CHUNK", 3)
    chunked = gpu_run.compare("out", ours, exact, library, 1e-4, 1e-4)
    assert chunked == whole and not chunked.passed
    assert chunked.max_abs_err == pytest.approx(0.01, rel=1e-3) and chunked.library_abs_err == pytest.approx(1e-5)
    ours[9] = float("nan")
    assert math.isnan(gpu_run.compare("out", ours, exact, library, 1e-4, 1e-4).max_abs_err)


def test_inputs_are_drawn_on_the_device_asked_for_else_on_the_cpu(tmp_path):
    """The measure worker draws a model's inputs on the GPU (no 6 GB draw on the CPU, no copy over PCIe);
    the meta device stands in for it here. A get_inputs() that cannot run there is drawn on the CPU,
    with the same seed's values as without a device."""
    import torch

    from workers.model_loader import draw_inputs, load_module

    model = tmp_path / "m.py"
    model.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                     "def get_inputs():\n    return [torch.randn(4, 8), 2.0]\ndef get_init_inputs():\n    return []\n")
    drawn = draw_inputs(load_module(str(model)), "m.py", 3, device="meta")
    assert drawn[0].device.type == "meta" and drawn[0].shape == (4, 8) and drawn[1] == 2.0
    host_only = tmp_path / "h.py"
    host_only.write_text(model.read_text().replace("torch.randn(4, 8)", "torch.from_numpy(torch.randn(4, 8).numpy())"))
    module = load_module(str(host_only))
    fallback = draw_inputs(module, "h.py", 3, device="meta")
    assert fallback[0].device.type == "cpu" and torch.equal(fallback[0], draw_inputs(module, "h.py", 3)[0])


def test_a_buffer_in_the_memory_of_no_earlier_temporary_large_enough_is_a_config_error():
    config = poc_config()
    owner = next(b for b in config.buffers if b.role in ("temporary", "output"))
    config.buffers.append(BufferSpec(name="later", role="temporary", dtype=owner.dtype, shape=list(owner.shape),
                                     source="alloc", storage=owner.name))
    owner.role = "temporary"
    check_config(config)
    config.buffers.insert(0, config.buffers.pop())  # the host may allocate the tenant first (DenseNet's concats)
    check_config(config)
    order = [b.name for b in allocation_order(config.buffers)]
    assert order.index(owner.name) < order.index("later")
    for role, shape in (("output", owner.shape), ("temporary", [1])):
        owner.role, owner.shape = role, shape
        with pytest.raises(ConfigError, match="storage"):
            check_config(config)


def test_the_float64_reference_runs_on_the_cpu_where_the_gpu_memory_does_not_hold_it():
    """level1/45's 16 GB input took a 32 GB float64 copy beside the measurement's own buffers and ran the H100
    out of memory. The first run here stands in for the GPU's (TEST DOUBLE: it raises torch's out-of-memory
    error, as the GPU did); the second runs on the CPU and gives the float64 outputs."""
    import torch

    from workers.measure.gpu_run import compare, float64_reference

    class OutOfMemoryOnce(torch.nn.Module):
        runs: list = []  # on the class: every copy of the model counts here

        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.tensor(3.0))

        def forward(self, x, n):
            self.runs.append(x.device.type)
            if len(self.runs) == 1:
                raise torch.OutOfMemoryError("CUDA out of memory (test double)")
            return x * self.scale + n

    model, x = OutOfMemoryOnce(), torch.rand(4, dtype=torch.float32)
    with torch.no_grad():  # as the check runs it
        (out,) = float64_reference(model, [x, 2])
    assert OutOfMemoryOnce.runs == ["cpu", "cpu"] and out.dtype == torch.float64
    assert torch.equal(out, x.double() * 3 + 2)
    assert model.scale.dtype == torch.float32, "the caller's model is left as it was"
    assert compare("out", (x * 3 + 2).float(), out, x * 3 + 2, 1e-4, 1e-4).passed


def test_the_float64_reference_reaches_modules_a_lambda_of_the_model_holds():
    """level3/44's MLP is a lambda over the model's own modules: a float64 copy of the model called the
    original float32 ones (mat1 and mat2 must have the same dtype). The reference swaps float64 parameters
    into the model itself for the call."""
    import torch

    from workers.measure.gpu_run import float64_reference

    class LambdaMlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)
            fc = self.fc
            self.mlp = lambda x: torch.relu(fc(x))

        def forward(self, x):
            return self.mlp(x)

    torch.manual_seed(0)
    model, x = LambdaMlp(), torch.rand(2, 4)
    with torch.no_grad():
        (out,) = float64_reference(model, [x])
    assert out.dtype == torch.float64
    assert torch.allclose(out, torch.relu(x.double() @ model.fc.weight.double().T + model.fc.bias.double()))
    assert model.fc.weight.dtype == torch.float32
