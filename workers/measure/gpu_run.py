"""The GPU side of a measurement, run in a child process so that a broken kernel (an illegal address
leaves the CUDA context unusable) or a hang can only take this process down.

    python -m workers.measure.gpu_run JOB_DIR VERSION RESULT_JSON          # check + time
    python -m workers.measure.gpu_run JOB_DIR VERSION RESULT_JSON --once   # each launch once (for ncu)
    python -m workers.measure.gpu_run --batch ITEMS_JSON [--until EPOCH_S]  # check + time many versions

A batch (workers.measure.measure_batch) pays the process's start (imports, CUDA context, Inductor) once
for many versions; it stops after a version that failed, whose fault may have broken the context, and its
parent starts a new process for the rest.

Torch owns the memory and the reference model; pycuda loads the PTX into the same (primary) context.
"""
from __future__ import annotations

import copy
import gc
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

from workers.atomic import write_text
from workers.jsonrecord import JsonRecord
from workers.layout import REFERENCE_FILE, version_dir
from workers.measure.launch import (DEVICE_MALLOC_HINT, TORCH_DTYPES, allocation_order, calls_device_malloc,
                                    check_config, launch_order, model_file, pack_args, parameter_buffer)
from workers.measure.tensor_map import encode as encode_tensor_map
from workers.records import STATIC_SHARED_BYTES, LaunchConfig, Timing

# How the parent starts this module (ncu wraps the same command with --once).
COMMAND = [sys.executable, "-m", "workers.measure.gpu_run"]
CORRECTNESS_DRAWS = 3  # input draws every output is checked on (KernelBench checks 5)
KERNEL_RUNS = 5  # timed runs of each kernel alone (Runner.time_kernels): a breakdown, not the run's time


@dataclass
class OutputError(JsonRecord):
    buffer: str
    max_abs_err: float
    max_rel_err: float
    passed: bool
    library_abs_err: float = 0.0  # PyTorch's own max error, in the model's precision, against float64


@dataclass
class Reference(JsonRecord):
    device: str
    eager: Timing
    compiled: Timing | None
    compiled_error: str = ""


@dataclass
class RunOutcome(JsonRecord):
    status: str  # "ok" | "wrong_result" | "launch_error" | "illegal_address" | "error"
    error: str = ""
    device: str = "n/a"
    outputs: list[OutputError] = field(default_factory=list)  # per output, the worst of the input draws
    draws: int = 0
    time: Timing | None = None
    reference: Reference | None = None
    # wall seconds of each step (load, check, time, peers): what a measurement's minute is spent on
    seconds: dict[str, float] = field(default_factory=dict)
    kernel_us: dict[str, float] = field(default_factory=dict)  # MeasureResult.kernel_us
    launched_as: str = ""  # MeasureResult.launched_as


def _classify(exc: BaseException) -> str:
    """The failure class of an exception from pycuda or torch (their messages carry CUDA's error text)."""
    text = str(exc).lower()
    if any(s in text for s in ("illegal address", "illegal memory access", "misaligned address")):
        return "illegal_address"
    if "launch" in text or type(exc).__name__ in ("LaunchError", "LogicError"):
        return "launch_error"
    return "error"


COMPARE_CHUNK = 1 << 24  # elements compared at a time: KernelBench's 6-16 GB outputs, compared whole in float64,
# took several times their size in temporaries (out of memory on an 80 GB H100)


def compare(buffer: str, got, exact, library, atol: float, rtol: float) -> OutputError:
    """Our output against the model in float64 (`exact`): it passes where finite and everywhere within
    atol + rtol*|exact| + 2E, E = PyTorch's own max error in the model's precision (`library`): a long fp32
    reduction cannot meet 1e-4 near a zero sum, and no kernel needs to beat PyTorch's rounding by 2x.
    Compared COMPARE_CHUNK elements at a time, so that the temporaries stay small."""
    import torch

    library_err = max((float((lib.double() - ex.to(lib.device).double()).abs().max())
                       for lib, ex in zip(_chunks(library), _chunks(exact))), default=0.0)
    max_abs = max_rel = 0.0
    passed = True
    for ours, ex in zip(_chunks(got), _chunks(exact)):
        ours, ex = ours.double(), ex.to(ours.device).double()  # a reference run on the CPU (float64_reference)
        diff = (ours - ex).abs()
        max_abs = _larger(max_abs, float(diff.max()))
        max_rel = _larger(max_rel, float((diff / ex.abs().clamp_min(1e-30)).max()))
        passed = passed and bool(torch.isfinite(ours).all()) and \
            bool((diff <= atol + rtol * ex.abs() + 2 * library_err).all())
    return OutputError(buffer, max_abs, max_rel, passed, library_err)


