"""Artifacts are written whole or not at all: a temp file in the same folder, then os.replace."""
from __future__ import annotations

import os
import tempfile


def _umask() -> int:
    """The process's umask, read without changing it (os.umask can only read by setting, which races
    with other threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration):
        return 0o022


def write_bytes(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # the mode open() would give, not mkstemp's private 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode())
