"""Where a farm keeps its messages, task results and job state.

Two shapes, one code path: a Redis farm (broker, result backend and state store in one Redis), and the
embedded default (kombu's filesystem transport, Celery's file result backend and a file state store,
all under the output folder) that needs no server. Worker processes get the settings through the
environment, so the CLI and the workers it starts always agree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from workers.jsonrecord import JsonRecord

ENV_BROKER = "MLIR_FARM_BROKER"
ENV_BACKEND = "MLIR_FARM_BACKEND"
ENV_STATE = "MLIR_FARM_STATE"
EMBEDDED_DIR = ".farm"  # under the output folder
FS_SCHEME = "filesystem://"


@dataclass
class FarmSettings(JsonRecord):
    broker_url: str  # redis://... or filesystem://<folder> (embedded)
    backend_url: str  # redis://... or file://<folder>
    state_url: str  # redis://... or file://<folder>

    @classmethod
    def embedded(cls, out_dir: str) -> "FarmSettings":
        base = os.path.join(os.path.abspath(out_dir), EMBEDDED_DIR)
        return cls(broker_url=FS_SCHEME + os.path.join(base, "broker"),
                   backend_url="file://" + os.path.join(base, "results"),
                   state_url="file://" + os.path.join(base, "state"))

    @classmethod
    def redis(cls, url: str) -> "FarmSettings":
        return cls(broker_url=url, backend_url=url, state_url=url)

    @classmethod
    def resolve(cls, broker: str | None, out_dir: str) -> "FarmSettings":
        """--broker (or $MLIR_FARM_BROKER) names a Redis farm; without one, the embedded farm of out_dir."""
        broker = broker or os.environ.get(ENV_BROKER)
        return cls.redis(broker) if broker and not broker.startswith(FS_SCHEME) else cls.embedded(out_dir)

    @classmethod
    def from_env(cls) -> "FarmSettings | None":
        if ENV_BROKER not in os.environ:
            return None
        broker = os.environ[ENV_BROKER]
        return cls(broker_url=broker, backend_url=os.environ.get(ENV_BACKEND, broker),
                   state_url=os.environ.get(ENV_STATE, broker))

    @property
    def is_embedded(self) -> bool:
        return self.broker_url.startswith(FS_SCHEME)

    def to_env(self) -> dict[str, str]:
        return {ENV_BROKER: self.broker_url, ENV_BACKEND: self.backend_url, ENV_STATE: self.state_url}


def redact(url: str) -> str:
    """A URL fit for logs: the password of redis://user:password@host is hidden."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
