"""The host side of a compiled model: reject host compute, read the launch sequence into config.json,
and merge the outlined kernels into one PTX module.

After kernel outlining, the host function may only allocate buffers, make views of them, launch
kernels and return, and run a loop of constant bounds (a recurrent layer's time steps) that only launches
kernels and makes views: its launches run once per index, which a kernel may take as a scalar argument.
Anything else (a copy, a linalg op, a loop that allocates) is compute left on the host: the iteration
fails at this stage and is never replayed from Python. Temporaries dead by the time another is first used
lend it their memory (memory_plan).
"""
from __future__ import annotations

import math
import re

import numpy as np

from workers.compile import mlir
from workers.compile.memory_plan import share_dead_temporaries
from workers.records import (TENSOR_MAP_BYTES, BufferSpec, HostLoop, KernelArg, KernelLaunch, ModelInfo, OutputSpec,
                             TensorMap)

ir = mlir.ir

VIEW_OPS = ("memref.expand_shape", "memref.collapse_shape", "memref.cast", "memref.subview",
            "memref.reinterpret_cast")
TENSOR_MAP_OP = "nvgpu.tma.create.descriptor"
ALLOWED_HOST_OPS = ("arith.constant", "memref.alloc", "memref.dealloc", "memref.get_global", "gpu.launch_func",
                    "func.return", TENSOR_MAP_OP, *VIEW_OPS)
HOST_LOOP = "scf.for"  # a recurrent layer's time loop (workers/recurrent.py): config.json's loops
ALLOWED_IN_HOST_LOOPS = ("arith.constant", "gpu.launch_func", "scf.yield", *VIEW_OPS)
MAX_CONSTANT_ELEMENTS = 1 << 16  # constants travel inline in config.json
# what a !nvgpu.tensormap.descriptor type says beyond its box (the bindings give no accessors)
_TENSOR_MAP_TYPE = re.compile(r"tensor = memref<(?P<box>[\dx]+)x\w+, 3>, swizzle = (?P<swizzle>\w+), "
                              r"l2promo = (?P<l2promo>\w+), oob = zero, interleave = none>")
_SWIZZLE_BYTES = {"none": 0, "swizzle_32b": 32, "swizzle_64b": 64, "swizzle_128b": 128}
_L2_PROMOTION_BYTES = {"none": 0, "l2promo_64b": 64, "l2promo_128b": 128, "l2promo_256b": 256}


class HostComputeError(Exception):
    """The schedule left compute (loops, copies, linalg ops) outside the GPU kernels."""


def viewed_buffer(value: mlir.ir.Value) -> mlir.ir.Value:
    """The buffer that `value` views through VIEW_OPS: on the host a function argument, an allocation or a
    global; in a kernel one of its arguments."""
    while not isinstance(value.owner, mlir.ir.Block) and value.owner.name in VIEW_OPS:
        value = value.owner.operands[0]
    return value


def dynamic_layout(t) -> bool:
    strides, offset = t.get_strides_and_offset()
    return ir.ShapedType.get_dynamic_stride_or_offset() in (offset, *strides)


def _row_major(shape: list[int]) -> list[int]:
    return [math.prod(shape[i + 1:]) for i in range(len(shape))]


def dtype_name(t) -> str:
    return "i64" if str(t) == "index" else str(t)


def check_host(func) -> None:
    offending = []
    for op in func.regions[0].blocks[0].operations:
        if op.operation.name == HOST_LOOP:
            offending += [f"{inner.operation.name} in a host loop" for inner in op.regions[0].blocks[0].operations
                          if inner.operation.name not in ALLOWED_IN_HOST_LOOPS]
        elif op.operation.name not in ALLOWED_HOST_OPS:
            offending.append(op.operation.name)
    if offending:
        counts = {name: offending.count(name) for name in dict.fromkeys(offending)}
        listed = ", ".join(f"{n} x{c}" for n, c in counts.items())
        raise HostComputeError(
            f"the schedule leaves compute on the host ({listed}): every loop nest must be tiled to "
            "a grid of blocks (scf.forall mapped to gpu.block) so that it runs inside a kernel")


