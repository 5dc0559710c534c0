"""The CPU step of the GPU benchmarks: every perf target's v0 and every variant of every schedule sweep
compiles (the variants to kernels or launches other than v0's), so that a GPU call (minutes of a scarce
device budget) never carries a version that could only fail there or that measures v0 again (a variant
v0 has since adopted)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def compile_step(script: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "compile", str(out)],
                          capture_output=True, text=True, timeout=900)


def test_every_perf_target_compiles(tmp_path):
    done = compile_step("perf_targets.py", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert done.stdout.count(": v0 compiled") == len([d for d in tmp_path.iterdir() if d.is_dir()]) >= 11


def test_every_variant_of_every_sweep_compiles(tmp_path):
    done = compile_step("schedule_sweep.py", tmp_path)
    failed = [line for line in done.stdout.splitlines() if not line.endswith(": compiled")]
    assert done.returncode == 0 and not failed, failed or done.stderr[-2000:]
    assert done.stdout.count(": compiled") >= 50  # v0 and the variants of the 14 sweeps
    built = lambda v: (v / "kernels.ptx").read_text() + (v / "config.json").read_text()  # noqa: E731
    same = [str(v.relative_to(tmp_path)) for job in tmp_path.iterdir() for v in job.glob("v*")
            if v.name != "v0" and built(v) == built(job / "v0")]
    assert not same, f"variants that v0 already is: {same}"
