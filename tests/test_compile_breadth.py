"""Breadth: each class of model that v0 could not compile (KernelBench, benchmarks/kernelbench.py) now
compiles to PTX that ptxas accepts, or fails fast with its reason. Real torch-mlir, MLIR passes, ptxas."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from rules.routing import GENERATORS
from workers.compile import apply_edit, compile_iteration, initial_params, mlir
from workers.compile.passes import (bool_bytes, collapse_contraction_loops, collapse_reduction_loops,
                                    contraction_operands_apart, extracted_scalars, hoist_accumulators, reduce_in_stages,
                                    registry, scalar_unit_loop, scales_after_contractions, unit_dim_transposes,
                                    vector_products)
from workers.compile.pipeline import PassPipeline
from workers.compile.schedule import templates
from workers.compile.schedule.tiles import MAX_GRID_YZ, linear_grid
from workers.decompositions import (argsort_decomposition, conv_transpose_decomposition, convolution_decomposition,
                                    cumprod_decomposition, cumsum_decomposition, index_add_decomposition,
                                    index_put_decomposition, scatter_add_decomposition, scatter_decomposition,
                                    sort_decomposition, topk_decomposition)
from workers.frontend import FrontendError, LoweringLimits, lower_model, lower_model_bounded
from workers.measure.gpu_run import OutputError, worst_of_draws
from workers.records import CompileResult, LaunchConfig, OpInfo, OpSchedule, ScheduleEdit, ScheduleParams
from workers.target import target

BREADTH = Path(__file__).parent / "data" / "breadth"


def compiled(tmp_path: Path, name: str):
    job = tmp_path / name
    lower_model(str(BREADTH / f"{name}.py"), str(job))
    params = initial_params(str(job))
    result = compile_iteration(str(job), 0, params)
    assert result.ok, f"{name}: {result.stage}: {result.error}"
    return job, params, LaunchConfig.from_json((job / "v0" / "config.json").read_text())


def after_pass(src: str, name: str) -> str:
    """The module `src` after the project pass `name` alone, verified."""
    with mlir.context():
        module = mlir.parse(src, "t")
        registry.run_step(name, module)
        assert module.operation.verify()
        return str(module)


def _affine(text: str):
    """An affine map's text `affine_map<(d..)[s..] -> (e, ...)>` as a Python function of (dims, symbols)."""
    dims, symbols, results = re.fullmatch(r"\((.*?)\)(?:\[(.*?)\])? -> \((.*)\)", text).groups()
    expr = results.replace("floordiv", "//").replace("mod", "%")
    names = [n.strip() for n in (dims + "," + (symbols or "")).split(",") if n.strip()]
    return eval(f"lambda {', '.join(names) or '_'}: ({expr},)")  # noqa: S307 (a test's own MLIR output)


def block_tiles(gpu_mlir: str, grid_x: int) -> set[tuple[int, ...]]:
    """The tile indices each block of a 1-D grid (y = z = 0) computes: every affine.apply of the kernel on
    block ids, evaluated per block."""
    maps = {m.group(1): m.group(2) for m in re.finditer(r"^(#map\d*) = affine_map<(.*)>$", gpu_mlir, re.M)}
    kernel = gpu_mlir[gpu_mlir.index("gpu.func"):]
    ids = {m.group(1): m.group(2) for m in re.finditer(r"(%block_id_\w+) = gpu.block_id (\w)", kernel)}
    applies = [(maps[m.group(1)], [a.strip() for a in re.split(r"[\[\]()]", m.group(2) + m.group(3)) if a.strip()])
               for m in re.finditer(r"affine.apply (#map\d*)\(([^)]*)\)\[([^\]]*)\]", kernel)]
    applies = [(f, [a for arg in args for a in arg.split(", ")]) for f, args in applies]
    applies = [(f, args) for f, args in applies if args and all(a in ids for a in args)]
    assert applies, "the kernel computes no tile index from its block ids"
    tiles = set()
    for bx in range(grid_x):
        value = {"x": bx, "y": 0, "z": 0}
        tiles.add(tuple(_affine(f)(*[value[ids[a]] for a in args])[0] for f, args in applies))
    return tiles


@pytest.mark.parametrize("name", ["batchnorm4d", "conv_relu_bias"])
def test_more_than_three_block_loops_run_on_a_linear_grid_that_covers_every_tile_once(tmp_path, name):
    """Four parallel loops over blocks (NCHW): a 1-D grid of every tile, each block delinearizing its id
    into a different tile (map_forall_to_blocks' grid_dims: inferred, the grid covered 128 of 1024)."""
    job, params, config = compiled(tmp_path, name)
    linear = [launch for launch in config.launches if launch.grid[1:] == [1, 1] and launch.grid[0] > 1]
    assert linear, [launch.grid for launch in config.launches]
    schedule = max(params.ops, key=lambda s: sum(1 for b in s.block_tile if b))
    assert sum(1 for b in schedule.block_tile if b) == 4
    tiles = block_tiles((job / "v0" / "gpu.mlir").read_text(), linear[0].grid[0])
    assert len(tiles) == linear[0].grid[0] == linear_grid(schedule, _op(job, schedule.op_index))


def compile_result(job: Path) -> CompileResult:
    return CompileResult.from_json((job / "v0" / "compile_result.json").read_text())


def _op(job: Path, index: int) -> OpInfo:
    return OpInfo.from_dict(json.loads((job / "model_info.json").read_text())["ops"][index])


def test_a_grid_past_the_y_limit_goes_linear():
    op = OpInfo(0, "linalg.generic", "elementwise", [70000 * 4, 64], ["parallel", "parallel"], "f32")
    tall = OpSchedule(0, "elementwise", block_tile=[4, 64], thread_tile=[1, 64])
    assert linear_grid(tall, op) == 70000 > MAX_GRID_YZ
    assert linear_grid(OpSchedule(0, "elementwise", block_tile=[64, 64], thread_tile=[1, 64]), op) == 0


def test_params_json_holds_the_schedule_of_every_kernel(tmp_path):
    """GroupNorm's block reductions fuse the bias add that the matmul was fused into: the matmul becomes a
    kernel of its own after v0's passes, and its schedule is in params.json, not made up at emission from
    whatever v0 is then (a replay from the params would follow a later v0)."""
    job, _, _ = compiled(tmp_path, "gemm_groupnorm")
    recorded = ScheduleParams.from_json((job / "v0" / "params.json").read_text())
    kernels = set(compile_result(job).kernel_ops)
    assert "matmul" in compile_result(job).kernel_families and kernels <= {s.op_index for s in recorded.ops}


def test_a_linear_before_groupnorm_is_a_2d_matmul(tmp_path):
    """The reshape GroupNorm's groups put on the Linear's output no longer splits the matmul's columns into
    8 x 256 (farm-collapse-contraction-loops): its schedule tiles rows, columns and K."""
    _, params, _ = compiled(tmp_path, "gemm_groupnorm")
    matmuls = [s for s in params.ops if s.family == "matmul"]
    assert len(matmuls) == 1 and len(matmuls[0].block_tile) == 3, [s.block_tile for s in matmuls]


def test_a_matmul_whose_result_is_reshaped_keeps_its_accumulators_in_registers(tmp_path):
    """The 3-D tensor x matrix is one staged matmul of 4096 rows whose result the 3-D output reshapes: a view of
    its buffer on the host, for which upstream hoist_redundant_vector_transfers kept each thread's 8 x 8
    accumulator tile in the K loop (read and stored every step); farm-hoist-kernel-accumulators carries it
    across the loop in the kernel, written once after it: both 8 x 4 column pieces of it (interleave_columns),
    each tile's accesses disjoint from the other's (64 columns apart)."""
    job, params, _ = compiled(tmp_path, "rows_matmul_3d")
    assert [(s.family, s.promote_shared, s.interleave_columns) for s in params.ops] == [("matmul", True, True)]
    kernel = (job / "v0" / "gpu.mlir").read_text().split("gpu.func")[1]
    loop = kernel[kernel.index("scf.for"):kernel.index("scf.yield")]
    assert "iter_args" in loop.splitlines()[0] and loop.splitlines()[0].count("vector<8x4xf32>") == 2
    assert not re.search(r"vector.transfer_(read|write) [^\n]*memref<4096x1024xf32>", loop)
    assert compile_result(job).notes == [f"{hoist_accumulators.NAME}: forward_kernel: 2 tiles carried in registers "
                                         "across their loops"]


KERNEL_LOOPS = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @loops(%out: memref<64x64xf32> {llvm.noalias}, %read_too: memref<64x64xf32> {llvm.noalias},
                    %maybe_aliased: memref<64x64xf32>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %c8 = arith.constant 8 : index
      %pad = arith.constant 0.0 : f32
      scf.for %i = %c0 to %c8 step %c1 {
        %a = vector.transfer_read %out[%c0, %c4], %pad {in_bounds = [true, true]} : memref<64x64xf32>, vector<4x4xf32>
        %b = arith.addf %a, %a : vector<4x4xf32>
        vector.transfer_write %b, %out[%c0, %c4] {in_bounds = [true, true]} : vector<4x4xf32>, memref<64x64xf32>
      }
      scf.for %i = %c0 to %c8 step %c1 {
        %a = vector.transfer_read %read_too[%c0, %c0], %pad {in_bounds = [true, true]} : memref<64x64xf32>, vector<4x4xf32>
        %x = vector.transfer_read %read_too[%c0, %c4], %pad {in_bounds = [true, true]} : memref<64x64xf32>, vector<4x4xf32>
        %b = arith.addf %a, %x : vector<4x4xf32>
        vector.transfer_write %b, %read_too[%c0, %c0] {in_bounds = [true, true]} : vector<4x4xf32>, memref<64x64xf32>
      }
      scf.for %i = %c0 to %c8 step %c1 {
        %a = vector.transfer_read %maybe_aliased[%c0, %c0], %pad {in_bounds = [true, true]} : memref<64x64xf32>, vector<4x4xf32>
        %b = arith.addf %a, %a : vector<4x4xf32>
        vector.transfer_write %b, %maybe_aliased[%c0, %c0] {in_bounds = [true, true]} : vector<4x4xf32>, memref<64x64xf32>
      }
      gpu.return
    }
  }
}
"""


def test_a_kernel_loop_carries_a_tile_it_reads_and_writes_only_where_nothing_else_touches_its_buffer():
    """farm-hoist-kernel-accumulators: the first loop's tile of %out is read before the loop, carried, and
    written once after it; the second loop also reads a neighbouring tile of its buffer (which the write
    would then change), the third's buffer may be another argument's memory (no llvm.noalias): both stay."""
    with mlir.context():
        module = mlir.parse(KERNEL_LOOPS, "kernel loops")
        notes = registry.run_step(hoist_accumulators.NAME, module)
        assert module.operation.verify()
        text = str(module)
    loops = text.split("scf.for")[1:]
    assert "iter_args" in loops[0].splitlines()[0] and all("iter_args" not in loop.splitlines()[0] for loop in loops[1:])
    first = text.split("scf.for")[0].splitlines()[-1] + text.split("scf.for")[1]
    assert "vector.transfer_read %arg0[%c0, %c4]" in text.split("scf.for")[0]  # the read, now before the loop
    assert re.search(r"\}\s*vector.transfer_write %\w+, %arg0\[%c0, %c4\]", first)  # the write, after it
    assert notes == [f"{hoist_accumulators.NAME}: loops: 1 tiles carried in registers across their loops"]


COLUMN_PIECES_LOOP = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @pieces(%out: memref<64x64xf32> {llvm.noalias}) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %pad = arith.constant 0.0 : f32
      %t = gpu.thread_id x
      %first = affine.apply affine_map<()[s0] -> (s0 * 4)>()[%t]
      %second = affine.apply affine_map<()[s0] -> (s0 * 4 + APART)>()[%t]
      scf.for %i = %c0 to %c8 step %c1 {
        %a = vector.transfer_read %out[%c0, %first], %pad {in_bounds = [true, true]} : memref<64x64xf32>, vector<4x4xf32>
        %b = arith.addf %a, %a : vector<4x4xf32>
        vector.transfer_write %b, %out[%c0, %first] {in_bounds = [true, true]} : vector<4x4xf32>, memref<64x64xf32>
        %x = vector.transfer_read %out[%c0, %second], %pad {in_bounds = [true, true]} : memref<64x64xf32>, vector<4x4xf32>
        %y = arith.addf %x, %x : vector<4x4xf32>
        vector.transfer_write %y, %out[%c0, %second] {in_bounds = [true, true]} : vector<4x4xf32>, memref<64x64xf32>
      }
      gpu.return
    }
  }
}
"""


