"""From config.json to kernel launches: buffer plan, argument packing, launch sanity.

Pure functions with no GPU: the GPU child (gpu_run.py) and the CPU tests share them.
"""
from __future__ import annotations

import math
import os
import re
import struct

import numpy as np

from workers.measure.tensor_map import tiled_arguments
from workers.records import BufferSpec, HostLoop, KernelArg, KernelLaunch, LaunchConfig

# MLIR element type -> numpy scalar type of a PTX parameter ("index" is 64-bit on NVPTX64)
SCALAR_TYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64, "index": np.int64,
                "i32": np.int32, "i16": np.int16, "i8": np.int8, "i1": np.bool_}
TORCH_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "i64": "int64",
                "index": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "bool"}
# A launch of one thread per block over more blocks than this is the pathology DESIGN.md names.
PATHOLOGICAL_GRID = 4096


# Said with an illegal address when the PTX calls malloc: per-thread scratch that memref.alloc left in
# a kernel is never freed, so repeated launches exhaust CUDA's 8 MB device heap and malloc returns NULL.
DEVICE_MALLOC_HINT = ("kernels.ptx calls device malloc and never frees: repeated launches exhaust the 8 MB "
                      "device heap; keep per-thread scratch static (registers/alloca) in the schedule")


class ConfigError(ValueError):
    """config.json does not describe a runnable model."""


def pack_args(launch: KernelLaunch, pointers: dict[str, int], loop_indices: dict[int, int] | None = None) -> list:
    """The PTX parameters of one launch: a u64 per buffer (bare-pointer ABI), a typed scalar else, and for
    a loop_index argument the current index of its host loop (loop_indices: position in config.loops ->
    index, of the loops the launch runs in)."""
    return [_pack(arg, pointers, loop_indices or {}) for arg in launch.args]


def parameter_buffer(args: list) -> bytes:
    """The packed arguments as the kernel's parameter buffer: each at its natural alignment, as CUDA lays out
    a kernel's parameters (and pycuda's Function.__call__ packs them, anew on every launch)."""
    return struct.pack("@" + "".join(a.dtype.char for a in args), *args)


def _pack(arg: KernelArg, pointers: dict[str, int], loop_indices: dict[int, int]):
    if arg.kind == "buffer":
        if arg.buffer not in pointers:
            raise ConfigError(f"kernel argument names unknown buffer {arg.buffer!r}")
        return np.uintp(pointers[arg.buffer])
    if arg.kind == "loop_index":
        if SCALAR_TYPES.get(arg.dtype) is not np.int64:
            raise ConfigError(f"a loop index is passed as a 64-bit integer, not as {arg.dtype}")
        if arg.loop not in loop_indices:
            raise ConfigError(f"a loop_index argument names host loop {arg.loop!r}, which does not run its launch")
        return np.int64(loop_indices[arg.loop])
    if arg.kind == "scalar" and arg.dtype in SCALAR_TYPES and arg.value is not None:
        return SCALAR_TYPES[arg.dtype](arg.value)
    raise ConfigError(f"cannot pass a {arg.kind} argument of type {arg.dtype} (value {arg.value!r})")


def model_file(job_dir: str, config: LaunchConfig) -> str:
    """config.model_path, relative paths taken from the job folder (where the frontend copies the model)."""
    return config.model_path if os.path.isabs(config.model_path) else os.path.join(job_dir, config.model_path)


def calls_device_malloc(ptx: str) -> bool:
    return re.search(r"\bcall(?:\.uni)?\s*\([^)]*\),\s*malloc\b", ptx) is not None


def launch_order(config: LaunchConfig, first_index_only: bool = False) -> list[tuple[int, dict[int, int]]]:
    """The launches as the host runs them: each launch's position in config.launches with the indices of the
    host loops it runs in ({} outside loops), a loop's launches once per index, in order. first_index_only:
    each launch once, a loop's at its first index (what a profiler needs: a recurrent layer's 512 time steps
    would be thousands of profiled launches of the same few kernels)."""
    order: list[tuple[int, dict[int, int]]] = []
    done = 0  # launches before this position are in `order`
    for n, loop in enumerate(config.loops):
        order += [(i, {}) for i in range(done, loop.first)]
        indices = loop.indices()[:1] if first_index_only else loop.indices()
        order += [(i, {n: index}) for index in indices for i in range(loop.first, loop.end)]
        done = loop.end
    return order + [(i, {}) for i in range(done, len(config.launches))]


