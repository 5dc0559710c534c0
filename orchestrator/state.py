"""Job, task and worker state, changed only by compare-and-set.

Celery delivers a task at least once, and a resumed driver may race the one it replaces, so every
change is a read-modify-write that commits only if nobody changed the record in between: WATCH/MULTI
on Redis, an flock on the file store. Both stores share the typed API of `StateStore`, which also has
exclusive locks (one measurement at a time per physical GPU). Every committed job is also written to
its folder (JOB_FILE), from where `recover_jobs` puts back what a Redis that lost its data forgot.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import logging
import os
import socket
import time
import urllib.parse
from abc import ABC, abstractmethod
from typing import IO, Callable, Iterator

from orchestrator.records import JobState, LockHolder, TaskClaim, TaskReport, WorkerInfo
from workers.atomic import write_text

JOBS, TASKS, WORKERS, LOCKS = "job", "task", "worker", "lock"
JOB_FILE = "job_state.json"  # in the job folder: the job's last committed state
# A holder that took a file lock but has not written its name yet (the file store's lock is free
# only when no process holds it, so this one is alive).
STARTING_HOLDER = LockHolder(host="", pid=0, task_id="(taking the lock)")

log = logging.getLogger(__name__)


def _process_gone(holder: LockHolder) -> bool:
    """The holder was a process of this host that no longer runs (killed mid-measurement: its `finally`
    never released the lock). Only decidable on its own host, which is where a GPU's contenders are."""
    if holder.host != socket.gethostname() or holder.pid <= 0:
        return False
    try:
        with open(f"/proc/{holder.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie runs nothing any more
    except FileNotFoundError:
        return True


class StoreUnreachable(Exception):
    """The state store cannot be used; the message says why and what to check."""


class StateStore(ABC):
    # -- primitives each backend provides ------------------------------------------------------
    @abstractmethod
    def _get(self, kind: str, key: str) -> str | None: ...

    @abstractmethod
    def _cas(self, kind: str, key: str, change: Callable[[str | None], str | None]) -> str | None:
        """Atomically replace the value by change(old) unless that returns None; returns what was committed."""

    @abstractmethod
    def _keys(self, kind: str) -> list[str]: ...

    @abstractmethod
    def _delete(self, kind: str, key: str) -> None: ...

    @abstractmethod
    def _try_lock(self, name: str, holder: LockHolder, lease_s: float) -> LockHolder | None:
        """Take lock `name` for `holder` if it is free (for at most lease_s); else return who holds it."""

    @abstractmethod
    def _unlock(self, name: str, holder: LockHolder) -> None:
        """Release lock `name` if `holder` still holds it."""

    def probe(self) -> None:
        """Raise StoreUnreachable, with the reason, where the store cannot be used (a wrong URL or password)."""

    # -- jobs ----------------------------------------------------------------------------------
    def create_job(self, job: JobState) -> bool:
        created = self._cas(JOBS, job.job_id, lambda old: job.to_json() if old is None else None) is not None
        if created:
            _keep_in_folder(job)
        return created

    def get_job(self, job_id: str) -> JobState | None:
        text = self._get(JOBS, job_id)
        return JobState.from_json(text) if text else None

    def update_job(self, job_id: str, change: Callable[[JobState], JobState | None]) -> JobState | None:
        """Replace the job by change(current) unless that is None; returns the committed job or None."""
        def step(old: str | None) -> str | None:
            job = change(JobState.from_json(old)) if old else None
            if job is None:
                return None
            job.rev += 1
            job.updated = time.time()
            return job.to_json()

        text = self._cas(JOBS, job_id, step)
        if not text:
            return None
        committed = JobState.from_json(text)
        _keep_in_folder(committed)
        return committed

    def jobs(self) -> list[JobState]:
        found = (self.get_job(k) for k in self._keys(JOBS))
        return sorted((j for j in found if j), key=lambda j: (j.created, j.job_id))

    # -- task runs (what makes redelivered tasks idempotent) ------------------------------------
    def claim_task(self, task_id: str, worker: str) -> TaskClaim:
        """Count one more attempt of `task_id` on `worker`, unless it is done already."""
        def step(old: str | None) -> str | None:
            claim = TaskClaim.from_json(old) if old else TaskClaim(task_id, "running", worker, 0)
            if claim.state == "done":
                return None
            claim.worker, claim.attempts = worker, claim.attempts + 1
            return claim.to_json()

        self._cas(TASKS, task_id, step)
        return self.task_claim(task_id)  # type: ignore[return-value]

    def finish_task(self, task_id: str, report: TaskReport) -> TaskReport:
        """Record the first finished report; a later duplicate gets the recorded one back."""
        def step(old: str | None) -> str | None:
            claim = TaskClaim.from_json(old) if old else TaskClaim(task_id, "running", report.worker, 1)
            if claim.state == "done":
                return None
            claim.state, claim.report = "done", report
            return claim.to_json()

        self._cas(TASKS, task_id, step)
        return self.task_claim(task_id).report  # type: ignore[union-attr,return-value]

    def task_claim(self, task_id: str) -> TaskClaim | None:
        text = self._get(TASKS, task_id)
        return TaskClaim.from_json(text) if text else None

    # -- workers -------------------------------------------------------------------------------
    def heartbeat(self, info: WorkerInfo) -> None:
        self._cas(WORKERS, info.hostname, lambda old: info.to_json())

    def drop_worker(self, hostname: str) -> None:
        self._delete(WORKERS, hostname)

    def workers(self) -> list[WorkerInfo]:
        found = (self._get(WORKERS, k) for k in self._keys(WORKERS))
        return sorted((WorkerInfo.from_json(t) for t in found if t), key=lambda w: w.hostname)

    # -- exclusive locks ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def exclusive(self, name: str, holder: LockHolder, lease_s: float, poll_s: float = 0.2) -> Iterator[float]:
        """Hold lock `name` for the with-block, waiting while another holder has it; yields the seconds
        waited. A holder whose process is gone is replaced; the lease bounds what any other loss costs."""
        asked, waiting_for = time.time(), None
        while (other := self._try_lock(name, holder, lease_s)) is not None:
            if _process_gone(other):
                log.warning("lock %s: holder %s (pid %d) is gone; taking the lock over", name, other.task_id, other.pid)
                self._unlock(name, other)
                continue
            if other != waiting_for:
                log.info("%s waits for lock %s, held by %s (pid %d on %s)", holder.task_id, name, other.task_id,
                         other.pid, other.host or "?")
                waiting_for = other
            time.sleep(poll_s)
        waited = time.time() - asked
        if waiting_for is not None:
            log.info("%s took lock %s after waiting %.1f s", holder.task_id, name, waited)
        try:
            yield waited
        finally:
            self._unlock(name, holder)


class RedisStateStore(StateStore):
    PREFIX = "mlir-farm:"
    # delete the key only if it still holds this value (a lease that expired may have passed it on)
    _DELETE_IF = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

    def __init__(self, url: str, outage_retries: int = 20):
        """outage_retries: how often a call is retried while Redis is unreachable, about 2 s apart
        (20: a restart of ~30 s is ridden out; -1: any outage is waited out)."""
        import redis
        from redis.backoff import ExponentialBackoff
        from redis.retry import Retry

        self.url = url
        self._redis = redis.Redis.from_url(
            url, decode_responses=True, retry=Retry(ExponentialBackoff(cap=2.0, base=0.1), outage_retries),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError], socket_connect_timeout=2)
        self._watch_error = redis.WatchError

    def probe(self) -> None:
        import redis

        from orchestrator.settings import redact

        once = redis.Redis.from_url(self.url, socket_connect_timeout=3, socket_timeout=3)
        try:
            once.ping()
            once.exists(self._key(JOBS, "probe"))  # a user whose ACL leaves out the farm's keys fails here
        except redis.AuthenticationError as e:
            raise StoreUnreachable(f"Redis at {redact(self.url)} refused the credentials ({e}); check the "
                                   "password in --broker or $MLIR_FARM_BROKER") from None
        except redis.ConnectionError as e:
            raise StoreUnreachable(f"cannot reach Redis at {redact(self.url)} ({e}); is the farm's Redis "
                                   "running, and are the host and port right?") from None
        except redis.RedisError as e:
            raise StoreUnreachable(f"Redis at {redact(self.url)} refused the farm ({e}); the user needs "
                                   f"the keys {self.PREFIX}* (deploy/redis.conf)") from None
        finally:
            once.close()

    def _key(self, kind: str, key: str) -> str:
        return f"{self.PREFIX}{kind}:{key}"

    def _get(self, kind: str, key: str) -> str | None:
        return self._redis.get(self._key(kind, key))

    def _cas(self, kind: str, key: str, change: Callable[[str | None], str | None]) -> str | None:
        name = self._key(kind, key)
        with self._redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(name)
                    new = change(pipe.get(name))
                    if new is None:
                        pipe.unwatch()
                        return None
                    pipe.multi()
                    pipe.set(name, new)
                    pipe.execute()
                    return new
                except self._watch_error:
                    continue  # somebody else committed first: re-read and decide again

    def _keys(self, kind: str) -> list[str]:
        start = len(self._key(kind, ""))
        return [k[start:] for k in self._redis.scan_iter(match=self._key(kind, "*"), count=500)]

    def _delete(self, kind: str, key: str) -> None:
        self._redis.delete(self._key(kind, key))

    def _try_lock(self, name: str, holder: LockHolder, lease_s: float) -> LockHolder | None:
        key = self._key(LOCKS, name)
        while not self._redis.set(key, holder.to_json(), nx=True, px=int(lease_s * 1000)):
            text = self._redis.get(key)
            if text is not None:  # else it expired or was released in between: try again
                return LockHolder.from_json(text)
        return None

    def _unlock(self, name: str, holder: LockHolder) -> None:
        self._redis.eval(self._DELETE_IF, 1, self._key(LOCKS, name), holder.to_json())


