"""Workers announce themselves in the state store, so `orchestrator workers` and the driver's
dead-worker check work the same on Redis and on the embedded farm (whose filesystem transport has no
remote control)."""
from __future__ import annotations

import logging
import os
import threading
import time

from celery.signals import worker_ready, worker_shutdown

from orchestrator.records import WorkerInfo
from orchestrator.settings import FarmSettings
from orchestrator.state import open_store

HEARTBEAT_S = 2.0
STALE_AFTER_S = 15.0  # a worker silent this long is taken for dead

log = logging.getLogger(__name__)
_stop = threading.Event()


def is_alive(info: WorkerInfo, now: float | None = None) -> bool:
    return (now or time.time()) - info.last_seen < STALE_AFTER_S


def _beat(info: WorkerInfo, state_url: str) -> None:
    store = open_store(state_url)
    while not _stop.is_set():
        info.last_seen = time.time()
        try:
            store.heartbeat(info)
        except Exception as e:  # a broker/state outage must not kill the worker; the next beat retries
            log.warning("heartbeat to the state store failed: %s", e)
        _stop.wait(HEARTBEAT_S)


@worker_ready.connect
def _start(sender, **_) -> None:
    settings = FarmSettings.from_env()
    if settings is None:
        return
    queues = sorted(sender.app.amqp.queues.consume_from)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "") if "gpu" in queues else "n/a"
    now = time.time()
    info = WorkerInfo(hostname=sender.hostname, queues=queues, pid=os.getpid(), gpus=gpus, started=now, last_seen=now,
                      concurrency=sender.controller.concurrency)
    threading.Thread(target=_beat, args=(info, settings.state_url), name="farm-heartbeat", daemon=True).start()


@worker_shutdown.connect
def _finish(sender, **_) -> None:
    _stop.set()
    settings = FarmSettings.from_env()
    if settings is not None:
        try:  # once: a worker stopping with its Redis gone need not wait for it
            open_store(settings.state_url, outage_retries=0).drop_worker(sender.hostname)
        except Exception as e:
            log.warning("could not remove %s from the state store: %s", sender.hostname, e)
