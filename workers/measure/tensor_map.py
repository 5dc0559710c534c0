"""TMA descriptors (CUtensorMap) for kernels that copy tiles by cp.async.bulk.tensor: config.json's
TensorMap records, encoded by the CUDA driver (cuTensorMapEncodeTiled) against the addresses of the
buffers they describe. `tiled_arguments` is pure (checked on the CPU); `encode` calls the driver."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from workers.records import ELEMENT_BYTES, TENSOR_MAP_BYTES, TensorMap

# CUtensorMapDataType, CUtensorMapSwizzle and CUtensorMapL2promotion of cuda.h
DATA_TYPES = {"i8": 0, "i16": 1, "i32": 3, "i64": 5, "f16": 6, "f32": 7, "f64": 8, "bf16": 9}
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}
MAX_BOX = 256  # elements along any dimension of a box
ALIGNMENT = 16  # bytes: of the global address and of every stride but the innermost
MAP_ALIGNMENT = 64  # bytes: of a CUtensorMap


@dataclass
class TiledArguments:
    """What cuTensorMapEncodeTiled takes, innermost dimension first."""

    data_type: int
    address: int
    dims: list[int]
    strides_bytes: list[int]  # of every dimension but the innermost (whose elements are contiguous)
    box: list[int]
    swizzle: int
    l2_promotion: int


def tiled_arguments(spec: TensorMap, base_address: int) -> TiledArguments:
    """The driver's arguments for `spec` over a buffer at `base_address`; ValueError where TMA cannot take it."""
    if spec.dtype not in DATA_TYPES or spec.swizzle not in SWIZZLES or spec.l2_promotion not in L2_PROMOTIONS:
        raise ValueError(f"tensor map of {spec.buffer}: type {spec.dtype}, swizzle {spec.swizzle} or L2 promotion "
                         f"{spec.l2_promotion} has no encoding")
    element = ELEMENT_BYTES[spec.dtype]
    address = base_address + spec.offset * element
    problems = []
    if not len(spec.shape) == len(spec.strides) == len(spec.box) or spec.strides[-1] != 1:
        problems.append("shape, strides and box need one entry per dimension, the innermost contiguous")
    if address % ALIGNMENT or any(stride * element % ALIGNMENT for stride in spec.strides[:-1]):
        problems.append(f"its start and strides must be multiples of {ALIGNMENT} bytes")
    if any(not 0 < size <= MAX_BOX for size in spec.box) or any(b > s for b, s in zip(spec.box, spec.shape)):
        problems.append(f"a box of 1 to {MAX_BOX} elements per dimension, within the shape")
    if spec.swizzle and spec.box[-1] * element > spec.swizzle:
        problems.append(f"a box row of {spec.box[-1] * element} bytes exceeds its {spec.swizzle}-byte swizzle")
    if problems:
        raise ValueError(f"tensor map of {spec.buffer} ({spec.shape} {spec.dtype}, box {spec.box}): " + "; ".join(problems))
    return TiledArguments(data_type=DATA_TYPES[spec.dtype], address=address, dims=spec.shape[::-1],
                          strides_bytes=[stride * element for stride in spec.strides[-2::-1]], box=spec.box[::-1],
                          swizzle=SWIZZLES[spec.swizzle], l2_promotion=L2_PROMOTIONS[spec.l2_promotion])


def encode(spec: TensorMap, base_address: int) -> bytes:
    """The CUtensorMap's 128 bytes, from the driver (libcuda): the kernel reads them from device memory."""
    args = tiled_arguments(spec, base_address)
    rank = len(args.dims)
    storage = ctypes.create_string_buffer(TENSOR_MAP_BYTES + MAP_ALIGNMENT)
    aligned = -(-ctypes.addressof(storage) // MAP_ALIGNMENT) * MAP_ALIGNMENT
    driver = ctypes.CDLL("libcuda.so.1")
    result = driver.cuTensorMapEncodeTiled(
        ctypes.c_void_p(aligned), ctypes.c_int(args.data_type), ctypes.c_uint32(rank), ctypes.c_void_p(args.address),
        (ctypes.c_uint64 * rank)(*args.dims), (ctypes.c_uint64 * max(rank - 1, 1))(*args.strides_bytes),
        (ctypes.c_uint32 * rank)(*args.box), (ctypes.c_uint32 * rank)(*[1] * rank),
        ctypes.c_int(0), ctypes.c_int(args.swizzle), ctypes.c_int(args.l2_promotion), ctypes.c_int(0))
    if result:
        raise ValueError(f"cuTensorMapEncodeTiled refused the tensor map of {spec.buffer}: CUresult {result}")
    return ctypes.string_at(aligned, TENSOR_MAP_BYTES)
