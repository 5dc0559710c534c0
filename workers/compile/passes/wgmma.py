"""A block's linalg.matmul computed by warpgroups with wgmma (sm_90a), its tiles copied by TMA.

The Transform schedule leaves a wgmma kernel's matmul whole at block level and marks it
(tensor_core.WGMMA = K steps in flight, WGMMA_ROWS = a warpgroup's rows): block tile of A (m x K) and B
(K x n) in global memory, the accumulator tile C (m x n f32: the epilogue's tile in shared memory, or
the output itself). No Transform op of MLIR rewrites a matmul into nvgpu.warpgroup.mma, so
`warpgroup_matmuls` replaces each marked op by the K loop of KLoop (MLIR text, instantiated at the op)
and puts TMA descriptors of A and B (nvgpu.tma.create.descriptor) on the host before the launch: the
compile stage records them in config.json, the measure worker encodes them (cuTensorMapEncodeTiled).
One thread copies each K step's A tile and B's (16-bit: column boxes of 64; TF32: rows of K of B's
transposed copy, which a kernel of its own makes first) by TMA into shared memory in 128-byte rows,
swizzled as wgmma reads them, completing on the buffer's mbarrier; d steps in flight in d buffers. Per
step, each warpgroup (threads (x, y): warpgroup y) waits for its buffer's mbarrier and multiplies its
rows of A with B by nvgpu.warpgroup.mma, its accumulators carried in registers through the loop and
stored to its rows of C after it. An epilogue's accumulator tile is dead during the loop: it shares
memory with the buffers (k_loops.OVERLAPS_STAGED). convert-nvgpu-to-nvvm reads only the type of a wgmma
descriptor's tensor map (swizzle and box): B's take B's TMA descriptor, A's (a warpgroup's rows of the
block's box) a cast of 0 typed so.
"""
from __future__ import annotations

from dataclasses import dataclass

from workers.compile import kernel_marks, mlir
from workers.compile.passes import k_loops, shared_memory
from workers.compile.mlir import ir, arith_dialect
from workers.compile.tensor_core import WGMMA, WGMMA_BOX, WGMMA_ROWS, padded_columns, wgmma_staged_bytes
from workers.records import ELEMENT_BYTES, WARPGROUP_THREADS, WGMMA_ROW_BYTES, wgmma_k_step

SWIZZLE_ALIGNMENT = 1024  # a swizzled tile starts at a multiple of 8 rows of 128 bytes
SMEM = mlir.WORKGROUP
TF32_K = 8  # K of one TF32 wgmma
# an mbarrier wait's suspend-time hint (ns), as MLIR's sm90 tests give it: where all threads wait together it
# costs nothing (0 and 1000 time the same, perf_targets_h200.md run 40); a lone waiter woke late with it
WAIT_TICKS = 10_000_000
TRANSPOSE_TILE, TRANSPOSE_ROWS = 32, 8  # the transpose kernel's tile of B, and its block's rows of threads


