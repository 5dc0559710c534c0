"""Frontend: a KernelBench-format model file -> model_linalg.mlir (linalg on tensors), once per job.

Parameters and buffers are lifted to function arguments (after the model's inputs) so the IR stays
small whatever the weights weigh; the measure worker rebuilds their values from the model file with
the same seed. torch-mlir's bundled MLIR is used only here, and the IR is handed on as text.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from workers.decompositions import DecompositionLimit, decomposition_table
from workers.model_loader import STATE_BUFFERS, ModelLoadError, load_model, tensor_inputs
from workers.records import ModelInfo
from workers.recurrent import RecurrentError, lower_scans, scanned_layers, torch_backend
from workers.atomic import write_text
from workers.layout import LINALG_FILE, MODEL_FILE, MODEL_INFO_FILE
from workers.process import MemoryLimitExceeded, run_in_group


class FrontendError(Exception):
    """A model that cannot be loaded or exported; the message is one paragraph for the user."""


class _Lifted(nn.Module):
    """The model as a pure function of (tensor inputs..., parameters and buffers...); the inputs that are
    Python numbers are constants of the function, at their place in the model's argument list. Buffers that
    were plain tensor attributes (model_loader.STATE_BUFFERS) are handed over as copies, which forward may
    write."""

    def __init__(self, model: nn.Module, state_names: list[str], inputs: list):
        super().__init__()
        # torch-mlir's importer finds a buffer's value in the state dict, which a non-persistent buffer (a
        # BERT's position_ids) is not in; it is an input of the function all the same
        for module in model.modules():
            module._non_persistent_buffers_set.clear()
        self.model = model
        self.state_names = state_names
        self.inputs = inputs  # None where a tensor argument goes
        self.n_inputs = sum(x is None for x in inputs)
        self.written = getattr(model, STATE_BUFFERS, frozenset())

    def forward(self, *args):
        state = {name: value.clone() if name in self.written else value
                 for name, value in zip(self.state_names, args[self.n_inputs:])}
        tensors = iter(args[: self.n_inputs])
        call = [next(tensors) if x is None else x for x in self.inputs]
        return torch.func.functional_call(self.model, state, tuple(call))


def _failing_op(message: str) -> str:
    for pattern in (r"torch\.aten\.[\w.]+", r"aten::[\w.]+", r"failed to legalize operation '([\w.]+)'"):
        found = re.search(pattern, message)
        if found:
            return found.group(found.lastindex or 0)
    return "not named by torch-mlir"


# torch-mlir's conversions out of the torch dialect, as its linalg backend runs them (each a partial one)
TORCH_CONVERSIONS = ("builtin.module(func.func(convert-torch-to-tmtensor,convert-torch-to-linalg,convert-torch-to-scf,"
                     "convert-torch-to-arith,convert-torch-to-tensor))")


def unlowered_ops(model: nn.Module, inputs: list) -> list[str]:
    """The aten ops that torch-mlir's conversions leave, each with the model source line it comes from
    ("torch.aten.fft_fft at model.py:8"): the op at fault, where the failed full lowering names whatever it
    met first (a torch.constant.int that only the unlowered op used)."""
    from torch_mlir import fx, ir as tm_ir
    from torch_mlir.compiler_utils import OutputType
    from torch_mlir.passmanager import PassManager

    program, _, has_recurrent_layers = _export(model, inputs)
    with torch.no_grad():  # recurrent layers as scans: unrolled, a long one took minutes before the diagnosis
        module = torch_backend(program, decomposition_table())[0] if has_recurrent_layers else fx.export_and_import(
            program, output_type=OutputType.TORCH, func_name="forward", decomposition_table=decomposition_table())
    with module.context:
        PassManager.parse(TORCH_CONVERSIONS).run(module.operation)
    found = []

    def visit(op):
        if op.name.startswith("torch.aten."):
            where = re.search(r'"([^"]+)":(\d+)', str(op.location))
            found.append(op.name + (f" at {os.path.basename(where[1])}:{where[2]}" if where else ""))
        return tm_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return list(dict.fromkeys(found))


def _strip_asserts(module) -> None:
    """torch-mlir guards some ops with cf.assert (e.g. reciprocal of zero). A kernel cannot report
    them, and their side effect blocks elementwise fusion, so they are dropped."""
    from torch_mlir import ir as tm_ir

    asserts = []

    def collect(op):
        if op.name == "cf.assert":
            asserts.append(op)
        return tm_ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    for op in asserts:
        op.erase()


_RESOURCES = re.compile(r"\n\{-#\s*dialect_resources:.*#-\}\s*$", re.S)
_BLOB = re.compile(r'^\s*([\w.]+): "0x([0-9A-Fa-f]{8})([0-9A-Fa-f]*)"', re.M)


def inline_resources(text: str) -> str:
    """torch-mlir writes a non-splat constant (an index tensor of an as_strided window, a mask) as
    dense_resource<blob>, which the compile stage cannot read back into a launch's constant buffer: each
    becomes dense<"0x..."> with the blob's bytes (after its 4-byte alignment prefix), the same values."""
    found = _RESOURCES.search(text)
    if not found:
        return text
    blobs = {name: data for name, _, data in _BLOB.findall(found.group(0))}
    body = text[:found.start()] + "\n"
    return re.sub(r"dense_resource<([\w.]+)>", lambda m: f'dense<"0x{blobs[m.group(1)]}">', body)


