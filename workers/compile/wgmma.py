"""A block's linalg.matmul computed by one warpgroup with wgmma (sm_90a), staged through shared memory.

The Transform schedule leaves a wgmma kernel's matmul whole at block level and marks it
(tensor_core.WGMMA = K steps in flight): block tile of A (m x K) and B (K x n) in global memory, the
accumulator tile C (m x n f32: the epilogue's tile in shared memory, or the output itself). No Transform
op of MLIR rewrites a matmul into nvgpu.warpgroup.mma, so `warpgroup_matmuls` replaces each marked op by
the K loop below (MLIR text, instantiated at the op): all 128 threads copy each K step's A tile and B's
column boxes of 64 into shared memory by cp.async, in 128-byte rows whose 16-byte chunks are XOR-swizzled
by row (the layout wgmma reads with 128-byte swizzling: 8 rows of a chunk column in 8 bank groups), d
steps in flight in d buffers; one nvgpu.warpgroup.mma per step multiplies the tiles (B read N-major:
transposeB), its accumulators carried in registers through the loop and stored to C after it. An
epilogue's accumulator tile is dead during the loop: it shares memory with the buffers
(mlir.OVERLAPS_STAGED). The descriptors' tensor-map operand only carries the swizzle kind and box in its
type, all that convert-nvgpu-to-nvvm reads of it (no TMA here).
"""
from __future__ import annotations

from workers.compile import mlir
from workers.compile.mlir import ir
from workers.compile.tensor_core import WGMMA, WGMMA_BOX, WGMMA_SWIZZLE_BYTES
from workers.records import ELEMENT_BYTES, WARPGROUP_THREADS, WGMMA_K_STEP

CHUNK_BYTES = 16  # one cp.async, and the unit the 128-byte swizzle permutes
SWIZZLE_CHUNKS = WGMMA_SWIZZLE_BYTES // CHUNK_BYTES  # 8 chunks per row, row r's chunk c at c ^ (r % 8)
SWIZZLE_ALIGNMENT = 1024  # a swizzled tile starts at a multiple of 8 rows of 128 bytes
SMEM = mlir.WORKGROUP


def _tensor_map(rows: int, element: str) -> str:
    return (f"!nvgpu.tensormap.descriptor<tensor = memref<{rows}x{WGMMA_BOX}x{element}, 3>, swizzle = swizzle_128b, "
            "l2promo = none, oob = zero, interleave = none>")


