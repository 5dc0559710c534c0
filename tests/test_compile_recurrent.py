"""Recurrent layers (nn.RNN, nn.LSTM, nn.GRU): lowered as one time loop per layer and direction
(workers/recurrent.py), compiled to kernels that the host launches once per time step (config.json's loops).
What the lowering computes is checked against PyTorch on the CPU (tests/cpu_reference.py); the kernels run
on the GPU node (test_measure_gpu.py, tests/data/measure/breadth)."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from torch import nn

from tests.cpu_reference import lowering_and_model_outputs
from tests.test_compile_breadth import BREADTH, compiled
from workers.compile import mlir
from workers.compile.host import HostComputeError, LaunchSequence
from workers.compile.passes import full_rank_inserts, registry, views_into_kernels
from workers.compile.pipeline import PassPipeline
from workers.compile.replay import replay
from workers.frontend import FrontendError, lower_model
from workers.records import HostLoop, ModelInfo
from workers.recurrent import RecurrentError, scanned_forward

LAYERS = {
    "lstm, 2 layers, batch first": lambda: nn.LSTM(8, 16, num_layers=2, batch_first=True),
    "lstm, both ways": lambda: nn.LSTM(8, 16, num_layers=2, bidirectional=True),
    "gru, 3 layers, both ways": lambda: nn.GRU(8, 16, num_layers=3, bidirectional=True, batch_first=True),
    "rnn of relus, no bias": lambda: nn.RNN(8, 16, nonlinearity="relu", bias=False),
    "rnn, both ways": lambda: nn.RNN(8, 16, num_layers=2, bidirectional=True),
}


@pytest.mark.parametrize("given_state", [False, True])
@pytest.mark.parametrize("layer", LAYERS)
def test_the_scanned_forward_computes_what_the_layer_computes(layer, given_state):
    torch.manual_seed(0)
    module = LAYERS[layer]().eval()
    x = torch.randn(4, 7, 8)
    state = None
    if given_state:
        h = torch.randn(module.num_layers * (2 if module.bidirectional else 1), x.shape[0 if module.batch_first else 1], 16)
        state = (h, torch.randn_like(h)) if isinstance(module, nn.LSTM) else h
    for args in ((x, state), (x[0],)):  # batched, and one unbatched sequence
        with torch.no_grad():
            want, got = torch.utils._pytree.tree_leaves(module(*args)), torch.utils._pytree.tree_leaves(scanned_forward(module, *args))
        assert [w.shape for w in want] == [g.shape for g in got]
        assert all(torch.allclose(w, g, atol=1e-6) for w, g in zip(want, got))


@pytest.mark.parametrize("name, loops", [("long_lstm", 2), ("gru_both_ways", 4), ("lstm_cell_state", 4),
                                         ("gru_unbatched", 1)])
def test_a_recurrent_model_lowers_to_a_time_loop_per_layer_and_direction_that_computes_what_torch_does(
        tmp_path, name, loops):
    """long_lstm's 200 cell steps were ~4,500 linalg ops unrolled; as loops, a few dozen. The lowering run on
    the CPU gives PyTorch's outputs (final states, the last step's output through a linear layer, both
    directions' outputs)."""
    info = lower_model(str(BREADTH / f"{name}.py"), str(tmp_path / name))
    text = (tmp_path / name / "model_linalg.mlir").read_text()
    assert text.count("scf.for") == loops and len(info.ops) < 50 * loops
    got, want = lowering_and_model_outputs(tmp_path / name, BREADTH / f"{name}.py")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), atol=1e-5)


def test_a_recurrent_model_compiles_to_kernels_the_host_launches_once_per_time_step(tmp_path):
    """Each layer's step is a few kernels in a host loop of 100 indices; they take the step as an argument and
    read and write the step's slices themselves (no view of dynamic offset crosses the kernel boundary). The
    version replays from its folder to the same kernels and loops."""
    job, _, config = compiled(tmp_path, "long_lstm")
    assert [loop.trip_count for loop in config.loops] == [100, 100]
    for number, loop in enumerate(config.loops):
        inside = config.launches[loop.first:loop.end]
        assert inside and all(any(a.kind == "loop_index" and a.loop == number for a in launch.args) or
                              all(a.kind == "buffer" for a in launch.args) for launch in inside)
        assert any(a.kind == "loop_index" for launch in inside for a in launch.args)
    outside = [launch for i, launch in enumerate(config.launches)
               if not any(loop.first <= i < loop.end for loop in config.loops)]
    assert outside and not any(a.kind == "loop_index" for launch in outside for a in launch.args)
    rebuilt = replay(str(job), 0)  # the record is the replay: the loops too come from the version's files
    assert rebuilt.identical, rebuilt.difference


@pytest.mark.parametrize("layer, sequence, reason", [
    (nn.LSTM(8, 16, proj_size=4), torch.randn(5, 2, 8), "proj_size"),
    (nn.GRU(8, 16), nn.utils.rnn.pack_sequence([torch.randn(5, 8), torch.randn(3, 8)]), "PackedSequence"),
])
def test_a_recurrent_layer_the_frontend_does_not_lower_is_refused_with_the_reason(layer, sequence, reason):
    with pytest.raises(RecurrentError, match=reason):
        scanned_forward(layer.eval(), sequence)


