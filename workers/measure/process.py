"""Child processes that can be killed whole."""
from __future__ import annotations

import os
import signal
import subprocess


def run_in_group(cmd: list[str], timeout_s: float) -> str:
    """Run cmd in its own process group; on timeout the whole group (ncu and its target) is killed,
    since a Celery hard time limit would kill only the pool process, not its children."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{os.path.basename(cmd[0])} ran past {timeout_s:.0f} s and was killed") from None
    return out
