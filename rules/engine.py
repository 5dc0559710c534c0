"""The bottleneck classifier as a durable-rules ruleset.

durable-rules is not thread-safe and a ruleset cannot be redefined: the ruleset is defined once per
process and guide version, every use holds one lock, and each classification runs in its own session
id, retracts its facts and deletes the session. The rules run on a private host without durable's
background dispatcher thread (durable.lang's shared host starts one, and it may take a pending action
out from under the lock), so every action runs inside `classify`. Each fact carries a unique id (the
engine hashes facts). All rules that match a kernel fire; the guide's order picks the class, so the
result does not depend on firing order.
"""
from __future__ import annotations

import itertools
import operator
import threading
from dataclasses import dataclass

from durable import engine as durable_engine
from durable.lang import m, when_all

from rules.guide import Guide
from workers.records import KernelMetrics

_lock = threading.Lock()
_defined: set[str] = set()
_fired: dict[str, set[str]] = {}
_session_ids = itertools.count()


class _SyncHost(durable_engine.Host):
    """A durable host whose actions run only in the thread that asserts (no timer threads: no timers used)."""

    def _run(self) -> None:
        pass


_host = _SyncHost()


@dataclass
class Classification:
    kernel: str
    bottleneck: str
    rule: str
    matched: list[str]  # every rule that matched, in the guide's priority order


def _record(rule: str):
    def action(c):
        _fired.setdefault(c.m.id, set()).add(rule)
    return action


OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}


def condition(clauses: list, thresholds: dict):
    """A durable-rules condition over a kernel fact from a guide rule's `if`: every [fact, operator, value]
    holds, the value a number or the name of a threshold. No clause: the catch-all, which every fact matches
    (a fact that matches no rule would raise)."""
    if not clauses:
        return +m.kind
    found = m.kind == "kernel"
    for field, op, value in clauses:
        if field not in FACT_FIELDS or op not in OPERATORS or not isinstance(value, (int, float)) \
                and value not in thresholds:
            raise ValueError(f"a guide rule's clause {[field, op, value]}: facts are {sorted(FACT_FIELDS)}, operators "
                             f"{sorted(OPERATORS)}, values numbers or thresholds")
        found = found & OPERATORS[op](getattr(m, field), thresholds.get(value, value))
    return found


def _define(name: str, guide: Guide) -> None:
    _host.register_rulesets({name: {rule: when_all(condition(clauses, guide.thresholds))(_record(rule)).define()
                                    for rule, clauses in guide.rule_conditions.items()}})


# the fields of a kernel fact that guide rules test (facts_of)
FACT_FIELDS = ("sm", "mem", "mem_over_sm", "sm_over_mem", "waves", "occupancy_gap", "theoretical_occupancy",
               "block_size", "grid_size", "local_bytes_per_thread")


def facts_of(k: KernelMetrics, fact_id: str) -> dict:
    return {"id": fact_id, "kind": "kernel", "sm": k.sm_throughput_pct, "mem": k.memory_throughput_pct,
            "mem_over_sm": k.memory_throughput_pct - k.sm_throughput_pct,
            "sm_over_mem": k.sm_throughput_pct - k.memory_throughput_pct, "waves": k.waves_per_sm,
            "occupancy_gap": k.theoretical_occupancy_pct - k.achieved_occupancy_pct,
            "theoretical_occupancy": k.theoretical_occupancy_pct,
            "block_size": k.block_size, "grid_size": k.grid_size,
            "local_bytes_per_thread": (k.spill_bytes or 0) / max(1, k.grid_size * k.block_size)}


def classify(kernels: list[KernelMetrics], guide: Guide) -> list[Classification]:
    name = "bottleneck_" + guide.version.replace(".", "_").replace("-", "_")
    with _lock:
        if name not in _defined:
            _define(name, guide)
            _defined.add(name)
        session = f"s{next(_session_ids)}"
        results = []
        for i, k in enumerate(kernels):
            fact = {"sid": session, **facts_of(k, f"{session}-{i}")}
            _host.assert_fact(name, fact)
            _host.retract_fact(name, fact)
            fired = _fired.pop(fact["id"], set())
            matched = [r for r in guide.rule_classes if r in fired]
            results.append(Classification(kernel=k.kernel, bottleneck=guide.rule_classes[matched[0]],
                                          rule=matched[0], matched=matched))
        if kernels:
            _host.delete_state(name, session)
        return results