def test_an_op_torch_mlir_cannot_lower_after_a_recurrent_layer_is_named(tmp_path):
    """The diagnosis of a failed lowering exports the model again: with the layer scanned too, not unrolled."""
    model = tmp_path / "lstm_svd.py"
    model.write_text((BREADTH / "long_lstm.py").read_text().replace(
        "return self.lstm(x)[0]", "return torch.linalg.svdvals(self.lstm(x)[0])"))
    with pytest.raises(FrontendError, match=r"the failing op is torch\.aten\._linalg_svd"):
        lower_model(str(model), str(tmp_path / "job"))


def test_a_model_drawing_random_numbers_in_forward_is_refused_with_the_line(tmp_path):
    with pytest.raises(FrontendError, match=r"forward draws random numbers \(aten.randn.default \(random_state.py:\d+: "
                                            r"h0 = torch.randn"):
        lower_model(str(BREADTH / "random_state.py"), str(tmp_path / "random"))


VIEW_IN_A_LOOP = """
func.func @forward(%a: memref<8x4xf32>) -> memref<8x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %row = memref.subview %a[%i, 0] [1, 4] [1, 1] : memref<8x4xf32> to memref<4xf32, strided<[1], offset: ?>>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1) {
      %v = memref.load %row[%tx] : memref<4xf32, strided<[1], offset: ?>>
      %w = arith.addf %v, %v : f32
      memref.store %w, %row[%tx] : memref<4xf32, strided<[1], offset: ?>>
      gpu.terminator
    } {farm.anchor = 0 : i64, farm.family = "elementwise"}
  }
  return %a : memref<8x4xf32>
}
"""


@pytest.mark.parametrize("views_moved", [True, False])
def test_a_kernel_takes_a_host_loops_index_and_makes_its_view_of_dynamic_offset_itself(views_moved):
    """farm-views-into-kernels: the row a step works on is made inside the kernel from the buffer and the
    index, which the host passes per iteration; without it, the view's offset would be lost at the kernel
    boundary (bare pointers), and the host check refuses it."""
    info = ModelInfo(name="m", model_path="m.py", ops=[], input_shapes=[[8, 4]], input_dtypes=["float32"],
                     weight_names=[], output_shapes=[[8, 4]], export_seconds=0)
    with mlir.context():
        module = mlir.parse(VIEW_IN_A_LOOP, "test IR")
        if views_moved:
            registry.run_step(views_into_kernels.NAME, module)
        registry.run_step("farm-outline-kernels", module)
        registry.run_step("builtin.module(canonicalize)", module)  # as the pipeline does next
        if not views_moved:
            with pytest.raises(HostComputeError, match="dynamic layout"):
                LaunchSequence(module, info).read()
            return
        launches = LaunchSequence(module, info).read()
    assert launches.loops == [HostLoop(first=0, end=1, start=0, step=1, trip_count=8)]
    (launch,) = launches.launches
    assert [(a.kind, a.buffer, a.loop) for a in launch.args] == [("buffer", "arg0", None), ("loop_index", None, 0)]


@pytest.mark.parametrize("source, sizes, groups", [
    ([24], [1, 24], [[0, 1]]), ([3, 24], [3, 1, 24], [[0], [1, 2]]), ([24], [24, 1], [[0, 1]]),
    ([], [1, 1], []), ([1, 24], [1, 1, 24], [[0], [1, 2]]), ([24], [2, 12], None)])
def test_a_rank_reducing_inserts_source_expands_to_its_slice(source, sizes, groups):
    assert full_rank_inserts.reassociation(source, sizes) == groups


def test_the_unbatched_grus_state_inserts_are_made_full_rank_before_the_schedule(tmp_path):
    """Unit-dim folding left `tensor.insert_slice %s into ... [1, 24]` of a tensor<24>, from which the
    schedule's insert_slice_to_copy built an invalid copy; farm-full-rank-inserts expands the source first."""
    job, _, _ = compiled(tmp_path, "gru_unbatched")
    steps = PassPipeline.from_text((job / "v0" / "pass_pipeline.txt").read_text()).before_schedule()
    with mlir.context():
        module = mlir.parse((job / "model_linalg.mlir").read_text(), "model_linalg.mlir")
        for step in steps[:-1]:
            registry.run_step(step, module)
        reduced = [op for op in mlir.ops_named(module.operation, "tensor.insert_slice")
                   if op.operands[0].type.rank < op.operands[1].type.rank]
        assert reduced, "the clean-up leaves rank-reducing inserts"
        registry.run_step(steps[-1], module)
        assert steps[-1] == full_rank_inserts.NAME and not [
            op for op in mlir.ops_named(module.operation, "tensor.insert_slice")
            if op.operands[0].type.rank < op.operands[1].type.rank]


def test_a_dropout_in_eval_mode_lowers_as_the_identity_and_one_forced_on_is_refused(tmp_path):
    """The loader puts a model in eval mode, where export still traces aten.dropout (train=False) and
    aten.rrelu (training=False), and an attention passes dropout_p=0: level 2's #66 and #83 and level 1's #97
    were refused as random until the refusal read those arguments."""
    lower_model(str(BREADTH / "dropout_eval.py"), str(tmp_path / "eval"))
    got, want = lowering_and_model_outputs(tmp_path / "eval", BREADTH / "dropout_eval.py")
    np.testing.assert_allclose(got[0], want[0].numpy(), atol=1e-6)
    forced = tmp_path / "forced.py"
    forced.write_text((BREADTH / "dropout_eval.py").read_text().replace("always_drop: bool = False",
                                                                        "always_drop: bool = True"))
    with pytest.raises(FrontendError, match=r"forward draws random numbers \(aten.dropout.default \(forced.py:\d+: "
                                            r"x = F.dropout"):
        lower_model(str(forced), str(tmp_path / "forced"))
