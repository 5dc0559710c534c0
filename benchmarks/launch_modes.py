"""Our kernels launched one by one from the host (pycuda, as before 2026-12-07) against the same launches as
one CUDA graph (workers/measure/graph.py), same protocol (workers/measure/timing.py), per job folder's v0:
    python3 benchmarks/launch_modes.py JOB_DIR [JOB_DIR ...]      # on a GPU node
Prints each job's launches, both medians and the graph's speedup."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.measure.gpu_run import Runner  # noqa: E402
from workers.measure.launch import launch_order  # noqa: E402
from workers.measure.timing import time_gpu  # noqa: E402


def main(jobs: list[str]) -> None:
    print("| job | launches | host us | graph us | graph speedup |\n|---|---|---|---|---|")
    for job in jobs:
        runner = Runner(job, 0)
        try:
            host = time_gpu(runner.run).median_us
            how = runner.use_graph()
            if runner.graph is None:
                print(f"| {Path(job).name} | {how} | | | |", flush=True)
                continue
            graph = time_gpu(runner.run).median_us
            print(f"| {Path(job).name} | {len(launch_order(runner.config))} | {host:.1f} | {graph:.1f} | "
                  f"{host / graph:.2f}x |", flush=True)
        finally:
            runner.close()


if __name__ == "__main__":
    main(sys.argv[1:])