@pytest.mark.parametrize("apart, carried", [(32, 2), (4, 2), (2, 0)])
def test_a_kernel_loop_carries_each_of_a_threads_column_pieces_whose_tiles_are_apart(apart, carried):
    """farm-hoist-kernel-accumulators on a thread's two accumulator pieces of 4 columns (interleave_columns):
    their indices one thread-dependent map apart by a constant, 32 or 4 columns, the tiles are disjoint and
    both are carried; 2 apart they overlap, and neither moves."""
    with mlir.context():
        module = mlir.parse(COLUMN_PIECES_LOOP.replace("APART", str(apart)), "column pieces")
        notes = registry.run_step(hoist_accumulators.NAME, module)
        assert module.operation.verify()
        text = str(module)
    assert notes == ([f"{hoist_accumulators.NAME}: pieces: {carried} tiles carried in registers across their loops"]
                     if carried else [])
    assert text[:text.index("scf.for")].count("vector.transfer_read") == carried  # each carried tile read before


# a kernel whose block-wide loop leaves its accumulator to be written to shared memory, then read at READ
BLOCK_LOOP_THEN_SHARED_READ = """
    gpu.func @NAME(%out: memref<64x64xf32>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %c8 = arith.constant 8 : index
      %pad = arith.constant 0.0 : f32
      %zero = arith.constant dense<0.0> : vector<4x4xf32>
      %tile = memref.alloca() : memref<8x8xf32, #gpu.address_space<workgroup>>
      %acc = scf.for %i = %c0 to %c8 step %c1 iter_args(%a = %zero) -> (vector<4x4xf32>) {
        gpu.barrier
        scf.yield %a : vector<4x4xf32>
      }
      vector.transfer_write %acc, %tile[%c0, %c4] {in_bounds = [true, true]} : vector<4x4xf32>, memref<8x8xf32, #gpu.address_space<workgroup>>
      %read = vector.transfer_read %tile[READ], %pad {in_bounds = [true, true]} : memref<8x8xf32, #gpu.address_space<workgroup>>, vector<4x4xf32>
      vector.transfer_write %read, %out[%c0, %c0] {in_bounds = [true, true]} : vector<4x4xf32>, memref<64x64xf32>
      gpu.barrier
      gpu.return
    }
"""


def test_a_block_loops_hoisted_shared_write_is_synced_before_another_threads_part_is_read():
    """farm-sync-after-block-loops: an accumulator written to shared memory after a loop with a barrier, then
    read at another thread's place (a padded tile's copy back, in straight-line code, which found the barrier
    after it and read garbage on the H100): a barrier right after the write. Read back at the thread's own
    place (a staged epilogue's own tile), it needs none."""
    kernels = [BLOCK_LOOP_THEN_SHARED_READ.replace("NAME", name).replace("READ", read)
               for name, read in (("copy_back", "%c4, %c0"), ("own_tile", "%c0, %c4"))]
    text = after_pass("module attributes {gpu.container_module} {\n  gpu.module @kernels {" + "".join(kernels) + "  }\n}",
                      "farm-sync-after-block-loops")
    copy_back, own_tile = text.split("gpu.func")[1:]
    assert re.search(r"vector.transfer_write %\w+, %alloca\[%c0, %c4\].*\n\s*gpu.barrier\n\s*%\w+ = "
                     r"vector.transfer_read %alloca\[%c4, %c0\]", copy_back), copy_back
    assert copy_back.count("gpu.barrier") == 3 and own_tile.count("gpu.barrier") == 2


def test_a_transpose_that_moves_only_a_unit_dim_is_a_reshape_not_a_kernel(tmp_path):
    """farm-unit-dim-transposes-as-reshapes: the einsum's result, transposed over a dim of 1 by torch-mlir, is
    the matmul's own buffer seen through a reshape: one kernel, where a copy of the whole output followed."""
    job, _, _ = compiled(tmp_path, "tensor4d_matrix")
    assert compile_result(job).kernel_families == ["matmul"]
    with mlir.context():
        module = mlir.parse((job / "model_linalg.mlir").read_text(), "einsum")
        registry.run_step(unit_dim_transposes.NAME, module)
        assert module.operation.verify()
        text = str(module)
    assert "linalg.transpose" not in text
    assert "tensor.collapse_shape %expanded_2 [[0], [1], [2], [3, 4]] : tensor<2x16x32x1x96xf32> into " \
        "tensor<2x16x32x96xf32>" in text


def test_a_loss_reducing_to_one_value_compiles(tmp_path):
    """0-D results get a unit loop (farm-scalar-unit-loop), so the reduction and the division after it are
    tiled into kernels; the sum of squared differences is a reduction, not a contraction."""
    job, params, config = compiled(tmp_path, "mse_loss")
    info = json.loads((job / "model_info.json").read_text())
    assert [o.shape for o in config.outputs] == [[]] and info["output_shapes"] == [[]]
    assert "matmul" not in {s.family for s in params.ops}
    assert config.launches


REDUCTIONS_OVER_SEVERAL_LOOPS = """
#in = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#out = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d2)>
func.func @forward(%x: tensor<4x8x16x32xf32>, %w: tensor<16xf32>) -> (tensor<4x32xf32>, tensor<4x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<4x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x32xf32>) -> tensor<4x32xf32>
  %sum = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["parallel", "reduction", "reduction", "parallel"]}
      ins(%x : tensor<4x8x16x32xf32>) outs(%init : tensor<4x32xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4x32xf32>
  %diff = linalg.generic {indexing_maps = [#in, #row, #out], iterator_types = ["parallel", "reduction", "reduction", "parallel"]}
      ins(%x, %w : tensor<4x8x16x32xf32>, tensor<16xf32>) outs(%init : tensor<4x32xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %d = arith.subf %a, %b : f32
    %s = arith.addf %d, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4x32xf32>
  return %sum, %diff : tensor<4x32xf32>, tensor<4x32xf32>
}
"""


def test_a_reduction_over_several_loops_becomes_one_over_their_product():
    """farm-collapse-reduction-loops: the sum over dims 1 and 2 reads x collapsed to 4 x 128 x 32 in three
    loops; the other reads w through dim 2 alone, which no collapse of x's dims can express: unchanged."""
    text = after_pass(REDUCTIONS_OVER_SEVERAL_LOOPS, collapse_reduction_loops.NAME)
    assert text.count("tensor.collapse_shape") == 1
    assert "tensor.collapse_shape %arg0 [[0], [1, 2], [3]] : tensor<4x8x16x32xf32> into tensor<4x128x32xf32>" in text
    generics = re.findall(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\}", text)
    maps = dict(re.findall(r"^(#map\d*) = affine_map<(.*)>$", text, re.M))
    assert [maps[m] for m in generics[0][0].split(", ")] == ["(d0, d1, d2) -> (d0, d1, d2)", "(d0, d1, d2) -> (d0, d2)"]
    assert generics[0][1] == '"parallel", "reduction", "parallel"'
    assert generics[1][1] == '"parallel", "reduction", "reduction", "parallel"'


def test_a_reduction_over_loops_that_do_not_collapse_reduces_in_two_stages():
    """farm-reduce-in-stages on the same module: the sum that collapses is left to
    farm-collapse-reduction-loops; the one that reads w through dim 2 alone reduces over dim 2 into 4 x 8 x 32
    partials (dim 1 now parallel, the partials starting at 0), then over dim 1 into the original init."""
    with mlir.context():
        module = mlir.parse(REDUCTIONS_OVER_SEVERAL_LOOPS, "two reductions")
        for step in (reduce_in_stages.NAME, collapse_reduction_loops.NAME):
            registry.run_step(step, module)
        assert module.operation.verify()
        text = str(module)
    generics = re.findall(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\}.*?"
                          r"ins\((.*?)\) outs\((.*?)\)", text)
    maps = dict(re.findall(r"^(#map\d*) = affine_map<(.*)>$", text, re.M))
    assert len(generics) == 3
    _, (stage1_maps, stage1_iterators, _, partials), (stage2_maps, stage2_iterators, stage2_in, stage2_out) = generics
    assert stage1_iterators == '"parallel", "parallel", "reduction", "parallel"'
    assert [maps[m] for m in stage1_maps.split(", ")][-1] == "(d0, d1, d2, d3) -> (d0, d1, d3)"
    assert "tensor<4x8x32xf32>" in partials and "tensor<4x8x32xf32>" in stage2_in
    assert stage2_iterators == '"parallel", "reduction", "parallel"'
    assert [maps[m] for m in stage2_maps.split(", ")] == ["(d0, d1, d2) -> (d0, d1, d2)", "(d0, d1, d2) -> (d0, d2)"]
    assert stage2_out.startswith("%1 ")  # the original init: the fill of 0


CONTRACTIONS_OVER_SEVERAL_COLUMN_LOOPS = """
#a = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
#w = affine_map<(d0, d1, d2, d3) -> (d3, d1, d2)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#ba = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#bb = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
func.func @forward(%x: tensor<64x256xf32>, %w: tensor<256x8x32xf32>, %y: tensor<4x16x256xf32>, %z: tensor<4x256x32xf32>,
                   %rows: tensor<128x256xf32>) -> (tensor<64x8x32xf32>, tensor<4x16x32xf32>, tensor<64x8x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x8x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<64x8x32xf32>) -> tensor<64x8x32xf32>
  %mm = linalg.generic {indexing_maps = [#a, #w, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<64x256xf32>, tensor<256x8x32xf32>) outs(%init : tensor<64x8x32xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<64x8x32xf32>
  %be = tensor.empty() : tensor<4x16x32xf32>
  %binit = linalg.fill ins(%zero : f32) outs(%be : tensor<4x16x32xf32>) -> tensor<4x16x32xf32>
  %bmm = linalg.generic {indexing_maps = [#ba, #bb, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%y, %z : tensor<4x16x256xf32>, tensor<4x256x32xf32>) outs(%binit : tensor<4x16x32xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x16x32xf32>
  %slice = tensor.extract_slice %rows[64, 0] [64, 256] [1, 1] : tensor<128x256xf32> to tensor<64x256xf32>
  %smm = linalg.generic {indexing_maps = [#a, #w, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%slice, %w : tensor<64x256xf32>, tensor<256x8x32xf32>) outs(%init : tensor<64x8x32xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<64x8x32xf32>
  return %mm, %bmm, %smm : tensor<64x8x32xf32>, tensor<4x16x32xf32>, tensor<64x8x32xf32>
}
"""


def test_a_contraction_over_several_column_loops_becomes_a_matmul():
    """farm-collapse-contraction-loops: a Linear whose output GroupNorm's reshape split into 8 x 32 columns
    (the weight read as 256 x 8 x 32) multiplies 64 x 256 by the weight collapsed to 256 x 256 into a fresh
    fill of 64 x 256, expanded back to 64 x 8 x 32 for its users. The batch matmul's batch loop is read beside
    its rows in one operand and alone in the other, and the third contraction reads a slice (bufferization
    would copy it collapsed, on the host): both unchanged, the latter still from the old fill."""
    text = after_pass(CONTRACTIONS_OVER_SEVERAL_COLUMN_LOOPS, collapse_contraction_loops.NAME)
    assert "tensor.collapse_shape %arg1 [[0], [1, 2]] : tensor<256x8x32xf32> into tensor<256x256xf32>" in text
    assert re.search(r"linalg.fill ins\(%cst : f32\) outs\(%\d+ : tensor<64x256xf32>\)", text)
    assert re.search(r"tensor.expand_shape %\d+ \[\[0\], \[1, 2\]\] output_shape \[64, 8, 32\] "
                     r": tensor<64x256xf32> into tensor<64x8x32xf32>", text)
    generics = re.findall(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\}", text)
    maps = dict(re.findall(r"^(#map\d*) = affine_map<(.*)>$", text, re.M))
    assert [maps[m] for m in generics[0][0].split(", ")] == \
        ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"]
    assert generics[0][1] == '"parallel", "parallel", "reduction"'
    assert generics[1][1] == generics[2][1] == '"parallel", "parallel", "parallel", "reduction"'


