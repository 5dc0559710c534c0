"""The advisor: NCU metrics of the best iteration -> bottleneck class -> exactly one schedule change,
or a stop with its reason. Thresholds, rule order and routes come from rules/guide.json
(rules/guide.py); the classification runs in durable-rules (rules/engine.py); routing and
suppression in rules/advisor.py; schedule edits in rules/routing.py; outcomes in rules/outcome.py;
hypothesis.txt in rules/report.py.

Public API: `advise`, `classify_outcome`, `hypothesis_text`, `RULES_VERSION`.
"""
from __future__ import annotations

from rules.advisor import advise
from rules.guide import load
from rules.outcome import classify_outcome
from rules.report import hypothesis_text

RULES_VERSION = load().version
__all__ = ["advise", "classify_outcome", "hypothesis_text", "RULES_VERSION"]
