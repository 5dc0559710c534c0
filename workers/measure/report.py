"""The measurement files of an iteration: benchmark.md, ncu_summary.md, ncu_details.md.

Each is always written; a step that did not run writes its file with the reason, and `n/a` stands
in fields that do not apply.
"""
from __future__ import annotations

import os

from workers.atomic import write_text
from workers.layout import version_dir
from workers.measure.ncu import METRICS
from workers.records import KernelMetrics, MeasureResult, Timing

FILES = ("benchmark.md", "ncu_summary.md", "ncu_details.md")


def _us(t: Timing | None) -> str:
    return f"{t.median_us:.2f} (p20 {t.p20_us:.2f}, p80 {t.p80_us:.2f}, {t.runs} runs)" if t else "n/a"


def _ratio(peer: Timing | None, ours: Timing | None) -> str:
    return f"{peer.median_us / ours.median_us:.3f}x" if peer and ours and ours.median_us > 0 else "n/a"


def _num(v) -> str:
    return "n/a" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))


def _err(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _write_reason(job_dir: str, version: int, names: tuple[str, ...], what: str, reason: str) -> None:
    for name in names:
        write_text(os.path.join(version_dir(job_dir, version), name),
                   f"# {name[:-3].replace('_', ' ')} v{version}\n\nn/a: {what}: {reason}\n")


def write_skipped(job_dir: str, version: int, reason: str) -> None:
    """All three files, each saying why the measurement did not happen."""
    _write_reason(job_dir, version, FILES, "not measured", reason)


def write_benchmark(job_dir: str, result: MeasureResult, compiled_error: str = "") -> None:
    tolerance = (f"atol={result.atol}, rtol={result.rtol} (pass iff |ours - ref| <= atol + rtol*|ref| + 2*E "
                 "everywhere, and finite; ref = the model in float64, E = PyTorch's own max error in the model's "
                 f"precision: {_err(result.library_abs_err)})") if result.atol is not None else "n/a"
    lines = [
        f"# Benchmark v{result.version}", "",
        f"- device: {result.device}",
        f"- status: **{result.status}**" + (f": {result.error}" if result.error else ""),
        f"- correctness: {'pass' if result.correct else 'FAIL' if result.max_abs_err is not None else 'n/a'}"
        f"{f' on {result.draws} input draws (worst shown)' if result.draws else ''}; tolerance {tolerance}",
        f"- max abs error: {_err(result.max_abs_err)}; max rel error: {_err(result.max_rel_err)} "
        "(against the model run in float64)",
        "- timing: median of CUDA-event runs after warm-up, L2 flushed (256 MB write) before each run"
        + (f"; ours launched as {result.launched_as}" if result.launched_as else ""), "",
        "| what | median us (p20, p80) | speedup of ours |", "|---|---|---|",
        f"| ours (kernels.ptx) | {_us(result.time)} | 1.000x |",
        f"| PyTorch eager | {_us(result.eager)} | {_ratio(result.eager, result.time)} |",
        f"| torch.compile | {_us(result.compiled)} | {_ratio(result.compiled, result.time)} |",
    ]
    if compiled_error:
        lines += ["", f"torch.compile could not be timed: {compiled_error}"]
    write_text(os.path.join(version_dir(job_dir, result.version), "benchmark.md"), "\n".join(lines) + "\n")


SUMMARY_COLUMNS = [("kernel", "kernel"), ("duration_us", "us"), ("runs", "runs"), ("sm_throughput_pct", "SM %"),
                   ("memory_throughput_pct", "mem %"), ("dram_throughput_pct", "DRAM %"),
                   ("achieved_occupancy_pct", "occ %"), ("theoretical_occupancy_pct", "theo occ %"),
                   ("registers_per_thread", "regs"), ("grid_size", "grid"), ("block_size", "block"),
                   ("waves_per_sm", "waves")]


def write_ncu(job_dir: str, version: int, kernels: list[KernelMetrics], raw_csv: str, dropped: list[str]) -> None:
    vdir = version_dir(job_dir, version)
    head = "| " + " | ".join(title for _, title in SUMMARY_COLUMNS) + " |"
    rows = ["| " + " | ".join(_num(getattr(k, f)) for f, _ in SUMMARY_COLUMNS) + " |" for k in kernels]
    total = sum(k.time_us() for k in kernels)
    write_text(os.path.join(vdir, "ncu_summary.md"), "\n".join([
        f"# NCU summary v{version}", "", f"{len(kernels)} kernel launch(es), {total:.2f} us in all "
        "(ncu --clock-control none; a launch in a host loop profiled once, counted for its runs)", "", head,
        "|" + "---|" * len(SUMMARY_COLUMNS), *rows]) + "\n")
    details = [f"# NCU details v{version}", ""]
    for k in kernels:
        details += [f"## {k.kernel}", "", "| metric | ncu name | value |", "|---|---|---|"]
        details += [f"| {f} | `{METRICS.get(f, 'derived')}` | {_num(v)} |" for f, v in k.to_dict().items() if f != "kernel"]
        details.append("")
    if dropped:
        details += [f"Not collected (this ncu does not know them): {', '.join(dropped)}", ""]
    details += ["## Raw CSV (ncu --csv --page raw)", "", "```", raw_csv, "```"]
    write_text(os.path.join(vdir, "ncu_details.md"), "\n".join(details) + "\n")


def write_ncu_skipped(job_dir: str, version: int, reason: str) -> None:
    _write_reason(job_dir, version, FILES[1:], "not profiled", reason)
