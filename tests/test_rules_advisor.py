"""The advisor: each bottleneck class, route, suppression and stop reason. Metric records are either
recorded on the H200 (tests/data/measure, parsed by the measure worker) or hand-written edge cases,
marked `hand_written` below."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import rules
from rules import advise, classify_outcome, hypothesis_text
from rules import engine
from rules.engine import classify
from rules.guide import load
from rules.routing import GENERATORS, edit_for
from workers.target import target
from rules.records import AdviceRequest, Hypothesis, IterationRecord
from workers.measure.ncu import parse_csv
from workers.records import (CompileResult, KernelMetrics, MeasureResult, ModelInfo, OpInfo, OpSchedule, img2col_op,
                             ScheduleEdit, ScheduleParams, Timing)

DATA = Path(__file__).parent / "data" / "measure"
H200 = target("sm_90a")
MATMUL = OpInfo(0, "linalg.matmul", "matmul", [1024, 1024, 1024], ["parallel", "parallel", "reduction"], "f32")
MATMUL_F16 = OpInfo(0, "linalg.matmul", "matmul", [4096, 4096, 4096], ["parallel", "parallel", "reduction"], "f16")
ELEMENTWISE = OpInfo(0, "linalg.generic", "elementwise", [1024, 4096], ["parallel", "parallel"], "f32")


def hand_written(sm=20.0, mem=20.0, waves=4.0, achieved=80.0, theoretical=100.0, block=256, grid=4096, name="k0"):
    """A hand-written KernelMetrics for an edge case (not a GPU recording)."""
    return KernelMetrics(kernel=name, duration_us=100.0, sm_throughput_pct=sm, memory_throughput_pct=mem,
                         dram_throughput_pct=mem, achieved_occupancy_pct=achieved,
                         theoretical_occupancy_pct=theoretical, registers_per_thread=32, spill_bytes=0,
                         grid_size=grid, block_size=block, waves_per_sm=waves)


def request_for(op: OpInfo, schedule: OpSchedule, kernels: list[KernelMetrics], history_outcomes=(),
                max_iterations=8, rejected=(), target=None) -> AdviceRequest:
    params = ScheduleParams(ops=[schedule])
    measured = MeasureResult(0, "ok", correct=True, time=Timing(100.0, 99.0, 101.0, 50),
                             eager=Timing(50.0, 49.0, 51.0, 50), kernels=kernels)
    history = [IterationRecord(0, params, CompileResult(0, True, "done", kernel_ops=[op.index] * len(kernels)),
                               measured, outcome="baseline")]
    for v, outcome in enumerate(history_outcomes, start=1):
        slower = MeasureResult(v, "ok", correct=True, time=Timing(120.0, 119.0, 121.0, 50), kernels=kernels)
        history.append(IterationRecord(v, params, CompileResult(v, True, "done", kernel_ops=[op.index]), slower,
                                       outcome=outcome))
    model = ModelInfo("m", "m.py", [op], [[1]], ["float32"], [], [[1]], 0.1)
    return AdviceRequest(model=model, current=params, history=history, max_iterations=max_iterations,
                         target_speedup_vs_eager=target, rejected=list(rejected))


def on_mma_sync(op: OpInfo, schedule: OpSchedule, kernels: list[KernelMetrics]) -> AdviceRequest:
    """The advice for an f16 mma.sync kernel whose move to wgmma (warpgroup_mma, first on each route of a
    matmul) was tried and rejected: what the mma.sync routes offer next."""
    first = advise(request_for(op, schedule, kernels)).hypothesis
    assert first.family == "warpgroup_mma" and first.edit.value["tensor_core"] == "wgmma"
    return request_for(op, schedule, kernels, rejected=[first])


def matmul_schedule(**kw) -> OpSchedule:
    return OpSchedule(0, "matmul", [64, 64, 0], [4, 4, 0], **kw)


@pytest.mark.parametrize("metrics, expected", [
    (dict(block=1, grid=100000, sm=1, mem=1), ("launch_pathology", "launch_pathology")),
    (dict(waves=0.3, sm=5, mem=8), ("latency", "small_grid")),
    (dict(sm=20, mem=75), ("memory", "memory_bound")),
    (dict(sm=85, mem=30), ("compute", "compute_bound")),
    (dict(sm=70, mem=72), ("near_limits", "near_limits")),
    (dict(sm=65, mem=30, achieved=20, theoretical=100), ("compute", "compute_bound")),
    (dict(sm=50, mem=55, achieved=20, theoretical=100), ("occupancy", "occupancy_bound")),
    (dict(sm=20, mem=20, achieved=30, theoretical=37.5), ("occupancy", "register_limited")),
    (dict(sm=30, mem=35, achieved=95), ("latency", "latency_bound")),
    (dict(sm=61, mem=55, achieved=95), ("unknown", "unclassified")),
])
def test_each_bottleneck_class(metrics, expected):
    (c,) = classify([hand_written(**metrics)], load())
    assert (c.bottleneck, c.rule) == expected


def test_recorded_h200_small_grid_matmul_is_latency_bound():
    kernels = parse_csv((DATA / "ncu_raw_mlp_h200.csv").read_text())
    classes = {c.kernel: c for c in classify(kernels, load())}
    assert classes["forward_kernel_2"].bottleneck == "latency" and classes["forward_kernel_2"].rule == "small_grid"


def test_the_rules_conditions_are_the_guides_data(tmp_path):
    """A rule's `if` in guide.json is its condition: a guide whose small_grid asks for under 5 waves (not 1)
    classifies a kernel of 2 waves by it; a clause on an unknown fact is refused."""
    import json

    raw = json.loads(Path(rules.guide.GUIDE_PATH).read_text())
    raw["version"] += "-test"
    next(r for r in raw["classification"] if r["rule"] == "small_grid")["if"][0] = ["waves", "<", 5]
    (tmp_path / "guide.json").write_text(json.dumps(raw))
    kernel = hand_written(waves=2.0, sm=20, mem=20, achieved=95)
    assert classify([kernel], load())[0].rule == "latency_bound"
    assert classify([kernel], load(str(tmp_path / "guide.json")))[0].rule == "small_grid"
    with pytest.raises(ValueError, match="facts are"):
        engine.condition([["wavez", "<", 5]], {})


def test_ruleset_is_defined_once_however_often_it_is_used():
    classify([hand_written()], load())
    defined = set(engine._defined)
    for _ in range(5):
        classify([hand_written()], load())
    assert engine._defined == defined and f"bottleneck_{load().version}".replace(".", "_").replace("-", "_") in defined


def test_latency_bound_matmul_gets_more_blocks():
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(waves=0.2, sm=3, mem=4)]))
    assert d.action == "continue" and d.bottleneck == "latency"
    assert (d.hypothesis.family, d.hypothesis.edit) == ("more_blocks", ScheduleEdit(0, "block_tile", [64, 32, 0]))
    assert d.evidence[-1].rule == "small_grid" and d.evidence[-1].metrics["waves_per_sm"] == 0.2


def test_memory_bound_elementwise_widens_the_thread_tile_then_vectorizes():
    """Vectorizing one element a thread gives the same PTX (the loop saw such versions as "same kernels"):
    only a wider thread tile is vectorized."""
    schedule = OpSchedule(0, "elementwise", [4, 64], [1, 1])
    d = advise(request_for(ELEMENTWISE, schedule, [hand_written(sm=20, mem=75)]))
    assert (d.hypothesis.family, d.hypothesis.edit.field, d.hypothesis.edit.value) == \
        ("wider_thread_tile", "thread_tile", [1, 2])
    d2 = advise(request_for(ELEMENTWISE, schedule, [hand_written(sm=20, mem=75)], rejected=[d.hypothesis]))
    assert d2.action == "stop", "a rejected hypothesis is not retried, and one element a thread is not vectorized"
    wider = OpSchedule(0, "elementwise", [4, 64], [1, 2])
    d3 = advise(request_for(ELEMENTWISE, wider, [hand_written(sm=20, mem=75)]))
    d4 = advise(request_for(ELEMENTWISE, wider, [hand_written(sm=20, mem=75)], rejected=[d3.hypothesis]))
    assert d3.hypothesis.edit.value == [1, 4] and d4.hypothesis.family == "vectorize"


def test_compute_bound_f16_matmul_goes_to_tensor_cores_and_f32_to_register_tiling():
    f16 = dataclasses.replace(MATMUL, dtype="f16")
    d = advise(request_for(f16, matmul_schedule(), [hand_written(sm=75, mem=30)]))
    assert (d.hypothesis.family, d.hypothesis.edit.field, d.hypothesis.edit.value) == \
        ("tensor_cores", "tensor_core", "mma_sync")
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(sm=75, mem=30)]))
    assert d.hypothesis.family == "register_tiling", "mma.sync has no f32 (tf32) path yet"


def test_no_compute_change_when_memory_sol_is_saturated():
    schedule = matmul_schedule(reduction_tile=8, vectorize=True)
    tried = [Hypothesis("more_blocks", ScheduleEdit(0, "block_tile", [64, 32, 0]), "", "")]
    d = advise(request_for(MATMUL, schedule, [hand_written(sm=20, mem=95)], rejected=tried))
    assert d.hypothesis.family == "promote_shared", "staging the operands cuts the traffic that saturates"
    tried.append(Hypothesis("promote_shared", ScheduleEdit(0, "promote_shared", True), "", ""))
    d = advise(request_for(MATMUL, schedule, [hand_written(sm=20, mem=95)], rejected=tried))
    assert d.action == "stop", "register_tiling, the only route left, touches compute"
    assert any(e.rule == "memory_saturated" and "register_tiling" in e.text for e in d.evidence)
    d = advise(request_for(MATMUL, schedule, [hand_written(sm=20, mem=75)], rejected=tried))
    assert d.hypothesis.family == "register_tiling", "below the saturation threshold the same route applies"


def test_reduction_is_tiled_before_it_is_vectorized():
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(sm=20, mem=75)]))
    assert (d.hypothesis.family, d.hypothesis.edit.field) == ("reduction_tiling", "reduction_tile")
    d = advise(request_for(MATMUL, matmul_schedule(reduction_tile=8), [hand_written(sm=20, mem=75)]))
    assert (d.hypothesis.family, d.hypothesis.edit.field) == ("vectorize", "vectorize")


def test_launch_pathology_gets_more_threads_first():
    schedule = OpSchedule(0, "elementwise", [4, 64], [1, 2])
    d = advise(request_for(ELEMENTWISE, schedule, [hand_written(block=1, grid=1 << 20, sm=1, mem=1)]))
    assert d.bottleneck == "launch_pathology" and d.hypothesis.family == "more_threads"


@pytest.mark.parametrize("kwargs, reason, rule", [
    (dict(max_iterations=1), "iteration limit", "iteration_limit"),
    (dict(target=0.4), "target met", "target_met"),
    (dict(history_outcomes=("failure", "neutral", "failure")), "no explained gain", "no_explained_gain"),
])
def test_stop_reasons_carry_their_evidence(kwargs, reason, rule):
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(waves=0.2, sm=3, mem=4)], **kwargs))
    assert d.action == "stop" and reason in d.stop_reason
    assert [e.rule for e in d.evidence] == [rule] and reason in hypothesis_text(d, request_for(
        MATMUL, matmul_schedule(), [hand_written()]))


def test_stop_when_saturated_and_when_no_route_is_left():
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(sm=85, mem=88)]))
    assert d.action == "stop" and "saturated" in d.stop_reason
    tried = [Hypothesis("more_blocks", ScheduleEdit(0, "block_tile", [64, 32, 0]), "", ""),
             Hypothesis("reduction_tiling", ScheduleEdit(0, "reduction_tile", 8), "", ""),
             Hypothesis("vectorize", ScheduleEdit(0, "vectorize", True), "", ""),
             Hypothesis("register_tiling", ScheduleEdit(0, "thread_tile", [4, 8, 0]), "", "")]
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(waves=0.2, sm=3, mem=4)], rejected=tried))
    assert d.action == "stop" and "no route left" in d.stop_reason


def test_no_measured_iteration_means_stop():
    req = request_for(MATMUL, matmul_schedule(), [hand_written()])
    req.history[0].measure = MeasureResult(0, "skipped", error="no GPU")
    assert "no correct, measured iteration" in advise(req).stop_reason


def test_same_inputs_give_the_same_decision():
    req = request_for(MATMUL, matmul_schedule(), parse_csv((DATA / "ncu_raw_mlp_h200.csv").read_text())[:1])
    assert advise(req).to_json() == advise(req).to_json()


@pytest.mark.parametrize("ours, outcome", [(90.0, "success"), (96.0, "neutral"), (99.0, "failure"), (130.0, "failure")])
def test_outcome_boundaries(ours, outcome):
    base = MeasureResult(0, "ok", correct=True, time=Timing(100.0, 100.0, 100.0, 50))
    got, speedup = classify_outcome(base, MeasureResult(1, "ok", correct=True, time=Timing(ours, ours, ours, 50)))
    assert got == outcome and speedup == pytest.approx(100.0 / ours, rel=1e-3)


def test_incorrect_or_failed_is_failure_and_first_is_baseline():
    fast_but_wrong = MeasureResult(1, "wrong_result", correct=False, time=Timing(1.0, 1.0, 1.0, 5))
    assert classify_outcome(None, fast_but_wrong) == ("failure", None)
    assert classify_outcome(None, MeasureResult(0, "ok", correct=True, time=Timing(5.0, 5.0, 5.0, 5)))[0] == "baseline"


def test_hypothesis_text_carries_evidence_and_rule_version():
    req = request_for(MATMUL, matmul_schedule(), [hand_written(waves=0.2, sm=3, mem=4)])
    text = hypothesis_text(advise(req), req)
    assert "more_blocks" in text and "small_grid" in text and rules.RULES_VERSION in text
    assert "waves_per_sm=0.2" in text and "accept/reject" in text


def test_the_engine_runs_on_its_own_host_without_durables_dispatcher_thread():
    import durable.lang

    for _ in range(3):
        classify([hand_written(sm=20, mem=75), hand_written(sm=85, mem=30, name="k1")], load())
    assert durable.lang._main_host is None, "durable.lang's shared host runs actions from a timer thread"
    assert isinstance(engine._host, engine._SyncHost)


def test_saturated_memory_line_is_stopped_but_traffic_reduction_is_not():
    """hand_written: memory-bound elementwise kernel at 85% memory SOL (over the 80% saturation)."""
    schedule = OpSchedule(0, "elementwise", [4, 64], [1, 1], fuse_producers=False)
    d = advise(request_for(ELEMENTWISE, schedule, [hand_written(sm=20, mem=85)]))
    assert d.hypothesis.family == "fusion", "wider_thread_tile and vectorize work on the saturated memory line"
    assert {e.rule for e in d.evidence} >= {"memory_line_saturated"}
    schedule.fuse_producers = True
    d = advise(request_for(ELEMENTWISE, schedule, [hand_written(sm=20, mem=85)]))
    assert d.action == "stop" and d.stop_reason.startswith("resource saturated")
    d = advise(request_for(ELEMENTWISE, schedule, [hand_written(sm=20, mem=75)]))
    assert d.hypothesis.family == "wider_thread_tile", "under 80% the memory line is open"


def test_saturated_compute_line_stops_register_tiling():
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(sm=85, mem=30)]))
    assert d.action == "stop" and d.stop_reason.startswith("resource saturated")
    assert any(e.rule == "compute_line_saturated" and "register_tiling" in e.text for e in d.evidence)


def test_a_rejected_edit_is_not_retried_under_another_family_name():
    same_edit = Hypothesis("wider_thread_tile", ScheduleEdit(0, "thread_tile", [4, 8, 0]), "", "")
    d = advise(request_for(MATMUL, matmul_schedule(), [hand_written(sm=75, mem=30)], rejected=[same_edit]))
    assert d.action == "stop" and "no route left" in d.stop_reason, "register_tiling would make the same edit"


def _tried(request: AdviceRequest, hypothesis: Hypothesis, compile_stage: str = "done",
           measure_status: str = "ok", outcome: str = "failure") -> None:
    """Append a history iteration that tried `hypothesis` and ended as given."""
    v = len(request.history)
    compiled = CompileResult(v, compile_stage == "done", compile_stage, kernel_ops=[0])
    measured = MeasureResult(v, measure_status, correct=measure_status == "ok", time=Timing(120.0, 119.0, 121.0, 5))
    request.history.append(IterationRecord(v, request.current, compiled, measured, hypothesis, outcome))


MORE_BLOCKS = Hypothesis("more_blocks", ScheduleEdit(0, "block_tile", [64, 32, 0]), "", "")


def test_infrastructure_failures_may_be_retried_once_schedule_failures_never():
    latency = [hand_written(waves=0.2, sm=3, mem=4)]
    req = request_for(MATMUL, matmul_schedule(), latency, rejected=[MORE_BLOCKS])
    _tried(req, MORE_BLOCKS, compile_stage="task")  # the compile task was lost
    assert advise(req).hypothesis.edit == MORE_BLOCKS.edit
    _tried(req, MORE_BLOCKS, measure_status="timeout")
    assert advise(req).hypothesis.edit != MORE_BLOCKS.edit, "a second infrastructure failure uses up the retry"
    req = request_for(MATMUL, matmul_schedule(), latency)
    _tried(req, MORE_BLOCKS, compile_stage="ptxas")  # the schedule's own fault, even if not listed as rejected
    assert advise(req).hypothesis.edit != MORE_BLOCKS.edit


def test_infrastructure_failures_do_not_count_as_iterations_without_gain():
    latency = [hand_written(waves=0.2, sm=3, mem=4)]
    req = request_for(MATMUL, matmul_schedule(), latency, history_outcomes=("failure", "failure"))
    _tried(req, Hypothesis("vectorize", ScheduleEdit(0, "vectorize", True), "", ""), measure_status="error")
    assert advise(req).action == "continue"
    _tried(req, Hypothesis("more_threads", ScheduleEdit(0, "thread_tile", [2, 4, 0]), "", ""))
    assert "no explained gain" in advise(req).stop_reason


def test_is_infrastructure_failure():
    from rules.outcome import is_infrastructure_failure

    ok = CompileResult(1, True, "done")
    assert is_infrastructure_failure(CompileResult(1, False, "task"), None)
    assert not is_infrastructure_failure(CompileResult(1, False, "ptxas"), None)
    assert is_infrastructure_failure(ok, MeasureResult(1, "timeout"))
    assert is_infrastructure_failure(ok, MeasureResult(1, "error"))
    assert not is_infrastructure_failure(ok, MeasureResult(1, "wrong_result"))
    assert not is_infrastructure_failure(ok, MeasureResult(1, "ok", correct=True))


def test_kernel_to_op_mapping_and_its_fallbacks():
    from rules.kernels import kernel_op_indices

    ew = OpInfo(1, "linalg.generic", "elementwise", [1024, 1024], ["parallel", "parallel"], "f32")
    model = ModelInfo("m", "m.py", [MATMUL, ew], [[1]], ["float32"], [], [[1]], 0.1)
    params = ScheduleParams(ops=[OpSchedule(1, "elementwise", [4, 64], [1, 1]), matmul_schedule()])
    two, three = [hand_written(name=f"k{i}") for i in range(2)], [hand_written(name=f"k{i}") for i in range(3)]
    assert kernel_op_indices(two, CompileResult(0, True, "done", kernel_ops=[0, 1]), params, model) == [0, 1]
    assert kernel_op_indices(two, CompileResult(0, True, "done"), params, model) == [1, 0], "schedule order"
    assert kernel_op_indices(three, CompileResult(0, True, "done", kernel_ops=[0, 1]), params, model) == [0, 0, 0], \
        "counts differ: the heaviest family's op"
    # a TF32 wgmma matmul's transposed copy of B, a kernel of its own before it: no op's knob changes it
    transposed = CompileResult(0, True, "done", kernel_ops=[0, 0, 1], kernel_families=["copy", "matmul", "elementwise"])
    assert kernel_op_indices(three, transposed, params, model) == [None, 0, 1]


def test_the_transposed_copy_of_a_tf32_wgmma_matmul_gets_no_advice_of_the_matmul():
    """Seen in the TF32 loop on the H200 (loop_h200.md 17:05): its wgmma kernel at compute SOL 81% (every
    compute line exhausted), the transpose before it memory-bound; the memory route of a matmul then deepened
    the wgmma kernel's pipeline, which does not touch the transpose. The transpose has no route: stop."""
    v0 = OpSchedule(0, "matmul", [128, 256, 0], [64, 256, 0], reduction_tile=32, promote_shared=True,
                    tensor_core="wgmma", pipeline_depth=3)
    transpose, wgmma = hand_written(name="transpose", sm=27, mem=69), hand_written(name="wgmma", sm=81, mem=59)
    transpose.duration_us, wgmma.duration_us = 8.0, 92.0
    req = request_for(MATMUL, v0, [transpose, wgmma])
    req.history[0].compile.kernel_families = ["copy", "matmul"]
    d = advise(req)
    assert d.action == "stop" and "resource saturated" in d.stop_reason, d


