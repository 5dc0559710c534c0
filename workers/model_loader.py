"""Load a KernelBench-format model file: `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`.

One seeding protocol for everyone (frontend, measure worker, tests): the model is built right after
`torch.manual_seed(seed)`, then the inputs are made right after `torch.manual_seed(seed)` again, so
weights and inputs are the same wherever the file is loaded. The model is put in eval mode.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch


class ModelLoadError(Exception):
    """The file is not a loadable KernelBench model; the message names the file and the cause."""


def load_module(model_path: str):
    path = Path(model_path)
    if not path.is_file():
        raise ModelLoadError(f"{model_path}: no such model file")
    name = f"mlir_farm_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # user code: any error means the file cannot be used
        raise ModelLoadError(f"{path.name}: importing the model file failed ({type(e).__name__}: {e})") from None
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ModelLoadError(f"{path.name}: not a KernelBench-format model file: it lacks {', '.join(missing)} "
                             "(expected `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`)")
    sys.modules.pop(name, None)
    return module


SCALARS = (bool, int, float)  # what get_inputs() may return besides tensors (KernelBench's matrix-scalar product)


def tensor_inputs(inputs: list) -> list[torch.Tensor]:
    """The tensors among a model's inputs: the kernels' input buffers, in order (scalars are constants of
    the lowered function)."""
    return [x for x in inputs if isinstance(x, torch.Tensor)]


def _shaped_like(get_inputs) -> list:
    """get_inputs()' tensors with their shapes and dtypes but unset values: made on the meta device, then
    allocated untouched (the pages of a 6 GB KernelBench input are never written), for a lowering, which
    reads no values. Where get_inputs() cannot run on the meta device, its real values."""
    try:
        with torch.device("meta"):
            inputs = list(get_inputs())
    except Exception:
        return list(get_inputs())
    return [torch.empty(x.shape, dtype=x.dtype) if isinstance(x, torch.Tensor) else x for x in inputs]


def load_model(model_path: str, seed: int = 0, input_values: bool = True,
               device: str | None = None) -> tuple[torch.nn.Module, list]:
    """The model (eval mode, on the CPU) and its inputs: tensors and Python scalars, in get_inputs() order,
    the tensors drawn on `device` (draw_inputs). input_values=False: the inputs' shapes and dtypes only
    matter (the tensors hold garbage, on the CPU)."""
    module = load_module(model_path)
    name = Path(model_path).name
    try:
        torch.manual_seed(seed)
        model = module.Model(*module.get_init_inputs()).eval()
    except Exception as e:
        raise ModelLoadError(f"{name}: building the model failed ({type(e).__name__}: {e})") from None
    _tensor_attributes_as_buffers(model)
    if not input_values:
        return model, _checked(name, _shaped_like(module.get_inputs))
    return model, draw_inputs(module, name, seed, device)


STATE_BUFFERS = "_mlir_farm_state_buffers"  # the model's attribute naming the buffers made of plain tensors


def _tensor_attributes_as_buffers(model: torch.nn.Module) -> None:
    """A tensor kept as a plain attribute (an RNN's hidden state) becomes a buffer: state the model reads
    like its weights, lifted to an argument by the frontend and uploaded by the measure worker (as a plain
    attribute, torch.export takes it for a constant, and refuses one that forward changes). Their names
    are kept in the model's STATE_BUFFERS: forward may write them, so the frontend hands it copies."""
    names = []
    for prefix, module in model.named_modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                delattr(module, name)
                module.register_buffer(name, value)
                names.append(f"{prefix}.{name}" if prefix else name)
    setattr(model, STATE_BUFFERS, frozenset(names))


def draw_inputs(module, name: str, seed: int, device: str | None = None) -> list:
    """get_inputs() right after torch.manual_seed(seed): the inputs of draw `seed` (the model's own seed
    gives the inputs every stage uses; other seeds, further draws for the correctness check). `device`:
    made there (torch.device as the default device), e.g. "cuda": the GPU's generator draws a KernelBench
    input of 6 GB in milliseconds, the CPU's in seconds, and nothing crosses PCIe; where get_inputs()
    cannot run so, on the CPU."""
    try:
        torch.manual_seed(seed)
        if device is not None:
            try:
                with torch.device(device):
                    return _checked(name, list(module.get_inputs()))
            except ModelLoadError:
                raise
            except Exception:
                torch.manual_seed(seed)
        return _checked(name, list(module.get_inputs()))
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"{name}: making the model's inputs failed ({type(e).__name__}: {e})") from None


def _checked(name: str, inputs: list) -> list:
    bad = [i for i, x in enumerate(inputs) if not isinstance(x, (torch.Tensor, *SCALARS))]
    if bad:
        raise ModelLoadError(f"{name}: get_inputs() must return tensors or Python numbers; entries {bad} are "
                             f"{', '.join(sorted({type(inputs[i]).__name__ for i in bad}))}")
    return inputs
