"""Where a farm keeps its messages, task results and job state.

Two shapes, one code path: a Redis farm (broker, result backend and state store in one Redis), and the
embedded default of `submit` with no --broker, which needs nothing started first: its job state in files
under OUT/.farm, its messages and results in a private redis-server on a Unix socket there (the Redis
farm's transport), or in files (kombu's filesystem transport, orchestrator/filequeue.py) where no
redis-server is installed. Worker processes get the settings through the environment, so the CLI and
the workers it starts always agree.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass

from workers.jsonrecord import JsonRecord

ENV_BROKER = "MLIR_FARM_BROKER"
ENV_BACKEND = "MLIR_FARM_BACKEND"
ENV_STATE = "MLIR_FARM_STATE"
ENV_OUT_ROOT = "MLIR_FARM_OUT_ROOT"
# the embedded farm's redis-server: a path, or "" for the file transport (default: redis-server on PATH)
ENV_REDIS_SERVER = "MLIR_FARM_REDIS_SERVER"
EMBEDDED_DIR = ".farm"  # under the output folder
FILE_SCHEME = "farmfs://"  # the embedded farm's file transport
SOCKET_SCHEME = "redis+socket://"  # kombu's and Celery's spelling of Redis on a Unix socket
MAX_SOCKET_PATH = 100  # a Unix socket's path is at most 107 bytes


@dataclass
class FarmSettings(JsonRecord):
    broker_url: str  # redis://..., or embedded: redis+socket://<socket> or farmfs://<folder>
    backend_url: str  # redis://..., redis+socket://<socket> or file://<folder>
    state_url: str  # redis://... or file://<folder> (embedded)
    out_root: str = ""  # workers run only tasks whose model and job folder lie inside it ("": none may run)

    @classmethod
    def embedded(cls, out_dir: str) -> "FarmSettings":
        out = os.path.abspath(out_dir)
        base = os.path.join(out, EMBEDDED_DIR)
        state = "file://" + os.path.join(base, "state")
        if redis_server():
            url = SOCKET_SCHEME + redis_socket(base)
            return cls(broker_url=url, backend_url=url, state_url=state, out_root=out)
        return cls(broker_url=FILE_SCHEME + os.path.join(base, "broker"),
                   backend_url="file://" + os.path.join(base, "results"), state_url=state, out_root=out)

    @classmethod
    def redis(cls, url: str, out_root: str = "") -> "FarmSettings":
        return cls(broker_url=url, backend_url=url, state_url=url, out_root=out_root)

    @classmethod
    def resolve(cls, broker: str | None, out_dir: str) -> "FarmSettings":
        """--broker (or $MLIR_FARM_BROKER) names a Redis farm; without one, the embedded farm of out_dir."""
        broker = broker or os.environ.get(ENV_BROKER)
        return cls.redis(broker) if broker and not broker.startswith(FILE_SCHEME) else cls.embedded(out_dir)

    @classmethod
    def from_env(cls) -> "FarmSettings | None":
        if ENV_BROKER not in os.environ:
            return None
        broker = os.environ[ENV_BROKER]
        return cls(broker_url=broker, backend_url=os.environ.get(ENV_BACKEND, broker),
                   state_url=os.environ.get(ENV_STATE, broker), out_root=os.environ.get(ENV_OUT_ROOT, ""))

    @property
    def is_embedded(self) -> bool:
        return self.state_url.startswith("file://")

    @property
    def private_redis_socket(self) -> str | None:
        """The Unix socket of the embedded farm's own redis-server, if it has one."""
        return self.broker_url[len(SOCKET_SCHEME):] if self.broker_url.startswith(SOCKET_SCHEME) else None

    def to_env(self) -> dict[str, str]:
        return {ENV_BROKER: self.broker_url, ENV_BACKEND: self.backend_url, ENV_STATE: self.state_url,
                ENV_OUT_ROOT: self.out_root}


def redis_server() -> str | None:
    """The redis-server binary the embedded farm runs, or None for the file transport."""
    configured = os.environ.get(ENV_REDIS_SERVER)
    return (configured or None) if configured is not None else shutil.which("redis-server")


def redis_socket(farm_dir: str) -> str:
    """OUT/.farm/redis.sock, or where that path is too long for a socket, one named after it in the temp folder."""
    path = os.path.join(farm_dir, "redis.sock")
    if len(path) <= MAX_SOCKET_PATH:
        return path
    return os.path.join(tempfile.gettempdir(), f"mlir-farm-{hashlib.sha1(path.encode()).hexdigest()[:16]}.sock")


def redact(url: str) -> str:
    """A URL fit for logs: the password of redis://user:password@host is hidden."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