def test_kernels_without_a_launch_map_still_get_advice():
    req = request_for(MATMUL, matmul_schedule(), [hand_written(waves=0.2, sm=3, mem=4), hand_written(name="k1")])
    req.history[0].compile.kernel_ops = []  # an older compile record, and ncu saw two launches for one op
    d = advise(req)
    assert d.action == "continue" and d.hypothesis.edit.op_index == 0 and d.hypothesis.kernel == "k0"


@pytest.mark.parametrize("base, outcome", [(105.0, "neutral"), (105.001, "success"), (102.0, "neutral"),
                                           (101.999, "failure")])
def test_outcome_exact_boundaries(base, outcome):
    """Exactly 5% faster is not 'more than 5%'; exactly 2% is neutral (float noise must not decide)."""
    got, _ = classify_outcome(MeasureResult(0, "ok", correct=True, time=Timing(base, base, base, 5)),
                              MeasureResult(1, "ok", correct=True, time=Timing(100.0, 100.0, 100.0, 5)))
    assert got == outcome


def test_decision_json_is_identical_for_the_same_inputs_across_classes():
    for kernels in ([hand_written(sm=20, mem=85)], [hand_written(sm=75, mem=30), hand_written(waves=0.2, name="k1")]):
        req = request_for(MATMUL, matmul_schedule(), kernels)
        first = advise(req).to_json()
        assert all(advise(AdviceRequest.from_json(req.to_json())).to_json() == first for _ in range(3))


