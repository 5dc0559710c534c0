"""Convolutions through img2col: structured.convert_conv2d_to_img2col turns a 2-D conv into a gather
and a matmul-like op; the gather is fused into the matmul kernel's reduction loop (the img2col matrix
is never in memory) and the matmul gets the v0 register-tiled template. Real torch-mlir, MLIR, ptxas."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from workers.compile import compile_iteration, initial_params
from workers.compile.analysis import analyze
from workers.compile.schedule import ScheduleError, emit_transform
from workers.compile.schedule.templates import (IMG2COL_CHANNELS_PER_BLOCK, IMG2COL_CHANNELS_PER_THREAD,
                                                default_op_schedule, img2col_filling_the_grid, img2col_op,
                                                img2col_schedule)
from workers.compile.schedule.tiles import block_dims, grid_blocks
from workers.frontend import lower_model
from workers.records import OpInfo, ScheduleParams

ROOT = Path(__file__).parent.parent
RESNET = ROOT / "benchmarks" / "models" / "conv3x3_resnet.py"
ZOO_CONVS = [ROOT / "tests" / "data" / "zoo" / f"{name}.py" for name in ("conv_bn_relu", "small_cnn")]
HOST_LOOPS = re.compile(r"\b(scf\.for|scf\.parallel|affine\.for|memref\.copy|linalg\.\w+)\b")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out = tmp_path_factory.mktemp("conv")
    lowered = {}
    for model in [RESNET, *ZOO_CONVS]:
        job = out / model.stem
        lower_model(str(model), str(job))
        lowered[model.stem] = job
    return lowered


def _facts(job):
    return analyze((job / "model_linalg.mlir").read_text())


def _host_part(gpu_mlir: str) -> str:
    return gpu_mlir.split("gpu.module")[0]


def _check_ptx(vdir: Path):
    ptx = (vdir / "kernels.ptx").read_text()
    assert "malloc" not in ptx
    done = subprocess.run([shutil.which("ptxas"), "-arch=sm_90a", "-v", str(vdir / "kernels.ptx"), "-o", os.devnull],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "bytes stack frame" in done.stderr and not re.search(r"[1-9]\d* bytes spill", done.stderr), done.stderr


def _lowered_conv(tmp_path: Path, conv: str, input_shape: tuple[int, ...]) -> Path:
    """A job of a model that is one conv, `conv` (e.g. "torch.nn.Conv2d(64, 128, 1)"), on an input of that shape."""
    model = tmp_path / "conv_model.py"
    model.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
                     f"        super().__init__()\n        self.conv = {conv}\n\n"
                     "    def forward(self, x):\n        return self.conv(x)\n\n\n"
                     f"def get_inputs():\n    return [torch.randn{input_shape}]\n\n\n"
                     "def get_init_inputs():\n    return []\n")
    job = tmp_path / "job"
    lower_model(str(model), str(job))
    return job


def _all_img2col(job) -> ScheduleParams:
    """v0, with every conv of the model through img2col (whatever v0 picks for it)."""
    facts = _facts(job)
    params = initial_params(str(job))
    convs = {f.info.index: img2col_schedule(f.info) for f in facts if f.info.family == "conv"}
    # a conv that v0 fused into its consumer becomes a kernel of its own (the consumer keeps its schedule)
    params.ops = sorted([s for s in params.ops if s.op_index not in convs] + list(convs.values()),
                        key=lambda s: s.op_index)
    return params


def test_resnet_conv_through_img2col_is_a_matmul_kernel(jobs):
    job = jobs["conv3x3_resnet"]
    params = _all_img2col(job)
    conv = [s for s in params.ops if s.img2col]
    assert len(conv) == 1
    s = conv[0]
    # loops (n, f, oh*ow, c*kh*kw) = (32, 64, 3136, 576): 64x112 block tiles (112 pixels: two output
    # rows), 8 output channels x 8 pixels per thread, K by 9 (one input channel's 3x3 window): tiles
    # aligned to the gather's index arithmetic
    assert (s.block_tile, s.thread_tile, s.reduction_tile, s.vectorize) == ([1, 0, 112, 0], [0, 8, 8, 0], 9, True)
    result = compile_iteration(str(job), 2, params)
    assert result.ok, f"{result.stage}: {result.error}"
    vdir = job / "v2"
    transform = (vdir / "transform.mlir").read_text()
    assert "convert_conv2d_to_img2col" in transform
    config = json.loads((vdir / "config.json").read_text())
    assert result.kernel_families[-1] == "matmul" and result.kernel_ops[-1] == s.op_index
    launch = config["launches"][-1]
    assert launch["block"] == [14, 8, 1] and launch["grid"][0] * launch["grid"][1] * launch["grid"][2] == 32 * 28
    gpu = (vdir / "gpu.mlir").read_text()
    assert not HOST_LOOPS.search(_host_part(gpu))
    # the img2col matrix (32 x 576 x 3136) is never allocated: it is gathered inside the kernel
    assert "32x576x3136" not in _host_part(gpu)
    # each K step's gathered 9x4 tile is a per-thread scratch buffer: hoisted to the kernel's entry it
    # lives in registers (SROA), inside the K loop it was a local-memory array (1.8 GB of local stores)
    assert ".local" not in (vdir / "kernels.ptx").read_text()
    _check_ptx(vdir)


@pytest.mark.parametrize("name", [m.stem for m in ZOO_CONVS])
def test_zoo_convs_compile_through_img2col(jobs, name):
    job = jobs[name]
    params = _all_img2col(job)
    assert any(s.img2col for s in params.ops)
    result = compile_iteration(str(job), 1, params)
    assert result.ok, f"{result.stage}: {result.error}"
    assert "matmul" in result.kernel_families
    assert not HOST_LOOPS.search(_host_part((job / "v1" / "gpu.mlir").read_text()))
    _check_ptx(job / "v1")


def test_v0_takes_img2col_where_its_matmul_is_register_tiled(jobs):
    """The ResNet 3x3 conv (64 channels) goes through img2col in v0 (3.8x over the direct conv on the
    H200); small_cnn's convs (3 and 16 input channels, one output per thread in the img2col template)
    stay direct, which measured faster. The advisor proposes img2col again."""
    from rules.guide import load

    (conv,) = [s for s in initial_params(str(jobs["conv3x3_resnet"])).ops if s.img2col]
    assert conv == img2col_schedule(_facts(jobs["conv3x3_resnet"])[conv.op_index].info)
    assert not any(s.img2col for s in initial_params(str(jobs["small_cnn"])).ops)
    assert "img2col" in load().families


def test_wider_img2col_thread_tiles_keep_their_vectors_in_registers(jobs):
    """16 output channels x 4 pixels per thread: convert-vector-to-scf left an n-D transfer of the
    thread's tile as a loop over a local-memory copy (ptxas: 1072 bytes stack frame, 2x slower on the
    H200, schedule_sweep_h200.md run 13); fully unrolled it stays in registers."""
    job = jobs["conv3x3_resnet"]
    params = _all_img2col(job)
    conv = next(s for s in params.ops if s.img2col)
    conv.thread_tile = [0, 16, 4, 0]
    result = compile_iteration(str(job), 3, params)
    assert result.ok, f"{result.stage}: {result.error}"
    assert ".local" not in (job / "v3" / "kernels.ptx").read_text()
    _check_ptx(job / "v3")


def test_a_staged_img2col_conv_gathers_each_k_step_into_shared_memory_once_per_block(jobs):
    """promote_shared on the ResNet 3x3 conv's img2col kernel: per K step of 9 (one input channel's 3x3), the
    block's threads gather the 9 x 112 image tile into shared memory (a gather each, fused into the K loop;
    unstaged, the 8 threads of a pixel column each gathered it again) and copy the 64 x 9 filter tile (72 of
    them, 8 rows each), then compute their 8 x 8 tiles from shared memory, the accumulator in registers."""
    job = jobs["conv3x3_resnet"]
    params = initial_params(str(job))
    conv = next(s for s in params.ops if s.img2col)
    conv.promote_shared = True
    result = compile_iteration(str(job), 6, params)
    assert result.ok, f"{result.stage}: {result.error}"
    gpu = (job / "v6" / "gpu.mlir").read_text()
    buffers = set(re.findall(r"memref.global \"private\" @__farm_shared_\d+ : memref<([\dx]+)xf32", gpu))
    assert buffers == {"64x9", "1x9x112"}
    kernel = gpu[gpu.index("farm.anchor = %d" % conv.op_index):]
    k_loop = kernel[kernel.index("scf.for"):]
    assert re.search(r"memref.store %\w+, %\w+\[.*\] : memref<1x9x1xf32, .*#gpu.address_space<workgroup>>", k_loop)
    assert "iter_args" in k_loop.splitlines()[0] and "vector<8x8xf32>" in k_loop.splitlines()[0]
    assert ".local" not in (job / "v6" / "kernels.ptx").read_text()
    _check_ptx(job / "v6")


@pytest.mark.parametrize("field, value, reason", [
    ("block_tile", [1, 0, 64, 0], "the tile 64 of loop 2 must divide or be a multiple of each of [56]"),
    ("thread_tile", [0, 4, 3, 0], "the tile 3 of loop 2 must divide or be a multiple of each of [56]"),
    ("reduction_tile", 8, "the reduction_tile must divide or be a multiple of each of [9, 3]"),
])
def test_img2col_tiles_must_align_with_the_gathers_index_arithmetic(jobs, field, value, reason):
    """The gather takes pixel p apart as (p floordiv 56, p mod 56) and k as (k floordiv 9, (k mod 9)
    floordiv 3, k mod 3); tiling keeps that right only at aligned tiles. A K step of 8 compiled, and
    computed wrong convolutions on the H200 (max abs error 4.1)."""
    job = jobs["conv3x3_resnet"]
    params = _all_img2col(job)
    conv = next(s for s in params.ops if s.img2col)
    setattr(conv, field, value)
    with pytest.raises(ScheduleError, match=re.escape(reason)):
        emit_transform(_facts(job), params)


def test_img2col_on_a_non_conv_op_is_a_schedule_error(jobs):
    facts = _facts(jobs["conv_bn_relu"])
    params = initial_params(str(jobs["conv_bn_relu"]))
    other = next(s for s in params.ops if facts[s.op_index].info.family != "conv")
    other.img2col = True
    with pytest.raises(ScheduleError, match="img2col applies to"):
        emit_transform(facts, params)


def test_the_advisors_img2col_edit_moves_a_direct_conv_to_the_matmul_template(jobs):
    from rules.routing import GENERATORS
    from workers.target import target
    from workers.compile import apply_edit

    job = jobs["conv3x3_resnet"]
    facts = _facts(job)
    params = initial_params(str(job))
    conv = next(f.info for f in facts if f.info.family == "conv")
    # the conv as v0 schedules it without img2col (direct convolution)
    params.ops = [default_op_schedule(conv, "conv") if s.op_index == conv.index else s for s in params.ops]
    direct = next(s for s in params.ops if s.op_index == conv.index)
    assert not direct.img2col and len(direct.block_tile) == 7
    edit = GENERATORS["enable_img2col"](direct, facts[direct.op_index].info, True, target("sm_90a"))
    assert edit is not None and edit.field == "img2col"
    new = apply_edit(params, edit)
    s = next(s for s in new.ops if s.op_index == direct.op_index)
    assert s.img2col and len(s.block_tile) == 4 and s.family == "matmul"
    assert GENERATORS["enable_img2col"](s, facts[s.op_index].info, True, target("sm_90a")) is None  # already on
    result = compile_iteration(str(job), 2, new)
    assert result.ok, f"{result.stage}: {result.error}"
    assert result.kernel_families[-1] == "matmul"
    _check_ptx(job / "v2")


def test_a_pointwise_conv_is_an_img2col_matmul_in_v0(tmp_path):
    """A 1x1 conv (ResNet's bottlenecks, MobileNet's pointwise half) ran direct, each block re-reading the
    input for each output channel: level1/87 at 0.014x of eager on the H100. Through img2col it is the
    register-tiled matmul (the 1x1 gather reads the input in place)."""
    job = _lowered_conv(tmp_path, "torch.nn.Conv2d(64, 128, 1, bias=False)", (2, 64, 32, 32))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.img2col]
    assert max(conv.thread_tile) > 1
    result = compile_iteration(str(job), 0, params)
    assert result.ok and result.kernel_families == ["matmul"], result
    assert not HOST_LOOPS.search(_host_part((job / "v0" / "gpu.mlir").read_text()))
    _check_ptx(job / "v0")


def test_an_img2col_block_over_a_prime_pixel_row_keeps_to_the_thread_limit():
    """A stride-2 transposed conv's phase of 257 output columns (level 2 #5, #91): no block of pixels near 128
    divides 257, so the row is one block, and 8 threads of 8 channels each over it made 2056 threads; the
    block takes fewer channels instead."""
    conv = OpInfo(index=18, name="linalg.conv_2d_nchw_fchw", family="conv", loop_ranges=[32, 64, 256, 257, 64, 2, 2],
                  iterator_types=["parallel"] * 4 + ["reduction"] * 3, dtype="f32", dilations=[1, 1],
                  output_loops=[0, 1, 2, 3])
    schedule = img2col_schedule(conv)
    assert schedule.img2col and schedule.thread_tile[1] == 8
    assert 32 <= math.prod(block_dims(schedule, img2col_op(conv))) <= 1024


def test_a_small_batchs_deep_conv_takes_fewer_outputs_per_thread_to_fill_the_gpu(tmp_path):
    """ResNet18's last 3x3 conv at batch 2 (512 channels of 7x7): img2col's 8 channels x 7 pixels per thread
    made 16 blocks of 56 threads, each thread over K 4608 (the network ran at 0.24x of eager). v0 cuts the
    thread tile (8 -> 4 -> 2 -> 1 channels, then 7 -> 1 pixels) and the block's channels until the grid holds
    SPLIT_K_WARPS warps or no tile is left to cut; blocks of at most TARGET_THREADS threads. It compiles; a
    conv whose grid fills the GPU keeps its tiles."""
    job = _lowered_conv(tmp_path, "torch.nn.Conv2d(512, 512, 3, padding=1, bias=False)", (2, 512, 7, 7))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.img2col]
    op = img2col_op(_facts(job)[conv.op_index].info)
    assert img2col_schedule(_facts(job)[conv.op_index].info).thread_tile == [0, 8, 7, 0]
    assert (conv.block_tile, conv.thread_tile) == ([1, 4, 0, 0], [0, 1, 1, 0])
    assert grid_blocks(conv, op) == 256 and math.prod(block_dims(conv, op)) == 196
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error
    wide = OpInfo(index=0, name="linalg.conv_2d_nchw_fchw", family="conv", loop_ranges=[10, 64, 224, 224, 3, 3, 3],
                  iterator_types=["parallel"] * 4 + ["reduction"] * 3, dtype="f32", dilations=[1, 1],
                  output_loops=[0, 1, 2, 3])
    assert img2col_filling_the_grid(img2col_schedule(wide), wide) == img2col_schedule(wide)


BREADTH = ROOT / "tests" / "data" / "breadth"


def test_a_3d_conv_computes_channels_by_neighbouring_outputs_in_registers_per_thread(tmp_path):
    """A 3-D conv dilated along its rows (img2col takes undilated 2-D convs only, so it is not made one): each
    thread computes 4 output channels x 4 neighbouring outputs along the row, generalized, tiled by 1 along its
    input channels and kernel taps and vectorized: each step of the four tap loops reads 4 inputs and 4 weights
    for 16 multiply-adds (it was one output per thread: two loads per multiply-add), into a 4 x 4 accumulator
    that stays in registers (no local memory in the PTX)."""
    job = _lowered_conv(tmp_path, "torch.nn.Conv3d(8, 16, 3, padding=2, dilation=(1, 2, 2))", (2, 8, 16, 32, 32))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.family == "conv"]
    assert (conv.thread_tile[:5], conv.reduction_tile, conv.vectorize) == ([0, 4, 0, 1, 4], 1, True)
    result = compile_iteration(str(job), 0, params)
    assert result.ok, f"{result.stage}: {result.error}"
    kernel = next(k for k in (job / "v0" / "gpu.mlir").read_text().split("gpu.func")[1:] if '"conv"' in k)
    steps = kernel.split("scf.for")
    assert len(steps) == 5, kernel  # input channels, kd, kh, kw
    assert re.search(r"vector.load .* vector<4xf32>", steps[-1]) and "memref.load" not in steps[-1]
    assert re.search(r"arith.mulf .* : vector<4x4xf32>", steps[-1]), steps[-1]
    _check_ptx(job / "v0")
    assert not re.search(r"\b(ld|st)\.local", (job / "v0" / "kernels.ptx").read_text())


def test_3d_and_1d_convs_are_2d_convs_through_img2col_and_compute_what_torch_does(tmp_path):
    """A 3-D conv is a 2-D conv over its input stacked once per depth tap, a 1-D conv one of height 1, a 3-D
    transposed conv of stride 1 a 3-D conv first (decompositions.conv_as_2d_decomposition): v0 takes each through
    img2col (the direct 3-D conv ran at 0.07x of cuDNN). A strided transposed conv's 8 phases stay 3-D convs
    (stacked, the phases' outputs were copied on the host). The lowering run on the CPU gives torch's outputs."""
    from tests.cpu_reference import lowering_and_model_outputs

    job = tmp_path / "convs_as_2d"
    lower_model(str(BREADTH / "convs_as_2d.py"), str(job))
    text = (job / "model_linalg.mlir").read_text()
    assert len(re.findall(r"linalg\.conv_2d_nchw_fchw", text)) == 3 and not re.search(r"linalg\.conv_1d", text)
    assert len(re.findall(r"linalg\.conv_3d", text)) == 8
    # the outputs transposed back: the two 3-D convs made 2-D (rank 5); one interleave (rank 8), the strided conv's
    # phases' (the stride-1 transposed conv's one phase is not interleaved); the other transposes are weights'
    ranks = [shape.count("x") for shape in re.findall(r"linalg\.transpose ins\(%\w+ : tensor<((?:\d+x)+)f32>", text)]
    assert sorted(r for r in ranks if r > 4) == [5, 5, 8]
    params = initial_params(str(job))
    facts = _facts(job)
    assert all(s.img2col for s in params.ops if facts[s.op_index].info.name == "linalg.conv_2d_nchw_fchw")
    assert sum(s.img2col for s in params.ops) == 3
    got, want = lowering_and_model_outputs(job, BREADTH / "convs_as_2d.py")
    for g, w in zip(got, want, strict=True):
        assert g.shape == tuple(w.shape) and abs(g - w.numpy()).max() < 1e-4
    result = compile_iteration(str(job), 0, params)
    assert result.ok, f"{result.stage}: {result.error}"


def test_output_channels_no_multiple_of_64_take_img2col_blocks_of_their_largest_divisor(tmp_path):
    """An EfficientNet's 1x1 expansion to 672 channels (no multiple of img2col's 64-channel blocks) took the direct
    template, whose blocks of 8 channels each read the whole input again; through img2col its blocks are 56
    channels (672 = 12 x 56) of 8 x 8 per thread. 32 channels (small_cnn's: measured faster direct) stay direct."""
    job = _lowered_conv(tmp_path, "torch.nn.Conv2d(112, 672, 1)", (2, 112, 56, 56))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.family in ("conv", "matmul")]
    assert conv.img2col and conv.block_tile[1] == 56 and conv.thread_tile[1:3] == [8, 8], conv
    result = compile_iteration(str(job), 0, params)
    assert result.ok, f"{result.stage}: {result.error}"
    _check_ptx(job / "v0")
    assert not re.search(r"\b(ld|st)\.local", (job / "v0" / "kernels.ptx").read_text())
    (tmp_path / "narrow").mkdir()
    narrow = _lowered_conv(tmp_path / "narrow", "torch.nn.Conv2d(16, 32, 3, padding=1)", (2, 16, 56, 56))
    assert not any(s.img2col for s in initial_params(str(narrow)).ops)


