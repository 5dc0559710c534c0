"""The advisor against random choice of the next hypothesis, on the same budget of measured
iterations, on a GPU node: both start from the same v0 and may try the same hypothesis families
(any family whose edit applies to any kernel's schedule); the random policy picks one uniformly
(fixed seed), the advisor picks from the NCU metrics. Prints, per model, the best time each reached
and the ratio of best times random/advisor (above 1: the advisor's best is faster).

    python3 benchmarks/advisor_vs_random.py JOB_DIR... [--iterations 4] [--seed 0]

Each JOB_DIR holds a lowered model (model.py, model_linalg.mlir, model_info.json: the frontend's
output); the policies work in JOB_DIR/advisor and JOB_DIR/random.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rules import advise, classify_outcome  # noqa: E402
from rules.guide import load  # noqa: E402
from rules.records import AdviceRequest, Hypothesis, IterationRecord  # noqa: E402
from rules.routing import GENERATORS  # noqa: E402
from workers.compile import apply_edit, compile_iteration, initial_params  # noqa: E402
from workers.layout import LINALG_FILE, MODEL_FILE, MODEL_INFO_FILE  # noqa: E402
from workers.measure import measure_iteration  # noqa: E402
from workers.records import ModelInfo  # noqa: E402


def random_hypothesis(request: AdviceRequest, rng: random.Random) -> Hypothesis | None:
    guide = load()
    tried = {(h.family, h.edit.to_json()) for h in request.rejected}
    options = []
    for s in request.current.ops:
        op = request.model.ops[s.op_index]
        has_reduction = s.family in ("matmul", "conv", "reduction", "pooling") or "reduction" in op.iterator_types
        for name, family in sorted(guide.families.items()):
            edit = GENERATORS[family.generator](s, op, has_reduction) if family.available else None
            if edit is not None and (name, edit.to_json()) not in tried:
                options.append(Hypothesis(name, edit, family.expected, guide.accept_rule))
    return rng.choice(options) if options else None


def run_policy(job: str, policy: str, iterations: int, rng: random.Random) -> list[IterationRecord]:
    with open(os.path.join(job, MODEL_INFO_FILE)) as f:
        model = ModelInfo.from_json(f.read())
    history: list[IterationRecord] = []
    rejected: list[Hypothesis] = []
    params, hypothesis = initial_params(job), None
    for version in range(iterations):
        compiled = compile_iteration(job, version, params)
        measured = measure_iteration(job, version, profile=(policy == "advisor"))
        best = min((h for h in history if h.measure.correct and h.measure.time), default=None,
                   key=lambda h: h.measure.time.median_us)
        outcome, speedup = classify_outcome(best.measure if best else None, measured)
        history.append(IterationRecord(version, params, compiled, measured, hypothesis, outcome, speedup))
        if hypothesis and outcome != "success":
            rejected.append(hypothesis)
        print(f"  {policy:8} v{version}: {measured.status:>6} "
              f"{measured.time.median_us if measured.time else float('nan'):9.1f} us  {outcome:8}  "
              f"{hypothesis.family + ' ' + hypothesis.edit.field + '=' + str(hypothesis.edit.value) if hypothesis else 'v0'}",
              flush=True)
        best = min((h for h in history if h.measure.correct and h.measure.time), default=history[0],
                   key=lambda h: h.measure.time.median_us)
        request = AdviceRequest(model=model, current=best.params, history=history, max_iterations=iterations,
                                rejected=rejected)
        if policy == "advisor":
            decision = advise(request)
            hypothesis = decision.hypothesis
        else:
            hypothesis = random_hypothesis(request, rng)
        if hypothesis is None or version + 1 == iterations:
            break
        params = apply_edit(best.params, hypothesis.edit)
    return history


def best_us(history: list[IterationRecord]) -> float:
    return min((h.measure.time.median_us for h in history if h.measure.correct and h.measure.time), default=float("inf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("jobs", nargs="+")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = []
    for job in args.jobs:
        name = os.path.basename(os.path.normpath(job))
        print(name, flush=True)
        results = {}
        for policy in ("advisor", "random"):
            work = os.path.join(job, policy)
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            for f in (MODEL_FILE, LINALG_FILE, MODEL_INFO_FILE):
                shutil.copy(os.path.join(job, f), work)
            results[policy] = best_us(run_policy(work, policy, args.iterations, random.Random(args.seed)))
        rows.append((name, results["advisor"], results["random"]))
    print(f"\n{'model':16} {'advisor best us':>16} {'random best us':>15} {'random/advisor':>15}")
    for name, adv, rnd in rows:
        print(f"{name:16} {adv:16.1f} {rnd:15.1f} {rnd / adv:15.3f}")


if __name__ == "__main__":
    main()
