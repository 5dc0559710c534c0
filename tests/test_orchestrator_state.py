"""State store: compare-and-set with no lost update, idempotent task claims; on Redis and on files."""
from __future__ import annotations

import threading

import pytest

from orchestrator.records import JobState, TaskReport
from orchestrator.settings import FarmSettings, redact
from orchestrator.state import open_store


@pytest.fixture(params=["file", "redis"])
def store(request, tmp_path):
    if request.param == "file":
        return open_store(f"file://{tmp_path}/state")
    return open_store(request.getfixturevalue("redis_server").url)


def _job(out, job_id: str = "b.m") -> JobState:
    return JobState(job_id=job_id, batch="b", model_path="/m.py", job_dir=str(out / job_id), chip="sm_90a",
                    max_iterations=3, compile_only=False, status="queued", created=1.0)


def test_create_is_once_and_update_is_compare_and_set(store, tmp_path):
    assert store.create_job(_job(tmp_path))
    assert not store.create_job(_job(tmp_path))  # a second submit of the same id changes nothing

    def bump(job):
        job.max_iterations += 1
        return job

    threads = [threading.Thread(target=lambda: [store.update_job("b.m", bump) for _ in range(10)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    job = store.get_job("b.m")
    assert job.max_iterations == 3 + 40 and job.rev == 40  # no update lost under contention
    stale = job.rev - 1
    assert store.update_job("b.m", lambda cur: cur if cur.rev == stale else None) is None
    assert [j.job_id for j in store.jobs()] == ["b.m"]


def test_task_claims_make_redelivery_idempotent(store):
    first = store.claim_task("b.m:v0:compile", "compile1@h")
    assert (first.state, first.attempts, first.report) == ("running", 1, None)
    again = store.claim_task("b.m:v0:compile", "compile2@h")  # redelivered after compile1 died
    assert (again.attempts, again.worker) == (2, "compile2@h")
    done = store.finish_task("b.m:v0:compile", TaskReport("b.m:v0:compile", "compile", worker="compile2@h"))
    late = store.finish_task("b.m:v0:compile", TaskReport("b.m:v0:compile", "compile", worker="compile1@h"))
    assert late.worker == done.worker == "compile2@h"  # the first finished report wins
    assert store.claim_task("b.m:v0:compile", "compile3@h").report.worker == "compile2@h"


def test_settings(tmp_path):
    embedded = FarmSettings.resolve(None, str(tmp_path))
    assert embedded.is_embedded and embedded.state_url == f"file://{tmp_path}/.farm/state"
    farm = FarmSettings.resolve("redis://:pw@head:6379/0", str(tmp_path))
    assert not farm.is_embedded and farm.state_url == farm.broker_url
    assert redact("redis://:pw@head:6379/0") == "redis://:***@head:6379/0"
