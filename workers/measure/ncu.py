"""Nsight Compute: profile one iteration's kernels in a separate process group and parse its CSV.

`ncu --clock-control none --csv --page raw` re-runs the iteration's launches once each (gpu_run --once: a
host loop's at its first index only, not a recurrent layer's thousands of launches per forward, each
profiled over many replays), limited to the iteration's own kernels; the CSV becomes one KernelMetrics per
launch of config.json, in launch order (the order CompileResult.kernel_ops gives their ops in).
"""
from __future__ import annotations

import io
import os
import re
import shutil
import time
from dataclasses import dataclass

import pandas as pd

from workers.measure import gpu_run
from workers.process import run_in_group
from workers.records import KernelMetrics

# KernelMetrics field -> the raw ncu metric it reads (DESIGN.md's list)
METRICS = {
    "duration_us": "gpu__time_duration.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers_per_thread": "launch__registers_per_thread",
    "spill_bytes": "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    "grid_size": "launch__grid_size",
    "block_size": "launch__block_size",
    "waves_per_sm": "launch__waves_per_multiprocessor",
    "issue_slot_util_pct": "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "tensor_pipe_util_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "stall_long_scoreboard": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "stall_short_scoreboard": "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "stall_barrier": "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "stall_mio_throttle": "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "stall_no_instruction": "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
    "l1_hit_rate_pct": "l1tex__t_sector_hit_rate.pct",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
    "shared_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
}
# sectors per request is a ratio of two counters
SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
REQUIRED = ("duration_us", "sm_throughput_pct", "memory_throughput_pct")
INT_FIELDS = ("registers_per_thread", "spill_bytes", "grid_size", "block_size", "shared_bank_conflicts")
ZERO_IF_MISSING = ("dram_throughput_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct", "registers_per_thread",
                   "spill_bytes", "grid_size", "block_size", "waves_per_sm")


class NcuError(Exception):
    """ncu did not produce metrics for the iteration."""


@dataclass
class Profile:
    kernels: list[KernelMetrics]
    csv: str  # the raw CSV, kept for ncu_details.md
    dropped_metrics: list[str]  # metrics this ncu does not know


def ncu_path() -> str | None:
    return shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if os.path.exists(p)), None)


def _unit_scale(unit: str) -> float:
    """To microseconds for durations, to bytes for sizes."""
    return {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
            "second": 1e6, "byte": 1.0, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9,
            "GB": 1e9}.get(unit, 1.0)


def parse_csv(text: str) -> list[KernelMetrics]:
    """KernelMetrics per profiled launch from `ncu --csv --page raw` output (its ==PROF== lines and
    the program's own output are skipped; the second CSV row holds the units)."""
    rows = [line for line in text.splitlines() if line.startswith('"')]
    if len(rows) < 3:
        raise NcuError("ncu printed no profiled kernel")
    table = pd.read_csv(io.StringIO("\n".join(rows)), dtype=str, keep_default_na=False)
    units, table = table.iloc[0], table.iloc[1:]

    def number(row, metric: str) -> float | None:
        raw = str(row.get(metric, "")).replace(",", "").strip()
        try:
            return float(raw) * _unit_scale(units.get(metric, ""))
        except ValueError:
            return None

    kernels = []
    for _, row in table.iterrows():
        values = {fld: number(row, metric) for fld, metric in METRICS.items()}
        missing = [f for f in REQUIRED if values[f] is None]
        if missing:
            raise NcuError(f"ncu gave no {', '.join(missing)} for {row.get('Kernel Name')}")
        for fld in ZERO_IF_MISSING:  # fields the record requires; 0 where this ncu did not report
            values[fld] = values[fld] or 0
        for fld in INT_FIELDS:
            values[fld] = int(values[fld]) if values[fld] is not None else None
        sectors, requests = number(row, SECTORS), number(row, REQUESTS)
        values["sectors_per_request"] = round(sectors / requests, 3) if sectors and requests else None
        kernels.append(KernelMetrics(kernel=str(row.get("Kernel Name", "?")), **values))
    return kernels


def _unknown_metrics(output: str) -> list[str]:
    return re.findall(r"[Ff]ailed to find metric ([\w.]+)", output) + \
        re.findall(r"[Mm]etric ([\w.]+) (?:not found|is not supported)", output)


def profile(job_dir: str, version: int, kernels: list[str], timeout_s: float) -> Profile:
    """Metrics of one run of each launch; `kernels`: the kernel of each launch of config.json."""
    ncu = ncu_path()
    if ncu is None:
        raise NcuError("ncu (Nsight Compute) is not installed on this node")
    metrics = [*METRICS.values(), SECTORS, REQUESTS]
    dropped: list[str] = []
    names = "|".join(re.escape(k) for k in dict.fromkeys(kernels))
    deadline = time.monotonic() + timeout_s
    for _ in range(3):  # an ncu that lacks a metric names it; profile again without it
        result_path = os.path.join(job_dir, f"v{version}", ".ncu_run.json")
        # --launch-count: no more profiles than launches, however many times the run launches them
        cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--metrics", ",".join(metrics),
               "--kernel-name", f"regex:^({names})$", "--launch-count", str(len(kernels)),
               *gpu_run.COMMAND, job_dir, str(version), result_path, "--once"]
        _, output = run_in_group(cmd, max(1.0, deadline - time.monotonic()))
        unknown = [m for m in _unknown_metrics(output) if m in metrics]
        if not unknown:
            try:
                kernels = parse_csv(output)
            except NcuError as e:  # ncu's own ==ERROR== lines (e.g. no access to the counters) say why
                raise NcuError(f"{e}; ncu said: {output.strip()[-800:]}") from None
            return Profile(kernels=kernels, csv="\n".join(l for l in output.splitlines() if l.startswith('"')),
                           dropped_metrics=dropped)
        dropped += unknown
        metrics = [m for m in metrics if m not in unknown]
    raise NcuError(f"ncu keeps refusing metrics: {dropped}")
