"""`orchestrator experience ...`: query and export the experience log."""
from __future__ import annotations

import argparse
import sys

from experience.records import CaseFingerprint
from experience.store import ExperienceStore


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="orchestrator experience",
                                     description="Query the experience log the advisor learns from.")
    parser.add_argument("--log", help="experience log (default $MLIR_FARM_EXPERIENCE or ~/.mlir-farm/experience.jsonl)")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("recommend", help="rank what worked for a similar case")
    rec.add_argument("--family", required=True, help="op family, e.g. matmul, reduction, elementwise")
    rec.add_argument("--shape", required=True, help="loop ranges, e.g. 1024x1024x1024")
    rec.add_argument("--dtype", default="f32")
    rec.add_argument("--chip", default="sm_90a")
    rec.add_argument("--bottleneck", required=True, help="memory, compute, latency, occupancy, near_limits")
    rec.add_argument("--top", type=int, default=5)
    exp = sub.add_parser("export", help="the whole log as a table")
    exp.add_argument("--format", choices=("markdown", "csv"), default="markdown")
    args = parser.parse_args(argv)
    store = ExperienceStore(args.log)
    if args.command == "recommend":
        try:
            shape = [int(x) for x in args.shape.lower().split("x")]
        except ValueError:
            parser.error(f"--shape {args.shape!r}: expected sizes joined by x, e.g. 256x512")
        found = store.recommend(CaseFingerprint(args.family, shape, args.dtype, args.chip), args.bottleneck, args.top)
        if not found:
            print(f"no past success for a similar {args.family} case that was {args.bottleneck}-bound in {store.path}")
        for r in found:
            print(f"{r.family:<20} score {r.score:8.3f}  {r.successes}/{r.trials} succeeded")
        return 0
    frame = store.to_dataframe()
    if args.format == "csv":
        sys.stdout.write(frame.to_csv(index=False))
    else:
        rows = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
        rows += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
        print("\n".join(rows))
    return 0
