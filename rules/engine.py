"""The bottleneck classifier as a durable-rules ruleset.

durable-rules is not thread-safe and a ruleset cannot be redefined: the ruleset is defined once per
process and guide version, every use holds one lock, and each classification runs in its own session
id and retracts its facts. Each fact carries a unique id (the engine hashes facts). All rules that
match a kernel fire; the guide's order picks the class, so the result does not depend on firing order.
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from durable.lang import assert_fact, m, retract_fact, ruleset, when_all

from rules.guide import Guide
from workers.records import KernelMetrics

_lock = threading.Lock()
_defined: set[str] = set()
_fired: dict[str, set[str]] = {}
_session_ids = itertools.count()


@dataclass
class Classification:
    kernel: str
    bottleneck: str
    rule: str
    matched: list[str]  # every rule that matched, in the guide's priority order


def _record(rule: str):
    def action(c):
        _fired.setdefault(c.m.id, set()).add(rule)
    action.__name__ = rule
    return action


def _define(name: str, t: dict) -> None:
    kernel = m.kind == "kernel"
    with ruleset(name):
        when_all(kernel & (m.block_size == 1) & (m.grid_size > t["pathology_grid"]))(_record("launch_pathology"))
        when_all(kernel & (m.waves < t["min_waves"]) & (m.sm < t["latency_sol"]) & (m.mem < t["latency_sol"]))(
            _record("small_grid"))
        when_all(kernel & (m.mem > t["near_limit"]) & (m.mem_over_sm >= t["memory_margin"]))(_record("memory_bound"))
        when_all(kernel & (m.sm > t["near_limit"]) & (m.sm_over_mem >= t["memory_margin"]))(_record("compute_bound"))
        when_all(kernel & (m.sm > t["near_limit"]) & (m.mem > t["near_limit"]))(_record("near_limits"))
        when_all(kernel & (m.occupancy_gap > t["occupancy_gap"]))(_record("occupancy_bound"))
        when_all(kernel & (m.sm < t["latency_sol"]) & (m.mem < t["latency_sol"]))(_record("latency_bound"))
        when_all(+m.kind)(_record("unclassified"))  # catch-all: a fact that matches nothing would raise


def facts_of(k: KernelMetrics, fact_id: str) -> dict:
    return {"id": fact_id, "kind": "kernel", "sm": k.sm_throughput_pct, "mem": k.memory_throughput_pct,
            "mem_over_sm": k.memory_throughput_pct - k.sm_throughput_pct,
            "sm_over_mem": k.sm_throughput_pct - k.memory_throughput_pct, "waves": k.waves_per_sm,
            "occupancy_gap": k.theoretical_occupancy_pct - k.achieved_occupancy_pct,
            "block_size": k.block_size, "grid_size": k.grid_size}


def classify(kernels: list[KernelMetrics], guide: Guide) -> list[Classification]:
    name = "bottleneck_" + guide.version.replace(".", "_").replace("-", "_")
    with _lock:
        if name not in _defined:
            _define(name, guide.thresholds)
            _defined.add(name)
        session = f"s{next(_session_ids)}"
        results = []
        for i, k in enumerate(kernels):
            fact = {"sid": session, **facts_of(k, f"{session}-{i}")}
            _fired.pop(fact["id"], None)
            assert_fact(name, fact)
            retract_fact(name, fact)
            fired = _fired.pop(fact["id"], set())
            matched = [r for r in guide.rule_classes if r in fired]
            results.append(Classification(kernel=k.kernel, bottleneck=guide.rule_classes[matched[0]],
                                          rule=matched[0], matched=matched))
        return results
