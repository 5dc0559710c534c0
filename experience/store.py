"""The experience log: one JSON line per outcome; `recommend` ranks what worked for similar cases.

Bottleneck names are normalised before they are compared, and a case is similar only when its op
family and dtype match: the same chip alone never counts.
"""
from __future__ import annotations

import math
import os
import threading

from experience.records import CaseFingerprint, Outcome, Recommendation
from rules.records import IterationRecord
from workers.records import KernelMetrics, ModelInfo

ALIASES = {"memory-bound": "memory", "memory_bound": "memory", "compute-bound": "compute",
           "compute_bound": "compute", "latency-bound": "latency", "latency_bound": "latency", "small_grid": "latency",
           "occupancy-bound": "occupancy", "occupancy_bound": "occupancy", "near-limits": "near_limits"}
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "no_instruction")


def normalise(bottleneck: str) -> str:
    key = bottleneck.strip().lower()
    return ALIASES.get(key, key)


def dominant_stall(k: KernelMetrics | None) -> str:
    if k is None:
        return "n/a"
    values = {s: getattr(k, f"stall_{s}") for s in STALLS if getattr(k, f"stall_{s}") is not None}
    return max(values, key=values.get) if values else "n/a"


def similarity(a: CaseFingerprint, b: CaseFingerprint) -> float:
    """1 for the same shape, falling with the log-ratio of the iteration-space sizes; 0 if the op
    family or dtype differ."""
    if a.op_family != b.op_family or a.dtype != b.dtype:
        return 0.0
    size = lambda f: math.prod(max(r, 1) for r in f.loop_ranges)  # noqa: E731
    return 1.0 / (1.0 + abs(math.log(size(a) / size(b))))


class ExperienceStore:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()

    def record(self, outcome: Outcome) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        line = outcome.to_json() + "\n"
        with self._lock, open(self.path, "a") as f:  # one write per line: appends stay whole
            f.write(line)

    def outcomes(self) -> list[Outcome]:
        if not os.path.exists(self.path):
            return []
        with open(self.path) as f:
            return [Outcome.from_json(line) for line in f if line.strip()]

    def recommend(self, fingerprint: CaseFingerprint, bottleneck: str, top: int = 5) -> list[Recommendation]:
        wanted = normalise(bottleneck)
        by_family: dict[str, Recommendation] = {}
        for o in self.outcomes():
            weight = similarity(fingerprint, o.fingerprint)
            if weight == 0.0 or normalise(o.bottleneck) != wanted:
                continue
            r = by_family.setdefault(o.hypothesis.family, Recommendation(o.hypothesis.family, 0.0, 0, 0))
            r.trials += 1
            if o.outcome == "success":
                r.successes += 1
                r.score = round(r.score + weight * (o.speedup or 1.0), 4)
        ranked = sorted(by_family.values(), key=lambda r: (-r.score, -r.successes, r.family))
        return [r for r in ranked if r.score > 0][:top]

    def to_dataframe(self):
        import pandas as pd

        rows = [{"model": o.model, "op_family": o.fingerprint.op_family, "shape": "x".join(map(str, o.fingerprint.loop_ranges)),
                 "dtype": o.fingerprint.dtype, "chip": o.fingerprint.chip, "bottleneck": normalise(o.bottleneck),
                 "dominant_stall": o.dominant_stall, "hypothesis": o.hypothesis.family,
                 "edit": f"{o.hypothesis.edit.field}={o.hypothesis.edit.value}", "outcome": o.outcome,
                 "speedup": o.speedup} for o in self.outcomes()]
        return pd.DataFrame(rows, columns=["model", "op_family", "shape", "dtype", "chip", "bottleneck",
                                           "dominant_stall", "hypothesis", "edit", "outcome", "speedup"])


def _kernel(record: IterationRecord | None, name: str) -> KernelMetrics | None:
    if record is None or record.measure is None:  # the orchestrator's IterationState may be unmeasured
        return None
    return next((k for k in record.measure.kernels if k.kernel == name), None)


def outcome_of(model: ModelInfo, before: IterationRecord | None, after: IterationRecord) -> Outcome:
    """The log entry for `after`, the iteration its hypothesis produced, measured against `before`."""
    h = after.hypothesis
    op = model.ops[h.edit.op_index] if 0 <= h.edit.op_index < len(model.ops) else None
    schedule = next((s for s in after.params.ops if s.op_index == h.edit.op_index), None)
    fingerprint = CaseFingerprint(op_family=schedule.family if schedule else (op.family if op else "unknown"),
                                  loop_ranges=op.loop_ranges if op else [], dtype=op.dtype if op else "n/a",
                                  chip=after.params.chip)
    metrics_before = _kernel(before, h.kernel)
    return Outcome(model=model.name, fingerprint=fingerprint, bottleneck=normalise(h.bottleneck),
                   dominant_stall=dominant_stall(metrics_before), hypothesis=h, outcome=after.outcome,
                   speedup=after.speedup_vs_best, metrics_before=metrics_before,
                   metrics_after=_kernel(after, h.kernel))
