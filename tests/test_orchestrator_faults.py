"""Faults, against real parts: a half-written and a lost message on the embedded farm's file transport, a
message lost from a Redis queue, a Redis outage of 60 s and a Redis that lost its data, a killed or
stopped `submit` (nothing may stay behind), a job folder the driver cannot write, a wrong broker URL or
password. The measurement is the TEST DOUBLE FakeGpuMeasure where a job is measured (no GPU here)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import MODELS, REDIS_PASSWORD, _free_port, cli_env, fake_gpu_env, farm_processes, run_cli, wait_until

pytestmark = pytest.mark.slow


def _marker(markers: Path, version: int, run) -> Path:
    """The marker file FakeGpuMeasure leaves while it measures `version` (submit must still run)."""
    def started():
        if run.poll() is not None:
            raise AssertionError(f"the CLI ended early ({run.returncode}): {run.communicate()[1]}")
        return next(markers.glob(f"*.v{version}.*"), None) if markers.exists() else None

    return wait_until(started, 240, f"a measurement of v{version} to start")


def _nothing_left(out: Path, within_s: float) -> None:
    wait_until(lambda: not farm_processes(out), within_s, "the farm's processes to end")


def test_file_transport_survives_a_half_written_and_a_lost_message(tmp_path):
    """No redis-server for the embedded farm: its file transport. A half-written message file in the queue
    (what kombu's own writer leaves for a moment) is set aside, not taken for a message, and the worker that
    met it lives on; a message deleted before any worker took it is sent again."""
    out = tmp_path / "out"
    queue = out / ".farm" / "broker" / "queue"
    queue.mkdir(parents=True)
    (queue / "1_half-written.compile.msg").write_text('{"body": "eyJ')
    run = run_cli("submit", str(MODELS / "matmul64.py"), "--compile-only", "--out", str(out),
                  env=cli_env(MLIR_FARM_REDIS_SERVER=""), background=True)
    lost = []

    def lose_the_first_message():  # faster than the workers' 0.1 s polling
        while run.poll() is None and not lost:
            for message in queue.glob("*.compile.msg"):  # a message, not the sender's temp file (".tmp-...")
                if "half-written" not in message.name and not message.name.startswith("."):
                    try:
                        message.unlink()
                        lost.append(message.name)
                        return
                    except FileNotFoundError:  # a worker took it first: try the next one
                        pass
            time.sleep(0.002)

    thief = threading.Thread(target=lose_the_first_message)
    thief.start()
    out_text, err = run.communicate(timeout=300)
    thief.join()
    assert run.returncode == 0, err
    assert lost, "no message was lost: the workers took every one first"
    assert "the broker lost it); sending it again" in err
    assert "file transport" in err and "private redis-server" not in err
    logs = "".join(p.read_text() for p in (out / ".farm" / "logs").glob("compile*.log"))
    assert "does not parse; set aside" in logs and "Unrecoverable error" not in logs
    assert (out / "matmul64" / "v0" / "kernels.ptx").is_file()
    _nothing_left(out, 10)


def test_a_message_lost_from_a_redis_queue_is_sent_again(farm, redis_server):
    """The frontend task's message waits in Redis with no worker to take it (the driver says so); it is
    then deleted from the queue; once workers start, the driver finds it in no queue and sends it again."""
    import redis

    f = farm()
    run = f.cli("submit", str(MODELS / "rowsum.py"), "--compile-only", background=True)
    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: client.llen("mlir-farm:celery:compile"), 60, "the frontend message in the compile queue")
    time.sleep(1)  # the driver looks at the queue and the workers (it finds none)
    client.delete("mlir-farm:celery:compile")
    f.start_workers(compile_workers=1, gpu_workers=1)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert "no live worker serves the compile queue" in err
    assert "the broker lost it); sending it again" in err
    assert f.store.jobs()[0].status == "done"


def test_redis_outage_of_60_s_and_a_redis_that_lost_its_data(farm, redis_server):
    """Redis stops for 60 s while v0 is measured: the job waits and goes on, nothing is blamed on the model.
    Then Redis restarts without its data while v1 is measured: the driver puts the job back and the lost
    task is sent again. Last, with no driver running, the store is emptied: every command finds the job
    again from its folder."""
    import redis

    f = farm(measure_sleep_s=3)
    f.start_workers(compile_workers=1, gpu_workers=1)
    run = f.cli("submit", str(MODELS / "rowsum.py"), "--iterations", "2", background=True)
    _marker(f.markers, 0, run)
    redis_server.stop()
    time.sleep(60)
    redis_server.start()
    _marker(f.markers, 1, run)
    redis_server.stop()
    for data in redis_server.folder.iterdir():  # its append-only file: a restart without the data
        if data.name != "redis.log":
            shutil.rmtree(data) if data.is_dir() else data.unlink()
    redis_server.start()
    out, err = run.communicate(timeout=400)
    assert run.returncode == 0, err
    assert "the state store lost this job" in err
    assert "Failed operation" not in err, "Celery retried a read of the driver's (see the next test)"
    job = f.store.jobs()[0]
    assert job.status == "done" and job.error == "", (job.stop_reason, job.error)
    assert [it.version for it in job.iterations] == [0, 1]
    assert all(it.error == "" and it.measure.status == "ok" for it in job.iterations)

    redis.Redis.from_url(redis_server.url).flushall()
    status = f.cli("status")
    assert status.returncode == 0 and "rowsum" in status.stdout and "done" in status.stdout, status.stdout
    assert "put back from their job_state.json" in status.stderr
    again = f.cli("submit", str(MODELS / "rowsum.py"), "--compile-only")
    assert again.returncode == 1 and "orchestrator resume rowsum" in again.stderr


_READ_A_RESULT = """
import argparse, logging, sys, time
from celery.result import AsyncResult
from orchestrator.celery_app import app
from orchestrator.cli import _farm
from orchestrator.loop import TRANSIENT

logging.basicConfig(level=logging.INFO)  # as the CLI logs
logging.getLogger("celery").setLevel(logging.WARNING)
_farm(argparse.Namespace(broker=sys.argv[1], out=sys.argv[2]))  # the app as the CLI configures it
print("configured", flush=True)
sys.stdin.readline()  # Redis stops meanwhile
started = time.time()
try:
    AsyncResult("b.m:v0:measure", app=app).state
except TRANSIENT as e:
    print(f"the driver waits it out: {type(e).__name__} after {time.time() - started:.0f} s")
"""


def test_a_result_read_while_redis_is_away_fails_for_the_driver_to_wait_out(redis_server, tmp_path):
    """The CLI's driver reads a task's result while Redis is away: the read fails at once with an error its
    loop waits out (loop.TRANSIENT: one warning, then each tick tries again) instead of retrying inside
    Celery, which logs a traceback each retry, some 70 KB a minute on the CLI's stderr. Where the 60 s outage
    above began inside such a read, that filled the pipe the test reads only at the end, and the driver stopped
    in a write for good (v1 never started)."""
    read = subprocess.Popen([sys.executable, "-c", _READ_A_RESULT, redis_server.url, str(tmp_path / "out")],
                            env=cli_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert read.stdout.readline() == "configured\n", read.stderr.read()
        redis_server.stop()
        out, err = read.communicate("go\n", timeout=30)
    finally:
        read.kill()
    assert "the driver waits it out: ConnectionError" in out, err
    assert "Failed operation" not in err and "Traceback" not in err, err[-3000:]


def test_a_killed_submit_leaves_nothing_behind_and_resumes(tmp_path):
    """The embedded farm, its own redis-server and FakeGpuMeasure (3 s a measurement): submit killed by
    SIGKILL, and submit stopped by SIGTERM (which says how to go on), leave no process; resume (no names:
    the latest batch) killed by SIGKILL leaves none either; a second resume while one runs is refused; the
    last one finishes the job."""
    for sig, code in ((signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 130)):  # the latest batch is resumed below
        out, markers = tmp_path / sig.name, tmp_path / f"markers-{sig.name}"
        env = cli_env(**fake_gpu_env(markers, 3))
        submit = run_cli("submit", str(MODELS / "elementwise_chain.py"), "--iterations", "2", "--out", str(out),
                         env=env, background=True)
        _marker(markers, 0, submit)
        assert farm_processes(out)
        submit.send_signal(sig)
        _, err = submit.communicate(timeout=60)
        assert submit.returncode == code and (code < 0 or "orchestrator resume" in err), err
        _nothing_left(out, 10)

    resume = run_cli("resume", env=env, background=True)  # the folder remembered from the last submit
    _marker(markers, 1, resume)
    busy = run_cli("resume", "--out", str(out), env=env, timeout=60)
    assert busy.returncode == 2 and "run by another orchestrator" in busy.stderr, busy.stderr
    resume.send_signal(signal.SIGKILL)
    resume.wait(10)
    _nothing_left(out, 10)

    done = run_cli("resume", "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert "batch summary" in done.stdout
    _nothing_left(out, 10)
    job = run_cli("status", "elementwise_chain", "--json", "--out", str(out), env=env)
    assert '"status": "done"' in job.stdout and job.stdout.count('"version":') >= 2


def test_a_job_folder_the_driver_cannot_write_fails_that_job_alone(farm):
    """Mid-batch on a Redis farm, one job's final report cannot be written (a folder in its place stops
    root too): that job fails saying why, and the driver goes on with the other, which finishes."""
    f = farm()
    f.start_workers(compile_workers=1, gpu_workers=1)
    (f.out / "matmul64" / "final_report.md").mkdir(parents=True)
    done = f.cli("submit", str(MODELS / "matmul64.py"), str(MODELS / "rowsum.py"), "--compile-only")
    assert done.returncode == 1 and "batch summary" in done.stdout, done.stderr
    jobs = {j.job_id.split(".", 1)[1]: j for j in f.store.jobs()}
    assert jobs["rowsum"].status == "done" and jobs["rowsum"].reported
    broken = jobs["matmul64"]
    assert broken.status == "failed" and broken.stop_reason == "the driver could not go on", broken.stop_reason
    assert "final_report.md" in broken.error, broken.error


def test_a_wrong_broker_or_password_is_said_at_once(redis_server):
    for url, says in ((f"redis://:wrong-{REDIS_PASSWORD}@127.0.0.1:{redis_server.port}/0", "refused the credentials"),
                      (f"redis://:{REDIS_PASSWORD}@127.0.0.1:{_free_port()}/0", "cannot reach Redis")):
        started = time.time()
        done = run_cli("status", "--broker", url, "--out", os.devnull, timeout=60)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert time.time() - started < 15
        assert REDIS_PASSWORD not in done.stderr  # the URL is shown redacted
