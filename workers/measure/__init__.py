"""Measure stage: run an iteration's PTX on one GPU, check it against PyTorch, time it, profile it.

Public API: `measure_iteration`, and `measure_batch` for many versions at once. The GPU work happens in
child processes (gpu_run, and ncu around it): no CUDA context is ever created in the calling process (a
Celery worker forks after import), and a kernel that corrupts its context or hangs takes only its child
down.
"""
from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from typing import Callable

from workers.layout import COMPILE_RESULT_FILE, version_dir
from workers.measure import gpu_run, ncu, report
from workers.measure.gpu_run import RunOutcome
from workers.measure.launch import ConfigError, check_config, launch_runs, pathological_launches
from workers.atomic import write_text
from workers.process import run_in_group, run_while_progressing
from workers.records import LaunchConfig, MeasureResult

GPU_EXTRA_HINT = ("install the gpu extra on a node with the CUDA toolkit headers and libcuda "
                  "(deploy/README.md, 'GPU node: pycuda and the measure worker')")
RESULT_FILE = ".gpu_run.json"


def gpu_unavailable() -> str | None:
    """Why this node cannot measure, or None. Looks without creating a CUDA context."""
    if importlib.util.find_spec("pycuda") is None:
        return f"pycuda is not installed: {GPU_EXTRA_HINT}"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed: the reference model runs in PyTorch on the same GPU"
    if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0")) and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        return "no NVIDIA GPU on this node (no /dev/nvidia0)"
    return None


def _not_compiled(job_dir: str, version: int) -> str | None:
    """Why v{version} has nothing to run, or None. compile_result.json decides where it exists;
    a folder without one (a hand-made job) needs its config.json and PTX."""
    vdir = version_dir(job_dir, version)
    path = os.path.join(vdir, COMPILE_RESULT_FILE)
    if os.path.exists(path):
        with open(path) as f:
            result = json.load(f)
        return None if result.get("ok") else f"v{version} failed to compile at stage {result.get('stage', '?')}"
    missing = [n for n in ("config.json", "kernels.ptx") if not os.path.exists(os.path.join(vdir, n))]
    return f"v{version} was not compiled (no {' or '.join(missing)})" if missing else None


def _load_config(job_dir: str, version: int) -> LaunchConfig:
    try:
        with open(os.path.join(version_dir(job_dir, version), "config.json")) as f:
            config = LaunchConfig.from_json(f.read())
    except (OSError, ValueError, TypeError) as e:  # missing, not JSON, or not a LaunchConfig
        raise ConfigError(f"{type(e).__name__}: {e}") from None
    check_config(config)
    return config


def _not_measured(job_dir: str, version: int, status: str, reason: str) -> MeasureResult:
    report.write_skipped(job_dir, version, reason)
    return MeasureResult(version=version, status=status, error=reason)


def _preflight(job_dir: str, version: int) -> tuple[LaunchConfig | None, MeasureResult | None]:
    """v{version}'s launch config, or the result that ends its measurement before any GPU: nothing compiled,
    a bad config or launch shape (faults of the iteration), no GPU on this node."""
    reason = _not_compiled(job_dir, version)
    if reason:
        return None, _not_measured(job_dir, version, "skipped", reason)
    try:
        config = _load_config(job_dir, version)
    except ConfigError as e:
        return None, _not_measured(job_dir, version, "error", f"config.json: {e}")
    bad = pathological_launches(config)
    if bad:
        return None, _not_measured(job_dir, version, "pathological_launch",
                                   f"block size 1 with a huge grid ({'; '.join(bad)}): repair the launch shape first")
    reason = gpu_unavailable()
    if reason:
        return None, _not_measured(job_dir, version, "skipped", reason)
    return config, None


def _result(job_dir: str, version: int, config: LaunchConfig, outcome: RunOutcome) -> MeasureResult:
    """The measurement of the GPU child's outcome, its benchmark.md written."""
    result = MeasureResult(version=version, status=outcome.status, error=outcome.error, device=outcome.device,
                           atol=config.atol, rtol=config.rtol, time=outcome.time, seconds=outcome.seconds,
                           kernel_us=outcome.kernel_us, launched_as=outcome.launched_as)
    if outcome.outputs:
        result.draws = outcome.draws
        result.correct = all(o.passed for o in outcome.outputs)
        result.max_abs_err = max(o.max_abs_err for o in outcome.outputs)
        result.max_rel_err = max(o.max_rel_err for o in outcome.outputs)
        result.library_abs_err = max(o.library_abs_err for o in outcome.outputs)
    if outcome.reference:
        result.eager, result.compiled = outcome.reference.eager, outcome.reference.compiled
    report.write_benchmark(job_dir, result, outcome.reference.compiled_error if outcome.reference else "")
    return result


def _write_unprofiled(job_dir: str, version: int, result: MeasureResult) -> None:
    """The NCU reports of a measurement that is not profiled: why (its status, or no profile asked for)."""
    report.write_ncu_skipped(job_dir, version, "profiling was not asked for" if result.status == "ok"
                             else f"the iteration's status is {result.status}")


