"""What the schedules and the advisor need to know of a GPU, from its architecture (`submit --chip`): one
record per chip, the one place where SM counts, memory and instruction sets are written down."""
from __future__ import annotations

from dataclasses import dataclass

from workers.jsonrecord import JsonRecord


@dataclass(frozen=True)
class Target(JsonRecord):
    chip: str  # the PTX target, e.g. "sm_90a"
    name: str  # the GPU the figures are of
    sms: int  # streaming multiprocessors: a grid of fewer blocks leaves some idle
    max_blocks_per_sm: int  # resident blocks an SM takes (OpSchedule.min_blocks_per_sm is at most this)
    registers_per_sm: int
    max_registers_per_thread: int
    shared_bytes_per_block: int  # shared memory one block may have, opted in past 48 KB
    warp_size: int = 32
    wgmma: bool = False  # warpgroup MMA (wgmma.mma_async): sm_90a's PTX alone
    tma: bool = False  # bulk tensor copies (cp.async.bulk.tensor)


TARGETS = {t.chip: t for t in (
    Target("sm_90a", "H100/H200", sms=132, max_blocks_per_sm=32, registers_per_sm=65536, max_registers_per_thread=255,
           shared_bytes_per_block=227 * 1024, wgmma=True, tma=True),
    Target("sm_90", "H100/H200 (no sm_90a features)", sms=132, max_blocks_per_sm=32, registers_per_sm=65536,
           max_registers_per_thread=255, shared_bytes_per_block=227 * 1024, tma=True),
    Target("sm_80", "A100", sms=108, max_blocks_per_sm=32, registers_per_sm=65536, max_registers_per_thread=255,
           shared_bytes_per_block=163 * 1024),
)}


def target(chip: str) -> Target:
    """The chip's record; ValueError (naming the known chips) for another."""
    if chip not in TARGETS:
        raise ValueError(f"no target record for chip {chip!r}; known: {', '.join(TARGETS)} (workers/target.py)")
    return TARGETS[chip]