def test_few_output_channels_over_a_deep_reduction_take_img2col_register_tiles(tmp_path):
    """A DenseNet layer's 32 channels over 9 x 192 inputs (past IMG2COL_DEEP_K) ran direct, each block
    re-reading its inputs for every 4 channels (the dense block at 0.29x of eager); through img2col each
    thread computes 8 channels x a run of pixels. GoogLeNet's 208 channels (8 x 2 x 13: blocks of 16) over
    96 x 3 x 3 made blocks under a warp; they take longer pixel runs instead."""
    job = _lowered_conv(tmp_path, "torch.nn.Conv2d(192, 32, 3, padding=1, bias=False)", (10, 192, 112, 112))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.img2col]
    assert conv.thread_tile[1] == IMG2COL_CHANNELS_PER_THREAD and max(conv.thread_tile[2:]) > 1, conv
    result = compile_iteration(str(job), 0, params)
    assert result.ok, f"{result.stage}: {result.error}"
    _check_ptx(job / "v0")
    conv = OpInfo(index=0, name="linalg.conv_2d_nchw_fchw", family="conv", loop_ranges=[10, 208, 224, 224, 96, 3, 3],
                  iterator_types=["parallel"] * 4 + ["reduction"] * 3, dtype="f32", dilations=[1, 1],
                  output_loops=[0, 1, 2, 3])
    schedule = img2col_schedule(conv)
    assert schedule.img2col and schedule.thread_tile[1] == IMG2COL_CHANNELS_PER_THREAD
    assert 32 <= math.prod(block_dims(schedule, img2col_op(conv))) <= 1024