def float64_reference(model, inputs: list) -> list:
    """The outputs of `model` run with float64 copies of its parameters and buffers (swapped in for the call:
    a copy of the model would miss a lambda's closure over the original's modules, level3/44's MLP), where
    the inputs are; on the CPU where the GPU's memory does not hold them (level1/45's 16 GB input took a
    32 GB float64 copy beside our own buffers)."""
    import torch

    def exact(t, device):
        return t.to(device=device, dtype=torch.float64 if t.is_floating_point() else t.dtype)

    def run(device):
        state = {name: exact(t, device) for name, t in [*model.named_parameters(), *model.named_buffers()]}
        return _as_list(torch.func.functional_call(model, state, tuple(
            exact(x, device) if isinstance(x, torch.Tensor) else x for x in inputs)))

    try:
        return run(None)
    except torch.OutOfMemoryError:
        gc.collect()
        torch.cuda.empty_cache()
        return run("cpu")


def _chunks(t) -> tuple:
    return t.reshape(-1).split(COMPARE_CHUNK)


def _larger(a: float, b: float) -> float:
    """max that keeps a NaN (an output's NaN is its error, not 0)."""
    return b if math.isnan(b) or b > a else a


def worst_of_draws(draws: list[list[OutputError]]) -> list[OutputError]:
    """Per output, its check on the draw that failed with the largest error, else with the largest error."""
    return [max(checks, key=lambda o: (not o.passed, o.max_abs_err)) for checks in zip(*draws)]


def _as_list(outputs) -> list:
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def _on_gpu(inputs: list) -> list:
    """The tensors among a model's inputs on the GPU; Python numbers as they are."""
    import torch

    return [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]


