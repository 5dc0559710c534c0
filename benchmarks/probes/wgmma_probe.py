"""Probe: can a 4096^3 f16 matmul run on wgmma from the bundled MLIR bindings, and how fast?

A hand-written kernel (MLIR text) of one warpgroup per 128x128 output tile: all 128 threads copy each
K step's A (128x64) and B (64x128) tiles into shared memory by cp.async, in 128-byte rows whose
16-byte chunks are XOR-swizzled by row (the layout wgmma reads with 128B swizzling), `stages` steps in
flight; nvgpu.warpgroup.mma multiplies them (B read N-major: {transposeB}). No TMA: the descriptors'
tensor-map operand only carries the swizzle kind in its type (NVGPUToNVVM reads nothing else).

    python benchmarks/probes/wgmma_probe.py compile OUT   # CPU side: OUT/wgmma_*.ptx, OUT/variants.json
    python benchmarks/probes/wgmma_probe.py measure OUT   # GPU node: correctness and time against cuBLAS
"""
from __future__ import annotations

import json
import os
import sys

SIZE = 4096
K_STEP = 64  # one 128-byte swizzle row of f16
THREADS = 128
TILE_BYTES = 128 * K_STEP * 2  # A (128x64) and B (64x128) tiles alike: 16 KB


def tensor_map(rows: int) -> str:
    return (f"!nvgpu.tensormap.descriptor<tensor = memref<{rows}x64xf16, 3>, swizzle = swizzle_128b, "
            "l2promo = none, oob = zero, interleave = none>")


def copies(stage: str, kstep: str, indent: str) -> list[str]:
    """All threads' cp.async of K step `kstep` into buffer `stage` (SSA names), swizzled."""
    p = indent
    lines = [f"{p}%s_off = arith.muli {stage}, %c_stage_bytes : index",
             f"{p}%sa = memref.view %smem[%s_off][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<128x64xf16, #gpu.address_space<workgroup>>",
             f"{p}%sb_off = arith.addi %s_off, %c_tile_bytes : index",
             f"{p}%sb = memref.view %smem[%sb_off][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<128x64xf16, #gpu.address_space<workgroup>>",
             f"{p}%k0 = arith.muli {kstep}, %c64 : index"]
    for q in range(8):
        # A: row q*16 + tid/8, chunk tid%8 -> chunk (tid%8) ^ (row%8)
        lines += [f"{p}%ar{q} = arith.addi %a_row, %c{q * 16} : index",
                  f"{p}%ag{q} = arith.addi %ar{q}, %m0 : index",
                  f"{p}%ak{q} = arith.addi %k0, %a_col : index",
                  f"{p}%t_a{q} = nvgpu.device_async_copy %A[%ag{q}, %ak{q}], %sa[%ar{q}, %a_swz], 8 : memref<{SIZE}x{SIZE}xf16> to memref<128x64xf16, #gpu.address_space<workgroup>>",
                  # B: k row q*8 + tid/16, column chunk tid%16 (box tid%16/8) -> row box*64 + k
                  f"{p}%bk{q} = arith.addi %b_row, %c{q * 8} : index",
                  f"{p}%bg{q} = arith.addi %bk{q}, %k0 : index",
                  f"{p}%bs{q} = arith.addi %bk{q}, %b_box_row : index",
                  f"{p}%t_b{q} = nvgpu.device_async_copy %B[%bg{q}, %b_col], %sb[%bs{q}, %b_swz], 8 : memref<{SIZE}x{SIZE}xf16> to memref<128x64xf16, #gpu.address_space<workgroup>>"]
    return lines


