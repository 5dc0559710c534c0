"""Structure of v0 for memory-bound models (elementwise chains, softmax, layernorm, row reductions):
128-bit loads and stores in elementwise kernels, row reductions as one kernel each (a block per row,
producers fused) or a softmax-like row pipeline as one row kernel, reduction accumulators in registers
(no store to global memory inside a loop),
kernel counts and launch shapes; and of the split reductions (partial and merge kernels) that v0 used
before. Real torch-mlir, MLIR and ptxas."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workers.compile import compile_iteration, mlir
from workers.compile.passes import interleave_columns, reuse_reads
from workers.compile.analysis import analyze
from workers.compile.schedule import initial_params_for
from workers.compile.schedule.emission import MERGE_THREADS
from workers.compile.schedule.templates import ELEMENTWISE_VECTORS
from workers.frontend import lower_model

ROOT = Path(__file__).parent.parent
MODELS = {
    "elementwise_large": ROOT / "benchmarks" / "models" / "elementwise_large.py",
    "softmax_large": ROOT / "benchmarks" / "models" / "softmax_large.py",
    "layernorm_large": ROOT / "benchmarks" / "models" / "layernorm_large.py",
    "reduce_sum_large": ROOT / "benchmarks" / "models" / "reduce_sum_large.py",
    "softmax": ROOT / "tests" / "data" / "zoo" / "softmax.py",
    "reduce_mean": ROOT / "tests" / "data" / "zoo" / "reduce_mean.py",
    "elementwise_chain": ROOT / "tests" / "data" / "zoo" / "elementwise_chain.py",
    "rownorm_f64": ROOT / "tests" / "data" / "models" / "rownorm_f64.py",
    "weighted_row_sum": ROOT / "tests" / "data" / "models" / "weighted_row_sum.py",
    "long_softmax": ROOT / "tests" / "data" / "breadth" / "long_softmax.py",
}
H200_SMS = 132


def _compile_all(out: Path, names, reductions: str) -> dict:
    jobs = {}
    for name in names:
        job = out / name
        lower_model(str(MODELS[name]), str(job))
        facts = analyze((job / "model_linalg.mlir").read_text())
        params = initial_params_for(facts, reductions=reductions)
        result = compile_iteration(str(job), 0, params)
        assert result.ok, f"{name}: {result.stage}: {result.error}"
        config = json.loads((job / "v0" / "config.json").read_text())
        jobs[name] = (result, config, kernels_of((job / "v0" / "kernels.ptx").read_text()), params)
    return jobs


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """v0 of every model."""
    return _compile_all(tmp_path_factory.mktemp("memory_bound"), MODELS, "block")


@pytest.fixture(scope="module")
def split_compiled(tmp_path_factory):
    """v0 with split row reductions instead of block reductions."""
    return _compile_all(tmp_path_factory.mktemp("memory_bound_split"),
                        ["softmax_large", "reduce_sum_large", "softmax", "reduce_mean"], "split")


@pytest.fixture(scope="module")
def row_compiled(tmp_path_factory):
    """v0 with row pipelines (softmax, layernorm, an f64 row norm) in one kernel each."""
    return _compile_all(tmp_path_factory.mktemp("memory_bound_rows"),
                        ["softmax_large", "layernorm_large", "softmax", "reduce_sum_large", "rownorm_f64"], "rows")


def kernels_of(ptx: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"\.entry\s+(\w+)\((.*?)\n\}\n", ptx, re.S)}


def loop_bodies(body: str) -> list[str]:
    """The instructions between each label and a later branch back to it."""
    lines = body.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\$L\w+):", line))}
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L\w+);", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append("\n".join(lines[labels[m.group(1)]:i]))
    return loops


# a global access's cache operator, where the kernel has one: .nc (read-only loads)
CACHE_OPERATOR = r"(?:\.nc)?"


def vector_loads(body: str) -> int:
    return len(re.findall(rf"ld\.global{CACHE_OPERATOR}\.v4\.(?:b32|f32)", body))


def vector_stores(body: str) -> int:
    return len(re.findall(r"st\.global\.v4\.(?:b32|f32)", body))


def vector_loads(body: str) -> int:
    """128-bit global loads, through the non-coherent cache (a read-only noalias buffer) or not."""
    return len(re.findall(r"ld\.global(?:\.nc)?\.v4", body))


def scalar_accesses(body: str) -> int:
    return len(re.findall(rf"(?:ld|st)\.global{CACHE_OPERATOR}\.(?:b32|f32)\b", body))


def test_elementwise_chain_is_one_kernel_of_128_bit_accesses_over_many_waves(compiled):
    result, config, kernels, _ = compiled["elementwise_large"]
    assert result.kernel_count == 1
    (launch,) = config["launches"]
    threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
    blocks = launch["grid"][0] * launch["grid"][1] * launch["grid"][2]
    assert threads == 128
    # two 128-bit vectors (8 f32) per thread, many waves of the H200's 132 SMs (16 blocks of 128 each)
    assert threads * blocks * 4 * ELEMENTWISE_VECTORS == 8192 * 8192 and blocks >= 16 * H200_SMS * 4
    body = kernels[launch["kernel"]]
    assert vector_loads(body) == vector_stores(body) == ELEMENTWISE_VECTORS and scalar_accesses(body) == 0
    # a thread's vectors in neighbouring rows (8192 f32 apart): a warp-wide access covers 512 bytes of a row
    assert launch["block"] == [64, 2, 1] and _access_offsets(body) == [[0, 8192 * 4]] * 2


def test_small_elementwise_chain_also_vectorizes(compiled):
    result, _, kernels, _ = compiled["elementwise_chain"]
    assert result.kernel_count == 1
    (body,) = kernels.values()
    assert vector_loads(body) >= 1 and vector_stores(body) >= 1


@pytest.mark.parametrize("name", ["elementwise_large", "softmax_large", "layernorm_large", "reduce_sum_large"])
def test_kernel_pointers_are_16_byte_aligned(compiled, name):
    result, config, kernels, _ = compiled[name]
    for launch in config["launches"]:
        body = kernels[launch["kernel"]]
        assert ".ptr .align 1 " not in body
        assert "malloc" not in body


@pytest.mark.parametrize("reductions, name", [(r, n) for r in ("block", "split") for n in
                                               ("softmax_large", "reduce_sum_large", "softmax", "reduce_mean")]
                         + [("block", "layernorm_large")])
def test_no_store_to_global_memory_inside_a_reduction_loop(compiled, split_compiled, reductions, name):
    """Block reductions, partial and merge kernels keep their accumulators in registers: one store per
    output."""
    _, config, kernels, _ = (compiled if reductions == "block" else split_compiled)[name]
    for launch in config["launches"]:
        for loop in loop_bodies(kernels[launch["kernel"]]):
            assert "st.global" not in loop, f"{name} {launch['kernel']} stores inside a loop:\n{loop}"


def test_split_softmax_kernels_partial_merge_and_vectorized_elementwise(split_compiled):
    """max partial, max merge, exp(x - max), sum partial, sum merge, divide: the two 256 MB
    elementwise passes move 128 bits per access, and the merges read their partials as vectors."""
    result, config, kernels, _ = split_compiled["softmax_large"]
    assert result.kernel_count == 6
    assert result.kernel_families == ["reduction", "reduction", "elementwise", "reduction", "reduction",
                                      "elementwise"]
    bodies = [kernels[launch["kernel"]] for launch in config["launches"]]
    for elementwise in (bodies[2], bodies[5]):
        assert vector_loads(elementwise) >= 1 and vector_stores(elementwise) == ELEMENTWISE_VECTORS
    for merge in (bodies[1], bodies[4]):
        assert vector_loads(merge) >= 8
    # the partial kernels: many threads per row (64 partials of each of 8192 rows)
    for launch in (config["launches"][0], config["launches"][3]):
        threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
        blocks = launch["grid"][0] * launch["grid"][1] * launch["grid"][2]
        assert threads * blocks == 8192 * 64


def test_split_row_sum_is_a_partial_and_a_merge_kernel(split_compiled):
    result, config, kernels, _ = split_compiled["reduce_sum_large"]
    assert result.kernel_count == 2
    merge = kernels[config["launches"][1]["kernel"]]
    assert vector_loads(merge) >= 8


def test_layernorm_normalize_pass_is_vectorized(compiled):
    result, config, kernels, _ = compiled["layernorm_large"]
    normalize = kernels[config["launches"][-1]["kernel"]]
    assert vector_loads(normalize) >= 1 and vector_stores(normalize) == ELEMENTWISE_VECTORS


# ---------------------------------------------------------------------------------------------
# v0's block reductions: one kernel per row reduction, partials in shared memory, producers fused,
# softmax's exp(x - max) computed again by the sum and the divide instead of stored


@pytest.mark.parametrize("name, threads", [("softmax_large", 1024), ("layernorm_large", 1024),
                                           ("reduce_sum_large", 1024), ("softmax", 256)])
def test_v0_block_reductions_take_threads_by_the_length_of_their_rows(compiled, name, threads):
    """The fastest measured on the H200: 1024 threads per row of 8192 (the row sum, interleaved and
    streamed; softmax's and layernorm's block reductions, v0 in the block mode only, follow it), 256 per
    row of 4096 (softmax), 128 for rows of 1024 and less (benchmarks/results/schedule_sweep_h200.md).
    reduce_mean's reduced dim is not innermost: it keeps the split."""
    *_, params = compiled[name]
    assert {s.block_reduction for s in params.ops if s.family != "elementwise"} == {threads}