def _user_line(trace: str) -> str:
    """ " (FILE:LINE: code)" of the last line of a traceback's text that is the model's (not this package's,
    not torch's), else ""."""
    ours = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in re.findall(r'File "([^"]+)", line (\d+), in \w+\n\s*(.+)', trace)
              if not f[0].startswith((ours, os.path.dirname(torch.__file__)))]
    return f" ({os.path.basename(frames[-1][0])}:{frames[-1][1]}: {frames[-1][2].strip()})" if frames else ""


def _refuse_data_dependent_shapes(program) -> None:
    """FrontendError where a tensor's shape depends on the input's values (x[mask], nonzero, masked_select,
    unique): the compile stage needs every shape when it compiles, and torch-mlir's lowering of such a
    program grew past 17 GB in two minutes instead of failing. The message names the op and its source line."""
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and not all(isinstance(d, int) for d in value.shape):
            raise FrontendError(f"{node.target} makes a tensor of shape {list(value.shape)}, which depends on the "
                                f"input's values{_user_line(node.meta.get('stack_trace') or '')}: every shape must be known when the model compiles; a "
                                "form of fixed shape lowers (torch.where(mask, x, 0) in place of x[mask])")


def _refuse_random_ops(program) -> None:
    """FrontendError where forward draws random numbers (torch.randn of an initial state, dropout in training):
    every call then computes something else, which no compiled kernel reproduces (and torch-mlir lowers the
    generator's state to code on the host). The message names the op and its source line."""
    for node in program.graph.nodes:
        if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()) and not _draws_nothing(node):
            raise FrontendError(f"forward draws random numbers ({node.target}{_user_line(node.meta.get('stack_trace') or '')}):"
                                " each call computes something else, which compiled kernels cannot reproduce; draw the "
                                "random tensor in get_inputs() and pass it to forward instead")


def _draws_nothing(node) -> bool:
    """An op tagged as drawing random numbers that draws none here: a dropout of a model in eval mode (the
    loader's) is traced as aten.dropout(x, p, train=False), an RReLU as aten.rrelu(..., training=False), an
    attention without dropout passes dropout_p=0."""
    schema = node.target._schema.arguments
    given = {a.name: node.args[i] if i < len(node.args) else node.kwargs.get(a.name, a.default_value)
             for i, a in enumerate(schema)}
    return given.get("train") is False or given.get("training") is False or given.get("dropout_p", 1) == 0 \
        or given.get("p", 1) == 0


