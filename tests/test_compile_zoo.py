"""The compile path on the model zoo: model file -> model_linalg.mlir -> v0 -> PTX that ptxas accepts,
plus the launch config a GPU worker runs it from. Real torch-mlir, real MLIR passes, real ptxas."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workers.compile import compile_iteration, initial_params
from workers.compile.replay import replay
from workers.layout import COMPILE_RESULT_FILE
from workers.decompositions import var_mean_decomposition
from workers.frontend import FrontendError, lower_model
from workers.model_loader import load_model
from workers.records import LaunchConfig, ScheduleParams

from test_compile_memory_bound import kernels_of, vector_loads

ZOO = sorted((Path(__file__).parent / "data" / "zoo").glob("*.py"))
BAD = Path(__file__).parent / "data" / "bad_models"
HOST_LOOPS = re.compile(r"\b(scf\.for|scf\.parallel|affine\.for|memref\.copy|linalg\.\w+)\b")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Each zoo model lowered and compiled to v0 once for the whole module."""
    out = tmp_path_factory.mktemp("zoo")
    jobs = {}
    for model in ZOO:
        job = out / model.stem
        lower_model(str(model), str(job))
        result = compile_iteration(str(job), 0, initial_params(str(job)))
        jobs[model.stem] = (model, job, result)
    return jobs


def test_zoo_covers_the_required_operator_families():
    names = {m.stem for m in ZOO}
    assert {"matmul_square", "matmul_batched", "mlp", "softmax", "layernorm", "conv_bn_relu", "maxpool",
            "avgpool", "reduce_mean", "elementwise_chain", "small_cnn"} <= names