def shared_bytes(body: str) -> int:
    return sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", body))


@pytest.mark.parametrize("name, kernels", [("softmax_large", 3), ("layernorm_large", 3), ("reduce_sum_large", 1),
                                           ("softmax", 3)])
def test_block_reductions_are_one_kernel_each_with_fused_producers(compiled, name, kernels):
    result, config, bodies, params = compiled[name]
    assert result.kernel_count == kernels
    for launch in config["launches"]:
        body = bodies[launch["kernel"]]
        for loop in loop_bodies(body):
            assert "st.global" not in loop
        if "bar.sync" in body and shared_bytes(body):  # a block reduction: 256 threads, one row per block
            threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
            # the shared memory holds exactly one partial per thread and one per merging thread of the
            # warp that reduces them (per-thread temporaries stay private)
            assert shared_bytes(body) in ((threads + MERGE_THREADS) * 4, (threads + MERGE_THREADS) * 8)
            assert re.search(r"ld\.shared", body) and re.search(r"st\.shared", body)
            assert vector_loads(body) >= 1


def test_softmax_block_reduction_reads_the_input_three_times_and_writes_once(compiled):
    """max(x); sum(exp(x - max)); exp(x - max) / sum: exp is never stored."""
    result, config, bodies, params = compiled["softmax_large"]
    buffers = {b["name"]: b for b in config["buffers"]}
    big = [name for name, b in buffers.items() if b["shape"] == [8192, 8192]]
    assert len(big) == 2  # the input and the output, no exp(x - max) temporary
    reads = sum(1 for launch in config["launches"] for a in launch["args"][:-1] if a.get("buffer") in big)
    assert reads == 3
    assert [launch["grid"][0] * launch["grid"][1] for launch in config["launches"][:2]] == [8192, 8192]


