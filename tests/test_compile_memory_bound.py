"""Structure of v0 for memory-bound models (elementwise chains, softmax, layernorm, row reductions):
128-bit loads and stores in elementwise kernels, reduction accumulators in registers (no store to
global memory inside a loop), kernel counts and launch shapes. Real torch-mlir, MLIR and ptxas."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workers.compile import compile_iteration, initial_params
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
}
H200_SMS = 132


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("memory_bound")
    jobs = {}
    for name, model in MODELS.items():
        job = out / name
        lower_model(str(model), str(job))
        result = compile_iteration(str(job), 0, initial_params(str(job)))
        assert result.ok, f"{name}: {result.stage}: {result.error}"
        config = json.loads((job / "v0" / "config.json").read_text())
        jobs[name] = (result, config, kernels_of((job / "v0" / "kernels.ptx").read_text()))
    return jobs


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


def vector_loads(body: str) -> int:
    return len(re.findall(r"ld\.global(?:\.nc)?\.v4\.(?:b32|f32)", body))


def vector_stores(body: str) -> int:
    return len(re.findall(r"st\.global\.v4\.(?:b32|f32)", body))


def scalar_accesses(body: str) -> int:
    return len(re.findall(r"(?:ld|st)\.global(?:\.nc)?\.(?:b32|f32)\b", body))


def test_elementwise_chain_is_one_kernel_of_128_bit_accesses_over_many_waves(compiled):
    result, config, kernels = compiled["elementwise_large"]
    assert result.kernel_count == 1
    (launch,) = config["launches"]
    threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
    blocks = launch["grid"][0] * launch["grid"][1] * launch["grid"][2]
    assert threads == 256
    # 4 f32 per thread: 8192 x 8192 / 1024 blocks, many waves of the H200's 132 SMs (8 blocks each)
    assert threads * blocks * 4 == 8192 * 8192 and blocks >= 8 * H200_SMS * 4
    body = kernels[launch["kernel"]]
    assert vector_loads(body) == 1 and vector_stores(body) == 1 and scalar_accesses(body) == 0


def test_small_elementwise_chain_also_vectorizes(compiled):
    result, _, kernels = compiled["elementwise_chain"]
    assert result.kernel_count == 1
    (body,) = kernels.values()
    assert vector_loads(body) >= 1 and vector_stores(body) >= 1


@pytest.mark.parametrize("name", ["elementwise_large", "softmax_large", "layernorm_large", "reduce_sum_large"])
def test_kernel_pointers_are_16_byte_aligned(compiled, name):
    result, config, kernels = compiled[name]
    for launch in config["launches"]:
        body = kernels[launch["kernel"]]
        assert ".ptr .align 1 " not in body
        assert "malloc" not in body


@pytest.mark.parametrize("name", ["softmax_large", "layernorm_large", "reduce_sum_large", "softmax", "reduce_mean"])
def test_no_store_to_global_memory_inside_a_reduction_loop(compiled, name):
    """Partial and merge kernels keep their accumulators in registers: one store per output."""
    _, config, kernels = compiled[name]
    for launch in config["launches"]:
        for loop in loop_bodies(kernels[launch["kernel"]]):
            assert "st.global" not in loop, f"{name} {launch['kernel']} stores inside a loop:\n{loop}"


def test_softmax_kernels_partial_merge_and_vectorized_elementwise(compiled):
    """max partial, max merge, exp(x - max), sum partial, sum merge, divide: the two 256 MB
    elementwise passes move 128 bits per access, and the merges read their partials as vectors."""
    result, config, kernels = compiled["softmax_large"]
    assert result.kernel_count == 6
    assert result.kernel_families == ["reduction", "reduction", "elementwise", "reduction", "reduction",
                                      "elementwise"]
    bodies = [kernels[launch["kernel"]] for launch in config["launches"]]
    for elementwise in (bodies[2], bodies[5]):
        assert vector_loads(elementwise) >= 1 and vector_stores(elementwise) == 1
    for merge in (bodies[1], bodies[4]):
        assert vector_loads(merge) >= 8
    # the partial kernels: many threads per row (64 partials of each of 8192 rows)
    for launch in (config["launches"][0], config["launches"][3]):
        threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
        blocks = launch["grid"][0] * launch["grid"][1] * launch["grid"][2]
        assert threads * blocks == 8192 * 64


def test_row_sum_is_a_partial_and_a_merge_kernel(compiled):
    result, config, kernels = compiled["reduce_sum_large"]
    assert result.kernel_count == 2
    merge = kernels[config["launches"][1]["kernel"]]
    assert vector_loads(merge) >= 8


def test_layernorm_normalize_pass_is_vectorized(compiled):
    result, config, kernels = compiled["layernorm_large"]
    normalize = kernels[config["launches"][-1]["kernel"]]
    assert vector_loads(normalize) >= 1 and vector_stores(normalize) == 1


# ---------------------------------------------------------------------------------------------
# block_reduction (not v0 yet): one kernel per row reduction, partials in shared memory, producers
# fused, softmax's exp(x - max) computed again by the sum and the divide instead of stored


@pytest.fixture(scope="module")
def block_compiled(compiled, tmp_path_factory):
    from workers.compile.analysis import analyze
    from workers.compile.pipeline import default_pipeline
    from workers.compile.schedule import with_block_reductions

    out = tmp_path_factory.mktemp("memory_bound_block")
    jobs = {}
    for name in ("softmax_large", "layernorm_large", "reduce_sum_large", "softmax"):
        job = out / name
        lower_model(str(MODELS[name]), str(job))
        params = initial_params(str(job))
        facts = analyze((job / "model_linalg.mlir").read_text(), default_pipeline(params.chip).pre_schedule)
        block = with_block_reductions(params, facts)
        result = compile_iteration(str(job), 1, block)
        assert result.ok, f"{name}: {result.stage}: {result.error}"
        config = json.loads((job / "v1" / "config.json").read_text())
        jobs[name] = (result, config, kernels_of((job / "v1" / "kernels.ptx").read_text()), block)
    return jobs


def shared_bytes(body: str) -> int:
    return sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", body))


@pytest.mark.parametrize("name, kernels", [("softmax_large", 3), ("layernorm_large", 4), ("reduce_sum_large", 1),
                                           ("softmax", 3)])
def test_block_reductions_are_one_kernel_each_with_fused_producers(block_compiled, name, kernels):
    result, config, bodies, params = block_compiled[name]
    assert result.kernel_count == kernels
    for launch in config["launches"]:
        body = bodies[launch["kernel"]]
        for loop in loop_bodies(body):
            assert "st.global" not in loop
        if "bar.sync" in body and shared_bytes(body):  # a block reduction: 256 threads, one row per block
            threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
            # the shared memory holds exactly one partial per thread (per-thread temporaries stay private)
            assert shared_bytes(body) in (threads * 4, threads * 8)
            assert re.search(r"ld\.shared", body) and re.search(r"st\.shared", body)
            assert vector_loads(body) >= 1


def test_softmax_block_reduction_reads_the_input_three_times_and_writes_once(block_compiled):
    """max(x); sum(exp(x - max)); exp(x - max) / sum: exp is never stored."""
    result, config, bodies, params = block_compiled["softmax_large"]
    buffers = {b["name"]: b for b in config["buffers"]}
    big = [name for name, b in buffers.items() if b["shape"] == [8192, 8192]]
    assert len(big) == 2  # the input and the output, no exp(x - max) temporary
    reads = sum(1 for launch in config["launches"] for a in launch["args"][:-1] if a.get("buffer") in big)
    assert reads == 3
    assert [launch["grid"][0] * launch["grid"][1] for launch in config["launches"][:2]] == [8192, 8192]


def test_block_reduction_rejects_threads_over_the_reduction_or_thread_tiles(block_compiled, tmp_path):
    result, config, bodies, params = block_compiled["reduce_sum_large"]
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
    params = initial_params(str(job))
    schedule = next(s for s in params.ops if s.split_reduction)
    schedule.split_reduction, schedule.reduction_tile, schedule.vectorize = split, reduction_tile, bool(reduction_tile)
    result = compile_iteration(str(job), 1, params)
    assert result.ok, f"{result.stage}: {result.error}"