@dataclass
class KLoop:
    """The MLIR text of a wgmma kernel's K loop for C (m x n) = A (m x k) B (k x n), `stages` K steps in
    flight, m / warpgroup_rows warpgroups, warpgroup y on the rows from y * warpgroup_rows (of C: a view
    typed c_rows_type). 16-bit operands: B (k x n) copied in column boxes of 64 K rows, read by wgmma
    N-major (transposeB), one nvgpu.warpgroup.mma per step. f32 operands (TF32, which wgmma reads K-major
    only): B given transposed (n x k), copied as A is, one nvgpu.warpgroup.mma per 8 of K (nvgpu's
    lowering would step B's descriptor through K as N-major rows)."""

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
        self.k_step = wgmma_k_step(self.element)  # elements per swizzled row
        self.warpgroups = self.m // self.warpgroup_rows
        self.steps = self.k // self.k_step
        self.a_bytes = self.m * WGMMA_ROW_BYTES
        self.stage_bytes = wgmma_staged_bytes(1, self.m, self.n)
        self.buffers = f"memref<{wgmma_staged_bytes(self.stages, self.m, self.n)}xi8, {SMEM}>"
        self.a_tile = self._tile(self.m, self.k_step)
        # B's tile as the copies write it: n / 64 boxes of K rows (16-bit), or n rows of K (f32)
        self.b_rows = self._tile(self.n, self.k_step) if self.tf32 else self._tile(self.n, WGMMA_BOX)
        self.acc = f"!nvgpu.warpgroup.accumulator<fragmented = vector<{self.warpgroup_rows}x{self.n}xf32>>"
        self.bars = f"!nvgpu.mbarrier.group<memorySpace = {SMEM}, num_barriers = {self.stages}>"
        # rows of the TMA boxes (of one K step's 128-byte rows): A's block rows; B's n rows of K (TF32's
        # transposed copy) or K rows of 64 columns
        self.a_box_rows, self.b_box_rows = self.m, self.n if self.tf32 else self.k_step
        self.a_map, self.b_map = self._tensor_map(self.a_box_rows), self._tensor_map(self.b_box_rows)

    def c(self, value: int) -> str:
        """The SSA name of an index constant (declared at the top of the loop's text)."""
        self.constants.add(value)
        return f"%c{value}"

    def _tile(self, rows: int, columns: int, element: str = "") -> str:
        return f"memref<{rows}x{columns}x{element or self.element}, {SMEM}>"

    def _tensor_map(self, rows: int) -> str:
        """The type of a TMA descriptor (or of wgmma's tensor-map operand) of boxes of `rows` 128-byte rows
        of K, swizzled as wgmma reads them."""
        return (f"!nvgpu.tensormap.descriptor<tensor = memref<{rows}x{self.k_step}x{self.element}, 3>, "
                "swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>")

    def _view(self, name: str, offset: str, tile: str) -> str:
        return f"{name} = memref.view %buffers[{offset}][] : {self.buffers} to {tile}"

    def _stage(self, stage: str) -> list[str]:
        return [f"%stage_off = arith.muli {stage}, %c_stage_bytes : index",
                self._view("%stage_a", "%stage_off", self.a_tile),
                "%stage_b_off = arith.addi %stage_off, %c_a_bytes : index",
                self._view("%stage_b", "%stage_b_off", self.b_rows)]

    def _loads(self) -> list[str]:
        """The leader thread's TMA copies of the tiles of K step %k0 into buffer %stage (A's m x k rows; B's
        boxes of K rows x 64 columns, or TF32's n rows of K of B's transposed copy), which complete the
        transaction count its mbarrier expects: the stage's bytes. TMA writes each box's 128-byte rows
        swizzled as wgmma reads them."""
        out = [f"nvgpu.mbarrier.arrive.expect_tx %bars[%stage], %c_stage_bytes : {self.bars}",
               f"nvgpu.tma.async.load %TA[%k0, %a_row], %bars[%stage] to %stage_a : {self.a_map}, "
               f"{self.bars} -> {self.a_tile}"]
        if self.tf32:
            return out + [f"nvgpu.tma.async.load %TB[%k0, %b_col], %bars[%stage] to %stage_b : "
                          f"{self.b_map}, {self.bars} -> {self.b_rows}"]
        box = self._tile(self.k_step, WGMMA_BOX)
        for i in range(self.n // WGMMA_BOX):
            out += [f"%box{i}_off = arith.addi %stage_b_off, {self.c(i * self.k_step * WGMMA_ROW_BYTES)} : index",
                    self._view(f"%box{i}", f"%box{i}_off", box),
                    f"%box{i}_col = arith.addi %b_col, {self.c(i * WGMMA_BOX)} : index",
                    f"nvgpu.tma.async.load %TB[%box{i}_col, %k0], %bars[%stage] to %box{i} : "
                    f"{self.b_map}, {self.bars} -> {box}"]
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
                    f"%desc_b{part} = nvgpu.warpgroup.generate.descriptor %read_b{part}, %TB : {b}, "
                    f"{self.b_map} -> {desc_b}",
                    f"%mma{part} = nvgpu.warpgroup.mma %desc_a{part}, %desc_b{part}, {acc} "
                    f"{{{'' if self.tf32 else 'transposeB, '}waitGroup = {parts} : i64}} "
                    f": {desc_a}, {desc_b}, {self.acc} -> {self.acc}"]
            acc = f"%mma{part}"
        return out, acc

    def text(self) -> str:
        """A func whose body is the K loop (C: the matmul's output; TA, TB: TMA descriptors of A and of B
        or its transposed copy; a_row, b_col: the block's first row of A and column of B)."""
        s = self

        def fill(step: str) -> list[str]:
            """Step `step`'s A and B tiles into its buffer, by the leader's TMA copies."""
            return [f"%stage = arith.remui {step}, {s.c(s.stages)} : index", *s._stage("%stage"),
                    f"%k0 = arith.muli {step}, {s.c(s.k_step)} : index", *s._loads()]

        def region(lines: list[str]) -> list[str]:
            # each step's SSA names in a region of their own: scf.execute_region keeps them apart
            return ["scf.execute_region {", *("  " + line for line in lines), "  scf.yield", "}"]

        def indented(lines: list[str]) -> list[str]:
            return ["  " + line for line in lines]

        body = [f"%c_stage_bytes = arith.constant {s.stage_bytes} : index",
                f"%c_a_bytes = arith.constant {s.a_bytes} : index",
                f"%buffers = memref.alloc() {{alignment = {SWIZZLE_ALIGNMENT} : i64}} : {s.buffers}",
                f"%bars = nvgpu.mbarrier.create -> {s.bars}",
                # the block is (128, warpgroups): thread (x, y) is thread x of warpgroup y
                "%lane_in_group = gpu.thread_id x",
                "%warpgroup = gpu.thread_id y",
                f"%warpgroup_first = arith.muli %warpgroup, {s.c(WARPGROUP_THREADS)} : index",
                "%tid = arith.addi %warpgroup_first, %lane_in_group : index",
                f"%leader = arith.cmpi eq, %tid, {s.c(0)} : index",
                f"%warpgroup_a_off = arith.muli %warpgroup, {s.c(s.warpgroup_rows * WGMMA_ROW_BYTES)} : index",
                "%no_map = arith.constant 0 : i64",
                # A's wgmma descriptors are of a warpgroup's rows: a map typed so, whose value is never read
                f"%map_a = builtin.unrealized_conversion_cast %no_map : i64 to {s._tensor_map(s.warpgroup_rows)}",
                "scf.if %leader {",
                *indented([f"nvgpu.mbarrier.init %bars[{s.c(stage)}], {s.c(1)} : {s.bars}" for stage in range(s.stages)]),
                f"  nvgpu.tma.prefetch.descriptor %TA : {s.a_map}",
                f"  nvgpu.tma.prefetch.descriptor %TB : {s.b_map}",
                "}",
                "gpu.barrier",  # the mbarriers are initialized before anyone waits on them
                "scf.if %leader {"]
        for step in range(s.stages - 1):
            body += indented(region([f"%step = arith.constant {step} : index", *fill("%step")]))
        body.append("}")
        mma, acc = s._mma()
        loop = [f"%read = arith.remui %i, {s.c(s.stages)} : index",
                # the buffer's mbarrier completes a phase per fill: step i waits for the end of phase i / d
                f"%round = arith.divui %i, {s.c(s.stages)} : index",
                f"%round_odd = arith.remui %round, {s.c(2)} : index",
                f"%phase = arith.cmpi ne, %round_odd, {s.c(0)} : index",
                f"nvgpu.mbarrier.try_wait.parity %bars[%read], %phase, {s.c(WAIT_TICKS)} : {s.bars}",
                *mma,
                # every warpgroup's wgmmas of the step before are done: the buffer refilled below is theirs
                "gpu.barrier",
                f"%ahead = arith.addi %i, {s.c(s.stages - 1)} : index",
                f"%more = arith.cmpi ult, %ahead, {s.c(s.steps)} : index",
                "%refill = arith.andi %more, %leader : i1",
                "scf.if %refill {", *indented(fill("%ahead")), "}",
                f"scf.yield {acc} : {s.acc}"]
        body += [f"%acc0 = nvgpu.warpgroup.mma.init.accumulator -> {s.acc}",
                 f"%acc = scf.for %i = {s.c(0)} to {s.c(s.steps)} step {s.c(1)} iter_args(%carried = %acc0) "
                 f"-> ({s.acc}) {{", *indented(loop), "}",
                 "nvvm.wgmma.wait.group.sync.aligned 0",
                 "gpu.barrier",
                 f"%warpgroup_row = arith.muli %warpgroup, {s.c(s.warpgroup_rows)} : index",
                 f"%c_rows = memref.subview %C[%warpgroup_row, 0] [{s.warpgroup_rows}, {s.n}] [1, 1] : {s.c_type} "
                 f"to {s.c_rows_type}",
                 f"nvgpu.warpgroup.mma.store %acc, %c_rows : {s.acc} to {s.c_rows_type}",
                 # the epilogue's threads read what other threads stored
                 "gpu.barrier"]
        constants = [f"%c{value} = arith.constant {value} : index" for value in sorted(s.constants)]
        return "\n".join([f"func.func @k_loop(%C: {s.c_type}, %TA: {s.a_map}, %TB: {s.b_map}, %a_row: index, "
                          "%b_col: index) {",
                          *("  " + line for line in constants + body), "  return", "}"])