def test_block_reduction_rejects_threads_over_the_reduction_or_thread_tiles(compiled, tmp_path):
    result, config, bodies, params = compiled["reduce_sum_large"]
    job = tmp_path / "reduce_sum_large"
    lower_model(str(MODELS["reduce_sum_large"]), str(job))
    bad = params.from_dict(params.to_dict())
    bad.ops[-1].block_reduction = 3
    r = compile_iteration(str(job), 2, bad)
    assert not r.ok and r.stage == "schedule" and "divide the reduction loop extent" in r.error
    bad = params.from_dict(params.to_dict())
    bad.ops[-1].thread_tile = [1, 0]
    r = compile_iteration(str(job), 3, bad)
    assert not r.ok and r.stage == "schedule" and "thread_tile must be all 0" in r.error


@pytest.mark.parametrize("split, reduction_tile", [(64, 8), (64, 64), (32, 0)])
def test_splits_whose_loops_fit_one_tile_compile(tmp_path, split, reduction_tile):
    """The advisor doubles a split until a thread's partial (512 / 64 = 8 elements) is one vector load,
    or the merge's reduction_tile covers all partials: tiling a loop by its whole extent leaves a one-trip
    loop that canonicalization folds under later transform steps ("ran out of suitable replacement
    values"); such loops stay untiled."""
    job = tmp_path / "reduce_mean"
    lower_model(str(MODELS["reduce_mean"]), str(job))
    facts = analyze((job / "model_linalg.mlir").read_text())
    params = initial_params_for(facts, reductions="split")
    schedule = next(s for s in params.ops if s.split_reduction)
    schedule.split_reduction, schedule.reduction_tile, schedule.vectorize = split, reduction_tile, bool(reduction_tile)
    result = compile_iteration(str(job), 1, params)
    assert result.ok, f"{result.stage}: {result.error}"


# ---------------------------------------------------------------------------------------------
# v0's row kernels: softmax and layernorm in one kernel, a block per row, every reduction over the
# block's threads, the elementwise ops computed again where they are read


@pytest.mark.parametrize("name, rows, threads, reductions, inputs, barriers",
                         [("softmax_large", 8192, 512, 2, 1, 2), ("layernorm_large", 8192, 512, 2, 3, 2),
                          ("softmax", 512, 256, 2, 1, 2), ("rownorm_f64", 1024, 512, 1, 1, 3)])
