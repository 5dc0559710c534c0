"""The KernelBench harness: does v0 compile for every problem, is it correct, and is it fast?

    .venv/bin/python benchmarks/kernelbench.py compile [--level 1 2 3 | PROBLEM.py...] [--out kb-out]
    .venv/bin/python benchmarks/kernelbench.py pack [--out kb-out]         # what a GPU node needs, as one archive
    python3 benchmarks/kernelbench.py measure [--out kb-out] [--record FILE]      # on a GPU node
    python3 benchmarks/kernelbench.py loop --iterations 4 [--out kb-out]         # on a GPU node, after measure
    .venv/bin/python benchmarks/kernelbench.py table [--out kb-out]               # what is recorded so far

`compile` (CPU machine): each problem is lowered (the frontend's own time and memory limits) and its v0
compiled to PTX that ptxas accepts, in a child process of its own with a time limit, two at a time.
Resumable: a problem whose row is recorded (OUT/levelN/<problem>.compile.json) is not redone unless
--again. Each row says the stage that failed and MLIR's or torch-mlir's first error line.

`measure` (GPU node, no torch-mlir needed): every compiled v0 through the measure worker (correctness
on several input draws, timing beside eager and torch.compile with one protocol); torch.compile's
compilations run in parallel processes first, their times cached per problem and GPU
(reference_timing.json), so the sequential timing measures dozens of problems in one device call. Each
row keeps the compile's digest of the kernels it timed: after a change to the compile stage, `pack
--changed` and `measure --changed` take just the problems whose kernels it changed.

`loop` (GPU node, after `measure`): the whole optimization loop (`orchestrator submit`, an embedded farm:
compile workers, a measure worker per GPU, the rule engine) on each compiled problem, up to --iterations
versions, from its job folder's lowering (the node has no torch-mlir; the frontend reuses the lowering,
the measure worker the cached peer times). OUT/loop/levelN/<problem>/ are the loop's job folders; a row
per problem (OUT/levelN/<problem>.loop.json) times its best correct version.

The tables count a problem that did not compile, or was wrong, as not fast. fast_p: correct and faster
than the peer by more than a factor p (KernelBench's metric; its README gives torch.compile's figures).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workers.jsonrecord import JsonRecord  # noqa: E402
from workers.layout import LINALG_FILE, MODEL_INFO_FILE, REFERENCE_FILE  # noqa: E402

SUITE = REPO.parent / "shared" / "kernelbench"
LEVELS = (1, 2, 3)
COMPILE_LIMIT_S = 1200  # one problem's lowering (its own limit, 900 s) and v0 compile together
COMPILE_MEMORY_GB = 10  # resident memory of a compile child (its lowering's own limit counts apart)


@dataclass
class CompileRow(JsonRecord):
    problem: str  # file stem, e.g. "19_ReLU"
    level: int
    ok: bool
    stage: str  # "done", or where it failed: frontend, schedule, transform, host-check, lowering, ptxas, crash
    error: str = ""  # the first line that says what went wrong
    reason: str = ""  # the whole message (one paragraph)
    lower_s: float = 0.0
    compile_s: float = 0.0
    kernels: int = 0


@dataclass
class MeasureRow(JsonRecord):
    problem: str
    level: int
    status: str  # the measure worker's: ok, wrong_result, launch_error, ..., or "not compiled"
    correct: bool = False
    ours_us: float = 0.0
    eager_us: float = 0.0
    compiled_us: float = 0.0  # torch.compile; 0 where it failed
    max_abs_err: float = 0.0
    device: str = ""
    error: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # the GPU child's steps (load, check, ...)
    version: int = 0  # the version timed: v0 (`measure`), the loop's best correct one (`loop`)
    kernels_digest: str = ""  # the compile's digest of the kernels timed (rows from before 2026-12-07 have none)
    kernel_us: dict[str, float] = field(default_factory=dict)  # MeasureResult.kernel_us (rows from 2026-12-07 on)
    launched_as: str = ""  # MeasureResult.launched_as: one CUDA graph per forward (rows measured at 291a014 on)


def problems(levels: list[int], files: list[str]) -> list[tuple[int, Path]]:
    """(level, file) of each problem asked for: the named files, else every file of the levels."""
    if files:
        return [(_level_of(Path(f)), Path(f).resolve()) for f in files]
    return [(level, path) for level in levels
            for path in sorted((SUITE / f"level{level}").glob("*.py"), key=lambda p: _number(p.stem))]


def recorded(out: Path, levels: list[int], files: list[str]) -> list[tuple[int, Path]]:
    """(level, problem) of each problem with a compile row in `out` (of the levels, or of the named files):
    a GPU node measures the job folders it was given, without the suite. Named files keep the order they are
    named in (a device call's budget cuts the last ones), the levels their problems' suite order."""
    names = {Path(f).stem: i for i, f in enumerate(files)}
    found = [(level, Path(path.name[:-len(".compile.json")])) for level in levels
             for path in sorted((out / f"level{level}").glob("*.compile.json"), key=lambda p: _number(p.name))
             if not names or path.name[:-len(".compile.json")] in names]
    return sorted(found, key=lambda item: names[item[1].name]) if names else found


def _level_of(path: Path) -> int:
    return int(path.parent.name[5:]) if path.parent.name.startswith("level") else 0


def _number(stem: str) -> tuple[int, str]:
    head = stem.split("_", 1)[0]
    return (int(head), stem) if head.isdigit() else (10**6, stem)


def job_dir(out: Path, level: int, problem: Path) -> Path:
    return out / f"level{level}" / problem.stem


def row_path(out: Path, level: int, problem: Path, kind: str) -> Path:
    return out / f"level{level}" / f"{problem.stem}.{kind}.json"


def first_error_line(message: str) -> str:
    """The line of a (possibly multi-line MLIR) message that names the error."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    named = [line for line in lines if "error:" in line]
    return (named or lines or [""])[0][:300]


# -- compile (CPU) ---------------------------------------------------------------------------------

def lowered(job: Path) -> bool:
    """Whether the job folder holds a finished lowering (the frontend writes model_info.json last)."""
    return (job / LINALG_FILE).exists() and (job / MODEL_INFO_FILE).exists()


def v0_stale(out: Path, level: int, problem: Path) -> bool:
    """Whether today's v0 schedule of a lowered problem differs from the params its recorded v0 compiled (no v0,
    or no lowering, counts as stale): after a change to the v0 rules, the problems a recompile must redo, found
    in seconds without compiling."""
    from workers.compile import initial_params
    from workers.compile.schedule import ScheduleError
    from workers.records import ScheduleParams

    job = job_dir(out, level, problem)
    recorded_params = job / "v0" / "params.json"
    if not lowered(job) or not recorded_params.exists():
        return True
    try:
        today = initial_params(str(job))
    except ScheduleError:
        return True
    return today.to_json() != ScheduleParams.from_json(recorded_params.read_text()).to_json()


def compile_problem(level: int, problem: Path, job: Path) -> CompileRow:
    """Lower (unless the job folder holds its lowering) and compile v0 of one problem, in this process (the
    child of compile_in_child)."""
    from workers.compile import compile_iteration, initial_params
    from workers.compile.schedule import ScheduleError
    from workers.frontend import FrontendError, lower_model_bounded

    row = CompileRow(problem.stem, level, ok=False, stage="frontend")
    started = time.perf_counter()
    if not lowered(job):
        try:
            lower_model_bounded(str(problem), str(job))
        except FrontendError as e:
            row.reason = str(e)
            row.error = first_error_line(row.reason)
            return row
        row.lower_s = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    try:
        params = initial_params(str(job))
    except ScheduleError as e:
        row.stage, row.reason = "schedule", f"v0: {e}"
        row.error = first_error_line(row.reason)
        return row
    result = compile_iteration(str(job), 0, params)
    row.compile_s = round(time.perf_counter() - started, 1)
    row.ok, row.stage, row.kernels = result.ok, result.stage, result.kernel_count
    row.reason = result.error or ""
    row.error = first_error_line(row.reason)
    return row


def compile_in_child(level: int, problem: Path, out: Path, limit_s: float, keep_lowering: bool = False) -> CompileRow:
    """compile_problem in a child process held to `limit_s` and COMPILE_MEMORY_GB; its row, recorded.
    `keep_lowering`: a job folder's finished lowering is kept, v0 alone compiled anew."""
    from workers.process import MemoryLimitExceeded, run_in_group

    job = job_dir(out, level, problem)
    # a fresh v0 (compile_iteration keeps a recorded one), on a fresh lowering unless it is kept
    shutil.rmtree(job / "v0" if keep_lowering and lowered(job) else job, ignore_errors=True)
    job.parent.mkdir(parents=True, exist_ok=True)
    path = row_path(out, level, problem, "compile")
    cmd = [sys.executable, __file__, "_compile_one", str(level), str(problem), str(job), str(path)]
    started = time.perf_counter()
    try:
        code, output = run_in_group(cmd, limit_s, COMPILE_MEMORY_GB << 30)
    except (TimeoutError, MemoryLimitExceeded) as e:
        code, output = -9, str(e)
    if code != 0 or not path.exists():
        lines = [line for line in output.strip().splitlines() if line.strip()]
        cause = (lines or ["no output"])[-1][:300]
        row = CompileRow(problem.stem, level, ok=False, stage="crash", error=cause,
                         reason=f"the compile child ended with status {code}: {cause}",
                         compile_s=round(time.perf_counter() - started, 1))
        path.write_text(row.to_json(indent=2))
    return CompileRow.from_json(path.read_text())


def compile_all(items: list[tuple[int, Path]], out: Path, again: bool, failed: bool, jobs: int,
                limit_s: float, keep_lowering: bool = False) -> list[CompileRow]:
    def redo(level: int, p: Path) -> bool:
        path = row_path(out, level, p, "compile")
        return again or not path.exists() or failed and not CompileRow.from_json(path.read_text()).ok

    todo = [(level, p) for level, p in items if redo(level, p)]
    done = len(items) - len(todo)
    if done:
        print(f"{done} of {len(items)} problems have a row in {out} (--again redoes them, --failed the failed ones)",
              file=sys.stderr)

    def one(item: tuple[int, Path]) -> CompileRow:
        level, problem = item
        row = compile_in_child(level, problem, out, limit_s, keep_lowering)
        verdict = "compiled" if row.ok else f"FAILED at {row.stage}: {row.error}"
        print(f"level{level}/{problem.stem}: {verdict} ({row.lower_s + row.compile_s:.0f} s)", file=sys.stderr,
              flush=True)
        return row

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, todo))
    return [CompileRow.from_json(row_path(out, level, p, "compile").read_text()) for level, p in items]


