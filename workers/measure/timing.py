"""The timing protocol, the same for our kernels, PyTorch eager and torch.compile: warm-up, then
timed runs with CUDA events, L2 flushed before each run by writing a buffer larger than L2, and the
GPU held back after the flush until the run's launches are queued: what is timed is the GPU's time for
the run's kernels (kernel time), not the CPU's time to issue them."""
from __future__ import annotations

import statistics
from typing import Callable

from workers.records import Timing

WARMUP = 5
RUNS = 50
FLUSH_BYTES = 256 << 20  # H200's L2 is 60 MB
# the GPU spins this many cycles (about 1 ms at the H200's 1.98 GHz) between the flush and the start
# event, while the CPU queues the run's launches (Python, the dispatcher, torch.compile's guards: tens to
# hundreds of us). Without it a run whose launches outlasted the flush (about 65 us) timed the GPU idle
# waiting for them: eager's times of the zoo's networks swung 54-166 us between runs, and held at 52-55 us
# with it (benchmarks/results/perf_targets_h200.md runs 14-18)
LAUNCH_HEADSTART_CYCLES = 2_000_000


def time_gpu(fn: Callable[[], object], runs: int = RUNS, warmup: int = WARMUP) -> Timing:
    import torch

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(runs):
        flush.zero_()
        torch.cuda._sleep(LAUNCH_HEADSTART_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0)
    return summarize(samples)


def summarize(samples_us: list[float]) -> Timing:
    ordered = sorted(samples_us)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return Timing(median_us=round(statistics.median(ordered), 3), p20_us=round(pick(0.2), 3),
                  p80_us=round(pick(0.8), 3), runs=len(ordered))