def test_row_pipelines_are_one_kernel_of_a_block_per_row(row_compiled, name, rows, threads, reductions, inputs,
                                                         barriers):
    """One launch, one block of `threads` per row; each reduction's partials and result in shared memory,
    none in per-thread memory (.local: a result merged by one thread and read by all would be wrong
    there); per reduction `barriers`: after the partial pass and after each of the merge's two steps (a
    warp, then one thread: rownorm_f64, whose sum is in f64), or, where the merges end in warp shuffles
    (no f64 reduction), after the partials and after the merging warp's result; one after the output
    pass; the inputs (x; layernorm's weight and bias too) read once, however many passes read them
    (reuse_reads.reuse_reads), and the output written once, in 128-bit loads and stores (16 columns per
    thread); no temporary the size of the input."""
    result, config, bodies, params = row_compiled[name]
    ((schedule,),) = [[s for s in params.ops if s.row_kernel]]
    assert schedule.row_kernel == threads and result.kernel_count == 1
    (launch,) = config["launches"]
    assert launch["grid"][0] * launch["grid"][1] * launch["grid"][2] == rows and launch["block"] == [threads, 1, 1]
    body = bodies[launch["kernel"]]
    assert ".local" not in body and shared_bytes(body) > 0
    assert schedule.warp_merge == (barriers == 2)
    assert body.count("bar.sync") == barriers * reductions + 1
    columns = config["outputs"][0]["shape"][-1]
    assert vector_stores(body) == columns // threads // 4 and "st.global.f32" not in body
    assert vector_loads(body) == body.count("ld.global") == inputs * columns // threads // 4
    big = [b for b in config["buffers"] if b["shape"] == config["outputs"][0]["shape"]]
    assert len(big) == 2  # the input and the output


def test_v0_takes_row_kernels_for_pipelines_of_up_to_three_reductions(row_compiled, tmp_path):
    """softmax (two reductions) and layernorm (three) in one row kernel each; a lone row sum keeps a
    block reduction kernel."""
    expected = {"softmax_large": [(0, 512)], "layernorm_large": [(0, 512)],
                "reduce_sum_large": [(1024, 0)]}
    for name, shapes in expected.items():
        lower_model(str(MODELS[name]), str(tmp_path / name))
        facts = analyze((tmp_path / name / "model_linalg.mlir").read_text())
        assert [(s.block_reduction, s.row_kernel) for s in initial_params_for(facts).ops] == shapes, name


@pytest.mark.parametrize("field, value, reason", [("row_kernel", 3, "must be 2..1024 and divide the 8192 columns"),
                                                  ("row_kernel", 2048, "must be 2..1024"),
                                                  ("block_reduction", 256, "a row kernel takes no"),
                                                  ("block_tile", [2, 0], "a row kernel has block_tile [1, 0]")])
def test_bad_row_kernels_fail_at_the_schedule_stage(row_compiled, tmp_path, field, value, reason):
    *_, params = row_compiled["softmax_large"]
    job = tmp_path / "softmax_large"
    lower_model(str(MODELS["softmax_large"]), str(job))
    bad = params.from_dict(params.to_dict())
    setattr(bad.ops[0], field, value)
    r = compile_iteration(str(job), 1, bad)
    assert not r.ok and r.stage == "schedule" and reason in r.error, r.error


def test_block_reductions_over_a_leading_dim_merge_in_two_steps(tmp_path):
    """softmax over dim 0: its reductions reduce the leading loop ([reduction, parallel]); their partials
    are still combined along the combining op's last loop, by a warp and then one thread."""
    model = tmp_path / "softmax_dim0.py"
    model.write_text(MODELS["softmax"].read_text().replace("dim=-1", "dim=0"))
    job = tmp_path / "softmax_dim0"
    lower_model(str(model), str(job))
    facts = analyze((job / "model_linalg.mlir").read_text())
    params = initial_params_for(facts)
    threads = [s.block_reduction for s in params.ops if s.block_reduction]
    assert threads == [128, 128]
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error
    config = json.loads((job / "v0" / "config.json").read_text())
    bodies = kernels_of((job / "v0" / "kernels.ptx").read_text())
    reductions = [bodies[launch["kernel"]] for launch in config["launches"] if launch["block"] == [128, 1, 1]]
    assert len(reductions) == 2
    assert all(shared_bytes(body) == (128 + MERGE_THREADS) * 4 for body in reductions)


# a load repeating an earlier one of its block: global memory's across barriers and shared-memory stores,
# not across a store to global memory (it might have changed it)
GLOBAL_READS = """
    gpu.module @kernels {
      gpu.func @k(%b: memref<64xf32>, %a: memref<64xf32>, %i: index) kernel {
        %tile = memref.alloc() : memref<64xf32, #gpu.address_space<workgroup>>
        %x = vector.load %a[%i] : memref<64xf32>, vector<4xf32>
        vector.store %x, %tile[%i] : memref<64xf32, #gpu.address_space<workgroup>>, vector<4xf32>
        gpu.barrier
        %y = vector.load %a[%i] : memref<64xf32>, vector<4xf32>
        vector.store %y, %b[%i] : memref<64xf32>, vector<4xf32>
        %z = vector.load %a[%i] : memref<64xf32>, vector<4xf32>
        vector.store %z, %b[%i] : memref<64xf32>, vector<4xf32>
        gpu.return
      }
    }"""
