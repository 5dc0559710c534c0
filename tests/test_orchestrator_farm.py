"""End to end: real redis-server, real `celery worker` processes, the real frontend and compile stages;
the GPU measurement is the TEST DOUBLE FakeGpuMeasure (no GPU here). Faults: a worker process killed
mid-task, a whole worker killed, Redis restarted mid-job, a cancelled job, a malformed model and a
malformed schedule."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from conftest import MODELS, cli_env, farm_processes, run_cli

pytestmark = pytest.mark.slow
CONTRACT = ("env_check.md", "model_linalg.mlir", "best_pipeline.txt", "best_transform.mlir", "benchmark.md",
            "final_report.md")
ITERATION_FILES = ("pass_pipeline.txt", "hypothesis.txt", "transform.mlir", "gpu.mlir", "kernels.ptx",
                   "config.json", "benchmark.md", "ncu_summary.md", "ncu_details.md")


def _jobs(farm):
    return {j.job_id.split(".", 1)[1]: j for j in farm.store.jobs()}


def _assert_complete(job):
    """Done, every file of the output contract there, versions v0..vN-1 each once, none lost."""
    assert job.status == "done", (job.status, job.stop_reason, job.error)
    for name in CONTRACT:
        assert (Path(job.job_dir) / name).is_file(), name
    versions = sorted(int(p.name[1:]) for p in Path(job.job_dir).glob("v*") if p.is_dir())
    assert versions == [it.version for it in job.iterations] == list(range(len(job.iterations)))
    for it in job.iterations:
        assert it.stage == "complete"
        if it.compile.ok:
            for name in ITERATION_FILES:
                assert (Path(job.job_dir) / f"v{it.version}" / name).is_file(), (it.version, name)


def _wait_marker(farm, run, version: int = 0) -> int:
    """pid of the process running the fake measurement of `version` (it leaves a marker file)."""
    def started():
        if run.poll() is not None:
            raise AssertionError(f"submit ended early ({run.returncode}): {run.communicate()[1]}")
        return list(farm.markers.glob(f"*.v{version}.*")) if farm.markers.exists() else []

    found = farm.wait_for(started, what=f"a measurement of v{version} to start")
    return int(found[0].name.rsplit(".", 1)[1])


def test_batch_spreads_over_workers_and_survives_a_malformed_model(farm):
    f = farm()
    f.start_workers(compile_workers=2, gpu_workers=1)
    models = [MODELS / n for n in ("matmul64.py", "elementwise_chain.py", "rowsum.py", "broken.py")]
    done = f.cli("submit", *map(str, models), "--iterations", "3")
    assert done.returncode == 1, done.stderr  # one model failed
    assert "Traceback" not in done.stderr + done.stdout
    jobs = _jobs(f)
    broken = jobs.pop("broken")
    assert broken.status == "failed" and "get_inputs" in broken.error
    assert "get_inputs" in (Path(broken.job_dir) / "final_report.md").read_text()
    for job in jobs.values():
        _assert_complete(job)
        # the advisor loop iterated on the double's metrics, or v0 had no route left (rowsum's block
        # reduction of 4 elements per thread; matmul64's blocks of one warp, 2x2 outputs per thread)
        assert len(job.iterations) >= 2 or job.stop_reason.startswith("no route left")
        assert "TEST DOUBLE" in (Path(job.job_dir) / "final_report.md").read_text()
        if len(job.iterations) >= 2:
            v1 = (Path(job.job_dir) / "v1" / "hypothesis.txt").read_text()
            assert v1 == job.iterations[1].hypothesis_text.rstrip() + "\n"
    assert len(jobs["elementwise_chain"].iterations) >= 2
    assert f"[{jobs['elementwise_chain'].job_id}] v1 hypothesis: " in done.stderr
    assert "hypothesis: hypothesis:" not in done.stderr  # a new version's log line says it once
    compile_workers = {it.compile_worker for j in jobs.values() for it in j.iterations}
    compile_workers |= {j.frontend_worker for j in jobs.values()}
    assert len(compile_workers) >= 2, compile_workers  # compile work spread over both compile workers
    assert {it.measure_worker for j in jobs.values() for it in j.iterations} == {f.pool.specs["gpu0"].hostname}

    listing = f.cli("workers")
    assert listing.returncode == 0 and "compile1@" in listing.stdout and "gpu0@" in listing.stdout
    report = f.cli("report")
    assert report.returncode == 0, report.stderr
    batch = Path(next(iter(jobs.values())).job_dir).parent
    assert (batch / "time_per_iteration.png").stat().st_size > 1000
    assert "matmul64" in (batch / "summary.md").read_text()


def test_killed_measure_process_is_redone_once(farm):
    f = farm(measure_sleep_s=3)
    f.start_workers(compile_workers=1, gpu_workers=1)
    run = f.cli("submit", str(MODELS / "matmul64.py"), "--iterations", "2", background=True)
    os.kill(_wait_marker(f, run, 0), signal.SIGKILL)  # the pool process running the measurement
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    job = _jobs(f)["matmul64"]
    _assert_complete(job)
    claim = f.store.task_claim(f"{job.job_id}:v0:measure")
    assert claim.attempts == 2 and claim.state == "done"  # redone once, recorded once


def test_task_of_a_dead_worker_is_sent_again(farm):
    f = farm()
    f.start_workers(compile_workers=2, gpu_workers=1)
    run = f.cli("submit", str(MODELS / "elementwise_chain.py"), "--compile-only", background=True)
    job_id = f.wait_for(lambda: next(iter(_jobs(f).values()), None), what="the job").job_id
    claim = f.wait_for(lambda: f.store.task_claim(f"{job_id}:frontend"), what="the frontend task to start")
    victim = next(n for n, s in f.pool.specs.items() if s.hostname == claim.worker)
    os.killpg(f.pool.procs[victim].pid, signal.SIGKILL)  # the whole worker, main process included
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert "is gone; sending the task again" in err
    job = _jobs(f)["elementwise_chain"]
    assert job.status == "done" and job.iterations[0].compile.ok
    assert job.frontend_worker != claim.worker
    assert f.store.task_claim(f"{job_id}:frontend").attempts == 2


def test_redis_restart_mid_job(farm, redis_server):
    f = farm(measure_sleep_s=2)
    f.start_workers(compile_workers=1, gpu_workers=1)
    run = f.cli("submit", str(MODELS / "rowsum.py"), "--iterations", "2", background=True)
    _wait_marker(f, run, 0)
    redis_server.stop()
    time.sleep(2)
    redis_server.start()
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    _assert_complete(_jobs(f)["rowsum"])


def test_cancel_then_resume(farm):
    f = farm(measure_sleep_s=2)
    f.start_workers(compile_workers=1, gpu_workers=1)
    run = f.cli("submit", str(MODELS / "elementwise_chain.py"), "--iterations", "3", background=True)
    _wait_marker(f, run, 0)
    cancelled = f.cli("cancel", "elementwise_chain")
    assert cancelled.returncode == 0, cancelled.stderr
    out, err = run.communicate(timeout=300)
    assert run.returncode == 1
    job = _jobs(f)["elementwise_chain"]
    assert job.status == "cancelled" and job.reported
    assert "cancelled by the user" in (Path(job.job_dir) / "final_report.md").read_text()
    config = Path(job.job_dir) / "v0" / "config.json"
    before = config.stat().st_mtime_ns
    resumed = f.cli("resume", "elementwise_chain")
    assert resumed.returncode == 0, resumed.stderr
    job = _jobs(f)["elementwise_chain"]
    _assert_complete(job)
    assert len(job.iterations) == 3 and config.stat().st_mtime_ns == before  # v0 was not redone


def test_malformed_schedule_fails_cleanly(farm, tmp_path):
    f = farm()
    f.start_workers(compile_workers=1, gpu_workers=1)
    bad = {"ops": [{"op_index": 1, "family": "matmul", "block_tile": [-8, 0, 0], "thread_tile": [4, 4, 0]}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    done = f.cli("submit", str(MODELS / "matmul64.py"), "--compile-only", "--schedule", str(tmp_path / "bad.json"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    job = _jobs(f)["matmul64"]
    assert job.status == "failed" and job.stop_reason.startswith("the schedule given with --schedule is invalid")
    v0 = job.iterations[0]
    assert not v0.compile.ok and "negative" in v0.compile.error
    assert "negative" in (Path(job.job_dir) / "final_report.md").read_text()
    assert (Path(job.job_dir) / "best_transform.mlir").read_text().startswith("// n/a")


def test_tf32_jobs_start_on_tensor_cores(farm):
    """submit --tf32: the job's fp32 model may compute in TF32, so v0 puts its f32 matmul on mma.sync."""
    f = farm()
    f.start_workers(compile_workers=1, gpu_workers=1)
    done = f.cli("submit", str(MODELS / "matmul64.py"), "--compile-only", "--tf32")
    assert done.returncode == 0, done.stderr
    job = _jobs(f)["matmul64"]
    assert job.tf32 and job.iterations[0].params.precision == "tf32"
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in (Path(job.job_dir) / "v0" / "kernels.ptx").read_text()


