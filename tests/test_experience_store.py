"""The experience log: record, recommend for similar cases only, export, and feed the advisor."""
from __future__ import annotations

import subprocess
import sys

from experience.records import CaseFingerprint, Outcome
from experience.store import ExperienceStore, normalise, outcome_of
from rules import advise, hypothesis_text
from rules.records import Hypothesis, IterationRecord
from test_rules_advisor import MATMUL, hand_written, matmul_schedule, request_for
from workers.records import CompileResult, MeasureResult, ScheduleEdit, ScheduleParams, Timing

MM = CaseFingerprint("matmul", [1024, 1024, 1024], "f32", "sm_90a")


def outcome(family: str, result: str, speedup: float, fingerprint=MM, bottleneck="latency-bound") -> Outcome:
    return Outcome(model="m", fingerprint=fingerprint, bottleneck=bottleneck, dominant_stall="long_scoreboard",
                   hypothesis=Hypothesis(family, ScheduleEdit(0, "thread_tile", [8, 4, 0]), "", ""),
                   outcome=result, speedup=speedup)


def test_record_recommend_and_export(tmp_path):
    store = ExperienceStore(str(tmp_path / "log.jsonl"))
    store.record(outcome("register_tiling", "success", 1.5))
    store.record(outcome("register_tiling", "failure", 0.9))
    store.record(outcome("more_blocks", "success", 1.1, CaseFingerprint("matmul", [512, 512, 512], "f32", "sm_90a")))
    store.record(outcome("vectorize", "success", 3.0, CaseFingerprint("elementwise", [1024, 1024], "f32", "sm_90a")))
    ranked = store.recommend(MM, "latency")
    assert [r.family for r in ranked] == ["register_tiling", "more_blocks"]
    assert (ranked[0].successes, ranked[0].trials) == (1, 2)
    assert ranked[1].score < 1.1, "a less similar shape weighs less"
    frame = store.to_dataframe()
    assert len(frame) == 4 and set(frame["bottleneck"]) == {"latency"}


def test_the_chip_alone_does_not_make_a_case_similar(tmp_path):
    store = ExperienceStore(str(tmp_path / "log.jsonl"))
    store.record(outcome("vectorize", "success", 2.0, CaseFingerprint("elementwise", [1024, 1024, 1024], "f32", "sm_90a")))
    store.record(outcome("vectorize", "success", 2.0, CaseFingerprint("matmul", [1024, 1024, 1024], "f16", "sm_90a")))
    assert store.recommend(MM, "latency") == []


def test_bottleneck_names_are_normalised():
    assert normalise("Memory-Bound") == "memory" and normalise("small_grid") == "latency"


def test_past_success_reorders_the_advisors_route(tmp_path):
    store = ExperienceStore(str(tmp_path / "log.jsonl"))
    req = request_for(MATMUL, matmul_schedule(), [hand_written(waves=0.2, sm=3, mem=4)])
    plain = advise(req)
    assert plain.hypothesis.family == "more_blocks"
    assert "experience priors: none used" in hypothesis_text(plain, req)
    store.record(outcome("register_tiling", "success", 2.0))
    d = advise(req, store)
    assert d.hypothesis.family == "register_tiling"
    prior = next(e for e in d.evidence if e.rule == "experience_prior")
    assert prior.metrics == {"register_tiling": 2.0}
    assert "[experience_prior]" in hypothesis_text(d, req) and "1/1 succeeded" in hypothesis_text(d, req)


def test_outcome_of_an_iteration(tmp_path):
    req = request_for(MATMUL, matmul_schedule(), [hand_written(name="forward_kernel")])
    h = Hypothesis("more_blocks", ScheduleEdit(0, "block_tile", [64, 32, 0]), "", "", bottleneck="latency",
                   kernel="forward_kernel")
    after = IterationRecord(1, ScheduleParams(ops=[matmul_schedule()]), CompileResult(1, True, "done"),
                            MeasureResult(1, "ok", correct=True, time=Timing(50.0, 50.0, 50.0, 5)),
                            hypothesis=h, outcome="success", speedup_vs_best=2.0)
    o = outcome_of(req.model, req.history[0], after)
    assert (o.fingerprint.op_family, o.bottleneck, o.outcome, o.speedup) == ("matmul", "latency", "success", 2.0)
    assert o.metrics_before is not None and o.dominant_stall == "n/a"
    after.measure = None  # the orchestrator's IterationState before (or without) a measurement
    assert outcome_of(req.model, req.history[0], after).metrics_after is None


def test_cli_recommend_and_export(tmp_path):
    log = tmp_path / "log.jsonl"
    ExperienceStore(str(log)).record(outcome("register_tiling", "success", 1.5))
    run = lambda *a: subprocess.run([sys.executable, "-m", "orchestrator.cli", "experience", "--log", str(log), *a],  # noqa: E731
                                    capture_output=True, text=True)
    rec = run("recommend", "--family", "matmul", "--shape", "1024x1024x1024", "--bottleneck", "latency")
    assert rec.returncode == 0 and "register_tiling" in rec.stdout
    exp = run("export", "--format", "csv")
    assert exp.returncode == 0 and exp.stdout.splitlines()[0].startswith("model,op_family")


def test_cli_functions_return_what_they_print(tmp_path):
    from experience import cli

    store = ExperienceStore(str(tmp_path / "log.jsonl"))
    store.record(outcome("register_tiling", "success", 1.5))
    assert cli.recommend(store, "matmul", [1024, 1024, 1024], "latency").startswith("register_tiling")
    assert "no past success" in cli.recommend(store, "matmul", [1024, 1024, 1024], "memory")
    table = cli.export(store, "markdown").splitlines()
    assert table[0].startswith("| model | op_family") and len(table) == 3