def test_parallel_reduction_splits_a_row_reduction_then_splits_it_finer():
    row_sum = OpInfo(2, "linalg.generic", "reduction", [512, 4096], ["parallel", "reduction"], "f32")
    schedule = OpSchedule(2, "reduction", [256, 0], [1, 0])
    assert "parallel_reduction" in load().route("latency", "reduction")
    first = GENERATORS["more_reduction_threads"](schedule, row_sum, True, H200)
    assert (first.field, first.value) == ("split_reduction", 64)
    schedule.split_reduction = 64
    assert GENERATORS["more_reduction_threads"](schedule, row_sum, True, H200).value == 128
    elementwise = OpInfo(3, "linalg.generic", "elementwise", [64, 128], ["parallel", "parallel"], "f32")
    assert GENERATORS["more_reduction_threads"](OpSchedule(3, "reduction", [4, 64], [1, 1]), elementwise, True, H200) is None


def test_parallel_reduction_doubles_the_threads_of_a_block_reduction():
    """v0's row reductions are block reductions: more threads per row, while each reduces 4 or more."""
    row_sum = OpInfo(2, "linalg.generic", "reduction", [512, 4096], ["parallel", "reduction"], "f32")
    schedule = OpSchedule(2, "reduction", [1, 0], [0, 0], block_reduction=256, vectorize=True)
    edit = GENERATORS["more_reduction_threads"](schedule, row_sum, True, H200)
    assert (edit.field, edit.value) == ("block_reduction", 512)
    schedule.block_reduction = 1024
    assert GENERATORS["more_reduction_threads"](schedule, row_sum, True, H200) is None  # at most 1024 threads


