"""Records the orchestrator keeps and passes around: what a task reports, a job's and a worker's state.

Like the stage records (workers/records.py), each is a JsonRecord: task results travel as JSON through
Celery, and the state store keeps the JSON of each job.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from rules.records import Decision, Evidence, Hypothesis
from workers.jsonrecord import JsonRecord
from workers.records import CompileResult, MeasureResult, ModelInfo, ScheduleParams

# Job status: queued (waiting for its lowering to be sent) -> frontend -> iterating -> done | failed |
# cancelled (the last three are terminal).
TERMINAL = ("done", "failed", "cancelled")


@dataclass
class EnvFacts(JsonRecord):
    """The toolchain a worker ran with, for env_check.md."""

    worker: str
    python: str
    torch: str
    torch_mlir: str
    mlir_bindings: str  # numba-cuda-mlir (the MLIR bindings with the NVPTX back end)
    ptxas: str  # version line or "not found"
    gpus: list[str]  # nvidia-smi -L lines; empty where there is no GPU


@dataclass
class GpuUse(JsonRecord):
    """Which physical GPU a measure task used and when it held it (orchestrator/gpus.py). A GPU sits in one
    host, so every interval of one device is stamped by the same clock and intervals can be compared."""

    host: str  # socket.gethostname() of the measure worker
    visible_devices: str  # its CUDA_VISIBLE_DEVICES ("" = unset: it measures on the first GPU it sees)
    uuid: str  # "GPU-..." from the CUDA driver of a probe child; "" where there is no GPU (test doubles)
    start: float = 0.0  # wall clock: the GPU's lock taken, the measurement starts
    end: float = 0.0  # wall clock: the measurement is over, before the lock is released
    waited_s: float = 0.0  # time spent waiting for another measurement on the same GPU

    @property
    def device(self) -> str:
        """The GPU's lock key and the overlap checker's device: its UUID, else host + CUDA_VISIBLE_DEVICES."""
        return self.uuid or f"{self.host}:CUDA_VISIBLE_DEVICES={self.visible_devices or 'unset'}"


@dataclass
class LockHolder(JsonRecord):
    """Who holds an exclusive lock in the state store (a GPU's): one process on one host, for one task."""

    host: str
    pid: int
    task_id: str


@dataclass
class TaskReport(JsonRecord):
    """What a stage task returns: the stage's record, plus where, how long and which attempt."""

    task_id: str
    stage: str  # "frontend" | "compile" | "measure"
    worker: str = ""
    seconds: float = 0.0  # time inside the task, stage function included
    attempt: int = 1
    error: str = ""  # a frontend error paragraph, or why the task could not run its stage
    stop_reason: str = ""  # frontend: why the job cannot go on, where the model or the user's schedule is at fault
    started: float = 0.0  # wall clock when the stage started on the worker
    cancelled: bool = False
    model: ModelInfo | None = None  # frontend
    params: ScheduleParams | None = None  # frontend: the v0 operator-aware schedule
    env: EnvFacts | None = None  # frontend
    compile: CompileResult | None = None
    measure: MeasureResult | None = None
    measure_impl: str = ""  # "module:callable" that measured (a test double names itself here)
    gpu: GpuUse | None = None  # measure: the GPU and the span it was held


@dataclass
class LoweringRequest(JsonRecord):
    """What a frontend task is asked: lower the model into the job folder within the limits, and give the
    schedule of v0: its own, or the user's (submit --schedule) once checked against the lowered model."""

    model_path: str
    job_dir: str
    chip: str
    tf32: bool = False
    limits: dict[str, float] = field(default_factory=dict)  # workers.frontend.LoweringLimits fields the user set
    start_params: ScheduleParams | None = None


@dataclass
class TaskClaim(JsonRecord):
    """A task's run record in the state store; a redelivered task that finds `report` returns it as is."""

    task_id: str
    state: str  # "running" | "done"
    worker: str
    attempts: int
    report: TaskReport | None = None


@dataclass
class IterationState(JsonRecord):
    """One vN of a job. `stage` moves compiling -> measuring -> complete, by compare-and-set."""

    version: int
    stage: str
    params: ScheduleParams
    hypothesis_text: str
    hypothesis: Hypothesis | None = None  # the change that produced this version (None for v0)
    evidence: list[Evidence] = field(default_factory=list)  # what motivated that change
    compile: CompileResult | None = None
    measure: MeasureResult | None = None
    compile_worker: str = ""
    measure_worker: str = ""
    compile_task_seconds: float = 0.0
    measure_task_seconds: float = 0.0
    measure_gpu: GpuUse | None = None  # the GPU the measurement held, and when
    started: float = 0.0  # wall clock when this version's compile was dispatched
    finished: float = 0.0  # wall clock when its outcome was known
    outcome: str = "n/a"
    speedup_vs_best: float | None = None
    error: str = ""  # infrastructure failure (time limit, worker lost too often)


@dataclass
class JobState(JsonRecord):
    """A job: one model's whole loop. The state store keeps one per job id; `rev` versions it."""

    job_id: str
    batch: str
    model_path: str
    job_dir: str
    chip: str
    max_iterations: int
    compile_only: bool
    status: str
    created: float
    rev: int = 0
    updated: float = 0.0
    start_params: ScheduleParams | None = None  # user-given v0 schedule (submit --schedule)
    tf32: bool = False  # fp32 models may compute in TF32 (submit --tf32)
    lowering_limits: dict[str, float] = field(default_factory=dict)  # submit --lowering-timeout/--lowering-memory-gb
    model: ModelInfo | None = None
    env: EnvFacts | None = None
    frontend_worker: str = ""
    frontend_seconds: float = 0.0
    iterations: list[IterationState] = field(default_factory=list)
    rejected: list[Hypothesis] = field(default_factory=list)
    last_decision: Decision | None = None
    best_version: int | None = None
    stop_reason: str = ""
    error: str = ""
    measure_impl: str = "n/a"  # as the measure worker reported it
    reported: bool = False  # final artifacts written for the current terminal status

    @property
    def model_copy(self) -> str:
        """The model file as submitted, copied into the job folder: the file the workers read, inside the
        farm's output root (model_path is where the user had it)."""
        return os.path.join(self.job_dir, os.path.basename(self.model_path))


@dataclass
class WorkerInfo(JsonRecord):
    """A worker's heartbeat in the state store."""

    hostname: str
    queues: list[str]
    pid: int
    gpus: str  # CUDA_VISIBLE_DEVICES of the worker ("" = all it sees; "n/a" on compile workers)
    started: float
    last_seen: float
    concurrency: int = 1  # its pool processes: how many tasks it runs at once
