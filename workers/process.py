"""Child processes that can be killed whole, bounded in memory, and that do not outlive their parent."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import tempfile
import threading
import time
from typing import Callable

PAGE = os.sysconf("SC_PAGE_SIZE")
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """For a child's preexec_fn: the kernel kills the child when the process that started it dies, even
    by SIGKILL, so that a killed `orchestrator submit` or Celery worker leaves nothing running (Linux)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in process group `pgid` (what a child and its own children hold)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # stat's fields after the name: state, ppid, pgrp, ..., rss (22nd)
                total += int(fields[21]) * PAGE
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return total


class MemoryLimitExceeded(Exception):
    """The child's process group held more resident memory than it was allowed, and was killed."""


def _start_group(cmd: list[str], stdout, env: dict[str, str] | None = None) -> subprocess.Popen:
    """cmd in a process group of its own, stderr into `stdout`, unbuffered, dying with its parent."""
    return subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}, preexec_fn=die_with_parent)


def run_in_group(cmd: list[str], timeout_s: float, memory_bytes: int | None = None,
                 env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run cmd in its own process group; return (exit status, stdout and stderr together). On timeout the
    whole group (ncu and its target, a lowering and its helpers) is killed, since a Celery hard time limit
    would kill only the pool process, not its children: TimeoutError. The child dies with its parent.
    memory_bytes bounds the group's resident memory (address space that is reserved but never touched
    does not count, as a lowering's unwritten 17 GB input does not), checked twice a second:
    MemoryLimitExceeded."""
    proc = _start_group(cmd, subprocess.PIPE, env)
    over = threading.Event()

    def watch() -> None:
        while proc.poll() is None and not over.is_set():
            if group_rss(proc.pid) > memory_bytes:
                over.set()
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                over.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True) if memory_bytes else None
    if watcher:
        watcher.start()
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{os.path.basename(cmd[0])} ran past {timeout_s:.0f} s and was killed") from None
    finally:
        if watcher:
            over_limit = over.is_set()
            over.set()
            watcher.join()
    if watcher and over_limit:
        raise MemoryLimitExceeded(f"{os.path.basename(cmd[0])} held more than {memory_bytes / (1 << 30):.1f} GB "
                                  "of memory and was killed")
    return proc.returncode, out


def run_while_progressing(cmd: list[str], progress: Callable[[], int], stall_s: float) -> tuple[int | None, str]:
    """Run cmd in its own process group for as long as it makes progress: `progress()` (polled twice a
    second; a count of finished items) must grow at least every stall_s seconds, else the whole group is
    killed. Returns (exit status, or None when it stalled and was killed; the output's last 4,000
    characters). The child dies with its parent."""
    with tempfile.TemporaryFile("w+") as log:
        proc = _start_group(cmd, log)
        done, since, stalled = progress(), time.monotonic(), False
        while proc.poll() is None:
            time.sleep(0.5)
            if (now_done := progress()) > done:
                done, since = now_done, time.monotonic()
            elif time.monotonic() - since > stall_s:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                stalled = True
        log.seek(0)
        return None if stalled else proc.returncode, log.read()[-4000:]
