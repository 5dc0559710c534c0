"""What the experience log keeps of each outcome."""
from __future__ import annotations

from dataclasses import dataclass

from rules.records import Hypothesis
from workers.jsonrecord import JsonRecord
from workers.records import KernelMetrics


@dataclass
class CaseFingerprint(JsonRecord):
    """What makes two cases similar. The chip is recorded but never matches on its own."""

    op_family: str
    loop_ranges: list[int]
    dtype: str
    chip: str


@dataclass
class Outcome(JsonRecord):
    model: str
    fingerprint: CaseFingerprint
    bottleneck: str  # normalised class before the change
    dominant_stall: str
    hypothesis: Hypothesis
    outcome: str  # success | neutral | failure
    speedup: float | None
    metrics_before: KernelMetrics | None = None
    metrics_after: KernelMetrics | None = None


@dataclass
class Recommendation(JsonRecord):
    family: str
    score: float  # similarity-weighted sum of the speedups of past successes
    successes: int
    trials: int