SOFTMAX_TIMES_V = """
#p = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#s = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#v = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#o = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#k = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
func.func @forward(%e: tensor<4x16x32xf32>, %sum: tensor<4x16xf32>, %v: tensor<4x32x8xf32>, %kscale: tensor<4x32xf32>)
    -> (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %empty = tensor.empty() : tensor<4x16x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x16x8xf32>) -> tensor<4x16x8xf32>
  %ones = linalg.fill ins(%one : f32) outs(%empty : tensor<4x16x8xf32>) -> tensor<4x16x8xf32>
  %attn = linalg.generic {indexing_maps = [#p, #s, #v, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%e, %sum, %v : tensor<4x16x32xf32>, tensor<4x16xf32>, tensor<4x32x8xf32>) outs(%init : tensor<4x16x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %acc: f32):
    %n = arith.divf %a, %b : f32
    %m = arith.mulf %n, %c : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<4x16x8xf32>
  %from_ones = linalg.generic {indexing_maps = [#p, #s, #v, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%e, %sum, %v : tensor<4x16x32xf32>, tensor<4x16xf32>, tensor<4x32x8xf32>) outs(%ones : tensor<4x16x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %acc: f32):
    %n = arith.divf %a, %b : f32
    %m = arith.mulf %n, %c : f32
    %r = arith.addf %acc, %m : f32
    linalg.yield %r : f32
  } -> tensor<4x16x8xf32>
  %along_k = linalg.generic {indexing_maps = [#p, #k, #v, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%e, %kscale, %v : tensor<4x16x32xf32>, tensor<4x32xf32>, tensor<4x32x8xf32>) outs(%init : tensor<4x16x8xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %acc: f32):
    %n = arith.mulf %b, %a : f32
    %m = arith.mulf %c, %n : f32
    %r = arith.addf %m, %acc : f32
    linalg.yield %r : f32
  } -> tensor<4x16x8xf32>
  return %attn, %from_ones, %along_k : tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>
}
"""


def test_a_scale_that_k_does_not_index_moves_after_the_contraction():
    """farm-scales-after-contractions: softmax's division by the row sums, fused into the product with V,
    becomes a batch matmul of the exponentials and V followed by the division of its result (what the matmul
    templates tile and stage); the same body accumulating onto ones, and a scale indexed by K, stay. The
    outputs are the same (MLIR's CPU execution engine, before and after)."""
    text = after_pass(SOFTMAX_TIMES_V, scales_after_contractions.NAME)
    generics = re.findall(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\}", text)
    maps = dict(re.findall(r"^(#map\d*) = affine_map<(.*)>$", text, re.M))
    assert [[maps[m] for m in g[0].split(", ")] for g in generics[:2]] == [
        ["(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)", "(d0, d1, d2, d3) -> (d0, d1, d2)"],
        ["(d0, d1, d2) -> (d0, d1, d2)", "(d0, d1, d2) -> (d0, d1)", "(d0, d1, d2) -> (d0, d1, d2)"]]
    assert generics[1][1] == '"parallel", "parallel", "parallel"' and len(generics) == 4
    assert text.count("arith.divf") == 2  # the new division, and the one of the contraction onto ones
    torch.manual_seed(0)
    assert_same_outputs(SOFTMAX_TIMES_V, text, [torch.rand(4, 16, 32), torch.rand(4, 16) + 1, torch.rand(4, 32, 8),
                                                torch.rand(4, 32)], [[4, 16, 8]] * 3)


def assert_same_outputs(before: str, after: str, args: list[torch.Tensor], shapes: list[list[int]]) -> None:
    """The functions `before` and `after` compute the same outputs from `args` (MLIR's CPU execution engine)."""
    from tests.cpu_reference import run_linalg

    for expected, got in zip(run_linalg(before, args, shapes), run_linalg(after, args, shapes)):
        torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(expected), rtol=1e-5, atol=1e-6)


FUSED_OPERANDS = """
#xk = affine_map<(d0, d1, d2) -> (d0, d2)>
#row = affine_map<(d0, d1, d2) -> (d0)>
#col = affine_map<(d0, d1, d2) -> (d2)>
#kn = affine_map<(d0, d1, d2) -> (d2, d1)>
#o = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @forward(%x: tensor<16x32xf32>, %mean: tensor<16xf32>, %rstd: tensor<16xf32>, %g: tensor<32xf32>,
                   %w: tensor<32x8xf32>) -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %scale = arith.constant 0.35355339059327379 : f64
  %e = tensor.empty() : tensor<16x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<16x8xf32>) -> tensor<16x8xf32>
  %normed = linalg.generic {indexing_maps = [#xk, #row, #row, #col, #kn, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %mean, %rstd, %g, %w : tensor<16x32xf32>, tensor<16xf32>, tensor<16xf32>, tensor<32xf32>, tensor<32x8xf32>)
      outs(%init : tensor<16x8xf32>) {
  ^bb0(%a: f32, %m: f32, %r: f32, %gk: f32, %b: f32, %acc: f32):
    %c = arith.subf %a, %m : f32
    %n = arith.mulf %c, %r : f32
    %y = arith.mulf %n, %gk : f32
    %p = arith.mulf %y, %b : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<16x8xf32>
  %scaled = linalg.generic {indexing_maps = [#xk, #kn, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x32xf32>, tensor<32x8xf32>) outs(%init : tensor<16x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %c = arith.truncf %scale : f64 to f32
    %sa = arith.mulf %a, %c : f32
    %d = arith.truncf %scale : f64 to f32
    %sb = arith.mulf %b, %d : f32
    %p = arith.mulf %sa, %sb : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<16x8xf32>
  %squares = linalg.generic {indexing_maps = [#xk, #kn, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x32xf32>, tensor<32x8xf32>) outs(%init : tensor<16x8xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %d = arith.subf %a, %b : f32
    %p = arith.mulf %d, %d : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<16x8xf32>
  return %normed, %scaled, %squares : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
}
"""


def fused_operands_args() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.rand(16, 32), torch.rand(16), torch.rand(16) + 0.5, torch.rand(32), torch.rand(32, 8)]


def test_an_operands_computation_fused_into_a_contraction_is_computed_apart_first():
    """farm-contraction-operands-apart: a LayerNorm's normalization fused into the Linear after it, and
    attention's queries and keys each scaled by a constant (scaled_dot_product_attention), become elementwise
    generics over the operand's own loops (x's [16, 32]; w's [32, 8]) and a contraction `out + a * b` (what the
    matmul templates tile and stage); a sum of squared differences, whose factors read the same inputs, stays.
    The outputs are the same (MLIR's CPU execution engine, before and after)."""
    text = after_pass(FUSED_OPERANDS, contraction_operands_apart.NAME)
    generics = re.findall(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\}", text)
    iterators = [g[1] for g in generics]
    assert iterators == ['"parallel", "parallel"', '"parallel", "parallel", "reduction"'] + \
        ['"parallel", "parallel"'] * 2 + ['"parallel", "parallel", "reduction"'] * 2
    with mlir.context():
        module = mlir.parse(text, "apart")
        contractions = [op for op in mlir.body_ops(mlir.main_func(module))
                        if op.operation.name == "linalg.generic" and "reduction" in mlir.iterator_types(op)]
        assert [mlir.is_contraction(op) for op in contractions] == [True, True, False]
    assert_same_outputs(FUSED_OPERANDS, text, fused_operands_args(), [[16, 8]] * 3)


def test_a_constant_scale_of_each_factor_moves_after_the_contraction():
    """farm-scales-after-contractions: scaled_dot_product_attention's queries and keys each times a constant
    (the truncation of an f64 outside the body, in it): the contraction reads x and w as they are, and its
    result is multiplied by each constant after it; the LayerNorm fused into a Linear (its scale is computed
    from inputs) and the sum of squared differences stay. The outputs are the same (MLIR's CPU execution
    engine, before and after)."""
    text = after_pass(FUSED_OPERANDS, scales_after_contractions.NAME)
    generics = re.findall(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\}", text)
    assert [g[1].count("reduction") for g in generics] == [1, 1, 0, 1]  # one op applies both scales
    # the LayerNorm's 3, the contraction's and its 2 scales, the squares' 1
    assert text.count("arith.truncf") == 2 and text.count("arith.mulf") == 3 + 3 + 1
    assert_same_outputs(FUSED_OPERANDS, text, fused_operands_args(), [[16, 8]] * 3)


ATTENTION_OUTPUT_PROJECTION = """
#x = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#w = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#o = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
func.func @forward(%x: tensor<64x8x32xf32>, %w: tensor<8x32x256xf32>) -> tensor<64x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x256xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<64x256xf32>) -> tensor<64x256xf32>
  %mm = linalg.generic {indexing_maps = [#x, #w, #o], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%x, %w : tensor<64x8x32xf32>, tensor<8x32x256xf32>) outs(%init : tensor<64x256xf32>) {
  ^bb0(%p: f32, %q: f32, %acc: f32):
    %m = arith.mulf %p, %q : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<64x256xf32>
  return %mm : tensor<64x256xf32>
}
"""


VECTOR_PRODUCTS = """
func.func @forward(%x: tensor<1x64xf32>, %a: tensor<16x32xf32>, %v: tensor<32x1xf32>, %w: tensor<8x64xf32>)
    -> (tensor<1x8xf32>, tensor<16x1xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x8xf32>
  %wt = linalg.transpose ins(%w : tensor<8x64xf32>) outs(%e : tensor<64x8xf32>) permutation = [1, 0]
  %e1 = tensor.empty() : tensor<1x8xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x8xf32>) -> tensor<1x8xf32>
  %linear = linalg.matmul ins(%x, %wt : tensor<1x64xf32>, tensor<64x8xf32>) outs(%i1 : tensor<1x8xf32>) -> tensor<1x8xf32>
  %e2 = tensor.empty() : tensor<16x1xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<16x1xf32>) -> tensor<16x1xf32>
  %matvec = linalg.matmul ins(%a, %v : tensor<16x32xf32>, tensor<32x1xf32>) outs(%i2 : tensor<16x1xf32>) -> tensor<16x1xf32>
  %xs = tensor.extract_slice %a[0, 0] [4, 32] [1, 1] : tensor<16x32xf32> to tensor<4x32xf32>
  %ws = tensor.extract_slice %w[0, 0] [8, 32] [1, 1] : tensor<8x64xf32> to tensor<8x32xf32>
  %e3 = tensor.empty() : tensor<32x8xf32>
  %wst = linalg.transpose ins(%ws : tensor<8x32xf32>) outs(%e3 : tensor<32x8xf32>) permutation = [1, 0]
  %e4 = tensor.empty() : tensor<4x8xf32>
  %i4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<4x8xf32>) -> tensor<4x8xf32>
  %matmul = linalg.matmul ins(%xs, %wst : tensor<4x32xf32>, tensor<32x8xf32>) outs(%i4 : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %linear, %matvec, %matmul : tensor<1x8xf32>, tensor<16x1xf32>, tensor<4x8xf32>
}"""


def test_a_matrix_vector_product_becomes_a_row_reduction_that_reads_the_matrix_in_place():
    """farm-vector-products-as-generics, then the cleanup pipeline's upstream passes: a batch-1 Linear (its
    weight transposed first) and a matrix-vector product become reductions over (n, k) that read the matrix's
    rows in place, no transpose left for them, which the analysis counts as reductions; a 4-row matmul stays a
    matmul with its transpose. The outputs are the same (MLIR's CPU execution engine, before and after)."""
    from workers.compile.analysis import analyze
    from workers.compile.pipeline import pre_schedule_steps

    text = after_pass(VECTOR_PRODUCTS, vector_products.NAME)
    assert text.count("linalg.matmul") == 1 and text.count("linalg.transpose") == 1
    with mlir.context():
        module = mlir.parse(text, "generic")
        registry.run_step(pre_schedule_steps()[1], module)  # the cleanup: fusion, unit dims folded
        cleaned = str(module)
    assert cleaned.count("linalg.transpose") == 1  # the 4-row matmul's
    facts = analyze(VECTOR_PRODUCTS)
    contractions = [(f.info.family, f.info.loop_ranges, f.input_loops) for f in facts if f.info.family != "fill"
                    and "reduction" in f.info.iterator_types]
    assert contractions == [("reduction", [8, 64], [[1], [0, 1]]), ("reduction", [16, 32], [[0, 1], [1]]),
                            ("matmul", [4, 8, 32], [[0, 2], [2, 1]])]
    args = [torch.randn(1, 64), torch.randn(16, 32), torch.randn(32, 1), torch.randn(8, 64)]
    assert_same_outputs(VECTOR_PRODUCTS, cleaned, args, [[1, 8], [16, 1], [4, 8]])