@pytest.mark.parametrize("kernel, stride, padding", [(3, 2, 1), ((3, 2, 3), (1, 2, 2), (1, 0, 1)), (2, None, 0)])
def test_a_3d_average_pooling_is_a_conv_of_each_channel_with_the_means_weights(kernel, stride, padding):
    """avg_pool3d (counting its padding, the default) as a conv of each channel alone, in NCDHW: the same values
    as PyTorch's within rounding (the mean's 1/size is in the kernel). Other forms are left to torch-mlir."""
    from workers.decompositions import avg_pool3d_decomposition

    x = torch.randn(2, 3, 9, 10, 11)
    as_list = lambda v: [] if v is None else [v] if isinstance(v, int) else list(v)  # noqa: E731
    got = avg_pool3d_decomposition(x, as_list(kernel), as_list(stride), padding)
    torch.testing.assert_close(got, torch.nn.functional.avg_pool3d(x, kernel, stride, padding), rtol=1e-6, atol=1e-6)
    assert avg_pool3d_decomposition(x, as_list(kernel), as_list(stride), padding, count_include_pad=False) \
        is NotImplemented


def test_3d_average_poolings_lower_without_transposes_and_compile(tmp_path):
    job = tmp_path / "avg_pool_3d"
    lower_model(str(BREADTH / "avg_pool_3d.py"), str(job))
    linalg = (job / "model_linalg.mlir").read_text()
    assert linalg.count("linalg.conv_3d_ncdhw_fcdhw") == 2
    assert "linalg.transpose" not in linalg and "pooling_ndhwc" not in linalg
    result = compile_iteration(str(job), 0, initial_params(str(job)))
    assert result.ok, f"{result.stage}: {result.error}"
    _check_ptx(job / "v0")


