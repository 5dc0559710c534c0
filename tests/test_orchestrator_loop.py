"""The loop driver's transitions, in process on a file state store (no workers, no GPU): a version whose
edit compiled to the kernels of an earlier one is not measured."""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.loop import Driver, params_summary
from orchestrator.records import IterationState, JobState, TaskReport
from orchestrator.reports import final_report
from orchestrator.state import open_store
from rules.records import Decision, Evidence, Hypothesis
from workers.records import CompileResult, MeasureResult, OpSchedule, ScheduleEdit, ScheduleParams, Timing

NO_OP = Hypothesis("vectorize", ScheduleEdit(0, "vectorize", True), "", "")


def _v1_compiled(tmp_path, digest: str, v0_status: str = "ok") -> JobState:
    """A job whose v0 (kernels digest "d0") was measured (`v0_status`) and whose v1 (hypothesis NO_OP)
    compiled to `digest`, after the driver took the compile report."""
    store = open_store(f"file://{tmp_path}/state")
    params = ScheduleParams(ops=[])
    v0 = IterationState(0, "complete", params, "v0", compile=CompileResult(0, True, "done", kernels_digest="d0"),
                        measure=MeasureResult(0, v0_status, correct=True, time=Timing(10.0, 9.9, 10.1, 50)),
                        outcome="baseline")
    v1 = IterationState(1, "compiling", params, "v1", hypothesis=NO_OP)
    assert store.create_job(JobState(job_id="b.m", batch="b", model_path="/m.py", job_dir=str(tmp_path / "m"),
                                     chip="sm_90a", max_iterations=2, compile_only=False, status="iterating",
                                     created=1.0, iterations=[v0, v1]))
    report = TaskReport("b.m:v1:compile", "compile", compile=CompileResult(1, True, "done", kernels_digest=digest))
    return Driver(store)._advance(store.get_job("b.m"), report)


def test_a_version_with_the_kernels_of_an_earlier_one_is_not_measured(tmp_path):
    job = _v1_compiled(tmp_path, "d0")
    v1 = job.iterations[1]
    assert (v1.stage, v1.outcome, v1.measure) == ("complete", "neutral", None)
    assert job.rejected == [NO_OP], "the advisor does not propose the edit again"
    assert job.best_version == 0 and job.status == "done"
    benchmark = (Path(job.job_dir) / "v1" / "benchmark.md").read_text()
    assert "not measured: v1 compiled to the same kernels and launches as v0" in benchmark
    assert "Measure: not measured, the same kernels and launches as v0" in final_report(job, job.iterations[0], "")


@pytest.mark.parametrize("digest, v0_status", [("d1", "ok"), ("d0", "timeout")])
def test_a_version_with_new_kernels_or_an_unsettled_twin_is_measured(tmp_path, digest, v0_status):
    """New kernels, or the kernels of a version whose measurement a timeout cut short."""
    job = _v1_compiled(tmp_path, digest, v0_status)
    assert job.iterations[1].stage == "measuring" and job.rejected == []


def test_a_schedule_line_names_every_knob_away_from_its_default():
    """hypothesis.txt of v0 shows the schedule it ran: the loop run on the H200 showed softmax's row
    kernel as a plain reduction, its row_kernel and warp_merge left out."""
    params = ScheduleParams(ops=[OpSchedule(5, "reduction", [1, 0], [0, 0], vectorize=True, row_kernel=1024,
                                            warp_merge=True),
                                 OpSchedule(6, "elementwise", [1, 0], [0, 4], fuse_producers=False)])
    assert params_summary(params).splitlines()[1:] == [
        "op 5 (reduction): block_tile [1, 0], thread_tile [0, 0], reduction_tile 0, tensor_core none, vectorize, "
        "row_kernel 1024, warp_merge",
        "op 6 (elementwise): block_tile [1, 0], thread_tile [0, 4], reduction_tile 0, tensor_core none, "
        "fuse_producers False"]


def test_the_final_report_gives_the_evidence_of_the_advisors_stop(tmp_path):
    """A stop right after v0 leads to no version whose hypothesis would carry its evidence: the report's
    header line of the decision does."""
    job = _v1_compiled(tmp_path, "d0")
    saturated = Evidence("compute_line_saturated", "forward_kernel", {"compute_sol_pct": 80.77},
                         "tensor_cores skipped: compute SOL 80.77% is over 80%, that line is exhausted")
    job.last_decision = Decision("stop", "compute", [saturated], "r1", stop_reason="no route left")
    report = final_report(job, job.iterations[0], "")
    assert ("- advisor's last decision: stop (bottleneck compute, rules r1): no route left\n"
            "  - `compute_line_saturated` on forward_kernel: tensor_cores skipped: compute SOL 80.77% is over 80%, "
            "that line is exhausted (compute_sol_pct=80.77)") in report


def test_a_store_outage_outside_a_jobs_step_is_waited_out(tmp_path, monkeypatch):
    """Redis gone past the store's retries while the driver counts its compile workers (each tick) or reads
    the jobs' final states: the driver waits or answers from the states it last saw, instead of ending with
    the ConnectionError (the 60 s outage of test_orchestrator_faults.py hit the count now and then)."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    store = open_store(f"file://{tmp_path}/state")
    assert store.create_job(JobState(job_id="b.m", batch="b", model_path="/m.py", job_dir=str(tmp_path / "m"),
                                     chip="sm_90a", max_iterations=1, compile_only=True, status="done",
                                     created=1.0, reported=True))
    read = store.get_job
    calls = {"workers": 0, "get_job": 0}

    def unreachable(name: str, then):
        def call(*args):
            calls[name] += 1
            if name == "workers" or calls[name] > 1:
                raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
            return then(*args)
        return call

    monkeypatch.setattr(store, "workers", unreachable("workers", lambda: []))
    monkeypatch.setattr(store, "get_job", unreachable("get_job", read))
    assert [job.job_id for job in Driver(store).run(["b.m"])] == ["b.m"]
    assert calls == {"workers": 1, "get_job": 2}
