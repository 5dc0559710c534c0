"""Repairs: a version that did not compile, faulted or computed wrong results, with no correct version
before it to go on from, gets one repair hypothesis (guide.json's repair order: the failing kernel on the
conservative path, then every op), or a stop once every repair was tried. The job never just ends at a
broken version; where a correct version exists the next one starts from it (rules/advisor.py)."""
from __future__ import annotations

from typing import Callable

from rules.guide import Guide
from rules.records import AdviceRequest, Decision, Evidence, Hypothesis, IterationRecord
from workers.records import ScheduleEdit

REPAIR_BOTTLENECK = "failure"  # the class a repair decision names


def broken(h: IterationRecord, guide: Guide) -> str | None:
    """What went wrong with `h` that a repair answers (the schedule's fault, not the farm's), or None."""
    if not h.compile.ok:
        if h.compile.stage in guide.infra_compile_stages:
            return None
        first = next((line for line in h.compile.error.splitlines() if line.strip()), "no error text")
        return f"v{h.version} did not compile ({h.compile.stage}): {first[:300]}"
    if h.measure.status in guide.broken_measure_statuses:
        detail = f"max abs error {h.measure.max_abs_err:.3g}" if h.measure.status == "wrong_result" and \
            h.measure.max_abs_err is not None else h.measure.error[:300]
        return f"v{h.version} ran but {h.measure.status.replace('_', ' ')}" + (f": {detail}" if detail else "")
    return None


def _conservative_kernel(request: AdviceRequest, latest: IterationRecord) -> tuple[ScheduleEdit, str] | None:
    """The kernel a compile failure's diagnostic points at (CompileResult.failing_op) on the conservative path."""
    from workers.compile.schedule import conservative_schedule  # the compile stage's always-legal tiling

    op_index = latest.compile.failing_op
    if op_index is None:
        return None
    op = request.model.ops[op_index]
    current = next((s for s in request.current.ops if s.op_index == op_index), None)
    schedule = conservative_schedule(op, current.family if current else op.family)
    if current == schedule:
        return None
    return ScheduleEdit(op_index, "schedule", schedule.to_dict()), f"op {op_index}'s kernel ({op.name})"


def _conservative_all(request: AdviceRequest, latest: IterationRecord) -> tuple[ScheduleEdit, str] | None:
    from workers.compile.schedule import conservative_schedule

    schedules = [conservative_schedule(op, op.family) for op in request.model.ops]
    if request.current.ops == schedules:
        return None
    return ScheduleEdit(-1, "ops", [s.to_dict() for s in schedules]), "every op"


GENERATORS: dict[str, Callable[[AdviceRequest, IterationRecord], tuple[ScheduleEdit, str] | None]] = {
    "conservative_kernel": _conservative_kernel,
    "conservative_all": _conservative_all,
}


def repair(request: AdviceRequest, guide: Guide, tried: set[str]) -> Decision | None:
    """The repair of the latest version where it is broken (None where it is not): the first repair family
    whose edit was not `tried` before, or a stop saying that every repair was tried."""
    latest = request.history[-1]
    why = broken(latest, guide)
    if why is None:
        return None
    for name in guide.repair_order:
        found = GENERATORS[guide.families[name].generator](request, latest)
        if found is None or found[0].to_json() in tried:
            continue
        edit, target = found
        evidence = Evidence(f"repair_{name}", "model", {}, f"{why}; no correct version to go on from, so {target} "
                                                            "goes on the conservative path")
        return Decision(action="continue", bottleneck=REPAIR_BOTTLENECK, evidence=[evidence],
                        rules_version=guide.version,
                        hypothesis=Hypothesis(family=name, edit=edit, expected_effect=guide.families[name].expected,
                                              accept_rule=guide.repair_accept_rule, bottleneck=REPAIR_BOTTLENECK))
    return Decision(action="stop", bottleneck=REPAIR_BOTTLENECK, rules_version=guide.version,
                    evidence=[Evidence("repairs_exhausted", "model", {}, why)],
                    stop_reason=f"no correct version: every repair was tried ({', '.join(guide.repair_order)}); "
                                f"the last: {why}")