def test_embedded_farm_compile_only(tmp_path):
    """The README's first run: no --broker, so submit starts its own farm (a private redis-server on a Unix
    socket under OUT/.farm, file state, workers) and stops all of it. The commands after it find the batch
    without --out (the folder remembered, or $MLIR_FARM_OUT) and create nothing; artifacts are as readable
    as the umask (022) allows."""
    from experience.store import ExperienceStore
    from test_experience_store import outcome

    def cli(*args, **env):
        return run_cli(*args, env=cli_env(**env), cwd=tmp_path, preexec_fn=lambda: os.umask(0o022))

    done = cli("submit", str(MODELS / "matmul64.py"), str(MODELS / "rowsum.py"), "--compile-only", "--out", "runs")
    assert done.returncode == 0, done.stderr
    assert "a private redis-server" in done.stderr
    out = tmp_path / "runs"
    assert not farm_processes(out)
    for model in ("matmul64", "rowsum"):  # OUT/<model name>, as the output contract says
        assert (out / model / "v0" / "kernels.ptx").is_file()
        assert "compile-only run" in (out / model / "final_report.md").read_text()
        assert (out / model / "final_report.md").stat().st_mode & 0o777 == 0o644
        for name in ("benchmark.md", "ncu_summary.md", "ncu_details.md"):  # skipped steps say why
            assert "not measured: compile-only run" in (out / model / "v0" / name).read_text()
    again = cli("submit", str(MODELS / "matmul64.py"), "--compile-only", "--out", "runs")
    assert again.returncode == 1 and "already holds a job" in again.stderr, "an earlier job is never overwritten"
    status = cli("status")
    assert status.returncode == 0 and "matmul64" in status.stdout and "done" in status.stdout
    by_env = cli("status", MLIR_FARM_OUT=str(out), XDG_STATE_HOME=str(tmp_path / "none"))  # nothing remembered
    assert by_env.returncode == 0 and "matmul64" in by_env.stdout, by_env.stdout
    assert cli("report").returncode == 0
    ExperienceStore(str(out / "experience.jsonl")).record(outcome("register_tiling", "success", 1.5))
    exported = cli("experience", "export")
    assert exported.returncode == 0 and "register_tiling" in exported.stdout, exported.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no ./farm-out made by the commands