def test_a_row_kernel_only_takes_more_threads_per_row_or_warp_merges():
    """A row kernel (softmax in one kernel) keeps its shape, a block per row: the tile families pass it
    by, parallel_reduction doubles its threads while each keeps 4 or more columns, warp_merge ends its
    merges in warp shuffles."""
    softmax_out = OpInfo(5, "linalg.generic", "elementwise", [8192, 8192], ["parallel", "parallel"], "f32")
    schedule = OpSchedule(5, "reduction", [1, 0], [0, 0], vectorize=True, row_kernel=512)
    edit = edit_for("more_reduction_threads", schedule, softmax_out, True, H200)
    assert (edit.field, edit.value) == ("row_kernel", 1024)
    assert edit_for("enable_warp_merge", schedule, softmax_out, True, H200) == ScheduleEdit(5, "warp_merge", True)
    assert all(edit_for(generator, schedule, softmax_out, True, H200) is None
               for generator in GENERATORS if generator not in ("more_reduction_threads", "enable_warp_merge"))
    schedule.row_kernel, schedule.warp_merge = 1024, True
    assert edit_for("more_reduction_threads", schedule, softmax_out, True, H200) is None
    assert edit_for("enable_warp_merge", schedule, softmax_out, True, H200) is None
    assert edit_for("enable_warp_merge", matmul_schedule(), MATMUL, True, H200) is None, "no block reduction to merge"