@pytest.mark.parametrize("name", [m.stem for m in ZOO])
def test_zoo_model_compiles_to_ptx_that_ptxas_assembles(compiled, name):
    model_path, job, result = compiled[name]
    assert result.ok, f"{name}: {result.stage}: {result.error}"
    v0 = job / "v0"
    for artifact in ("transform.mlir", "pass_pipeline.txt", "gpu.mlir", "kernels.ptx", "config.json"):
        assert (v0 / artifact).stat().st_size > 0, artifact
    assert (job / "model_linalg.mlir").exists()
    ptxas = shutil.which("ptxas")
    assert ptxas, "ptxas (CUDA) must be installed for the compile tests"
    done = subprocess.run([ptxas, "-arch=sm_90a", str(v0 / "kernels.ptx"), "-o", os.devnull],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", [m.stem for m in ZOO])
def test_launch_config_describes_a_complete_gpu_run(compiled, name):
    model_path, job, result = compiled[name]
    config = LaunchConfig.from_json((job / "v0" / "config.json").read_text())
    ptx = (job / "v0" / "kernels.ptx").read_text()
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    buffers = {b.name: b for b in config.buffers}
    assert len(config.launches) == result.kernel_count >= 1
    assert "malloc" not in ptx, "per-thread scratch must live on the stack, not the device heap"
    for launch in config.launches:
        assert launch.kernel in entries
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        assert 1 < threads <= 1024, "no block-size-1 launches"
        for arg in launch.args:
            assert arg.kind == "scalar" or arg.buffer in buffers
    # outputs have the PyTorch model's shapes, and every model input and weight has a buffer
    model, inputs = load_model(str(model_path))
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    assert [o.shape for o in config.outputs] == [list(t.shape) for t in expected]
    sources = {b.source for b in config.buffers}
    assert {f"input:{i}" for i in range(len(inputs))} <= sources
    state = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    assert {f"weight:{n}" for n in state} <= sources


@pytest.mark.parametrize("name", [m.stem for m in ZOO])
def test_no_compute_left_on_the_host(compiled, name):
    _, job, _ = compiled[name]
    gpu_mlir = (job / "v0" / "gpu.mlir").read_text()
    host = gpu_mlir.split("gpu.module")[0]
    assert not HOST_LOOPS.findall(host)
    assert "gpu.launch_func" in host


def test_weights_stay_out_of_the_ir(compiled):
    """A 512x1024 + 1024x256 MLP: its weights would be megabytes of IR if inlined."""
    _, job, _ = compiled["mlp"]
    assert (job / "model_linalg.mlir").stat().st_size < 20_000
    assert "dense_resource" not in (job / "model_linalg.mlir").read_text()


def test_v0_is_operator_aware(compiled):
    """Matmul gets register tiles on a 2-D block of threads; elementwise chains fuse into one kernel."""
    params = json.loads((compiled["matmul_square"][1] / "v0" / "compile_result.json").read_text())
    assert params["kernel_families"] == ["matmul"]
    transform = (compiled["matmul_square"][1] / "v0" / "transform.mlir").read_text()
    assert "tile_sizes [64, 64, 0]" in transform and "num_threads [16, 16, 0]" in transform
    assert "tile_sizes [0, 0, 32]" in transform and "structured.vectorize" in transform
    assert compiled["elementwise_chain"][2].kernel_count == 1
    cnn = json.loads((compiled["small_cnn"][1] / "v0" / "compile_result.json").read_text())
    assert {"conv", "pooling", "matmul"} <= set(cnn["kernel_families"])


def test_f32_linear_layers_keep_their_weight_transposes(compiled):
    """The MLP's two nn.Linear layers in f32 run on CUDA cores, whose threads read B's (k, n) rows
    coalesced: each weight's transpose stays a kernel of its own (reading W's (n, k) rows in the
    matmul was 1.46x slower on the H200), unlike a 16-bit matmul's (test_compile_tensor_core)."""
    _, job, result = compiled["mlp"]
    config = LaunchConfig.from_json((job / "v0" / "config.json").read_text())
    # the second matmul's partials kernel (test_a_simt_matmul_of_few_warps_splits_k_until_its_grid_has_2048)
    assert result.kernel_families == ["copy", "matmul", "copy", "reduction", "matmul"]
    assert sorted(b.shape for b in config.buffers if b.role == "temporary") == \
        [[256, 256, 4], [256, 1024], [512, 1024], [1024, 256]]
    # each transpose in blocks of 32x64, 4x4 per thread: four 128-bit rows read and four written
    bodies = kernels_of((job / "v0" / "kernels.ptx").read_text())
    for launch in (config.launches[0], config.launches[2]):
        body = bodies[launch.kernel]
        assert launch.block == [16, 8, 1]
        assert vector_loads(body) == body.count("st.global.v4") == 4 and "global.b32" not in body


def test_small_simt_matmul_grids_take_blocks_of_one_warp(compiled):
    """The MLP's matmuls (256x1024 and 256x256 outputs) make 64 and 16 blocks of 64x64 for 132 SMs:
    v0 gives them blocks of 16x8 outputs, 2x2 per thread (one warp), 1.47x faster on the H200 than
    blocks of 32x32 and 16x32 (schedule_sweep_h200.md run 15)."""
    transform = (compiled["mlp"][1] / "v0" / "transform.mlir").read_text()
    assert transform.count("tile_sizes [16, 8](mapping = [#gpu.block<y>, #gpu.block<x>])") == 2
    assert transform.count("num_threads [8, 4](mapping = [#gpu.thread<y>, #gpu.thread<x>])") == 2


def test_a_simt_matmul_of_few_warps_splits_k_until_its_grid_has_2048(compiled):
    """The MLP's 256x256 matmul (K 1024) makes 512 one-warp blocks: v0 splits K in 4 chunks (47.5 ->
    18.0 us under ncu, plus a 2.8 us merge); its 256x1024 matmul, 2048 blocks already, stays whole."""
    params = initial_params(str(compiled["mlp"][1]))
    assert sorted(s.split_reduction for s in params.ops if s.family == "matmul") == [0, 4]
    launches = LaunchConfig.from_json((compiled["mlp"][1] / "v0" / "config.json").read_text()).launches
    assert [4, 256 // 8, 256 // 16] in [launch.grid for launch in launches]


def test_a_split_matmul_reduces_chunks_of_k_in_the_matmuls_tiles(compiled, tmp_path):
    """split_reduction on a register-tiled matmul (the MLP's: 16x8 blocks of 2x2 per thread, K 512 and
    1024): each partial reduces a contiguous chunk of K with the matmul's tiles, a block per chunk, its
    K steps in 128-bit loads and its 2x2 partials in registers across them (stored once, after the
    loop); the matmul's kernel then merges the 4 partials per output."""
    _, shared_job, _ = compiled["mlp"]
    job = tmp_path / "mlp"
    shutil.copytree(shared_job, job)
    params = initial_params(str(job))
    for s in params.ops:
        if s.family == "matmul":
            s.split_reduction, s.reduction_tile = 4, 4
    result = compile_iteration(str(job), 1, params)
    assert result.ok, result.error
    config = LaunchConfig.from_json((job / "v1" / "config.json").read_text())
    ptx = (job / "v1" / "kernels.ptx").read_text()
    bodies = kernels_of(ptx)
    partials = [launch for launch in config.launches if launch.grid[0] == 4 and launch.block == [4, 8, 1]]
    assert [launch.grid for launch in partials] == [[4, 1024 // 8, 256 // 16], [4, 256 // 8, 256 // 16]]
    for launch in partials:
        body = bodies[launch.kernel]
        loop = body[body.index("$L__BB"):body.rindex("bra")]
        assert vector_loads(loop) and "st.global" not in loop
        assert body[body.rindex("bra"):].count("st.global") == 4
    assert len(config.launches) == 6  # two weight transposes, two partial kernels, two merges


def test_a_one_block_matmul_with_k_over_the_flattened_image_splits_k_over_blocks(compiled):
    """small_cnn's classifier (16x10 outputs; K 2048, the flatten's channels x pixels, which the elementwise
    fusion made three loops) was one block of 160 threads, each looping over all of K (103 of the network's
    139 us under ncu). farm-collapse-contraction-loops makes K one loop again; v0 splits it into 32 chunks, a
    block each of one thread per output, and the classifier's kernel merges the 32 partials of each output
    (in 128-bit loads) and adds the bias."""
    _, job, _ = compiled["small_cnn"]
    config = LaunchConfig.from_json((job / "v0" / "config.json").read_text())
    bodies = kernels_of((job / "v0" / "kernels.ptx").read_text())
    *_, partial, merge = config.launches
    assert (partial.grid, partial.block) == ([32, 1, 1], [10, 16, 1])
    assert vector_loads(bodies[partial.kernel]) > 0
    assert (merge.grid, merge.block) == ([1, 1, 1], [10, 16, 1])
    assert vector_loads(bodies[merge.kernel]) == 32 // 4
    assert next(s for s in initial_params(str(job)).ops if s.split_reduction).split_reduction == 32


def test_a_direct_convs_bias_broadcast_runs_in_the_convs_kernel(compiled):
    """torch-mlir starts a conv with bias from the bias broadcast over its output: small_cnn's two direct
    convs compute that broadcast in their own kernel, as a fill (it had a kernel of its own that wrote
    the whole output for the conv to read back)."""
    _, job, _ = compiled["small_cnn"]
    config = LaunchConfig.from_json((job / "v0" / "config.json").read_text())
    source = {b.name: b.source for b in config.buffers}
    for conv in ("features.0", "features.3"):
        readers = [{source[a.buffer] for a in launch.args} for launch in config.launches
                   if any(source[a.buffer] == f"weight:{conv}.bias" for a in launch.args)]
        assert len(readers) == 1 and f"weight:{conv}.weight" in readers[0]
    # the padded inputs' fills and the copy into the first, 2 convs, 2 pools (the first writes into the
    # second padded input), the weight transpose, the classifier's partials and merge
    assert len(config.launches) == 10


@pytest.mark.parametrize("dim, correction, keepdim", [([1], None, True), ([1], 0, False), ([0, 1], 1, False),
                                                     ([-1], 1, True), (None, None, False), ([], 1, False)])
def test_var_mean_is_lowered_in_the_input_precision_as_pytorch_computes_it(compiled, dim, correction, keepdim):
    """torch-mlir's own var_mean decomposition sums in f64: LayerNorm's row kernel reduced in f64 and
    took the mean a second time in f32. The frontend's own (var_mean_decomposition: the mean, then the
    squared deviations from it, in f32) gives PyTorch's results, and LayerNorm lowers with f32
    reductions only."""
    x = torch.randn(64, 512, dtype=torch.float32) * 3 + 1
    var, mean = var_mean_decomposition(x, dim, correction=correction, keepdim=keepdim)
    ref_var, ref_mean = torch.var_mean(x, dim, correction=correction, keepdim=keepdim)
    assert var.dtype == mean.dtype == torch.float32 and var.shape == ref_var.shape and mean.shape == ref_mean.shape
    torch.testing.assert_close(var, ref_var, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean, ref_mean, rtol=1e-5, atol=1e-6)
    ir = (compiled["layernorm"][1] / "model_linalg.mlir").read_text()
    assert "tensor<" in ir and "xf64>" not in ir


def test_precision_mode_follows_the_model_dtype(compiled):
    f16 = LaunchConfig.from_json((compiled["matmul_f16"][1] / "v0" / "config.json").read_text())
    f32 = LaunchConfig.from_json((compiled["mlp"][1] / "v0" / "config.json").read_text())
    assert (f16.precision, f16.atol) == ("f16", 1e-2) and (f32.precision, f32.atol) == ("fp32", 1e-4)


@pytest.mark.parametrize("name", [m.stem for m in ZOO])
def test_zoo_model_replays_to_the_same_kernels_from_its_folder_alone(compiled, name):
    """model_linalg.mlir, model_info.json and v0's params.json, transform.mlir and pass_pipeline.txt rebuild
    kernels.ptx and config.json byte for byte: the record is the replay."""
    _, job, _ = compiled[name]
    result = replay(str(job), 0)
    assert result.identical, result.difference


def test_replay_says_which_kernels_differ_from_the_record_and_what_is_missing(compiled, tmp_path):
    """A step that is not in the record does not exist: an edit of transform.mlir shows in the rebuilt PTX."""
    _, shared_job, _ = compiled["softmax"]
    job = tmp_path / "softmax"
    shutil.copytree(shared_job, job)
    transform = job / "v0" / "transform.mlir"
    transform.write_text(transform.read_text().replace("farm.warp_merge", "farm.not_a_mark"))
    run = lambda *args: subprocess.run([sys.executable, "-m", "orchestrator.cli", "replay", *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=300)
    changed = run("softmax", "v0", "--out", str(tmp_path))  # a model name in --out, as `status` takes it
    assert changed.returncode == 1 and "differ from the recorded ones" in changed.stdout
    assert "--- recorded kernels.ptx" in changed.stdout and "+++ rebuilt kernels.ptx" in changed.stdout
    (job / "v0" / "pass_pipeline.txt").unlink()
    missing = run(str(job))
    assert missing.returncode == 2 and "pass_pipeline.txt missing" in missing.stderr
    unknown = run("no_such_model", "--out", str(tmp_path))
    assert unknown.returncode == 2 and "neither a job folder nor a model name" in unknown.stderr


def test_replay_from_params_rebuilds_the_schedule_with_todays_compiler(compiled, tmp_path):
    """--from-params writes transform.mlir and pass_pipeline.txt again from params.json: the recorded
    kernels come back, and a change of params.json (which a plain replay never reads for the schedule)
    shows in the rebuilt PTX."""
    _, shared_job, _ = compiled["softmax"]
    job = tmp_path / "softmax"
    shutil.copytree(shared_job, job)
    assert replay(str(job), 0, from_params=True).identical
    params = ScheduleParams.from_json((job / "v0" / "params.json").read_text())
    params.ops[0].warp_merge = not params.ops[0].warp_merge
    (job / "v0" / "params.json").write_text(params.to_json(indent=2))
    assert replay(str(job), 0).identical
    changed = replay(str(job), 0, from_params=True)
    assert not changed.ptx_identical and "+++ rebuilt kernels.ptx" in changed.difference


def test_frontend_lowers_a_model_once_per_job(compiled, tmp_path):
    model, shared_job, _ = compiled["softmax"]
    job = tmp_path / "softmax"  # a copy: the module's other tests read the shared job's lowering
    shutil.copytree(shared_job, job)
    linalg = job / "model_linalg.mlir"
    before = linalg.stat().st_mtime_ns
    assert lower_model(str(model), str(job)).name == "softmax" and linalg.stat().st_mtime_ns == before
    changed = tmp_path / "softmax.py"
    changed.write_text(model.read_text().replace("dim=-1", "dim=0"))
    assert lower_model(str(changed), str(job)).name == "softmax" and linalg.stat().st_mtime_ns != before


def test_compile_is_idempotent(compiled):
    _, job, result = compiled["softmax"]
    ptx = job / "v0" / "kernels.ptx"
    before = ptx.stat().st_mtime_ns
    again = compile_iteration(str(job), 0, initial_params(str(job)))
    assert again == result and ptx.stat().st_mtime_ns == before


def test_bad_schedule_fails_cleanly_at_the_schedule_stage(compiled, tmp_path):
    _, job, _ = compiled["matmul_square"]
    params = initial_params(str(job))
    params.ops[0].block_tile = [64, 64, 16]  # a parallel forall over the K reduction: a data race
    result = compile_iteration(str(job), 1, params)
    assert not result.ok and result.stage == "schedule" and "reduction" in result.error
    assert json.loads((job / "v1" / COMPILE_RESULT_FILE).read_text())["ok"] is False


@pytest.mark.parametrize("model, cause", [("no_model_class.py", "lacks Model"),
                                          ("unsupported_op.py", "failing op is torch.aten.fft_fft at unsupported_op.py:8")])
def test_frontend_errors_name_the_file_and_the_cause(tmp_path, model, cause):
    with pytest.raises(FrontendError) as err:
        lower_model(str(BAD / model), str(tmp_path / "job"))
    assert model in str(err.value) and cause in str(err.value)
    assert "\n" not in str(err.value).strip()


# outputs of each zoo model's reductions (rows)
REDUCTION_OUTPUTS = {"softmax": 512, "layernorm": 512, "reduce_mean": 64 * 128}


@pytest.mark.parametrize("name", sorted(REDUCTION_OUTPUTS))
def test_v0_reductions_get_many_threads_per_output(compiled, name):
    """A row reduction of v0 is a block reduction: a block of 128 or more threads per output (softmax's and
    layernorm's all in one row kernel with their elementwise ops, test_compile_memory_bound.py).
    A reduction over a dim that is not innermost (reduce_mean) is split: a partial-reduction kernel with
    `split` threads per output runs before the group's kernel, which merges the partials (ptxas and the
    host check are the parametrized tests above, on the same v0)."""
    _, job, result = compiled[name]
    config = LaunchConfig.from_json((job / "v0" / "config.json").read_text())
    threads = [math.prod(launch.grid) * math.prod(launch.block) for launch in config.launches]
    schedules = {s.op_index: s for s in initial_params(str(job)).ops}
    blocks = [i for i, op in enumerate(result.kernel_ops) if schedules[op].block_reduction or schedules[op].row_kernel]
    splits = [int(f) for f in re.findall(r"split_factor = (\d+)", (job / "v0" / "transform.mlir").read_text())]
    # a split group's anchor has two launches: the partial reduction, then the merge
    partials = [i for i, op in enumerate(result.kernel_ops) if result.kernel_ops[i + 1:i + 2] == [op]]
    assert bool(blocks) != bool(splits), "each reduction uses one strategy"
    for i in blocks:
        assert config.launches[i].grid[0] * config.launches[i].grid[1] == REDUCTION_OUTPUTS[name]
        # (a fused producer's thread mapping may ask for more threads than the reduction)
        s = schedules[result.kernel_ops[i]]
        assert math.prod(config.launches[i].block) >= max(s.block_reduction, s.row_kernel) >= 128
    assert len(partials) == len(splits) and (name == "reduce_mean") == bool(splits)
    for partial, split in zip(partials, splits):
        assert threads[partial] == REDUCTION_OUTPUTS[name] * split >= 16 * REDUCTION_OUTPUTS[name]


@pytest.mark.parametrize("model, split, reason", [
    ("reduce_mean", 3, "must be at least 2 and divide the reduction loop extent 512"),
    ("reduce_mean", 1, "must be at least 2"),
    ("elementwise_chain", 4, "needs a reduction in the kernel"),
])
def test_bad_split_factor_fails_at_the_schedule_stage(compiled, model, split, reason):
    _, job, _ = compiled[model]
    params = initial_params(str(job))
    params.ops[-1].split_reduction = split
    shutil.rmtree(job / "v7", ignore_errors=True)
    result = compile_iteration(str(job), 7, params)
    assert not result.ok and result.stage == "schedule" and reason in result.error, result.error
