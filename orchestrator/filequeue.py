"""The embedded farm's message transport where no redis-server is installed: kombu's filesystem
transport, except that a message is never lost between its sender and a worker.

kombu creates a message file under its final name and only then writes it, so a worker polling the
folder could take the empty file, delete it, and die on its JSON (seen under load: the job waited for
ever). Here a message is written whole under a temp name and renamed into the queue folder, a worker
takes a file by renaming it (one reader wins), and a file that does not parse is set aside and logged.
Its URL scheme is settings.FILE_SCHEME.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from queue import Empty

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.json import dumps, loads

from orchestrator.settings import FILE_SCHEME
from workers.atomic import write_text

log = logging.getLogger(__name__)


class Channel(filesystem.Channel):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for folder in (self.data_folder_in, self.data_folder_out, self.processed_folder, self.control_folder):
            os.makedirs(folder, exist_ok=True)

    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(time.monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"  # kombu's name: FIFO order
        write_text(os.path.join(self.data_folder_out, name), dumps(payload))  # temp files start with "."

    def _get(self, queue):
        for name in message_files(self.data_folder_in, queue):
            taken = os.path.join(self.processed_folder, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), taken)
            except FileNotFoundError:  # another worker took it first
                continue
            with open(taken) as f:
                text = f.read()
            try:
                message = loads(text)
            except ValueError:
                os.replace(taken, taken + ".unreadable")
                log.error("message file %s does not parse; set aside as %s.unreadable", name, taken)
                continue
            os.remove(taken)
            return message
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel
    global_state = filesystem.virtual.BrokerState()  # not shared with kombu's own filesystem transport


def message_files(folder: str, queue: str) -> list[str]:
    """The names of `queue`'s message files in `folder`, oldest first (temp files start with ".": not these)."""
    return sorted(name for name in os.listdir(folder) if name.partition(".")[2] == f"{queue}.msg")


def transport_options(folder: str) -> dict:
    """The transport's folders under `folder` (OUT/.farm/broker)."""
    queue = os.path.join(folder, "queue")
    return {"data_folder_in": queue, "data_folder_out": queue, "control_folder": os.path.join(folder, "control"),
            "processed_folder": os.path.join(folder, "processed"), "store_processed": False, "polling_interval": 0.1}


TRANSPORT_ALIASES[FILE_SCHEME.removesuffix("://")] = f"{__name__}:Transport"