def test_a_memory_bound_row_kernel_gets_its_merges_in_warp_shuffles():
    """Recorded on the H200 (layernorm over 8192x8192 in one row kernel of 1024 threads per row,
    perf_targets_h200.md run 7): memory-bound at 60% SOL with the barrier the top stall; it has the most
    threads per row already, so the advisor ends its merges in warp shuffles (it had no route left)."""
    kernels = parse_csv((DATA / "ncu_raw_layernorm_large_h200.csv").read_text())
    layernorm_out = OpInfo(0, "linalg.generic", "elementwise", [8192, 8192], ["parallel", "parallel"], "f32")
    row_kernel = OpSchedule(0, "reduction", [1, 0], [0, 0], vectorize=True, row_kernel=1024)
    d = advise(request_for(layernorm_out, row_kernel, kernels))
    assert (d.bottleneck, d.hypothesis.family, d.hypothesis.edit) == \
        ("memory", "warp_merge", ScheduleEdit(0, "warp_merge", True))


def test_a_latency_bound_tensor_core_matmul_gets_its_copies_further_ahead():
    """async_copy: the staged tiles of a tensor-core kernel in one more buffer each, filled by cp.async
    (two buffers from synchronous staging), up to four; not for a kernel that stages nothing."""
    f16 = dataclasses.replace(MATMUL, dtype="f16")
    staged = OpSchedule(0, "matmul", [128, 64, 0], [64, 64, 0], reduction_tile=32, promote_shared=True,
                        tensor_core="mma_sync")
    d = advise(on_mma_sync(f16, staged, [hand_written(waves=0.9, sm=30, mem=35, achieved=95)]))
    assert d.bottleneck == "latency"
    assert (d.hypothesis.family, d.hypothesis.edit) == ("async_copy", ScheduleEdit(0, "pipeline_depth", 2))
    assert edit_for("deepen_pipeline", dataclasses.replace(staged, pipeline_depth=3), f16, True, H200).value == 4
    assert edit_for("deepen_pipeline", dataclasses.replace(staged, pipeline_depth=4), f16, True, H200) is None
    assert edit_for("deepen_pipeline", dataclasses.replace(staged, promote_shared=False), f16, True, H200) is None
    # a staged SIMT matmul's tiles too (its copies are cp.async's), not an img2col conv's gathered ones
    simt = dataclasses.replace(staged, tensor_core="none", thread_tile=[8, 8, 0], reduction_tile=8)
    assert edit_for("deepen_pipeline", simt, MATMUL, True, H200) == ScheduleEdit(0, "pipeline_depth", 2)
    assert edit_for("deepen_pipeline", dataclasses.replace(simt, img2col=True), MATMUL, True, H200) is None
    pipelined = dataclasses.replace(simt, pipeline_depth=2)
    assert edit_for("issue_copies_ahead", pipelined, MATMUL, True, H200) == ScheduleEdit(0, "copies_ahead", True)
    assert edit_for("issue_copies_ahead", simt, MATMUL, True, H200) is None