def test_a_batch1_linear_and_a_matrix_vector_product_take_a_block_per_output(tmp_path):
    """v0 of a batch-1 Linear with bias and ReLU, and of a matrix-vector product: each a block reduction of a
    block per output (the Linear's 1024, the product's 512), the bias and ReLU a kernel after it: fused, the
    epilogue's threads each reduced a row (detached_block_reductions). No transpose kernel."""
    job, params, config = compiled(tmp_path, "batch1_linear")
    reductions = [s for s in params.ops if s.block_reduction]
    assert [(s.family, s.block_tile) for s in reductions] == [("reduction", [1, 0])] * 2
    assert [launch.grid for launch in config.launches] == [[1024, 1, 1], [1, 1, 1], [512, 1, 1]]
    assert all(s.family != "copy" for s in params.ops)


def test_a_contraction_over_several_k_loops_becomes_a_matmul():
    """farm-collapse-contraction-loops on K: an attention block's output projection reads its input as
    (tokens, heads, head dim) and its weight as (heads, head dim, out), K two loops (MinGPT, ViT, Swin), which
    the matmul templates neither stage nor tile as one K; collapsed, it multiplies 64 x 256 by 256 x 256, its
    result (which reads no K loop) as it was."""
    text = after_pass(ATTENTION_OUTPUT_PROJECTION, collapse_contraction_loops.NAME)
    assert "tensor.collapse_shape %arg0 [[0], [1, 2]] : tensor<64x8x32xf32> into tensor<64x256xf32>" in text
    assert "tensor.collapse_shape %arg1 [[0, 1], [2]] : tensor<8x32x256xf32> into tensor<256x256xf32>" in text
    assert "tensor.expand_shape" not in text
    (generic,) = re.findall(r"linalg.generic \{indexing_maps = \[(.*?)\], iterator_types = \[(.*?)\]\}", text)
    maps = dict(re.findall(r"^(#map\d*) = affine_map<(.*)>$", text, re.M))
    assert [maps[m] for m in generic[0].split(", ")] == \
        ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"]
    assert generic[1] == '"parallel", "parallel", "reduction"'


@pytest.mark.parametrize("name", ["hinge_loss", "channel_mean"])
def test_a_broadcast_or_strided_reduction_is_spread_over_threads(tmp_path, name):
    """HingeLoss (KernelBench level 1 #100) and a per-channel mean over N, H, W ran in one thread per output:
    now a first stage of block reductions, then one over the partials."""
    _, params, config = compiled(tmp_path, name)
    stages = [s for s in params.ops if s.family == "reduction"]
    assert len(stages) == 2 and stages[0].block_reduction, [(s.op_index, s.block_reduction) for s in stages]
    assert all(math.prod(launch.block) > 1 for launch in config.launches[:2])


def test_a_loss_and_a_layernorm_over_several_dims_spread_their_reductions(tmp_path):
    """MSELoss's mean reduces over two loops and LayerNorm's statistics over three (KernelBench level 1
    #94 and #40 ran them in one thread, one per row): one loop each now, the loss's 16384 elements in a
    block reduction, LayerNorm's 4 rows of 65536 split over the grid (fewer rows than SMs), each row's 256
    partials then merged by a block of 64 threads (by one thread before)."""
    _, params, config = compiled(tmp_path, "mse_loss")
    assert [s.block_reduction for s in params.ops if s.family == "reduction"] == [1024]
    job, params, config = compiled(tmp_path, "layernorm_3d")
    stats = [s for s in params.ops if s.family == "reduction"]
    assert len(stats) == 2 and all(s.split_reduction == 256 and s.block_reduction == 64 for s in stats)
    partials = [l for l in config.launches if math.prod(l.grid) * math.prod(l.block) == 4 * 256]
    merges = [l for l in config.launches if l.grid == [4, 1, 1] and l.block == [64, 1, 1]]
    assert len(partials) == 2 and len(merges) == 2, [(l.grid, l.block) for l in config.launches]


def test_a_reduction_over_an_odd_volume_is_not_split_by_one(tmp_path):
    """The mean over 13 x 29 x 29 collapses into one loop that no power of two divides: v0 keeps a thread
    per output there, not a split_reduction of 1 (which its own validation refuses)."""
    _, params, _ = compiled(tmp_path, "odd_volume_mean")
    assert all(not s.split_reduction and not s.block_reduction for s in params.ops)


def test_a_python_number_among_the_inputs_is_a_constant_of_the_lowered_model(tmp_path):
    job, _, config = compiled(tmp_path, "matrix_scalar")
    assert json.loads((job / "model_info.json").read_text())["input_shapes"] == [[64, 128]]
    assert [b.source for b in config.buffers if b.role == "input"] == ["input:0"]
    assert "3.14" in (job / "model_linalg.mlir").read_text()


def test_integer_powers_become_multiplications_not_a_libdevice_call(tmp_path):
    """x ** 3 of a tanh-GELU: torch-mlir's math.fpowi with an i64 exponent lowered to a call of
    __nv_powif, which takes an i32 (garbage on the H200); math-expand-ops multiplies instead."""
    job, _, _ = compiled(tmp_path, "gelu_tanh")
    assert "math.fpowi" in (job / "model_linalg.mlir").read_text()
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert "powi" not in ptx and "tanh" in (job / "v0" / "gpu.mlir").read_text()


def test_group_norm_lowers_without_gathers(tmp_path):
    """Its default decomposition's as_strided became gathers with index tensors as large as the output."""
    job, _, _ = compiled(tmp_path, "group_norm")
    linalg = (job / "model_linalg.mlir").read_text()
    assert "tensor.extract " not in linalg and "dense<" not in linalg.replace("dense<0", "")
    assert len(linalg) < 20_000


@pytest.mark.parametrize("name", ["cumsum_reverse", "cross_entropy", "dilated_conv", "topk", "concat_pieces",
                                  "short_rows"])
def test_scans_gathers_and_dilated_convs_compile_with_every_kernel_on_the_gpu(tmp_path, name):
    """A cumsum is shifted copies (concats, each piece a copy kernel writing its slice in place) and adds; a
    flip or a target's score is a gather the vectorizer takes; img2col takes no dilation, so v0 keeps such
    a conv direct; a topk is rounds of max-with-index; a concat's pieces are written in place; rows of 10
    get no row kernel. (The host check that passed proves no copy was left on the host.)"""
    job, params, config = compiled(tmp_path, name)
    assert "tm_tensor" not in (job / "model_linalg.mlir").read_text()
    assert not any(s.img2col for s in params.ops)


@pytest.mark.parametrize("name", ["nonpersistent_buffer", "masked_assign", "scatter_gate", "sort", "index_add_mean",
                                  "index_assign"])
def test_a_non_persistent_buffer_a_masked_assignment_scatters_and_sorts_compile(tmp_path, name):
    """BERT's position ids (a buffer outside the state dict), a GCN's d[isinf(d)] = 0, an MoE gate's
    scatter, a sort with argsort and a GNN's index_add/scatter_add: torch-mlir stopped at the first and
    lowered the others to tm_tensor ops; all are now plain linalg, every kernel on the GPU."""
    job, _, _ = compiled(tmp_path, name)
    assert "tm_tensor" not in (job / "model_linalg.mlir").read_text()


@pytest.mark.parametrize("shape, dim", [((3, 1000), 1), ((2, 700, 5), 1), ((300,), 0), ((16, 100), -1),
                                        ((2, 40000), 1)])  # totals blocked again (1250 blocks)
def test_a_long_scan_scans_blocks_in_one_reduction_each_and_then_their_totals(shape, dim):
    """Rows past BLOCKED_SCAN_MIN: blocks of 32 summed by a triangle of ones (multiplied: a product over the
    triangle), the totals scanned so too while long, the identity padding of a row that is no multiple of 32
    dropped again. Products through zeros and negative factors as torch's."""
    x = torch.rand(*shape, dtype=torch.float64)
    assert torch.allclose(cumsum_decomposition(x, dim), torch.cumsum(x, dim), rtol=1e-12, atol=1e-12)
    factors = (0.9 + 0.2 * x) * torch.where(torch.rand(*shape) < 0.05, -1.0, 1.0).double()
    factors.view(-1)[7] = 0.0
    assert torch.allclose(cumprod_decomposition(factors, dim), torch.cumprod(factors, dim), rtol=1e-10, atol=0)


def test_the_index_assignment_and_scatter_decompositions_compute_what_torch_does():
    torch.manual_seed(0)
    x = torch.randn(5, 8)
    rows = torch.stack([torch.randperm(8)[:3] for _ in range(5)])  # distinct slots per row, as topk's
    src = torch.randn(5, 3)
    assert torch.equal(scatter_decomposition(x, 1, rows, src), x.scatter(1, rows, src))
    assert torch.equal(scatter_decomposition(x, 1, rows, 2.5), x.scatter(1, rows, 2.5))
    columns, larger = torch.stack([torch.randperm(5)[:2] for _ in range(8)], 1), torch.randn(4, 8)
    assert torch.equal(scatter_decomposition(x, 0, columns, larger), x.scatter(0, columns, larger))
    mask = x > 0.3
    for accumulate in (False, True):
        assert torch.equal(index_put_decomposition(x, [mask], torch.tensor(1.5), accumulate),
                           torch.ops.aten.index_put.default(x, [mask], torch.tensor(1.5), accumulate))
    # x[rows] = v and x[:, cols] = v: rows and values, a broadcast value, negative indices, the last of a
    # repeated index (as torch on the CPU), sums where accumulating
    for dim, index, values in [(0, torch.tensor([3, 0, -1]), torch.randn(3, 8)),
                               (1, torch.tensor([6, 2]), torch.randn(5, 2)),
                               (1, torch.tensor([1, 4, 1]), torch.tensor(7.0)),
                               (0, torch.tensor([2, 2, 4]), torch.randn(3, 1))]:
        at = [None] * dim + [index]
        for accumulate in (False, True):
            assert torch.allclose(index_put_decomposition(x, at, values, accumulate),
                                  torch.ops.aten.index_put.default(x, at, values, accumulate))
    # x[rows, cols] = v: the indexed dims merged; indices of dims apart, or of more dims, are left to torch-mlir
    for at, values in [([torch.tensor([0, 3, -1]), torch.tensor([1, 5, 2])], torch.randn(3)),
                       ([torch.tensor([2, 2]), torch.tensor([1, 1])], torch.tensor(3.0))]:
        for accumulate in (False, True):
            assert torch.allclose(index_put_decomposition(x, at, values, accumulate),
                                  torch.ops.aten.index_put.default(x, at, values, accumulate))
    y = torch.randn(3, 4, 5)
    assert index_put_decomposition(y, [torch.tensor([0, 1]), None, torch.tensor([1, 2])], torch.tensor(1.0)) \
        is NotImplemented
    assert index_put_decomposition(x, [torch.tensor([[0, 1]])], torch.tensor(1.0)) is NotImplemented


def test_the_sort_index_add_and_scatter_add_decompositions_compute_what_torch_does():
    """Against torch on the CPU: stable order (ties by position), NaN as the largest, infinities, either
    direction, any dim, integers; index_add with alpha along either dim; scatter_add of repeated indices."""
    torch.manual_seed(0)
    x = torch.randn(6, 37)
    x[0, 3] = x[0, 9] = float("nan")
    x[1, :10] = 0.5
    x[2, 5], x[2, 6] = float("inf"), -float("inf")
    for descending in (False, True):
        for dim in (1, 0, -1):
            values, indices = sort_decomposition(x, dim, descending)
            expected = torch.sort(x, stable=True, dim=dim, descending=descending)
            assert torch.equal(indices, expected.indices) and torch.allclose(values, expected.values, equal_nan=True)
            assert torch.equal(argsort_decomposition(x, dim, descending), expected.indices)
    ints = torch.randint(0, 5, (4, 20))
    values, indices = sort_decomposition(ints, 1, True)
    expected = torch.sort(ints, stable=True, dim=1, descending=True)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
    targets, messages = torch.randint(0, 10, (50,)), torch.randn(50, 4)
    base = torch.randn(10, 4)
    assert torch.allclose(index_add_decomposition(base, 0, targets, messages), base.index_add(0, targets, messages),
                          atol=1e-5)
    wide = torch.randn(3, 10)
    assert torch.allclose(index_add_decomposition(wide, 1, targets[:7], messages.flatten()[:21].reshape(3, 7), alpha=2),
                          wide.index_add(1, targets[:7], messages.flatten()[:21].reshape(3, 7), alpha=2), atol=1e-5)
    index = targets.unsqueeze(1).expand(-1, 4)
    assert torch.allclose(scatter_add_decomposition(base, 0, index, messages), base.scatter_add(0, index, messages),
                          atol=1e-5)