def test_the_frontend_makes_2d_the_convs_whose_output_channels_fill_img2cols_blocks():
    from workers import decompositions

    assert decompositions.IMG2COL_OUTPUT_CHANNELS == IMG2COL_CHANNELS_PER_BLOCK
    assert decompositions.IMG2COL_CHANNELS_PER_THREAD == IMG2COL_CHANNELS_PER_THREAD


def test_convs_fused_into_the_copies_of_a_concatenation_take_register_tiles(tmp_path):
    """GoogleNet's and DenseNet's branches: a conv of few output channels (48 over a reduction of 32) is fused
    into the linalg.copy that writes its part of the concatenation. Like a conv fused into a bias, each thread
    computes 4 channels x 4 neighbouring outputs with vector multiply-adds, its accumulator in registers (it
    computed one output per thread: GoogleNet's 224 x 224 inception module at 0.22x of eager). The 3x3 branch
    (40 channels over a reduction of 288, past IMG2COL_DEEP_K) is an img2col matmul with register tiles."""
    job = tmp_path / "inception"
    lower_model(str(BREADTH / "inception_branches.py"), str(job))
    params = initial_params(str(job))
    facts = _facts(job)
    (narrow,) = [s for s in params.ops if s.family == "conv"]
    assert (narrow.thread_tile[:4], narrow.vectorize) == ([0, 4, 1, 4], True)
    assert facts[narrow.op_index].info.name == "linalg.copy"  # the anchor: the concat's copy
    (wide,) = [s for s in params.ops if s.img2col]
    assert facts[wide.op_index].info.loop_ranges[1] == 40 and max(wide.thread_tile) > 1, wide
    result = compile_iteration(str(job), 0, params)
    assert result.ok, f"{result.stage}: {result.error}"
    kernels = [k for k in (job / "v0" / "gpu.mlir").read_text().split("gpu.func")[1:] if '"conv"' in k]
    assert len(kernels) == 1
    assert re.search(r"arith.mulf .* : vector<4x4xf32>", kernels[0]), kernels[0]
    _check_ptx(job / "v0")
    assert not re.search(r"\b(ld|st)\.local", (job / "v0" / "kernels.ptx").read_text())