# a reduction's result in shared memory: across another merge's barrier and stores to other allocations,
# not across a store to its own
SHARED_READS = """
    gpu.module @kernels {
      gpu.func @k(%b: memref<64xf32>, %i: index) kernel {
        %c0 = arith.constant 0 : index
        %max = memref.alloc() : memref<1xf32, #gpu.address_space<workgroup>>
        %sum = memref.alloc() : memref<1xf32, #gpu.address_space<workgroup>>
        %x = vector.load %max[%c0] : memref<1xf32, #gpu.address_space<workgroup>>, vector<1xf32>
        vector.store %x, %sum[%c0] : memref<1xf32, #gpu.address_space<workgroup>>, vector<1xf32>
        gpu.barrier
        %y = vector.load %max[%c0] : memref<1xf32, #gpu.address_space<workgroup>>, vector<1xf32>
        vector.store %y, %b[%i] : memref<64xf32>, vector<1xf32>
        vector.store %y, %max[%c0] : memref<1xf32, #gpu.address_space<workgroup>>, vector<1xf32>
        %z = vector.load %max[%c0] : memref<1xf32, #gpu.address_space<workgroup>>, vector<1xf32>
        vector.store %z, %b[%i] : memref<64xf32>, vector<1xf32>
        gpu.return
      }
    }"""


@pytest.mark.parametrize("text", [GLOBAL_READS, SHARED_READS], ids=["global", "shared"])
def test_reads_are_reused_up_to_a_write_that_may_change_them(text):
    """reuse_reads.reuse_reads: %y takes %x's value; %z, after a store that may change what it reads, is read again."""
    with mlir.context():
        module = mlir.parse(text, "kernels")
        reuse_reads.reuse_reads(module)
        ir = str(module)
    loads = re.findall(r"(%\w+) = vector.load", ir)
    assert len(loads) == 2, ir
    assert re.findall(r"vector.store (%\w+), %arg0", ir) == [loads[0], loads[1]], ir


def test_softmax_computes_each_exponential_once(row_compiled):
    """The row kernel's output pass reads the row's max from shared memory as its sum pass did
    (reuse_reads.reuse_reads): exp(x - max) is the same value, computed once per element (ex2 runs on the
    SM's 16-per-clock special function units)."""
    result, config, bodies, params = row_compiled["softmax_large"]
    (launch,) = config["launches"]
    columns_per_thread = config["outputs"][0]["shape"][-1] // launch["block"][0]
    assert bodies[launch["kernel"]].count("ex2.approx") == columns_per_thread


@pytest.mark.parametrize("name, reductions, threads, merges, shuffles", [
    ("softmax_large", "rows", 512, 2, 2 * (4 + 5)), ("layernorm_large", "rows", 512, 2, 2 * (4 + 5)),
    ("rownorm_f64", "rows", 512, 1, 2 * (4 + 5)), ("reduce_sum_large", "block", 1024, 1, 5 + 5)])
def test_warp_merge_ends_each_merge_in_shuffles_one_barrier_earlier(tmp_path, name, reductions, threads, merges,
                                                                    shuffles):
    """warp_merge: each group of lanes whose partials one lane of the merging warp reduces (32 of 1024
    threads' partials, 16 of 512) combines them by butterfly shuffles before storing them (5 or 4), and
    that warp combines its 32 values by 5 more and writes the result itself, instead of one thread adding
    them up after another barrier: one bar.sync less per reduction (an f64 value takes two shuffles:
    rownorm_f64's sum), the rest of the kernel as it was. On a kernel without a block reduction it is
    refused."""
    job = tmp_path / name
    lower_model(str(MODELS[name]), str(job))
    facts = analyze((job / "model_linalg.mlir").read_text())
    params = initial_params_for(facts, reductions=reductions)
    merged = [s for s in params.ops if s.row_kernel or s.block_reduction]
    assert [s.row_kernel or s.block_reduction for s in merged] == [threads]
    bodies = []
    for version, on in enumerate([False, True]):
        merged[0].warp_merge = on
        result = compile_iteration(str(job), version, params)
        assert result.ok, result.error
        (body,) = kernels_of((job / f"v{version}" / "kernels.ptx").read_text()).values()
        bodies.append(body)
    plain, warp = bodies
    assert plain.count("shfl.sync") == 0 and warp.count("shfl.sync.bfly") == shuffles
    assert warp.count("bar.sync") == plain.count("bar.sync") - merges
    assert warp.count("ld.global") == plain.count("ld.global") and ".local" not in warp
    if name == "reduce_sum_large":
        merged[0].block_reduction = 0
        refused = compile_iteration(str(job), 2, params)
        assert not refused.ok and "warp_merge merges the partials of a block reduction" in refused.error