def _rows_view_type(tile: ir.MemRefType, rows: int) -> str:
    """The type of a dynamic-offset view of `rows` rows of the 2-D `tile`."""
    strides, _ = tile.get_strides_and_offset()
    space = f", {tile.memory_space}" if tile.memory_space is not None else ""
    return f"memref<{rows}x{tile.shape[1]}x{tile.element_type}, strided<{strides}, offset: ?>{space}>"


def warpgroup_matmuls(module: ir.Module) -> None:
    """farm-wgmma-k-loops: replace each linalg.matmul marked WGMMA (inside its gpu.launch, before outlining)
    by its K loop, and put the TMA descriptors of its operands on the host before the launch. A TF32
    matmul's B is transposed first by a launch of its own (a copy kernel of the matmul's schedule). The
    project's own lowering of a block matmul: no upstream op produces nvgpu.warpgroup.mma."""
    for matmul in mlir.ops_named(module.operation, "linalg.matmul"):
        if WGMMA not in matmul.attributes:
            continue
        a, b, c = matmul.operands
        if mlir.in_shared_memory(c):
            _share_accumulator_tile(matmul, c)
            c_columns = ir.MemRefType(c.type).shape[1]
            # rows whose fragments the warpgroups' stores spread over the banks (an f32 row of 1024 bytes
            # put a warp's 8 rows in the same 8 banks)
            c = shared_memory.widen_rows(c.owner, padded_columns(c_columns, ELEMENT_BYTES["f32"], True))
        a_type, c_type = ir.MemRefType(a.type), ir.MemRefType(c.type)
        (m, k), n = a_type.shape, c_type.shape[1]
        element = str(a_type.element_type)
        launch = mlir.enclosing(matmul.operation, "gpu.launch")
        (a_source, (a_row, a_column)), (b_source, (b_row, b_column)) = _block_view(a), _block_view(b)
        if a_column != 0 or b_row != 0:
            raise mlir.MlirError("a wgmma kernel's block reads its operands' K from the start")
        if element == "f32":  # B's transposed copy instead, whose rows are B's columns
            b_source = _transposed(b_source, launch)
        stages, warpgroup_rows = (ir.IntegerAttr(matmul.attributes[mark]).value for mark in (WGMMA, WGMMA_ROWS))
        loop = KLoop(str(c_type), _rows_view_type(c_type, warpgroup_rows), m, n, k, stages, warpgroup_rows, element)
        maps = [_host_tensor_map(a_source, loop.a_map, (loop.a_box_rows, loop.k_step), launch),
                _host_tensor_map(b_source, loop.b_map, (loop.b_box_rows, loop.k_step), launch)]
        with ir.InsertionPoint(matmul), matmul.location:
            coordinates = [offset if isinstance(offset, ir.Value) else
                           arith_dialect.ConstantOp(ir.IndexType.get(), offset).result for offset in (a_row, b_column)]
        _instantiate(loop.text(), "the wgmma K loop", (c, *maps, *coordinates), matmul)
        matmul.erase()