def _export(model: nn.Module, inputs: list):
    """(torch.export program of the model lifted to a function of its inputs and state, the state's names,
    whether recurrent layers ran as scans: workers/recurrent.py); FrontendError for what cannot be traced."""
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = list(state)
    lifted = _Lifted(model, names, [None if isinstance(x, torch.Tensor) else x for x in inputs])
    with torch.no_grad(), scanned_layers(model) as has_recurrent_layers:
        try:
            program = torch.export.export(lifted, (*tensor_inputs(inputs), *[state[n].detach() for n in names]))
        except GuardOnDataDependentSymNode as e:
            raise FrontendError(f"forward decides in Python on a tensor's value{_user_line(str(e))}, which cannot be "
                                "traced: the ops a model runs must not depend on its inputs' values (torch.where "
                                "chooses per element)") from None
        except RecurrentError as e:
            raise FrontendError(str(e)) from None
    _refuse_data_dependent_shapes(program)
    _refuse_random_ops(program)
    return program, names, has_recurrent_layers


def export_linalg(model: nn.Module, inputs: list) -> tuple[str, list[str], list[list[int]]]:
    """(IR text, lifted state names, output shapes). `inputs`: tensors and Python numbers."""
    from torch_mlir import fx
    from torch_mlir.compiler_utils import OutputType

    program, names, has_recurrent_layers = _export(model, inputs)
    with torch.no_grad():
        try:
            if has_recurrent_layers:
                module = lower_scans(program, decomposition_table())
            else:
                module = fx.export_and_import(program, output_type=OutputType.LINALG_ON_TENSORS, func_name="forward",
                                              decomposition_table=decomposition_table())
        except DecompositionLimit as e:
            raise FrontendError(str(e)) from None
    _strip_asserts(module)
    func = next(op for op in module.body.operations if op.operation.name == "func.func")
    outputs = [list(t.shape) for t in func.type.results]
    return inline_resources(str(module)), names, outputs


@contextlib.contextmanager
def _stderr_to(file):
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def lowered_before(path: Path, job_dir: str, seed: int) -> ModelInfo | None:
    """The job's recorded lowering, if it was made from this very source with this seed: the model is
    lowered once per job, and a re-delivered or resumed frontend task reuses it."""
    info_path, copy_path = os.path.join(job_dir, MODEL_INFO_FILE), os.path.join(job_dir, MODEL_FILE)
    if not (os.path.exists(info_path) and os.path.exists(copy_path) and os.path.exists(os.path.join(job_dir, LINALG_FILE))):
        return None
    with open(info_path) as f:
        info = ModelInfo.from_json(f.read())
    same_source = Path(copy_path).read_text() == path.read_text()
    return info if same_source and info.seed == seed else None


def lower_model(model_path: str, job_dir: str, seed: int = 0) -> ModelInfo:
    """Write job_dir/{model_linalg.mlir, model_info.json, model.py}; return the ModelInfo."""
    path = Path(model_path).resolve()
    if path.is_file() and (done := lowered_before(path, job_dir, seed)):
        return done
    try:
        model, inputs = load_model(str(path), seed, input_values=False)
    except ModelLoadError as e:
        raise FrontendError(str(e)) from None
    started = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as diagnostics:
        try:
            with _stderr_to(diagnostics):  # MLIR prints its diagnostics (the failing op) to fd 2
                text, names, outputs = export_linalg(model, inputs)
        except FrontendError as e:  # refused before torch-mlir ran, with the reason
            raise FrontendError(f"{path.name}: {e}") from None
        except Exception as e:  # torch.export and torch-mlir raise many types; all mean "cannot export"
            diagnostics.seek(0)
            errors = [line for line in diagnostics.read().splitlines() if "error:" in line]
            cause = (errors[0].split("error:", 1)[1].strip() if errors
                     else (str(e).strip().splitlines() or [type(e).__name__])[0])
            try:
                with _stderr_to(diagnostics):
                    culprits = ", ".join(unlowered_ops(model, inputs))
            except Exception:  # the model does not even import to the torch dialect: the first error says why
                culprits = ""
            raise FrontendError(
                f"{path.name}: torch-mlir could not lower the model to linalg-on-tensors; the failing op is "
                f"{culprits or _failing_op(chr(10).join(errors) + str(e))} ({type(e).__name__}: {cause[:300]}). "
                "Rewrite that op with supported PyTorch ops or leave this model out; the other models of the "
                "submission go on.") from None
    seconds = time.perf_counter() - started
    from workers.compile.analysis import analyze
    from workers.compile.mlir import MlirError

    info = ModelInfo(
        name=path.stem, model_path=str(path), ops=[],
        input_shapes=[list(t.shape) for t in tensor_inputs(inputs)],
        input_dtypes=[str(t.dtype).replace("torch.", "") for t in tensor_inputs(inputs)],
        weight_names=names, output_shapes=outputs, export_seconds=round(seconds, 3), seed=seed)
    try:
        info.ops = [f.info for f in analyze(text)]
    except MlirError as e:
        raise FrontendError(f"{path.name}: {_unparsed_op(str(e))}") from None
    os.makedirs(job_dir, exist_ok=True)
    # the job folder carries its own copy of the model, so a GPU node needs nothing else to measure it
    write_text(os.path.join(job_dir, MODEL_FILE), path.read_text())
    write_text(os.path.join(job_dir, LINALG_FILE), text)
    write_text(os.path.join(job_dir, MODEL_INFO_FILE), info.to_json(indent=2))
    return info


