"""Outcome of a measured iteration against the best one before it (DESIGN.md: success if correct and
more than 5% faster; neutral within 2-5%; failure otherwise). The percentages live in guide.json."""
from __future__ import annotations

from rules.guide import load
from workers.records import MeasureResult


def classify_outcome(baseline: MeasureResult | None, candidate: MeasureResult) -> tuple[str, float | None]:
    """("baseline" | "success" | "neutral" | "failure", speedup of candidate over baseline)."""
    guide = load()
    if candidate.status != "ok" or not candidate.correct or candidate.time is None:
        return "failure", None
    if baseline is None or baseline.time is None:
        return "baseline", None
    speedup = baseline.time.median_us / candidate.time.median_us
    gain_pct = (speedup - 1.0) * 100.0
    if gain_pct > guide.success_above_pct:
        return "success", round(speedup, 4)
    if gain_pct >= guide.neutral_from_pct:
        return "neutral", round(speedup, 4)
    return "failure", round(speedup, 4)
