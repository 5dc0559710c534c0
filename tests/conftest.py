"""Fixtures for the orchestrator's tests: a real redis-server on a free port (its files in a temp
folder, password on) and real Celery worker processes, with the GPU measurement served by the test
double FakeGpuMeasure (tests/test_orchestrator_doubles.py)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MODELS = TESTS / "data" / "models"
ZOO = TESTS / "data" / "zoo"
REDIS_PASSWORD = "farm-test-secret"


_BACKGROUND: list[subprocess.Popen] = []  # CLI runs of the current test, killed if it leaves one running


@pytest.fixture(autouse=True)
def _own_state_home_and_no_cli_left(tmp_path_factory, monkeypatch):
    """The CLI remembers the latest --out under $XDG_STATE_HOME: each test (and its subprocesses) has its
    own. Subprocesses import this checkout's code from any folder (not the one an editable install names).
    A CLI a failed test left running is killed (its farm dies with it)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state-home")))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")])))
    yield
    while _BACKGROUND:
        proc = _BACKGROUND.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI run: no farm named by the environment, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MLIR_FARM_")}, **extra}


def fake_gpu_env(markers: Path, sleep_s: float) -> dict[str, str]:
    """Workers that measure with the TEST DOUBLE FakeGpuMeasure, each measurement held sleep_s."""
    from test_orchestrator_doubles import IMPL, MARKER_ENV, SLEEP_ENV

    return {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "MLIR_FARM_MEASURE": IMPL, SLEEP_ENV: str(sleep_s), MARKER_ENV: str(markers)}


class DrainedPopen(subprocess.Popen):
    """A background process whose stdout and stderr are read as they come, by threads, so that it never blocks in
    a write to a full pipe (a CLI's stderr filled with a Redis outage's warnings once stopped its driver for
    good); communicate() returns all it wrote, written() what it has so far."""

    def __init__(self, cmd: list[str], **kw):
        super().__init__(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        self._written: tuple[list[str], list[str]] = ([], [])
        self._readers = [threading.Thread(target=lambda p=pipe, s=sink: s.extend(p), daemon=True)
                         for pipe, sink in zip((self.stdout, self.stderr), self._written)]
        for reader in self._readers:
            reader.start()

    def written(self) -> tuple[str, str]:
        return "".join(self._written[0]), "".join(self._written[1])

    def communicate(self, input=None, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        for reader in self._readers:
            reader.join()
        return self.written()


def run_cli(*args: str, env: dict[str, str] | None = None, background: bool = False, timeout: float = 600, **kw):
    """`orchestrator ARGS` as a subprocess (the embedded farm unless ARGS name a broker); in the background, a
    DrainedPopen."""
    cmd = [sys.executable, "-m", "orchestrator.cli", *args]
    if background:
        _BACKGROUND.append(DrainedPopen(cmd, env=env or cli_env(), **kw))
        return _BACKGROUND[-1]
    return subprocess.run(cmd, env=env or cli_env(), capture_output=True, text=True, timeout=timeout, **kw)


def farm_processes(out: Path) -> list[str]:
    """Processes whose command line or environment names the output folder `out` (the embedded farm's
    workers, their pool processes and children, its redis-server), as "pid command"."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if int(pid) != os.getpid() and not zombie and str(out) in cmdline + environ:
            found.append(f"{pid} {cmdline[:120]}")
    return found


def wait_until(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


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
    without it (benchmarks) no write waits for the disk. `users`: ACL `user` lines (CHANGE-ME for the
    password) in place of the default user's password; the URL then names the first user that is on."""

    def __init__(self, folder: Path, persistent: bool = True, users: list[str] | None = None):
        self.folder, self.port, self.proc, self.persistent = folder, _free_port(), None, persistent
        self.users = [line.replace("CHANGE-ME", REDIS_PASSWORD).split()[1:] for line in users or []]
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def user(self) -> str:
        return next((u[0] for u in self.users if "on" in u), "")

    @property
    def url(self) -> str:
        return f"redis://{self.user}:{REDIS_PASSWORD}@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        auth = [arg for user in self.users for arg in ("--user", *user)] or ["--requirepass", REDIS_PASSWORD]
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
             *auth, "--save", "",
             *(["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"])],
            stdout=open(self.folder / "redis.log", "ab"), stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(f"AUTH {self.user or 'default'} {REDIS_PASSWORD}\r\nPING\r\n".encode())
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

        self.redis, self.out = redis, out
        self.markers = out / "measure-markers"
        self.settings = FarmSettings.redis(redis.url, out_root=str(out))
        self.store = open_store(self.settings.state_url)
        self.pool = WorkerPool(self.settings, str(out / "worker-logs"), fake_gpu_env(self.markers, measure_sleep_s))

    def start_workers(self, compile_workers: int = 2, gpu_workers: int = 1) -> None:
        from orchestrator.embedded import WorkerSpec

        for i in range(compile_workers):
            self.pool.start(WorkerSpec(f"compile{i + 1}", "compile"))
        for i in range(gpu_workers):
            self.pool.start(WorkerSpec(f"gpu{i}", "gpu", gpu=str(i)))
        self.pool.wait_ready()

    def cli(self, *args: str, background: bool = False, broker: bool = True):
        return run_cli(*args, "--out", str(self.out), *(["--broker", self.redis.url] if broker else []),
                       background=background, timeout=300)

    def wait_for(self, predicate, timeout: float = 120.0, what: str = "condition"):
        return wait_until(predicate, timeout, what)

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