def _block_view(operand: ir.Value) -> tuple[ir.Value, list]:
    """A block's operand tile as a view of a buffer of the host: that buffer and the view's offsets (ints,
    or the block's values where dynamic)."""
    view = operand.owner
    if isinstance(view, ir.Block) or view.name != "memref.subview":  # the operand whole (a grid of one block)
        source, offsets = operand, [0, 0]
    else:
        dynamic = iter(view.operands[1:])
        source = view.operands[0]
        offsets = [next(dynamic) if offset == ir.ShapedType.get_dynamic_stride_or_offset() else offset
                   for offset in ir.DenseI64ArrayAttr(view.attributes["static_offsets"])]
    if mlir.enclosing(_defining_op(source), "gpu.launch") is not None:
        raise mlir.MlirError("a wgmma kernel reads its operands from buffers of the host")
    return source, offsets


def _host_tensor_map(source: ir.Value, map_type: str, box: tuple[int, int], launch) -> ir.Value:
    """A TMA descriptor typed `map_type` of `source` (a buffer of the host, read whole) in boxes of (rows,
    columns), made on the host before `launch`."""
    source_type = ir.MemRefType(source.type)
    rows, columns = box
    unranked = f"memref<*x{source_type.element_type}>"
    text = "\n".join([f"func.func @tensor_map(%source: {source_type}) {{",
                      f"  %rows = arith.constant {rows} : index",
                      f"  %columns = arith.constant {columns} : index",
                      f"  %unranked = memref.cast %source : {source_type} to {unranked}",
                      f"  %map = nvgpu.tma.create.descriptor %unranked box[%rows, %columns] : {unranked} -> {map_type}",
                      "  return", "}"])
    return _instantiate(text, "a TMA descriptor", (source,), launch)[-1].results[0]


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


def _transposed(source: ir.Value, launch) -> ir.Value:
    """A new buffer of the host that a launch before `launch` fills with B^T (n x K: rows of K, as wgmma
    reads TF32) of B, the host buffer `source`."""
    k, n = ir.MemRefType(source.type).shape
    if k % TRANSPOSE_TILE or n % TRANSPOSE_TILE:
        raise mlir.MlirError(f"B's transpose takes tiles of {TRANSPOSE_TILE}: B is {k}x{n}")
    placed = _instantiate(_transpose_text(str(source.type), k, n), "B's transpose", (source,), launch)
    transpose = next(op for op in placed if op.name == "gpu.launch")  # a copy kernel of the matmul's schedule
    transpose.attributes[kernel_marks.ANCHOR] = launch.attributes[kernel_marks.ANCHOR]
    transpose.attributes[kernel_marks.FAMILY] = ir.StringAttr.get("copy")
    return next(op for op in placed if op.name == "memref.alloc").results[0]


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
    alloc.attributes[k_loops.OVERLAPS_STAGED] = ir.UnitAttr.get()
