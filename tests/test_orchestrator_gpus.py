"""One measurement at a time per physical GPU (orchestrator/gpus.py): the lock on both state stores, the
overlap checker, and two real Celery measure workers pinned to the same GPU on a real redis-server (the
measurement is the TEST DOUBLE FakeGpuMeasure, holding the "GPU" a few seconds each time)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import MODELS
from orchestrator.gpus import GpuInterval, find_overlaps, gpu_usage
from orchestrator.records import GpuUse, IterationState, JobState, LockHolder
from orchestrator.settings import FarmSettings
from orchestrator.state import open_store
from workers.records import MeasureResult, ScheduleParams


def _hand_made_job(job_id: str, spans: list[tuple[str, float, float]], out: Path = Path("/nowhere")) -> JobState:
    """A job whose iterations were 'measured' on the given (device, start, end): HAND-MADE intervals,
    no farm ran them."""
    job = JobState(job_id, "hand-made-batch", f"/nowhere/{job_id}.py", str(out / job_id), "sm_90a", 6, False,
                   "done", created=0.0)
    for v, (device, start, end) in enumerate(spans):
        it = IterationState(v, "complete", ScheduleParams(ops=[]), "hand-made")
        it.measure = MeasureResult(v, "ok", device="HAND-MADE GPU")
        it.measure_worker = f"gpu-{device}@hand-made"
        it.measure_gpu = GpuUse(host="hand-made", visible_devices="0", uuid=device, start=start, end=end)
        job.iterations.append(it)
    return job


def test_checker_finds_overlaps_in_hand_made_intervals():
    # HAND-MADE intervals: A's v1 of job "a" overlaps job "b"'s v0 by 0.5 s; B runs at the same time on
    # another GPU (no overlap across devices); touching intervals (end == next start) do not overlap.
    jobs = [_hand_made_job("a", [("GPU-A", 0.0, 1.0), ("GPU-A", 1.0, 2.0), ("GPU-B", 0.0, 3.0)]),
            _hand_made_job("b", [("GPU-A", 1.5, 2.5), ("GPU-B", 3.0, 4.0)])]
    usage = gpu_usage(jobs)
    assert [(o.first.job_id, o.first.version, o.second.job_id, o.second.version, o.seconds)
            for o in usage.overlaps] == [("a", 1, "b", 0, 0.5)]
    by_device = {d.device: d for d in usage.devices}
    assert by_device["GPU-A"].overlaps == 1 and by_device["GPU-B"].overlaps == 0
    assert by_device["GPU-A"].measurements == 3 and by_device["GPU-A"].busy_s == 3.0
    assert by_device["GPU-B"].span_s == 4.0
    # an interval inside a long one overlaps it even when a third one starts in between
    nested = [GpuInterval("X", "", "j", v, "w", s, e, 0.0) for v, (s, e) in enumerate([(0, 10), (1, 2), (3, 4)])]
    assert sorted((o.first.version, o.second.version) for o in find_overlaps(nested)) == [(0, 1), (0, 2)]


def test_gpus_command_reports_hand_made_overlap(tmp_path):
    """`orchestrator gpus` on an embedded farm's file state holding HAND-MADE overlapping intervals."""
    store = open_store(FarmSettings.embedded(str(tmp_path)).state_url)
    store.create_job(_hand_made_job("a", [("GPU-A", 0.0, 1.0)], tmp_path))
    store.create_job(_hand_made_job("b", [("GPU-A", 0.5, 2.0)], tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLIR_FARM_")}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "gpus", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "OVERLAP on GPU-A: a v0 (gpu-GPU-A@hand-made) and b v0" in done.stdout
    assert "2 measurements on 1 device(s), 1 overlap(s)" in done.stdout


def _holds_in_turn(store, other_store) -> None:
    """`store` holds lock "gpu:x"; `other_store` waits until it is released."""
    me = LockHolder(socket.gethostname(), os.getpid(), "first")
    other = LockHolder(socket.gethostname(), os.getpid(), "second")
    order = []
    with store.exclusive("gpu:x", me, lease_s=60):
        waiter = threading.Thread(target=lambda: _enter(other_store, other, order))
        waiter.start()
        time.sleep(0.5)
        assert order == []  # still waiting
        order.append("first released")
    waiter.join(10)
    assert order == ["first released", "second held"]


def _enter(store, holder, order) -> None:
    with store.exclusive("gpu:x", holder, lease_s=60, poll_s=0.05) as waited:
        assert waited > 0.3
        order.append("second held")


def _killed_holder(take_lock: str) -> None:
    """A child process takes the lock and is SIGKILLed holding it (its `finally` never runs)."""
    child = subprocess.Popen([sys.executable, "-c", take_lock], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    child.send_signal(signal.SIGKILL)
    child.wait()


TAKE_LOCK = """
import os, socket, time
from orchestrator.records import LockHolder
from orchestrator.state import open_store
store = open_store({url!r})
store._try_lock("gpu:x", LockHolder(socket.gethostname(), os.getpid(), "killed"), 3600)
print("held", flush=True)
time.sleep(600)
"""


def test_file_lock_excludes_and_is_freed_by_a_dead_holder(tmp_path):
    url = f"file://{tmp_path / 'state'}"
    _holds_in_turn(open_store(url), open_store(url))
    _killed_holder(TAKE_LOCK.format(url=url))
    me = LockHolder(socket.gethostname(), os.getpid(), "after the kill")
    with open_store(url).exclusive("gpu:x", me, lease_s=60) as waited:  # the kernel dropped the dead one's flock
        assert waited < 2


def test_redis_lock_excludes_and_takes_over_from_a_dead_holder(redis_server):
    _holds_in_turn(open_store(redis_server.url), open_store(redis_server.url))
    _killed_holder(TAKE_LOCK.format(url=redis_server.url))  # its lease (1 h) has not run out
    me = LockHolder(socket.gethostname(), os.getpid(), "after the kill")
    with open_store(redis_server.url).exclusive("gpu:x", me, lease_s=60) as waited:
        assert waited < 2


@pytest.mark.slow
def test_two_measure_workers_pinned_to_one_gpu_never_overlap(farm):
    from orchestrator.embedded import WorkerSpec

    f = farm(measure_sleep_s=4)  # each TEST DOUBLE measurement holds the "GPU" 4 s
    f.pool.start(WorkerSpec("compile1", "compile"))
    f.pool.start(WorkerSpec("compile2", "compile"))
    for name in ("gpu0", "gpu1"):  # both pinned to GPU 0: the misconfiguration the lock guards against
        f.pool.start(WorkerSpec(name, "gpu", gpu="0"))
    f.pool.wait_ready()
    models = [MODELS / n for n in ("matmul64.py", "elementwise_chain.py", "rowsum.py")]
    done = f.cli("submit", *map(str, models), "--iterations", "2")
    assert done.returncode == 0, done.stderr

    jobs = f.store.jobs()
    uses = [it.measure_gpu for j in jobs for it in j.iterations if it.measure is not None]
    assert len(uses) >= 3 and all(u is not None for u in uses)  # v0 of each, and the advisor's next ones
    assert {(u.host, u.visible_devices, u.uuid) for u in uses} == {(socket.gethostname(), "0", "")}  # no GPU here
    spans = sorted((u.start, u.end) for u in uses)
    assert all(end - start >= 4 for start, end in spans)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), spans  # one after another
    usage = gpu_usage(jobs)
    assert usage.overlaps == [] and len(usage.devices) == 1
    device = usage.devices[0]
    gpu_workers = sorted(s.hostname for n, s in f.pool.specs.items() if n.startswith("gpu"))
    assert device.measurements == len(uses) and device.workers == gpu_workers
    assert "TEST DOUBLE" in device.name
    # both workers had a measurement to run at the same time, and one waited for the other
    assert sum(u.waited_s for u in uses) > 0
    logs = "".join(p.read_text() for p in Path(f.pool.log_dir).glob("gpu*.log"))
    assert "waits for lock gpu:" in logs and "after waiting" in logs

    checked = f.cli("gpus")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(uses)} measurements on 1 device(s), 0 overlap(s)" in checked.stdout
