"""The tensor-core (mma.sync) kernel of a matmul group, as Transform steps.

A block computes a `block_tile` of the matmul's output; its warps each loop over K in steps of
`reduction_tile` (the mma's K unless a multiple of it) for their warp tile: `thread_tile` where it is
one (a multiple of 16x8 dividing the block tile), else one the compile stage picks, so that switching
tensor_core on is one edit of a working schedule; with the step's matmul vectorized into one
vector.contract that is unrolled to the native shape (m16n8k16 for f16 operands, m16n8k8 for f32 ones
read as TF32). `convert-vector-to-gpu{use-nvgpu}` in the post-schedule pipeline then turns each
contract into an `nvgpu.mma.sync` fed by per-lane fragment loads (upstream's
`transform.nvgpu.rewrite_matmul_as_mma_sync` only takes f16 x f16 -> f16 or tf32, while torch's f16
matmul accumulates in f32). Each warp's accumulators stay in registers across its K loop (the loop
carries the mma fragments). The fill and a fused elementwise consumer (the epilogue: cast to f16,
ReLU, bias...) are spread over all threads of the block, the epilogue in rows of 1-D vectors
(convert-vector-to-gpu would take a 2-D chain of its elementwise ops for MMA fragments); the
accumulator tile they share with the warps lives in shared memory, written once after the K loop, and
the thread mapping puts barriers between the three steps. With `promote_shared` the block steps over
K instead, each step's A and B tiles copied into shared memory by all its threads before the warps'
mma tiles read them (ldmatrix). With `pipeline_depth` d > 1 those tiles have d buffers each (d + 1
with `copies_ahead`), filled by cp.async: the copies are unrolled, the buffers hoisted out of the K
loop and multi-buffered (memref.multibuffer); after the tensor-core conversion (whose rebuilt loop has
no vector.contract left for the pipeliner to trip on, and which needs a bf16 kernel's tiles typed f16
for a while), the PIPELINE_COPIES_SEQUENCE of transform.mlir makes the copies asynchronous
(nvgpu.create_async_groups) and software-pipelines the K loop (nvgpu.pipeline_shared_memory_copies):
the copies of step i+d are issued once the warps are done with step i, into step i's buffer. Of the
thread mapping's three barriers per step, k_loops.trim_k_loop_barriers drops the one between A's copies
and B's; with copies_ahead the copies go into the spare buffer, which the warps left at step i-1, so it
moves them before step i's mma and drops the barrier after it too: one per step remains.

With tensor_core "wgmma" (sm_90a) one or two warpgroups compute the block tile instead (`thread_tile`: a
warpgroup's tile, stacked along M): the schedule tiles the kernel to blocks, maps its fill and epilogue
to the block's threads and leaves the block's matmul whole, marked WGMMA; passes/wgmma.py gives it its K loop.
"""
from __future__ import annotations

import math
from functools import partial
from dataclasses import dataclass

from numba_cuda_mlir._mlir.dialects import transform
from numba_cuda_mlir._mlir.dialects.transform import gpu as gpu_transforms
from numba_cuda_mlir._mlir.dialects.transform import loop as loop_ops
from numba_cuda_mlir._mlir.dialects.transform import memref as memref_transforms
from numba_cuda_mlir._mlir.dialects.transform import nvgpu as nvgpu_transforms
from numba_cuda_mlir._mlir.dialects.transform import tensor as tensor_patterns
from numba_cuda_mlir._mlir.dialects.transform import vector

from workers.compile import kernel_marks
from workers.compile import transform_builder as tb
from workers.compile.staging import LINEAR_THREADS, LOAD_BYTES, copy_tile, emit_operand_copies, emit_operand_tiles
from workers.records import ELEMENT_BYTES, WARP_SIZE, WARPGROUP_THREADS, WGMMA_ROW_BYTES, OpSchedule, wgmma_k_step
from workers.target import Target

ir = tb.ir

