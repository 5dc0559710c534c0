"""What the CLI tells a user, and what it refuses before any job starts: options that cannot work, a
folder it cannot write, model names that collide with the batch's own files, a schedule that is not the
job's; a run with no GPU says that nothing was measured; artifacts follow the umask."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MODELS, run_cli

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def unwritable(tmp_path):
    """A folder nobody may write to, root included (an immutable folder where chattr works)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
    elif shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode:
        pytest.skip("running as root where the folder cannot be made immutable")
    yield folder
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)])


def test_options_that_cannot_work_are_refused_before_anything_starts(tmp_path, unwritable):
    model = str(MODELS / "matmul64.py")
    out = str(tmp_path / "out")
    schedule = {"ops": [{"op_index": 1, "family": "matmul", "block_tile": [8, "8"], "thread_tile": [4, 4],
                         "vectorize": 1}], "chip": "sm_90a"}
    (tmp_path / "typed.json").write_text(json.dumps(schedule))
    (tmp_path / "sm80.json").write_text(json.dumps({"ops": [], "chip": "sm_80"}))
    cases = [
        (["--compile-workers", "0"], "--compile-workers: must be at least 1"),
        (["--iterations", "0"], "--iterations: must be at least 1"),
        (["--lowering-timeout", "5000"], "--lowering-timeout must be"),
        (["--schedule", str(tmp_path / "typed.json")],
         "ops[0].block_tile[1]: expected int, not '8'; ScheduleParams.ops[0].vectorize: expected bool, not 1"),
        (["--schedule", str(tmp_path / "sm80.json")], "its chip is sm_80 but the job's is sm_90a"),
    ]
    for options, says in cases:
        done = run_cli("submit", model, "--compile-only", "--out", out, *options, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (options, done.stderr)
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "matmul64").exists()
    done = run_cli("submit", model, "--compile-only", "--out", str(unwritable / "runs"), timeout=60)
    assert done.returncode == 2 and "cannot write there" in done.stderr, done.stderr


@pytest.mark.slow
def test_no_gpu_says_nothing_was_measured_and_reserved_names_are_refused(tmp_path):
    """The embedded farm with no GPU (and no pycuda): the job is not judged, and submit says it measured
    nothing. Models named like the batch's summary or the embedded farm's folder are refused, by name."""
    models = tmp_path / "models"
    models.mkdir()
    for name in ("summary.md.py", ".farm.py"):
        shutil.copy(MODELS / "matmul64.py", models / name)
    out = tmp_path / "out"
    done = run_cli("submit", str(MODELS / "matmul64.py"), str(models / "summary.md.py"), str(models / ".farm.py"),
                   "--iterations", "2", "--out", str(out))
    assert done.returncode == 1, done.stderr
    assert "summary.md.py: OUT/summary.md is where the batch keeps its summary.md" in done.stderr
    assert ".farm.py: a model's name may not start with '.'" in done.stderr
    assert (out / "summary.md").is_file() and not (out / ".farm" / "matmul64.py").exists()
    assert re.search(r"v0 not measured on gpu0@\S+: ", done.stderr), done.stderr
    assert "1 job(s) measured nothing" in done.stderr and "outcome failure" not in done.stderr
    job = json.loads(run_cli("status", "matmul64", "--json", "--out", str(out)).stdout)
    assert job["iterations"][0]["outcome"] == "n/a" and job["stop_reason"].startswith("not measured: ")


def test_artifacts_follow_the_umask(tmp_path):
    """Reports written whole (a temp file renamed) are as readable as any file the user's umask allows."""
    code = ("import os, sys; from workers.atomic import write_text; os.umask(int(sys.argv[2], 8)); "
            "write_text(sys.argv[1], 'x')")
    for umask, mode in (("022", 0o644), ("027", 0o640)):
        path = tmp_path / f"report-{umask}.md"
        subprocess.run([sys.executable, "-c", code, str(path), umask], check=True, cwd=REPO)
        assert path.stat().st_mode & 0o777 == mode


def test_the_plot_counts_versions_in_whole_numbers():
    from orchestrator.records import IterationState, JobState
    from orchestrator.reports import time_plot
    from workers.records import MeasureResult, ScheduleParams, Timing

    job = JobState("b.m", "b", "/m.py", "/out/m", "sm_90a", 6, False, "done", created=0.0)
    for v, us in enumerate((30.0, 20.0, 25.0)):
        it = IterationState(v, "complete", ScheduleParams(ops=[]), "")
        it.measure = MeasureResult(v, "ok", correct=True, time=Timing(us, us, us, 50))
        job.iterations.append(it)
    ticks = time_plot([job]).axes[0].get_xticks()
    assert len(ticks) and all(float(t).is_integer() for t in ticks)


def test_the_readme_first_run_folder_is_ignored_by_git():
    readme = (REPO / "README.md").read_text()
    out = re.search(r"orchestrator submit [^\n]*--out (\S+)", readme).group(1)
    assert subprocess.run(["git", "check-ignore", "-q", f"{out}/x"], cwd=REPO).returncode == 0


def test_pycuda_download_commands_build_without_isolation():
    """pip runs pycuda's setup to read its metadata even to download the sdist, and that setup imports
    what an isolated build environment lacks."""
    texts = [(REPO / "deploy" / "README.md").read_text(), (REPO / "deploy" / "offline_bundle.sh").read_text()]
    commands = [line for text in texts for line in text.splitlines() if "pip download" in line and "pycuda" in line]
    assert commands and all("--no-build-isolation" in c for c in commands), commands