class LaunchSequence:
    """Reads buffers, launches and outputs from the outlined host function."""

    def __init__(self, module: ir.Module, model: ModelInfo):
        self.module = module
        self.model = model
        self.buffers: list[BufferSpec] = []
        self.launches: list[KernelLaunch] = []
        self.outputs: list[OutputSpec] = []
        self.loops: list[HostLoop] = []
        self._loop_indices: dict = {}  # a host loop's induction variable -> its position in self.loops
        self._views: dict = {}  # SSA value (a buffer or a view of it) -> buffer name
        self._constants: dict = {}  # SSA value -> python scalar
        self.shared_bytes = 0  # bytes of temporaries that live in a dead temporary's memory (memory_plan)

    def read(self) -> "LaunchSequence":
        func = mlir.main_func(self.module)
        check_host(func)
        block = func.regions[0].blocks[0]
        n_inputs = len(self.model.input_shapes)
        for i, arg in enumerate(block.arguments):
            if i < n_inputs:
                role, source = "input", f"input:{i}"
            else:
                role, source = "weight", f"weight:{self.model.weight_names[i - n_inputs]}"
            self._add_buffer(arg, f"arg{i}", role, source)
        for op in block.operations:
            if op.operation.name == HOST_LOOP:
                self._add_loop(op.operation.opview)
            else:
                self._visit(op.operation)
        self.shared_bytes = share_dead_temporaries(self.buffers, self.launches, self.loops)
        return self

    def _add_loop(self, loop) -> None:
        bounds = [self._constants.get(v) for v in (loop.lowerBound, loop.upperBound, loop.step)]
        if None in bounds or list(loop.results):
            raise HostComputeError("a host loop needs constant bounds and carries no values")
        start, stop, step = bounds
        trip_count = len(range(start, stop, step))
        if trip_count < 1:
            raise HostComputeError(f"a host loop from {start} to {stop} by {step} never runs")
        first = len(self.launches)
        self._loop_indices[loop.induction_variable] = len(self.loops)
        for op in loop.body.operations:
            self._visit(op.operation)
        self.loops.append(HostLoop(first=first, end=len(self.launches), start=start, step=step,
                                   trip_count=trip_count))

    def _add_buffer(self, value, name: str, role: str, source: str, values: list | None = None) -> None:
        t = value.type
        self.buffers.append(BufferSpec(name=name, role=role, dtype=dtype_name(t.element_type),
                                       shape=list(t.shape), source=source, values=values))
        self._views[value] = name

    def _visit(self, op) -> None:
        name = op.name
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, (ir.IntegerAttr, ir.FloatAttr)):
                self._constants[op.results[0]] = attr.value
        elif name == "memref.alloc":
            self._add_buffer(op.results[0], f"buf{len(self.buffers)}", "temporary", "alloc")
        elif name == "memref.get_global":
            self._add_global(op)
        elif name == TENSOR_MAP_OP:
            self._add_tensor_map(op)
        elif name == "memref.cast" and isinstance(op.results[0].type, ir.UnrankedMemRefType):
            self._views[op.results[0]] = self._views[op.operands[0]]  # a tensor map's operand
        elif name in VIEW_OPS:
            # a view keeps its source's aligned pointer; with the bare-pointer ABI the kernel applies
            # the view's static offset and strides (from its type) itself
            if not op.results[0].type.has_static_shape or dynamic_layout(op.results[0].type):
                raise HostComputeError(f"{name} with a dynamic layout on the host cannot be passed to a kernel")
            self._views[op.results[0]] = self._views[op.operands[0]]
        elif name == "gpu.launch_func":
            self._add_launch(op.opview)
        elif name == "func.return":
            self._add_outputs(op)

    def _add_global(self, op) -> None:
        symbol = ir.FlatSymbolRefAttr(op.attributes["name"]).value
        glob = [g for g in self.module.body.operations
                if g.operation.name == "memref.global" and ir.StringAttr(g.attributes["sym_name"]).value == symbol][0]
        data = np.array(glob.attributes["initial_value"])
        shape = list(op.results[0].type.shape)
        if math.prod(shape) > MAX_CONSTANT_ELEMENTS:
            raise HostComputeError(f"constant {symbol} has {math.prod(shape)} elements; lift it to a weight")
        values = np.broadcast_to(data, shape).reshape(-1).tolist()  # splats broadcast
        self._add_buffer(op.results[0], f"const{len(self.buffers)}", "constant", "constant", values)

    def _add_tensor_map(self, op) -> None:
        """A buffer of the CUtensorMap that the measure worker encodes for the (ranked) view cast to the op's
        unranked operand, as the op's type describes it."""
        cast = op.operands[0].owner
        view = cast.operands[0].type if not isinstance(cast, ir.Block) and cast.name == "memref.cast" else None
        described = _TENSOR_MAP_TYPE.search(str(op.results[0].type))
        if view is None or not view.has_static_shape or dynamic_layout(view) or described is None:
            raise HostComputeError(f"a tensor map of {op.operands[0].type} as {op.results[0].type}: only static "
                                   "views of a buffer, with zeros out of bounds and no interleave, are encoded")
        strides, offset = view.get_strides_and_offset()
        spec = TensorMap(buffer=self._views[op.operands[0]], dtype=dtype_name(view.element_type),
                         shape=list(view.shape), strides=list(strides), offset=offset,
                         box=[int(size) for size in described["box"].split("x")],
                         swizzle=_SWIZZLE_BYTES[described["swizzle"]],
                         l2_promotion=_L2_PROMOTION_BYTES[described["l2promo"]])
        name = f"map{len(self.buffers)}"
        self.buffers.append(BufferSpec(name=name, role="tensor_map", dtype="i8", shape=[TENSOR_MAP_BYTES],
                                       source="tensor_map", tensor_map=spec))
        self._views[op.results[0]] = name

    def _scalar(self, value) -> KernelArg:
        if value in self._loop_indices:
            return KernelArg(kind="loop_index", dtype="i64", loop=self._loop_indices[value])
        if value not in self._constants:
            raise HostComputeError("a kernel scalar argument is computed on the host")
        return KernelArg(kind="scalar", dtype=dtype_name(value.type), value=self._constants[value])

    def _add_launch(self, launch) -> None:
        def dims(*values):
            return [int(self._constants[v]) for v in values]

        args = []
        for v in launch.kernelOperands:
            if isinstance(v.type, ir.MemRefType):
                args.append(KernelArg(kind="buffer", dtype=dtype_name(v.type.element_type), buffer=self._views[v]))
            elif _is_tensor_map(v):  # the kernel takes the tensor map's address
                args.append(KernelArg(kind="buffer", dtype="i8", buffer=self._views[v]))
            else:
                args.append(self._scalar(v))
        shared = launch.dynamicSharedMemorySize
        self.launches.append(KernelLaunch(
            kernel=_kernel_name(launch),
            grid=dims(launch.gridSizeX, launch.gridSizeY, launch.gridSizeZ),
            block=dims(launch.blockSizeX, launch.blockSizeY, launch.blockSizeZ),
            shared_bytes=int(self._constants[shared]) if shared is not None else 0,
            args=args))

    def _add_outputs(self, op) -> None:
        for v in op.operands:
            buffer = self._views[v]
            strides, offset = v.type.get_strides_and_offset()
            if offset or strides != _row_major(list(v.type.shape)):
                raise HostComputeError("a model output is a strided view of a buffer; it needs a copy kernel")
            self.outputs.append(OutputSpec(buffer=buffer, shape=list(v.type.shape),
                                           dtype=dtype_name(v.type.element_type)))
            spec = next(b for b in self.buffers if b.name == buffer)
            if spec.role == "temporary":
                spec.role = "output"


