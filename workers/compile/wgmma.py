"""A block's linalg.matmul computed by warpgroups with wgmma (sm_90a), staged through shared memory.

The Transform schedule leaves a wgmma kernel's matmul whole at block level and marks it
(tensor_core.WGMMA = K steps in flight, WGMMA_ROWS = a warpgroup's rows): block tile of A (m x K) and B
(K x n) in global memory, the accumulator tile C (m x n f32: the epilogue's tile in shared memory, or
the output itself). No Transform op of MLIR rewrites a matmul into nvgpu.warpgroup.mma, so
`warpgroup_matmuls` replaces each marked op by the K loop of KLoop (MLIR text, instantiated at the op):
all threads copy each K step's A tile and B's (16-bit: column boxes of 64 by cp.async; TF32: through
registers, transposed) into shared memory in 128-byte rows whose 16-byte chunks are XOR-swizzled by row
(the layout wgmma reads with 128-byte swizzling: 8 rows of a chunk column in 8 bank groups), d steps in
flight in d buffers; per step, each warpgroup (threads (x, y): warpgroup y) multiplies its rows of A with
B by nvgpu.warpgroup.mma, its accumulators carried in registers through the loop and stored to its rows
of C after it. An epilogue's accumulator tile is dead during the loop: it shares memory with the buffers
(mlir.OVERLAPS_STAGED). The descriptors' tensor-map operand only carries the swizzle kind and box in its
type, all that convert-nvgpu-to-nvvm reads of it (no TMA here).
"""
from __future__ import annotations

from dataclasses import dataclass

from workers.compile import mlir
from workers.compile.mlir import ir
from workers.compile.tensor_core import WGMMA, WGMMA_BOX, WGMMA_ROWS, WGMMA_SWIZZLE_BYTES
from workers.records import ELEMENT_BYTES, WARPGROUP_THREADS

CHUNK_BYTES = 16  # one cp.async, and the unit the 128-byte swizzle permutes
SWIZZLE_CHUNKS = WGMMA_SWIZZLE_BYTES // CHUNK_BYTES  # 8 chunks per row, row r's chunk c at c ^ (r % 8)
SWIZZLE_ALIGNMENT = 1024  # a swizzled tile starts at a multiple of 8 rows of 128 bytes
SMEM = mlir.WORKGROUP
TF32_K = 8  # K of one TF32 wgmma
WARP = 32


