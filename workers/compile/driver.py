"""One iteration vN of one job: the schedule's files of the version (params.json, transform.mlir,
pass_pipeline.txt), then the build from them alone (build.py), then every artifact of the compile half of
the output contract."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time

from workers.atomic import write_bytes, write_text
from workers.compile import mlir
from workers.compile.analysis import analyze
from workers.compile.build import PARAMS_FILE, PIPELINE_FILE, TRANSFORM_FILE, build
from workers.compile.host import HostComputeError
from workers.compile.pipeline import PIPELINE_COPIES_SEQUENCE, pipeline_for
from workers.compile.schedule import ScheduleError, complete_params, emit_transform, initial_params_for, kernel_of_line
from workers.layout import COMPILE_RESULT_FILE, LINALG_FILE, version_dir
from workers.records import CompileResult, ScheduleParams


class PtxasError(Exception):
    """ptxas refused the generated PTX."""


def _payload(job_dir: str) -> str:
    with open(os.path.join(job_dir, LINALG_FILE)) as f:
        return f.read()


def initial_params(job_dir: str, chip: str = "sm_90a", tf32: bool = False) -> ScheduleParams:
    """The v0 operator-aware schedule of a lowered model (job_dir/model_linalg.mlir); its precision
    mode (and so its tolerance) follows the model's float types, fp32 becoming tf32 where allowed."""
    return initial_params_for(analyze(_payload(job_dir)), chip, tf32)


def assemble(ptx_path: str, chip: str) -> None:
    """ptxas is the judge of the PTX; it is skipped only where CUDA's ptxas is not installed."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return
    done = subprocess.run([ptxas, f"-arch={chip}", ptx_path, "-o", os.devnull], capture_output=True, text=True)
    if done.returncode:
        raise PtxasError(f"ptxas -arch={chip} rejected kernels.ptx: {done.stderr.strip()[:2000]}")


def compile_iteration(job_dir: str, version: int, params: ScheduleParams) -> CompileResult:
    """Write v{version}/{params.json, transform.mlir, pass_pipeline.txt, gpu.mlir, kernels.ptx, config.json}.

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
        write_version(job_dir, vdir, params)
        _compile(job_dir, vdir, params, result)
        result.ok, result.stage = True, "done"
    except (ScheduleError, mlir.MlirError, HostComputeError, PtxasError) as e:
        result.failing_op = failing_kernel(job_dir, params, str(e))
        result.error = str(e).replace(vdir + os.sep, "")  # the schedule's diagnostics name "transform.mlir"
    result.compile_seconds = round(time.perf_counter() - started, 3)
    write_text(result_path, result.to_json(indent=2))
    return result


def write_version(job_dir: str, vdir: str, params: ScheduleParams) -> None:
    """The version's record: params.json (with every kernel's schedule, v0's where `params` has none),
    transform.mlir (ScheduleError where the params give no valid kernel) and pass_pipeline.txt."""
    write_text(os.path.join(vdir, PARAMS_FILE), params.to_json(indent=2))  # kept where the schedule fails
    facts = analyze(_payload(job_dir), params.fuse_elementwise)
    params = complete_params(facts, params)
    write_text(os.path.join(vdir, PARAMS_FILE), params.to_json(indent=2))
    transform_text, _ = emit_transform(facts, params)
    pipeline = pipeline_for(params.chip, params.fuse_elementwise, f"@{PIPELINE_COPIES_SEQUENCE}(" in transform_text)
    write_text(os.path.join(vdir, TRANSFORM_FILE), transform_text)
    write_text(os.path.join(vdir, PIPELINE_FILE), pipeline.to_text())


def failing_kernel(job_dir: str, params: ScheduleParams, error: str) -> int | None:
    """The anchor op of the kernel whose op a compile error's diagnostic points at (a line of
    model_linalg.mlir: the schedule is parsed from its file, so only the payload's locations read "-")."""
    lines = [int(n) for n in mlir.PAYLOAD_LINE.findall(error)]
    if not lines:
        return None
    facts = analyze(_payload(job_dir), params.fuse_elementwise)
    return next((k for line in lines if (k := kernel_of_line(line, facts, params)) is not None), None)


def _compile(job_dir: str, vdir: str, params: ScheduleParams, result: CompileResult) -> None:
    built = build(job_dir, vdir, result)
    result.notes += built.notes
    result.kernel_ops, result.kernel_families = built.kernel_ops, built.kernel_families
    write_text(os.path.join(vdir, "gpu.mlir"), built.gpu_mlir)
    ptx_path = os.path.join(vdir, "kernels.ptx")
    write_bytes(ptx_path, built.ptx)
    result.stage = "ptxas"
    assemble(ptx_path, params.chip)
    write_text(os.path.join(vdir, "config.json"), built.config.to_json(indent=2))
    launched = "".join(launch.to_json() for launch in built.config.launches).encode()
    result.kernels_digest = hashlib.sha256(built.ptx + launched).hexdigest()
    result.kernel_count = len(built.config.launches)
    result.ptx_bytes = len(built.ptx)
