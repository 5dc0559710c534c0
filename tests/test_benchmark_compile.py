"""The CPU step of the GPU benchmarks: every perf target's v0 and every variant of every schedule sweep
compiles (the variants to kernels or launches other than v0's), so that a GPU call (minutes of a scarce
device budget) never carries a version that could only fail there or that measures v0 again (a variant
v0 has since adopted); and each rebuilds byte for byte from its folder alone (the record is the replay)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def compile_step(script: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "compile", str(out)],
                          capture_output=True, text=True, timeout=900)


def replays(out: Path) -> subprocess.CompletedProcess:
    """Every compiled version of every job under `out`, rebuilt from its folder (workers/compile/replay.py)."""
    jobs = [str(job) for job in sorted(out.iterdir()) if (job / "model_linalg.mlir").exists()]
    return subprocess.run([sys.executable, "-c", "import sys\nfrom workers.compile.replay import main\n"
                           "sys.exit(max(main([job]) for job in sys.argv[1:]))", *jobs],
                          capture_output=True, text=True, timeout=1800, cwd=REPO)


def test_every_perf_target_compiles_and_replays(tmp_path):
    done = compile_step("perf_targets.py", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert done.stdout.count(": v0 compiled") == len([d for d in tmp_path.iterdir() if d.is_dir()]) >= 11
    again = replays(tmp_path)
    assert again.returncode == 0 and again.stdout.count("rebuilt byte for byte") >= 11, again.stdout + again.stderr


def test_every_variant_of_every_sweep_compiles(tmp_path):
    done = compile_step("schedule_sweep.py", tmp_path)
    failed = [line for line in done.stdout.splitlines() if not line.endswith(": compiled")]
    assert done.returncode == 0 and not failed, failed or done.stderr[-2000:]
    assert done.stdout.count(": compiled") >= 50  # v0 and the variants of the 14 sweeps
    built = lambda v: (v / "kernels.ptx").read_text() + (v / "config.json").read_text()  # noqa: E731
    same = [str(v.relative_to(tmp_path)) for job in tmp_path.iterdir() for v in job.glob("v*")
            if v.name != "v0" and built(v) == built(job / "v0")]
    assert not same, f"variants that v0 already is: {same}"
    again = replays(tmp_path)  # every knob a sweep turns is in the record
    assert again.returncode == 0 and again.stdout.count("rebuilt byte for byte") >= 50, again.stdout[-3000:]


def test_measuring_a_folder_that_holds_no_sweeps_job_folder_says_so(tmp_path):
    """A GPU call measured nothing and printed an empty table: it was given a sweep's own job folder."""
    (tmp_path / "matmul4096_f32" / "v0").mkdir(parents=True)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "schedule_sweep.py"), "measure",
                           str(tmp_path / "matmul4096_f32")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "holds no sweep's job folder" in done.stderr, done.stderr


def test_a_profiled_sweep_row_gives_its_longest_kernels_limits():
    """`measure --profile` adds the Nsight Compute stalls and bank conflicts of a version's longest kernel to
    its row (here KernelMetrics as the measure worker returns them, without a GPU)."""
    sys.path.insert(0, str(REPO))
    from benchmarks.schedule_sweep import PROFILED, _profiled
    from workers.records import KernelMetrics

    def kernel(name: str, us: float, conflicts: int) -> KernelMetrics:
        return KernelMetrics(name, us, 50.0, 40.0, 30.0, 25.0, 25.0, 128, 0, 1024, 256, 2.0,
                             issue_slot_util_pct=60.0, stall_barrier=1.5, shared_bank_conflicts=conflicts)

    cells = _profiled([kernel("fill", 3.0, 0), kernel("matmul", 3000.0, 123456)]).strip(" |").split(" | ")
    assert dict(zip(PROFILED, cells)) == {"issue_slot_util_pct": "60", "stall_long_scoreboard": "-",
                                          "stall_barrier": "1.5", "stall_mio_throttle": "-",
                                          "stall_short_scoreboard": "-", "shared_bank_conflicts": "123456",
                                          "registers_per_thread": "128"}
    assert _profiled([]) == ""