def test_a_vectorized_conv_takes_one_output_per_thread_along_a_strided_loop(tmp_path):
    """A stride-2 conv's neighbouring outputs read inputs two apart, which the vectorizer cannot read as one
    vector: v0 tiles its channels only, and a schedule with 4 outputs along the strided row is refused."""
    job = _lowered_conv(tmp_path, "torch.nn.Conv3d(4, 16, 3, stride=2, dilation=(1, 2, 2))", (4, 4, 33, 67, 67))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.family == "conv"]
    assert conv.vectorize and conv.thread_tile[1] == 4 and conv.thread_tile[4] == 1
    assert compile_iteration(str(job), 0, params).ok
    conv.thread_tile[4], conv.block_tile[4] = 4, 32
    with pytest.raises(ScheduleError, match="stride is 2"):
        emit_transform(_facts(job), params)


def test_a_strided_conv_through_img2col_keeps_its_pixel_tiles(tmp_path):
    """The stride check of vectorized direct convs is not the img2col matmul's: a ResNet stem's stride-2 conv
    through img2col tiles 8 pixels per thread (it failed validation as a direct conv would)."""
    job = _lowered_conv(tmp_path, "torch.nn.Conv2d(3, 64, 7, stride=2, padding=3)", (4, 3, 128, 128))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.img2col]
    assert conv.vectorize and max(conv.thread_tile) > 1
    assert compile_iteration(str(job), 0, params).ok