# ---------------------------------------------------------------------------------------------
# interleave_columns: a row kernel's threads take their 128-bit vectors interleaved across the block

ROW_RUNS = """
#run = affine_map<()[s0] -> (s0 * 8)>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @rows(%x: memref<4x64xf32>, %w: memref<64xf32>, %y: memref<4x64xf32>) kernel
        attributes {known_block_size = array<i32: 8, 1, 1>, farm.interleave_columns} {
      %c0 = arith.constant 0 : index
      %row = gpu.block_id x
      %tid = gpu.thread_id x
      %start = affine.apply #run()[%tid]
      %xrow = memref.subview %x[%row, 0] [1, 64] [1, 1] : memref<4x64xf32> to memref<1x64xf32, strided<[64, 1], offset: ?>>
      %xs = memref.subview %xrow[0, %start] [1, 8] [1, 1] : memref<1x64xf32, strided<[64, 1], offset: ?>> to memref<1x8xf32, strided<[64, 1], offset: ?>>
      %a = vector.load %xs[%c0, %c0] : memref<1x8xf32, strided<[64, 1], offset: ?>>, vector<8xf32>
      %ws = memref.subview %w[%start] [8] [1] : memref<64xf32> to memref<8xf32, strided<[1], offset: ?>>
      %b = vector.load %ws[%c0] : memref<8xf32, strided<[1], offset: ?>>, vector<8xf32>
      %c = arith.mulf %a, %b : vector<8xf32>
      %ys = memref.subview %y[%row, %start] [1, 8] [1, 1] : memref<4x64xf32> to memref<1x8xf32, strided<[64, 1], offset: ?>>
      vector.store %c, %ys[%c0, %c0] : memref<1x8xf32, strided<[64, 1], offset: ?>>, vector<8xf32>
      gpu.return
    }
  }
}
"""


def _columns_of(access, threads: int) -> list[list[int]]:
    """The columns that `access` (a vector.load or vector.store of a thread's vector, through a subview at
    offset `affine.apply ()[s0] -> (s0 * V + c)` of thread_id.x) covers, for each thread."""
    view = access.operands[1 if access.name == "vector.store" else 0].owner
    offset = view.operands[len(view.operands) - 1]
    text = str(offset.owner.attributes["map"])
    scale, constant = (int(n) for n in re.fullmatch(r"affine_map<\(\)\[s0\] -> \(s0 \* (\d+)(?: \+ (\d+))?\)>", text)
                       .groups(default="0"))
    lanes = mlir.ir.VectorType(interleave_columns._accessed_vector(access)).shape[0]
    return [[t * scale + constant + i for i in range(lanes)] for t in range(threads)]


def test_interleaving_gives_each_thread_vectors_a_block_width_apart_the_same_for_every_access():
    """Each access of a thread's run of 8 columns becomes two of 4, thread t's at columns 4t and 4t + 32:
    every access (x, the weight, y) covers each of the 64 columns once, in the same order, so y = x w
    still pairs each column with itself."""
    with mlir.context():
        module = mlir.parse(ROW_RUNS, "row runs")
        interleave_columns.interleave_thread_columns(module, 16)
        module.operation.verify()
        kernel = mlir.kernel_ops(module, "gpu.func")[0]
        loads, stores = mlir.ops_named(kernel, "vector.load"), mlir.ops_named(kernel, "vector.store")
        assert len(loads) == 4 and len(stores) == 2
        x_columns = [_columns_of(a, 8) for a in loads[:2]]
        assert x_columns == [[[4 * t + i for i in range(4)] for t in range(8)],
                             [[32 + 4 * t + i for i in range(4)] for t in range(8)]]
        assert [_columns_of(a, 8) for a in loads[2:]] == x_columns == [_columns_of(a, 8) for a in stores]


