"""Records the advisor takes in and gives out."""
from __future__ import annotations

from dataclasses import dataclass, field

from workers.jsonrecord import JsonRecord
from workers.records import CompileResult, MeasureResult, ModelInfo, ScheduleEdit, ScheduleParams


@dataclass
class Evidence(JsonRecord):
    """Why the advisor said what it said: the rule that fired and the metrics it read."""

    rule: str  # rule name in rules/guide.json
    kernel: str  # kernel the metrics belong to ("model" for whole-model facts)
    metrics: dict[str, float]
    text: str  # one sentence for humans


@dataclass
class Hypothesis(JsonRecord):
    """Exactly one schedule change to try next."""

    family: str  # hypothesis family from rules/guide.json, e.g. "more_blocks", "vectorize"
    edit: ScheduleEdit
    expected_effect: str
    accept_rule: str  # e.g. "accept if >5% faster and correct"
    bottleneck: str = "unknown"  # the class of the kernel the change targets
    kernel: str = ""  # that kernel's name


@dataclass
class Decision(JsonRecord):
    action: str  # "continue" | "stop"
    bottleneck: str  # normalised class: memory | compute | latency | occupancy | near_limits | local_memory |
    # launch_pathology | unknown
    evidence: list[Evidence]
    rules_version: str
    hypothesis: Hypothesis | None = None
    stop_reason: str = ""


@dataclass
class IterationRecord(JsonRecord):
    """One measured (or failed) iteration of a job, as the advisor and the reports see it."""

    version: int
    params: ScheduleParams
    compile: CompileResult
    measure: MeasureResult
    hypothesis: Hypothesis | None = None  # the change that produced this version (None for v0)
    outcome: str = "n/a"  # "success" | "neutral" | "failure" | "baseline" | "n/a"
    speedup_vs_best: float | None = None


@dataclass
class AdviceRequest(JsonRecord):
    model: ModelInfo
    current: ScheduleParams  # params of the best iteration so far, which the next edit starts from
    history: list[IterationRecord]
    max_iterations: int
    target_speedup_vs_eager: float | None = None
    rejected: list[Hypothesis] = field(default_factory=list)
