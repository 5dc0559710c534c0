"""The host's memory plan: temporaries whose lifetimes do not overlap share one allocation.

Each memref.alloc of the host function is a temporary buffer of config.json. A log-step scan (cumsum over
32768 columns: 15 steps) or a deep network makes one per op, most of them dead long before the last
launch: KernelBench level1/89_cumsum asked the measure worker for 76 GB of them. A temporary instead takes
the memory of an earlier one that no later launch reads (its last launch ran before this one's first), the
smallest such that is large enough (BufferSpec.storage names it); the measure worker views that memory.
Two buffers of one launch never share, so the kernels' noalias arguments stay true. Inputs, weights,
constants and outputs keep their own memory.

A host loop (a recurrent layer's time steps) runs its launches again for the next index: a buffer that any
of them uses is live over the whole loop, from its first launch to its last, besides its other uses. The
next time step reads it again (the hidden state the step before wrote), so no other temporary may take its
memory in between, not even one whose launches all lie between two of its uses in one time step.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workers.records import ELEMENT_BYTES, BufferSpec, HostLoop, KernelLaunch


@dataclass
class _Storage:
    name: str  # the temporary that owns the memory
    size: int  # bytes
    busy_until: int  # index of the last launch that uses a buffer in it


def share_dead_temporaries(buffers: list[BufferSpec], launches: list[KernelLaunch],
                           loops: Sequence[HostLoop] = ()) -> int:
    """Set `storage` of each temporary that can live in an earlier temporary's memory; returns the bytes
    of temporaries that no longer get memory of their own. `loops`: the host loops around the launches."""
    described = {b.name: b.tensor_map.buffer for b in buffers if b.tensor_map is not None}

    def used_by(launch: KernelLaunch) -> set[str]:
        """The buffers a launch uses: its buffer arguments and the buffers its tensor maps describe."""
        return {name for arg in launch.args if arg.buffer is not None
                for name in filter(None, (arg.buffer, described.get(arg.buffer)))}

    first, last = {}, {}
    for i, launch in enumerate(launches):
        for name in used_by(launch):
            first.setdefault(name, i)
            last[name] = i
    for loop in loops:  # the next index reads them again: live over the whole loop
        for name in set().union(*map(used_by, launches[loop.first:loop.end])):
            first[name], last[name] = min(first[name], loop.first), max(last[name], loop.end - 1)
    storages: list[_Storage] = []
    saved = 0
    temporaries = [b for b in buffers if b.role == "temporary" and b.name in first and b.dtype in ELEMENT_BYTES]
    for b in sorted(temporaries, key=lambda b: first[b.name]):
        size = b.size_bytes()
        free = [s for s in storages if s.busy_until < first[b.name] and s.size >= size]
        if free:
            storage = min(free, key=lambda s: s.size)
            b.storage, storage.busy_until = storage.name, last[b.name]
            saved += size
        else:
            storages.append(_Storage(b.name, size, last[b.name]))
    return saved