def _unparsed_op(error: str) -> str:
    """What to say where the compile stage cannot read the lowered model: an op of a dialect these MLIR
    bindings lack (torch-mlir's tm_tensor: sort, scatter, attention) named as such, else the parser's error."""
    found = re.search(r"Dialect `(\w+)' not found for custom op '([\w.]+)'", error)
    if not found:
        return f"the lowered model cannot be read by the compile stage: {error.splitlines()[0][:300]}"
    dialect, op = found.groups()
    return (f"torch-mlir lowered part of the model to {op}, an op of its own {dialect} dialect, which no MLIR "
            "pass of this compile stage lowers (an index_put with integer indices, x[rows] = v, and scatters other "
            "than along one dim become tm_tensor.scatter; sort, topk, cumsum, scatter and index_add along a dim and "
            "boolean-mask assignment are decomposed here): rewrite that part with other PyTorch ops or leave this model out; the other models "
            "of the submission go on")


@dataclass(frozen=True)
class LoweringLimits:
    """What one model's lowering may take. torch-mlir has needed over 23 GB for one large model: past these
    the lowering fails once, with the reason, instead of holding a worker or the machine."""

    seconds: float = 900
    memory_gb: float = 10


def lower_model_bounded(model_path: str, job_dir: str, seed: int = 0,
                        limits: LoweringLimits = LoweringLimits()) -> ModelInfo:
    """lower_model in a child process (python -m workers.frontend) held to `limits`."""
    path = Path(model_path).resolve()
    if path.is_file() and (done := lowered_before(path, job_dir, seed)):
        return done
    cmd = [sys.executable, "-m", "workers.frontend", str(path), job_dir, "--seed", str(seed)]
    failed = f"{path.name}: lowering to linalg-on-tensors"
    try:
        code, output = run_in_group(cmd, limits.seconds, int(limits.memory_gb * (1 << 30)))
    except TimeoutError:
        raise FrontendError(f"{failed} ran past its limit of {limits.seconds:.0f} s and was stopped") from None
    except MemoryLimitExceeded:
        raise FrontendError(f"{failed} needed more than its {limits.memory_gb:g} GB memory limit and was "
                            "stopped") from None
    lines = output.strip().splitlines()
    verdict = json.loads(lines[-1]) if lines and lines[-1].startswith('{"') else {}
    if code == 0 and "error" not in verdict:
        with open(os.path.join(job_dir, MODEL_INFO_FILE)) as f:
            return ModelInfo.from_json(f.read())
    if "error" in verdict:
        raise FrontendError(verdict["error"])
    raise FrontendError(f"{failed} failed: its process ended with status {code}: "
                        f"{(lines or ['no output'])[-1][:300]}")


def main(argv: list[str] | None = None) -> int:
    """The child of lower_model_bounded: lowers one model, prints a JSON verdict as its last line."""
    parser = argparse.ArgumentParser(description="Lower one KernelBench-format model to linalg-on-tensors.")
    parser.add_argument("model")
    parser.add_argument("job_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        lower_model(args.model, args.job_dir, args.seed)
    except FrontendError as e:
        print(json.dumps({"error": str(e)}))
        return 2
    print(json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