def measure_iteration(job_dir: str, version: int, profile: bool = True, timeout_s: float = 600,
                      timed: bool = True) -> MeasureResult:
    """Write v{version}/{benchmark.md, ncu_summary.md, ncu_details.md} and return the result.

    timeout_s bounds the whole measurement (the checked run and the profile together). timed=False: the
    correctness check on the input draws only, no timing, no peers (torch.compile's 20-40 s) and no profile:
    a kernel's quick check (the GPU tests)."""
    deadline = time.monotonic() + timeout_s
    config, ended = _preflight(job_dir, version)
    if ended:
        return ended
    outcome = _run_child(job_dir, version, timeout_s, [] if timed else ["--check-only"])
    result = _result(job_dir, version, config, outcome)
    left = deadline - time.monotonic()
    if result.status != "ok" or not profile or not timed:
        _write_unprofiled(job_dir, version, result)
    elif left < 1:
        report.write_ncu_skipped(job_dir, version, f"no time left of the {timeout_s:.0f} s measurement limit")
    else:
        try:
            prof = ncu.profile(job_dir, version, [l.kernel for l in config.launches], left)
            if len(prof.kernels) == len(config.launches):  # one profile per launch, in launch order
                for kernel, runs in zip(prof.kernels, launch_runs(config)):
                    kernel.runs = runs
            result.kernels = prof.kernels
            report.write_ncu(job_dir, version, prof.kernels, prof.csv, prof.dropped_metrics)
        except (ncu.NcuError, TimeoutError, ValueError) as e:  # ValueError: a CSV pandas cannot read
            report.write_ncu_skipped(job_dir, version, str(e))
    return result


def measure_batch(versions: list[tuple[str, int]], timeout_s: float = 600, until: float = float("inf"),
                  observe: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult | None]:
    """measure_iteration without profiles for many (job_dir, version)s, in order, in as few GPU processes as
    their faults allow (a process's start, with its imports, CUDA context and Inductor, costs seconds each
    time). Each version gets timeout_s; none starts after the epoch time `until` (its result is None).
    observe(i, result) hears of each result as it comes."""
    results: list[MeasureResult | None] = [None] * len(versions)
    configs = {}

    def report_result(i: int, result: MeasureResult) -> None:
        results[i] = result
        if observe:
            observe(i, result)

    for i, (job_dir, version) in enumerate(versions):
        config, ended = _preflight(job_dir, version)
        if ended:  # its reports say why already
            report_result(i, ended)
        else:
            configs[i] = config
    paths = {i: os.path.join(version_dir(*versions[i]), RESULT_FILE) for i in configs}
    for path in paths.values():
        if os.path.exists(path):
            os.unlink(path)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([[*versions[i], paths[i]] for i in configs], f)

    def collect() -> int:
        """Report each result the GPU process has written since the last call; how many are reported."""
        for i in configs:
            if results[i] is None and os.path.exists(paths[i]):  # written whole: write_text renames
                with open(paths[i]) as r:
                    result = _result(*versions[i], configs[i], RunOutcome.from_json(r.read()))
                _write_unprofiled(*versions[i], result)
                report_result(i, result)
        return sum(results[i] is not None for i in configs)

    try:
        while (pending := [i for i in configs if results[i] is None]):
            code, output = run_while_progressing([*gpu_run.COMMAND, "--batch", f.name, "--until", str(until)],
                                                 collect, timeout_s)
            collect()
            pending = [i for i in pending if results[i] is None]
            if code == 0 or not pending:  # all reported, or the time is up
                break
            if code != gpu_run.BATCH_STOPPED:  # it hung or died in the first unreported version
                culprit = pending[0]
                outcome = RunOutcome(status="timeout", error=f"no result within {timeout_s:.0f} s (a hung kernel, "
                                     "or a run slower than the limit)") if code is None else \
                    RunOutcome(status="error", error=f"the GPU process died before it reported: {output.strip()[-1500:]}")
                write_text(paths[culprit], outcome.to_json(indent=2))  # so that the next process skips it
                collect()
    finally:
        os.unlink(f.name)
    return results


def _run_child(job_dir: str, version: int, timeout_s: float, flags: list[str]) -> RunOutcome:
    """Run the GPU child (with gpu_run's `flags`) and classify how it ended: its own verdict if it wrote one,
    else a timeout (the group was killed) or a death (a crash or a kill before it could write)."""
    result_path = os.path.join(version_dir(job_dir, version), RESULT_FILE)
    if os.path.exists(result_path):
        os.unlink(result_path)
    try:
        _, output = run_in_group([*gpu_run.COMMAND, job_dir, str(version), result_path, *flags], timeout_s)
    except TimeoutError as e:
        if not os.path.exists(result_path):  # else it reported and then stuck on its way out
            return RunOutcome(status="timeout", error=f"{e} (a hung kernel, or a run slower than the limit)")
        output = ""
    if not os.path.exists(result_path):
        return RunOutcome(status="error", error=f"the GPU process died before it reported: {output.strip()[-1500:]}")
    with open(result_path) as f:
        return RunOutcome.from_json(f.read())
