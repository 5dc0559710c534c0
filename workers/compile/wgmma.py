"""A block's linalg.matmul computed by warpgroups with wgmma (sm_90a), staged through shared memory.

The Transform schedule leaves a wgmma kernel's matmul whole at block level and marks it
(tensor_core.WGMMA = K steps in flight, WGMMA_ROWS = a warpgroup's rows): block tile of A (m x K) and B
(K x n) in global memory, the accumulator tile C (m x n f32: the epilogue's tile in shared memory, or
the output itself). No Transform op of MLIR rewrites a matmul into nvgpu.warpgroup.mma, so
`warpgroup_matmuls` replaces each marked op by the K loop of KLoop (MLIR text, instantiated at the op):
all threads copy each K step's A tile and B's (16-bit: column boxes of 64; TF32: rows of K of B's
transposed copy, which a kernel of its own makes first) by cp.async into shared memory in 128-byte rows
whose 16-byte chunks are XOR-swizzled by row
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
from numba_cuda_mlir._mlir.dialects import memref as memref_dialect
from workers.compile.tensor_core import WGMMA, WGMMA_BOX, WGMMA_ROWS
from workers.records import ELEMENT_BYTES, WARPGROUP_THREADS, WGMMA_ROW_BYTES, wgmma_k_step

CHUNK_BYTES = 16  # one cp.async, and the unit the 128-byte swizzle permutes
SWIZZLE_CHUNKS = WGMMA_ROW_BYTES // CHUNK_BYTES  # 8 chunks per row, row r's chunk c at c ^ (r % 8)
SWIZZLE_ALIGNMENT = 1024  # a swizzled tile starts at a multiple of 8 rows of 128 bytes
SMEM = mlir.WORKGROUP
TF32_K = 8  # K of one TF32 wgmma
TRANSPOSE_TILE, TRANSPOSE_ROWS = 32, 8  # the transpose kernel's tile of B, and its block's rows of threads


@dataclass
class KLoop:
    """The MLIR text of a wgmma kernel's K loop for C (m x n) = A (m x k) B (k x n), `stages` K steps in
    flight, m / warpgroup_rows warpgroups, warpgroup y on the rows from y * warpgroup_rows (of C: a view
    typed c_rows_type). 16-bit operands: B (k x n) copied into column boxes of 64 K rows, read by wgmma
    N-major (transposeB), one nvgpu.warpgroup.mma per step. f32 operands (TF32, which wgmma reads K-major
    only): B given transposed (n x k), copied as A is, one nvgpu.warpgroup.mma per 8 of K (nvgpu's
    lowering would step B's descriptor through K as N-major rows)."""

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
        self.k_step = wgmma_k_step(self.element)  # elements per swizzled row
        self.warpgroups = self.m // self.warpgroup_rows
        self.threads = WARPGROUP_THREADS * self.warpgroups
        self.steps = self.k // self.k_step
        self.a_bytes, self.b_bytes = self.m * WGMMA_ROW_BYTES, self.n * WGMMA_ROW_BYTES
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

    def _copy_k_rows(self, name: str, rows: int, source: str, source_type: str, tile_type: str) -> list[str]:
        """A tile whose rows run along K (A's; TF32's B, transposed in memory): row for row."""
        return self._copies(name, rows, SWIZZLE_CHUNKS, source, source_type, tile_type,
                            lambda j: [f"{j}_tile_row = arith.addi {j}_row, {self.c(0)} : index"],
                            lambda j: [f"{j}_src_row = arith.addi {j}_row, {self.c(0)} : index",
                                       f"{j}_src_col = arith.addi %k0, {j}_col : index"])

    def _copy_b(self) -> list[str]:
        if self.tf32:
            return self._copy_k_rows("b", self.n, "%B", self.b_type, self.b_rows)
        # 16-bit B's rows are K: chunk c of K row r goes to box c / 8, that box's row r
        return self._copies("b", self.k_step, self.n // self.chunk, "%B", self.b_type, self.b_rows,
                            lambda j: [f"{j}_box = arith.divui {j}_chunk, {self.c(SWIZZLE_CHUNKS)} : index",
                                       f"{j}_box_row = arith.muli {j}_box, {self.c(self.k_step)} : index",
                                       f"{j}_tile_row = arith.addi {j}_box_row, {j}_row : index"],
                            lambda j: [f"{j}_src_row = arith.addi %k0, {j}_row : index",
                                       f"{j}_src_col = arith.addi {j}_col, {self.c(0)} : index"])

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
            """Step `step`'s A and B tiles into its buffer, by cp.async."""
            return [f"%stage = arith.remui {step}, {s.c(s.stages)} : index", *s._stage("%stage"),
                    f"%k0 = arith.muli {step}, {s.c(s.k_step)} : index",
                    *s._copy_k_rows("a", s.m, "%A", s.a_type, s.a_tile), *s._copy_b()]

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
                f"%warpgroup_a_off = arith.muli %warpgroup, {s.c(s.warpgroup_rows * WGMMA_ROW_BYTES)} : index",
                "%no_map = arith.constant 0 : i64",
                f"%map_a = builtin.unrealized_conversion_cast %no_map : i64 to {s._tensor_map(s.warpgroup_rows)}",
                f"%map_b = builtin.unrealized_conversion_cast %no_map : i64 to "
                f"{s._tensor_map(s.n if s.tf32 else s.k_step)}"]
        for step in range(s.stages - 1):
            body += region([f"%step = arith.constant {step} : index", *fill("%step"), "nvvm.cp.async.commit.group"])
        mma, acc = s._mma()
        loop = [f"%ahead = arith.addi %i, {s.c(s.stages - 1)} : index",
                f"nvvm.cp.async.wait.group {s.stages - 2}",
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


def warpgroup_matmuls(module: ir.Module) -> list[int]:
    """Replace each linalg.matmul marked WGMMA (inside its gpu.launch, before outlining) by its K loop. A
    TF32 matmul's B is transposed first by a launch of its own; returns, for each such launch, the
    position among the launches (before it was added) of the kernel it precedes."""
    transposes = []
    for matmul in mlir.ops_named(module.operation, "linalg.matmul"):
        if WGMMA not in matmul.attributes:
            continue
        a, b, c = matmul.operands
        if mlir.in_shared_memory(c):
            _share_accumulator_tile(matmul, c)
        a_type, c_type = ir.MemRefType(a.type), ir.MemRefType(c.type)
        (m, k), n = a_type.shape, c_type.shape[1]
        if a_type.element_type == ir.F32Type.get():
            launch = mlir.enclosing(matmul.operation, "gpu.launch")
            launches = [op.operation for op in mlir.ops_named(module.operation, "gpu.launch")]
            transposes.append(launches.index(launch) - len(transposes))
            b = _transposed(b, launch, matmul)
        stages, warpgroup_rows = (ir.IntegerAttr(matmul.attributes[mark]).value for mark in (WGMMA, WGMMA_ROWS))
        text = KLoop(str(a_type), str(b.type), str(c_type), _rows_view_type(c_type, warpgroup_rows), m, n, k, stages,
                     warpgroup_rows, str(a_type.element_type)).text()
        _instantiate(text, "the wgmma K loop", (a, b, c), matmul)
        matmul.erase()
    return transposes


def _defining_op(value: ir.Value):
    """The op that defines `value`, or that holds the block it is an argument of."""
    owner = value.owner
    return owner.owner if isinstance(owner, ir.Block) else owner.operation


def _instantiate(text: str, what: str, arguments: tuple, before) -> list:
    """The body of the func `text` placed before op `before`, its arguments replaced by `arguments`; the
    placed ops."""
    template = mlir.parse(f"module {{\n{text}\n}}", what)  # alive while its ops move
    entry = template.body.operations[0].regions[0].blocks[0]
    for argument, value in zip(entry.arguments, arguments):
        argument.replace_all_uses_with(value)
    placed = list(entry.operations)[:-1]  # the return stays
    for op in placed:
        op.move_before(before)
    return placed


def _transposed(b: ir.Value, launch, matmul) -> ir.Value:
    """B's block tile (a view of B's columns) read from a transposed copy of B instead (n x K: rows of
    K, as wgmma reads TF32), which a launch before `launch` makes in a new buffer."""
    view = b.owner
    if isinstance(view, ir.Block) or view.name != "memref.subview":  # B whole: a grid of one column of blocks
        source, (row, column), offsets = b, (0, 0), []
    else:
        source, (row, column), offsets = view.operands[0], ir.DenseI64ArrayAttr(view.attributes["static_offsets"]), \
            list(view.operands[1:])
    if mlir.enclosing(_defining_op(source), "gpu.launch") is not None or row != 0:
        raise mlir.MlirError("a TF32 wgmma kernel reads B through a view of a buffer of the host from its first row")
    k, n_total = ir.MemRefType(source.type).shape
    if k % TRANSPOSE_TILE or n_total % TRANSPOSE_TILE:
        raise mlir.MlirError(f"B's transpose takes tiles of {TRANSPOSE_TILE}: B is {k}x{n_total}")
    placed = _instantiate(_transpose_text(str(source.type), k, n_total), "B's transpose", (source,), launch)
    copy = next(op for op in placed if op.name == "memref.alloc")
    # the view's first column (a block's, dynamic: its one offset operand) is the copy's first row
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    offset = dynamic if column == dynamic else column * k
    n = ir.MemRefType(b.type).shape[1]
    rows_type = ir.MemRefType.get([n, k], ir.F32Type.get(), ir.StridedLayoutAttr.get(offset, [k, 1]))
    with ir.InsertionPoint(matmul), matmul.location:
        rows = memref_dialect.SubViewOp(rows_type, copy.results[0], offsets, [], [], [column, 0],
                                        [n, k], [1, 1])
    return rows.result


def _transpose_text(source_type: str, k: int, n: int) -> str:
    """A func that returns B^T (n x k) of its argument B (k x n): blocks of 32 x 8 threads, each through
    a 32 x 33 tile in shared memory (padded: its column reads hit 32 banks)."""
    t, r = TRANSPOSE_TILE, TRANSPOSE_ROWS
    loads, stores = [], []
    for i in range(t // r):
        loads += [f"%in_row{i} = arith.addi %row0, %ty{i} : index",
                  f"%v{i} = memref.load %B[%in_row{i}, %in_col] : {source_type}",
                  f"memref.store %v{i}, %tile[%ty{i}, %tx] : memref<{t}x{t + 1}xf32, {SMEM}>"]
        stores += [f"%w{i} = memref.load %tile[%tx, %ty{i}] : memref<{t}x{t + 1}xf32, {SMEM}>",
                   f"%out_row{i} = arith.addi %col0, %ty{i} : index",
                   f"memref.store %w{i}, %BT[%out_row{i}, %out_col] : memref<{n}x{k}xf32>"]
    offsets = [f"%ty{i} = arith.addi %ty, %c{i * r} : index" for i in range(t // r)]
    constants = sorted({1, t, r, n // t, k // t, *(i * r for i in range(t // r))})
    return "\n".join([
        f"func.func @transpose(%B: {source_type}) {{",
        *(f"  %c{c} = arith.constant {c} : index" for c in constants),
        f"  %BT = memref.alloc() {{alignment = 64 : i64}} : memref<{n}x{k}xf32>",
        f"  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c{n // t}, %gy = %c{k // t}, %gz = %c1) "
        f"threads(%tx, %ty, %tz) in (%sx = %c{t}, %sy = %c{r}, %sz = %c1) {{",
        f"    %tile = memref.alloc() : memref<{t}x{t + 1}xf32, {SMEM}>",
        f"    %col0 = arith.muli %bx, %c{t} : index",
        f"    %row0 = arith.muli %by, %c{t} : index",
        "    %in_col = arith.addi %col0, %tx : index",
        "    %out_col = arith.addi %row0, %tx : index",
        *("    " + line for line in offsets + loads),
        "    gpu.barrier",
        *("    " + line for line in stores),
        "    gpu.terminator",
        "  }",
        "  return",
        "}"])


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
