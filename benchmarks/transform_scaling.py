"""How the Transform interpreter's time grows with the size of the function it fuses in.

A model of thousands of kernels compiles for minutes (VanillaRNNHidden: 631 of its 660 s in
`transform @__transform_main`), and a stack sampled there sits in `fuse_into_containing_op`, printing ops
into the diagnostic it builds before every fusion. This measures that cost alone on a synthetic payload:
K independent kernels (an elementwise producer fused into its tiled consumer), either all in one function
(as a model's ops are) or one function each, with the same transform script. The ratio is the time one
function costs over the time K functions take, in the same run.

    .venv/bin/python benchmarks/transform_scaling.py [--kernels 100 200 400 800] [--record FILE]
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workers.compile import mlir  # noqa: E402

TILE = "tensor<64x64xf32>"


def _kernel(i: int) -> str:
    """Kernel i: %p<i> = x + i, %q<i> = %p<i> * %p<i>, each op marked for the script's match."""
    return f"""
    %e{i} = tensor.empty() : {TILE}
    %p{i} = linalg.generic {{indexing_maps = [#m, #m], iterator_types = ["parallel", "parallel"]}}
        ins(%x : {TILE}) outs(%e{i} : {TILE}) attrs = {{producer{i}}} {{
    ^bb0(%a: f32, %b: f32):
      %c = arith.constant {i}.0 : f32
      %r = arith.addf %a, %c : f32
      linalg.yield %r : f32
    }} -> {TILE}
    %q{i} = linalg.generic {{indexing_maps = [#m, #m], iterator_types = ["parallel", "parallel"]}}
        ins(%p{i} : {TILE}) outs(%e{i} : {TILE}) attrs = {{consumer{i}}} {{
    ^bb0(%a: f32, %b: f32):
      %r = arith.mulf %a, %a : f32
      linalg.yield %r : f32
    }} -> {TILE}"""


def payload(kernels: int, one_function: bool) -> str:
    header = "#m = affine_map<(d0, d1) -> (d0, d1)>\nmodule {\n"
    if one_function:
        results = ", ".join(f"%q{i}" for i in range(kernels))
        types = ", ".join([TILE] * kernels)
        body = "".join(_kernel(i) for i in range(kernels))
        return header + f"  func.func @main(%x: {TILE}) -> ({types}) {{{body}\n    return {results} : {types}\n  }}\n}}"
    functions = [f"  func.func @k{i}(%x: {TILE}) -> {TILE} {{{_kernel(i)}\n    return %q{i} : {TILE}\n  }}"
                 for i in range(kernels)]
    return header + "\n".join(functions) + "\n}"


def script(kernels: int) -> str:
    """Per kernel: match its two ops, tile the consumer to a forall of 16x16 tiles, fuse the producer in."""
    steps = "".join(f"""
    %c{i} = transform.structured.match attributes{{consumer{i}}} in %root : (!transform.any_op) -> !transform.any_op
    %p{i} = transform.structured.match attributes{{producer{i}}} in %root : (!transform.any_op) -> !transform.any_op
    %t{i}, %l{i} = transform.structured.tile_using_forall %c{i} tile_sizes [16, 16]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %f{i}, %n{i} = transform.structured.fuse_into_containing_op %p{i} into %l{i}
        : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)""" for i in range(kernels))
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{{steps}
    transform.yield
  }}
}}"""


def transform_seconds(kernels: int, one_function: bool) -> float:
    with mlir.context():
        module = mlir.parse(payload(kernels, one_function), "payload")
        schedule = mlir.parse(script(kernels), "transform")
        start = time.monotonic()
        mlir.apply_transform(module, schedule, "__transform_main")
        return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, nargs="+", default=[100, 200, 400, 800])
    parser.add_argument("--record", help="append the table, dated, with commit and command, to FILE")
    args = parser.parse_args(argv)
    rows = ["| kernels | one function s | a function each s | one / each |", "|---|---|---|---|"]
    for kernels in args.kernels:
        one, each = transform_seconds(kernels, True), transform_seconds(kernels, False)
        rows.append(f"| {kernels} | {one:.2f} | {each:.2f} | {one / each:.1f}x |")
        print(rows[-1], flush=True)
    if args.record:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.record, "a") as f:
            f.write(f"\n## {stamp}\n\nDevice: CPU machine. Commit: {commit}. Command: "
                    f"`{' '.join([Path(sys.executable).name, *sys.argv])}`.\n\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