def kernel(stages: int, in_flight: int) -> str:
    steps = SIZE // K_STEP
    consts = sorted({0, 1, 2, 8, 16, 64, 128, stages, stages - 1, steps} | {q * 16 for q in range(8)} | {q * 8 for q in range(8)})
    acc = "!nvgpu.warpgroup.accumulator<fragmented = vector<128x128xf32>>"
    body = [f"    %c{c} = arith.constant {c} : index" for c in consts]
    body += [f"    %c_stage_bytes = arith.constant {2 * TILE_BYTES} : index",
             f"    %c_tile_bytes = arith.constant {TILE_BYTES} : index",
             "    %tid = gpu.thread_id x",
             "    %bx = gpu.block_id x",
             "    %by = gpu.block_id y",
             "    %m0 = arith.muli %by, %c128 : index",
             "    %n0 = arith.muli %bx, %c128 : index",
             "    %smem = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>",
             "    %zero = arith.constant 0 : i64",
             f"    %map_a = builtin.unrealized_conversion_cast %zero : i64 to {tensor_map(128)}",
             f"    %map_b = builtin.unrealized_conversion_cast %zero : i64 to {tensor_map(64)}",
             # per-thread copy coordinates, the same for every K step
             "    %a_row = arith.divui %tid, %c8 : index",
             "    %a_chunk = arith.remui %tid, %c8 : index",
             "    %a_col = arith.muli %a_chunk, %c8 : index",
             "    %a_phase = arith.remui %a_row, %c8 : index",
             "    %a_swz_chunk = arith.xori %a_chunk, %a_phase : index",
             "    %a_swz = arith.muli %a_swz_chunk, %c8 : index",
             "    %b_row = arith.divui %tid, %c16 : index",
             "    %b_chunks = arith.remui %tid, %c16 : index",
             "    %b_box = arith.divui %b_chunks, %c8 : index",
             "    %b_box_row = arith.muli %b_box, %c64 : index",
             "    %b_chunk = arith.remui %b_chunks, %c8 : index",
             "    %b_phase = arith.remui %b_row, %c8 : index",
             "    %b_swz_chunk = arith.xori %b_chunk, %b_phase : index",
             "    %b_swz = arith.muli %b_swz_chunk, %c8 : index",
             "    %b_col0 = arith.muli %b_chunks, %c8 : index",
             "    %b_col = arith.addi %b_col0, %n0 : index",
             f"    scf.for %p = %c0 to %c{stages - 1} step %c1 {{",
             *copies("%p", "%p", "      "),
             "      nvvm.cp.async.commit.group",
             "    }",
             f"    %acc0 = nvgpu.warpgroup.mma.init.accumulator -> {acc}",
             f"    %acc = scf.for %i = %c0 to %c{steps} step %c1 iter_args(%carried = %acc0) -> ({acc}) {{",
             f"      nvvm.cp.async.wait.group {stages - 2}",
             # the copies wrote through the generic proxy; wgmma reads through the async one
             "      nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}",
             "      gpu.barrier",
             f"      %st = arith.remui %i, %c{stages} : index",
             "      %r_off = arith.muli %st, %c_stage_bytes : index",
             "      %ra = memref.view %smem[%r_off][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<128x64xf16, #gpu.address_space<workgroup>>",
             "      %rb_off = arith.addi %r_off, %c_tile_bytes : index",
             "      %rb = memref.view %smem[%rb_off][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x128xf16, #gpu.address_space<workgroup>>",
             f"      %da = nvgpu.warpgroup.generate.descriptor %ra, %map_a : memref<128x64xf16, #gpu.address_space<workgroup>>, {tensor_map(128)} -> !nvgpu.warpgroup.descriptor<tensor = memref<128x64xf16, #gpu.address_space<workgroup>>>",
             f"      %db = nvgpu.warpgroup.generate.descriptor %rb, %map_b : memref<64x128xf16, #gpu.address_space<workgroup>>, {tensor_map(64)} -> !nvgpu.warpgroup.descriptor<tensor = memref<64x128xf16, #gpu.address_space<workgroup>>>",
             f"      %next = nvgpu.warpgroup.mma %da, %db, %carried {{transposeB, waitGroup = {in_flight} : i64}} : !nvgpu.warpgroup.descriptor<tensor = memref<128x64xf16, #gpu.address_space<workgroup>>>, !nvgpu.warpgroup.descriptor<tensor = memref<64x128xf16, #gpu.address_space<workgroup>>>, {acc} -> {acc}",
             f"      %ahead = arith.addi %i, %c{stages - 1} : index",
             f"      %more = arith.cmpi ult, %ahead, %c{steps} : index",
             "      scf.if %more {",
             f"        %ws = arith.remui %ahead, %c{stages} : index",
             *copies("%ws", "%ahead", "        "),
             "      }",
             "      nvvm.cp.async.commit.group",
             f"      scf.yield %next : {acc}",
             "    }",
             f"    %c_tile = memref.subview %C[%m0, %n0] [128, 128] [1, 1] : memref<{SIZE}x{SIZE}xf32> to memref<128x128xf32, strided<[{SIZE}, 1], offset: ?>>",
             f"    nvgpu.warpgroup.mma.store %acc, %c_tile : {acc} to memref<128x128xf32, strided<[{SIZE}, 1], offset: ?>>",
             "    gpu.return"]
    return "\n".join(
        ["module attributes {gpu.container_module} {",
         "  gpu.module @wgmma {",
         f"  gpu.func @matmul(%A: memref<{SIZE}x{SIZE}xf16>, %B: memref<{SIZE}x{SIZE}xf16>, %C: memref<{SIZE}x{SIZE}xf32>) kernel "
         f"attributes {{known_block_size = array<i32: {THREADS}, 1, 1>}} {{",
         *body, "  }", "  }", "}"])


