"""advise(): NCU metrics of the best iteration -> bottleneck class -> exactly one schedule change, or a
stop with its reason. Kernels are visited where the time goes (longest first); each kernel's class
picks a route (guide.json), past successes on similar cases re-rank it, and suppressions drop
families: a saturated resource line, compute changes when memory is at the roof, and hypotheses rejected
before (unless they failed for infrastructure reasons). Every decision, a stop too, carries its evidence."""
from __future__ import annotations

from dataclasses import dataclass, field

from rules.engine import Classification, classify
from rules.guide import Guide, load
from rules.kernels import kernel_op_indices
from rules.outcome import is_infrastructure_failure
from rules.records import AdviceRequest, Decision, Evidence, Hypothesis, IterationRecord
from rules.repair import broken, repair
from rules.routing import edit_for
from workers.records import KernelMetrics, OpSchedule, ScheduleEdit, img2col_op
from workers.target import target


def _best(history: list[IterationRecord]) -> IterationRecord | None:
    measured = [h for h in history if h.measure.status == "ok" and h.measure.correct and h.measure.time]
    return min(measured, key=lambda h: (h.measure.time.median_us, h.version)) if measured else None


def _infra(h: IterationRecord) -> bool:
    return is_infrastructure_failure(h.compile, h.measure)


def _metrics(k: KernelMetrics, share: float) -> dict[str, float]:
    return {"sm_sol_pct": k.sm_throughput_pct, "memory_sol_pct": k.memory_throughput_pct,
            "dram_pct": k.dram_throughput_pct, "waves_per_sm": k.waves_per_sm,
            "achieved_occupancy_pct": k.achieved_occupancy_pct, "theoretical_occupancy_pct": k.theoretical_occupancy_pct,
            "registers_per_thread": float(k.registers_per_thread), "grid_size": float(k.grid_size),
            "block_size": float(k.block_size), "local_store_bytes": float(k.spill_bytes or 0),
            "duration_us": k.duration_us, "share_of_time": round(share, 3)}


def _stop(reason: str, guide: Guide, bottleneck: str = "unknown", evidence: list[Evidence] | None = None) -> Decision:
    return Decision(action="stop", bottleneck=bottleneck, evidence=evidence or [], rules_version=guide.version,
                    stop_reason=reason)


def _stop_before_routing(request: AdviceRequest, guide: Guide, best: IterationRecord | None) -> Decision | None:
    """A stop that needs no kernel's class, with its evidence; None to go on routing."""
    history = request.history

    def stop(rule: str, reason: str, metrics: dict[str, float] | None = None) -> Decision:
        return _stop(reason, guide, evidence=[Evidence(rule, "model", metrics or {}, reason)])

    if len(history) >= request.max_iterations:
        return stop("iteration_limit", f"reached the iteration limit ({request.max_iterations})",
                    {"iterations": float(len(history))})
    if best is None:
        statuses = ", ".join(f"v{h.version} {h.measure.status if h.compile.ok else 'did not compile'}" for h in history)
        return stop("no_correct_version", f"no correct, measured iteration to advise from ({statuses})")
    eager = best.measure.eager
    if request.target_speedup_vs_eager and eager and \
            eager.median_us / best.measure.time.median_us >= request.target_speedup_vs_eager:
        speedup = eager.median_us / best.measure.time.median_us
        return stop("target_met", f"target met: v{best.version} is {speedup:.2f}x eager",
                    {"speedup_vs_eager": round(speedup, 4), "target": request.target_speedup_vs_eager})
    # infrastructure failures say nothing about the hypotheses: they do not count as iterations without gain
    recent = [h for h in history[1:] if not _infra(h)][-guide.no_gain_iterations:]
    if len(recent) == guide.no_gain_iterations and not any(h.outcome == "success" for h in recent):
        shown = ", ".join(f"v{h.version} {h.outcome}" + (f" ({h.hypothesis.family})" if h.hypothesis else "")
                          for h in recent)
        return stop("no_explained_gain", f"no explained gain in the last {guide.no_gain_iterations} iterations "
                                         f"({shown})")
    if not best.measure.kernels:
        return stop("no_metrics", f"v{best.version} has no NCU metrics to classify (profiling was skipped or failed)")
    return None


def _edit_key(edit: ScheduleEdit) -> str:
    # the change itself, whatever family proposed it: two families may produce the same edit
    return edit.to_json()


def blocked_edits(request: AdviceRequest, guide: Guide) -> set[str]:
    """Edits not to propose again: rejected ones, and ones tried without success, except those whose
    every attempt failed for infrastructure reasons, at most guide.infra_retries times."""
    attempts: dict[str, list[IterationRecord]] = {}
    for h in request.history:
        if h.hypothesis is not None:
            attempts.setdefault(_edit_key(h.hypothesis.edit), []).append(h)

    def retryable(key: str) -> bool:
        tries = attempts.get(key, [])
        return bool(tries) and all(_infra(t) for t in tries) and len(tries) <= guide.infra_retries

    judged = {k for k, tries in attempts.items() if any(t.outcome in ("failure", "neutral") for t in tries)}
    return {k for k in judged | {_edit_key(h.edit) for h in request.rejected} if not retryable(k)}


@dataclass
class _Routing:
    """What routing one kernel gave: a hypothesis or nothing, and why families were skipped."""

    hypothesis: Hypothesis | None = None
    evidence: list[Evidence] = field(default_factory=list)
    saturated: bool = False  # a family was dropped because its resource line is saturated