def test_interleaving_leaves_a_kernel_with_a_run_read_in_part_as_it_was():
    """A weight run read as 4 of its 8 columns cannot be interleaved with the kernel's other accesses: the
    kernel stays as it was (a note says so), never one whose accesses disagree on which column is which."""
    partial = ROW_RUNS.replace(
        "%b = vector.load %ws[%c0] : memref<8xf32, strided<[1], offset: ?>>, vector<8xf32>",
        "%b4 = vector.load %ws[%c0] : memref<8xf32, strided<[1], offset: ?>>, vector<4xf32>\n"
        "      %b = vector.insert_strided_slice %b4, %a {offsets = [0], strides = [1]} : vector<4xf32> into vector<8xf32>")
    with mlir.context():
        module = mlir.parse(partial, "a run read in part")
        before = str(module)
        notes = interleave_columns.interleave_thread_columns(module, 16)
        assert str(module) == before and len(notes) == 1 and "interleave_columns left kernel rows" in notes[0]


ROW_STEPS = ROW_RUNS.replace(
    """      %xs = memref.subview %xrow[0, %start] [1, 8] [1, 1] : memref<1x64xf32, strided<[64, 1], offset: ?>> to memref<1x8xf32, strided<[64, 1], offset: ?>>
      %a = vector.load %xs[%c0, %c0] : memref<1x8xf32, strided<[64, 1], offset: ?>>, vector<8xf32>
""", """      %c4 = arith.constant 4 : index
      %c8 = arith.constant 8 : index
      %xs = memref.subview %xrow[0, %start] [1, 8] [1, 1] : memref<1x64xf32, strided<[64, 1], offset: ?>> to memref<1x8xf32, strided<[64, 1], offset: ?>>
      %init = arith.constant dense<0.0> : vector<4xf32>
      %sum = scf.for %i = %c0 to %c8 step %c4 iter_args(%acc = %init) -> (vector<4xf32>) {
        %step = memref.subview %xs[0, %i] [1, 4] [1, 1] : memref<1x8xf32, strided<[64, 1], offset: ?>> to memref<1x4xf32, strided<[64, 1], offset: ?>>
        %v = vector.load %step[%c0, %c0] : memref<1x4xf32, strided<[64, 1], offset: ?>>, vector<4xf32>
        %next = arith.addf %acc, %v : vector<4xf32>
        scf.yield %next : vector<4xf32>
      }
      %a = vector.insert_strided_slice %sum, %init8 {offsets = [0], strides = [1]} : vector<4xf32> into vector<8xf32>
""").replace("%c0 = arith.constant 0 : index", "%c0 = arith.constant 0 : index\n      %init8 = arith.constant dense<0.0> : vector<8xf32>")


def test_interleaving_moves_a_run_read_in_steps_of_a_loop_as_it_moves_the_whole_run():
    """A thread's run of 8 columns read in two steps of 4 (reduction_tile: a loop from 0 to 8 by 4): the
    step at loop index i of thread t moves to column 4t + 8i, i.e. 4t and 32 + 4t, the columns the whole
    run's two vectors move to, so the stepped reads still meet the weight's and y's columns."""
    with mlir.context():
        module = mlir.parse(ROW_STEPS, "row steps")
        assert not interleave_columns.interleave_thread_columns(module, 16)
        module.operation.verify()
        kernel = mlir.kernel_ops(module, "gpu.func")[0]
        (step,), whole = [[a for a in mlir.ops_named(kernel, "vector.load") if (a.operation.parent.name == "scf.for") == inside]
                          for inside in (True, False)]
        offset = step.operands[0].owner.operands[-1].owner
        assert re.fullmatch(r"affine_map<\(\)\[s0, s1\] -> \(s0 \* 4 \+ s1 \* 8\)>", str(offset.attributes["map"]))
        assert [[4 * t + 8 * i for t in range(8)] for i in (0, 4)] == [[c[0] for c in _columns_of(a, 8)] for a in whole]


def _access_offsets(body: str) -> list[list[int]]:
    """The byte offsets of the 128-bit global loads and stores from each base register, per register."""
    by_base: dict[str, list[int]] = {}
    for base, offset in re.findall(rf"(?:ld|st)\.global{CACHE_OPERATOR}\.v4\.\w+\s+[^\[]*\[(%rd\d+)(?:\+(\d+))?\]", body):
        by_base.setdefault(base, []).append(int(offset or 0))
    return sorted(sorted(offsets) for offsets in by_base.values())