def test_started_jobs_compile_before_new_lowerings(farm):
    """One compile process, three models: each model's v0 compiles right after its lowering, before the next
    model is lowered; the batch's lowerings do not all go first (a lowering can take minutes)."""
    f = farm()
    f.start_workers(compile_workers=1, gpu_workers=1)
    done = f.cli("submit", *(str(MODELS / n) for n in ("matmul64.py", "rowsum.py", "elementwise_chain.py")),
                 "--compile-only")
    assert done.returncode == 0, done.stderr
    started = {}
    for job in f.store.jobs():
        for stage in ("frontend", "v0:compile"):
            started[job.job_id, stage] = f.store.task_claim(f"{job.job_id}:{stage}").report.started
    order = sorted(started, key=started.get)
    assert [stage for _, stage in order] == ["frontend", "v0:compile"] * 3, order
    assert [job for job, _ in order[::2]] == [job for job, _ in order[1::2]]


def test_a_lowering_past_its_limits_and_a_schedule_that_is_not_the_models_fail_once_with_the_reason(farm, tmp_path):
    f = farm()
    f.start_workers(compile_workers=1, gpu_workers=1)
    for model, limit, says in (("matmul_narrow", ("--lowering-timeout", "1"), "ran past its limit of 1 s"),
                               ("rowsum", ("--lowering-memory-gb", "0.05"), "more than its 0.05 GB memory limit")):
        over = f.cli("submit", str(MODELS / f"{model}.py"), "--compile-only", *limit)
        assert over.returncode == 1, over.stderr
        job = _jobs(f)[model]
        assert job.status == "failed" and job.stop_reason == "the model could not be lowered"
        assert says in job.error, job.error
        assert f.store.task_claim(f"{job.job_id}:frontend").attempts == 1  # failed once, not retried

    schedule = {"ops": [{"op_index": 7, "family": "matmul", "block_tile": [8, 8, 0], "thread_tile": [4, 4, 0]}],
                "precision": "f16"}
    (tmp_path / "f16.json").write_text(json.dumps(schedule))
    done = f.cli("submit", str(MODELS / "matmul64.py"), "--compile-only", "--schedule", str(tmp_path / "f16.json"))
    assert done.returncode == 1, done.stderr
    job = _jobs(f)["matmul64"]
    assert job.status == "failed" and job.stop_reason == "the --schedule file does not fit the model"
    assert "its precision is f16 but the model computes in fp32" in job.error
    assert "op 7 is not an op of the model" in job.error
    assert not (Path(job.job_dir) / "v0").exists()