def test_a_pipelined_tensor_core_matmul_may_issue_its_copies_ahead():
    """copies_ahead: a pipelined tensor-core kernel issues its copies before the step's mma, into a spare
    buffer; in the latency route after async_copy, which has nothing left once the pipeline is four steps
    deep; not for a kernel that stages synchronously, nor twice."""
    f16 = dataclasses.replace(MATMUL, dtype="f16")
    deepest = OpSchedule(0, "matmul", [128, 64, 0], [64, 64, 0], reduction_tile=32, promote_shared=True,
                         tensor_core="mma_sync", pipeline_depth=4)
    d = advise(on_mma_sync(f16, deepest, [hand_written(waves=0.9, sm=30, mem=35, achieved=95)]))
    assert (d.bottleneck, d.hypothesis.family, d.hypothesis.edit) == \
        ("latency", "copies_ahead", ScheduleEdit(0, "copies_ahead", True))
    assert edit_for("issue_copies_ahead", dataclasses.replace(deepest, pipeline_depth=2), f16, True, H200).value is True
    assert edit_for("issue_copies_ahead", dataclasses.replace(deepest, copies_ahead=True), f16, True, H200) is None
    assert edit_for("issue_copies_ahead", dataclasses.replace(deepest, pipeline_depth=0), f16, True, H200) is None


def test_a_register_limited_tensor_core_matmul_gets_its_pipeline_first():
    """Shaped as the f16 matmul's v0 on the H200 (perf_targets_h200.md run 26: one block of 8 warps per SM,
    12.5% theoretical occupancy by its registers, SM and memory SOL 59%): register-limited by design, so
    the occupancy route of a matmul tries the pipeline's families before the tile and register ones:
    a deeper pipeline, then copies ahead of the mma; a SIMT matmul goes on to more threads."""
    f16 = dataclasses.replace(MATMUL, dtype="f16")
    v0 = OpSchedule(0, "matmul", [256, 128, 0], [64, 64, 0], reduction_tile=64, promote_shared=True,
                    tensor_core="mma_sync", pipeline_depth=2)
    shape = hand_written(sm=59, mem=59, waves=3.88, achieved=12.5, theoretical=12.5, block=256, grid=512)
    d = advise(on_mma_sync(f16, v0, [shape]))
    assert (d.bottleneck, d.evidence[-1].rule) == ("occupancy", "register_limited")
    assert (d.hypothesis.family, d.hypothesis.edit) == ("async_copy", ScheduleEdit(0, "pipeline_depth", 3))
    deepest = dataclasses.replace(v0, pipeline_depth=4)
    assert advise(on_mma_sync(f16, deepest, [shape])).hypothesis.family == "copies_ahead"
    assert load().routes["occupancy"]["matmul"][:3] == ["warpgroup_mma", "async_copy", "copies_ahead"]


def test_an_mma_sync_matmul_of_16_bit_operands_moves_to_wgmma_first():
    """warpgroup_mma: an mma.sync kernel becomes v0's wgmma kernel (128x256 blocks of two warpgroups of
    64x256 with 3 K steps of 64 in flight; one warpgroup per 128x128 block with 4 where 256 does not divide
    the columns), one edit carrying the tiles; first on the routes of a matmul kernel of any class; not
    for a kernel on wgmma already, whose pipeline deepens to 4 steps."""
    f16 = dataclasses.replace(MATMUL, dtype="f16")
    v0 = OpSchedule(0, "matmul", [256, 128, 0], [64, 64, 0], reduction_tile=64, promote_shared=True,
                    tensor_core="mma_sync", pipeline_depth=2)
    for shape in (hand_written(sm=59, mem=59, waves=3.88, achieved=12.5, theoretical=12.5, block=256, grid=512),
                  hand_written(sm=30, mem=75), hand_written(waves=0.9, sm=30, mem=35, achieved=95)):
        d = advise(request_for(f16, v0, [shape]))
        assert d.hypothesis.family == "warpgroup_mma", d.bottleneck
        assert d.hypothesis.edit == ScheduleEdit(0, "tensor_core", {
            "tensor_core": "wgmma", "block_tile": [128, 256, 0], "thread_tile": [64, 256, 0], "reduction_tile": 64,
            "promote_shared": True, "pipeline_depth": 3, "copies_ahead": False})
    narrow = dataclasses.replace(f16, loop_ranges=[1024, 384, 1024])
    assert edit_for("enable_wgmma", v0, narrow, True, H200).value["block_tile"] == [128, 128, 0]
    # TF32 (an f32 mma.sync kernel is one): K steps of 32, and no 128x128 warpgroup
    assert edit_for("enable_wgmma", v0, MATMUL, True, H200).value["reduction_tile"] == 32
    assert edit_for("enable_wgmma", v0, dataclasses.replace(MATMUL, loop_ranges=[1024, 384, 1024]), True, H200) is None
    wgmma = OpSchedule(0, "matmul", [128, 128, 0], [128, 128, 0], reduction_tile=64, promote_shared=True,
                       tensor_core="wgmma", pipeline_depth=3)
    assert edit_for("enable_wgmma", wgmma, f16, True, H200) is None
    assert edit_for("deepen_pipeline", wgmma, f16, True, H200) == ScheduleEdit(0, "pipeline_depth", 4)
    assert edit_for("deepen_pipeline", dataclasses.replace(wgmma, pipeline_depth=4), f16, True, H200) is None
    # v0's two warpgroups of 64x256 (256 threads, 128 accumulator words each): no register cap leaves
    # them room (two blocks would cap them at 128 registers)
    two = OpSchedule(0, "matmul", [128, 256, 0], [64, 256, 0], reduction_tile=64, promote_shared=True,
                     tensor_core="wgmma", pipeline_depth=3)
    assert edit_for("cap_registers", two, f16, True, H200) is None


def memory_bound_advice(recording: str, schedule: OpSchedule, request) -> tuple:
    """The advice for the 4096^3 f16 matmul under `schedule` with the NCU `recording` (tests/data/measure),
    which classifies it memory-bound; and the recording's kernels."""
    kernels = parse_csv((DATA / recording).read_text())
    d = advise(request(MATMUL_F16, schedule, kernels))
    assert (d.bottleneck, d.evidence[-1].rule) == ("memory", "memory_bound")
    return d, kernels