# mma.sync shape (m, n, k) by operand type: m16n8k16 for f16 and bf16 (bf16 through f16 fragments:
# tensor_core_conversion.stage_bf16_as_f16), m16n8k8 for f32 operands, which the tensor cores read as TF32 (the job's
# precision must be tf32: its tolerance, peers with TF32)
MMA_SHAPES = {"f16": (16, 8, 16), "bf16": (16, 8, 16), "f32": (16, 8, 8)}
MMA_M, MMA_N = 16, 8
MAX_THREADS = 1024
ACCUMULATOR_BYTES = {"f32": 4, "f16": 2}
EPILOGUE_VECTOR = 4  # accumulator elements per epilogue vector

LINEAR_WARPS = "#gpu.warp<linear_dim_1>, #gpu.warp<linear_dim_0>"


@dataclass
class MmaPlan:
    """A validated tensor-core kernel: which ops play which part, and its tiles."""

    matmul: int  # op index of the linalg.matmul
    epilogue: int | None  # the elementwise anchor the matmul is fused into, if any
    block: tuple[int, int]  # output tile (m, n) of a block
    warp: tuple[int, int]  # output tile (m, n) of a warp
    k_step: int
    k_steps: int  # K / k_step: the K loop's trip count
    accumulator: str  # element type of the matmul's result
    operand: str  # element type of A and B: a key of MMA_SHAPES
    stages: int = 1  # K steps in flight (pipeline_depth); 1: copied synchronously
    copies_ahead: bool = False  # one buffer more than stages, filled before the step's mma
    instruction: str = "mma_sync"  # or "wgmma": `warp` is then a warpgroup's tile

    @property
    def warpgroup(self) -> bool:
        return self.instruction == "wgmma"

    @property
    def buffers(self) -> int:
        """Buffers per staged tile."""
        return self.stages + self.copies_ahead

    @property
    def mma_shape(self) -> tuple[int, int, int]:
        return MMA_SHAPES[self.operand]

    @property
    def warps(self) -> tuple[int, int]:
        return self.block[0] // self.warp[0], self.block[1] // self.warp[1]

    @property
    def threads(self) -> int:
        return (WARPGROUP_THREADS if self.warpgroup else WARP_SIZE) * math.prod(self.warps)

    @property
    def block_dims(self) -> list[int]:
        """The launch's block: a wgmma kernel's warpgroups along y (nvgpu.warpgroup.mma.store places a
        thread's fragments by its x index, the same in every warpgroup)."""
        return [WARPGROUP_THREADS, math.prod(self.warps), 1] if self.warpgroup else [self.threads, 1, 1]

    @property
    def staged_tiles(self) -> list[tuple[int, int]]:
        """The A (block_m x k_step) and B (k_step x block_n) tiles of a K step."""
        return [(self.block[0], self.k_step), (self.k_step, self.block[1])]

    @property
    def copy_tiles(self) -> list[tuple[tuple[int, ...], int]]:
        """(shape, element bytes) of each staged tile: what the pipelining steps read of a plan, mma.sync's
        or a SIMT kernel's (staged_matmul.StagedMatmul), with stages, buffers, copies_ahead, block_threads."""
        return [(shape, ELEMENT_BYTES[self.operand]) for shape in self.staged_tiles]

    @property
    def block_threads(self) -> int:
        return self.threads

    def epilogue_tile(self) -> tuple[int, int]:
        """A thread's (rows, columns) of the epilogue: up to EPILOGUE_VECTOR neighbouring columns per
        row (one 128-bit load of f32 accumulators), all threads of the block busy."""
        for v in (EPILOGUE_VECTOR, 2, 1):
            cols = self.block[1] // v if self.block[1] % v == 0 else 0
            if cols and self.threads % cols == 0 and self.block[0] % (self.threads // cols) == 0:
                return self.block[0] // (self.threads // cols), v
        rows, cols = self.thread_grid()
        return self.block[0] // rows, self.block[1] // cols

    def thread_grid(self) -> list[int]:
        """[rows, columns] of threads over the block tile for the fill and the epilogue: as many
        columns as possible, so that neighbouring threads touch neighbouring elements."""
        columns = max(d for d in range(1, min(self.block[1], self.threads) + 1)
                      if self.block[1] % d == 0 and self.threads % d == 0)
        rows = max(d for d in range(1, min(self.block[0], self.threads // columns) + 1) if self.block[0] % d == 0)
        return [rows, columns]


def plan_mma(s: OpSchedule, anchor, producer, facts, target: Target) -> MmaPlan:
    """The tensor-core plan of a group (anchor/producer: LinalgOpFacts, producer may be None) on `target`, or
    a ValueError that says why the group cannot use mma.sync (or wgmma, as s.tensor_core says)."""
    if anchor.info.name == "linalg.matmul" and producer is None:
        matmul, epilogue = anchor, None
    elif producer is not None and producer.info.name == "linalg.matmul" and anchor.info.family == "elementwise" \
            and len(anchor.info.loop_ranges) == 2:
        matmul, epilogue = producer, anchor
    else:
        raise ValueError("tensor_core applies to a linalg.matmul kernel (alone, or fused into an elementwise "
                         f"consumer), not to {anchor.info.name} ({anchor.info.family})"
                         + (f" with producer {producer.info.name}" if producer is not None else ""))
    operand = matmul.input_dtypes[0]
    if matmul.input_dtypes != [operand, operand] or operand not in MMA_SHAPES \
            or matmul.info.dtype not in ACCUMULATOR_BYTES:
        raise ValueError(f"mma_sync takes f16 x f16 and bf16 x bf16 -> f16/f32 and (as TF32) f32 x f32 -> f32 matmuls; op "
                         f"{matmul.info.index} is {' x '.join(matmul.input_dtypes)} -> {matmul.info.dtype}")
    if operand == "bf16" and s.tensor_core == "mma_sync" and not s.promote_shared:
        raise ValueError("bf16 mma.sync reads its operands from tiles in shared memory (convert-vector-to-gpu has "
                         "no bf16 fragments; farm-tensor-core-conversion types the staged tiles f16): it needs "
                         "promote_shared")
    mma_k = MMA_SHAPES[operand][2]
    m, n, k = matmul.info.loop_ranges
    block = tuple(s.block_tile[:2])
    if len(s.block_tile) != len(anchor.info.loop_ranges) or any(s.block_tile[2:]) or any(s.thread_tile[2:]):
        raise ValueError(f"tiles must have {len(anchor.info.loop_ranges)} entries, [m, n] of the output "
                         "(0 for the k loop): block_tile a block's tile, thread_tile a warp's")
    if not (block[0] and block[1] and m % block[0] == 0 and n % block[1] == 0):
        raise ValueError(f"block_tile {list(block)} must divide the output {m}x{n}")
    if s.tensor_core == "wgmma":
        if not target.wgmma:
            raise ValueError(f"wgmma runs on sm_90a, not {target.chip}")
        return _plan_wgmma(s, matmul, epilogue, block, k, target)
    warp = tuple(s.thread_tile[:2]) if _is_warp_tile(s.thread_tile[:2], block) else _default_warp_tile(block)
    if warp is None:
        raise ValueError(f"block_tile {list(block)} is no multiple of the {MMA_M}x{MMA_N} mma tile")
    k_step = s.reduction_tile if s.reduction_tile and s.reduction_tile % mma_k == 0 else mma_k
    if k % k_step:
        raise ValueError(f"the K step {k_step} (mma.sync m16n8k{mma_k}) must divide K={k}")
    stages = max(s.pipeline_depth, 1)
    if stages > 1 and not s.promote_shared:
        raise ValueError("pipeline_depth multi-buffers the staged A and B tiles: it needs promote_shared")
    if s.copies_ahead and stages < 2:
        raise ValueError("copies_ahead fills a pipelined kernel's spare buffer: it needs pipeline_depth 2 or more")
    if stages > 1 and k // k_step < stages:
        raise ValueError(f"pipeline_depth {stages} needs at least {stages} K steps (the software pipeline's "
                         f"stages), K={k} has {k // k_step} of {k_step}")
    plan = MmaPlan(matmul.info.index, epilogue.info.index if epilogue else None, block, warp, k_step, k // k_step,
                   matmul.info.dtype, operand, stages, s.copies_ahead)
    if plan.threads > MAX_THREADS:
        raise ValueError(f"{math.prod(plan.warps)} warps ({plan.threads} threads) per block exceed {MAX_THREADS}")
    acc_bytes = ACCUMULATOR_BYTES[plan.accumulator]
    shared = block[0] * padded_columns(block[1], acc_bytes, scalar_fragments=True) * acc_bytes if epilogue else 0
    if shared > target.shared_bytes_per_block:
        raise ValueError(f"the epilogue's accumulator tile {block[0]}x{block[1]} {plan.accumulator} needs "
                         f"{shared} bytes of shared memory, over {target.shared_bytes_per_block}")
    row = ELEMENT_BYTES[operand]
    # TF32's B fragments are read by scalar loads, every other staged tile's by ldmatrix
    staged = plan.buffers * sum(rows * padded_columns(columns, row, operand == "f32" and i == 1)
                                for i, (rows, columns) in enumerate(plan.staged_tiles)) * row if s.promote_shared else 0
    # a pipelined kernel's accumulator tile, dead during its K loop, shares memory with the cp.async
    # buffers (k_loops.overlap_tiles_dead_in_k_loops)
    needed = max(shared, staged) if stages > 1 else shared + staged
    if needed > target.shared_bytes_per_block:
        raise ValueError(f"promote_shared: {plan.buffers} buffer(s) of the A and B tiles ({staged} bytes) and the accumulator "
                         f"tile ({shared} bytes{', sharing their memory' if stages > 1 else ''}) need more shared "
                         f"memory than {target.shared_bytes_per_block} bytes")
    return plan


def _plan_wgmma(s: OpSchedule, matmul, epilogue, block: tuple[int, int], k: int, target: Target) -> MmaPlan:
    """The plan of a wgmma kernel: one or two warpgroups per block (`warp`: a warpgroup's tile), each
    tile in m64nNk16 (m64nNk8 for TF32) instructions."""
    operand, accumulator = matmul.input_dtypes[0], matmul.info.dtype
    if operand not in ("f16", "bf16", "f32") or accumulator != "f32":
        raise ValueError(f"wgmma takes f16 x f16, bf16 x bf16 and (as TF32) f32 x f32 -> f32 matmuls; op "
                         f"{matmul.info.index} is {operand} x {operand} -> {accumulator}")
    warpgroup = tuple(s.thread_tile[:2]) if any(s.thread_tile[:2]) else block
    if warpgroup not in WARPGROUP_TILES:
        raise ValueError(f"a warpgroup's tile (thread_tile; zeros: the block's) is 64 rows by "
                         f"{' or '.join(map(str, WGMMA_NS))} columns, or 128x128; not {list(warpgroup)}")
    if block[1] != warpgroup[1] or block[0] % warpgroup[0] or block[0] // warpgroup[0] > MAX_WARPGROUPS \
            or warpgroup[0] > WGMMA_M and block != warpgroup:
        raise ValueError(f"a wgmma block tile stacks up to {MAX_WARPGROUPS} warpgroup tiles of 64 rows (or is one "
                         f"of 128x128): block_tile {list(block)} with warpgroups of {list(warpgroup)}")
    if operand == "f32" and warpgroup[0] != WGMMA_M:
        # its K steps take one wgmma per 8 of K on an m64 view of A: nvgpu's lowering would step A's
        # descriptor to a second half as for 16-bit rows
        raise ValueError(f"TF32 on wgmma takes warpgroups of 64 rows, not {list(warpgroup)}")
    k_step = wgmma_k_step(operand)
    if s.reduction_tile != k_step or k % k_step:
        raise ValueError(f"a wgmma K step of {operand} is {k_step} elements (one 128-byte swizzled row), which must "
                         f"divide K={k}: reduction_tile {k_step}, not {s.reduction_tile}")
    if not s.promote_shared or s.pipeline_depth < 2 or s.copies_ahead:
        raise ValueError("wgmma reads its operands from shared memory filled by TMA: promote_shared with "
                         "pipeline_depth 2 or more, without copies_ahead")
    if k // k_step < s.pipeline_depth:
        raise ValueError(f"pipeline_depth {s.pipeline_depth} needs at least that many K steps, K={k} has "
                         f"{k // k_step} of {k_step}")
    plan = MmaPlan(matmul.info.index, epilogue.info.index if epilogue else None, block, warpgroup, k_step,
                   k // k_step, accumulator, operand, s.pipeline_depth, instruction="wgmma")
    # the epilogue's accumulator tile (in rows padded as passes/wgmma.py pads them) shares memory with the staged
    # tiles, dead once the K loop is done
    acc_bytes = ACCUMULATOR_BYTES[accumulator]
    accumulator_tile = block[0] * padded_columns(block[1], acc_bytes, True) * acc_bytes if epilogue else 0
    needed = max(wgmma_staged_bytes(plan.stages, *block), accumulator_tile)
    if needed > target.shared_bytes_per_block:
        raise ValueError(f"{plan.stages} buffers of the A and B tiles need {needed} bytes of shared memory, over "
                         f"{target.shared_bytes_per_block}")
    return plan


WGMMA_M = 64  # rows of one wgmma; a block of 128 rows takes two
WGMMA_NS = (64, 128, 256)  # block columns: B's boxes of 64 columns, one TMA copy each, up to wgmma's n256
# a warpgroup's tiles: m64 by any of WGMMA_NS, or two m64 halves of 128 columns (128 accumulator registers per
# thread at most): nvgpu.warpgroup.mma.store puts a second half `columns / 2` rows below the first, right
# for 128 columns only; it places a thread's rows by its x index, so a block's warpgroups are its y index
# (MmaPlan.block_dims)
WARPGROUP_TILES = [(WGMMA_M, n) for n in WGMMA_NS] + [(2 * WGMMA_M, 128)]
MAX_WARPGROUPS = 2
WGMMA_BOX = 64  # 16-bit B is staged as column boxes of 64 (one swizzled row each, K rows deep)


def wgmma_staged_bytes(stages: int, m: int, n: int) -> int:
    """Shared memory of a wgmma kernel's staged A and B tiles of an m x n block, all `stages` buffers: m and
    n rows of 128 bytes each."""
    return stages * (m + n) * WGMMA_ROW_BYTES


def _is_warp_tile(tile: list[int], block: tuple[int, int]) -> bool:
    return len(tile) == 2 and all(t and t % mma == 0 and b % t == 0 for t, b, mma in zip(tile, block, (MMA_M, MMA_N)))


# warp tiles the compile stage picks, largest first: 32x32 holds 8 mma accumulators per warp
DEFAULT_WARP_TILES = [(32, 32), (32, 16), (16, 16), (16, 8)]


def _default_warp_tile(block: tuple[int, int]) -> tuple[int, int] | None:
    return next((w for w in DEFAULT_WARP_TILES if _is_warp_tile(list(w), block)
                 and block[0] // w[0] * block[1] // w[1] * WARP_SIZE <= MAX_THREADS), None)


def emit_mma_group(kernel: int, k: str, plan: MmaPlan, ops: list[tb.Handle], fill: tb.Handle | None,
                   s: OpSchedule) -> None:
    """Transform steps of the kernel: block forall (annotated farm.kernel), then the fill over the
    block's threads, the matmul over its warps and the epilogue over its threads; `ops`: the payload's
    linalg ops, `fill`: the matmul's fill."""
    n_block = sum(1 for b in s.block_tile if b)
    kernel_id = tb.param(kernel, name=f"{k}_id")
    block, grid = tb.tile_forall(ops[plan.epilogue if plan.epilogue is not None else plan.matmul],
                                 ", ".join(f"#gpu.block<{i}>" for i in ("y", "x")[2 - n_block:]),
                                 tile_sizes=s.block_tile, name=f"{k}_b")
    matmul_block = block
    if plan.epilogue is not None:
        matmul_block, grid = tb.fuse_into(ops[plan.matmul], grid, f"{k}_mm")
    if fill:
        fill, grid = tb.fuse_into(fill, grid, f"{k}_fb")
    tb.annotate(grid, kernel_marks.KERNEL, kernel_id)
    if plan.epilogue is not None:
        # the accumulator tile becomes a block-local tensor (and so a shared-memory buffer), not a
        # slice of a whole-matrix temporary
        tb.apply_patterns(grid, tensor_patterns.ApplyFoldTensorEmptyPatternsOp)
    if fill:
        # over the block's threads as the epilogue is, in rows of 1-D vectors: a thread's 2-D (column)
        # vector of zeros went through a local-memory copy on its way to the tile
        thread_fill, _ = tb.tile_forall(fill, LINEAR_THREADS, tile_sizes=list(plan.epilogue_tile()), name=f"{k}_ft")
        tb.vectorize(tb.tile_for(thread_fill, [1, 0], f"{k}_fr")[0])
    if plan.warpgroup:
        # the block's matmul stays whole: wgmma.warpgroup_matmuls gives it its K loop
        tb.mark(matmul_block, WGMMA, plan.stages, name=f"{k}_stages")
        tb.mark(matmul_block, WGMMA_ROWS, plan.warp[0], name=f"{k}_wg_rows")
    elif s.promote_shared:
        _staged_k_step(k, plan, matmul_block, kernel_id)
    else:
        warp_op, _ = tb.tile_forall(matmul_block, LINEAR_WARPS, num_threads=[*plan.warps, 0], name=f"{k}_w")
        tb.vectorize(tb.tile_for(warp_op, [0, 0, plan.k_step], f"{k}_wk")[0])
    if plan.epilogue is not None:
        # vectorized, so that no scalar code shares the kernel with the contractions that
        # convert-vector-to-gpu rewrites (it rejects a function where it meets scalar casts)
        # ... and in rows of 1-D vectors (a loop over the thread's rows): convert-vector-to-gpu takes
        # any 2-D chain of elementwise ops for MMA fragments (a lone f32->f16 cast it then cannot
        # convert), and leaves alone a chain that reads 1-D vectors
        thread_op, _ = tb.tile_forall(block, LINEAR_THREADS, tile_sizes=list(plan.epilogue_tile()), name=f"{k}_t")
        tb.vectorize(tb.tile_for(thread_op, [1, 0], f"{k}_tr")[0])


BANKS = 32  # shared-memory banks of 4 bytes
SCALAR_FRAGMENT_ROWS = 4  # rows of a tile that one scalar fragment load spans across a warp (TF32's B)


def padded_columns(columns: int, element_bytes: int, scalar_fragments: bool = False) -> int:
    """Row length (elements) of a tensor-core kernel's tile in shared memory (shared_memory.pad_tensor_core_tiles
    widens the tiles to it): rows an odd number of 16-byte chunks apart, so that the 8 rows of 16 bytes
    that one ldmatrix reads lie in 8 different bank groups; for a 32-bit tile whose fragments are
    accessed by plain loads and stores instead, rows BANKS / 4 banks apart modulo BANKS: TF32's B (lane l
    reads row l % 4, column l / 4) has its 4 rows x 8 columns in 32 different banks, the f32 accumulator
    tile (lane l at row l / 4, two words at column 2 (l % 4)) its 8 rows x 8 columns in two wavefronts,
    the least 256 bytes take."""
    if scalar_fragments and element_bytes == 4:
        return columns + (BANKS // SCALAR_FRAGMENT_ROWS - columns) % BANKS
    row = columns * element_bytes
    if row % LOAD_BYTES or (row // LOAD_BYTES) % 2:
        return columns
    return columns + LOAD_BYTES // element_bytes


def _staged_k_step(k: str, plan: MmaPlan, matmul_block: tb.Handle, kernel_id: tb.Handle) -> None:
    """promote_shared: the block steps over K; each step's A (block_m x k_step) and B (k_step x
    block_n) tiles are copied into block-local tensors (shared memory) by all threads of the block,
    128 bits per load, then the warps run their mma tiles on them."""
    step, k_loop = tb.tile_for(matmul_block, [0, 0, plan.k_step], f"{k}_mk")
    # marks that outlive bufferization: the K loop (its staged tiles, its pipelining), a copy's row loop
    tb.annotate(k_loop, K_LOOP, kernel_id)
    padded = emit_operand_tiles(k, step, [plan.operand, plan.operand], plan.accumulator, 3)
    emit_operand_copies(k, padded, plan.copy_tiles, plan.threads, COPY_ROWS if plan.stages > 1 else None)
    tb.vectorize(tb.tile_forall(padded, LINEAR_WARPS, num_threads=[*plan.warps, 0], name=f"{k}_w")[0])


WGMMA = "farm.wgmma"  # a block's linalg.matmul that warpgroups compute: = its K steps in flight
WGMMA_ROWS = "farm.wgmma_rows"  # ... and the rows of each warpgroup's tile
K_LOOP = "farm.k_loop"  # a tensor-core kernel's K loop over staged tiles: = the kernel's id
COPY_ROWS = "farm.copy_rows"  # the row loop of a thread's copy into a staged tile: = its trip count
STAGED = "farm.staged"  # a staged tile (workgroup allocation): = the kernel's id
COPIES_AHEAD = "farm.copies_ahead"  # a pipelined K loop whose copies may go before its mma (a spare buffer)
# cp.async groups per K step: A's copies, the barrier that the thread mapping puts after them, B's copies
GROUPS_PER_K_STEP = 2


def _k_loop(kernel: int, root: tb.Handle) -> tb.Handle:
    return tb.match(root, ["scf.for"], attributes={K_LOOP: kernel}, name=f"tc{kernel}_kloop")


def emit_staged_tiles(kernel: int, plan, func: tb.Handle) -> None:
    """After thread mapping (`func`: the function): mark the kernel's staged tiles (the allocations in
    its K loop); with several stages also unroll each thread's copy rows, as the pipeliner takes a
    loop body without nested regions. `plan`: an MmaPlan or a staged SIMT kernel's plan."""
    k_loop = _k_loop(kernel, func)
    tb.mark(tb.match(k_loop, ["memref.alloc"], name=f"tc{kernel}_operand_tiles"), STAGED, kernel,
            name=f"tc{kernel}_id")
    if plan.stages > 1:
        for rows in sorted({copy_tile(shape, plan.block_threads, element_bytes)[0]
                            for shape, element_bytes in plan.copy_tiles}):
            loop_ops.LoopUnrollOp(tb.match(k_loop, ["scf.for"], attributes={COPY_ROWS: rows},
                                           name=f"tc{kernel}_rows{rows}"), factor=rows)


def emit_multibuffers(kernel: int, plan, func: tb.Handle) -> None:
    """After the staged tiles left the K loop (buffer-loop-hoisting on `func`): each becomes plan.buffers
    buffers, K step i using buffer i mod buffers."""
    staged = tb.match(func, ["memref.alloc"], attributes={STAGED: kernel}, name=f"tc{kernel}_staged")
    allocs = transform.CastOp(transform.OperationType.get("memref.alloc"), staged,
                              loc=ir.Location.name(f"tc{kernel}_allocs")).output
    # skip_analysis: every step overwrites the whole tile before reading it (its copy), which the
    # analysis only recognises in memref.copy
    memref_transforms.MemRefMultiBufferOp(tb.any_op(), allocs, plan.buffers, skip_analysis=True,
                                          loc=ir.Location.name(f"tc{kernel}_buffers"))


def emit_pipelined_k_loop(kernel: int, plan, root: tb.Handle) -> None:
    """PIPELINE_COPIES_SEQUENCE's steps for the kernel, after the tensor-core conversion (a bf16 kernel's tiles
    are bf16 again then, so that its copies read and write one type): a K step's copies become cp.async
    groups, whose waits let the groups of the stages - 1 steps after it stay in flight, and the K loop is
    software-pipelined over plan.stages steps, the last steps' copies predicated off (zero bytes) rather
    than peeled."""
    groups = nvgpu_transforms.CreateAsyncGroupsOp(tb.any_op(), _k_loop(kernel, root), bypass_l1=True,
                                                  loc=ir.Location.name(f"tc{kernel}_async")).result
    tb.mark(tb.match(groups, ["nvgpu.device_async_wait"], name=f"tc{kernel}_waits"), "numGroups",
            GROUPS_PER_K_STEP * (plan.stages - 1), bits=32, name=f"tc{kernel}_in_flight")
    pipelined = nvgpu_transforms.PipelineSharedMemoryCopiesOp(
        tb.any_op(), groups, plan.stages, failure_propagation_mode=transform.FailurePropagationMode.Propagate,
        loc=ir.Location.name(f"tc{kernel}_pipelined")).result
    # the pipelined loop is a new one: it gets the mark back (k_loops.overlap_tiles_dead_in_k_loops)
    tb.mark(pipelined, K_LOOP, kernel, name=f"tc{kernel}_id")
    if plan.copies_ahead:
        tb.annotate(pipelined, COPIES_AHEAD)


def emit_shared_accumulator(kernel: int, root: tb.Handle) -> None:
    """After empty_tensor_to_alloc_tensor: the kernel's block-local tensors (the accumulator tile an
    epilogue reads) are allocated in workgroup (shared) memory."""
    grid = tb.match(root, ["scf.forall"], attributes={kernel_marks.KERNEL: kernel}, name=f"tc{kernel}_forall")
    tiles = tb.match(grid, ["bufferization.alloc_tensor"], name=f"tc{kernel}_tiles")
    tb.annotate(tiles, "memory_space", tb.param(tb.attribute("#gpu.address_space<workgroup>"),
                                                name=f"tc{kernel}_shared"))


def emit_mma_contracts(launch: tb.Handle, plan: MmaPlan) -> None:
    """After thread mapping: each warp's vectorized K step becomes vector.contracts on the operands
    (extf of f16 folded in, as mma.sync accumulates f16 products in f32), unrolled to the mma shape."""
    tb.apply_patterns(launch, vector.ApplyVectorReductionToContractPatternsOp, vector.ApplyFoldArithExtensionPatternsOp,
                      vector.ApplyTransferPermutationPatternsOp, vector.ApplyCastAwayVectorLeadingOneDimPatternsOp,
                      transform.ApplyCanonicalizationPatternsOp)
    tb.apply_patterns(launch, partial(gpu_transforms.ApplyUnrollVectorsSubgroupMmaOp, *plan.mma_shape))
    # subviews folded into the transfers' indices: hoist_redundant_vector_transfers (next) keeps
    # the accumulator tiles in registers across the K loop only where they read the buffer itself
    tb.apply_patterns(launch, memref_transforms.ApplyFoldMemrefAliasOpsPatternsOp,
                      transform.ApplyCanonicalizationPatternsOp)
    tb.cse(launch)
