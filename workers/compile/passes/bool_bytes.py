"""farm-bool-memory-as-bytes: every memref of i1 becomes a memref of i8; loads truncate, stores extend.

A bool tensor in memory holds a byte per element (torch's bool), but LLVM treats `<N x i1>` in memory as
packed bits: a masked cumsum read `vector<4xi1>` of a mask as bits 0-3 of one byte (level1/93_masked_cumsum
was wrong on the H100), and a block reduction's 32 scalar loads of a mask's elements came out of the NVPTX
backend as one 32-bit load and a popcount. As bytes, every
access keeps torch's layout and LLVM merges them as bytes. The host's launches were read at
`farm-host-check` (config.json keeps the buffers' i1), so host and kernels change alike: buffers, views,
kernel arguments, globals; each load, transfer, gather or masked load of them reads i8 and truncates, each
store, scatter or masked store extends. No upstream pass stores i1 as bytes (IREE's type propagation does it at dispatch
boundaries). Runs after the kernels' last rewrite of their accesses, before the lowering.
"""
from __future__ import annotations

import numpy as np
from numba_cuda_mlir._mlir.dialects import arith

from workers.compile.mlir import MlirError, ir, ops_named

NAME = "farm-bool-memory-as-bytes"
# ops that take a bool memref and need no change past its type: views, launches, copies, returns
PASS_THROUGH = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast",
                "memref.reinterpret_cast", "memref.alloc", "memref.alloca", "memref.dealloc", "memref.copy",
                "gpu.launch_func", "func.return", "gpu.return", "memref.extract_strided_metadata")
READS = ("memref.load", "vector.load", "vector.transfer_read", "vector.gather", "vector.maskedload")
# the position of each write's stored value among its operands
WRITES = {"memref.store": 0, "vector.store": 0, "vector.transfer_write": 0, "vector.scatter": -1,
          "vector.maskedstore": -1}


def _bool_memref(t: ir.Type) -> bool:
    return isinstance(t, ir.MemRefType) and isinstance(t.element_type, ir.IntegerType) and t.element_type.width == 1


def _as_bytes(t: ir.Type) -> ir.Type:
    """`t` (a memref, vector or scalar of i1) of i8."""
    byte = ir.IntegerType.get_signless(8)
    if isinstance(t, ir.MemRefType):
        return ir.MemRefType.get(t.shape, byte, t.layout, t.memory_space)
    if isinstance(t, ir.VectorType):
        return ir.VectorType.get(t.shape, byte)
    return byte


def run(module: ir.Module) -> None:
    values, globals_read = [], []

    def collect(op):
        for region in op.regions:
            for block in region.blocks:
                values.extend(a for a in block.arguments if _bool_memref(a.type))
        results = [r for r in op.results if _bool_memref(r.type)]
        if results and op.name == "memref.get_global":
            globals_read.append(op)
        values.extend(results)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    if not values:
        return
    accesses = []
    for value in values:
        accesses += [use.owner.operation for use in value.uses if use.owner.operation not in accesses]
    for value in values:
        value.set_type(_as_bytes(value.type))
    for get_global in globals_read:
        _global_as_bytes(get_global)
    for op in accesses:
        if op.name in READS:
            _read_bytes(op)
        elif op.name in WRITES:
            _write_bytes(op)
        elif op.name not in PASS_THROUGH:
            raise MlirError(f"{NAME}: {op.name} takes a bool buffer, and this pass does not store it as bytes: {op}")
    for name in ("func.func", "gpu.func"):
        for func in ops_named(module.operation, name):
            _retype_signature(func)


def _global_as_bytes(get_global) -> None:
    """The memref.global a get_global reads (a constant mask, a block's shared bools), its type and initial
    value of i8."""
    symbol = ir.FlatSymbolRefAttr(get_global.attributes["name"]).value
    table = get_global.parent
    while table.name not in ("builtin.module", "gpu.module"):
        table = table.parent
    (glob,) = [op for op in table.regions[0].blocks[0].operations if op.operation.name == "memref.global"
               and ir.StringAttr(op.attributes["sym_name"]).value == symbol]
    memref_type = ir.TypeAttr(glob.attributes["type"]).value
    if not _bool_memref(memref_type):
        return  # a second get_global of the same global changed it already
    glob.attributes["type"] = ir.TypeAttr.get(_as_bytes(memref_type))
    if "initial_value" in glob.attributes and isinstance(glob.attributes["initial_value"], ir.DenseElementsAttr):
        data = np.array(glob.attributes["initial_value"]).astype(np.int8)
        glob.attributes["initial_value"] = ir.DenseElementsAttr.get(
            data, type=ir.RankedTensorType.get(memref_type.shape, ir.IntegerType.get_signless(8)))


def _rebuilt(op, result_types: list[ir.Type], operands: list[ir.Value]):
    with ir.InsertionPoint(op), op.location:
        return ir.Operation.create(op.name, results=result_types, operands=operands,
                                   attributes={name: op.attributes[name] for name in op.attributes})


def _extend(op, operands: list[ir.Value], position: int) -> None:
    """operands[position], an i1 value `op` takes, as i8."""
    with ir.InsertionPoint(op), op.location:
        operands[position] = arith.ExtUIOp(_as_bytes(operands[position].type), operands[position]).result


def _read_bytes(op) -> None:
    """The read of i8 (the value it takes where masked or out of bounds extended), truncated to the i1 its
    users take."""
    operands = list(op.operands)
    if op.name == "vector.transfer_read":  # operands: base, indices..., padding, mask?
        fallback = 1 + list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[1]
    else:  # a gather's or masked load's pass_thru is its last operand
        fallback = len(operands) - 1 if op.name in ("vector.gather", "vector.maskedload") else None
    if fallback is not None:
        _extend(op, operands, fallback)
    result = op.results[0]
    new = _rebuilt(op, [_as_bytes(result.type)], operands)
    with ir.InsertionPoint(op), op.location:
        result.replace_all_uses_with(arith.TruncIOp(result.type, new.results[0]).result)
    op.erase()


def _write_bytes(op) -> None:
    operands = list(op.operands)
    _extend(op, operands, WRITES[op.name] % len(operands))
    _rebuilt(op, [r.type for r in op.results], operands)
    op.erase()


def _retype_signature(func) -> None:
    """A function's type after its arguments' (and returned values') types changed."""
    if not func.regions[0].blocks:
        return
    entry = func.regions[0].blocks[0]
    old = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    returns = [op for block in func.regions[0].blocks for op in block.operations
               if op.operation.name in ("func.return", "gpu.return")]
    results = [v.type for v in returns[0].operands] if returns else old.results
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([a.type for a in entry.arguments],
                                                                            results))