# -- measure (GPU node) -----------------------------------------------------------------------------

# a warm-up's GPU memory over its inputs' and outputs' (zeros in, the compiled model's buffers): a guess that
# lets 3 elementwise problems of 6 GB in and out warm at once on 80 GB; one that runs out is measured anyway
WARM_MEMORY_FACTOR = 1.5


def warm_up_bytes(job: Path) -> int:
    """About what one problem's torch.compile warm-up holds on the GPU, from its model_info.json (outputs
    counted as 4 bytes an element)."""
    import torch

    from workers.records import ModelInfo

    info = ModelInfo.from_json((job / MODEL_INFO_FILE).read_text())
    inputs = sum(math.prod(s) * getattr(torch, d).itemsize for s, d in zip(info.input_shapes, info.input_dtypes))
    return int(WARM_MEMORY_FACTOR * (inputs + sum(math.prod(s) * 4 for s in info.output_shapes)))


def gpu_memory_bytes() -> int | None:
    """The first GPU's memory (nvidia-smi), None where it cannot say."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
        return int(done.stdout.split()[0]) << 20 if done.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


class MemoryAdmission:
    """Lets work in while what it holds fits `budget` bytes; a piece larger than the budget runs alone.
    15 warm-ups of KernelBench's 6 GB problems at once ran an 80 GB card out of memory."""

    def __init__(self, budget: int | None):
        self.budget, self.held = budget, 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hold(self, need: int):
        need = need if self.budget is None else min(need, self.budget)
        with self._changed:
            self._changed.wait_for(lambda: self.budget is None or self.held + need <= self.budget)
            self.held += need
        try:
            yield
        finally:
            with self._changed:
                self.held -= need
                self._changed.notify_all()


