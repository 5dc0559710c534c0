"""Warm torch.compile's caches for one job's model, so that a later measurement of it compiles nothing.

    python -m workers.measure.warm_peer JOB_DIR

benchmarks/kernelbench.py runs many of these at once (Inductor compiles on the CPU, 20-40 s a model)
before it times the problems one at a time; Inductor's on-disk caches carry the work over.
"""
from __future__ import annotations

import os
import sys

from workers.layout import version_dir
from workers.measure.launch import model_file
from workers.records import LaunchConfig


def warm(job_dir: str) -> None:
    import torch

    from workers.model_loader import load_model

    with open(os.path.join(version_dir(job_dir, 0), "config.json")) as f:
        config = LaunchConfig.from_json(f.read())
    # Inductor specializes on the inputs' shapes and dtypes, not their values: zeros made on the GPU (valid indices)
    model, inputs = load_model(model_file(job_dir, config), config.seed, input_values=False)
    # the measure worker's settings, which Inductor's cache keys include
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = config.precision == "tf32"
    fast = torch.compile(model.cuda())
    with torch.no_grad():
        fast(*[torch.zeros_like(x, device="cuda") if isinstance(x, torch.Tensor) else x for x in inputs])
    torch.cuda.synchronize()


if __name__ == "__main__":
    warm(sys.argv[1])
