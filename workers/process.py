"""Child processes that can be killed whole, and bounded in memory."""
from __future__ import annotations

import os
import resource
import signal
import subprocess


def _address_space_limit(memory_bytes: int):
    def limit() -> None:  # within the limit this process was given itself (a bounded child's child)
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return limit


def run_in_group(cmd: list[str], timeout_s: float, memory_bytes: int | None = None,
                 env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run cmd in its own process group; return (exit status, stdout and stderr together). On timeout the
    whole group (ncu and its target, a lowering and its helpers) is killed, since a Celery hard time limit
    would kill only the pool process, not its children. memory_bytes caps the child's address space: an
    allocation past it fails inside the child (MemoryError), instead of the machine's OOM killer choosing."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
                            preexec_fn=_address_space_limit(memory_bytes) if memory_bytes else None)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{os.path.basename(cmd[0])} ran past {timeout_s:.0f} s and was killed") from None
    return proc.returncode, out
