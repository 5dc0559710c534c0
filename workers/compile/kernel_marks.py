"""The attributes transform.mlir sets on each kernel's gpu.launch (transform.annotate), which
farm-outline-kernels carries onto the kernel's gpu.func: the schedule's per-kernel choices, read by the
passes after outlining and by the compile result, instead of any list kept beside the IR."""
ANCHOR = "farm.anchor"  # i64: the op whose schedule the kernel is (CompileResult.kernel_ops)
FAMILY = "farm.family"  # string: its op family (CompileResult.kernel_families)
WARP_MERGE = "farm.warp_merge"  # unit: farm-merge-in-a-warp takes the kernel's block reductions
INTERLEAVE_COLUMNS = "farm.interleave_columns"  # unit: farm-interleave-thread-columns takes its accesses
MIN_BLOCKS_PER_SM = "nvvm.minctasm"  # i32, upstream's: ptxas fits that many blocks on an SM (.minnctapersm)
KERNEL = "farm.kernel"  # i64 on each kernel's block forall, until it is mapped: its position in launch order
