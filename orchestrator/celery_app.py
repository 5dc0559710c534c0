"""The Celery app of the farm: queues `compile` (CPU) and `gpu` (one worker process per GPU).

Workers:
    celery -A orchestrator.celery_app worker -Q compile -c 4 -n compile1@%h
    CUDA_VISIBLE_DEVICES=0 celery -A orchestrator.celery_app worker -Q gpu -P prefork -c 1 \
        --prefetch-multiplier=1 --max-tasks-per-child=1 -n gpu0@%h
Where the broker is comes from $MLIR_FARM_BROKER (see orchestrator/settings.py).
"""
from __future__ import annotations

from celery import Celery
from kombu import Queue

from orchestrator import filequeue
from orchestrator.settings import FILE_SCHEME, FarmSettings

QUEUES = ("compile", "gpu")
# (soft, hard) time limits per stage in seconds. A soft limit lets the stage record why it stopped;
# the hard one kills the pool process (ncu runs in its own process group for that reason).
TIME_LIMITS = {"frontend": (1200, 1500), "compile": (600, 900), "measure": (1500, 1800)}
# The most a lowering may be given (submit --lowering-timeout): its own limit stops it first, and the
# frontend task records why (workers.frontend.lower_model_bounded).
MAX_LOWERING_S = TIME_LIMITS["frontend"][0] - 120
# Redis re-delivers an unacknowledged message after this long: it must exceed the longest task,
# or a slow measurement would run twice.
VISIBILITY_TIMEOUT = 2 * max(hard for _, hard in TIME_LIMITS.values()) + 600
RETRIES_ON_WORKER_LOST = 2  # a task whose worker process dies runs at most 3 times, then fails
KEY_PREFIX = "mlir-farm:celery:"

app = Celery("mlir_farm", include=["orchestrator.tasks", "orchestrator.heartbeat"])


def configure(settings: FarmSettings, worker: bool = True) -> Celery:
    """Point the app at a farm. Everything but the URLs is the same for the embedded farm.

    worker: a worker stores a finished task's result however long Redis is away (Celery retries it). The CLI
    (worker=False) reads results in its driver, which waits an outage out itself (loop.TRANSIENT: one warning,
    then each tick tries again): there a read must fail, not retry inside Celery, whose loop logs a traceback
    each retry (some 70 KB a minute of outage on the CLI's stderr: a driver whose stderr is a pipe read only at
    the end stops in that write for good) and holds the driver up to 10 s after Redis is back."""
    # every Celery key of a farm's Redis under one prefix, so that its ACL user may have mlir-farm:* only
    redis_options = {"visibility_timeout": VISIBILITY_TIMEOUT, "global_keyprefix": KEY_PREFIX}
    broker_url, transport_options = settings.broker_url, redis_options
    if broker_url.startswith(FILE_SCHEME):
        transport_options = filequeue.transport_options(broker_url[len(FILE_SCHEME):])
        broker_url = FILE_SCHEME + "localhost/"  # a host, or kombu warns on every connection
    app.conf.update(
        broker_url=broker_url,
        result_backend=settings.backend_url,
        broker_transport_options=transport_options,
        result_backend_transport_options=redis_options,
        # a Redis outage is waited out, however long: a finished task's result is stored once Redis is back
        result_backend_always_retry=worker,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # JSON only: a task message never carries pickled objects
        task_serializer="json", result_serializer="json",
        accept_content=["json"], result_accept_content=["json"],
        task_queues=[Queue(q, routing_key=q) for q in QUEUES],
        task_routes={"orchestrator.frontend": {"queue": "compile"},
                     "orchestrator.compile": {"queue": "compile"},
                     "orchestrator.measure": {"queue": "gpu"}},
        task_default_queue="compile",
        task_create_missing_queues=False,
        # a task is acknowledged when done, and put back if its worker process dies
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_retry_on_worker_lost=True,
        task_track_started=True,
        worker_prefetch_multiplier=1,
        # no broadcast: nothing controls workers remotely (a task of a cancelled job sees the cancel itself),
        # and a Redis user held to the farm's channels may not PSUBSCRIBE the broadcast pattern
        worker_enable_remote_control=False,
        result_expires=7 * 24 * 3600,
    )
    return app


configure(FarmSettings.from_env() or FarmSettings.redis("redis://localhost:6379/0"))
