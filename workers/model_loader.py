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


def load_model(model_path: str, seed: int = 0) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    module = load_module(model_path)
    name = Path(model_path).name
    try:
        torch.manual_seed(seed)
        model = module.Model(*module.get_init_inputs()).eval()
        torch.manual_seed(seed)
        inputs = list(module.get_inputs())
    except Exception as e:
        raise ModelLoadError(f"{name}: building the model or its inputs failed ({type(e).__name__}: {e})") from None
    bad = [i for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)]
    if bad:
        raise ModelLoadError(f"{name}: get_inputs() must return tensors; entries {bad} are not")
    return model, inputs