def _precompile_peers(jobs: list[Path], workers: int) -> list[str]:
    """torch.compile of each problem's model in parallel processes, filling Inductor's cache, so that
    the sequential timing (one problem at a time on the GPU) spends no minutes compiling; as many at once as
    the GPU's memory holds (MemoryAdmission, 90% of it). Returns the problems whose warm-up failed (their
    timing compiles, or reports torch.compile's error)."""
    total = gpu_memory_bytes()
    admission = MemoryAdmission(int(total * 0.9) if total else None)

    def one(job: Path) -> str:
        try:
            with admission.hold(warm_up_bytes(job)):
                done = subprocess.run([sys.executable, "-m", "workers.measure.warm_peer", str(job)],
                                      capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return f"{job.name} (600 s)"
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]  # a traceback's verdict
        return "" if done.returncode == 0 else f"{job.name} (exit {done.returncode}: {last})"

    with ThreadPoolExecutor(workers) as pool:
        return [failed for failed in pool.map(one, jobs) if failed]


def _row(level: int, problem: Path, result, compiled) -> MeasureRow:
    return MeasureRow(problem.stem, level, result.status, correct=bool(result.correct), ours_us=_us(result.time),
                      eager_us=_us(result.eager), compiled_us=_us(result.compiled),
                      max_abs_err=result.max_abs_err or 0.0, device=result.device, error=result.error[:300],
                      seconds=result.seconds, kernels_digest=compiled.kernels_digest, kernel_us=result.kernel_us,
                      launched_as=result.launched_as)