def test_the_wgmma_v0_is_memory_bound_and_has_only_its_pipeline_left():
    """Recorded on the H200 (perf_targets_h200.md run 34, NCU): the f16 matmul's wgmma v0 (128x256 blocks of
    two 64x256 warpgroups, 3 steps in flight) at memory SOL 74.7% over SM 60.7%. Of the memory route only
    a deeper pipeline applies to it; once rejected (0.98x in the loop, loop_h200.md 15:26), no route is
    left: no tile family turns a wgmma kernel into one the compile stage refuses."""
    v0 = OpSchedule(0, "matmul", [128, 256, 0], [64, 256, 0], reduction_tile=64, promote_shared=True,
                    tensor_core="wgmma", pipeline_depth=3)
    d, kernels = memory_bound_advice("ncu_raw_matmul4096_f16_wgmma_h200.csv", v0, request_for)
    assert (d.hypothesis.family, d.hypothesis.edit) == ("async_copy", ScheduleEdit(0, "pipeline_depth", 4))
    last = advise(request_for(MATMUL_F16, v0, kernels, rejected=[d.hypothesis]))
    assert last.hypothesis is None and "no route left" in last.stop_reason


def test_promote_shared_stages_matmul_kernels_that_step_over_k():
    """promote_shared: an mma.sync kernel, or a SIMT matmul with a register tile per thread and a K step,
    stages its operand tiles, once; not a split or img2col kernel, nor one without a K step."""
    f16 = dataclasses.replace(MATMUL, dtype="f16")
    unstaged = OpSchedule(0, "matmul", [128, 64, 0], [64, 64, 0], reduction_tile=32, tensor_core="mma_sync")
    assert edit_for("enable_promote", unstaged, f16, True, H200) == ScheduleEdit(0, "promote_shared", True)
    assert edit_for("enable_promote", dataclasses.replace(unstaged, promote_shared=True), f16, True, H200) is None
    simt = matmul_schedule(reduction_tile=32, vectorize=True)
    assert edit_for("enable_promote", simt, MATMUL, True, H200) == ScheduleEdit(0, "promote_shared", True)
    for other in (dict(split_reduction=4), dict(img2col=True), dict(reduction_tile=0), dict(promote_shared=True)):
        assert edit_for("enable_promote", dataclasses.replace(simt, **other), MATMUL, True, H200) is None, other


def test_a_register_limited_kernel_may_get_its_registers_capped():
    """register_cap: ptxas fits one more block per SM (min_blocks_per_sm: 2 first, one always fits), up to
    the 32 blocks an SM takes, while the cap leaves a thread room for its outputs and 32 registers more;
    last in the occupancy route, after the tile families."""
    schedule = matmul_schedule()  # 256 threads of 4x4 outputs: 5 blocks cap them at 48 registers, 6 at 40
    assert edit_for("cap_registers", schedule, MATMUL, True, H200) == ScheduleEdit(0, "min_blocks_per_sm", 2)
    assert edit_for("cap_registers", dataclasses.replace(schedule, min_blocks_per_sm=3), MATMUL, True, H200).value == 4
    assert edit_for("cap_registers", dataclasses.replace(schedule, min_blocks_per_sm=4), MATMUL, True, H200).value == 5
    assert edit_for("cap_registers", dataclasses.replace(schedule, min_blocks_per_sm=5), MATMUL, True, H200) is None
    one_warp = OpSchedule(0, "matmul", [16, 8, 0], [2, 2, 0])
    assert edit_for("cap_registers", dataclasses.replace(one_warp, min_blocks_per_sm=31), MATMUL, True, H200).value == 32
    assert edit_for("cap_registers", dataclasses.replace(one_warp, min_blocks_per_sm=32), MATMUL, True, H200) is None
    assert load().routes["occupancy"]["*"][-1] == "register_cap"


def test_register_cap_leaves_a_tensor_core_warp_room_for_its_accumulators():
    """Recorded on the H200 (loop_h200.md 2026-12-04): the f16 matmul's v0 (128x256 blocks of eight 64x64
    warps: 128 accumulator words per thread, 208 registers) capped for two blocks per SM (128 registers)
    spilled and ran 1720.3 us against 361.1 us. Its warps' accumulators leave no cap; 128x128 blocks of
    eight 64x32 warps (64 words) may take two blocks (128 registers), not three (80)."""
    v0 = OpSchedule(0, "matmul", [128, 256, 0], [64, 64, 0], reduction_tile=64, promote_shared=True,
                    tensor_core="mma_sync", pipeline_depth=2)
    assert edit_for("cap_registers", v0, MATMUL_F16, True, H200) is None
    smaller = dataclasses.replace(v0, block_tile=[128, 128, 0], thread_tile=[64, 32, 0])
    assert edit_for("cap_registers", smaller, MATMUL_F16, True, H200).value == 2
    assert edit_for("cap_registers", dataclasses.replace(smaller, min_blocks_per_sm=2), MATMUL_F16, True, H200) is None


def test_a_memory_bound_tensor_core_matmul_is_not_offered_a_no_op():
    """Recorded on the H200 (f16 4096^3 in 128x128 blocks of four 64x64 warps, two cp.async buffers;
    perf_targets_h200.md run 7, NCU): memory-bound by its shared-memory and L2 traffic. The memory route's
    vectorize would compile to the same PTX (the tensor-core path vectorizes whatever the flag says), so
    the advisor skips it and stages one more K step ahead."""
    v0 = OpSchedule(0, "matmul", [128, 128, 0], [64, 64, 0], reduction_tile=64, promote_shared=True,
                    tensor_core="mma_sync", pipeline_depth=2)
    d, _ = memory_bound_advice("ncu_raw_matmul4096_f16_h200.csv", v0, on_mma_sync)
    assert (d.hypothesis.family, d.hypothesis.edit) == ("async_copy", ScheduleEdit(0, "pipeline_depth", 3))
    assert edit_for("enable_vectorize", v0, MATMUL_F16, True, H200) is None


