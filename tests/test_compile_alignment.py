"""workers/compile/passes/alignment.py: the alignment of a kernel's vector accesses to its buffer arguments,
proven from the index arithmetic, and kernel_arguments.py's noalias marks, on hand-written kernels (the f16 matmul's epilogue, where it turns four
scalar stores into one, is in test_compile_tensor_core.py)."""
from __future__ import annotations

import pytest

from workers.compile import mlir
from workers.compile.host import merge_kernel_modules
from workers.compile.passes.alignment import align_global_vector_accesses
from workers.compile.passes.kernel_arguments import mark_unaliased_kernel_pointers

KERNEL = """
#columns = affine_map<()[s0] -> (s0 * 4 - (s0 floordiv 64) * 256)>
#rows = affine_map<()[s0] -> (s0 floordiv 64)>
module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    gpu.func @kernel(%out: memref<64x4096xf16>, %in: memref<64x4096xf32>) kernel {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %pad = arith.constant 0.0 : f32
      %tid = gpu.thread_id x
      %column = affine.apply #columns()[%tid]
      %row = affine.apply #rows()[%tid]
      %tile = memref.subview %out[0, {offset}] [64, 256] [1, 1] : memref<64x4096xf16> to memref<64x256xf16, strided<[4096, 1], offset: {layout_offset}>>
      %run = memref.subview %tile[%row, %column] [1, 4] [1, 1] : memref<64x256xf16, strided<[4096, 1], offset: {layout_offset}>> to memref<1x4xf16, strided<[4096, 1], offset: ?>>
      %x = vector.transfer_read %in[%row, %column], %pad {{in_bounds = [true]}} : memref<64x4096xf32>, vector<4xf32>
      %h = arith.truncf %x : vector<4xf32> to vector<4xf16>
      %h2 = vector.shape_cast %h : vector<4xf16> to vector<1x4xf16>
      vector.transfer_write %h2, %run[%c0, %c0] {{in_bounds = [true, true]}} : vector<1x4xf16>, memref<1x4xf16, strided<[4096, 1], offset: ?>>
      scf.for %i = %c0 to %c8 step %c1 {{
        %y = vector.transfer_read %in[%i, %i], %pad {{in_bounds = [true]}} : memref<64x4096xf32>, vector<4xf32>
        vector.store %y, %in[%row, %column] : memref<64x4096xf32>, vector<4xf32>
      }}
      gpu.return
    }}
  }}
}}
"""


def aligned(offset: int) -> tuple[list[str], str]:
    """The kernel with its output tile `offset` columns in, after the pass: its accesses' (name,
    alignment) in order, and the module's text."""
    with mlir.context():
        module = mlir.parse(KERNEL.format(offset=offset, layout_offset=offset), "the alignment test's kernel")
        align_global_vector_accesses(module)
        found = []
        for op in mlir.ops_named(module.operation, "gpu.func")[0].regions[0].blocks[0].operations:
            for nested in [op] + [o for r in op.regions for b in r.blocks for o in b.operations]:
                if nested.name.startswith(("vector.load", "vector.store", "vector.transfer")):
                    alignment = nested.attributes["alignment"].value if "alignment" in nested.attributes else None
                    found.append(f"{nested.name} {alignment}")
        return found, str(module)


def test_accesses_at_proven_multiples_state_their_alignment():
    found, text = aligned(256)
    # the f32 read: row * 4096 + column, column a multiple of 4 (s0 * 4 - (s0 floordiv 64) * 256): 16 bytes;
    # the f16 write through two views (256 columns in, then the thread's run): 4 elements, 8 bytes
    assert found[:2] == ["vector.load 16", "vector.store 8"]
    assert "vector.shape_cast" in text and "vector.transfer_write" not in text


def test_a_view_at_an_odd_offset_proves_only_what_divides_it():
    found, _ = aligned(2)  # the tile 2 columns (4 bytes) in: 4 bytes, no more than an f16 pair
    assert found[1] == "vector.store 4"
    found, _ = aligned(1)  # 2 bytes: an f16's own, stated nowhere
    assert found[1] == "vector.transfer_write None"


def test_loop_indices_prove_what_their_bounds_and_step_do():
    found, _ = aligned(256)
    # in the loop: a read at column %i (step 1) proves nothing beyond an f32's 4 bytes and stays a transfer;
    # the store at the thread's column is 16-byte aligned
    assert found[2:] == ["vector.transfer_read None", "vector.store 16"]


def test_shared_memory_and_masked_accesses_are_left_alone():
    text = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @kernel(%out: memref<64xf32>, %mask: vector<4xi1>) kernel {
      %c0 = arith.constant 0 : index
      %pad = arith.constant 0.0 : f32
      %tile = memref.alloc() : memref<64xf32, #gpu.address_space<workgroup>>
      %x = vector.transfer_read %tile[%c0], %pad {in_bounds = [true]} : memref<64xf32, #gpu.address_space<workgroup>>, vector<4xf32>
      vector.transfer_write %x, %out[%c0], %mask {in_bounds = [true]} : vector<4xf32>, memref<64xf32>
      gpu.return
    }
  }
}
"""
    with mlir.context():
        module = mlir.parse(text, "the alignment test's kernel")
        align_global_vector_accesses(module)
        assert "alignment" not in str(module) and str(module).count("vector.transfer") == 2


SHARED_BUFFER = """
module attributes {gpu.container_module} {
  func.func @forward(%arg0: memref<8xf32>) -> memref<16xf32> {
    %c1 = arith.constant 1 : index
    %buf = memref.alloc() : memref<16xf32>
    %lo = memref.subview %buf[0] [8] [1] : memref<16xf32> to memref<8xf32, strided<[1]>>
    %hi = memref.subview %buf[8] [8] [1] : memref<16xf32> to memref<8xf32, strided<[1], offset: 8>>
    gpu.launch_func @copy::@copy blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%arg0 : memref<8xf32>, %lo : memref<8xf32, strided<[1]>>)
    gpu.launch_func @shift::@shift blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1) args(%lo : memref<8xf32, strided<[1]>>, %hi : memref<8xf32, strided<[1], offset: 8>>, %arg0 : memref<8xf32>)
    return %buf : memref<16xf32>
  }
  gpu.module @copy {
    gpu.func @copy(%a: memref<8xf32>, %b: memref<8xf32, strided<[1]>>) kernel { gpu.return }
  }
  gpu.module @shift {
    gpu.func @shift(%a: memref<8xf32, strided<[1]>>, %b: memref<8xf32, strided<[1], offset: 8>>, %c: memref<8xf32>) kernel { gpu.return }
  }
}
"""


def test_noalias_marks_only_the_arguments_whose_buffer_no_other_argument_views():
    """farm-unaliased-kernel-pointers, after the module merge as in the pipeline: `copy` reads the input and
    writes half of an allocation (two buffers: both noalias); `shift` reads one half of that allocation and
    writes the other (one buffer seen through two arguments: neither noalias), and reads the input."""
    with mlir.ir.Context(), mlir.ir.Location.unknown():
        module = mlir.parse(SHARED_BUFFER, "a kernel pair")
        merge_kernel_modules(module)
        mark_unaliased_kernel_pointers(module)
        marks = {mlir.ir.StringAttr(f.attributes["sym_name"]).value:
                 ["llvm.noalias" in mlir.ir.DictAttr(a) for a in mlir.ir.ArrayAttr(f.attributes["arg_attrs"])]
                 for f in mlir.kernel_ops(module, "gpu.func")}
    assert marks == {"copy": [True, True], "shift": [False, False, True]}