def test_a_depthwise_conv_puts_its_threads_along_the_outputs_rows(tmp_path):
    """depthwise_conv_2d_nchw_chw's loops run (n, oh, ow, c) and its output is NCHW: v0's threads take oh and
    ow (x along ow, the output's innermost dim), a block per channel, so that a warp stores a run of
    neighbouring pixels; along c (as the innermost loop) its stores were 64*64 elements apart."""
    job, params, config = compiled(tmp_path, "depthwise_conv")
    (conv,) = [s for s in params.ops if s.family == "conv"]
    assert conv.thread_tile[1] and conv.thread_tile[2] and not conv.thread_tile[3], conv
    assert conv.block_tile[3] == 1
    assert config.launches[-1].block[0] == (conv.block_tile[2] or 64) // conv.thread_tile[2]  # x: ow


def test_a_matmul_without_good_divisors_takes_register_tiles_masked_at_its_edges(tmp_path):
    """1000 x 700 x 67 (a prime K): v0 gave blocks of one row and one output per thread. Now 32x64 blocks of
    2x4 per thread, the grid covering every output once (the last block of a loop partial), its K steps
    vectorized, masked; no per-thread scratch. (Staged tiles would pad K by half: v0 keeps it unstaged.)"""
    job, params, config = compiled(tmp_path, "irregular_matmul")
    (matmul,) = [s for s in params.ops if s.family == "matmul"]
    assert compile_result(job).kernel_families[-1:] == ["matmul"] and not matmul.promote_shared
    launch = next(launch for launch, op in zip(config.launches, compile_result(job).kernel_ops) if op == matmul.op_index)
    op = _op(job, matmul.op_index)
    tiled = [d for d, t in enumerate(matmul.thread_tile) if t]
    assert [matmul.thread_tile[d] for d in tiled] == [2, 4] and [matmul.block_tile[d] for d in tiled] == [32, 64]
    assert any(op.loop_ranges[d] % 64 for d in tiled)
    k = op.loop_ranges[op.iterator_types.index("reduction")]
    assert matmul.vectorize and k % matmul.reduction_tile
    blocks = [math.ceil(r / b) for r, b in zip(op.loop_ranges, matmul.block_tile) if b]
    assert math.prod(launch.grid) == math.prod(blocks) and math.prod(launch.block) == 256
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert ".local" not in ptx and "malloc" not in ptx
    assert "fma.rn.f32" not in ptx  # a masked K step multiplies, selects and adds


def test_v0_stages_a_matmul_without_good_divisors_in_padded_tiles_where_its_grid_fills_the_gpu(tmp_path):
    """A ViT Linear over 2 x 197 tokens: no staged tile divides its 394 rows; v0 stages 64 x 64 blocks of
    4 x 4 with K steps of 32, its last row of blocks padded (448 rows' work, within STAGED_PADDING_WORK), 7 x 32
    blocks for the H100's 132 SMs. The Linear's bias stays a kernel of its own (a reshape lies between)."""
    job, params, config = compiled(tmp_path, "vit_linear")
    (matmul,) = [s for s in params.ops if s.family == "matmul"]
    assert compile_result(job).kernel_families[-2:] == ["matmul", "elementwise"]
    assert (matmul.promote_shared, matmul.block_tile, matmul.thread_tile, matmul.reduction_tile) == \
        (True, [64, 64, 0], [4, 4, 0], 32)
    op = _op(job, matmul.op_index)
    assert op.loop_ranges[0] % 64 and math.ceil(op.loop_ranges[0] / 64) * 64 / op.loop_ranges[0] <= \
        templates.STAGED_PADDING_WORK
    launch = next(launch for launch, op in zip(config.launches, compile_result(job).kernel_ops) if op == matmul.op_index)
    assert math.prod(launch.grid) == 7 * 32 >= target("sm_90a").sms
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert "ld.shared" in ptx and ".local" not in ptx and "malloc" not in ptx


@pytest.mark.parametrize("name, block, thread, k_step, shared", [
    ("vit_linear", [128, 64, 0], [8, 4, 0], 16, {(128, 16), (16, 64), (128, 64)}),  # M partial
    ("irregular_matmul", [64, 64, 0], [4, 4, 0], 8, {(64, 8), (8, 64), (64, 64)})])  # M, N and K partial
def test_a_staged_matmul_pads_the_tiles_its_loops_fill_in_part(tmp_path, name, block, thread, k_step, shared):
    """Staging with partial tiles: the block tile padded to its whole size (structured.pad), the K steps' copies
    reading the input through the pad (out-of-bounds reads give zeros, no padded copy of the input is made),
    the accumulator in registers across the K loop, the padded result copied back masked. Shared memory holds
    the K step's tiles and the result tile, nothing of the input's size; no local memory, no malloc."""
    job = tmp_path / name
    lower_model(str(BREADTH / f"{name}.py"), str(job))
    params = initial_params(str(job))
    (matmul,) = [s for s in params.ops if s.family == "matmul"]
    for field, value in (("promote_shared", True), ("block_tile", block), ("thread_tile", thread),
                         ("reduction_tile", k_step), ("vectorize", True)):
        params = apply_edit(params, ScheduleEdit(matmul.op_index, field, value))
    result = compile_iteration(str(job), 1, params)
    assert result.ok, result.error
    op = _op(job, matmul.op_index)
    assert any(r % b for r, b in zip(op.loop_ranges, block) if b)
    gpu = (job / "v1" / "gpu.mlir").read_text()
    buffers = {tuple(int(n) for n in dims.split("x")) for dims in
               re.findall(r"memref.global \"private\" @__farm_shared_\d+ : memref<([\dx]+)xf32", gpu)}
    assert buffers == shared
    accumulator = f"vector<{thread[0]}x{thread[1]}xf32>"
    assert re.search(r"scf.for .* iter_args\(%\w+ = %\w+\) -> \(" + accumulator, gpu)
    assert "vector.mask" not in gpu
    launch = next(launch for launch, index in zip(LaunchConfig.from_json((job / "v1" / "config.json").read_text())
                                                   .launches, result.kernel_ops) if index == matmul.op_index)
    assert math.prod(launch.grid) == math.prod(math.ceil(r / b) for r, b in zip(op.loop_ranges, block) if b)
    ptx = (job / "v1" / "kernels.ptx").read_text()
    assert "ld.shared" in ptx and "st.shared" in ptx and ".local" not in ptx and "malloc" not in ptx


def test_scalar_kernels_over_rows_without_a_warp_multiple_divisor_take_aligned_blocks_the_last_partial(tmp_path):
    """Rows of 511 pooled outputs: the divisor template gave 73 threads along them (3 warps, a quarter of
    their lanes idle). v0 takes 64 x 4 threads per block, the grid covering each loop once, its last block
    partial, with no per-thread scratch. (The fill of the pooling's padded input, rows of 514, took 2 x 2 x 4
    channels per block, then 64 x 4 threads: it is one loop of 128-bit stores now.) The copy into the padded
    input, with the conv fused into it as its producer, keeps tiles that divide its loops (a partial tile of
    the conv's result would need scratch of dynamic size)."""
    job, params, config = compiled(tmp_path, "odd_maps")
    kernels = dict(zip(compile_result(job).kernel_ops, config.launches))
    (s,) = [s for s in params.ops if s.family == "pooling"]
    op = _op(job, s.op_index)
    assert s.block_tile[2:4] == [4, 64] and s.thread_tile[2:4] == [1, 1] and not s.vectorize, s
    assert op.loop_ranges[3] % 64  # a partial last block along each row
    launch = kernels[s.op_index]
    assert launch.block == [64, 4, 1]
    assert math.prod(launch.grid) == math.prod(math.ceil(r / b) for r, b in zip(op.loop_ranges, s.block_tile) if b)
    (fill,) = [s for s in params.ops if s.family == "fill"]
    assert len(_op(job, fill.op_index).loop_ranges) == 1 and fill.vectorize, fill
    (copy,) = [s for s in params.ops if _op(job, s.op_index).name == "linalg.copy"]
    assert not any(b and r % b for b, r in zip(copy.block_tile, _op(job, copy.op_index).loop_ranges)), copy
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert ".local" not in ptx and "malloc" not in ptx


def test_loops_too_short_for_a_blocks_threads_are_packed_into_full_blocks_the_last_partial(tmp_path):
    """A transpose with rows of 10 and 7 x 7 feature maps: x keeps the whole short row, then rows (or maps) of
    the next loop fill the block, the count that keeps the most lanes busy, the last block partial; each loop
    is covered once, with no per-thread scratch."""
    job, params, config = compiled(tmp_path, "short_inner_dims")
    kernels = dict(zip(compile_result(job).kernel_ops, config.launches))
    (transpose,) = [s for s in params.ops if _op(job, s.op_index).name == "linalg.transpose"]
    (swish,) = [s for s in params.ops if _op(job, s.op_index).loop_ranges == [2, 96, 7, 7]]
    for s, block, partial_loop in ((transpose, [10, 16, 1], 3), (swish, [7, 7, 5], 1)):
        op = _op(job, s.op_index)
        launch = kernels[s.op_index]
        assert launch.block == block, (s, launch)
        assert op.loop_ranges[partial_loop] % s.block_tile[partial_loop]
        assert math.prod(launch.grid) == math.prod(math.ceil(r / b) for r, b in zip(op.loop_ranges, s.block_tile) if b)
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert ".local" not in ptx and "malloc" not in ptx


def test_partial_scalar_tiles_are_refused_where_a_thread_would_need_scratch(tmp_path):
    """The copy's conv fused as its producer: a partial last block would give a thread's tile of the conv's
    result a dynamic size, so the compile stage refuses it with the reason."""
    job = tmp_path / "odd_maps"
    lower_model(str(BREADTH / "odd_maps.py"), str(job))
    params = initial_params(str(job))
    (copy,) = [s for s in params.ops if _op(job, s.op_index).name == "linalg.copy"]
    partial = apply_edit(params, ScheduleEdit(copy.op_index, "block_tile", [1, 1, 3, 96]))
    result = compile_iteration(str(job), 1, partial)
    assert not result.ok and result.stage == "schedule" and "not divided evenly" in result.error, result.error


def test_the_advisors_tile_edits_of_a_kernel_with_partial_blocks_compile(tmp_path):
    """The pooling's 64 x 4 blocks (partial along both loops): more_blocks halves a block tile and the kernel
    compiles; a register tile of 2 (no longer one output per thread) is not offered, as the compile stage
    would refuse it."""
    job, params, _ = compiled(tmp_path, "odd_maps")
    (pool,) = [s for s in params.ops if s.family == "pooling"]
    op = _op(job, pool.op_index)
    edit = GENERATORS["halve_block_tile"](pool, op, True, target(params.chip))
    assert edit is not None and edit.field == "block_tile"
    assert any(b and r % b for b, r in zip(edit.value, op.loop_ranges))  # still partial
    result = compile_iteration(str(job), 1, apply_edit(params, edit))
    assert result.ok, result.error
    assert GENERATORS["double_thread_tile"](pool, op, True, target(params.chip)) is None


def test_a_transposed_conv_and_a_padded_conv_run_through_img2col_with_register_tiles(tmp_path):
    """Both convs of padded_convs took one output per thread: the transposed one because its 34 x 34 pixels
    are no multiple of 64 (the matmul template's register tiles), the padded one because the copy into its
    padded input was fused into it (img2col fuses no producer). Now each is an img2col matmul whose template
    takes 8 channels x 2 pixels per thread (a run aligned to the 34-pixel rows), K steps of 9, which v0 cuts to
    2 x 2 on 8-channel blocks to fill the grid (img2col_filling_the_grid: at batch 2, 8 x 2 made 68 blocks);
    the padding copies and the flipped weights are kernels of their own; the padded conv's bias is added in
    its epilogue, not broadcast into its output first (convolution_decomposition)."""
    job, params, config = compiled(tmp_path, "padded_convs")
    convs = [s for s in params.ops if _op(job, s.op_index).name == "linalg.conv_2d_nchw_fchw"]
    assert len(convs) == 2
    for conv in convs:
        op = _op(job, conv.op_index)
        assert templates.img2col_schedule(op).thread_tile[1:3] == [8, 2]
        assert conv.img2col and conv.vectorize and conv.reduction_tile == 9, conv
        assert (conv.block_tile[1], conv.thread_tile[1:3]) == (8, [2, 2]), conv
        assert 34 % conv.thread_tile[2] == 0 and conv.block_tile[2] % 34 == 0  # whole rows per block
    assert len({_op(job, s.op_index).name for s in params.ops} & {"linalg.copy", "linalg.generic"}) == 2
    assert "linalg.broadcast" not in {_op(job, s.op_index).name for s in params.ops}
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert ".local" not in ptx and "malloc" not in ptx