def _is_tensor_map(value) -> bool:
    """Whether `value` is a TMA descriptor that the host makes (nvgpu.tma.create.descriptor)."""
    return not isinstance(value.owner, ir.Block) and value.owner.name == TENSOR_MAP_OP


def _kernel_name(launch) -> str:
    """Kernels are renamed after their gpu.module by `merge_kernel_modules`."""
    return str(launch.kernel).split("::")[0].lstrip("@")


def merge_kernel_modules(module: ir.Module) -> None:
    """Move every outlined kernel into the first gpu.module, named after its own module, so that
    one PTX module holds them all with distinct entry names; the globals they use (the dynamic shared
    memory's extern array, declared alike in each module that has one) come along once."""
    gpu_modules = [op for op in module.body.operations if op.operation.name == "gpu.module"]
    if not gpu_modules:
        raise HostComputeError("the schedule produced no GPU kernel")
    target = gpu_modules[0]
    target_name = ir.StringAttr(target.attributes["sym_name"]).value
    target_block = target.regions[0].blocks[0]
    for gm in gpu_modules:
        mod_name = ir.StringAttr(gm.attributes["sym_name"]).value
        for op in list(gm.regions[0].blocks[0].operations):
            if op.operation.name == "gpu.func":
                op.attributes["sym_name"] = ir.StringAttr.get(mod_name)
            if gm is target or op.operation.name not in ("gpu.func", "memref.global"):
                continue
            if op.operation.name == "memref.global" and mlir.symbol(op) in map(mlir.symbol, target_block.operations):
                continue
            op.operation.move_before(list(target_block.operations)[0])
    for gm in gpu_modules[1:]:
        gm.operation.erase()
    for op in mlir.ops_named(mlir.main_func(module), "gpu.launch_func"):
        op.attributes["kernel"] = ir.SymbolRefAttr.get([target_name, _kernel_name(op.opview)])
