"""The compiler stage rejects any result that leaves compute on the host."""
from __future__ import annotations

from pathlib import Path

import pytest

from workers.compile import mlir
from workers.compile.passes import registry
from workers.compile.analysis import analyze
from workers.compile.host import HostComputeError, LaunchSequence, check_host
from workers.compile.pipeline import HOST_CHECK, pipeline_for
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
    """A host loop may only launch kernels (a recurrent layer's time steps); one that loads and stores
    elements is compute on the host."""
    with mlir.context():
        module = mlir.parse(HOST_LOOP_IR, "test IR")
        with pytest.raises(HostComputeError) as err:
            check_host(mlir.main_func(module))
    assert "memref.load in a host loop x1" in str(err.value) and "memref.copy x1" in str(err.value)


def test_schedule_that_leaves_an_op_unmapped_is_rejected(tmp_path):
    """Drop one kernel from a real schedule: its op stays on the host as a loop nest."""
    job = tmp_path / "mlp"
    info = lower_model(str(ZOO / "mlp.py"), str(job))
    payload = (job / "model_linalg.mlir").read_text()
    facts = analyze(payload)
    transform, kernels = emit_transform(facts, initial_params_for(facts))
    dropped = kernels[-1].anchor  # the last group's kernels: its split matmul's partials, then its own
    ids = [i for i, kernel in enumerate(kernels) if kernel.anchor == dropped]
    names = [f"g{dropped}_", f"g{dropped}p_", *(f"{h}{i} " for i in ids for h in ("kernel", "launch"))]
    kept, dropping = [], None  # dropping: the indentation of a dropped op's region, until it closes
    for line in transform.splitlines():
        indent = len(line) - len(line.lstrip())
        if dropping is not None:
            dropping = None if indent == dropping and line.lstrip().startswith("}") else dropping
        elif any(f"%{name}" in line for name in names):
            dropping = indent if line.endswith("{") else None
        else:
            kept.append(line)
    steps = pipeline_for("sm_90a").steps
    with mlir.context():
        module = mlir.parse(payload, "model_linalg.mlir")
        schedule = mlir.parse("\n".join(kept), "transform.mlir")
        for step in steps[:steps.index(HOST_CHECK)]:
            registry.run_step(step, module, schedule)
        with pytest.raises(HostComputeError) as err:
            LaunchSequence(module, ModelInfo.from_json(info.to_json())).read()
    assert "compute on the host" in str(err.value) and "linalg." in str(err.value)


TENSOR_MAP_IR = """
func.func @forward(%a: memref<128x256xf16>) {{
  %c64 = arith.constant 64 : index
  %view = memref.subview %a[64, 0] [64, 256] [1, 1] : memref<128x256xf16> to {view}
  %unranked = memref.cast %view : {view} to memref<*xf16>
  %map = nvgpu.tma.create.descriptor %unranked box[%c64, %c64] : memref<*xf16> -> !nvgpu.tensormap.descriptor<
    tensor = memref<64x64xf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = {oob}, interleave = none>
  return
}}
"""
VIEW = "memref<64x256xf16, strided<[256, 1], offset: 16384>>"


def host_buffers(oob: str) -> list:
    with mlir.context():
        module = mlir.parse(TENSOR_MAP_IR.format(view=VIEW, oob=oob), "test IR")
        info = ModelInfo(name="m", model_path="m.py", ops=[], input_shapes=[[128, 256]], input_dtypes=["f16"],
                         weight_names=[], output_shapes=[], export_seconds=0.0)
        return LaunchSequence(module, info).read().buffers


def test_a_tensor_map_on_the_host_is_a_buffer_the_measure_worker_encodes():
    """The descriptor of a view of an input: the view's shape, strides and offset, the type's box and swizzle."""
    (a, tensor_map) = host_buffers(oob="zero")
    assert (tensor_map.role, tensor_map.shape) == ("tensor_map", [128])
    m = tensor_map.tensor_map
    assert (m.buffer, m.dtype, m.shape, m.strides, m.offset, m.box, m.swizzle) == \
        (a.name, "f16", [64, 256], [256, 1], 16384, [64, 64], 128)


def test_a_tensor_map_the_worker_does_not_encode_is_rejected():
    with pytest.raises(HostComputeError, match="with zeros out of bounds and no interleave"):
        host_buffers(oob="nan")