def test_a_pads_fill_is_one_loop_over_the_padded_buffer_stored_in_128_bit_vectors(tmp_path):
    """Each padded input (the transposed conv's, padded by 2; the conv's, by 1) is filled, then its interior
    written: the fill ran over the 4-D padded shape, threads along rows of 36, one scalar store each.
    Flattened (pipeline.prepare), it is one loop over the whole buffer, each thread storing two 128-bit
    vectors."""
    job, params, config = compiled(tmp_path, "padded_convs")
    fills = [s for s in params.ops if s.family == "fill"]
    ptx = (job / "v0" / "kernels.ptx").read_text()
    assert sorted(_op(job, s.op_index).loop_ranges for s in fills) == [[2 * 16 * 36 * 36], [2 * 64 * 36 * 36]]
    for fill in fills:
        extent = _op(job, fill.op_index).loop_ranges[0]
        assert fill.vectorize and fill.thread_tile == [8], fill
        launch = next(l for l, i in zip(config.launches, compile_result(job).kernel_ops) if i == fill.op_index)
        body = re.search(rf"\.entry\s+{launch.kernel}\((.*?)\n\}}\n", ptx, re.S)[1]
        stores = re.findall(r"st\.global\S*", body)
        assert len(stores) == 2 and set(stores) == {"st.global.v4.b32"}, stores
        assert launch.block[0] * 8 * math.prod(launch.grid) == extent


def test_a_direct_convs_accumulator_stays_in_a_register_and_its_inputs_are_read_only(tmp_path):
    """The dilated conv (direct: one output per thread, 60 multiply-adds) stored its partial sum to global
    memory after every multiply-add, as its input and weights might have been the output's memory. Its
    buffer arguments are noalias now (farm-unaliased-kernel-pointers): one store per output, and the input
    and weights read through the non-coherent cache."""
    job, params, config = compiled(tmp_path, "dilated_conv")
    (conv,) = [s for s in params.ops if s.family == "conv"]
    launch = next(l for l, op in zip(config.launches, compile_result(job).kernel_ops) if op == conv.op_index)
    body = re.search(rf"\.entry\s+{launch.kernel}\((.*?)\n\}}\n", (job / "v0" / "kernels.ptx").read_text(), re.S)[1]
    assert body.count("fma.rn.f32") == 60 and len(re.findall(r"st\.global", body)) == 1
    assert len(re.findall(r"ld\.global\.nc", body)) == len(re.findall(r"ld\.global", body)) > 0


def test_a_loss_to_one_value_merges_its_partials_in_a_block(tmp_path):
    """An MSE over 2^20 elements keeps its split (one output: a block per output would leave the GPU idle),
    and its partials are merged by a block of threads (a warp's shuffles last), not by one thread."""
    model = tmp_path / "big_mse.py"
    model.write_text((BREADTH / "mse_loss.py").read_text().replace("torch.rand(64, 256), torch.rand(64, 256)",
                                                                   "torch.rand(1024, 1024), torch.rand(1024, 1024)"))
    lower_model(str(model), str(tmp_path / "big_mse"))
    params = initial_params(str(tmp_path / "big_mse"))
    (loss,) = [s for s in params.ops if s.split_reduction]
    assert loss.block_reduction >= 128 and loss.warp_merge and not any(loss.thread_tile)
    result = compile_iteration(str(tmp_path / "big_mse"), 0, params)
    assert result.ok, result.error
    config = LaunchConfig.from_json((tmp_path / "big_mse" / "v0" / "config.json").read_text())
    merge = config.launches[result.kernel_ops.index(loss.op_index) + 1]
    assert merge.grid == [1, 1, 1] and merge.block == [loss.block_reduction, 1, 1]


def test_attentions_softmax_is_a_row_kernel_over_its_4d_rows_and_its_row_sums_a_block_per_row(tmp_path):
    """Causal attention over 32 x 8 heads x 512 tokens (KernelBench level 3 #43 in small): exp(scores - max)
    is one row kernel of a block per [batch, head, row] (the masked scale and the max fused, the [1, 1, 512,
    512] mask a kernel of its own), 64 threads along the 512 columns; the row sums, which the division
    after the product with V reads (farm-scales-after-contractions), 131072 of them, a block reduction each:
    a thread per sum read 32 rows in each warp-wide access. Nothing spills."""
    model = tmp_path / "long_attention.py"
    model.write_text((BREADTH / "causal_attention.py").read_text().replace("256", "512").replace(
        "torch.randn(4, 4, 512, 64)", "torch.randn(32, 8, 512, 64)"))
    job = tmp_path / "long_attention"
    lower_model(str(model), str(job))
    params = initial_params(str(job))
    (row,) = [s for s in params.ops if s.row_kernel]
    assert (row.block_tile, row.row_kernel, row.warp_merge, row.interleave_columns) == ([1, 1, 1, 0], 64, True, True)
    (sums,) = [s for s in params.ops if s.block_reduction]
    assert (sums.block_tile, sums.block_reduction) == ([1, 1, 1, 0], 128)
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error
    config = LaunchConfig.from_json((job / "v0" / "config.json").read_text())
    launches = {op: launch for op, launch in zip(result.kernel_ops, config.launches)}
    assert (launches[row.op_index].grid, launches[row.op_index].block) == ([512, 8, 32], [64, 1, 1])
    assert (launches[sums.op_index].grid, launches[sums.op_index].block) == ([512, 8, 32], [128, 1, 1])
    done = subprocess.run([shutil.which("ptxas"), "-arch=sm_90a", "-v", str(job / "v0" / "kernels.ptx"), "-o",
                           os.devnull], capture_output=True, text=True, check=True)
    assert not re.search(r"[1-9]\d* bytes spill", done.stderr), done.stderr


def test_sdpa_is_two_matmuls_around_one_row_kernel(tmp_path):
    """scaled_dot_product_attention: its queries' and keys' constant scale after the scores' contraction
    (farm-scales-after-contractions), the masked probabilities apart from the product with V
    (farm-contraction-operands-apart), so both products are matmuls, and the scale, softmax, check for
    rows of -inf and mask are one row kernel. The scale op's three readers in that kernel tile last to first in
    the block's order (_block_order): fused first into the check's forall, which comes before the exponentials,
    it was yielded by it and its next fusion failed."""
    _, params, _ = compiled(tmp_path, "sdpa")
    assert [s.family for s in params.ops] == ["copy", "matmul", "reduction", "matmul"]
    (row,) = [s for s in params.ops if s.row_kernel]
    assert row.block_tile == [1, 1, 1, 0]


def test_a_row_op_that_something_outside_the_row_kernel_also_reads_is_no_member(tmp_path):
    """LayerNorm's output y feeds y - mean(y) and, through a reshape, the model's second output (SwinMLP's
    norm, then the next norm and the residual): as a member of the row kernel it was fused twice (once for the
    kernel, once for the reshape's use), which broke the kernel's fusion. It is the anchor of the LayerNorm's
    row kernel, which y - mean(y)'s row kernel reads."""
    model = tmp_path / "norm_read_twice.py"
    model.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                     "    def __init__(self):\n        super().__init__()\n        self.norm = nn.LayerNorm(96)\n\n"
                     "    def forward(self, x):\n        y = self.norm(x)\n"
                     "        return y - y.mean(-1, keepdim=True), y.reshape(16, 256 * 96)\n\n\n"
                     "def get_inputs():\n    return [torch.randn(16, 256, 96)]\n\n\n"
                     "def get_init_inputs():\n    return []\n")
    job = tmp_path / "norm_read_twice"
    lower_model(str(model), str(job))
    params = initial_params(str(job))
    assert len([s for s in params.ops if s.row_kernel]) == 2 and len(params.ops) == 2
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error


def test_a_groupnorm_over_large_groups_keeps_every_op_in_a_kernel(tmp_path):
    """GroupNorm over 8 groups of 2^18 elements (KernelBench level 2 #61 in small): both statistics split
    and merge in blocks; the centred values that the variance reads keep a kernel of their own (a split's
    partial kernel cannot fuse them), where a block reduction would have recomputed them in place."""
    model = tmp_path / "wide_groups.py"
    model.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                     "    def __init__(self):\n        super().__init__()\n        self.norm = nn.GroupNorm(4, 8)\n\n"
                     "    def forward(self, x):\n        return self.norm(torch.relu(x))\n\n\n"
                     "def get_inputs():\n    return [torch.randn(2, 8, 16, 64, 64)]\n\n\n"
                     "def get_init_inputs():\n    return []\n")
    lower_model(str(model), str(tmp_path / "wide_groups"))
    params = initial_params(str(tmp_path / "wide_groups"))
    merges = [s for s in params.ops if s.split_reduction and s.block_reduction]
    assert len(merges) == 2, params.ops
    result = compile_iteration(str(tmp_path / "wide_groups"), 0, params)
    assert result.ok, result.error


def test_a_topk_past_its_rounds_takes_the_first_k_of_the_rows_sort():
    """k = 100 would be 100 reductions over the row (it was refused): the sort's first k, as torch's topk
    gives them (values; indices where the values are distinct), largest or smallest."""
    torch.manual_seed(0)
    x = torch.randn(8, 1000)
    for largest in (True, False):
        values, indices = topk_decomposition(x, 100, 1, largest)
        expected = torch.topk(x, 100, dim=1, largest=largest)
        assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)


def test_an_op_only_torch_mlirs_own_dialect_holds_is_refused_by_name(tmp_path):
    with pytest.raises(FrontendError, match="lowered part of the model to tm_tensor.scatter"):
        lower_model(str(BREADTH / "index_assign_2d.py"), str(tmp_path / "index_assign_2d"))


def test_a_sort_past_its_row_limit_is_refused_with_the_reason(tmp_path):
    model = tmp_path / "huge_sort.py"
    model.write_text((BREADTH / "sort.py").read_text().replace("randn(16, 100)", "randn(2, 200000)")
                     .replace("randn(16, 100, 8)", "randn(2, 200000, 8)"))
    with pytest.raises(FrontendError, match="a sort of rows of 200000 takes a pass over the rows per step of a "
                                            "bitonic sort here, past the 131072"):
        lower_model(str(model), str(tmp_path / "huge_sort"))


@pytest.mark.parametrize("shape, dim", [((3, 5000), 1), ((2, 4097, 3), 1), ((9000,), 0)])
def test_a_long_row_sorts_by_a_bitonic_network_as_torch_sorts_it(shape, dim):
    """Past RANK_SORT_MAX: stable (ties by position, integers), NaN as the largest, either direction, rows
    padded to a power of two whose padding is cut off."""
    torch.manual_seed(0)
    for kind in ("float", "nan", "int"):
        x = torch.randint(0, 50, shape) if kind == "int" else torch.randn(*shape)
        if kind == "nan":
            x[x > 1.5] = float("nan")
        for descending in (False, True):
            values, indices = sort_decomposition(x, dim, descending)
            expected = torch.sort(x, stable=True, dim=dim, descending=descending)
            assert torch.equal(indices, expected.indices)
            assert torch.allclose(values, expected.values, equal_nan=True)


def test_a_bitonic_sort_lowers_to_what_torch_computes(tmp_path, monkeypatch):
    """The network's lowering run on the CPU (rows of 20 made to take it: a row past 4096 makes a module the
    CPU reference takes minutes over) gives torch's sorted values and order."""
    from tests.cpu_reference import run_linalg
    from workers import decompositions
    from workers.model_loader import load_model

    monkeypatch.setattr(decompositions, "RANK_SORT_MAX", 8)
    model = tmp_path / "sort40.py"
    model.write_text((BREADTH / "long_sort.py").read_text().replace("randn(4, 6000)", "randn(3, 20)"))
    info = lower_model(str(model), str(tmp_path / "sort40"))
    module, inputs = load_model(str(model), info.seed)
    got = run_linalg((tmp_path / "sort40" / "model_linalg.mlir").read_text(), inputs, info.output_shapes)
    with torch.no_grad():
        want = module(*inputs)
    assert abs(got[0] - want[0].numpy()).max() < 1e-6 and (got[1] == want[1].numpy()).all()


