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


def _conditions(t: dict) -> dict:
    """Rule name -> condition over a kernel fact; thresholds from the guide. The names are the guide's."""
    kernel = m.kind == "kernel"
    return {
        "launch_pathology": kernel & (m.block_size == 1) & (m.grid_size > t["pathology_grid"]),
        "local_memory": kernel & (m.local_bytes_per_thread > t["local_bytes_per_thread"]),
        "small_grid": kernel & (m.waves < t["min_waves"]) & (m.sm < t["latency_sol"]) & (m.mem < t["latency_sol"]),
        "memory_bound": kernel & (m.mem > t["near_limit"]) & (m.mem_over_sm >= t["memory_margin"]),
        "compute_bound": kernel & (m.sm > t["near_limit"]) & (m.sm_over_mem >= t["memory_margin"]),
        "near_limits": kernel & (m.sm > t["near_limit"]) & (m.mem > t["near_limit"]),
        "register_limited": kernel & (m.theoretical_occupancy < t["low_theoretical_occupancy"]),
        "occupancy_bound": kernel & (m.occupancy_gap > t["occupancy_gap"]),
        "latency_bound": kernel & (m.sm < t["latency_sol"]) & (m.mem < t["latency_sol"]),
        "unclassified": +m.kind,  # catch-all: a fact that matches nothing would raise
    }


def _define(name: str, guide: Guide) -> None:
    conditions = _conditions(guide.thresholds)
    if set(conditions) != set(guide.rule_classes):
        raise ValueError(f"guide {guide.version} classifies by rules {sorted(guide.rule_classes)}, "
                         f"the engine defines {sorted(conditions)}")
    _host.register_rulesets({name: {rule: when_all(cond)(_record(rule)).define()
                                    for rule, cond in conditions.items()}})


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