def compile_variants(out: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from workers.compile import mlir
    from workers.compile.driver import assemble
    from workers.compile.pipeline import lowering_pipeline
    os.makedirs(out, exist_ok=True)
    variants = []
    for stages, in_flight in ((3, 0), (4, 0), (3, 1), (4, 1)):
        name = f"wgmma_s{stages}_w{in_flight}"
        text = kernel(stages, in_flight)
        with open(os.path.join(out, f"{name}.mlir"), "w") as f:
            f.write(text)
        with mlir.context():
            module = mlir.parse(text, "wgmma probe")
            mlir.run_pipeline(module, lowering_pipeline("sm_90a"))
            ptx = b"".join(mlir.ptx_of_binaries(module).values())
        path = os.path.join(out, f"{name}.ptx")
        with open(path, "wb") as f:
            f.write(ptx)
        assemble(path, "sm_90a")
        variants.append({"ptx": os.path.basename(path), "stages": stages, "in_flight": in_flight, "shared_bytes": stages * 2 * TILE_BYTES})
        print(f"{name}: {len(ptx)} bytes of PTX, ptxas accepted it")
    with open(os.path.join(out, "variants.json"), "w") as f:
        json.dump(variants, f, indent=2)


def measure(out: str) -> None:
    import numpy as np
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as cuda
    import torch
    torch.manual_seed(0)
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16)
    reference = (a.float() @ b.float())
    c = torch.empty(SIZE, SIZE, device="cuda", dtype=torch.float32)
    peer = time_it(lambda: torch.matmul(a, b))
    print(f"cuBLAS f16 (torch.matmul): {peer:.1f} us")
    for variant in json.load(open(os.path.join(out, "variants.json"))):
        module = cuda.module_from_file(os.path.join(out, variant["ptx"]))
        fn = module.get_function("matmul")
        fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, variant["shared_bytes"])
        grid, block = (SIZE // 128, SIZE // 128, 1), (THREADS, 1, 1)

        args = [np.intp(a.data_ptr()), np.intp(b.data_ptr()), np.intp(c.data_ptr())]

        def launch():
            fn(*args, grid=grid, block=block, shared=variant["shared_bytes"])
        c.zero_()
        launch()
        torch.cuda.synchronize()
        err = (c - reference).abs().max().item()
        ok = torch.allclose(c, reference, atol=1e-1, rtol=1e-2)
        ours = time_it(launch)
        print(f"{variant['ptx']}: max abs error {err:.3g} ({'correct' if ok else 'WRONG'}), "
              f"{ours:.1f} us, {peer / ours:.3f}x of cuBLAS")


def time_it(fn, reps: int = 50) -> float:
    import torch
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


if __name__ == "__main__":
    {"compile": compile_variants, "measure": measure}[sys.argv[1]](sys.argv[2])
