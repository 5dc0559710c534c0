"""The advisor: NCU metrics of the best iteration -> bottleneck class -> exactly one schedule change,
or a stop with its reason. Thresholds, rule order and routes come from rules/guide.json; the
classification runs in durable-rules (rules/engine.py); every decision carries its evidence.

Public API: `advise`, `classify_outcome`, `hypothesis_text`, `RULES_VERSION`.
"""
from __future__ import annotations

from rules.engine import Classification, classify
from rules.guide import Guide, load
from rules.outcome import classify_outcome
from rules.records import AdviceRequest, Decision, Evidence, Hypothesis, IterationRecord
from rules.routing import GENERATORS
from workers.records import KernelMetrics, OpSchedule

RULES_VERSION = load().version
__all__ = ["advise", "classify_outcome", "hypothesis_text", "RULES_VERSION"]


def _best(history: list[IterationRecord]) -> IterationRecord | None:
    measured = [h for h in history if h.measure.status == "ok" and h.measure.correct and h.measure.time]
    return min(measured, key=lambda h: (h.measure.time.median_us, h.version)) if measured else None


def _metrics(k: KernelMetrics, share: float) -> dict[str, float]:
    return {"sm_sol_pct": k.sm_throughput_pct, "memory_sol_pct": k.memory_throughput_pct,
            "dram_pct": k.dram_throughput_pct, "waves_per_sm": k.waves_per_sm,
            "achieved_occupancy_pct": k.achieved_occupancy_pct, "theoretical_occupancy_pct": k.theoretical_occupancy_pct,
            "registers_per_thread": float(k.registers_per_thread), "grid_size": float(k.grid_size),
            "block_size": float(k.block_size), "duration_us": k.duration_us, "share_of_time": round(share, 3)}


def _stop(reason: str, bottleneck: str = "unknown", evidence: list[Evidence] | None = None) -> Decision:
    return Decision(action="stop", bottleneck=bottleneck, evidence=evidence or [], rules_version=RULES_VERSION,
                    stop_reason=reason)


def _stop_before_routing(request: AdviceRequest, guide: Guide, best: IterationRecord | None) -> str | None:
    history = request.history
    if len(history) >= request.max_iterations:
        return f"reached the iteration limit ({request.max_iterations})"
    if best is None:
        return "no correct, measured iteration to advise from"
    eager = best.measure.eager
    if request.target_speedup_vs_eager and eager and \
            eager.median_us / best.measure.time.median_us >= request.target_speedup_vs_eager:
        return f"target met: v{best.version} is {eager.median_us / best.measure.time.median_us:.2f}x eager"
    recent = [h.outcome for h in history[1:]][-guide.no_gain_iterations:]
    if len(recent) == guide.no_gain_iterations and "success" not in recent:
        return f"no explained gain in the last {guide.no_gain_iterations} iterations ({', '.join(recent)})"
    if not best.measure.kernels:
        return f"v{best.version} has no NCU metrics to classify (profiling was skipped or failed)"
    return None