def _slowest_kernel(row: MeasureRow) -> str:
    if not row.kernel_us:
        return ""
    kernel, us = max(row.kernel_us.items(), key=lambda item: item[1])
    share = us / sum(row.kernel_us.values())
    return f"; slowest of {len(row.kernel_us)} kernels alone: {kernel} {us:.1f} us ({share:.0%})"


def progress(row: MeasureRow) -> str:
    """A measured row for the progress log: its times, and where it is not correct, why."""
    times = f"ours {row.ours_us:.1f} us, eager {row.eager_us:.1f}, torch.compile {row.compiled_us:.1f}"
    if row.status == "ok":
        return f"ok, {times}{_slowest_kernel(row)}"
    if row.status == "wrong_result":
        return f"wrong_result (max abs error {row.max_abs_err:.3g}), {times}"
    return f"{row.status}: {row.error.splitlines()[0] if row.error else 'no reason recorded'}"


def v0_result(job: Path):
    """The job folder's v0 CompileResult, or None where v0 was not compiled."""
    from workers.records import CompileResult

    result = job / "v0" / "compile_result.json"
    return CompileResult.from_json(result.read_text()) if result.exists() else None


def v0_compiled(job: Path) -> bool:
    """Whether the job folder's v0 compiled (its compile_result.json says so)."""
    result = v0_result(job)
    return result is not None and result.ok


def kernels_changed(out: Path, level: int, problem: Path) -> bool:
    """Whether the problem's compiled v0 is not the one its measure row timed: no row, or a row with another
    kernels digest (a row with none predates the digest and counts as current)."""
    path, result = row_path(out, level, problem, "measure"), v0_result(job_dir(out, level, problem))
    if not path.exists():
        return True
    timed = MeasureRow.from_json(path.read_text()).kernels_digest
    return bool(timed) and result is not None and timed != result.kernels_digest


def measure_all(items: list[tuple[int, Path]], out: Path, again: bool, timeout_s: float,
                budget_s: float, peer_workers: int) -> list[MeasureRow]:
    from workers.measure import measure_batch

    until = time.time() + budget_s
    compiled, rows = [], {}
    for level, problem in items:
        path = row_path(out, level, problem, "measure")
        if path.exists() and not again:
            rows[path] = MeasureRow.from_json(path.read_text())
        elif not v0_compiled(job_dir(out, level, problem)):
            rows[path] = MeasureRow(problem.stem, level, "not compiled")
        else:
            compiled.append((level, problem))
    print(f"measuring {len(compiled)} compiled problems, {peer_workers} at a time: torch.compile of each batch "
          "in parallel, then the batch's measurements one by one, in one GPU process while none fails",
          file=sys.stderr, flush=True)
    # batches, so that a budget that ends mid-run leaves measured rows (the next run resumes from them)
    # and no peer compiles that nothing times
    for start in range(0, len(compiled), peer_workers):
        batch = compiled[start:start + peer_workers]
        if time.time() >= until:
            break
        warming = time.monotonic()
        failed = _precompile_peers([job_dir(out, level, p) for level, p in batch], peer_workers)
        print(f"torch.compile of {len(batch)} problems in {time.monotonic() - warming:.0f} s"
              + (f"; its warm-up failed for {', '.join(failed)}" if failed else ""), file=sys.stderr, flush=True)
        measuring = time.monotonic()

        def observe(i: int, result) -> None:
            nonlocal measuring
            level, problem = batch[i]
            path = row_path(out, level, problem, "measure")
            rows[path] = row = _row(level, problem, result, v0_result(job_dir(out, level, problem)))
            path.write_text(row.to_json(indent=2))
            print(f"level{level}/{problem.stem}: {progress(row)} ({time.monotonic() - measuring:.0f} s: "
                  + ", ".join(f"{name} {s:.0f}" for name, s in row.seconds.items()) + ")", file=sys.stderr, flush=True)
            measuring = time.monotonic()

        measure_batch([(str(job_dir(out, level, p)), 0) for level, p in batch], timeout_s, until, observe)
    unrun = [f"level{level}/{p.stem}" for level, p in compiled if row_path(out, level, p, "measure") not in rows]
    if unrun:
        print(f"budget of {budget_s:.0f} s spent: {len(unrun)} problems unrun, from {unrun[0]}", file=sys.stderr)
    return list(rows.values())


