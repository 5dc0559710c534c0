"""One iteration vN of one job: every artifact of the compile half of the output contract."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time

from workers.atomic import write_bytes, write_text
from workers.compile import mlir
from workers.compile.alignment import align_global_vector_accesses
from workers.compile.analysis import analyze, prepared_payload
from workers.compile.cache_hints import stream_global_accesses
from workers.compile.host import HostComputeError, LaunchSequence, merge_kernel_modules
from workers.compile.pipeline import default_pipeline
from workers.compile.schedule import (VECTOR_BYTES, Kernel, ScheduleError, emit_transform, initial_params_for,
                                      kernel_of_line)
from workers.compile.tensor_core import COPIES_AHEAD, K_LOOP, PIPELINE_SEQUENCE, STAGED, padded_columns
from workers.compile.wgmma import TRANSPOSE_ROWS, TRANSPOSE_TILE, warpgroup_matmuls
from workers.layout import COMPILE_RESULT_FILE, LINALG_FILE, MODEL_FILE, MODEL_INFO_FILE, version_dir
from workers.records import TOLERANCES, CompileResult, LaunchConfig, ModelInfo, ScheduleParams

class PtxasError(Exception):
    """ptxas refused the generated PTX."""


def load_model_info(job_dir: str) -> ModelInfo:
    with open(os.path.join(job_dir, MODEL_INFO_FILE)) as f:
        return ModelInfo.from_json(f.read())


def initial_params(job_dir: str, chip: str = "sm_90a", tf32: bool = False) -> ScheduleParams:
    """The v0 operator-aware schedule of a lowered model (job_dir/model_linalg.mlir); its precision
    mode (and so its tolerance) follows the model's float types, fp32 becoming tf32 where allowed."""
    with open(os.path.join(job_dir, LINALG_FILE)) as f:
        payload = f.read()
    return initial_params_for(analyze(payload, default_pipeline(chip).pre_schedule), chip, tf32)


def assemble(ptx_path: str, chip: str) -> None:
    """ptxas is the judge of the PTX; it is skipped only where CUDA's ptxas is not installed."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return
    done = subprocess.run([ptxas, f"-arch={chip}", ptx_path, "-o", os.devnull], capture_output=True, text=True)
    if done.returncode:
        raise PtxasError(f"ptxas -arch={chip} rejected kernels.ptx: {done.stderr.strip()[:2000]}")


def compile_iteration(job_dir: str, version: int, params: ScheduleParams) -> CompileResult:
    """Write v{version}/{transform.mlir, pass_pipeline.txt, gpu.mlir, kernels.ptx, config.json}.

    Idempotent: a version that already compiled returns its recorded result untouched. Bad schedules
    and lowering failures come back as a CompileResult with ok=False, the stage and the reason."""
    vdir = version_dir(job_dir, version)
    result_path = os.path.join(vdir, COMPILE_RESULT_FILE)
    if os.path.exists(result_path):
        with open(result_path) as f:
            return CompileResult.from_json(f.read())
    os.makedirs(vdir, exist_ok=True)
    started = time.perf_counter()
    result = CompileResult(version=version, ok=False, stage="schedule")
    try:
        _compile(job_dir, vdir, params, result)
        result.ok, result.stage = True, "done"
    except (ScheduleError, mlir.MlirError, HostComputeError, PtxasError) as e:
        result.failing_op = failing_kernel(job_dir, params, str(e))
        result.error = str(e).replace(vdir + os.sep, "")  # the schedule's diagnostics name "transform.mlir"
    result.compile_seconds = round(time.perf_counter() - started, 3)
    write_text(result_path, result.to_json(indent=2))
    return result


def failing_kernel(job_dir: str, params: ScheduleParams, error: str) -> int | None:
    """The anchor op of the kernel whose op a compile error's diagnostic points at (a line of
    model_linalg.mlir: the schedule is parsed from its file, so only the payload's locations read "-")."""
    lines = [int(n) for n in mlir.PAYLOAD_LINE.findall(error)]
    if not lines:
        return None
    with open(os.path.join(job_dir, LINALG_FILE)) as f:
        facts = analyze(f.read(), default_pipeline(params.chip, params.fuse_elementwise).pre_schedule)
    return next((k for line in lines if (k := kernel_of_line(line, facts, params)) is not None), None)


