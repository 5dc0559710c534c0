"""Repairs (rules/repair.py): a broken version with nothing correct before it gets the failing kernel, then every
op, on the conservative path; once both were tried the job stops and says why; after a broken version that
a correct one precedes, the advisor goes on from the best. In process: the advisor and the loop driver on a
file state store (no workers, no GPU)."""
from __future__ import annotations

from pathlib import Path

from orchestrator.loop import Driver
from orchestrator.records import IterationState, JobState, TaskReport
from orchestrator.state import open_store
from rules import advise
from rules.records import AdviceRequest, Hypothesis, IterationRecord
from workers.compile import apply_edit
from workers.compile.schedule import conservative_schedule
from workers.records import (CompileResult, MeasureResult, ModelInfo, OpInfo, OpSchedule, ScheduleEdit,
                             ScheduleParams, Timing)

from test_rules_advisor import hand_written

CONV = OpInfo(0, "linalg.conv_2d_nchw_fchw", "conv", [8, 64, 56, 56, 32, 3, 3],
              ["parallel"] * 4 + ["reduction"] * 3, "f32")
ROWS = OpInfo(1, "linalg.generic", "reduction", [4096, 1155], ["parallel", "reduction"], "f32")
MODEL = ModelInfo("m", "m.py", [CONV, ROWS], [[8, 32, 58, 58]], ["float32"], [], [[8, 64, 56, 56]], 0.1)
V0 = ScheduleParams(ops=[OpSchedule(0, "conv", [1, 1, 4, 56, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0], vectorize=True),
                         OpSchedule(1, "reduction", [1, 0], [0, 0], block_reduction=105, vectorize=True)])
NOT_MEASURED = MeasureResult(0, "skipped", error="not measured")


def did_not_compile(version: int, failing_op: int | None, stage: str = "transform") -> CompileResult:
    return CompileResult(version, False, stage, error='the transform schedule failed\nat loc("-":12:3): it broke',
                         failing_op=failing_op)


def wrong(version: int) -> MeasureResult:
    return MeasureResult(version, "wrong_result", correct=False, max_abs_err=8.16, time=Timing(10.0, 9.0, 11.0, 50))


def request(*iterations: tuple[ScheduleParams, CompileResult, MeasureResult, Hypothesis | None]) -> AdviceRequest:
    history = [IterationRecord(v, params, compiled, measured, hypothesis=h, outcome="failure")
               for v, (params, compiled, measured, h) in enumerate(iterations)]
    return AdviceRequest(model=MODEL, current=history[-1].params, history=history, max_iterations=8)


def test_a_kernel_that_did_not_compile_goes_on_the_conservative_path():
    decision = advise(request((V0, did_not_compile(0, 0), NOT_MEASURED, None)))
    h = decision.hypothesis
    assert decision.action == "continue" and h.family == "conservative_kernel" and decision.bottleneck == "failure"
    assert h.edit == ScheduleEdit(0, "schedule", conservative_schedule(CONV, "conv").to_dict())
    assert "v0 did not compile (transform): the transform schedule failed" in decision.evidence[0].text
    repaired = apply_edit(V0, h.edit)
    conv = repaired.ops[0]
    assert not conv.vectorize and conv.thread_tile[3] == 1 and conv.block_tile[4:] == [0, 0, 0]
    assert repaired.ops[1] == V0.ops[1], "the other kernel keeps its schedule"


def test_when_the_failing_kernel_is_already_conservative_every_op_goes_on_it():
    first = advise(request((V0, did_not_compile(0, 0), NOT_MEASURED, None))).hypothesis
    v1 = apply_edit(V0, first.edit)
    decision = advise(request((V0, did_not_compile(0, 0), NOT_MEASURED, None),
                              (v1, did_not_compile(1, 0), NOT_MEASURED, first)))
    assert decision.hypothesis.family == "conservative_all"
    assert apply_edit(v1, decision.hypothesis.edit).ops == [conservative_schedule(CONV, "conv"),
                                                             conservative_schedule(ROWS, "reduction")]


def test_a_wrong_result_puts_every_op_on_the_conservative_path_then_stops_with_its_reason():
    """A wrong result names no kernel: every op goes conservative; if that is wrong too, nothing is left."""
    compiled = CompileResult(0, True, "done")
    decision = advise(request((V0, compiled, wrong(0), None)))
    assert decision.hypothesis.family == "conservative_all"
    assert "v0 ran but wrong result: max abs error 8.16" in decision.evidence[0].text
    v1 = apply_edit(V0, decision.hypothesis.edit)
    stop = advise(request((V0, compiled, wrong(0), None), (v1, CompileResult(1, True, "done"), wrong(1),
                                                             decision.hypothesis)))
    assert stop.action == "stop" and stop.stop_reason.startswith("no correct version: every repair was tried")
    assert "v1 ran but wrong result" in stop.stop_reason and stop.evidence[0].rule == "repairs_exhausted"


def test_a_farm_failure_is_no_repair():
    """A compile task that died (stage 'task') says nothing about the schedule."""
    decision = advise(request((V0, did_not_compile(0, None, stage="task"), NOT_MEASURED, None)))
    assert decision.action == "stop" and decision.hypothesis is None


def test_after_a_broken_version_the_advisor_goes_on_from_the_best_and_says_so():
    measured = MeasureResult(0, "ok", correct=True, time=Timing(100.0, 99.0, 101.0, 50),
                             kernels=[hand_written(sm=20, mem=20, waves=0.3, name="forward_kernel")])
    tried = Hypothesis("vectorize", ScheduleEdit(1, "vectorize", False), "", "")
    history = [IterationRecord(0, V0, CompileResult(0, True, "done", kernel_ops=[0]), measured, outcome="baseline"),
               IterationRecord(1, V0, CompileResult(1, True, "done"), wrong(1), hypothesis=tried, outcome="failure")]
    decision = advise(AdviceRequest(model=MODEL, current=V0, history=history, max_iterations=8, rejected=[tried]))
    assert decision.action == "continue" and decision.hypothesis.family not in ("conservative_kernel", "conservative_all")
    assert decision.evidence[0].rule == "go_on_from_best" and "starts from v0" in decision.evidence[0].text


def test_the_loop_repairs_a_v0_that_did_not_compile_instead_of_ending_the_job(tmp_path):
    """Compile-only too: the job ends once a version compiled, each repair a version of its own."""
    store = open_store(f"file://{tmp_path}/state")
    v0 = IterationState(0, "compiling", V0, "v0")
    assert store.create_job(JobState(job_id="b.m", batch="b", model_path="/m.py", job_dir=str(tmp_path / "m"),
                                     chip="sm_90a", max_iterations=4, compile_only=True, status="iterating",
                                     created=1.0, iterations=[v0], model=MODEL))
    driver = Driver(store)
    job = driver._advance(store.get_job("b.m"), TaskReport("b.m:v0:compile", "compile", compile=did_not_compile(0, 0)))
    assert job.status == "iterating" and len(job.iterations) == 2
    v1 = job.iterations[1]
    assert v1.hypothesis.family == "conservative_kernel" and v1.params.ops[0] == conservative_schedule(CONV, "conv")
    assert "v0 did not compile" in (Path(job.job_dir) / "v1" / "hypothesis.txt").read_text()
    job = driver._advance(job, TaskReport("b.m:v1:compile", "compile", compile=CompileResult(1, True, "done")))
    assert (job.status, job.stop_reason) == ("done", "compile-only run")
