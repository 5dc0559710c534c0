"""Test doubles for the orchestrator's tests, and a check of the doubles themselves.

`FakeGpuMeasure` is a TEST DOUBLE of workers.measure.measure_iteration for machines without a GPU:
it reads the launch shapes of vN/config.json and makes up plausible timings and NCU-like metrics
from them (more threads per block and more blocks per wave are faster), so the advisor has something
to iterate on. Workers use it when MLIR_FARM_MEASURE names it; every report then says so.
"""
from __future__ import annotations

import json
import math
import os
import time

from workers.atomic import write_text
from workers.records import KernelMetrics, LaunchConfig, MeasureResult, ModelInfo, Timing

IMPL = "test_orchestrator_doubles:FakeGpuMeasure.measure_iteration"
SLEEP_ENV = "FAKE_GPU_MEASURE_SLEEP_S"  # hold each measurement this long (to kill a worker mid-task)
MARKER_ENV = "FAKE_GPU_MEASURE_MARKERS"  # folder where each running measurement leaves "<pid>"
SMS = 132


class FakeGpuMeasure:
    @staticmethod
    def kernel(launch, work_us: float) -> KernelMetrics:
        threads = math.prod(launch.block)
        blocks = math.prod(launch.grid)
        per_sm = max(1, min(32, 2048 // max(threads, 1)))
        waves = blocks / (SMS * per_sm)
        efficiency = min(1.0, threads / 256) * min(1.0, 0.2 + waves)
        duration = 2.0 + work_us / max(efficiency, 0.02)
        theoretical = min(100.0, 100.0 * per_sm * threads / 2048)
        return KernelMetrics(
            kernel=launch.kernel, duration_us=round(duration, 3), sm_throughput_pct=round(70 * efficiency, 1),
            memory_throughput_pct=round(55 * efficiency, 1), dram_throughput_pct=round(40 * efficiency, 1),
            achieved_occupancy_pct=round(0.85 * theoretical, 1), theoretical_occupancy_pct=round(theoretical, 1),
            registers_per_thread=32, spill_bytes=0, grid_size=blocks, block_size=threads,
            waves_per_sm=round(waves, 3), issue_slot_util_pct=round(60 * efficiency, 1),
            stall_long_scoreboard=30.0, stall_barrier=5.0)

    @classmethod
    def measure_iteration(cls, job_dir: str, version: int, profile: bool = True, timeout_s: float = 600) -> MeasureResult:
        if os.environ.get(MARKER_ENV):
            os.makedirs(os.environ[MARKER_ENV], exist_ok=True)
            write_text(os.path.join(os.environ[MARKER_ENV], f"{os.path.basename(job_dir)}.v{version}.{os.getpid()}"), "")
        time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
        vdir = os.path.join(job_dir, f"v{version}")
        with open(os.path.join(vdir, "config.json")) as f:
            config = LaunchConfig.from_json(f.read())
        with open(os.path.join(job_dir, "model_info.json")) as f:
            info = ModelInfo.from_json(f.read())
        work_us = max(1.0, sum(op.flops for op in info.ops) / 2e6)
        kernels = [cls.kernel(launch, work_us / max(1, len(config.launches))) for launch in config.launches]
        total = round(sum(k.duration_us for k in kernels), 3)
        result = MeasureResult(
            version=version, status="ok", device="FakeGpuMeasure (TEST DOUBLE, no GPU)", correct=True,
            max_abs_err=1e-7, max_rel_err=1e-7, atol=config.atol, rtol=config.rtol,
            time=Timing(total, round(total * 0.98, 3), round(total * 1.02, 3), 20),
            eager=Timing(25.0, 24.5, 25.5, 20), compiled=Timing(18.0, 17.6, 18.4, 20), kernels=kernels)
        banner = "TEST DOUBLE (FakeGpuMeasure): synthetic numbers, no GPU was used.\n\n"
        write_text(os.path.join(vdir, "benchmark.md"), f"# Benchmark v{version}\n\n{banner}median {total} us\n")
        write_text(os.path.join(vdir, "ncu_summary.md"), f"# NCU summary v{version}\n\n{banner}")
        write_text(os.path.join(vdir, "ncu_details.md"),
                   f"# NCU details v{version}\n\n{banner}```\n{json.dumps([k.to_dict() for k in kernels], indent=1)}\n```\n")
        return result


def test_fake_gpu_measure_prefers_bigger_blocks(tmp_path):
    from workers.records import KernelLaunch

    small = FakeGpuMeasure.kernel(KernelLaunch("k", [4096, 1, 1], [1, 1, 1], 0, []), 10.0)
    good = FakeGpuMeasure.kernel(KernelLaunch("k", [256, 1, 1], [256, 1, 1], 0, []), 10.0)
    assert good.duration_us < small.duration_us
    assert small.sm_throughput_pct < 40 and small.block_size == 1
