"""Outcome of a measured iteration against the best one before it (DESIGN.md: success if correct and
more than 5% faster; neutral within 2-5%; failure otherwise), and which failures are the farm's
rather than the schedule's. The percentages and the infrastructure failures live in guide.json."""
from __future__ import annotations

from rules.guide import load
from workers.records import CompileResult, MeasureResult


def classify_outcome(baseline: MeasureResult | None, candidate: MeasureResult) -> tuple[str, float | None]:
    """("baseline" | "success" | "neutral" | "failure", speedup of candidate over baseline)."""
    guide = load()
    if candidate.status != "ok" or not candidate.correct or candidate.time is None:
        return "failure", None
    if baseline is None or baseline.time is None:
        return "baseline", None
    speedup = baseline.time.median_us / candidate.time.median_us
    # rounded so that exactly 5% (105 us -> 100 us) is not "more than 5%" by float noise
    gain_pct = round((speedup - 1.0) * 100.0, 9)
    if gain_pct > guide.success_above_pct:
        return "success", round(speedup, 4)
    if gain_pct >= guide.neutral_from_pct:
        return "neutral", round(speedup, 4)
    return "failure", round(speedup, 4)


def is_infrastructure_failure(compile: CompileResult | None, measure: MeasureResult | None) -> bool:
    """The iteration failed because of the farm (a lost task, a timeout, a dead GPU process), so its
    hypothesis was never really judged."""
    guide = load()
    if compile is not None and not compile.ok:
        return compile.stage in guide.infra_compile_stages
    return measure is not None and measure.status in guide.infra_measure_statuses
