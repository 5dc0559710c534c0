"""The compiler stage rejects any result that leaves compute on the host."""
from __future__ import annotations

from pathlib import Path

import pytest

from workers.compile import mlir
from workers.compile.analysis import analyze
from workers.compile.host import HostComputeError, LaunchSequence, check_host
from workers.compile.pipeline import default_pipeline
from workers.compile.schedule import emit_transform, initial_params_for
from workers.frontend import lower_model
from workers.records import ModelInfo

ZOO = Path(__file__).parent / "data" / "zoo"

HOST_LOOP_IR = """
func.func @forward(%a: memref<16xf32>, %b: memref<16xf32>) -> memref<16xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %out = memref.alloc() : memref<16xf32>
  scf.for %i = %c0 to %c16 step %c1 {
    %x = memref.load %a[%i] : memref<16xf32>
    memref.store %x, %out[%i] : memref<16xf32>
  }
  memref.copy %b, %out : memref<16xf32> to memref<16xf32>
  return %out : memref<16xf32>
}
"""


def test_host_loop_and_copy_are_rejected_with_their_names():
    with mlir.context():
        module = mlir.parse(HOST_LOOP_IR, "test IR")
        with pytest.raises(HostComputeError) as err:
            check_host(mlir.main_func(module))
    assert "scf.for x1" in str(err.value) and "memref.copy x1" in str(err.value)


def test_schedule_that_leaves_an_op_unmapped_is_rejected(tmp_path):
    """Drop one kernel from a real schedule: its op stays on the host as a loop nest."""
    job = tmp_path / "mlp"
    info = lower_model(str(ZOO / "mlp.py"), str(job))
    payload = (job / "model_linalg.mlir").read_text()
    pipeline = default_pipeline("sm_90a")
    facts = analyze(payload, pipeline.pre_schedule)
    transform, kernels = emit_transform(facts, initial_params_for(facts))
    dropped = kernels[-1].anchor  # the last group's kernels: its split matmul's partials, then its own
    ids = [i for i, kernel in enumerate(kernels) if kernel.anchor == dropped]
    names = [f"g{dropped}_", f"g{dropped}p_", *(f"{h}{i} " for i in ids for h in ("kernel", "launch"))]
    kept = [line for line in transform.splitlines() if not any(f"%{name}" in line for name in names)]
    with mlir.context():
        module = mlir.parse(payload, "model_linalg.mlir")
        mlir.run_pipeline(module, pipeline.pre_schedule)
        mlir.apply_transform(module, mlir.parse("\n".join(kept), "transform.mlir"))
        mlir.run_pipeline(module, pipeline.post_schedule)
        with pytest.raises(HostComputeError) as err:
            LaunchSequence(module, ModelInfo.from_json(info.to_json())).read()
    assert "compute on the host" in str(err.value) and "linalg." in str(err.value)