def test_a_small_bf16_matmul_stages_its_tensor_core_tiles(tmp_path):
    """convert-vector-to-gpu has no bf16 fragments: a bf16 mma.sync kernel reading its operands from global
    memory failed the conversion (64 rows: too few for v0's larger staged tiles); v0 takes a small staged
    tile, and a schedule without promote_shared is refused before any transform runs."""
    job, params, _ = compiled(tmp_path, "bf16_linear_gelu")
    (matmul,) = [s for s in params.ops if s.tensor_core != "none"]
    assert matmul.tensor_core == "mma_sync" and matmul.promote_shared
    matmul.promote_shared = False
    result = compile_iteration(str(job), 1, params)
    assert not result.ok and result.stage == "schedule" and "needs promote_shared" in result.error


def test_an_output_that_is_a_strided_view_is_copied_by_a_kernel(tmp_path):
    """The relu's kernel writes the whole tensor; a second kernel copies the slice into the output's own
    buffer (which nothing but it writes)."""
    job, _, config = compiled(tmp_path, "returns_a_slice")
    (output,) = config.outputs
    writers = [launch for launch in config.launches if output.buffer in [a.buffer for a in launch.args]]
    assert output.shape == [16, 64] and len(config.launches) == 2 and writers == config.launches[1:]


def test_a_non_splat_constant_reaches_the_launch_config_with_its_values(tmp_path):
    """torch-mlir writes it as dense_resource<blob>, which the frontend inlines as dense<"0x...">."""
    job, _, config = compiled(tmp_path, "constant_table")
    assert "dense_resource" not in (job / "model_linalg.mlir").read_text()
    assert [b.values for b in config.buffers if b.role == "constant"] == [[0.5, 2.0, -1.0, 4.0]]


def test_a_hidden_state_kept_as_a_plain_tensor_is_lifted_like_a_weight(tmp_path):
    """forward writes it (copy_, then a new tensor): torch.export refused it as a mutated constant."""
    job, _, config = compiled(tmp_path, "stateful_rnn")
    assert "hidden" in json.loads((job / "model_info.json").read_text())["weight_names"]
    assert "weight:hidden" in [b.source for b in config.buffers]


def test_v0_takes_warp_merge_only_where_the_threads_are_whole_warps(tmp_path):
    job, params, _ = compiled(tmp_path, "odd_row_norm")
    rows = [s for s in params.ops if s.row_kernel]
    assert rows and rows[0].row_kernel % 32 and not rows[0].warp_merge
    forced = params.ops.copy()
    forced[forced.index(rows[0])] = OpSchedule.from_dict({**rows[0].to_dict(), "warp_merge": True})
    result = compile_iteration(str(job), 1, type(params).from_dict({**params.to_dict(), "ops": [s.to_dict()
                                                                                             for s in forced]}))
    assert not result.ok and result.stage == "schedule" and "to be whole warps" in result.error


def test_an_odd_rows_threads_read_neighbouring_columns_one_element_at_a_time(tmp_path):
    """Rows of 1155 f32 in 105 threads of 11 columns each, no whole 128-bit vectors: each of x's 11 loads
    and y's 11 stores still interleaved (interleave_lanes 1), a warp reading 32 neighbouring columns, thread
    t's at t, t + 105, ...: 420 bytes apart, where each thread's own run of 11 neighbours left a warp's
    access spread over 32 runs."""
    job, params, _ = compiled(tmp_path, "odd_row_norm")
    assert [s.interleave_columns for s in params.ops if s.row_kernel] == [True]
    ptx = (job / "v0" / "kernels.ptx").read_text()
    for op in ("ld.global.nc.b32", "st.global.b32"):
        offsets = sorted(int(o or 0) for o in re.findall(rf"{re.escape(op)}\s+[^\[]*\[%rd\d+(?:\+(\d+))?\]", ptx))
        assert offsets == [j * 105 * 4 for j in range(11)], (op, offsets)


def test_a_lowering_past_its_memory_limit_is_stopped_with_that_reason(tmp_path):
    with pytest.raises(FrontendError, match="more than its 1 GB memory limit"):
        lower_model_bounded(str(BREADTH / "huge_init.py"), str(tmp_path / "huge"), limits=LoweringLimits(memory_gb=1))


def test_a_lowering_past_its_time_limit_is_stopped_with_that_reason(tmp_path):
    with pytest.raises(FrontendError, match="ran past its limit of 2 s"):
        lower_model_bounded(str(BREADTH / "group_norm.py"), str(tmp_path / "slow"), limits=LoweringLimits(seconds=2))


GPU_DATA = Path(__file__).parent / "data" / "measure" / "breadth"


@pytest.mark.parametrize("name", sorted(p.name for p in GPU_DATA.iterdir()))
def test_the_gpu_tests_breadth_kernels_are_what_the_compile_stage_makes(tmp_path, name):
    """test_measure_gpu.py runs tests/data/measure/breadth/<model> on the GPU (no torch-mlir there): after a
    change to what these models compile to, copy the new v0's config.json and kernels.ptx there (and run
    that test on the GPU node)."""
    job, _, _ = compiled(tmp_path, name)
    for file in ("config.json", "kernels.ptx"):
        assert (job / "v0" / file).read_text() == (GPU_DATA / name / file).read_text(), f"{job / 'v0' / file} changed"


def test_the_worst_input_draw_decides_each_output():
    ok = OutputError("out", 1e-6, 1e-6, True)
    wrong = OutputError("out", 0.5, 0.5, False)
    larger = OutputError("out", 1e-5, 1e-5, True)
    assert worst_of_draws([[ok], [wrong], [larger]]) == [wrong]
    assert worst_of_draws([[ok], [larger]]) == [larger]


def test_a_scalar_read_out_with_item_becomes_an_operand_of_the_op_that_uses_it(tmp_path):
    """x / x.abs().max().item(): the maximum's tensor.extract was read on the host (the host check refused
    it); as an input of the division, read through a map of no results, both ops are kernels."""
    job, _, config = compiled(tmp_path, "item_scale")
    assert len(config.launches) == 2
    src = """#map = affine_map<(d0) -> (d0)>
    module {
      func.func @forward(%x: tensor<8xf32>, %s: tensor<1x1xf32>) -> tensor<8xf32> {
        %c0 = arith.constant 0 : index
        %v = tensor.extract %s[%c0, %c0] : tensor<1x1xf32>
        %e = tensor.empty() : tensor<8xf32>
        %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
        ^bb0(%in: f32, %out: f32):
          %d = arith.divf %in, %v : f32
          linalg.yield %d : f32
        } -> tensor<8xf32>
        return %r : tensor<8xf32>
      }
    }"""
    text = after_pass(src, extracted_scalars.NAME)
    assert "tensor.extract" not in text
    assert "ins(%arg0, %arg1 : tensor<8xf32>, tensor<1x1xf32>)" in text and "affine_map<(d0) -> (0, 0)>" in text
    assert re.search(r"\^bb0\(%in: f32, %in_\d+: f32, %out: f32\):\s*%\d+ = arith.divf %in, %in_\d+", text), text


@pytest.mark.parametrize("name, says", [
    ("masked_select", r"aten.index.Tensor makes a tensor of shape \[u0\], which depends on the input's values "
                      r"\(masked_select.py:\d+: return x\[x > 0\]\)"),
    ("value_branch", r"forward decides in Python on a tensor's value \(value_branch.py:\d+: if x.sum\(\) > 0:\)")])
def test_shapes_and_branches_that_depend_on_values_are_refused_at_once_naming_the_line(tmp_path, name, says):
    """x[mask]'s lowering grew past 17 GB in two minutes; an `if` on a value raised torch's guard error."""
    start = time.monotonic()
    with pytest.raises(FrontendError, match=says):
        lower_model(str(BREADTH / f"{name}.py"), str(tmp_path / name))
    assert time.monotonic() - start < 60


def test_a_fill_shared_by_a_sum_and_an_argmax_becomes_one_fill_each(tmp_path):
    """(x > 0).sum(1) and x.argmax(1): CSE made one zeros fill the init of the integer sum and of the argmax's
    index; the pair's kernel took no fill it shared, and the host check found it left on the host."""
    job, params, config = compiled(tmp_path, "count_and_argmax")
    with mlir.context():
        module = mlir.parse((job / "model_linalg.mlir").read_text(), "model_linalg.mlir")
        for step in PassPipeline.from_text((job / "v0" / "pass_pipeline.txt").read_text()).before_schedule():
            registry.run_step(step, module)
        fills = mlir.ops_named(module.operation, "linalg.fill")
        assert all(len(list(f.results[0].uses)) == 1 for f in fills), "every fill initialises one op"
    assert {s.family for s in params.ops} >= {"reduction"} and len(config.launches) >= 2


def test_the_unit_loop_in_front_of_a_scalar_reduction_keeps_its_loop_index_on_its_own_loop():
    """cross_entropy's mean gathers predictions[i, target[i]] at its loop index i; farm-scalar-unit-loop put
    a unit loop in front and left `linalg.index 0` naming it, so every row read row 0's score (KernelBench
    level1/95 was wrong by 0.0097 on the H100)."""
    src = """#in = affine_map<(d0) -> (d0)>
    #out = affine_map<(d0) -> ()>
    module {
      func.func @forward(%p: tensor<8x4xf32>, %t: tensor<8xindex>) -> tensor<f32> {
        %zero = arith.constant 0.0 : f32
        %e = tensor.empty() : tensor<f32>
        %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
        %r = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction"]} ins(%t : tensor<8xindex>) outs(%init : tensor<f32>) {
        ^bb0(%target: index, %acc: f32):
          %row = linalg.index 0 : index
          %score = tensor.extract %p[%row, %target] : tensor<8x4xf32>
          %sum = arith.addf %score, %acc : f32
          linalg.yield %sum : f32
        } -> tensor<f32>
        return %r : tensor<f32>
      }
    }"""
    text = after_pass(src, scalar_unit_loop.NAME)
    assert 'iterator_types = ["parallel", "reduction"]' in text
    assert re.search(r"(%\d+) = linalg.index 1 : index\s*%extracted = tensor.extract %arg0\[\1, %in\]", text), text


def test_a_reduction_that_reads_its_loop_index_reduces_in_a_block_and_refuses_a_split(tmp_path):
    """structured.split_reduction reshapes the reduction loop without renumbering linalg.index, so such a
    mean (cross_entropy's over 8192 rows) takes a block reduction, whose tile_reduction_using_forall offsets
    each thread's index, and a split of it is refused."""
    model = tmp_path / "cross_entropy_8192.py"
    model.write_text((BREADTH / "cross_entropy.py").read_text().replace("randn(64, 40)", "randn(8192, 40)")
                     .replace("(64,)", "(8192,)"))
    job = tmp_path / "job"
    lower_model(str(model), str(job))
    params = initial_params(str(job))
    info = json.loads((job / "model_info.json").read_text())
    gathering = [s for s in params.ops if s.block_reduction and s.op_index == len(info["ops"]) - 2]
    assert gathering and not gathering[0].split_reduction, params.ops
    gathering[0].block_reduction, gathering[0].split_reduction = 0, 64
    gathering[0].warp_merge = gathering[0].interleave_columns = gathering[0].vectorize = False
    result = compile_iteration(str(job), 0, params)
    assert not result.ok and "does not renumber linalg.index" in result.error


def _lifetimes(config: LaunchConfig) -> dict[str, tuple[int, int]]:
    uses: dict[str, list[int]] = {}
    for i, launch in enumerate(config.launches):
        for arg in launch.args:
            if arg.buffer is not None:
                uses.setdefault(arg.buffer, []).append(i)
    return {name: (min(at), max(at)) for name, at in uses.items()}