def _copies(name: str, rows: int, row_chunks: int, source: str, source_type: str, tile_type: str,
            chunk: int, tile_row, source_index) -> list[str]:
    """cp.async lines for a (rows x row_chunks chunks) tile of `source`: chunk j = q * 128 + tid, at
    (row, chunk) = divmod(j, row_chunks), read at source_index(j) and written to %stage_{name} at
    (tile_row(j), its swizzled chunk)."""
    out = []
    for q in range(rows * row_chunks // WARPGROUP_THREADS):
        j = f"%{name}{q}"
        out += [f"{j} = arith.addi %tid, %c{q * WARPGROUP_THREADS} : index",
                f"{j}_row = arith.divui {j}, %c{row_chunks} : index",
                f"{j}_chunk = arith.remui {j}, %c{row_chunks} : index",
                f"{j}_col = arith.muli {j}_chunk, %c{chunk} : index",
                *tile_row(j),
                f"{j}_phase = arith.remui {j}_row, %c{SWIZZLE_CHUNKS} : index",
                f"{j}_in_box = arith.remui {j}_chunk, %c{SWIZZLE_CHUNKS} : index",
                f"{j}_swizzled = arith.xori {j}_in_box, {j}_phase : index",
                f"{j}_tile_col = arith.muli {j}_swizzled, %c{chunk} : index",
                *source_index(j),
                f"%t_{name}{q} = nvgpu.device_async_copy {source}[{j}_src_row, {j}_src_col], "
                f"%stage_{name}[{j}_tile_row, {j}_tile_col], {chunk} : {source_type} to {tile_type}"]
    return out


def k_loop_text(a_type: str, b_type: str, c_type: str, m: int, n: int, k: int, stages: int, element: str) -> str:
    """A func whose body is the kernel's K loop for C (m x n) = A (m x k) B (k x n), `stages` in flight."""
    chunk = CHUNK_BYTES // ELEMENT_BYTES[element]  # elements per cp.async
    a_bytes, b_bytes = m * WGMMA_SWIZZLE_BYTES, n * WGMMA_SWIZZLE_BYTES
    steps = k // WGMMA_K_STEP
    a_tile = f"memref<{m}x{WGMMA_K_STEP}x{element}, {SMEM}>"
    b_boxes = f"memref<{n}x{WGMMA_BOX}x{element}, {SMEM}>"  # n/64 boxes of 64 K rows
    b_tile = f"memref<{WGMMA_K_STEP}x{n}x{element}, {SMEM}>"  # the same bytes as wgmma's descriptor sees them
    acc = f"!nvgpu.warpgroup.accumulator<fragmented = vector<{m}x{n}xf32>>"
    desc_a = f"!nvgpu.warpgroup.descriptor<tensor = {a_tile}>"
    desc_b = f"!nvgpu.warpgroup.descriptor<tensor = {b_tile}>"
    constants = {0, 1, steps, stages, stages - 1, chunk, SWIZZLE_CHUNKS, WGMMA_K_STEP, n // chunk,
                 *(q * WARPGROUP_THREADS for q in range(max(m, n) * SWIZZLE_CHUNKS // WARPGROUP_THREADS))}

    def stage_views(stage: str) -> list[str]:
        return [f"%stage_off = arith.muli {stage}, %c_stage_bytes : index",
                f"%stage_a = memref.view %buffers[%stage_off][] : memref<{stages * (a_bytes + b_bytes)}xi8, {SMEM}> to {a_tile}",
                "%stage_b_off = arith.addi %stage_off, %c_a_bytes : index",
                f"%stage_b = memref.view %buffers[%stage_b_off][] : memref<{stages * (a_bytes + b_bytes)}xi8, {SMEM}> to {b_boxes}"]

    def issue(step: str) -> list[str]:
        """The copies of K step `step` into its buffer, then the group's commit."""
        return [f"%stage = arith.remui {step}, %c{stages} : index",
                *stage_views("%stage"),
                f"%k0 = arith.muli {step}, %c{WGMMA_K_STEP} : index",
                # A's rows are the tile's rows; K runs along them
                *_copies("a", m, SWIZZLE_CHUNKS, "%A", a_type, a_tile, chunk,
                         lambda j: [f"{j}_tile_row = arith.addi {j}_row, %c0 : index"],
                         lambda j: [f"{j}_src_row = arith.addi {j}_row, %c0 : index",
                                    f"{j}_src_col = arith.addi %k0, {j}_col : index"]),
                # B's rows are K: chunk c of K row r goes to box c / 8, that box's row r
                *_copies("b", WGMMA_K_STEP, n // chunk, "%B", b_type, b_boxes, chunk,
                         lambda j: [f"{j}_box = arith.divui {j}_chunk, %c{SWIZZLE_CHUNKS} : index",
                                    f"{j}_box_row = arith.muli {j}_box, %c{WGMMA_K_STEP} : index",
                                    f"{j}_tile_row = arith.addi {j}_box_row, {j}_row : index"],
                         lambda j: [f"{j}_src_row = arith.addi %k0, {j}_row : index",
                                    f"{j}_src_col = arith.addi {j}_col, %c0 : index"])]

    def block(lines: list[str]) -> list[str]:
        # each step's SSA names in a region of their own: scf.execute_region keeps them apart
        return ["scf.execute_region {", *("  " + line for line in lines), "  scf.yield", "}"]

    body = [f"%c{c} = arith.constant {c} : index" for c in sorted(constants)]
    body += [f"%c_stage_bytes = arith.constant {a_bytes + b_bytes} : index",
             f"%c_a_bytes = arith.constant {a_bytes} : index",
             f"%buffers = memref.alloc() {{alignment = {SWIZZLE_ALIGNMENT} : i64}} : memref<{stages * (a_bytes + b_bytes)}xi8, {SMEM}>",
             "%tid = gpu.thread_id x",
             "%no_map = arith.constant 0 : i64",
             f"%map_a = builtin.unrealized_conversion_cast %no_map : i64 to {_tensor_map(m, element)}",
             f"%map_b = builtin.unrealized_conversion_cast %no_map : i64 to {_tensor_map(WGMMA_K_STEP, element)}"]
    for step in range(stages - 1):
        body += block([f"%step = arith.constant {step} : index", *issue("%step"), "nvvm.cp.async.commit.group"])
    body += [f"%acc0 = nvgpu.warpgroup.mma.init.accumulator -> {acc}",
             f"%acc = scf.for %i = %c0 to %c{steps} step %c1 iter_args(%carried = %acc0) -> ({acc}) {{",
             f"  nvvm.cp.async.wait.group {stages - 2}",
             # the copies wrote through the generic proxy, wgmma reads through the async one
             "  nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}",
             "  gpu.barrier",
             f"  %read = arith.remui %i, %c{stages} : index",
             "  %read_off = arith.muli %read, %c_stage_bytes : index",
             f"  %read_a = memref.view %buffers[%read_off][] : memref<{stages * (a_bytes + b_bytes)}xi8, {SMEM}> to {a_tile}",
             "  %read_b_off = arith.addi %read_off, %c_a_bytes : index",
             f"  %read_b = memref.view %buffers[%read_b_off][] : memref<{stages * (a_bytes + b_bytes)}xi8, {SMEM}> to {b_tile}",
             f"  %desc_a = nvgpu.warpgroup.generate.descriptor %read_a, %map_a : {a_tile}, {_tensor_map(m, element)} -> {desc_a}",
             f"  %desc_b = nvgpu.warpgroup.generate.descriptor %read_b, %map_b : {b_tile}, {_tensor_map(WGMMA_K_STEP, element)} -> {desc_b}",
             # leaves this step's wgmmas in flight, waiting for the step before's: their buffer is the one
             # this step's copies refill
             f"  %next = nvgpu.warpgroup.mma %desc_a, %desc_b, %carried {{transposeB, waitGroup = 1 : i64}} "
             f": {desc_a}, {desc_b}, {acc} -> {acc}",
             f"  %ahead = arith.addi %i, %c{stages - 1} : index",
             f"  %more = arith.cmpi ult, %ahead, %c{steps} : index",
             "  scf.if %more {",
             *("    " + line for line in issue("%ahead")),
             "  }",
             "  nvvm.cp.async.commit.group",
             f"  scf.yield %next : {acc}",
             "}",
             "nvvm.wgmma.wait.group.sync.aligned 0",
             "nvvm.cp.async.wait.group 0",
             "gpu.barrier",
             f"nvgpu.warpgroup.mma.store %acc, %C : {acc} to {c_type}",
             # the epilogue's threads read what other threads stored
             "gpu.barrier"]
    return "\n".join([f"func.func @k_loop(%A: {a_type}, %B: {b_type}, %C: {c_type}) {{",
                      *("  " + line for line in body), "  return", "}"])


def warpgroup_matmuls(module: ir.Module) -> None:
    """Replace each linalg.matmul marked WGMMA (inside its gpu.launch, before outlining) by its K loop."""
    for matmul in mlir.ops_named(module.operation, "linalg.matmul"):
        if WGMMA not in matmul.attributes:
            continue
        a, b, c = matmul.operands
        if mlir.in_shared_memory(c):
            _share_accumulator_tile(matmul, c)
        a_type, b_type, c_type = (ir.MemRefType(v.type) for v in (a, b, c))
        (m, k), n = a_type.shape, b_type.shape[1]
        text = k_loop_text(str(a_type), str(b_type), str(c_type), m, n, k, ir.IntegerAttr(matmul.attributes[WGMMA]).value,
                           str(a_type.element_type))
        template = mlir.parse(f"module {{\n{text}\n}}", "the wgmma K loop")  # alive while its ops move
        entry = template.body.operations[0].regions[0].blocks[0]
        for argument, value in zip(entry.arguments, (a, b, c)):
            argument.replace_all_uses_with(value)
        for op in list(entry.operations)[:-1]:  # the return stays
            op.move_before(matmul)
        matmul.erase()


def _share_accumulator_tile(matmul, tile: ir.Value) -> None:
    """The epilogue's accumulator tile takes the buffers' memory (OVERLAPS_STAGED): they are dead once the
    loop is done, it is during the loop, once the threads wrote the fill's zeros (the barrier that the
    thread mapping put after them)."""
    alloc = tile.owner
    if alloc.name != "memref.alloc":
        raise mlir.MlirError(f"the wgmma accumulator tile is {alloc.name}'s result, not a shared allocation")
    ops, at = mlir.siblings(matmul)
    if at == 0 or ops[at - 1].name != "gpu.barrier":
        raise mlir.MlirError("no barrier between the accumulator tile's fill and the wgmma K loop")
    alloc.attributes[mlir.OVERLAPS_STAGED] = ir.UnitAttr.get()