@pytest.mark.parametrize("name, ranges, strides, block, thread", [
    # (n, f, ow, c, kw): 4 channels x 4 outputs, 32 threads along the row, 2 along the channels
    ("linalg.conv_1d_ncw_fcw", [16, 64, 4096, 32, 3], [1], [1, 8, 128], [0, 4, 4]),
    # (n, g, f, oh, ow, c, kh, kw): the output channels are loop 2, the group loop takes blocks only; 14 x 4 threads
    # over the 56 x 4 outputs of a block (0: the whole row)
    ("linalg.conv_2d_ngchw_gfchw", [8, 3, 64, 56, 56, 16, 3, 3], [1, 1], [1, 1, 8, 4, 0], [0, 0, 4, 1, 4]),
    # stride 2 along the row: channels only
    ("linalg.conv_2d_nchw_fchw", [8, 64, 56, 56, 32, 3, 3], [2, 2], [1, 8, 2, 28], [0, 4, 1, 1]),
    # level1/76: a strided 1-D row of 174758 = 2 x 87379 outputs, no height loop: 2 threads along the row, the
    # other 32 along all 128 channels (2 there made blocks of 4 threads, 89 million of them)
    ("linalg.conv_1d_ncw_fcw", [64, 128, 174758, 64, 3], [3], [1, 0, 2], [0, 4, 1]),
])
def test_a_direct_convs_thread_tile_is_output_channels_by_neighbouring_outputs(name, ranges, strides, block, thread):
    from workers.compile.schedule.templates import direct_conv_tiles

    spatial = len(strides)
    outputs = len(ranges) - 1 - 2 * spatial
    conv = OpInfo(index=0, name=name, family="conv", loop_ranges=ranges, dtype="f32", strides=strides,
                  iterator_types=["parallel"] * (outputs + spatial) + ["reduction"] * (1 + spatial))
    assert direct_conv_tiles(conv) == (block, thread)


