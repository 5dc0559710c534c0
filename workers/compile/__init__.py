"""Compile stage: schedule parameters -> transform.mlir + pass_pipeline.txt -> PTX and config.json.

Public API: `initial_params`, `apply_edit`, `compile_iteration`.
"""
from workers.compile.driver import compile_iteration, initial_params
from workers.compile.schedule import ScheduleError, apply_edit

__all__ = ["compile_iteration", "initial_params", "apply_edit", "ScheduleError"]