def test_a_scans_temporaries_share_the_memory_of_those_dead_by_then(tmp_path):
    """A log-step scan makes a temporary per step (level1/89_cumsum asked the GPU for 76 GB of them): each
    lives in the memory of one no later launch uses, never beside another of one launch, never in a
    smaller one."""
    _, _, config = compiled(tmp_path, "cumsum_reverse")
    buffers = {b.name: b for b in config.buffers}
    temporaries = [b for b in config.buffers if b.role == "temporary"]
    shared = [b for b in temporaries if b.storage is not None]
    assert len(shared) >= len(temporaries) // 2, [(b.name, b.storage) for b in temporaries]
    lifetimes = _lifetimes(config)
    for owner in {b.storage for b in shared}:
        assert buffers[owner].role == "temporary" and buffers[owner].storage is None
        tenants = sorted([owner] + [b.name for b in shared if b.storage == owner], key=lambda n: lifetimes[n])
        assert all(lifetimes[a][1] < lifetimes[b][0] for a, b in zip(tenants, tenants[1:])), tenants
        assert all(buffers[t].size_bytes() <= buffers[owner].size_bytes() for t in tenants)


@pytest.mark.parametrize("name", ["masked_cumsum", "cross_entropy"])
def test_bool_buffers_are_bytes_in_every_kernel(tmp_path, name):
    """torch keeps a byte per bool; LLVM read a vector<4xi1> of a mask as bits 0-3 of one byte (level1/93
    wrong on the H100) and merged a block's 32 mask loads into one 32-bit popcount. After
    farm-bool-memory-as-bytes no memref of i1 is left, host or kernel; config.json still says i1 (torch's
    bool buffers)."""
    job, _, config = compiled(tmp_path, name)
    gpu = (job / "v0" / "gpu.mlir").read_text()
    assert not re.search(r"memref<[^>]*xi1[,>]", gpu) and re.search(r"memref<[^>]*xi8[,>]", gpu)
    assert any(b.dtype == "i1" for b in config.buffers)
    assert "popc" not in (job / "v0" / "kernels.ptx").read_text()


def test_the_bool_memory_pass_alone_reads_and_writes_bytes():
    src = """func.func @f(%m: memref<8xi1>, %o: memref<8xi1>) {
      %c0 = arith.constant 0 : index
      %false = arith.constant false
      %v = vector.transfer_read %m[%c0], %false {in_bounds = [true]} : memref<8xi1>, vector<8xi1>
      vector.store %v, %o[%c0] : memref<8xi1>, vector<8xi1>
      %s = memref.load %m[%c0] : memref<8xi1>
      memref.store %s, %o[%c0] : memref<8xi1>
      %rows = arith.constant dense<[7, 0, 3, 3]> : vector<4xindex>
      %all = arith.constant dense<true> : vector<4xi1>
      %none = arith.constant dense<false> : vector<4xi1>
      %g = vector.gather %m[%c0] [%rows], %all, %none : memref<8xi1>, vector<4xindex>, vector<4xi1>, vector<4xi1> into vector<4xi1>
      vector.scatter %o[%c0] [%rows], %all, %g : memref<8xi1>, vector<4xindex>, vector<4xi1>, vector<4xi1>
      return
    }"""
    text = after_pass(src, bool_bytes.NAME)
    assert not re.search(r"memref<\d+xi1>", text) and "(%arg0: memref<8xi8>, %arg1: memref<8xi8>)" in text
    # reads: the transfer, the load, the gather; extended: the padding, the pass_thru and the three stored values
    assert text.count("arith.trunci") == 3 and text.count("arith.extui") == 5


def test_a_constant_mask_and_a_global_scratch_of_bools_are_stored_as_bytes_too():
    """The scratch: a block's shared bools (an f16 causal attention's mask partials), a global of no value."""
    src = """module {
      memref.global "private" constant @mask : memref<4xi1> = dense<[true, false, true, true]>
      memref.global "private" @scratch : memref<4xi1>
      func.func @f(%o: memref<4xi1>) {
        %m = memref.get_global @mask : memref<4xi1>
        %scratch = memref.get_global @scratch : memref<4xi1>
        %c1 = arith.constant 1 : index
        %s = memref.load %m[%c1] : memref<4xi1>
        memref.store %s, %scratch[%c1] : memref<4xi1>
        memref.store %s, %o[%c1] : memref<4xi1>
        return
      }
    }"""
    text = after_pass(src, bool_bytes.NAME)
    assert "memref<4xi8> = dense<[1, 0, 1, 1]>" in text and "@scratch : memref<4xi8>" in text and "xi1>" not in text


@pytest.mark.parametrize("dims, kernel, stride, padding, dilation, output_padding, groups", [
    (1, 3, 2, 1, 2, 0, 1), (1, 5, 3, 2, 1, 2, 2), (2, 3, 2, 1, 1, 1, 1), (2, 4, 2, 1, 1, 0, 1),
    (2, (3, 5), (2, 3), (1, 2), (2, 1), 0, 4), (2, 3, 5, 1, 2, 0, 1), (2, 1, 3, 0, 1, 2, 1),
    (3, 3, 2, 1, 1, 1, 2), (3, (3, 5, 7), 2, (1, 2, 3), 1, 1, 4), (3, 5, 2, 2, 1, 0, 1), (3, 3, 2, 1, 2, 0, 1)])
def test_a_strided_transposed_conv_is_one_conv_per_output_phase(dims, kernel, stride, padding, dilation,
                                                                 output_padding, groups):
    """Against torch in float64, with and without a bias: phases of fewer taps than others, phases no tap
    reaches (a dilation sharing a factor with the stride, a kernel smaller than the stride), groups, output
    padding, asymmetric kernels and strides."""
    spread = lambda v: list(v) if isinstance(v, tuple) else [v] * dims  # noqa: E731
    kernel, stride, padding, dilation, output_padding = map(spread, (kernel, stride, padding, dilation, output_padding))
    x = torch.randn(2, 2 * groups, *[5 + i for i in range(dims)], dtype=torch.float64)
    weight = torch.randn(2 * groups, 3, *kernel, dtype=torch.float64)
    for bias in (None, torch.randn(3 * groups, dtype=torch.float64)):
        want = torch.ops.aten.convolution(x, weight, bias, stride, padding, dilation, True, output_padding, groups)
        got = conv_transpose_decomposition(x, weight, bias, stride, padding, dilation, True, output_padding, groups)
        assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-12, atol=1e-12)



@pytest.mark.parametrize("dims, kernel, stride, padding, dilation, transposed", [
    (1, 3, 1, 1, 1, False), (1, 5, 3, 0, 1, False), (3, 3, 1, 1, 1, False), (3, (3, 5, 7), (2, 1, 2), (1, 2, 3),
                                                                            (2, 1, 1), False),
    (3, (3, 3, 1), 1, 0, 1, False), (3, 3, 1, (1, 0, 2), 1, True), (1, 5, 1, 2, 1, True)])
def test_1d_and_3d_convs_of_64_channels_are_2d_convs(dims, kernel, stride, padding, dilation, transposed):
    """Against torch in float64, with and without a bias: strides, paddings and a dilation along the depth (the
    stacked input's), asymmetric kernels, stride-1 transposed convs."""
    spread = lambda v: list(v) if isinstance(v, tuple) else [v] * dims  # noqa: E731
    kernel, stride, padding, dilation = map(spread, (kernel, stride, padding, dilation))
    x = torch.randn(2, 3, *[7 + i for i in range(dims)], dtype=torch.float64)
    weight = torch.randn(*((3, 64) if transposed else (64, 3)), *kernel, dtype=torch.float64)
    for bias in (None, torch.randn(64, dtype=torch.float64)):
        args = (x, weight, bias, stride, padding, dilation, transposed, [0] * dims, 1)
        got, want = convolution_decomposition(*args), torch.ops.aten.convolution(*args)
        assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("transposed", [False, True])
def test_a_2d_conv_that_takes_img2col_adds_its_bias_after_it(transposed):
    """Against torch in float64: the bias, the conv's init as torch-mlir lowers it, would be a broadcast kernel
    of its own that img2col's matmul reads back (it fuses no producer); added after the conv, it joins the
    elementwise epilogue. A conv of too few channels for img2col keeps it (a direct conv computes its init)."""
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64)
    for channels, decomposed in ((64, True), (16, False)):
        weight = torch.randn(*((3, channels) if transposed else (channels, 3)), 3, 3, dtype=torch.float64)
        args = (x, weight, torch.randn(channels, dtype=torch.float64), [1, 1], [1, 0], [1, 1], transposed, [0, 0], 1)
        got = convolution_decomposition(*args)
        assert (got is not NotImplemented) == decomposed
        if decomposed:
            assert torch.allclose(got, torch.ops.aten.convolution(*args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dims, out_channels, dilation, groups, transposed", [
    (2, 64, 1, 1, False), (2, 64, 1, 1, True), (3, 16, 1, 1, False), (3, 64, 2, 1, False), (3, 64, 1, 2, False),
    (1, 32, 1, 1, True), (3, 100, 1, 1, False)])
def test_other_convs_are_left_to_torch_mlir(dims, out_channels, dilation, groups, transposed):
    """2-D convs and 2-D transposed convs of stride 1 without a bias; 1-D and 3-D ones that would stay direct as
    2-D convs (too few output channels or no multiple of 8, dilated along the 2-D conv's dims, grouped)."""
    x = torch.randn(1, 4, *[6] * dims)
    weight = torch.randn(*((4, out_channels // groups) if transposed else (out_channels, 4 // groups)), *[3] * dims)
    assert convolution_decomposition(x, weight, None, [1] * dims, [0] * dims, [dilation] * dims, transposed,
                                     [0] * dims, groups) is NotImplemented


def test_strided_transposed_convs_lower_without_zeros_inserted_and_compute_what_torch_does(tmp_path):
    """torch-mlir inserted s - 1 zeros between the input's elements (a strided insert_slice) and ran the whole
    kernel over them; as phases, each conv's taps reach inputs only. The lowering run on the CPU gives
    torch's outputs, and every kernel runs on the GPU (the 1-D conv's untapped phases are fills, not host
    constants: farm-splat-constants-as-fills)."""
    from tests.cpu_reference import lowering_and_model_outputs

    job, _, config = compiled(tmp_path, "strided_transposed_convs")
    text = (job / "model_linalg.mlir").read_text()
    assert not re.search(r"insert_slice .*\] \[[\d, ]*\] \[[\d, ]*[2-9]", text)  # no strided insert
    assert len(re.findall(r"linalg\.conv_2d_nchw_fchw", text)) == 4
    got, want = lowering_and_model_outputs(job, BREADTH / "strided_transposed_convs.py")
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape) and abs(g - w.numpy()).max() < 1e-4


def test_a_large_splat_constant_becomes_a_fill():
    """A splat past host.MAX_CONSTANT_ELEMENTS read as data (a concat's piece) is a fill the schedule runs;
    a small one stays a constant (it travels in config.json)."""
    from workers.compile.passes import splat_fills

    src = """module {
      func.func @forward(%x: tensor<300x300xf32>) -> (tensor<600x300xf32>, tensor<4x300xf32>) {
        %z = arith.constant dense<0.000000e+00> : tensor<300x300xf32>
        %s = arith.constant dense<1.500000e+00> : tensor<2x300xf32>
        %c = tensor.concat dim(0) %x, %z : (tensor<300x300xf32>, tensor<300x300xf32>) -> tensor<600x300xf32>
        %x2 = tensor.extract_slice %x[0, 0] [2, 300] [1, 1] : tensor<300x300xf32> to tensor<2x300xf32>
        %d = tensor.concat dim(0) %x2, %s : (tensor<2x300xf32>, tensor<2x300xf32>) -> tensor<4x300xf32>
        return %c, %d : tensor<600x300xf32>, tensor<4x300xf32>
      }
    }"""
    text = after_pass(src, splat_fills.NAME)
    assert "dense<0.000000e+00> : tensor<300x300xf32>" not in text
    assert re.search(r"linalg.fill ins\(%cst\w* : f32\) outs\(%\d+ : tensor<300x300xf32>\)", text), text
    assert "dense<1.500000e+00> : tensor<2x300xf32>" in text


def test_an_assignment_at_integer_indices_lowers_to_what_torch_computes(tmp_path):
    """x[rows] = values, x[:, cols] = 0.5 and x[rows, cols] = -1 (a negative row among them), run on the CPU
    from the lowering."""
    from tests.cpu_reference import run_linalg
    from workers.model_loader import load_model

    info = lower_model(str(BREADTH / "index_assign.py"), str(tmp_path / "index_assign"))
    model, inputs = load_model(str(BREADTH / "index_assign.py"), info.seed)
    got = run_linalg((tmp_path / "index_assign" / "model_linalg.mlir").read_text(), inputs, info.output_shapes)
    with torch.no_grad():
        assert abs(got[0] - model(*inputs).numpy()).max() == 0