def advise(request: AdviceRequest, experience=None) -> Decision:
    """Exactly one next hypothesis, or a stop decision; the same inputs give the same decision."""
    guide = load()
    best = _best(request.history)
    reason = _stop_before_routing(request, guide, best)
    if reason:
        return _stop(reason)
    kernels = best.measure.kernels
    total = sum(k.duration_us for k in kernels) or 1.0
    kernel_ops = best.compile.kernel_ops if len(best.compile.kernel_ops) == len(kernels) else []
    schedules = {s.op_index: s for s in request.current.ops}
    evidence: list[Evidence] = []
    saturated = []
    order = sorted(range(len(kernels)), key=lambda i: (-kernels[i].duration_us, i))  # where the time goes
    classes = classify(kernels, guide)
    for i in order:
        c, k = classes[i], kernels[i]
        schedule = schedules.get(kernel_ops[i]) if kernel_ops else None
        if schedule is None:
            continue
        metrics = _metrics(k, k.duration_us / total)
        limit = guide.thresholds["saturated"]
        if c.bottleneck == "near_limits" and min(k.sm_throughput_pct, k.memory_throughput_pct) >= limit:
            saturated.append(k.kernel)
            evidence.append(Evidence("saturated", k.kernel, metrics,
                                     f"{k.kernel}: SM and memory SOL both >= {limit}%: no line of hypotheses left"))
            continue
        hypothesis, skipped = _route(request, guide, c, k, schedule, experience)
        evidence += skipped
        if hypothesis:
            evidence.append(Evidence(c.rule, k.kernel, metrics,
                                     f"{k.kernel} (op {schedule.op_index}, {schedule.family}, "
                                     f"{100 * k.duration_us / total:.0f}% of kernel time) is {c.bottleneck}-bound "
                                     f"by rule {c.rule} (all matching: {', '.join(c.matched)})"))
            return Decision(action="continue", bottleneck=c.bottleneck, evidence=evidence,
                            rules_version=RULES_VERSION, hypothesis=hypothesis)
    if saturated and len(saturated) == len(kernels):
        return _stop("resource saturated: every kernel is at its SM and memory limits", "near_limits", evidence)
    return _stop("no route left: every applicable hypothesis was tried, rejected or is not expressible yet",
                 evidence=evidence)


def _route(request: AdviceRequest, guide: Guide, c: Classification, k: KernelMetrics, schedule: OpSchedule,
           experience) -> tuple[Hypothesis | None, list[Evidence]]:
    op = request.model.ops[schedule.op_index]
    has_reduction = schedule.family in ("matmul", "conv", "reduction", "pooling") or "reduction" in op.iterator_types
    families = guide.route(c.bottleneck, schedule.family)
    if experience is not None:  # past successes on similar cases rank first; ties keep the guide's order
        from experience.records import CaseFingerprint

        prior = {r.family: r.score for r in experience.recommend(
            CaseFingerprint(schedule.family, op.loop_ranges, op.dtype, request.current.chip), c.bottleneck)}
        families = sorted(families, key=lambda f: -prior.get(f, 0.0))
    skipped = []
    rejected = {(h.family, h.edit.to_json()) for h in request.rejected}
    for name in families:
        family = guide.families[name]
        if not family.available:
            skipped.append(Evidence("not_expressible", k.kernel, {}, f"{name} skipped: {family.unavailable_reason}"))
            continue
        if family.touches == "compute" and k.memory_throughput_pct >= guide.thresholds["no_compute_changes_above_memory_sol"]:
            skipped.append(Evidence("memory_saturated", k.kernel, {"memory_sol_pct": k.memory_throughput_pct},
                                    f"{name} skipped: memory SOL is saturated, compute changes cannot help"))
            continue
        edit = GENERATORS[family.generator](schedule, op, has_reduction)
        if edit is None or (name, edit.to_json()) in rejected:
            continue
        return Hypothesis(family=name, edit=edit, expected_effect=family.expected, accept_rule=guide.accept_rule,
                          bottleneck=c.bottleneck, kernel=k.kernel), skipped
    return None, skipped


def hypothesis_text(decision: Decision, request: AdviceRequest) -> str:
    """hypothesis.txt: the change, what it should do, the evidence, and how it will be judged."""
    h = decision.hypothesis
    lines = [f"hypothesis: {h.family}: op {h.edit.op_index} {h.edit.field} := {h.edit.value}" if h
             else f"stop: {decision.stop_reason}",
             f"bottleneck: {decision.bottleneck}" + (f" (kernel {h.kernel})" if h else ""),
             f"rules version: {decision.rules_version} (rules/guide.json)"]
    if h:
        lines += [f"expected effect: {h.expected_effect}", f"accept/reject: {h.accept_rule}"]
    lines.append("evidence:")
    for e in decision.evidence:
        shown = ", ".join(f"{k}={v:g}" for k, v in e.metrics.items())
        lines.append(f"  - [{e.rule}] {e.text}" + (f" ({shown})" if shown else ""))
    if request.rejected:
        lines.append("not retried (rejected before): " + "; ".join(
            f"{r.family} {r.edit.field}={r.edit.value}" for r in request.rejected))
    return "\n".join(lines) + "\n"
