"""A version's launches as one CUDA graph: what the measure worker checks and times.

A recurrent model's forward is thousands of small launches (a 6-layer LSTM over 512 steps: 18432), and
issuing each from Python took longer than the GPU ran it: the run timed the CPU, not the kernels (the timing
protocol's promise). A graph queues them once; each replay runs them back to back, in the same order with the
same arguments. pycuda has no graph API and hides its function handles, so the PTX is loaded again here, into
the same (torch's primary) context, and each launch captured through the driver's cuLaunchKernel on torch's
capture stream. GPU-only: imported by the GPU child alone.
"""
from __future__ import annotations

import ctypes

CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class GraphError(RuntimeError):
    """The driver refused a step of the capture (its error's name and text)."""


def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _check(cuda: ctypes.CDLL, code: int, what: str) -> None:
    if code:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        cuda.cuGetErrorName(code, ctypes.byref(name))
        cuda.cuGetErrorString(code, ctypes.byref(text))
        raise GraphError(f"{what}: {(name.value or b'?').decode()} ({(text.value or b'?').decode()})")


class LaunchGraph:
    """`launches` ((kernel name, block, grid, shared bytes, parameter buffer) each, in the host's order) of the
    PTX `ptx`, captured once; calling it replays them on torch's current stream."""

    def __init__(self, ptx: bytes, launches: list[tuple[str, tuple, tuple, int, bytes]], max_shared: int):
        import torch

        cuda = _driver()
        self._module = ctypes.c_void_p()
        _check(cuda, cuda.cuModuleLoadData(ctypes.byref(self._module), ctypes.c_char_p(ptx + b"\0")),
               "cuModuleLoadData")
        most_shared: dict[str, int] = {}  # per kernel, the most dynamic shared memory a launch of it takes
        for name, _, _, shared, _ in launches:
            most_shared[name] = max(shared, most_shared.get(name, 0))
        functions = {}
        for name, shared in most_shared.items():
            functions[name] = fn = ctypes.c_void_p()
            _check(cuda, cuda.cuModuleGetFunction(ctypes.byref(fn), self._module, name.encode()),
                   f"cuModuleGetFunction {name}")
            if shared > max_shared:  # as Runner.launches_from: opt in to more than 48 KB of dynamic shared memory
                _check(cuda, cuda.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                     ctypes.c_int(shared)), f"cuFuncSetAttribute {name}")
        self.graph = torch.cuda.CUDAGraph()
        capture = torch.cuda.Stream()
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph, stream=capture):
            stream = ctypes.c_void_p(capture.cuda_stream)
            for name, block, grid, shared, parameters in launches:
                buffer = ctypes.create_string_buffer(parameters, len(parameters))
                size = ctypes.c_size_t(len(parameters))
                extra = (ctypes.c_void_p * 5)(CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buffer),
                                              CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size), CU_LAUNCH_PARAM_END)
                _check(cuda, cuda.cuLaunchKernel(functions[name], *(ctypes.c_uint(n) for n in grid),
                                                 *(ctypes.c_uint(n) for n in block), ctypes.c_uint(shared), stream,
                                                 None, extra), f"cuLaunchKernel {name}")
        self.nodes = len(launches)

    def __call__(self) -> None:
        self.graph.replay()

    def close(self) -> None:
        """Free the graph, then unload the module (while its context is current)."""
        self.graph.reset()
        _driver().cuModuleUnload(self._module)
