"""Probe: can a LayerNorm row kernel that keeps rows in flight through shared memory (row_prefetch.cu:
persistent blocks, each row copied by cp.async.bulk STAGES rows ahead) beat torch.compile's kernel, which
our v0 trails by about 1% in the timing protocol (perf_targets_h200.md)?

    python3 benchmarks/probes/row_prefetch.py [JOB] [--rounds N]   # GPU node; JOB: layernorm_large compiled

In one process and in rounds whose order turns, the measure worker's timing (workers/measure/timing.py)
of each probe kernel (checked against torch's layer_norm first), torch.compile of nn.LayerNorm, a device
copy of the same bytes, and our compiled job's v0 when JOB is given. Prints each side's median over the
rounds and its ratio to torch.compile.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from workers.measure.timing import time_gpu  # noqa: E402

ROWS = COLS = 8192
ROW_BYTES = COLS * 4
# the kernels of row_prefetch.cu, named design_threads_blocks-per-SM[_variant]; prefetch_threads_stages_blocks
# are persistent (a grid of blocks-per-SM per SM), the others take a row per block
KERNELS = [f"{design}_{shape}" for design in ("plain", "onepass") for shape in ("512_2", "512_3", "256_4", "1024_2")] \
    + [f"reread_{shape}" for shape in ("512_2_2", "512_4_2", "256_8_2", "1024_2_2", "512_2_3", "512_4_3")] \
    + [f"looped_{shape}" for shape in ("512_2_1", "512_2_4", "512_4_1", "512_4_4", "1024_2_1")] \
    + [f"prefetch_{shape}" for shape in ("512_2_1", "512_3_1", "512_4_1", "512_6_1", "512_2_2", "512_3_2", "256_3_2",
                                         "256_2_3", "1024_3_1", "1024_4_1")]


def build() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "row_prefetch.cubin"
        subprocess.run(["nvcc", "-O3", "-arch=sm_90a", "-cubin", "-o", str(cubin),
                        str(Path(__file__).with_suffix(".cu"))], check=True)
        return cubin.read_bytes()


def launcher(module, name: str, args: list, sms: int):
    """A launch of kernel `name` on `args` (x, weight, bias, y) with the block and grid its name says."""
    import numpy as np
    import pycuda.driver as cuda

    design, threads, *rest = name.split("_")
    threads = int(threads)
    stages, per_sm = (int(rest[0]), int(rest[1])) if design == "prefetch" else (0, 0)
    func = module.get_function(name)
    shared = stages * ROW_BYTES
    if shared:
        func.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
    grid = (sms * per_sm, 1) if stages else (ROWS, 1)
    pointers = [np.uintp(a.data_ptr()) for a in args] + [np.int32(ROWS)]
    return lambda: func(*pointers, block=(threads, 1, 1), grid=grid, shared=shared)


def main() -> int:
    import pycuda.driver as cuda
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", nargs="?", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    cubin = build()
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(COLS).cuda()
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(ROWS, COLS, device="cuda")
    y = torch.empty_like(x)
    cuda.init()
    context = cuda.Device(torch.cuda.current_device()).retain_primary_context()
    context.push()
    try:
        module = cuda.module_from_buffer(cubin)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        with torch.no_grad():
            expected = norm(x)
            fast = torch.compile(norm)
            sides = {"torch.compile": lambda: fast(x), "copy": lambda: y.copy_(x)}
            for name in KERNELS:
                launch = launcher(module, name, [x, norm.weight, norm.bias, y], sms)
                y.zero_()
                launch()
                torch.cuda.synchronize()
                error = (y - expected).abs().max().item()
                if error > 1e-4:
                    print(f"{name}: wrong, max abs error {error:.3g}")
                    continue
                sides[name] = launch
            runner = None
            if args.job:
                from workers.measure.gpu_run import Runner
                runner = Runner(str(args.job), 0)
                sides["ours v0"] = runner.run
            times = {name: [] for name in sides}
            order = list(sides)
            for r in range(args.rounds):
                turned = order[r % len(order):] + order[:r % len(order)]
                for name in turned:
                    times[name].append(time_gpu(sides[name]).median_us)
            peer = statistics.median(times["torch.compile"])
            print("| kernel | us (median of rounds) | vs torch.compile |")
            print("|---|---:|---:|")
            for name in order:
                us = statistics.median(times[name])
                print(f"| {name} | {us:.1f} | {peer / us:.3f}x |")
            if runner:
                runner.context.pop()
    finally:
        context.pop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