class Runner:
    def __init__(self, job_dir: str, version: int, first_index_only: bool = False):
        """v{version} of the job loaded onto the GPU; first_index_only: its launches each once (launch_order),
        for a profiler."""
        import torch

        from workers.model_loader import load_model, load_module

        vdir = version_dir(job_dir, version)
        with open(os.path.join(vdir, "config.json")) as f:
            self.config = LaunchConfig.from_json(f.read())
        check_config(self.config)
        self.model_path = model_file(job_dir, self.config)
        self.module = load_module(self.model_path)  # draws inputs beyond the first (check)
        model, inputs = load_model(self.model_path, self.config.seed, device="cuda")
        # peers run in the precision our kernels are judged in: cuDNN's default TF32 only in tf32 mode
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = self.config.precision == "tf32"
        torch.cuda.init()
        self.model = model.cuda()
        self.inputs = _on_gpu(inputs)
        self.device = torch.cuda.get_device_name()
        import pycuda.driver as cuda  # after the model: a model that cannot load says so first

        cuda.init()
        self.context = cuda.Device(torch.cuda.current_device()).retain_primary_context()
        self.context.push()  # pycuda launches into torch's context, on the same (null) stream
        with open(os.path.join(vdir, self.config.ptx_file), "rb") as f:
            self.ptx = f.read()
        self.buffers = self._allocate()
        self.launches = self.launches_from(cuda.module_from_buffer(self.ptx), first_index_only)
        self.graph = None

    def launches_from(self, module, first_index_only: bool = False) -> list:
        """config.json's launches in the order the host runs them (launch_order: a host loop's once per index;
        first_index_only: each launch once), their functions from `module` (kernels.ptx loaded, or a build of
        it), the buffers' pointers and the loops' indices as arguments: (function, block, grid, shared bytes,
        parameter buffer) each. The buffers are packed here, once: pycuda's Function.__call__ packs them on every
        launch, Python time that a recurrent layer's thousands of launches a forward paid each run."""
        import pycuda.driver as cuda

        pointers = {name: t.data_ptr() for name, t in self.buffers.items()}
        shapes = [(module.get_function(l.kernel), tuple(l.block), tuple(l.grid), l.shared_bytes)
                  for l in self.config.launches]
        for fn, _, _, shared in shapes:
            if shared > STATIC_SHARED_BYTES:  # a kernel opts in to more than 48 KB of dynamic shared memory
                fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        return [(*shapes[i], parameter_buffer(pack_args(self.config.launches[i], pointers, indices)))
                for i, indices in launch_order(self.config, first_index_only)]

    def _allocate(self) -> dict:
        import torch

        from workers.model_loader import tensor_inputs

        state = {**dict(self.model.named_parameters()), **dict(self.model.named_buffers())}
        inputs = tensor_inputs(self.inputs)
        buffers = {}
        for b in allocation_order(self.config.buffers):
            dtype = getattr(torch, TORCH_DTYPES[b.dtype])
            kind, _, key = b.source.partition(":")
            if kind == "input":
                t = inputs[int(key)]
            elif kind == "weight":
                t = state[key].detach()
            elif b.role == "constant":
                t = torch.tensor(b.values, dtype=dtype).reshape(b.shape).cuda()
            elif b.role == "tensor_map":  # of a buffer before it (the host made it after that buffer)
                encoded = encode_tensor_map(b.tensor_map, buffers[b.tensor_map.buffer].data_ptr())
                t = torch.frombuffer(bytearray(encoded), dtype=dtype).cuda()
            elif b.storage is not None:  # the memory of a temporary dead by then (compile's memory_plan)
                memory = buffers[b.storage].reshape(-1).view(torch.uint8)  # allocated first
                t = memory[:math.prod(b.shape) * dtype.itemsize].view(dtype).reshape(b.shape)
            else:  # temporaries and outputs start as NaN, so a kernel that skips an element is caught
                t = torch.full(b.shape, float("nan"), dtype=dtype, device="cuda") if dtype.is_floating_point \
                    else torch.zeros(b.shape, dtype=dtype, device="cuda")
            if list(t.shape) != b.shape or t.dtype != dtype:
                raise ValueError(f"buffer {b.name}: the model gives {list(t.shape)} {t.dtype}, config.json "
                                 f"says {b.shape} {dtype}")
            t = t.contiguous()
            # kernels take each buffer's base pointer as 16-byte aligned (ld/st.global.v4)
            buffers[b.name] = t if t.data_ptr() % 16 == 0 else t.clone()
        return buffers

    def use_graph(self) -> str:
        """From here on, run the launches as one CUDA graph (graph.py): what is checked and timed. How they
        run, said: where the driver refuses the capture (no kernel has run yet), from the host as before,
        with its reason."""
        from workers.measure.graph import LaunchGraph

        named = [(self.config.launches[i].kernel, *launch[1:])
                 for (i, _), launch in zip(launch_order(self.config), self.launches, strict=True)]
        try:
            self.graph = LaunchGraph(self.ptx, named, STATIC_SHARED_BYTES)
        except Exception as e:  # the capture's failure is the graph's, not the kernels': they still run
            return f"host launches (no CUDA graph: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
        return f"one CUDA graph of {self.graph.nodes} launches"

    def close(self) -> None:
        """Give back what the measurement holds, so that a batch's next version starts from a clean GPU: the
        graph and the PTX modules (unloaded while their context is current), the context's push, the buffers,
        the compiled peer."""
        import torch

        if self.graph is not None:
            self.graph.close()
        self.launches = []
        gc.collect()
        self.context.pop()
        self.buffers = self.model = self.inputs = None
        torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()

    def run(self, launches: list | None = None) -> None:
        """Queue the launches (the runner's own by default: its graph once use_graph made it)."""
        if launches is None and self.graph is not None:
            return self.graph()
        for fn, block, grid, shared, parameters in launches or self.launches:
            fn._launch_kernel(grid, block, parameters, shared, None)  # what Function.__call__ ends in

    def time_kernels(self) -> dict[str, float]:
        """Per kernel, the median time of all its launches (a host loop's at every index) queued alone, in
        KERNEL_RUNS timed runs: the run's time by kernel, their sum near the whole run's."""
        from workers.measure.timing import time_gpu

        by_kernel: dict[str, list] = {}
        for launch, (i, _) in zip(self.launches, launch_order(self.config), strict=True):
            by_kernel.setdefault(self.config.launches[i].kernel, []).append(launch)
        return {kernel: time_gpu(lambda launches=launches: self.run(launches), KERNEL_RUNS, 1).median_us
                for kernel, launches in by_kernel.items()}

    def check(self, draws: int = CORRECTNESS_DRAWS) -> list[OutputError]:
        """Every output against the model in float64, on `draws` input draws (the seed's inputs, then
        get_inputs() after seeds seed+1, seed+2, ...): a kernel right by accident on one draw is caught.
        Per output the worst draw."""
        from workers.model_loader import draw_inputs

        checked = []
        for draw in range(draws):
            if draw:
                self._load_draw(draw_inputs(self.module, os.path.basename(self.model_path), self.config.seed + draw,
                                            "cuda"))
            checked.append(self._check_draw())
        return worst_of_draws(checked)

    def _load_draw(self, inputs: list) -> None:
        """New input values into the input buffers; temporaries and outputs NaN again."""
        import torch

        from workers.model_loader import tensor_inputs

        self.inputs = _on_gpu(inputs)
        fresh = tensor_inputs(self.inputs)
        for b in self.config.buffers:
            kind, _, key = b.source.partition(":")
            if kind == "input":
                self.buffers[b.name].copy_(fresh[int(key)].reshape(b.shape))
            elif b.role in ("temporary", "output") and self.buffers[b.name].is_floating_point():
                self.buffers[b.name].fill_(float("nan"))
        torch.cuda.synchronize()

    def _check_draw(self) -> list[OutputError]:
        import torch

        self.run()
        torch.cuda.synchronize()
        # the truth in float64 (a library's own rounding is no reference), each from the model as loaded: a
        # model that changes its own state in forward (an RNN's hidden state) starts every draw afresh
        with torch.no_grad():
            expected = float64_reference(self.model, self.inputs)
            library = _as_list(copy.deepcopy(self.model)(*self.inputs))
        if len(expected) != len(self.config.outputs):
            raise ValueError(f"the model returns {len(expected)} outputs, config.json names {len(self.config.outputs)}")
        return [compare(out.buffer, self.buffers[out.buffer].reshape(out.shape), ref, lib, self.config.atol,
                        self.config.rtol) for out, ref, lib in zip(self.config.outputs, expected, library)]

    def reference(self, job_dir: str) -> Reference:
        """Eager and torch.compile times of the model on this GPU, measured once per job."""
        import torch

        from workers.measure.timing import time_gpu

        path = os.path.join(job_dir, REFERENCE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                known = Reference.from_json(f.read())
            if known.device == self.device:
                return known
        with torch.no_grad():
            eager = time_gpu(lambda: self.model(*self.inputs))
            compiled, error = None, ""
            try:
                fast = torch.compile(self.model)
                compiled = time_gpu(lambda: fast(*self.inputs))
            except Exception as e:  # torch.compile's failures are many; the report says which
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        ref = Reference(device=self.device, eager=eager, compiled=compiled, compiled_error=error)
        write_text(path, ref.to_json(indent=2))
        return ref


class Lap:
    """Records into `seconds` the wall time since the previous lap, under the lap's name."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds, self.last = seconds, time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self.last, 2)
        self.last = now


def measure(job_dir: str, version: int, once: bool = False, check_only: bool = False) -> RunOutcome:
    """Check and time v{version} of the job (once: run each launch once, a host loop's at its first index,
    for a profiler; check_only: check it on the input draws, no timing and no peers); every failure is the
    outcome's status and error."""
    outcome = RunOutcome(status="error")
    runner = None
    lap = Lap(outcome.seconds)
    try:
        runner = Runner(job_dir, version, first_index_only=once)
        lap("load")
        outcome.device = runner.device
        if once:
            runner.run()
            import torch

            torch.cuda.synchronize()
            outcome.status = "ok"
        else:
            from workers.measure.timing import time_gpu

            outcome.launched_as = runner.use_graph()
            outcome.outputs, outcome.draws = runner.check(), CORRECTNESS_DRAWS
            lap("check")
            outcome.status = "ok" if all(o.passed for o in outcome.outputs) else "wrong_result"
            if not check_only:
                outcome.time = time_gpu(runner.run)
                outcome.kernel_us = runner.time_kernels()
                lap("time")
                outcome.reference = runner.reference(job_dir)
                lap("peers")
    except Exception as e:  # every failure is recorded for the parent
        # the first line is CUDA's verdict; torch appends lines of generic debugging advice
        outcome.status, outcome.error = _classify(e), f"{type(e).__name__}: {(str(e).strip() or '?').splitlines()[0][:1000]}"
        if outcome.status == "illegal_address" and runner and calls_device_malloc(runner.ptx.decode(errors="replace")):
            outcome.error += f" ({DEVICE_MALLOC_HINT})"
    if outcome.status in HEALTHY and runner is not None:
        runner.close()
    return outcome


HEALTHY = ("ok", "wrong_result")  # outcomes after which the process's CUDA context is known to be sound
BATCH_STOPPED = 3  # a batch's exit status after a failed version: its parent goes on in a new process


def measure_batch(items_path: str, until: float) -> int:
    """Measure the batch's [job_dir, version, result_json] items in order, each not yet reported, until
    the epoch time `until`: 0 when every item is reported or the time is up, BATCH_STOPPED after an item
    that failed."""
    with open(items_path) as f:
        items = json.load(f)
    for job_dir, version, result_path in items:
        if os.path.exists(result_path):
            continue
        if time.time() >= until:
            return 0
        outcome = measure(job_dir, int(version))
        write_text(result_path, outcome.to_json(indent=2))
        if outcome.status not in HEALTHY:
            return BATCH_STOPPED
        gc.collect()
    return 0


def main(argv: list[str]) -> int:
    if argv[0] == "--batch":
        until = float(argv[argv.index("--until") + 1]) if "--until" in argv else float("inf")
        return measure_batch(argv[1], until)
    job_dir, version, result_path = argv[0], int(argv[1]), argv[2]
    outcome = measure(job_dir, version, once="--once" in argv, check_only="--check-only" in argv)
    write_text(result_path, outcome.to_json(indent=2))
    return 0 if outcome.status == "ok" else 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    if code:  # after a fault, teardown would free into a poisoned context (it can hang): skip it
        sys.stdout.flush()
        os._exit(code)
    sys.exit(code)  # a normal exit, so a profiler around this process finishes its work