def _compile(job_dir: str, vdir: str, params: ScheduleParams, result: CompileResult) -> None:
    info = load_model_info(job_dir)
    with open(os.path.join(job_dir, LINALG_FILE)) as f:
        payload_text = f.read()
    pipeline = default_pipeline(params.chip, params.fuse_elementwise)
    write_text(os.path.join(vdir, "pass_pipeline.txt"), pipeline.to_text())
    facts = analyze(payload_text, pipeline.pre_schedule)
    transform_text, kernels = emit_transform(facts, params)
    transform_path = os.path.join(vdir, "transform.mlir")
    write_text(transform_path, transform_text)

    with mlir.context():
        result.stage = "transform"
        module = prepared_payload(payload_text, pipeline.pre_schedule)
        schedule = mlir.parse_file(transform_path)
        mlir.apply_transform(module, schedule)
        for k in reversed(warpgroup_matmuls(module)):  # a TF32 wgmma kernel's transpose of B, before it
            kernels.insert(k, Kernel(kernels[k].anchor, "copy", [TRANSPOSE_TILE, TRANSPOSE_ROWS, 1]))
        result.kernel_ops = [k.anchor for k in kernels]
        result.kernel_families = [k.family for k in kernels]
        mlir.run_pipeline(module, pipeline.post_schedule)
        mlir.run_on_contracting_kernels(module, pipeline.tensor_cores)
        if mlir.has_sequence(schedule, PIPELINE_SEQUENCE):
            mlir.apply_transform(module, schedule, PIPELINE_SEQUENCE)
            mlir.overlap_tiles_dead_in_k_loops(module, STAGED, K_LOOP)
            mlir.trim_k_loop_barriers(module, K_LOOP, COPIES_AHEAD)
        mlir.pad_tensor_core_tiles(module, padded_columns)
        mlir.large_shared_to_dynamic(module)
        mlir.sync_after_block_loops(module)
        mlir.reuse_reads(module)
        write_text(os.path.join(vdir, "gpu.mlir"), str(module))
        result.stage = "host-check"
        launches = LaunchSequence(module, info).read()
        merge_kernel_modules(module)
        result.stage = "lowering"
        by_name = {launch.kernel: kernel for launch, kernel in zip(launches.launches, kernels)}
        result.notes += mlir.merge_in_a_warp(module, {name for name, kernel in by_name.items() if kernel.warp_merge})
        result.notes += mlir.interleave_thread_columns(
            module, {name for name, kernel in by_name.items() if kernel.interleave_columns}, VECTOR_BYTES)
        mlir.workgroup_allocs_to_shared(module)
        mlir.scratch_to_stack(module)
        mlir.align_kernel_pointers(module)
        align_global_vector_accesses(module)
        mlir.tensor_maps_as_pointers(module)
        mlir.limit_registers(module, {name: kernel.min_blocks_per_sm for name, kernel in by_name.items()})
        if pipeline.fp_contract:
            mlir.allow_fp_contraction(module)
        if params.precision == "tf32":
            mlir.enable_tf32_mma(module)
        mlir.run_pipeline(module, pipeline.lowering)
        ptx = b"".join(mlir.ptx_of_binaries(module).values())
    ptx = stream_global_accesses(ptx.decode(), {name: k.cache_streaming for name, k in by_name.items()}).encode()
    ptx_path = os.path.join(vdir, "kernels.ptx")
    write_bytes(ptx_path, ptx)
    result.stage = "ptxas"
    assemble(ptx_path, params.chip)
    atol, rtol = TOLERANCES[params.precision]
    config = LaunchConfig(model_path=MODEL_FILE, chip=params.chip, precision=params.precision,
                          atol=atol, rtol=rtol, seed=info.seed, buffers=launches.buffers,
                          launches=launches.launches, outputs=launches.outputs)
    write_text(os.path.join(vdir, "config.json"), config.to_json(indent=2))
    launched = "".join(launch.to_json() for launch in launches.launches).encode()
    result.kernels_digest = hashlib.sha256(ptx + launched).hexdigest()
    result.kernel_count = len(launches.launches)
    result.ptx_bytes = len(ptx)