@pytest.mark.parametrize("name", ["softmax_large", "layernorm_large"])
def test_v0_row_kernels_interleave_their_threads_vectors(row_compiled, tmp_path, name):
    """v0's row kernels over rows of 8192 f32 (512 threads, 16 columns each): a thread's four 128-bit
    vectors of each row it reads or writes lie 512 x 16 bytes apart, one per block-wide pass over the
    row; with interleave_columns off, next to each other (16 bytes apart)."""
    result, config, bodies, params = row_compiled[name]
    ((schedule,),) = [[s for s in params.ops if s.row_kernel]]
    assert schedule.interleave_columns and schedule.row_kernel == 512
    (body,) = bodies.values()
    accesses = _access_offsets(body)
    assert accesses and all(offsets == [j * 512 * 16 for j in range(4)] for offsets in accesses)
    job = tmp_path / name
    lower_model(str(MODELS[name]), str(job))
    schedule.interleave_columns = False
    plain = compile_iteration(str(job), 1, params)
    schedule.interleave_columns = True
    assert plain.ok, plain.error
    (plain_body,) = kernels_of((job / "v1" / "kernels.ptx").read_text()).values()
    assert _access_offsets(plain_body) and all(offsets == [0, 16, 32, 48] for offsets in _access_offsets(plain_body))


def test_v0_row_kernel_over_long_rows_goes_through_each_threads_run_in_interleaved_steps(tmp_path):
    """Rows of 98304 f32: 1024 threads of 96 columns each, which a thread took as one vector (rows of 393216:
    7 KB spilled a thread). In steps of 16 columns, a loop per reduction and one for the output, nothing
    spills; each step's four 128-bit accesses are interleaved across the block (4 t + 1024 i + 4096 j for
    thread t at step i); without the steps the same kernel spills."""
    job = tmp_path / "long_softmax"
    lower_model(str(MODELS["long_softmax"]), str(job))
    params = initial_params_for(analyze((job / "model_linalg.mlir").read_text()))
    ((schedule,),) = [[s for s in params.ops if s.row_kernel]]
    assert (schedule.row_kernel, schedule.reduction_tile, schedule.interleave_columns) == (1024, 16, True)
    result = compile_iteration(str(job), 0, params)
    assert result.ok, result.error
    (body,) = kernels_of((job / "v0" / "kernels.ptx").read_text()).values()
    loops = loop_bodies(body)
    assert len(loops) == 3 and all("ld.global.nc.v4" in loop for loop in loops) and "st.global.v4" in loops[-1]
    gpu = (job / "v0" / "gpu.mlir").read_text()
    assert len(re.findall(r"affine_map<\(\)\[s0, s1\] -> \(s0 \* 4 \+ s1 \* 1024(?: \+ \d+)?\)>", gpu)) == 4
    assert not _spills(job / "v0")
    schedule.reduction_tile = 0
    whole = compile_iteration(str(job), 1, params)
    assert whole.ok, whole.error
    assert _spills(job / "v1")


def _spills(vdir: Path) -> int:
    """The bytes ptxas spills to local memory, over all kernels."""
    done = subprocess.run([shutil.which("ptxas"), "-arch=sm_90a", "-v", str(vdir / "kernels.ptx"), "-o", os.devnull],
                          capture_output=True, text=True, check=True)
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", done.stderr))


def test_interleave_columns_needs_a_row_kernel_a_block_reduction_or_a_matmul(tmp_path):
    job = tmp_path / "elementwise_large"
    lower_model(str(MODELS["elementwise_large"]), str(job))
    facts = analyze((job / "model_linalg.mlir").read_text())
    params = initial_params_for(facts)
    params.ops[0].interleave_columns = True
    refused = compile_iteration(str(job), 0, params)
    assert not refused.ok and refused.stage == "schedule" and "it needs row_kernel, block_reduction, or a matmul" \
        in refused.error


def test_v0_block_reduction_interleaves_its_threads_vectors(compiled):
    """The row sum over rows of 8192 f32 (one block reduction of 1024 threads, 8 columns each): a thread's
    two 128-bit loads lie 1024 x 16 bytes apart."""
    result, config, bodies, params = compiled["reduce_sum_large"]
    ((schedule,),) = [[s for s in params.ops if s.block_reduction]]
    assert schedule.interleave_columns and schedule.block_reduction == 1024
    (body,) = bodies.values()
    assert _access_offsets(body) == [[0, 1024 * 16]]


def test_the_ptx_is_llvms_own_no_cache_operator_is_written_into_it(compiled, row_compiled):
    """The compile stage edits no PTX text: cache operators (.cs, which the row sum's loads had gained 1%
    from, written in by a regular expression) are LLVM's, and this NVPTX emits none (it drops
    `nontemporal`)."""
    (body,) = compiled["reduce_sum_large"][2].values()
    assert re.findall(r"(?:ld|st)\.global\S*", body) == ["ld.global.nc.v4.b32"] * 2 + ["st.global.b32"]
    for jobs, name in ((compiled, "weighted_row_sum"), (compiled, "elementwise_large"),
                       (row_compiled, "softmax_large"), (row_compiled, "layernorm_large")):
        assert all(re.findall(r"(?:ld|st)\.global", body) and ".cs" not in body for body in jobs[name][2].values())