def test_a_kernel_storing_to_local_memory_gets_a_smaller_thread_tile():
    """Recorded on the H200 (the ResNet conv through img2col, 8 channels x 4 pixels per thread, before
    per-thread scratch moved to the kernel's entry block; perf_targets_h200.md run 7): 9216 bytes of local
    stores per thread in the img2col kernel, whose traffic made it look memory-bound at an exhausted
    memory line (89% SOL), so the advisor had turned to a kernel of 6% of the time. Local memory is its
    own class now, ahead of the SOL rules, and routes to fewer outputs per thread."""
    kernels = parse_csv((DATA / "ncu_raw_conv3x3_resnet_local_h200.csv").read_text())
    classes = {c.kernel: c for c in classify(kernels, load())}
    assert (classes["forward_kernel_1"].bottleneck, classes["forward_kernel_1"].rule) == ("local_memory", "local_memory")
    assert classes["forward_kernel"].bottleneck == "occupancy", "kernels without local stores keep their class"
    conv = OpInfo(0, "linalg.conv_2d_nchw_fchw", "conv", [32, 64, 56, 56, 64, 3, 3],
                  ["parallel"] * 4 + ["reduction"] * 3, "f32")
    img2col = OpSchedule(0, "matmul", [1, 0, 56, 0], [0, 8, 4, 0], reduction_tile=9, vectorize=True, img2col=True)
    request = request_for(conv, img2col, [k for k in kernels if k.kernel == "forward_kernel_1"])
    d = advise(request)
    assert (d.bottleneck, d.hypothesis.family) == ("local_memory", "more_threads")
    assert d.hypothesis.edit == ScheduleEdit(0, "thread_tile", [0, 8, 2, 0])
    assert d.evidence[-1].metrics["local_store_bytes"] == kernels[2].spill_bytes > 0


def test_edits_of_an_img2col_schedule_keep_its_tiles_aligned_to_the_gather():
    """The H200 loop run (loop_h200.md, 2026-12-04) spent an iteration on register_tiling's thread tile
    [0, 8, 16, 0] for the ResNet conv, which the schedule stage rejects: 16 pixels neither divide nor are
    a multiple of the 56-wide rows that the gather takes its pixel index apart by. The routes now keep
    every tile of an img2col matmul aligned: they double the channels instead."""
    conv = OpInfo(0, "linalg.conv_2d_nchw_fchw", "conv", [32, 64, 56, 56, 64, 3, 3],
                  ["parallel"] * 4 + ["reduction"] * 3, "f32")
    v0 = OpSchedule(0, "matmul", [1, 0, 112, 0], [0, 8, 8, 0], reduction_tile=9, vectorize=True, img2col=True)
    matmul = img2col_op(conv)
    assert matmul.tile_alignments == [[], [], [56], [9, 3]]
    assert edit_for("double_thread_tile", v0, matmul, True, H200) == ScheduleEdit(0, "thread_tile", [0, 16, 8, 0])
    unaligned = dataclasses.replace(matmul, tile_alignments=[])
    assert edit_for("double_thread_tile", v0, unaligned, True, H200) == ScheduleEdit(0, "thread_tile", [0, 8, 16, 0])


def test_an_nchw_img2col_conv_may_be_staged_in_more_than_one_k_step():
    """promote_shared on an img2col kernel (staged_matmul.emit_staged_img2col): proposed for the ResNet conv's
    K steps of 9 of 576, not where one K step is the whole K (a 1x1 conv over 3 channels), nor for an NHWC
    conv, which staging does not take."""
    conv = OpInfo(0, "linalg.conv_2d_nchw_fchw", "conv", [32, 64, 56, 56, 64, 3, 3],
                  ["parallel"] * 4 + ["reduction"] * 3, "f32")
    v0 = OpSchedule(0, "matmul", [1, 0, 112, 0], [0, 8, 8, 0], reduction_tile=9, vectorize=True, img2col=True)
    assert edit_for("enable_promote", v0, img2col_op(conv), True, H200) == ScheduleEdit(0, "promote_shared", True)
    one_step = dataclasses.replace(conv, loop_ranges=[32, 64, 56, 56, 3, 1, 1])
    assert edit_for("enable_promote", dataclasses.replace(v0, reduction_tile=3), img2col_op(one_step), True,
                    H200) is None
    nhwc = dataclasses.replace(conv, name="linalg.conv_2d_nhwc_hwcf", loop_ranges=[32, 56, 56, 64, 3, 3, 64])
    assert edit_for("enable_promote", v0, img2col_op(nhwc), True, H200) is None


def test_a_kernel_in_a_host_loop_weighs_its_runs():
    """A recurrent layer's step kernel is profiled once but runs once per time step: 512 runs of 10 us
    outweigh one 100 us launch, so the advice goes to the step's op."""
    ew = OpInfo(1, "linalg.generic", "elementwise", [10, 256], ["parallel", "parallel"], "f32")
    projection, step = hand_written(name="projection", waves=0.2, sm=3, mem=4), hand_written(name="step", sm=20, mem=75)
    step.duration_us, step.runs = 10.0, 512
    req = request_for(MATMUL, matmul_schedule(), [projection, step])
    req.model.ops.append(ew)
    req.current.ops.append(OpSchedule(1, "elementwise", [1, 64], [1, 1]))
    req.history[0].compile.kernel_ops = [0, 1]
    d = advise(req)
    assert d.action == "continue" and d.hypothesis.kernel == "step" and d.hypothesis.edit.op_index == 1, d
    assert "98% of kernel time" in d.evidence[-1].text