def test_the_advisors_vectorize_edit_register_tiles_a_direct_conv(tmp_path):
    """A direct conv that v0 leaves with one output per thread (a grid too small for the register tiles to fill
    the GPU) gets them from the advisor's vectorize route: the edit carries templates.direct_conv_tiles' tiles,
    and the version compiles."""
    from rules.routing import edit_for
    from workers.compile import apply_edit
    from workers.target import target

    job = _lowered_conv(tmp_path, "torch.nn.Conv3d(8, 16, 3, padding=2, dilation=(1, 2, 2))", (1, 8, 8, 16, 32))
    params = initial_params(str(job))
    (conv,) = [s for s in params.ops if s.family == "conv"]
    assert not conv.vectorize and set(conv.thread_tile) <= {0, 1}  # v0: the grid would not fill the GPU
    op = _facts(job)[conv.op_index].info
    edit = edit_for("enable_vectorize", conv, op, True, target("sm_90a"))
    assert edit is not None and edit.field == "vectorize" and edit.value["thread_tile"][:5] == [0, 4, 0, 1, 4]
    result = compile_iteration(str(job), 1, apply_edit(params, edit))
    assert result.ok, f"{result.stage}: {result.error}"
    _check_ptx(job / "v1")


def _one_conv(name: str, x: list[int], w: list[int], out: list[int], strides: list[int], dilations: list[int]) -> str:
    def t(shape):
        return f"tensor<{'x'.join(map(str, shape))}xf32>"
    n = len(strides)
    return (f"func.func @forward(%x: {t(x)}, %w: {t(w)}) -> {t(out)} {{\n"
            f"  %zero = arith.constant 0.0 : f32\n  %e = tensor.empty() : {t(out)}\n"
            f"  %init = linalg.fill ins(%zero : f32) outs(%e : {t(out)}) -> {t(out)}\n"
            f"  %c = {name} {{dilations = dense<{dilations}> : tensor<{n}xi64>, strides = dense<{strides}> : "
            f"tensor<{n}xi64>}} ins(%x, %w : {t(x)}, {t(w)}) outs(%init : {t(out)}) -> {t(out)}\n"
            f"  return %c : {t(out)}\n}}\n")