@dataclass
class KLoop:
    """The MLIR text of a wgmma kernel's K loop for C (m x n) = A (m x k) B (k x n), `stages` K steps in
    flight, m / warpgroup_rows warpgroups, warpgroup y on the rows from y * warpgroup_rows (of C: a view
    typed c_rows_type). 16-bit operands: B's K rows copied by cp.async into column boxes of 64, read by
    wgmma N-major (transposeB), one nvgpu.warpgroup.mma per step. f32 operands (TF32, which wgmma reads
    K-major only): B's rows loaded into registers a step early and stored transposed, n rows of K, one
    nvgpu.warpgroup.mma per 8 of K (nvgpu's lowering steps B's descriptor through K as N-major rows)."""

    a_type: str
    b_type: str
    c_type: str
    c_rows_type: str
    m: int
    n: int
    k: int
    stages: int
    warpgroup_rows: int
    element: str

    def __post_init__(self):
        self.constants: set[int] = set()
        self.tf32 = self.element == "f32"
        self.chunk = CHUNK_BYTES // ELEMENT_BYTES[self.element]  # elements per cp.async
        self.k_step = WGMMA_SWIZZLE_BYTES // ELEMENT_BYTES[self.element]  # elements per swizzled row
        self.warpgroups = self.m // self.warpgroup_rows
        self.threads = WARPGROUP_THREADS * self.warpgroups
        self.steps = self.k // self.k_step
        self.a_bytes, self.b_bytes = self.m * WGMMA_SWIZZLE_BYTES, self.n * WGMMA_SWIZZLE_BYTES
        self.buffers = f"memref<{self.stages * (self.a_bytes + self.b_bytes)}xi8, {SMEM}>"
        self.a_tile = self._tile(self.m, self.k_step)
        # B's tile as the copies write it: n / 64 boxes of K rows (16-bit), or n rows of K (f32)
        self.b_rows = self._tile(self.n, self.k_step) if self.tf32 else self._tile(self.n, WGMMA_BOX)
        self.acc = f"!nvgpu.warpgroup.accumulator<fragmented = vector<{self.warpgroup_rows}x{self.n}xf32>>"

    def c(self, value: int) -> str:
        """The SSA name of an index constant (declared at the top of the loop's text)."""
        self.constants.add(value)
        return f"%c{value}"

    def _tile(self, rows: int, columns: int, element: str = "") -> str:
        return f"memref<{rows}x{columns}x{element or self.element}, {SMEM}>"

    def _tensor_map(self, rows: int) -> str:
        return (f"!nvgpu.tensormap.descriptor<tensor = memref<{rows}x{self.k_step}x{self.element}, 3>, "
                "swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>")

    def _view(self, name: str, offset: str, tile: str) -> str:
        return f"{name} = memref.view %buffers[{offset}][] : {self.buffers} to {tile}"

    def _stage(self, stage: str) -> list[str]:
        return [f"%stage_off = arith.muli {stage}, %c_stage_bytes : index",
                self._view("%stage_a", "%stage_off", self.a_tile),
                "%stage_b_off = arith.addi %stage_off, %c_a_bytes : index",
                self._view("%stage_b", "%stage_b_off", self.b_rows)]

    def _swizzled(self, j: str, row: str, chunk: str) -> list[str]:
        """{j}_tile_col: the first element of chunk `chunk` (of 8) of swizzled row `row`."""
        return [f"{j}_phase = arith.remui {row}, {self.c(SWIZZLE_CHUNKS)} : index",
                f"{j}_swizzled = arith.xori {chunk}, {j}_phase : index",
                f"{j}_tile_col = arith.muli {j}_swizzled, {self.c(self.chunk)} : index"]

    def _copies(self, name: str, rows: int, row_chunks: int, source: str, source_type: str, tile_type: str,
                tile_row, source_index) -> list[str]:
        """cp.async of a (rows x row_chunks chunks) tile of `source`: chunk j = q * threads + tid at (row,
        chunk) = divmod(j, row_chunks), read at source_index(j), written to %stage_{name} at (tile_row(j),
        its chunk in the box swizzled)."""
        out = []
        for q in range(rows * row_chunks // self.threads):
            j = f"%{name}{q}"
            out += [f"{j} = arith.addi %tid, {self.c(q * self.threads)} : index",
                    f"{j}_row = arith.divui {j}, {self.c(row_chunks)} : index",
                    f"{j}_chunk = arith.remui {j}, {self.c(row_chunks)} : index",
                    f"{j}_col = arith.muli {j}_chunk, {self.c(self.chunk)} : index",
                    f"{j}_in_box = arith.remui {j}_chunk, {self.c(SWIZZLE_CHUNKS)} : index",
                    *tile_row(j), *self._swizzled(j, f"{j}_row", f"{j}_in_box"), *source_index(j),
                    f"%t_{name}{q} = nvgpu.device_async_copy {source}[{j}_src_row, {j}_src_col], "
                    f"%stage_{name}[{j}_tile_row, {j}_tile_col], {self.chunk} : {source_type} to {tile_type}"]
        return out

    def _copy_a(self) -> list[str]:
        # A's rows are the tile's rows; K runs along them
        return self._copies("a", self.m, SWIZZLE_CHUNKS, "%A", self.a_type, self.a_tile,
                            lambda j: [f"{j}_tile_row = arith.addi {j}_row, {self.c(0)} : index"],
                            lambda j: [f"{j}_src_row = arith.addi {j}_row, {self.c(0)} : index",
                                       f"{j}_src_col = arith.addi %k0, {j}_col : index"])

    def _copy_b(self) -> list[str]:
        # B's rows are K: chunk c of K row r goes to box c / 8, that box's row r
        return self._copies("b", self.k_step, self.n // self.chunk, "%B", self.b_type, self.b_rows,
                            lambda j: [f"{j}_box = arith.divui {j}_chunk, {self.c(SWIZZLE_CHUNKS)} : index",
                                       f"{j}_box_row = arith.muli {j}_box, {self.c(self.k_step)} : index",
                                       f"{j}_tile_row = arith.addi {j}_box_row, {j}_row : index"],
                            lambda j: [f"{j}_src_row = arith.addi %k0, {j}_row : index",
                                       f"{j}_src_col = arith.addi {j}_col, {self.c(0)} : index"])

    def _b_passes(self) -> range:
        """TF32's B in 4x4 blocks (4 K rows of a chunk of 4 columns), by pass q of a thread: lane l of warp
        w takes K rows 4 (l % 8) .. + 3 of chunk 4 w + l / 8 + 4 W q (W warps). A warp's load of a row
        offset reads 8 rows of 64 contiguous bytes; the 8 lanes of a quarter warp store their transposed
        rows' 16 bytes to 8 different swizzled chunks (no bank conflict)."""
        return range(self.n // (4 * self.threads // WARP * self.chunk))

    def _load_b(self, step: str) -> list[str]:
        """TF32: the thread's 4x4 blocks of B's K step `step` into registers (%bv{q}_{row})."""
        out = [f"%bk0 = arith.muli {step}, {self.c(self.k_step)} : index",
               "%b_rows = arith.addi %bk0, %lane_k_rows : index"]
        for q in self._b_passes():
            j = f"%bl{q}"
            out += [f"{j}_c = arith.addi %lane_chunk, {self.c(4 * self.threads // WARP * q)} : index",
                    f"{j}_col = arith.muli {j}_c, {self.c(self.chunk)} : index"]
            for r in range(self.chunk):
                out += [f"{j}_row{r} = arith.addi %b_rows, {self.c(r)} : index",
                        f"%bv{q}_{r} = vector.load %B[{j}_row{r}, {j}_col] {{alignment = {CHUNK_BYTES}}} : {self.b_type}, "
                        f"vector<{self.chunk}xf32>"]
        return out

    def _store_b(self) -> list[str]:
        """TF32: _load_b's blocks transposed into %stage_b: column e of a block (chunk c, K rows from 4 kq)
        is row 4 c + e's chunk kq, swizzled."""
        out = []
        for q in self._b_passes():
            j = f"%bs{q}"
            out += [f"{j}_c = arith.addi %lane_chunk, {self.c(4 * self.threads // WARP * q)} : index",
                    f"{j}_row0 = arith.muli {j}_c, {self.c(self.chunk)} : index"]
            for e in range(self.chunk):
                r = f"{j}_{e}"
                column = [f"{r}_from{row} = vector.extract %bv{q}_{row}[{e}] : f32 from vector<{self.chunk}xf32>"
                          for row in range(self.chunk)]
                out += [*column,
                        f"{r}_t = vector.from_elements {', '.join(f'{r}_from{row}' for row in range(self.chunk))} "
                        f": vector<{self.chunk}xf32>",
                        f"{r}_row = arith.addi {j}_row0, {self.c(e)} : index",
                        *self._swizzled(r, f"{r}_row", "%lane_k_quad"),
                        f"vector.store {r}_t, %stage_b[{r}_row, {r}_tile_col] : {self.b_rows}, vector<{self.chunk}xf32>"]
        return out

    def _mma(self) -> tuple[list[str], str]:
        """The step's wgmmas on buffer %read (one per 8 of K for TF32), each leaving at most the step's
        own in flight: the step before's are done, whose buffer the copies after refill. Also the name of
        the accumulators they leave."""
        out = ["%read_off = arith.muli %read, %c_stage_bytes : index",
               "%read_a_off = arith.addi %read_off, %warpgroup_a_off : index",
               "%read_b_off = arith.addi %read_off, %c_a_bytes : index"]
        parts = self.k_step // TF32_K if self.tf32 else 1
        k = self.k_step // parts
        a, b = self._tile(self.warpgroup_rows, k), self._tile(k, self.n)
        typed = "tf32" if self.tf32 else self.element  # what wgmma reads the f32 bits as
        desc_a = f"!nvgpu.warpgroup.descriptor<tensor = {self._tile(self.warpgroup_rows, k, typed)}>"
        desc_b = f"!nvgpu.warpgroup.descriptor<tensor = {self._tile(k, self.n, typed)}>"
        acc = "%carried"
        for part in range(parts):
            # a part starts k elements further along the swizzled rows (wgmma applies the swizzle to the
            # address it is given)
            out += [f"%a_off{part} = arith.addi %read_a_off, {self.c(part * k * ELEMENT_BYTES[self.element])} : index",
                    f"%b_off{part} = arith.addi %read_b_off, {self.c(part * k * ELEMENT_BYTES[self.element])} : index",
                    self._view(f"%read_a{part}", f"%a_off{part}", a),
                    self._view(f"%read_b{part}", f"%b_off{part}", b),
                    f"%desc_a{part} = nvgpu.warpgroup.generate.descriptor %read_a{part}, %map_a : {a}, "
                    f"{self._tensor_map(self.warpgroup_rows)} -> {desc_a}",
                    f"%desc_b{part} = nvgpu.warpgroup.generate.descriptor %read_b{part}, %map_b : {b}, "
                    f"{self._tensor_map(self.n if self.tf32 else self.k_step)} -> {desc_b}",
                    f"%mma{part} = nvgpu.warpgroup.mma %desc_a{part}, %desc_b{part}, {acc} "
                    f"{{{'' if self.tf32 else 'transposeB, '}waitGroup = {parts} : i64}} "
                    f": {desc_a}, {desc_b}, {self.acc} -> {self.acc}"]
            acc = f"%mma{part}"
        return out, acc

    def text(self) -> str:
        """A func whose body is the K loop (A, B, C: the matmul's operands)."""
        s = self

        def fill(step: str) -> list[str]:
            """Step `step`'s tiles into its buffer: A by cp.async, B by cp.async (16-bit) or from the
            registers _load_b filled (TF32)."""
            return [f"%stage = arith.remui {step}, {s.c(s.stages)} : index", *s._stage("%stage"),
                    f"%k0 = arith.muli {step}, {s.c(s.k_step)} : index", *s._copy_a(),
                    *(s._store_b() if s.tf32 else s._copy_b())]

        def region(lines: list[str]) -> list[str]:
            # each step's SSA names in a region of their own: scf.execute_region keeps them apart
            return ["scf.execute_region {", *("  " + line for line in lines), "  scf.yield", "}"]

        body = [f"%c_stage_bytes = arith.constant {s.a_bytes + s.b_bytes} : index",
                f"%c_a_bytes = arith.constant {s.a_bytes} : index",
                f"%buffers = memref.alloc() {{alignment = {SWIZZLE_ALIGNMENT} : i64}} : {s.buffers}",
                # the block is (128, warpgroups): thread (x, y) is thread x of warpgroup y
                "%lane_in_group = gpu.thread_id x",
                "%warpgroup = gpu.thread_id y",
                f"%warpgroup_first = arith.muli %warpgroup, {s.c(WARPGROUP_THREADS)} : index",
                "%tid = arith.addi %warpgroup_first, %lane_in_group : index",
                f"%warpgroup_a_off = arith.muli %warpgroup, {s.c(s.warpgroup_rows * WGMMA_SWIZZLE_BYTES)} : index",
                "%no_map = arith.constant 0 : i64",
                f"%map_a = builtin.unrealized_conversion_cast %no_map : i64 to {s._tensor_map(s.warpgroup_rows)}",
                f"%map_b = builtin.unrealized_conversion_cast %no_map : i64 to "
                f"{s._tensor_map(s.n if s.tf32 else s.k_step)}"]
        if s.tf32:  # the lane's K rows and chunk in each of its B blocks (_b_passes)
            body += [f"%lane = arith.remui %tid, {s.c(WARP)} : index",
                     f"%warp = arith.divui %tid, {s.c(WARP)} : index",
                     f"%lane_k_quad = arith.remui %lane, {s.c(8)} : index",
                     f"%lane_k_rows = arith.muli %lane_k_quad, {s.c(s.chunk)} : index",
                     f"%lane_chunk_in_warp = arith.divui %lane, {s.c(8)} : index",
                     f"%warp_chunk = arith.muli %warp, {s.c(4)} : index",
                     "%lane_chunk = arith.addi %warp_chunk, %lane_chunk_in_warp : index"]
        for step in range(s.stages - 1):
            body += region([f"%step = arith.constant {step} : index", *(s._load_b("%step") if s.tf32 else []),
                            *fill("%step"), "nvvm.cp.async.commit.group"])
        loop = [f"%ahead = arith.addi %i, {s.c(s.stages - 1)} : index"]
        if s.tf32:
            # B of step `ahead` into registers before this step's wait: they land while it computes (the
            # last step's again past it, unused)
            loop += [f"%last = arith.constant {s.steps - 1} : index",
                     "%ahead_loaded = arith.minui %ahead, %last : index", *s._load_b("%ahead_loaded")]
        mma, acc = s._mma()
        loop += [f"nvvm.cp.async.wait.group {s.stages - 2}",
                 # the copies wrote through the generic proxy, wgmma reads through the async one
                 "nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}",
                 "gpu.barrier",
                 f"%read = arith.remui %i, {s.c(s.stages)} : index",
                 *mma]
        if s.warpgroups > 1:
            # every warpgroup's wgmmas of the step before are done: the buffer refilled below is theirs too
            loop.append("gpu.barrier")
        loop += [f"%more = arith.cmpi ult, %ahead, {s.c(s.steps)} : index",
                 "scf.if %more {", *("  " + line for line in fill("%ahead")), "}",
                 "nvvm.cp.async.commit.group",
                 f"scf.yield {acc} : {s.acc}"]
        body += [f"%acc0 = nvgpu.warpgroup.mma.init.accumulator -> {s.acc}",
                 f"%acc = scf.for %i = {s.c(0)} to {s.c(s.steps)} step {s.c(1)} iter_args(%carried = %acc0) "
                 f"-> ({s.acc}) {{", *("  " + line for line in loop), "}",
                 "nvvm.wgmma.wait.group.sync.aligned 0",
                 "nvvm.cp.async.wait.group 0",
                 "gpu.barrier",
                 f"%warpgroup_row = arith.muli %warpgroup, {s.c(s.warpgroup_rows)} : index",
                 f"%c_rows = memref.subview %C[%warpgroup_row, 0] [{s.warpgroup_rows}, {s.n}] [1, 1] : {s.c_type} "
                 f"to {s.c_rows_type}",
                 f"nvgpu.warpgroup.mma.store %acc, %c_rows : {s.acc} to {s.c_rows_type}",
                 # the epilogue's threads read what other threads stored
                 "gpu.barrier"]
        constants = [f"%c{value} = arith.constant {value} : index" for value in sorted(s.constants)]
        return "\n".join([f"func.func @k_loop(%A: {s.a_type}, %B: {s.b_type}, %C: {s.c_type}) {{",
                          *("  " + line for line in constants + body), "  return", "}"])


def _rows_view_type(tile: ir.MemRefType, rows: int) -> str:
    """The type of a dynamic-offset view of `rows` rows of the 2-D `tile`."""
    strides, _ = tile.get_strides_and_offset()
    space = f", {tile.memory_space}" if tile.memory_space is not None else ""
    return f"memref<{rows}x{tile.shape[1]}x{tile.element_type}, strided<{strides}, offset: ?>{space}>"


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
        stages, warpgroup_rows = (ir.IntegerAttr(matmul.attributes[mark]).value for mark in (WGMMA, WGMMA_ROWS))
        text = KLoop(str(a_type), str(b_type), str(c_type), _rows_view_type(c_type, warpgroup_rows), m, n, k, stages,
                     warpgroup_rows, str(a_type.element_type)).text()
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
