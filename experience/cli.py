"""`orchestrator experience ...`: query and export the experience log.

`recommend` and `export` return the text they would print, so other front ends can call them;
`main` is the argument parser the orchestrator CLI hands its remaining arguments to.
"""
from __future__ import annotations

import argparse
import sys

from experience.records import CaseFingerprint
from experience.store import ExperienceStore


def recommend(store: ExperienceStore, op_family: str, loop_ranges: list[int], bottleneck: str,
              dtype: str = "f32", chip: str = "sm_90a", top: int = 5) -> str:
    """What worked for similar cases (same op family, dtype and normalised bottleneck; close shapes),
    best first, one line each; a sentence when nothing matched."""
    found = store.recommend(CaseFingerprint(op_family, loop_ranges, dtype, chip), bottleneck, top)
    if not found:
        return f"no past success for a similar {op_family} case that was {bottleneck}-bound in {store.path}\n"
    return "".join(f"{r.family:<20} score {r.score:8.3f}  {r.successes}/{r.trials} succeeded\n" for r in found)


def export(store: ExperienceStore, fmt: str = "markdown") -> str:
    """The whole log as a table (pandas): "csv" or a "markdown" pipe table."""
    frame = store.to_dataframe()
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt != "markdown":
        raise ValueError(f"unknown format {fmt!r}: csv or markdown")
    rows = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    rows += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(rows) + "\n"


def main(argv: list[str], default_log: str) -> int:
    """default_log: the log `orchestrator submit` writes (its OUT/experience.jsonl, or $MLIR_FARM_EXPERIENCE)."""
    parser = argparse.ArgumentParser(prog="orchestrator experience",
                                     description="Query the experience log the advisor learns from.")
    parser.add_argument("--log", default=default_log,
                        help=f"experience log (default {default_log}: the one the latest submit wrote)")
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
        sys.stdout.write(recommend(store, args.family, shape, args.bottleneck, args.dtype, args.chip, args.top))
    else:
        sys.stdout.write(export(store, args.format))
    return 0
