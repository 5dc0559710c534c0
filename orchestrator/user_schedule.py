"""A schedule the user starts a job from (submit --schedule PARAMS.json) must be the job's: its fields of
their types and its chip the job's, checked at submit; its precision (the correctness tolerance) the
model's and every op it names one of the model's ops, checked by the frontend task once the model is
lowered. The compile stage would otherwise judge an fp32 model with f16's tolerance, or pass over an op."""
from __future__ import annotations

import os

from workers.layout import LINALG_FILE
from workers.records import ScheduleParams


def read(path: str, chip: str) -> ScheduleParams:
    """The schedule in `path` for a job on `chip`; ValueError (or OSError) with every field that is wrong."""
    with open(path) as f:
        params = ScheduleParams.from_user_json(f.read())
    if params.chip != chip:
        raise ValueError(f"its chip is {params.chip} but the job's is {chip} (--chip): make them the same")
    return params


def mismatches(params: ScheduleParams, v0: ScheduleParams, job_dir: str) -> list[str]:
    """What does not fit the lowered model in job_dir, whose own v0 schedule is `v0`."""
    from workers.compile.analysis import analyze

    problems = []
    if params.precision != v0.precision:
        problems.append(f"its precision is {params.precision} but the model computes in {v0.precision} (its "
                        f"tolerance); set \"precision\": \"{v0.precision}\"")
    with open(os.path.join(job_dir, LINALG_FILE)) as f:
        ops = analyze(f.read(), params.fuse_elementwise)
    known = {op.info.index for op in ops}
    unknown = sorted({s.op_index for s in params.ops} - known)
    if unknown:
        problems.append(f"op {', '.join(map(str, unknown))} is not an op of the model (its ops are 0..{len(ops) - 1})")
    return problems