@pytest.mark.parametrize("name, x, w, strides, dilations, thread", [
    ("linalg.conv_3d_ncdhw_fcdhw", [2, 3, 6, 10, 12], [8, 3, 3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 4, 1, 1, 2]),
    ("linalg.conv_2d_nchw_fchw", [2, 4, 12, 16], [8, 4, 3, 3], [1, 1], [2, 2], [1, 4, 1, 4]),  # dilated
    ("linalg.conv_1d_ncw_fcw", [2, 4, 33], [8, 4, 5], [2], [1], [1, 4, 1]),  # strided: channels only
])
def test_the_register_tiled_conv_recipe_computes_the_conv(name, x, w, strides, dilations, thread):
    """emission._emit_conv_register_tile on a thread's tile of a conv (generalized, its taps tiled by 1, unit dims
    folded, vectorized), applied by the compile stage's MLIR to the conv on tensors and run on the CPU by MLIR's
    execution engine: the outputs are torch's (the GPU kernels themselves are checked on the GPU node)."""
    from tests.cpu_reference import run_linalg
    from workers.compile import mlir
    from workers.compile import transform_builder as tb
    from workers.compile.schedule.emission import _emit_conv_register_tile

    spatial = len(strides)
    out = [x[0], w[0]] + [(x[2 + d] - dilations[d] * (w[2 + d] - 1) - 1) // strides[d] + 1 for d in range(spatial)]
    text = _one_conv(name, x, w, out, strides, dilations)
    conv = OpInfo(index=0, name=name, family="conv", loop_ranges=out + [w[1]] + w[2:], dtype="f32", strides=strides,
                  dilations=dilations, iterator_types=["parallel"] * len(out) + ["reduction"] * (1 + spatial))
    with mlir.context():
        payload = mlir.parse(text, "conv")
        module = tb.TransformModule()
        with module.sequence("main") as root:
            tile, _ = tb.tile_for_loops(tb.match(root, [name], name="conv"), thread + [0] * (1 + spatial), "thread")
            _emit_conv_register_tile("k", tile, 1, conv)
        mlir.apply_transform(payload, module.module, "main")
        tiled = str(payload)
    assert "vector.transfer_read" in tiled and name not in tiled
    inputs = [torch.randn(*x), torch.randn(*w)]
    (got,) = run_linalg(tiled, inputs, [out])
    conv_nd = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[spatial - 1]
    want = conv_nd(*inputs, stride=strides, dilation=dilations)
    torch.testing.assert_close(torch.from_numpy(got), want, rtol=1e-5, atol=1e-4)
