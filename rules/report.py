"""hypothesis.txt: what the next version changes, why, and how it will be judged."""
from __future__ import annotations

from rules.records import AdviceRequest, Decision
from workers.records import ScheduleEdit


def edit_text(edit: ScheduleEdit) -> str:
    """One line for an edit; a whole schedule (a repair's) by its tiles."""
    def tiles(s: dict) -> str:
        return f"op {s['op_index']} block_tile {s['block_tile']}, thread_tile {s['thread_tile']}"

    target = "every op" if edit.op_index == -1 else f"op {edit.op_index}"
    if edit.field == "schedule":
        return f"{target} schedule := {tiles(edit.value)} (nothing else)"
    if edit.field == "ops" and edit.op_index == -1:
        return f"every op's schedule := {'; '.join(map(tiles, edit.value))} (nothing else)"
    return f"{target} {edit.field} := {edit.value}"


def hypothesis_text(decision: Decision, request: AdviceRequest) -> str:
    """The change (or the stop and its reason), the expected effect, the evidence with the rule that
    fired and the rules version, the accept/reject rule, and the experience-store priors used."""
    h = decision.hypothesis
    lines = [f"hypothesis: {h.family}: {edit_text(h.edit)}" if h else f"stop: {decision.stop_reason}",
             f"bottleneck: {decision.bottleneck}" + (f" (kernel {h.kernel})" if h else ""),
             f"rules version: {decision.rules_version} (rules/guide.json)"]
    if h:
        lines += [f"expected effect: {h.expected_effect}", f"accept/reject: {h.accept_rule}"]
    lines.append("evidence:")
    for e in decision.evidence:
        shown = ", ".join(f"{k}={v:g}" for k, v in e.metrics.items())
        lines.append(f"  - [{e.rule}] {e.text}" + (f" ({shown})" if shown else ""))
    if not any(e.rule == "experience_prior" for e in decision.evidence):
        lines.append("experience priors: none used (no log, or no past success on a similar case)")
    if request.rejected:
        lines.append("not retried (rejected before): " + "; ".join(
            f"{r.family} {r.edit.field}={r.edit.value}" for r in request.rejected))
    return "\n".join(lines) + "\n"