def advise(request: AdviceRequest, experience=None) -> Decision:
    """Exactly one next hypothesis, or a stop decision; the same inputs give the same decision. A broken
    version with nothing correct before it gets a repair (rules/repair.py); after a broken version that a
    correct one precedes, the next starts from the best (request.current), which undoes the change."""
    guide = load()
    best = _best(request.history)
    if best is None and request.history and len(request.history) < request.max_iterations:
        repaired = repair(request, guide, {_edit_key(h.hypothesis.edit) for h in request.history if h.hypothesis})
        if repaired is not None:
            return repaired
    stopped = _stop_before_routing(request, guide, best)
    if stopped:
        return stopped
    kernels = best.measure.kernels
    total = sum(k.time_us() for k in kernels) or 1.0  # a kernel in a host loop counts once per time step
    op_of = kernel_op_indices(kernels, best.compile, request.current, request.model)
    schedules = {s.op_index: s for s in request.current.ops}
    blocked = blocked_edits(request, guide)
    classes = classify(kernels, guide)
    why = broken(request.history[-1], guide)
    evidence = [Evidence("go_on_from_best", "model", {}, f"{why}; the next version starts from v{best.version}, the "
                                                         "best correct one")] if why else []
    top_saturated = None
    for rank, i in enumerate(sorted(range(len(kernels)), key=lambda i: (-kernels[i].time_us(), i))):
        c, k = classes[i], kernels[i]
        schedule = schedules.get(op_of[i])
        if schedule is None:
            continue
        routed = _route(request, guide, c, k, schedule, blocked, experience)
        evidence += routed.evidence
        if rank == 0:
            top_saturated = routed.saturated
        if routed.hypothesis:
            evidence.append(Evidence(c.rule, k.kernel, _metrics(k, k.time_us() / total),
                                     f"{k.kernel} (op {schedule.op_index}, {schedule.family}, "
                                     f"{100 * k.time_us() / total:.0f}% of kernel time) is {c.bottleneck}-bound "
                                     f"by rule {c.rule} (all matching: {', '.join(c.matched)})"))
            return Decision(action="continue", bottleneck=c.bottleneck, evidence=evidence,
                            rules_version=guide.version, hypothesis=routed.hypothesis)
    top_class = classes[max(range(len(kernels)), key=lambda i: (kernels[i].time_us(), -i))].bottleneck
    if top_saturated:
        return _stop("resource saturated: the kernel where the time goes is at its SOL limit on every line "
                     "left to try, and no other kernel has a route", guide, top_class, evidence)
    return _stop("no route left: every applicable hypothesis was tried, rejected or is not expressible yet",
                 guide, top_class, evidence)


def _ranked_families(request: AdviceRequest, guide: Guide, c: Classification, k: KernelMetrics,
                     schedule: OpSchedule, experience) -> tuple[list[str], list[Evidence]]:
    """The route of the kernel's class and op family; past successes on similar cases rank first
    (ties keep the guide's order). Also the evidence of the priors used."""
    families = guide.route(c.bottleneck, schedule.family)
    if experience is None:
        return families, []
    from experience.records import CaseFingerprint

    op = request.model.ops[schedule.op_index]
    found = experience.recommend(CaseFingerprint(schedule.family, op.loop_ranges, op.dtype, request.current.chip),
                                 c.bottleneck)
    prior = {r.family: r for r in found if r.family in families}
    if not prior:
        return families, []
    ranked = sorted(families, key=lambda f: -(prior[f].score if f in prior else 0.0))
    shown = ", ".join(f"{r.family} (score {r.score:g}, {r.successes}/{r.trials} succeeded)" for r in prior.values())
    return ranked, [Evidence("experience_prior", k.kernel, {f: r.score for f, r in prior.items()},
                             f"past successes on similar {schedule.family} cases that were {c.bottleneck}-bound: "
                             f"{shown}; route order {', '.join(ranked)}")]


def _route(request: AdviceRequest, guide: Guide, c: Classification, k: KernelMetrics, schedule: OpSchedule,
           blocked: set[str], experience) -> _Routing:
    op = request.model.ops[schedule.op_index]
    if schedule.img2col:  # its tiles address the img2col matmul's loops
        op = img2col_op(op)
    has_reduction = schedule.family in ("matmul", "conv", "reduction", "pooling") or "reduction" in op.iterator_types
    families, priors = _ranked_families(request, guide, c, k, schedule, experience)
    out = _Routing(evidence=priors)
    t = guide.thresholds
    saturated = {line for line, sol in (("memory", k.memory_throughput_pct), ("compute", k.sm_throughput_pct))
                 if sol > t["saturated"]}
    for name in families:
        family = guide.families[name]
        if family.touches == "compute" and k.memory_throughput_pct >= t["no_compute_changes_above_memory_sol"]:
            out.evidence.append(Evidence("memory_saturated", k.kernel, {"memory_sol_pct": k.memory_throughput_pct},
                                         f"{name} skipped: memory SOL is saturated, compute changes cannot help"))
            out.saturated = True
            continue
        if family.touches in saturated:
            sol = k.memory_throughput_pct if family.touches == "memory" else k.sm_throughput_pct
            out.evidence.append(Evidence(f"{family.touches}_line_saturated", k.kernel, {f"{family.touches}_sol_pct": sol},
                                         f"{name} skipped: {family.touches} SOL {sol:g}% is over {t['saturated']:g}%, "
                                         f"that line is exhausted"))
            out.saturated = True
            continue
        edit = edit_for(family.generator, schedule, op, has_reduction, target(request.current.chip))
        if edit is None or _edit_key(edit) in blocked:
            continue
        out.hypothesis = Hypothesis(family=name, edit=edit, expected_effect=family.expected,
                                    accept_rule=guide.accept_rule, bottleneck=c.bottleneck, kernel=k.kernel)
        return out
    return out
