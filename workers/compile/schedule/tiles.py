"""Tile arithmetic shared by v0, validation and emission: grids, threads per block, linear grids."""
from __future__ import annotations

import math


from workers.records import ELEMENT_BYTES, VECTOR_BYTES, OpInfo, OpSchedule


MAX_THREADS = 1024
MAX_BLOCK_Z = 64  # CUDA's limit on blockDim.z (x and y: 1024)
TARGET_THREADS = 256


class ScheduleError(ValueError):
    """Schedule parameters that no valid kernel can come from (bad tile sizes, unsupported knob)."""


def largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def vector_elements(dtype: str) -> int:
    """Elements of `dtype` in one 128-bit access (1 where the dtype is unknown)."""
    return VECTOR_BYTES // ELEMENT_BYTES.get(dtype, VECTOR_BYTES)


def grid_blocks(schedule: OpSchedule, op: OpInfo) -> int:
    return math.prod(math.ceil(r / b) for b, r in zip(schedule.block_tile, op.loop_ranges) if b)


def block_dims(schedule: OpSchedule, op: OpInfo) -> list[int]:
    threads = [n for n in threads_per_loop(schedule, op) if n]
    if len(threads) > 3:
        raise ScheduleError(f"op {op.index}: at most 3 loops can be mapped to threads, got {len(threads)}")
    block = list(reversed(threads)) + [1] * (3 - len(threads))
    if math.prod(block) > MAX_THREADS:
        raise ScheduleError(f"op {op.index}: {math.prod(block)} threads per block exceed {MAX_THREADS}")
    if block[2] > MAX_BLOCK_Z:
        raise ScheduleError(f"op {op.index}: {block[2]} threads along a block's z exceed {MAX_BLOCK_Z}")
    return block


BLOCK_IDS = ["x", "y", "z"]
MAX_GRID_X = 2**31 - 1  # CUDA's limit on gridDim.x
MAX_GRID_YZ = 65535  # and on gridDim.y and gridDim.z


def linear_grid(schedule: OpSchedule, op: OpInfo) -> int:
    """The blocks of a kernel whose block loops do not fit grid x, y and z (more than three loops, or more
    than MAX_GRID_YZ blocks along y or z: an NCHW conv, a 4-D attention score), else 0. Such a kernel runs
    on a 1-D grid of that many blocks, whose linear block id is delinearized over the block loops
    (#gpu.block<linear_dim_i>, with map_forall_to_blocks' grid_dims set to the 1-D grid: left to infer the
    grid from linear ids it launches too few blocks)."""
    loops = [math.ceil(r / b) for b, r in zip(schedule.block_tile, op.loop_ranges) if b]
    return math.prod(loops) if len(loops) > 3 or any(n > MAX_GRID_YZ for n in loops[:-1]) else 0


def threads_per_loop(schedule: OpSchedule, op: OpInfo) -> list[int]:
    """Threads along each loop of a block tile (0 = loop not mapped to threads)."""
    return [math.ceil((b or r) / t) if t else 0
            for b, t, r in zip(schedule.block_tile, schedule.thread_tile, op.loop_ranges)]


def forall_mapping(kind: str, n: int, linear: bool = False) -> str:
    """Forall dims in loop order; the innermost maps to x. Past three dims (or where asked) linear ids,
    the innermost the fastest."""
    if n <= 3 and not linear:
        ids = list(reversed(BLOCK_IDS[:n]))
        return ", ".join(f"#gpu.{kind}<{i}>" for i in ids)
    return ", ".join(f"#gpu.{kind}<linear_dim_{n - 1 - k}>" for k in range(n))
