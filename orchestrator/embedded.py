"""Worker processes on this machine: the embedded farm of `orchestrator submit` (no --broker), and the
test suite's farms. They are ordinary `celery worker` processes, started and stopped here; each dies
with the process that started it (workers.process.die_with_parent), so a killed `submit` leaves none."""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Iterator

from orchestrator.heartbeat import is_alive
from orchestrator.settings import EMBEDDED_DIR, FarmSettings, redis_server
from orchestrator.state import open_store
from workers.process import die_with_parent

log = logging.getLogger("orchestrator")


@dataclass
class WorkerSpec:
    name: str  # node name before "@host", e.g. "compile1", "gpu0"
    queue: str  # "compile" | "gpu"
    concurrency: int = 1
    gpu: str | None = None  # CUDA_VISIBLE_DEVICES for a gpu worker

    @property
    def hostname(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "celery", "-A", "orchestrator.celery_app", "worker", "-Q", self.queue,
               "-n", self.hostname, "-c", str(self.concurrency), "--prefetch-multiplier=1", "-l", "INFO",
               "--without-gossip", "--without-mingle"]  # both need broadcast chatter the farm never uses
        if self.queue == "gpu":  # one process per GPU, a fresh one per task: no CUDA state survives a task
            cmd += ["-P", "prefork", "--max-tasks-per-child=1"]
        return cmd


def local_gpus() -> list[str]:
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in done.stdout.splitlines() if line.startswith("GPU ")] if done.returncode == 0 else []


def default_specs(compile_workers: int) -> list[WorkerSpec]:
    """compile_workers compile workers, and one gpu worker per local GPU (one, measuring nothing, without)."""
    specs = [WorkerSpec(f"compile{i + 1}", "compile") for i in range(compile_workers)]
    gpus = local_gpus()
    specs += [WorkerSpec(f"gpu{i}", "gpu", gpu=str(i)) for i in range(len(gpus))] or [WorkerSpec("gpu0", "gpu")]
    return specs


class WorkerPool:
    """Starts worker processes (each in its own session, so a Ctrl-C reaches only the CLI) and stops them."""

    def __init__(self, settings: FarmSettings, log_dir: str, env: dict[str, str] | None = None):
        self.settings, self.log_dir, self.env = settings, log_dir, env or {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.specs: dict[str, WorkerSpec] = {}

    def start(self, spec: WorkerSpec) -> subprocess.Popen:
        os.makedirs(self.log_dir, exist_ok=True)
        # NVLink multicast off in every worker, as on the farm's multi-GPU hosts (deploy/README.md)
        env = {**os.environ, "NCCL_NVLS_ENABLE": "0", **self.settings.to_env(), **self.env}
        if spec.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = spec.gpu
        with open(os.path.join(self.log_dir, f"{spec.name}.log"), "ab") as out:
            proc = subprocess.Popen(spec.command(), env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
        self.procs[spec.name], self.specs[spec.name] = proc, spec
        return proc

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until every started worker beats in the state store (itself, not an earlier one of its name)."""
        store, deadline = open_store(self.settings.state_url), time.time() + timeout
        while True:
            alive = {(w.hostname, w.pid) for w in store.workers() if is_alive(w)}
            missing = [n for n, s in self.specs.items() if (s.hostname, self.procs[n].pid) not in alive]
            dead = [n for n in missing if self.procs[n].poll() is not None]
            if dead:
                raise RuntimeError(f"worker(s) {', '.join(dead)} exited at start; see {self.log_dir}/{dead[0]}.log")
            if not missing:
                return
            if time.time() > deadline:
                raise RuntimeError(f"worker(s) {', '.join(missing)} not ready after {timeout:.0f} s; see {self.log_dir}")
            time.sleep(0.2)

    def stop(self, name: str | None = None, timeout: float = 20.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL of the worker's process group after `timeout`."""
        names = [name] if name else list(self.procs)
        for n in names:
            if self.procs[n].poll() is None:
                self.procs[n].send_signal(signal.SIGTERM)
        for n in names:
            proc = self.procs.pop(n)
            self.specs.pop(n)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("worker %s did not stop in %.0f s; killing it", n, timeout)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class FarmBusy(Exception):
    """Another `submit` or `resume` runs the embedded farm of this output folder."""


@contextlib.contextmanager
def _owning(folder: str) -> Iterator[None]:
    """This process alone runs the embedded farm of `folder` while the with-block lasts: a second one
    would start a second set of workers under the same names. The kernel drops the flock with its holder."""
    with open(os.path.join(folder, "owner.lock"), "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise FarmBusy(f"the embedded farm in {folder} is run by another orchestrator (pid "
                           f"{lock.read().strip() or '?'}); wait for it to end, or stop it and resume") from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        yield


@contextlib.contextmanager
def _private_redis(binary: str, sock: str, folder: str) -> Iterator[None]:
    """redis-server on a Unix socket that only this user may open; nothing on disk (the job state is in files)."""
    import redis

    log_path = os.path.join(folder, "logs", "redis.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([binary, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
                                 "--save", "", "--appendonly", "no", "--dir", folder],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=die_with_parent)
    try:
        client, deadline = redis.Redis(unix_socket_path=sock), time.time() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the embedded farm's redis-server did not start; see {log_path}") from None
                time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def embedded_farm(settings: FarmSettings, out_dir: str, compile_workers: int) -> Iterator[WorkerPool]:
    """The embedded farm of out_dir for the with-block: its own Redis where redis-server is installed,
    compile workers and one gpu worker per local GPU; all of it stopped at the end."""
    folder = os.path.join(os.path.abspath(out_dir), EMBEDDED_DIR)
    os.makedirs(folder, exist_ok=True)
    if settings.backend_url.startswith("file://"):
        os.makedirs(settings.backend_url[len("file://"):], exist_ok=True)
    sock = settings.private_redis_socket
    with _owning(folder), (_private_redis(redis_server(), sock, folder) if sock else contextlib.nullcontext()):
        with WorkerPool(settings, os.path.join(folder, "logs")) as pool:
            for spec in default_specs(compile_workers):
                pool.start(spec)
            log.info("embedded farm: %d workers on %s (logs in %s)", len(pool.specs),
                     f"a private redis-server ({sock})" if sock else "the file transport", pool.log_dir)
            pool.wait_ready()
            yield pool
