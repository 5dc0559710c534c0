"""farm-interleave-thread-columns: the schedule knob interleave_columns.

A row kernel's or block reduction's thread reads a run of columns; with the knob (kernel_marks), its vectors
are interleaved across the block instead, so that a warp-wide access covers neighbouring columns. A kernel
without that form is left as it was, with a note. Runs after farm-reuse-reads and the module merge.
"""
from __future__ import annotations

from typing import Callable

from workers.compile import kernel_marks
from workers.compile.mlir import (ir, arith_dialect, memref_dialect, vector_dialect, ops_named, kernel_ops,
                                  INDEXED_ACCESSES, outside_shared_memory, memref_position, known_block_size)
from workers.compile.passes.warp_merge import _is_thread_id_x
from workers.records import interleave_lanes


def interleave_thread_columns(module: ir.Module, vector_bytes: int) -> list[str]:
    """In the kernels marked kernel_marks.INTERLEAVE_COLUMNS (schedule knob interleave_columns: a row kernel or block
    reduction of T threads, thread t owning the run of W columns from t W of each row it reads or writes),
    thread t's j-th vector of V columns (interleave_lanes: `vector_bytes` of them, fewer where W is not whole
    vectors of those) moves to column (j T + t) V: each warp-wide access then covers 32 V neighbouring columns
    (512 bytes of f32) instead of one vector in every W, which held a LayerNorm over rows of 8192 f32 at 0.67x
    of copy bandwidth (0.94x interleaved, on the H200: benchmarks/probes/row_layout.cu). The same bijection of
    the columns applies to every access of global memory through a thread's run (a `memref.subview` at offset
    `thread_id.x * W` of W columns, read or written whole by a vector.load or vector.store, or in steps of S
    columns at the index of a loop from 0 to W by S: reduction_tile), so each elementwise result still meets
    its own operands, and each row reduction adds the same columns in another order. A named
    kernel with no such access, runs of two widths, or a global access of another form that depends on the
    thread (a gather) is left as it was; the returned notes name it. Run it after `reuse_reads` (which matches
    loads by their operands)."""
    notes = []
    for kernel in kernel_ops(module, "gpu.func"):
        name = ir.StringAttr(kernel.attributes["sym_name"]).value
        if kernel_marks.INTERLEAVE_COLUMNS not in kernel.attributes:
            continue
        runs = {op.results[0]: width for op in ops_named(kernel, "affine.apply") if (width := _thread_run_width(op))}
        moved, others = [], []
        for access in [op for n in INDEXED_ACCESSES for op in ops_named(kernel, n)]:
            if outside_shared_memory(access.operands[memref_position(access)]):
                run = _run_access(access, runs)
                (moved if run is not None else others).append((access, run))
        widths = {runs[_last_offset(view)] for _, (view, _) in moved}
        threads = known_block_size(kernel)[0]
        depends = _thread_dependence()
        lanes = {interleave_lanes(runs[_last_offset(view)],
                                  vector_bytes * 8 // ir.VectorType(_accessed_vector(access)).element_type.width)
                 for access, (view, _) in moved}
        if not moved or len(widths) != 1 or len(lanes) != 1 or not threads \
                or any(ir.VectorType(_accessed_vector(access)).shape[0] % min(lanes) for access, _ in moved) \
                or any(depends(v) for access, _ in others for v in _address_operands(access)) \
                or any(depends(v) for _, (view, _) in moved for v in list(view.operands)[1:-1]):
            notes.append(f"interleave_columns left kernel {name} as it was: it has no thread runs of whole vectors "
                         "that each of its global accesses depending on the thread reads or writes whole or in "
                         "steps")
            continue
        for access, (view, step) in moved:
            _interleave(access, view, step, min(lanes), threads)
    return notes


def _accessed_vector(access) -> ir.Type:
    """The type of the vector that a vector.load reads or a vector.store writes."""
    return access.operands[0].type if access.name == "vector.store" else access.results[0].type


def _thread_run_width(apply) -> int:
    """W where `apply` is `affine.apply ()[s0] -> (s0 * W)` of thread_id.x (the start of a thread's run of
    W columns), else 0."""
    if len(apply.operands) != 1 or not _is_thread_id_x(apply.operands[0]):
        return 0
    head, _, width = str(ir.AffineMapAttr(apply.attributes["map"]).value).rpartition(" * ")
    return int(width[:-1]) if head == "()[s0] -> (s0" and width[:-1].isdigit() and int(width[:-1]) > 1 else 0


def _is_constant_zero(value: ir.Value) -> bool:
    owner = value.owner
    return isinstance(owner, ir.OpView) and owner.name == "arith.constant" \
        and value.type.typeid == ir.IndexType.static_typeid and ir.IntegerAttr(owner.attributes["value"]).value == 0


def _run_access(access, runs: dict) -> tuple[ir.OpView, ir.Value | None] | None:
    """(the subview of a thread's run, None) where the vector.load or vector.store `access` reads or writes
    the run whole; (that subview, the loop index) where it reads or writes a step of it: S columns at the
    index of an scf.for from 0 to the run's W by S (the access's vector: S elements at index 0, through views
    without dynamic operands but the step's index); else None. A run's subview: its last offset a run start,
    on its source's last dim, W columns of stride 1, no dynamic size or stride."""
    if access.name not in ("vector.load", "vector.store"):
        return None
    at = memref_position(access)
    vector = ir.VectorType(_accessed_vector(access))
    if vector.rank != 1 or not all(_is_constant_zero(i) for i in access.operands[at + 1:]):
        return None
    view = _dynamic_subview(access.operands[at])
    if view is None:
        return None
    if _run_width(view, runs) == vector.shape[0]:
        return view, None
    step, run = _last_offset(view), _dynamic_subview(view.operands[0])
    if len(view.operands) != 2 or not _is_unit_stride_slice(view, vector.shape[0]) or run is None \
            or not (width := _run_width(run, runs)) or _loop_bounds(step) != (0, width, vector.shape[0]):
        return None
    return run, step


def _dynamic_subview(value: ir.Value) -> ir.OpView | None:
    """The first memref.subview with dynamic operands that `value` is a view of, through static subviews."""
    view = value.owner
    while isinstance(view, ir.OpView) and view.name == "memref.subview":
        if len(view.operands) > 1:
            return view
        view = view.operands[0].owner
    return None


def _static(view, key: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(view.attributes[f"static_{key}"]))


def _last_offset(view) -> ir.Value:
    return view.operands[len(view.operands) - 1]


def _is_unit_stride_slice(view, width: int) -> bool:
    """Whether `view` takes `width` columns of stride 1 at a dynamic last offset, with no dynamic size or stride."""
    offsets, sizes, strides = (_static(view, k) for k in ("offsets", "sizes", "strides"))
    dynamic = offsets.count(ir.ShapedType.get_dynamic_stride_or_offset())
    return len(view.operands) == 1 + dynamic and offsets[-1] == ir.ShapedType.get_dynamic_stride_or_offset() \
        and sizes[-1] == width and strides[-1] == 1


def _run_width(view, runs: dict) -> int:
    """W where `view` is a thread's run of W columns (its last offset a run start of W), else 0."""
    width = runs.get(_last_offset(view), 0)
    return width if width and _is_unit_stride_slice(view, width) else 0


def _loop_bounds(value: ir.Value) -> tuple[int, int, int] | None:
    """(lower, upper, step) where `value` is the index of an scf.for with constant bounds, else None."""
    if not isinstance(value, ir.BlockArgument) or value.arg_number != 0:
        return None
    loop = value.owner.owner
    if not isinstance(loop, ir.OpView) or loop.name != "scf.for":
        return None
    bounds = []
    for operand in list(loop.operands)[:3]:
        owner = operand.owner
        if not isinstance(owner, ir.OpView) or owner.name != "arith.constant":
            return None
        bounds.append(ir.IntegerAttr(owner.attributes["value"]).value)
    return tuple(bounds)


def _address_operands(access) -> list[ir.Value]:
    """What the address of `access` is made of: its indices and the operands of the views it goes through."""
    at = memref_position(access)
    values, view = list(access.operands[at + 1:]), access.operands[at].owner
    while isinstance(view, ir.OpView) and view.name == "memref.subview":
        values += list(view.operands[1:])
        view = view.operands[0].owner
    return values


def _thread_dependence() -> Callable[[ir.Value], bool]:
    """A memoized test: whether a value is computed from gpu.thread_id."""
    known: dict = {}

    def depends(value: ir.Value) -> bool:
        owner = value.owner
        if not isinstance(owner, ir.OpView):
            return False
        if owner not in known:
            known[owner] = owner.name == "gpu.thread_id" or any(depends(v) for v in owner.operands)
        return known[owner]
    return depends


def _interleave(access, run_view, step: ir.Value | None, lanes: int, threads: int) -> None:
    """Replace `access` (a run of W columns through `run_view`, whole or, at loop index `step`, S of them) by its
    vectors of V = `lanes` elements: the run's j-th at column (j threads + thread_id.x) V instead of
    thread_id.x W + j V; the step's jj-th, the run's (step / V + jj)-th, is then at step threads +
    (jj threads + thread_id.x) V."""
    at = memref_position(access)
    whole = ir.VectorType(_accessed_vector(access))
    element, width = whole.element_type, whole.shape[0]
    tid = _last_offset(run_view).owner.operands[0]
    run_type = ir.MemRefType(run_view.results[0].type)
    part_type = ir.MemRefType.get([*run_type.shape[:-1], lanes], element, run_type.layout,
                                  memory_space=run_type.memory_space)
    part_vector = ir.VectorType.get([lanes], element)
    offsets, sizes, strides = (_static(run_view, k) for k in ("offsets", "sizes", "strides"))
    index = ir.IndexType.get()
    thread, at_step = ir.AffineSymbolExpr.get(0), ir.AffineSymbolExpr.get(1)
    with ir.InsertionPoint(access), access.location:
        zeros = [arith_dialect.ConstantOp(index, 0).result] * part_type.rank
        parts = []
        for j in range(width // lanes):
            column = thread * lanes + j * lanes * threads
            column = column if step is None else column + at_step * threads
            column = ir.Operation.create("affine.apply", results=[index], operands=[tid] + ([step] if step is not None else []),
                                         attributes={"map": ir.AffineMapAttr.get(ir.AffineMap.get(
                                             0, 1 if step is None else 2, [column]))}).results[0]
            dynamic_offsets = [*list(run_view.operands)[1:-1], column]
            parts.append(memref_dialect.SubViewOp(part_type, run_view.operands[0], dynamic_offsets, [], [], offsets,
                                                  [*sizes[:-1], lanes], strides).result)
        if at:
            for j, part in enumerate(parts):
                piece = vector_dialect.extract_strided_slice(part_vector, access.operands[0], [j * lanes], [lanes], [1])
                vector_dialect.store(piece, part, zeros)
        else:
            value = arith_dialect.ConstantOp(whole, ir.DenseElementsAttr.get_splat(
                whole, ir.FloatAttr.get(element, 0.0) if isinstance(element, ir.FloatType)
                else ir.IntegerAttr.get(element, 0))).result
            for j, part in enumerate(parts):
                value = vector_dialect.insert_strided_slice(vector_dialect.load(part_vector, part, zeros), value,
                                                            [j * lanes], [1])
            access.results[0].replace_all_uses_with(value)
    access.erase()
