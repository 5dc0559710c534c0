"""Names in a job folder that the stages share (the output contract's file names)."""
from __future__ import annotations

import os

MODEL_FILE = "model.py"  # the model's source, copied into the job folder by the frontend
LINALG_FILE = "model_linalg.mlir"
MODEL_INFO_FILE = "model_info.json"
COMPILE_RESULT_FILE = "compile_result.json"
REFERENCE_FILE = "reference_timing.json"  # eager's and torch.compile's times, measured once per job and GPU


def version_dir(job_dir: str, version: int) -> str:
    return os.path.join(job_dir, f"v{version}")
