"""Run a model_linalg.mlir on the CPU with MLIR's execution engine (torch-mlir's bundled one), for tests
that check what the frontend's lowering means against PyTorch on a machine without a GPU: bufferized,
lowered to loops and to LLVM, called with the model's inputs and weights.

It runs in a process of its own: with the compile stage's MLIR bindings loaded beside torch-mlir's, the JIT
resolved garbled symbol names.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from workers.measure.launch import SCALAR_TYPES

BUFFERIZE = ("builtin.module(func.func(linalg-generalize-named-ops),one-shot-bufferize{bufferize-function-boundaries "
             "function-boundary-type-conversion=identity-layout-map},"
             "buffer-results-to-out-params{modify-public-functions=true})")
# vector ops too: a payload that a schedule's steps transformed (tests of a tiling recipe) has vector transfers
LOWER = ("builtin.module(func.func(convert-linalg-to-loops),convert-vector-to-scf,expand-strided-metadata,lower-affine,"
         "convert-scf-to-cf,convert-vector-to-llvm,finalize-memref-to-llvm,convert-math-to-llvm,convert-math-to-libm,"
         "convert-arith-to-llvm,convert-ub-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)")


def lowering_and_model_outputs(job: Path, model_file: Path) -> tuple[list[np.ndarray], list[torch.Tensor]]:
    """The job's model_linalg.mlir run on the CPU on the model's inputs and weights (its seed's), and the
    model's own outputs on them, flattened."""
    from workers.model_loader import load_model

    info = json.loads((job / "model_info.json").read_text())
    model, inputs = load_model(str(model_file), info["seed"])
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    got = run_linalg((job / "model_linalg.mlir").read_text(), [*inputs, *(state[n] for n in info["weight_names"])],
                     info["output_shapes"])
    with torch.no_grad():
        return got, torch.utils._pytree.tree_leaves(model(*inputs))


def run_linalg(text: str, args: list[torch.Tensor], output_shapes: list[list[int]]) -> list[np.ndarray]:
    """The outputs of `forward` in `text` on `args` (inputs, then weights, as the frontend lifts them)."""
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "model.mlir").write_text(text)
        np.savez(Path(folder, "args.npz"), *[a.detach().numpy() for a in args])
        np.save(Path(folder, "shapes.npy"), np.array(output_shapes, dtype=object), allow_pickle=True)
        subprocess.run([sys.executable, "-m", "tests.cpu_reference", folder], check=True, timeout=300,
                       cwd=Path(__file__).parent.parent)
        outputs = np.load(Path(folder, "outputs.npz"))
        return [outputs[f"arr_{i}"] for i in range(len(output_shapes))]


def _run(text: str, arrays: list[np.ndarray], output_shapes: list) -> list[np.ndarray]:
    from torch_mlir import ir
    from torch_mlir.dialects import linalg
    from torch_mlir.execution_engine import ExecutionEngine
    from torch_mlir.passmanager import PassManager
    from torch_mlir.runtime.np_to_memref import get_ranked_memref_descriptor

    with ir.Context():
        module = ir.Module.parse(text)
        forward = next(op for op in module.body.operations if op.operation.name == "func.func")
        result_types = [str(ir.RankedTensorType(t).element_type)
                        for t in ir.FunctionType(ir.TypeAttr(forward.attributes["function_type"]).value).results]
        for op in module.body.operations:
            op.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        PassManager.parse(BUFFERIZE).run(module.operation)
        copies = []
        module.operation.walk(lambda op: (copies.append(op) if op.name == "memref.copy" else None)
                              or ir.WalkResult.ADVANCE)
        for op in copies:  # memref.copy lowers to a call of MLIR's runtime library, which is not installed
            with ir.InsertionPoint(op), op.location:
                linalg.copy(op.operands[0], outs=[op.operands[1]])
            op.erase()
        PassManager.parse(LOWER).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2, shared_libs=[])
        arrays = [np.ascontiguousarray(a) for a in arrays]
        outputs = [np.zeros(shape, SCALAR_TYPES[kind]) for shape, kind in zip(output_shapes, result_types)]
        engine.invoke("forward", *[ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a)))
                                   for a in arrays + outputs])
        return outputs


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    saved = np.load(folder / "args.npz")
    results = _run((folder / "model.mlir").read_text(), [saved[f"arr_{i}"] for i in range(len(saved.files))],
                   list(np.load(folder / "shapes.npy", allow_pickle=True)))
    np.savez(folder / "outputs.npz", *results)
