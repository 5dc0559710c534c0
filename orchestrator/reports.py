"""What a finished job leaves for people: env_check.md, best_transform.mlir, best_pipeline.txt,
benchmark.md and final_report.md in the job folder; and per batch a table (pandas) and a plot of the
time per iteration of every model."""
from __future__ import annotations

import os

from orchestrator.records import IterationState, JobState
from orchestrator.tasks import REAL_MEASURE
from workers.atomic import write_text
from workers.records import TOLERANCES, CompileResult

NA = "n/a"
BATCH_FILES = ("summary.md", "summary.csv", "time_per_iteration.png")  # in the batch's output folder
# measure statuses that say nothing about the kernels: measuring the same kernels again may settle them
UNSETTLED_MEASUREMENTS = ("timeout", "error", "skipped")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def _us(it: IterationState | None) -> float | None:
    return it.measure.time.median_us if it and it.measure and it.measure.time else None


def _fmt(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    return NA if value is None else format(value, spec) + unit


def _model_name(job: JobState) -> str:
    return job.model.name if job.model else os.path.splitext(os.path.basename(job.model_path))[0]


def _tolerance_line(job: JobState) -> str:
    modes = sorted({it.params.precision for it in job.iterations}) or ["fp32"]
    return "; ".join(f"{m}: atol={TOLERANCES[m][0]:g}, rtol={TOLERANCES[m][1]:g}" for m in modes if m in TOLERANCES)


def best_iteration(iterations: list[IterationState]) -> IterationState | None:
    """The fastest correct measured iteration."""
    good = [it for it in iterations if it.measure and it.measure.correct and it.measure.time]
    return min(good, key=lambda it: it.measure.time.median_us, default=None)


def _evidence_lines(evidence: list) -> list[str]:
    """One markdown item per piece of evidence: the rule, the kernel, what it says and its metrics."""
    return [f"- `{e.rule}` on {e.kernel}: {e.text} ({', '.join(f'{k}={v:g}' for k, v in e.metrics.items())})"
            for e in evidence]


def same_kernels(earlier: list[IterationState], compiled: CompileResult) -> IterationState | None:
    """The earlier version that compiled to the same PTX and launches and was measured to a verdict
    (not one that a timeout or a lost GPU process cut short), if any."""
    return next((it for it in earlier if compiled.kernels_digest and it.compile is not None
                 and it.compile.kernels_digest == compiled.kernels_digest
                 and it.measure is not None and it.measure.status not in UNSETTLED_MEASUREMENTS), None)


def chosen_iteration(job: JobState, best: IterationState | None) -> tuple[IterationState | None, str]:
    """The iteration whose schedule becomes best_*: the fastest correct one; if nothing was measured
    (compile-only, or no GPU), the last one that compiled, said to be unverified."""
    if best is not None:
        return best, f"v{best.version}: fastest correct iteration ({_fmt(_us(best))} us)"
    measured = [it for it in job.iterations if it.measure and it.measure.status not in ("skipped",)]
    compiled = [it for it in job.iterations if it.compile and it.compile.ok]
    if compiled and not measured:
        it = compiled[-1]
        return it, f"v{it.version}: compiled but not measured, so its correctness is not verified"
    return None, "no iteration both compiled and passed the correctness check"


def write_job_artifacts(job: JobState, best: IterationState | None) -> None:
    os.makedirs(job.job_dir, exist_ok=True)
    chosen, why = chosen_iteration(job, best)
    vdir = os.path.join(job.job_dir, f"v{chosen.version}") if chosen else None
    for name in ("transform.mlir", "pass_pipeline.txt"):
        text = _read(os.path.join(vdir, name)) if vdir else None
        target = "best_transform.mlir" if name == "transform.mlir" else "best_pipeline.txt"
        write_text(os.path.join(job.job_dir, target), text if text is not None else f"// {NA}: {why}\n")
    bench = _read(os.path.join(vdir, "benchmark.md")) if vdir and best else None
    write_text(os.path.join(job.job_dir, "benchmark.md"),
               bench if bench is not None else f"# Benchmark\n\n{NA}: {why}. {job.stop_reason}\n")
    write_text(os.path.join(job.job_dir, "env_check.md"), env_check(job))
    write_text(os.path.join(job.job_dir, "final_report.md"), final_report(job, chosen, why))


def env_check(job: JobState) -> str:
    e = job.env
    lines = ["# Environment check", ""]
    if e is None:
        lines.append(f"{NA}: the frontend task never reported ({job.error or job.stop_reason})")
    else:
        lines += [f"Frontend/compile worker: {e.worker}", "",
                  "| tool | version |", "|---|---|",
                  f"| python | {e.python} |", f"| torch | {e.torch} |", f"| torch-mlir | {e.torch_mlir} |",
                  f"| MLIR bindings (NVPTX) | {e.mlir_bindings} |", f"| ptxas | {e.ptxas} |",
                  f"| GPU on that worker | {'; '.join(e.gpus) or 'none'} |"]
    devices = sorted({it.measure.device for it in job.iterations if it.measure} - {NA})
    lines += ["", f"Measured on: {', '.join(devices) or NA} (measure implementation: {job.measure_impl})", "",
              "## Time per stage", "", "| step | worker | seconds |", "|---|---|---|",
              f"| frontend (export {_fmt(job.model.export_seconds, '.2f') if job.model else NA} s) | "
              f"{job.frontend_worker or NA} | {job.frontend_seconds:.2f} |"]
    for it in job.iterations:
        seconds = it.compile.compile_seconds if it.compile else None
        lines.append(f"| compile v{it.version} | {it.compile_worker or NA} | {_fmt(seconds, '.2f')} |")
    return "\n".join(lines) + "\n"


def final_report(job: JobState, chosen: IterationState | None, why: str) -> str:
    name = _model_name(job)
    base = _us(job.iterations[0]) if job.iterations else None
    best_us = _us(chosen) if chosen and chosen.measure else None
    m = chosen.measure if chosen else None
    test_double = job.measure_impl not in (REAL_MEASURE, NA)
    lines = [
        f"# Final report: {name}", "",
        f"- job: `{job.job_id}` (batch {job.batch}), model `{job.model_path}`, chip {job.chip}",
        f"- status: **{job.status}**; stop reason: {job.stop_reason or NA}",
        f"- iterations: {len(job.iterations)} of at most {job.max_iterations}",
        f"- correctness tolerance (max |err| <= atol + rtol*|ref|): {_tolerance_line(job)}",
        f"- measured by: `{job.measure_impl}`" + (" (TEST DOUBLE: timings are synthetic)" if test_double else ""),
        f"- best: {why}",
        f"- speedup of the best over v0: {_fmt(base / best_us if base and best_us else None, '.2f', 'x')}; "
        f"over PyTorch eager: {_fmt(m.eager.median_us / best_us if m and m.eager and best_us else None, '.2f', 'x')}; "
        f"over torch.compile: {_fmt(m.compiled.median_us / best_us if m and m.compiled and best_us else None, '.2f', 'x')}",
    ]
    if job.error:
        lines.append(f"- error: {job.error}")
    if job.last_decision:
        d = job.last_decision
        lines.append(f"- advisor's last decision: {d.action} (bottleneck {d.bottleneck}, rules {d.rules_version})"
                     + (f": {d.stop_reason}" if d.stop_reason else ""))
        if d.action == "stop":  # a continue's evidence is its version's, below
            lines += ["  " + line for line in _evidence_lines(d.evidence)]
    lines += ["", "## Iterations", "",
              "| v | hypothesis | outcome | median us | speedup vs best before | compile s | measure status | workers |",
              "|---|---|---|---|---|---|---|---|"]
    for it in job.iterations:
        lines.append(
            f"| v{it.version} | {it.hypothesis_text.splitlines()[0]} | {it.outcome} | {_fmt(_us(it))} | "
            f"{_fmt(it.speedup_vs_best, '.2f')} | {_fmt(it.compile.compile_seconds if it.compile else None, '.2f')} | "
            f"{it.measure.status if it.measure else NA} | {it.compile_worker or NA} / {it.measure_worker or NA} |")
    for it in job.iterations:
        lines += ["", f"### v{it.version}", "", "Hypothesis:", "", "```", it.hypothesis_text.rstrip(), "```", ""]
        if it.evidence:
            lines.append("Evidence:")
            lines += _evidence_lines(it.evidence)
        else:
            lines.append(f"Evidence: {NA} (no advisor decision led to this version)")
        c = it.compile
        lines.append("")
        lines.append(f"Compile: {NA}" if c is None else
                     f"Compile: {'ok' if c.ok else 'FAILED at ' + c.stage} in {c.compile_seconds:.2f} s"
                     + (f", {c.kernel_count} kernels, {c.ptx_bytes} bytes of PTX" if c.ok else f": {c.error}"))
        ms = it.measure
        if ms is None:
            twin = same_kernels(job.iterations[:it.version], c) if c is not None and c.ok else None
            lines.append(f"Measure: not measured, the same kernels and launches as v{twin.version}" if twin
                         else f"Measure: {NA}")
        else:
            err = _fmt(ms.max_abs_err, ".3g")
            lines.append(f"Measure: {ms.status}, correct {ms.correct} (max abs err {err}), median {_fmt(_us(it))} us"
                         + (f": {ms.error}" if ms.error else ""))
        lines.append(f"Outcome: {it.outcome}; wall time of the iteration "
                     f"{_fmt(it.finished - it.started if it.finished else None, '.1f')} s"
                     + (f"; infrastructure error: {it.error}" if it.error else ""))
    return "\n".join(lines) + "\n"


# -- a batch --------------------------------------------------------------------------------------
def batch_table(jobs: list[JobState]):
    """One row per model of the batch (a pandas DataFrame)."""
    import pandas as pd

    rows = []
    for job in jobs:
        best = best_iteration(job.iterations)
        base = _us(job.iterations[0]) if job.iterations else None
        m = best.measure if best else None
        rows.append({
            "model": _model_name(job),
            "status": job.status, "iterations": len(job.iterations),
            "best": f"v{best.version}" if best else NA,
            "v0_us": base, "best_us": _us(best),
            "speedup_vs_v0": base / _us(best) if base and best else None,
            "eager_us": m.eager.median_us if m and m.eager else None,
            "torch_compile_us": m.compiled.median_us if m and m.compiled else None,
            "stop_reason": job.stop_reason or job.error,
        })
    return pd.DataFrame(rows)


def _shown(table):
    """The table as text cells: 2 decimals, n/a for what does not apply."""
    return table.map(lambda v: NA if v is None or v != v else f"{v:.2f}" if isinstance(v, float) else v)


def time_plot(jobs: list[JobState]):
    """The median time of every measured version of every job, a line per job (a matplotlib Figure)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on farm nodes
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 5))
    for job in jobs:
        points = [(it.version, _us(it)) for it in job.iterations if _us(it) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", label=_model_name(job))
    ax.set_xlabel("iteration (vN)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # versions are whole numbers
    ax.set_ylabel("median time (us)")
    ax.set_yscale("log")
    ax.set_title("Time per iteration")
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no measured iteration", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def plot_times(jobs: list[JobState], path: str) -> None:
    import matplotlib.pyplot as plt

    fig = time_plot(jobs)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_batch_report(jobs: list[JobState], folder: str) -> list[str]:
    """summary.md, summary.csv and time_per_iteration.png in the batch folder; returns their paths."""
    table = batch_table(jobs)
    paths = [os.path.join(folder, n) for n in BATCH_FILES]
    write_text(paths[1], table.to_csv(index=False))
    text = ["# Batch summary", "", f"{len(jobs)} models; final reports in each model's folder.", "",
            "```", _shown(table).to_string(index=False), "```", "",
            "![time per iteration](time_per_iteration.png)"]
    write_text(paths[0], "\n".join(text) + "\n")
    plot_times(jobs, paths[2])
    return paths
