"""Which task messages wait in a queue of the farm's broker. The driver tells a task that waits its turn
from one whose message was lost (a half-written file, a Redis that lost its data, a worker killed between
taking the message and starting its task) by looking for the task's id in its queue."""
from __future__ import annotations

import functools
import json
import os

from celery import Celery

from orchestrator.filequeue import message_files
from orchestrator.settings import FILE_SCHEME, SOCKET_SCHEME


def waiting_task_ids(app: Celery, queue: str) -> set[str]:
    url, options = app.conf.broker_url, app.conf.broker_transport_options
    if url.startswith(FILE_SCHEME):
        return _in_folder(options["data_folder_in"], queue)
    messages = _redis(url).lrange(options["global_keyprefix"] + queue, 0, -1)
    return {_task_id(m) for m in messages} - {None}


def _in_folder(folder: str, queue: str) -> set[str]:
    found = set()
    for name in message_files(folder, queue):
        try:
            with open(os.path.join(folder, name)) as f:
                found.add(_task_id(f.read()))
        except FileNotFoundError:  # taken by a worker meanwhile
            continue
    return found - {None}


def _task_id(message: str | bytes) -> str | None:
    try:
        return json.loads(message)["headers"]["id"]
    except (ValueError, KeyError, TypeError):
        return None


@functools.lru_cache(maxsize=4)
def _redis(url: str):
    import redis

    if url.startswith(SOCKET_SCHEME):
        return redis.Redis(unix_socket_path=url[len(SOCKET_SCHEME):], socket_timeout=5)
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