LOOP_FOLDER = "loop"  # OUT/loop/levelN/<problem>/: the loop's job folders
LOOP_SEED = ("model.py", MODEL_INFO_FILE, LINALG_FILE, REFERENCE_FILE)  # from v0's job folder


def loop_row(level: int, problem: Path, job: Path) -> MeasureRow:
    """The loop's best correct version of `problem` (its job folder `job`), else why there is none."""
    from orchestrator.records import JobState
    from orchestrator.reports import best_iteration
    from orchestrator.state import JOB_FILE

    if not (job / JOB_FILE).exists():
        return MeasureRow(problem.stem, level, "not looped", error="the loop did not start this problem")
    state = JobState.from_json((job / JOB_FILE).read_text())
    best = best_iteration(state.iterations)
    if best is None:
        return MeasureRow(problem.stem, level, state.status, error=(state.stop_reason or state.error)[:300])
    m = best.measure
    return MeasureRow(problem.stem, level, m.status, correct=True, ours_us=_us(m.time), eager_us=_us(m.eager),
                      compiled_us=_us(m.compiled), max_abs_err=m.max_abs_err or 0.0, device=m.device,
                      version=best.version)


def loop_all(items: list[tuple[int, Path]], out: Path, iterations: int, budget_s: float,
             compile_workers: int) -> list[MeasureRow]:
    """Each level's compiled problems as jobs of one `orchestrator submit` (an embedded farm), seeded with
    their lowering; the farm is stopped, whole, when the budget ends, and each problem's row is its best
    correct version by then."""
    from workers.process import run_in_group

    until = time.time() + budget_s
    rows = []
    for level in sorted({level for level, _ in items}):
        folder = out / LOOP_FOLDER / f"level{level}"
        problems_here = [p for lvl, p in items if lvl == level and v0_compiled(job_dir(out, level, p))]
        models = []
        for problem in problems_here:
            (folder / problem.stem).mkdir(parents=True, exist_ok=True)
            for name in LOOP_SEED:
                if (job_dir(out, level, problem) / name).exists():
                    shutil.copy(job_dir(out, level, problem) / name, folder / problem.stem / name)
            shutil.copy(job_dir(out, level, problem) / "model.py", folder / f"{problem.stem}.py")
            models.append(str(folder / f"{problem.stem}.py"))
        if not models or time.time() >= until:
            continue
        print(f"level {level}: the loop on {len(models)} problems, up to {iterations} versions each "
              f"(farm logs in {folder / '.farm' / 'logs'})", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "orchestrator.cli", "submit", *models, "--iterations", str(iterations),
               "--out", str(folder), "--compile-workers", str(compile_workers)]
        try:
            code, output = run_in_group(cmd, until - time.time())
            print(output[-3000:] + (f"\norchestrator submit ended with status {code}" if code else ""),
                  file=sys.stderr, flush=True)
        except TimeoutError:
            print(f"budget of {budget_s:.0f} s spent: the farm was stopped; rows keep each problem's best "
                  "version so far", file=sys.stderr, flush=True)
        for problem in problems_here:
            row = loop_row(level, problem, folder / problem.stem)
            row_path(out, level, problem, "loop").write_text(row.to_json(indent=2))
            rows.append(row)
    return rows


MEASURE_NEEDS = ("model.py", "model_info.json", "v0/config.json", "v0/kernels.ptx", "v0/compile_result.json")
MEASURED = (REFERENCE_FILE,)  # the peers' times of an earlier run, which a resumed run reuses


def pack(items: list[tuple[int, Path]], out: Path, archive: Path) -> int:
    """What `measure` needs of each compiled problem (the rows and MEASURE_NEEDS of its job folder), with
    what earlier measure runs left (their rows and MEASURED), as a .tar.xz to carry to a GPU node, which
    unpacks it in its working tree. A job folder without peer times of its own takes another tree's
    (sibling_peer_times): the peers' times depend on the model alone, and torch.compile's compilation is
    most of a GPU node's time per problem. Returns the problems packed."""
    import tarfile

    archive.parent.mkdir(parents=True, exist_ok=True)
    packed = 0
    with tarfile.open(archive, "w:xz") as tar:
        for level, problem in items:
            row = row_path(out, level, problem, "compile")
            if not CompileRow.from_json(row.read_text()).ok:
                continue
            job = job_dir(out, level, problem)
            earlier = [path for path in (row_path(out, level, problem, "measure"), *(job / n for n in MEASURED))
                       if path.exists()]
            for path in (row, *(job / name for name in MEASURE_NEEDS), *earlier):
                tar.add(path, arcname=str(path.relative_to(out.parent)))
            if not (job / REFERENCE_FILE).exists() and (peers := sibling_peer_times(out, job)) is not None:
                tar.add(peers, arcname=str((job / REFERENCE_FILE).relative_to(out.parent)))
            packed += 1
    return packed


