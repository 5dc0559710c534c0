"""Fixtures for the orchestrator's tests: a real redis-server on a free port (its files in a temp
folder, password on) and real Celery worker processes, with the GPU measurement served by the test
double FakeGpuMeasure (tests/test_orchestrator_doubles.py)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MODELS = TESTS / "data" / "models"
ZOO = TESTS / "data" / "zoo"
REDIS_PASSWORD = "farm-test-secret"


def lower_zoo(tmp_path_factory, *names: str) -> Path:
    """A folder of job folders, one per zoo model, lowered by the real frontend (torch-mlir)."""
    from workers.frontend import lower_model

    out = tmp_path_factory.mktemp("jobs")
    for name in names:
        lower_model(str(ZOO / f"{name}.py"), str(out / name))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server in `folder`; with persistence (AOF, fsync always) a restart keeps queues and state,
    without it (benchmarks) no write waits for the disk."""

    def __init__(self, folder: Path, persistent: bool = True):
        self.folder, self.port, self.proc, self.persistent = folder, _free_port(), None, persistent
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://:{REDIS_PASSWORD}@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
             "--requirepass", REDIS_PASSWORD, "--save", "",
             *(["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"])],
            stdout=open(self.folder / "redis.log", "ab"), stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(f"AUTH {REDIS_PASSWORD}\r\nPING\r\n".encode())
                    if b"PONG" in s.recv(100):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def redis_server(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (deploy/install.sh installs it)")
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


class Farm:
    """A Redis farm on this machine: workers as real `celery worker` processes, CLI as a subprocess."""

    def __init__(self, redis: RedisServer, out: Path, measure_sleep_s: float = 0.0):
        from orchestrator.embedded import WorkerPool
        from orchestrator.settings import FarmSettings
        from orchestrator.state import open_store
        from test_orchestrator_doubles import IMPL, MARKER_ENV, SLEEP_ENV

        self.redis, self.out = redis, out
        self.markers = out / "measure-markers"
        self.settings = FarmSettings.redis(redis.url)
        self.store = open_store(self.settings.state_url)
        env = {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
               "MLIR_FARM_MEASURE": IMPL, SLEEP_ENV: str(measure_sleep_s), MARKER_ENV: str(self.markers)}
        self.pool = WorkerPool(self.settings, str(out / "worker-logs"), env)

    def start_workers(self, compile_workers: int = 2, gpu_workers: int = 1) -> None:
        from orchestrator.embedded import WorkerSpec

        for i in range(compile_workers):
            self.pool.start(WorkerSpec(f"compile{i + 1}", "compile"))
        for i in range(gpu_workers):
            self.pool.start(WorkerSpec(f"gpu{i}", "gpu", gpu=str(i)))
        self.pool.wait_ready()

    def cli(self, *args: str, background: bool = False, broker: bool = True):
        cmd = [sys.executable, "-m", "orchestrator.cli", *args, "--out", str(self.out)]
        if broker:
            cmd += ["--broker", self.redis.url]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLIR_FARM_")}
        if background:
            return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)

    def wait_for(self, predicate, timeout: float = 120.0, what: str = "condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def stop(self) -> None:
        self.pool.stop()


@pytest.fixture
def farm(redis_server, tmp_path):
    created = []

    def make(**kwargs) -> Farm:
        f = Farm(redis_server, tmp_path / "out", **kwargs)
        created.append(f)
        return f

    yield make
    for f in created:
        f.stop()
