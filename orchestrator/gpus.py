"""One measurement at a time per physical GPU, and the check that it held.

A measure worker is pinned to a GPU by CUDA_VISIBLE_DEVICES; two workers pinned to the same GPU (a
misconfiguration, or the single-GPU test of the pinning) would time and profile each other's kernels.
So every measurement holds the GPU's lock in the state store, keyed by the GPU's UUID (read from the
CUDA driver by a probe child, so no CUDA state ever enters the Celery worker), or by host and
CUDA_VISIBLE_DEVICES where there is no driver. The measure task records which GPU it held and when
(`GpuUse`); `gpu_usage` rebuilds every device's timeline from the job states and counts overlaps.

    python -m orchestrator.gpus      # prints the UUID of the first GPU this process sees ("" if none)
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

from orchestrator.records import GpuUse, JobState, LockHolder
from orchestrator.state import StateStore
from workers.jsonrecord import JsonRecord

PROBE_TIMEOUT_S = 30


def driver_uuid() -> str:
    """UUID of CUDA device 0 as this process sees it (CUDA_VISIBLE_DEVICES applies), in nvidia-smi's
    spelling "GPU-xxxxxxxx-...", or "" without a CUDA driver or GPU. cuInit creates no context."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ""
    device, raw = ctypes.c_int(), ctypes.create_string_buffer(16)
    # _v2: a MIG instance reports its own UUID, and it is the unit a measurement owns
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0) or cuda.cuDeviceGetUuid_v2(raw, device):
        return ""
    h = raw.raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def probe_uuid() -> str:
    """driver_uuid() from a child process: the Celery worker itself never loads the CUDA driver, and a
    hung driver costs the probe's timeout, not the worker."""
    try:
        done = subprocess.run([sys.executable, "-m", "orchestrator.gpus"], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


@contextlib.contextmanager
def holding_gpu(store: StateStore, task_id: str, lease_s: float) -> Iterator[GpuUse]:
    """This worker's GPU, held exclusively for the with-block; yields its GpuUse, whose start and end are
    stamped inside the lock (so intervals of one GPU never overlap while the lock works)."""
    use = GpuUse(host=socket.gethostname(), visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                 uuid=probe_uuid())
    holder = LockHolder(host=use.host, pid=os.getpid(), task_id=task_id)
    with store.exclusive(f"gpu:{use.device}", holder, lease_s) as waited:
        use.waited_s, use.start = round(waited, 3), time.time()
        try:
            yield use
        finally:
            use.end = time.time()


# -- the check: every measurement's (device, start, end), overlaps per device --------------------------
@dataclass
class GpuInterval(JsonRecord):
    """One measurement's hold of a GPU."""

    device: str  # GpuUse.device: the UUID, else host + CUDA_VISIBLE_DEVICES
    name: str  # the GPU name the measurement reported (a test double names itself)
    job_id: str
    version: int
    worker: str
    start: float
    end: float
    waited_s: float  # for the lock, before `start`


@dataclass
class GpuOverlap(JsonRecord):
    """Two measurements on one device at the same time: what the lock exists to prevent."""

    first: GpuInterval
    second: GpuInterval
    seconds: float


@dataclass
class DeviceUsage(JsonRecord):
    device: str
    name: str
    measurements: int
    busy_s: float  # sum of the measurements' spans
    span_s: float  # first start to last end
    waited_s: float  # sum of the measurements' waits for this GPU's lock
    workers: list[str]
    overlaps: int


@dataclass
class GpuUsage(JsonRecord):
    devices: list[DeviceUsage] = field(default_factory=list)
    overlaps: list[GpuOverlap] = field(default_factory=list)
    unrecorded: int = 0  # measured iterations without a GpuUse (from before it was recorded)


def measure_intervals(jobs: list[JobState]) -> tuple[list[GpuInterval], int]:
    """Every recorded measurement of the jobs, and how many measured iterations carry no GpuUse."""
    intervals, unrecorded = [], 0
    for job in jobs:
        for it in job.iterations:
            if it.measure_gpu is None:
                unrecorded += it.measure is not None
                continue
            g = it.measure_gpu
            intervals.append(GpuInterval(g.device, it.measure.device if it.measure else "n/a", job.job_id,
                                         it.version, it.measure_worker, g.start, g.end, g.waited_s))
    return intervals, unrecorded


def find_overlaps(intervals: list[GpuInterval]) -> list[GpuOverlap]:
    """Every pair of intervals of one device that share time (touching ends do not)."""
    found = []
    by_device: dict[str, list[GpuInterval]] = defaultdict(list)
    for i in intervals:
        by_device[i.device].append(i)
    for group in by_device.values():
        group.sort(key=lambda i: i.start)
        for n, first in enumerate(group):
            for second in group[n + 1:]:
                if second.start >= first.end:
                    break  # sorted by start: no later one reaches back into `first`
                found.append(GpuOverlap(first, second, round(min(first.end, second.end) - second.start, 3)))
    return found


def gpu_usage(jobs: list[JobState]) -> GpuUsage:
    intervals, unrecorded = measure_intervals(jobs)
    overlaps = find_overlaps(intervals)
    devices = []
    for device in sorted({i.device for i in intervals}):
        mine = [i for i in intervals if i.device == device]
        devices.append(DeviceUsage(
            device=device, name=", ".join(sorted({i.name for i in mine})), measurements=len(mine),
            busy_s=round(sum(i.end - i.start for i in mine), 3),
            span_s=round(max(i.end for i in mine) - min(i.start for i in mine), 3),
            waited_s=round(sum(i.waited_s for i in mine), 3),
            workers=sorted({i.worker for i in mine}), overlaps=sum(o.first.device == device for o in overlaps)))
    return GpuUsage(devices, overlaps, unrecorded)


def usage_text(usage: GpuUsage) -> str:
    lines = [f"{'DEVICE':<48} {'MEAS':>5} {'BUSY s':>9} {'SPAN s':>9} {'WAIT s':>9} {'OVERLAPS':>8}  WORKERS / GPU NAME"]
    for d in usage.devices:
        lines.append(f"{d.device:<48} {d.measurements:>5} {d.busy_s:>9.1f} {d.span_s:>9.1f} {d.waited_s:>9.1f} {d.overlaps:>8}  "
                     f"{', '.join(d.workers)} / {d.name}")
    for o in usage.overlaps:
        lines.append(f"OVERLAP on {o.first.device}: {o.first.job_id} v{o.first.version} ({o.first.worker}) and "
                     f"{o.second.job_id} v{o.second.version} ({o.second.worker}) shared {o.seconds:.3f} s")
    if usage.unrecorded:
        lines.append(f"{usage.unrecorded} measured iteration(s) carry no GPU record (measured before it was kept)")
    lines.append(f"{sum(d.measurements for d in usage.devices)} measurements on {len(usage.devices)} device(s), "
                 f"{len(usage.overlaps)} overlap(s)")
    return "\n".join(lines)


if __name__ == "__main__":
    print(driver_uuid())