def launch_runs(config: LaunchConfig) -> list[int]:
    """How many times each launch of config.json runs in one forward: its host loop's trip count, else once."""
    runs = [1] * len(config.launches)
    for loop in config.loops:
        runs[loop.first:loop.end] = [loop.trip_count] * (loop.end - loop.first)
    return runs


def _check_loops(loops: list[HostLoop], launch_count: int) -> None:
    done = 0  # the previous loop's end
    for n, loop in enumerate(loops):
        if not done <= loop.first < loop.end <= launch_count:
            raise ConfigError(f"host loop {n} runs launches [{loop.first}, {loop.end}): loops need launches of "
                              f"their own among the {launch_count}, in launch order, none overlapping another")
        if loop.trip_count < 1 or loop.step == 0:
            raise ConfigError(f"host loop {n} needs at least one index and a nonzero step, not {loop.trip_count} "
                              f"indices of step {loop.step}")
        done = loop.end


def pathological_launches(config: LaunchConfig) -> list[str]:
    """Launches with block size 1 and a huge grid: refused before they run or are profiled."""
    return [f"{l.kernel}: block {l.block} x grid {l.grid}" for l in config.launches
            if math.prod(l.block) == 1 and math.prod(l.grid) > PATHOLOGICAL_GRID]


def _check_tensor_map(buffer: BufferSpec, names_before: list[str]) -> None:
    spec = buffer.tensor_map
    if spec is None or spec.buffer not in names_before:
        raise ConfigError(f"tensor map {buffer.name} describes no buffer listed before it")
    try:
        tiled_arguments(spec, 0)  # buffers start 256-byte aligned: what holds at 0 holds there
    except ValueError as e:
        raise ConfigError(str(e)) from None


def allocation_order(buffers: list[BufferSpec]) -> list[BufferSpec]:
    """The order the measure worker makes the buffers in: those with memory of their own first (config.json
    lists a temporary where the host allocates it, which may be after a temporary living in its memory),
    then those in another's memory, then the tensor maps (each describes a buffer made before it)."""
    return sorted(buffers, key=lambda b: (b.role == "tensor_map", b.storage is not None))


def check_config(config: LaunchConfig) -> None:
    names = {b.name for b in config.buffers}
    for i, b in enumerate(config.buffers):
        if b.dtype not in TORCH_DTYPES:
            raise ConfigError(f"buffer {b.name}: unsupported element type {b.dtype}")
        if b.role == "constant" and (b.values is None or len(b.values) != math.prod(b.shape)):
            raise ConfigError(f"constant buffer {b.name} lacks its {math.prod(b.shape)} values")
        if b.role == "tensor_map":
            _check_tensor_map(b, names_before=[x.name for x in config.buffers[:i]])
        if b.storage is not None:
            owner = next((x for x in config.buffers if x.name == b.storage), None)
            if owner is None or owner.role != "temporary" or owner.storage is not None \
                    or owner.size_bytes() < b.size_bytes():
                raise ConfigError(f"buffer {b.name}: its storage {b.storage!r} is no temporary of "
                                  f"{b.size_bytes()} bytes or more with memory of its own")
    for out in config.outputs:
        if out.buffer not in names:
            raise ConfigError(f"output names unknown buffer {out.buffer!r}")
    if not config.launches:
        raise ConfigError("config.json has no kernel launches")
    _check_loops(config.loops, len(config.launches))
    for i, launch in enumerate(config.launches):
        if len(launch.grid) != 3 or len(launch.block) != 3 or min(*launch.grid, *launch.block) < 1:
            raise ConfigError(f"{launch.kernel}: grid {launch.grid} and block {launch.block} need 3 positive sizes each")
        # every argument names a buffer, a packable scalar or a loop that runs the launch
        starts = {n: loop.start for n, loop in enumerate(config.loops) if loop.first <= i < loop.end}
        pack_args(launch, dict.fromkeys(names, 0), starts)
