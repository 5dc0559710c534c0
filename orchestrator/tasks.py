"""Stage tasks: thin wrappers over the stage functions, taking and returning record JSON.

Every task is idempotent: its id is deterministic (`task_id`), its run is claimed in the state store,
and a redelivered copy of a finished task returns the recorded report without touching the job
folder. Stage failures come back as a report with `error`; only a hard time limit or a worker that
died too often leaves a Celery failure, which the driver records. A Redis outage is waited out, however
long, so it never becomes a stage's error. A worker runs only tasks whose files lie inside its output
root ($MLIR_FARM_OUT_ROOT): anyone who can send it a task could otherwise make it run any Python file.
"""
from __future__ import annotations

import functools
import importlib
import logging
import os
import time
from typing import Callable

from celery.exceptions import SoftTimeLimitExceeded

from orchestrator import envfacts, user_schedule
from orchestrator.celery_app import RETRIES_ON_WORKER_LOST, TIME_LIMITS, app
from orchestrator.gpus import holding_gpu
from orchestrator.records import LoweringRequest, TaskReport
from orchestrator.settings import ENV_OUT_ROOT, FarmSettings
from orchestrator.state import StateStore, open_store
from workers.records import ScheduleParams

log = logging.getLogger(__name__)

# "module:attribute.path" of a callable with measure_iteration's signature, replacing the real GPU
# measurement. Only test doubles set it (tests/test_orchestrator_doubles.py: FakeGpuMeasure); the
# reports name what measured.
MEASURE_ENV = "MLIR_FARM_MEASURE"
REAL_MEASURE = "workers.measure:measure_iteration"


def measure_impl() -> str:
    return os.environ.get(MEASURE_ENV, REAL_MEASURE)


def task_id(job_id: str, stage: str, version: int | None = None) -> str:
    return f"{job_id}:{stage}" if version is None else f"{job_id}:v{version}:{stage}"


@functools.lru_cache(maxsize=1)
def _settings() -> FarmSettings:
    settings = FarmSettings.from_env()
    if settings is None:
        raise RuntimeError("worker started without $MLIR_FARM_BROKER: it cannot find the state store")
    return settings


@functools.lru_cache(maxsize=1)
def _store() -> StateStore:
    return open_store(_settings().state_url, outage_retries=-1)


def _outside_root(paths: list[str], root: str) -> str | None:
    """Why a task naming these paths may not run under output root `root`, or None if it may."""
    if not root:
        return f"this worker has no output root (${ENV_OUT_ROOT}), so it runs no task"
    real_root = os.path.realpath(root)
    for path in paths:
        if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
            return (f"{path} lies outside this worker's output root {root} (${ENV_OUT_ROOT}); submit with "
                    "--out inside it")
    return None


def _run_stage(task, stage: str, job_id: str, paths: list[str], work: Callable[[TaskReport], None]) -> str:
    store, tid, worker = _store(), task.request.id, task.request.hostname or "unknown"
    job = store.get_job(job_id)
    if job is not None and job.status == "cancelled":
        log.info("%s: job %s is cancelled, not running it", tid, job_id)
        return TaskReport(tid, stage, worker=worker, cancelled=True).to_json()
    claim = store.claim_task(tid, worker)
    if claim.report is not None:
        log.info("%s: already done on %s; returning that result", tid, claim.report.worker)
        return claim.report.to_json()
    report = TaskReport(tid, stage, worker=worker, attempt=claim.attempts, started=time.time())
    started = time.perf_counter()
    refused = _outside_root(paths, _settings().out_root)
    try:
        if refused:
            log.error("%s refused: %s", tid, refused)
            report.error = f"the {stage} task was refused on {worker}: {refused}"
        else:
            work(report)
    except SoftTimeLimitExceeded:
        report.error = f"the {stage} stage ran past its soft time limit of {TIME_LIMITS[stage][0]} s on {worker}"
    except Exception as e:  # a stage bug must become a recorded error, not a lost job
        log.exception("%s failed", tid)
        report.error = f"the {stage} stage failed on {worker}: {type(e).__name__}: {e}"
    report.seconds = round(time.perf_counter() - started, 3)
    return store.finish_task(tid, report).to_json()


def _stage_task(stage: str):
    soft, hard = TIME_LIMITS[stage]
    return app.task(name=f"orchestrator.{stage}", bind=True, soft_time_limit=soft, time_limit=hard,
                    max_retries=RETRIES_ON_WORKER_LOST, default_retry_delay=1)


@_stage_task("frontend")
def frontend_task(self, job_id: str, request_json: str) -> str:
    request = LoweringRequest.from_json(request_json)

    def work(report: TaskReport) -> None:
        from workers.compile import initial_params
        from workers.frontend import FrontendError, LoweringLimits, lower_model_bounded

        report.env = envfacts.gather(report.worker)
        try:
            report.model = lower_model_bounded(request.model_path, request.job_dir,
                                               limits=LoweringLimits(**request.limits))
        except FrontendError as e:
            report.error, report.stop_reason = str(e), "the model could not be lowered"
            return
        v0 = initial_params(request.job_dir, request.chip, request.tf32)
        if request.start_params is None:
            report.params = v0
        elif problems := user_schedule.mismatches(request.start_params, v0, request.job_dir):
            report.error = "submit --schedule: " + "; ".join(problems)
            report.stop_reason = "the --schedule file does not fit the model"
        else:
            report.params = request.start_params

    return _run_stage(self, "frontend", job_id, [request.model_path, request.job_dir], work)


@_stage_task("compile")
def compile_task(self, job_id: str, job_dir: str, version: int, params_json: str) -> str:
    def work(report: TaskReport) -> None:
        from workers.compile import compile_iteration

        report.compile = compile_iteration(job_dir, version, ScheduleParams.from_json(params_json))

    return _run_stage(self, "compile", job_id, [job_dir], work)


@_stage_task("measure")
def measure_task(self, job_id: str, job_dir: str, version: int) -> str:
    def work(report: TaskReport) -> None:
        report.measure_impl = measure_impl()
        module, name = report.measure_impl.split(":")
        measure_iteration = functools.reduce(getattr, name.split("."), importlib.import_module(module))
        soft, hard = TIME_LIMITS["measure"]
        # the lease outlives the hard limit, so only a holder that is gone loses the lock before it is done
        with holding_gpu(_store(), report.task_id, lease_s=hard + 60) as gpu:
            report.gpu = gpu  # its end is stamped when the lock is let go, however the measurement ends
            # leave the stage a minute inside the soft limit (less any wait for the GPU) to record its own timeout
            report.measure = measure_iteration(job_dir, version, profile=True, timeout_s=soft - 60 - gpu.waited_s)

    return _run_stage(self, "measure", job_id, [job_dir], work)
