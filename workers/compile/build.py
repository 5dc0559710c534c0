"""The one compile path, which is also the replay: a job's model_linalg.mlir and model_info.json and a
version's transform.mlir, pass_pipeline.txt and params.json -> its kernels (PTX), launch config and gpu.mlir.

compile_iteration writes the three files of the version and then builds from them; replay.py builds
again from a job folder alone and compares. Nothing else goes in: a step that is not in those files does
not exist. pass_pipeline.txt's steps run in order (passes/registry.run_step); at `farm-host-check` the host code is
final and its launches are read (host.LaunchSequence); the last step is MLIR's lowering to PTX, and
gpu.mlir is the module right before it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from workers.compile import kernel_marks, mlir
from workers.compile.passes import registry
from workers.compile.host import LaunchSequence
from workers.compile.pipeline import HOST_CHECK, PassPipeline
from workers.layout import LINALG_FILE, MODEL_FILE, MODEL_INFO_FILE
from workers.records import TOLERANCES, CompileResult, LaunchConfig, ModelInfo, ScheduleParams

PARAMS_FILE = "params.json"
PIPELINE_FILE = "pass_pipeline.txt"
TRANSFORM_FILE = "transform.mlir"


@dataclass
class Build:
    ptx: bytes
    config: LaunchConfig
    gpu_mlir: str  # the module right before the lowering
    kernel_ops: list[int]  # per launch, the anchor op of the schedule that made its kernel
    kernel_families: list[str]
    notes: list[str]


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def build(job_dir: str, vdir: str, result: CompileResult | None = None) -> Build:
    """Run the version's steps; `result.stage` follows them (transform, host-check, lowering).
    mlir.MlirError (and host.HostComputeError) where a step fails."""
    result = result or CompileResult(version=-1, ok=False, stage="transform")
    info = ModelInfo.from_json(_read(os.path.join(job_dir, MODEL_INFO_FILE)))
    params = ScheduleParams.from_json(_read(os.path.join(vdir, PARAMS_FILE)))
    *steps, lowering = PassPipeline.from_text(_read(os.path.join(vdir, PIPELINE_FILE))).steps
    notes: list[str] = []
    launches = None
    with mlir.context():
        result.stage = "transform"
        module = mlir.parse(_read(os.path.join(job_dir, LINALG_FILE)), LINALG_FILE)
        schedule = mlir.parse_file(os.path.join(vdir, TRANSFORM_FILE))
        for step in steps:
            if step == HOST_CHECK:
                result.stage = "host-check"
                launches = LaunchSequence(module, info).read()
                if launches.shared_bytes:
                    notes.append(f"memory plan: {launches.shared_bytes / 2**20:.1f} MiB of temporaries live in the "
                                 "memory of temporaries dead by then")
                result.stage = "lowering"
            else:
                notes += registry.run_step(step, module, schedule)
        if launches is None:
            raise mlir.MlirError(f"{PIPELINE_FILE} has no `{HOST_CHECK}` step: the launches were never read")
        gpu_mlir = str(module)
        kernels = mlir.launched_kernels(module)
        unmarked = [mlir.symbol(k) for k in kernels if kernel_marks.ANCHOR not in k.attributes]
        if unmarked:
            raise mlir.MlirError(f"kernels {unmarked} carry no {kernel_marks.ANCHOR}: {TRANSFORM_FILE} annotates "
                                 "each launch with the op whose schedule it is")
        anchors = [mlir.ir.IntegerAttr(k.attributes[kernel_marks.ANCHOR]).value for k in kernels]
        families = [mlir.ir.StringAttr(k.attributes[kernel_marks.FAMILY]).value for k in kernels]
        mlir.run_pipeline(module, lowering)
        ptx = b"".join(mlir.ptx_of_binaries(module).values())
    atol, rtol = TOLERANCES[params.precision]
    config = LaunchConfig(model_path=MODEL_FILE, chip=params.chip, precision=params.precision, atol=atol, rtol=rtol,
                          seed=info.seed, buffers=launches.buffers, launches=launches.launches,
                          outputs=launches.outputs, loops=launches.loops)
    return Build(ptx, config, gpu_mlir, anchors, families, notes)