def sibling_peer_times(out: Path, job: Path) -> Path | None:
    """The newest peer times (REFERENCE_FILE) that another tree beside `out` (a folder of `--out` trees, as
    kb/s29 and kb/s32) holds for the same model: the same job path there, its model.py byte for byte the
    same. The GPU node times the peers anew where the times are another device's."""
    model = (job / "model.py").read_bytes()
    relative = job.relative_to(out)
    found = [tree / relative / REFERENCE_FILE for tree in out.parent.iterdir() if tree != out and tree.is_dir()]
    found = [path for path in found if path.exists() and (path.parent / "model.py").exists()
             and (path.parent / "model.py").read_bytes() == model]
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


def _us(timing) -> float:
    return round(timing.median_us, 2) if timing else 0.0


# -- tables -----------------------------------------------------------------------------------------

@dataclass
class LevelSummary:
    level: int
    problems: int = 0
    compiled: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # stage -> problems that failed there


def compile_summary(rows: list[CompileRow]) -> list[LevelSummary]:
    levels = {}
    for row in rows:
        s = levels.setdefault(row.level, LevelSummary(row.level))
        s.problems += 1
        s.compiled += row.ok
        if not row.ok:
            s.failures[row.stage] = s.failures.get(row.stage, 0) + 1
    return [levels[k] for k in sorted(levels)]


def compile_table(rows: list[CompileRow]) -> str:
    lines = ["| level | problems | v0 compiled | failed at (stage: problems) |", "|---|---|---|---|"]
    for s in compile_summary(rows):
        failures = ", ".join(f"{stage}: {n}" for stage, n in sorted(s.failures.items(), key=lambda kv: -kv[1]))
        lines.append(f"| {s.level} | {s.problems} | {s.compiled} ({100 * s.compiled / s.problems:.0f}%) | "
                     f"{failures or '-'} |")
    failed = [r for r in rows if not r.ok]
    if failed:
        lines += ["", "| problem | stage | first error line |", "|---|---|---|"]
        lines += [f"| level{r.level}/{r.problem} | {r.stage} | {r.error.replace('|', '/')} |" for r in failed]
    return "\n".join(lines)


def _fast(rows: list[MeasureRow], peer: str, p: float) -> float:
    """fast_p against `peer` ("eager" or "compiled"): the fraction of rows correct and faster by more than p."""
    hits = sum(1 for r in rows if r.correct and r.ours_us > 0 and getattr(r, f"{peer}_us") > p * r.ours_us)
    return hits / len(rows) if rows else 0.0


def _geomean(rows: list[MeasureRow], peer: str) -> float:
    """Geometric mean of peer time / our time over the correct rows that both timed."""
    ratios = [getattr(r, f"{peer}_us") / r.ours_us for r in rows if r.correct and r.ours_us and getattr(r, f"{peer}_us")]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 0.0