class FileStateStore(StateStore):
    """One JSON file per record; an flock per record serializes the read-modify-write."""

    def __init__(self, root: str):
        self.root = root
        self._held: dict[str, IO[str]] = {}  # lock name -> the open lock file whose flock this process holds

    def _path(self, kind: str, key: str, ext: str = ".json") -> str:
        return os.path.join(self.root, kind, urllib.parse.quote(key, safe="") + ext)

    def _get(self, kind: str, key: str) -> str | None:
        try:
            with open(self._path(kind, key)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _cas(self, kind: str, key: str, change: Callable[[str | None], str | None]) -> str | None:
        os.makedirs(os.path.join(self.root, kind), exist_ok=True)
        with open(self._path(kind, key, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            new = change(self._get(kind, key))
            if new is not None:
                write_text(self._path(kind, key), new)
            return new

    def _keys(self, kind: str) -> list[str]:
        folder = os.path.join(self.root, kind)
        names = os.listdir(folder) if os.path.isdir(folder) else []
        # skip write_text's temp files (".tmp-...<name>.json") caught between write and rename
        return [urllib.parse.unquote(n[:-5]) for n in names if n.endswith(".json") and not n.startswith(".tmp-")]

    def _try_lock(self, name: str, holder: LockHolder, lease_s: float) -> LockHolder | None:
        """An flock, which the kernel drops when its process dies: no lease needed here."""
        os.makedirs(os.path.join(self.root, LOCKS), exist_ok=True)
        lock = open(self._path(LOCKS, name, ".lock"), "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            text = lock.read()
            lock.close()
            try:
                return LockHolder.from_json(text)
            except ValueError:  # empty or half written: the holder is between its flock and its write
                return STARTING_HOLDER
        lock.truncate(0)
        lock.write(holder.to_json())  # for the log line of whoever waits
        lock.flush()
        self._held[name] = lock
        return None

    def _unlock(self, name: str, holder: LockHolder) -> None:
        lock = self._held.pop(name, None)
        if lock is not None:  # only our own lock; a dead holder's flock is gone with its process
            lock.truncate(0)
            lock.close()

    def _delete(self, kind: str, key: str) -> None:
        for ext in (".json", ".lock"):
            try:
                os.unlink(self._path(kind, key, ext))
            except FileNotFoundError:
                pass


def _keep_in_folder(job: JobState) -> None:
    write_text(os.path.join(job.job_dir, JOB_FILE), job.to_json(indent=1))


def recover_jobs(store: StateStore, out_dir: str) -> list[JobState]:
    """Put back into the store the jobs whose folders in out_dir it does not know (a Redis restarted
    without its data); returns them."""
    found = []
    for path in sorted(glob.glob(os.path.join(glob.escape(out_dir), "*", JOB_FILE))):
        with open(path) as f:
            job = JobState.from_json(f.read())
        if store.create_job(job):  # only where the store has no job of that id
            found.append(job)
    return found


def open_store(url: str, outage_retries: int = 20) -> StateStore:
    if url.startswith("file://"):
        return FileStateStore(url[len("file://"):])
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisStateStore(url, outage_retries)
    raise ValueError(f"state store URL {url!r}: expected redis://, rediss://, unix:// or file://")
