"""rules/guide.json: the one versioned place for thresholds, classification order, routes and
hypothesis families."""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

GUIDE_PATH = os.path.join(os.path.dirname(__file__), "guide.json")


@dataclass(frozen=True)
class Family:
    name: str
    generator: str
    touches: str  # resource line: "launch" | "memory" | "traffic" | "compute"; "repair" for repairs
    expected: str


@dataclass(frozen=True)
class Guide:
    version: str
    thresholds: dict
    rule_classes: dict  # rule name -> class, in priority order
    rule_conditions: dict  # rule name -> its `if`: [fact, operator, number or threshold name] clauses (engine.py)
    routes: dict  # class -> op family (or "*") -> [family names]
    families: dict  # name -> Family
    success_above_pct: float
    neutral_from_pct: float
    no_gain_iterations: int
    accept_rule: str
    infra_compile_stages: tuple[str, ...]  # compile stages / measure statuses that are the farm's failures,
    infra_measure_statuses: tuple[str, ...]  # not the schedule's: such a hypothesis may be retried
    infra_retries: int
    broken_measure_statuses: tuple[str, ...]  # measurements a repair answers (rules/repair.py)
    repair_order: tuple[str, ...]  # repair families, first choice first
    repair_accept_rule: str
    edits: dict  # the bounds the routes' edits keep (routing.py)

    def route(self, bottleneck: str, op_family: str) -> list[str]:
        by_family = self.routes.get(bottleneck, self.routes["unknown"])
        return by_family.get(op_family, by_family.get("*", []))


@functools.lru_cache(maxsize=None)
def load(path: str = GUIDE_PATH) -> Guide:
    with open(path) as f:
        raw = json.load(f)
    families = {name: Family(name=name, **spec) for name, spec in raw["families"].items()}
    routes = raw["routes"]
    unknown = {f for by_op in routes.values() for names in by_op.values() for f in names} - set(families)
    if unknown:
        raise ValueError(f"{path}: routes name undefined hypothesis families {sorted(unknown)}")
    if "unknown" not in routes or raw["classification"][-1]["rule"] != "unclassified":
        raise ValueError(f"{path}: needs an 'unknown' route and the catch-all rule 'unclassified' last")
    if set(raw["repair"]["order"]) - set(families):
        raise ValueError(f"{path}: the repair order names undefined families "
                         f"{sorted(set(raw['repair']['order']) - set(families))}")
    return Guide(version=raw["version"], thresholds=raw["thresholds"],
                 rule_classes={r["rule"]: r["class"] for r in raw["classification"]},
                 rule_conditions={r["rule"]: r["if"] for r in raw["classification"]}, routes=routes,
                 families=families, success_above_pct=raw["outcome"]["success_above_pct"],
                 neutral_from_pct=raw["outcome"]["neutral_from_pct"],
                 no_gain_iterations=raw["stop"]["no_gain_iterations"], accept_rule=raw["accept_rule"],
                 infra_compile_stages=tuple(raw["infrastructure"]["compile_stages"]),
                 infra_measure_statuses=tuple(raw["infrastructure"]["measure_statuses"]),
                 infra_retries=raw["infrastructure"]["retries"],
                 broken_measure_statuses=tuple(raw["repair"]["broken_measure_statuses"]),
                 repair_order=tuple(raw["repair"]["order"]), repair_accept_rule=raw["repair"]["accept_rule"],
                 edits={k: v for k, v in raw["edits"].items() if k != "about"})