def measure_table(rows: list[MeasureRow]) -> str:
    lines = ["| level | problems | correct (fast_0) | fast_1 / fast_1.2 vs eager | geomean vs eager | "
             "fast_1 / fast_1.2 vs torch.compile | geomean vs torch.compile | torch.compile's fast_1 vs eager |",
             "|---|---|---|---|---|---|---|---|"]
    for level in sorted({r.level for r in rows}):
        rs = [r for r in rows if r.level == level]
        peer = [MeasureRow(r.problem, r.level, r.status, correct=r.compiled_us > 0, ours_us=r.compiled_us,
                           eager_us=r.eager_us) for r in rs if r.eager_us]
        lines.append(f"| {level} | {len(rs)} | {sum(r.correct for r in rs)} ({100 * _fast(rs, 'eager', 0):.0f}%) | "
                     f"{_fast(rs, 'eager', 1):.2f} / {_fast(rs, 'eager', 1.2):.2f} | {_geomean(rs, 'eager'):.2f}x | "
                     f"{_fast(rs, 'compiled', 1):.2f} / {_fast(rs, 'compiled', 1.2):.2f} | "
                     f"{_geomean(rs, 'compiled'):.2f}x | {_fast(peer, 'eager', 1):.2f} |")
    graphs = sum("CUDA graph" in r.launched_as for r in rows if r.correct)
    if graphs:
        lines += ["", f"Ours timed as one CUDA graph of each forward's launches in {graphs} of "
                      f"{sum(r.correct for r in rows)} correct rows (workers/measure/graph.py)."]
    lines += ["", "| problem | status | ours us | eager us | torch.compile us | vs eager | vs torch.compile |",
              "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r.level, _number(r.problem))):
        ratio = lambda peer: f"{peer / r.ours_us:.2f}x" if r.correct and r.ours_us and peer else "-"  # noqa: E731
        lines.append(f"| level{r.level}/{r.problem} | {r.status}{' ' + r.error[:80] if r.error else ''} | "
                     f"{r.ours_us or '-'} | {r.eager_us or '-'} | {r.compiled_us or '-'} | {ratio(r.eager_us)} | "
                     f"{ratio(r.compiled_us)} |")
    return "\n".join(lines)


def loop_table(rows: list[MeasureRow], v0_rows: list[MeasureRow]) -> str:
    """measure_table of the loop's best versions, with each problem's best version and its speedup over v0."""
    v0 = {(r.level, r.problem): r for r in v0_rows}
    lines = [measure_table(rows), "", "| problem | best version | vs v0 |", "|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r.level, _number(r.problem))):
        first = v0.get((r.level, r.problem))
        gain = f"{first.ours_us / r.ours_us:.2f}x" if r.correct and first and first.correct and first.ours_us else "-"
        lines.append(f"| level{r.level}/{r.problem} | {f'v{r.version}' if r.correct else '-'} | {gain} |")
    return "\n".join(lines)


def _commit() -> str:
    """FARM_COMMIT where the caller names it (a GPU node's copy of the tree can carry a stale git HEAD: the
    records of 2026-12-05 named one), else HEAD, with "+changes" where tracked files differ from it."""
    if os.environ.get("FARM_COMMIT"):
        return os.environ["FARM_COMMIT"]
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run([*git, "diff", "--quiet", "HEAD"], capture_output=True).returncode == 1
    return (head or "unknown") + ("+changes" if head and changed else "")


def record(path: str, title: str, table: str, device: str) -> None:
    """Append a dated section (device, commit, command) to a results file."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    command = " ".join([Path(sys.executable).name, *sys.argv])
    with open(path, "a") as f:
        f.write(f"\n## {title}, {stamp}\n\nDevice: {device}. Commit: {_commit()}. Command: `{command}`.\n\n"
                f"{table}\n")


def _rows(out: Path, items: list[tuple[int, Path]], kind: str, record_type):
    return [record_type.from_json(path.read_text()) for level, p in items
            if (path := row_path(out, level, p, kind)).exists()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("compile", "lower and compile v0 of each problem (CPU)"),
                       ("pack", "pack what `measure` needs of the compiled problems, to carry to a GPU node"),
                       ("measure", "measure each compiled v0 on this node's GPU"),
                       ("loop", "run the optimization loop on each compiled problem on this node's GPUs"),
                       ("table", "print the tables of what is recorded")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("problems", nargs="*", help="problem files (default: every problem of --level)")
        p.add_argument("--level", type=int, nargs="+", choices=LEVELS, default=list(LEVELS))
        p.add_argument("--out", type=Path, default=Path("kb-out"), help="job folders and rows (default kb-out)")
        p.add_argument("--record", help="append the table, dated, with device, commit and command, to FILE")
        p.add_argument("--sample", type=int, default=1, metavar="N",
                       help="every Nth problem of each level by its suite number (1, 1+N, ...), for a run "
                            "shorter than the whole suite (default 1: all)")
        if name in ("compile", "measure"):
            p.add_argument("--again", action="store_true", help="redo problems that have a recorded row")
        if name in ("pack", "measure"):
            p.add_argument("--changed", action="store_true",
                           help="only the problems whose v0 kernels are not the ones their measure row timed (by "
                                "the compile's kernels digest), or that have no measure row")
    sub.choices["compile"].add_argument("--failed", action="store_true", help="redo the problems that failed")
    sub.choices["compile"].add_argument("--keep-lowering", action="store_true",
                                        help="with --again or --failed: keep each job folder's lowering and compile "
                                             "v0 anew (after a change to the compile stage: minutes, not hours)")
    sub.choices["compile"].add_argument("--stale", action="store_true",
                                        help="only the lowered problems whose v0 schedule today differs from the one "
                                             "their v0 compiled (with --again --keep-lowering: after a change to v0's "
                                             "rules)")
    sub.choices["compile"].add_argument("--jobs", type=int, default=2, help="problems compiled at once (2)")
    sub.choices["compile"].add_argument("--limit", type=float, default=COMPILE_LIMIT_S,
                                        help=f"seconds per problem, lowering included ({COMPILE_LIMIT_S})")
    sub.choices["pack"].add_argument("--to", type=Path, default=Path(".kb-carry/jobs.tar.xz"),
                                     help="the archive (default .kb-carry/jobs.tar.xz, which git ignores)")
    sub.choices["measure"].add_argument("--timeout", type=float, default=120, help="seconds per measurement (120)")
    sub.choices["measure"].add_argument("--budget", type=float, default=540,
                                        help="stop starting measurements after this many seconds (540)")
    sub.choices["measure"].add_argument("--peer-workers", type=int, default=8,
                                        help="torch.compile processes warming the peers at once (8)")
    sub.choices["loop"].add_argument("--iterations", type=int, default=4, help="most versions per problem, v0 "
                                     "included (4)")
    sub.choices["loop"].add_argument("--budget", type=float, default=540,
                                     help="stop the farm after this many seconds, keeping what it measured (540)")
    sub.choices["loop"].add_argument("--compile-workers", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                                     help="compile worker processes of the farm (half the cores)")
    args = parser.parse_args(argv)
    if args.command == "compile":
        items, where = problems(args.level, args.problems), f"the suite ({SUITE})"
    else:
        levels = sorted({_level_of(Path(f)) for f in args.problems}) if args.problems else args.level
        items, where = recorded(args.out, levels, args.problems), f"the compile rows in {args.out}"
    items = [(level, p) for level, p in items if (_number(p.stem)[0] - 1) % args.sample == 0]
    if getattr(args, "stale", False):
        items, where = [(level, p) for level, p in items if v0_stale(args.out, level, p)], \
            f"{where} whose v0 schedule changed"
    if getattr(args, "changed", False):
        items, where = [(level, p) for level, p in items if kernels_changed(args.out, level, p)], \
            f"{where} whose kernels changed since they were measured"
    if not items:
        parser.error(f"no problems found in {where}")
    if args.command == "compile":
        rows = compile_all(items, args.out, args.again, args.failed, args.jobs, args.limit, args.keep_lowering)
        table, device = compile_table(rows), "CPU machine (ptxas -arch=sm_90a judges the PTX)"
        title = "v0 compiles (CPU)"
    elif args.command == "pack":
        packed = pack(items, args.out, args.to)
        print(f"{packed} compiled problems in {args.to} ({args.to.stat().st_size / 1e6:.1f} MB); on the GPU node, in "
              f"the working tree: tar xJf {args.to}, then {Path(__file__).name} measure --out {args.out.name}")
        return 0
    elif args.command == "measure":
        rows = measure_all(items, args.out, args.again or args.changed, args.timeout, args.budget, args.peer_workers)
        table, title = measure_table(rows), "v0 measured"
        device = next((r.device for r in rows if r.device), "no GPU")
    elif args.command == "loop":
        rows = loop_all(items, args.out, args.iterations, args.budget, args.compile_workers)
        table, title = loop_table(rows, _rows(args.out, items, "measure", MeasureRow)), \
            f"the loop, up to {args.iterations} versions"
        device = next((r.device for r in rows if r.device), "no GPU")
    else:
        compiled = _rows(args.out, items, "compile", CompileRow)
        measured = _rows(args.out, items, "measure", MeasureRow)
        table = "\n\n".join(t for t in (compile_table(compiled) if compiled else "",
                                        measure_table(measured) if measured else "") if t) or "nothing recorded"
        title = f"v0 rows recorded in {args.out}"
        gpus = sorted({r.device for r in measured if r.device})
        device = "CPU machine (ptxas -arch=sm_90a judges the PTX)" + (f"; measured on {', '.join(gpus)}" if gpus else "")
    print(table)
    if args.record:
        record(args.record, title, table, device)
    return 0


def _compile_one(argv: list[str]) -> int:
    level, problem, job, path = int(argv[0]), Path(argv[1]), Path(argv[2]), Path(argv[3])
    row = compile_problem(level, problem, job)
    from workers.atomic import write_text

    write_text(str(path), row.to_json(indent=2))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["_compile_one"]:
        sys.exit(_compile_one(sys.argv[2:]))
    sys.exit(main())
