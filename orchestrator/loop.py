"""The loop driver: frontend -> (compile -> measure -> advise)* -> final artifacts, for many jobs at once.

One single-threaded driver polls every job (the rule engine is not thread-safe). A job has at most one
task in flight, so the FIFO queues interleave jobs and share the workers fairly; and no more lowerings
are in flight than the farm has compile processes, so a started job's next stage never waits behind
the lowerings of the whole batch. All progress lives in the state store: each step computes the next
job state from the one it read and commits it only if the job's `rev` is unchanged (compare-and-set),
so a cancel, a second driver or a crash in between never yields a lost or duplicated vN. Restarting a
driver (`resume`) re-sends each job's in-flight task under its deterministic id; the task's claim makes
that harmless if it already ran, and the driver re-sends, the same way, a task whose worker died or
whose message no queue holds any more. A job the store lost is put back from the driver's last read.
"""
from __future__ import annotations

import copy
import logging
import os
import time
from dataclasses import dataclass, fields

from celery.result import AsyncResult
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError

from orchestrator import reports, tasks
from orchestrator.celery_app import app
from orchestrator.heartbeat import is_alive
from orchestrator.queues import waiting_task_ids
from orchestrator.records import TERMINAL, IterationState, JobState, LoweringRequest, TaskReport
from orchestrator.reports import best_iteration, same_kernels
from orchestrator.state import StateStore
from rules.records import AdviceRequest, IterationRecord
from workers.atomic import write_text
from workers.measure.report import write_skipped
from workers.records import CompileResult, MeasureResult, OpSchedule, ScheduleParams

log = logging.getLogger("orchestrator")

# Errors of an unreachable broker or state store: the driver waits them out instead of failing jobs.
TRANSIENT = (OperationalError, RedisConnectionError, RedisTimeoutError, ConnectionError, TimeoutError)
QUEUE_OF = {"frontend": "compile", "compile": "compile", "measure": "gpu"}
# A task that no worker has started and whose message is in no queue for this long was lost: sent again.
LOST_AFTER_S = 15.0
QUEUE_LOOK_S = 2.0  # how old a look into the broker's queues may be


# the knobs a schedule line names only where they differ from their defaults (row_kernel 1024, warp_merge)
_OPTIONAL_KNOBS = [f for f in fields(OpSchedule)
                   if f.name not in ("op_index", "family", "block_tile", "thread_tile", "reduction_tile", "tensor_core")]


def params_summary(params: ScheduleParams) -> str:
    lines = [f"chip {params.chip}, precision {params.precision}, fuse_elementwise {params.fuse_elementwise}"]
    for s in params.ops:
        extras = [f.name if value is True else f"{f.name} {value}" for f in _OPTIONAL_KNOBS
                  if (value := getattr(s, f.name)) != f.default]
        lines.append(f"op {s.op_index} ({s.family}): block_tile {s.block_tile}, thread_tile {s.thread_tile}, "
                     f"reduction_tile {s.reduction_tile}, tensor_core {s.tensor_core}"
                     + (f", {', '.join(extras)}" if extras else ""))
    return "\n".join(lines)


def current_task(job: JobState) -> tuple[str, str] | None:
    """(task id, stage) of the job's in-flight task, None when it has none."""
    if job.status in TERMINAL:
        return None
    if job.model is None:
        return tasks.task_id(job.job_id, "frontend"), "frontend"
    it = job.iterations[-1]
    stage = {"compiling": "compile", "measuring": "measure"}.get(it.stage)
    return (tasks.task_id(job.job_id, stage, it.version), stage) if stage else None


def write_hypotheses(job: JobState) -> None:
    """vN/hypothesis.txt of every version, written once (before vN is compiled), never rewritten."""
    for it in job.iterations:
        path = os.path.join(job.job_dir, f"v{it.version}", "hypothesis.txt")
        if not os.path.exists(path):
            write_text(path, it.hypothesis_text.rstrip() + "\n")


@dataclass
class Driver:
    store: StateStore
    experience: object | None = None  # experience.store.ExperienceStore
    poll_s: float = 0.1

    def __post_init__(self) -> None:
        self._sent: set[str] = set()
        self._resent: dict[str, int] = {}  # task id -> claim attempt re-sent after its worker died
        self._unseen: dict[str, float] = {}  # task id -> since when no queue holds it and no worker started it
        self._last: dict[str, JobState] = {}  # job id -> its latest state: what a store that lost it gets back
        self._looks: dict[str, tuple[float, object]] = {}  # what the broker or store said this tick or lately
        self._lowering_slots = 0  # lowerings this tick may still send
        self._outage_logged = False
        self._unserved_logged: set[str] = set()

    # -- the polling loop ------------------------------------------------------------------------
    def run(self, job_ids: list[str]) -> list[JobState]:
        """Drive the jobs until each is terminal and reported."""
        pending = list(job_ids)
        while pending:
            still = []
            lowering = sum(self._last[i].status == "frontend" for i in pending if i in self._last)
            try:
                self._lowering_slots = self._lowering_capacity() - lowering
            except TRANSIENT as e:  # the workers' records are in the store: no lowering is sent this tick
                self._lowering_slots = 0
                self._note_outage(e)
            for job_id in pending:
                try:
                    job = self.step(job_id)
                    self._outage_logged = False
                except TRANSIENT as e:
                    self._note_outage(e)
                    still.append(job_id)
                    continue
                except Exception as e:  # one job's trouble (its folder unwritable) must not stop the others
                    job = self._give_up(job_id, e)
                if job is not None:
                    self._last[job_id] = job
                    if not (job.status in TERMINAL and job.reported):
                        still.append(job_id)
            pending = still
            if pending:
                time.sleep(self.poll_s)
        try:
            return [j for j in (self.store.get_job(i) for i in job_ids) if j]
        except TRANSIENT as e:  # every job is reported: their last states say how they ended
            self._note_outage(e)
            return [self._last[i] for i in job_ids if i in self._last]

    def _note_outage(self, error: Exception) -> None:
        if not self._outage_logged:
            log.warning("broker or state store unreachable (%s); waiting for it to come back", error)
            self._outage_logged = True

    def step(self, job_id: str) -> JobState | None:
        job = self.store.get_job(job_id) or self._put_back(job_id)
        if job is None:
            return None
        if job.status in TERMINAL:
            return job if job.reported else self._finalize(job)
        tid, stage = current_task(job)  # type: ignore[misc]
        if tid not in self._sent:
            if job.status == "queued":
                if self._lowering_slots <= 0:
                    return job  # later stages of started jobs go first
                self._lowering_slots -= 1
                job = self._commit_status(job, "frontend")
                if job is None:
                    return self.store.get_job(job_id)
            self._send(job, stage, tid)
        result = AsyncResult(tid, app=app)
        if result.state == "SUCCESS":
            report = TaskReport.from_json(result.result)
            if report.cancelled:  # ran while the job was cancelled, and it has been resumed since
                result.forget()
                self._sent.discard(tid)
                return job
        elif result.state == "FAILURE":
            report = TaskReport(tid, stage, error=f"the {stage} task failed: {type(result.result).__name__}: {result.result}")
        else:
            self._watch_task(job, tid, stage)
            return job
        return self._advance(job, report)

    def _send(self, job: JobState, stage: str, tid: str) -> None:
        if stage == "frontend":
            request = LoweringRequest(job.model_copy, job.job_dir, job.chip, job.tf32, job.lowering_limits,
                                      job.start_params)
            tasks.frontend_task.apply_async((job.job_id, request.to_json()), task_id=tid)
        else:
            it = job.iterations[-1]
            write_hypotheses(job)
            if stage == "compile":
                tasks.compile_task.apply_async((job.job_id, job.job_dir, it.version, it.params.to_json()), task_id=tid)
            else:
                tasks.measure_task.apply_async((job.job_id, job.job_dir, it.version), task_id=tid)
        self._sent.add(tid)

    def _watch_task(self, job: JobState, tid: str, stage: str) -> None:
        """Re-send a task that will not finish by itself: its worker stopped beating (a dead worker's
        message may never come back: the filesystem transport has no acks; Redis gives it back only after
        the visibility timeout), or no worker started it and its message is in no queue (lost)."""
        claim = self.store.task_claim(tid)
        if claim is not None and claim.state == "running":
            self._unseen.pop(tid, None)
            workers = {w.hostname: w for w in self._workers()}
            if self._resent.get(tid) == claim.attempts or claim.worker in workers and is_alive(workers[claim.worker]):
                return
            log.warning("[%s] %s: worker %s is gone; sending the task again", job.job_id, stage, claim.worker)
            self._resent[tid] = claim.attempts
            self._sent.discard(tid)
            return
        queue = QUEUE_OF[stage]
        if tid in self._look(f"queue:{queue}", lambda: waiting_task_ids(app, queue)):
            self._unseen.pop(tid, None)
            self._tell_if_unserved(queue)
            return
        since = self._unseen.setdefault(tid, time.time())
        if time.time() - since >= LOST_AFTER_S:
            log.warning("[%s] %s: no queue holds its task and no worker started it for %.0f s (the broker lost "
                        "it); sending it again", job.job_id, stage, LOST_AFTER_S)
            del self._unseen[tid]
            self._sent.discard(tid)

    def _tell_if_unserved(self, queue: str) -> None:
        """Say once that a queue's tasks wait for a worker that no one has started."""
        if queue in self._unserved_logged or any(queue in w.queues and is_alive(w) for w in self._workers()):
            return
        log.warning("no live worker serves the %s queue of this farm; its tasks wait until one starts "
                    "(`orchestrator workers` lists the workers)", queue)
        self._unserved_logged.add(queue)

    def _look(self, what: str, read):
        """read() at most every QUEUE_LOOK_S: the broker's queues and the workers change slowly."""
        at, value = self._looks.get(what, (0.0, None))
        if time.time() - at > QUEUE_LOOK_S:
            value = read()
            self._looks[what] = (time.time(), value)
        return value

    def _workers(self) -> list:
        return self._look("workers", self.store.workers)

    def _lowering_capacity(self) -> int:
        """Lowerings this driver keeps in flight: one per live compile process, at least one."""
        return max(1, sum(w.concurrency for w in self._workers() if "compile" in w.queues and is_alive(w)))

    def _put_back(self, job_id: str) -> JobState | None:
        """A job the store no longer has (a Redis restarted without its data) is put back as last seen;
        its lost task is then found lost and sent again."""
        job = self._last.get(job_id)
        if job is not None:
            log.warning("[%s] the state store lost this job (Redis restarted without its data?); putting it back",
                        job_id)
            self.store.create_job(job)
        return self.store.get_job(job_id)

    def _give_up(self, job_id: str, error: Exception) -> JobState | None:
        log.exception("[%s] the driver cannot go on with this job", job_id)
        text = f"the driver could not go on: {type(error).__name__}: {error}"

        def change(job: JobState) -> JobState:
            job.status, job.error, job.stop_reason, job.reported = "failed", text, "the driver could not go on", True
            return job

        try:
            return self.store.update_job(job_id, change)
        except Exception as e:
            log.error("[%s] could not record that either: %s", job_id, e)
            return None

    # -- state transitions -------------------------------------------------------------------------
    def _commit(self, before: JobState, after: JobState) -> JobState | None:
        """Compare-and-set: `after` replaces the job only if nobody changed it since `before` was read."""
        return self.store.update_job(before.job_id, lambda cur: after if cur.rev == before.rev else None)

    def _commit_status(self, job: JobState, status: str) -> JobState | None:
        new = copy.deepcopy(job)
        new.status = status
        return self._commit(job, new)

    def _advance(self, job: JobState, report: TaskReport) -> JobState:
        new = copy.deepcopy(job)
        apply = {"frontend": self._after_frontend, "compile": self._after_compile, "measure": self._after_measure}
        apply[report.stage](new, report)
        committed = self._commit(job, new)
        if committed is None:
            return self.store.get_job(job.job_id)  # type: ignore[return-value]
        self._announce(job, committed, report)
        if committed.status == "iterating":
            write_hypotheses(committed)
        return committed

    def _after_frontend(self, job: JobState, report: TaskReport) -> None:
        job.env, job.frontend_worker, job.frontend_seconds = report.env, report.worker, report.seconds
        if report.error or report.params is None:
            job.status, job.error = "failed", report.error or "the frontend returned no model"
            job.stop_reason = report.stop_reason or "the lowering task failed"
            return
        job.model, job.status, params = report.model, "iterating", report.params
        origin = "user-given schedule (submit --schedule)" if job.start_params else "initial operator-aware schedule"
        job.iterations.append(IterationState(0, "compiling", params, f"{origin}\n{params_summary(params)}",
                                             started=time.time()))

    def _after_compile(self, job: JobState, report: TaskReport) -> None:
        it = job.iterations[-1]
        it.compile = report.compile or CompileResult(it.version, False, "task", error=report.error)
        it.compile_worker, it.compile_task_seconds = report.worker, report.seconds
        if not it.compile.ok:
            it.error = report.error
            write_skipped(job.job_dir, it.version, f"v{it.version} did not compile ({it.compile.stage}: "
                                                    f"{(it.compile.error or report.error)[:300]})")
            self._complete(job, it, "failure", None)
        elif job.compile_only:
            write_skipped(job.job_dir, it.version, "compile-only run (submit --compile-only)")
            self._complete(job, it, "n/a", None)
        elif (twin := same_kernels(job.iterations[:-1], it.compile)) is not None:
            # the edit changed nothing the GPU runs: its measurement would repeat the twin's
            write_skipped(job.job_dir, it.version, f"v{it.version} compiled to the same kernels and launches as "
                                                    f"v{twin.version} (the edit changed no GPU code)")
            self._complete(job, it, "neutral", None)
        else:
            it.stage = "measuring"

    def _after_measure(self, job: JobState, report: TaskReport) -> None:
        from rules import classify_outcome

        it = job.iterations[-1]
        it.measure = report.measure or MeasureResult(it.version, "error", error=report.error)
        it.measure_worker, it.measure_task_seconds, it.measure_gpu = report.worker, report.seconds, report.gpu
        job.measure_impl = report.measure_impl or job.measure_impl
        it.error = report.error
        if it.measure.status == "skipped":  # nothing ran on a GPU: no outcome to judge
            self._complete(job, it, "n/a", None)
            return
        best = best_iteration(job.iterations[:-1])
        outcome, speedup = classify_outcome(best.measure if best else None, it.measure)
        self._complete(job, it, outcome, speedup)

    def _complete(self, job: JobState, it: IterationState, outcome: str, speedup: float | None) -> None:
        """vN is complete: record its outcome, then stop the job or start v{N+1} (one commit)."""
        it.stage, it.outcome, it.speedup_vs_best, it.finished = "complete", outcome, speedup, time.time()
        if it.hypothesis and outcome in ("failure", "neutral") and not it.error:
            job.rejected.append(it.hypothesis)  # infrastructure failures may be retried
        best = best_iteration(job.iterations)
        job.best_version = best.version if best else None
        reason = self._stop_reason(job, it)
        if reason is not None:
            job.status, job.stop_reason = _final_status(job), reason
            return
        self._next_iteration(job)

    def _stop_reason(self, job: JobState, it: IterationState) -> str | None:
        """Why the job ends after `it` without asking the advisor; a version that did not compile goes on to
        the advisor's repair instead."""
        if job.compile_only and it.compile.ok:
            return "compile-only run"
        if it.version == 0 and job.start_params is not None and not it.compile.ok and it.compile.stage == "schedule":
            return f"the schedule given with --schedule is invalid (not repaired): {it.compile.error}"
        if it.measure is not None and it.measure.status == "skipped":  # before the limit: it says why nothing ran
            return f"not measured: {it.measure.error or 'no reason given'}"
        if len(job.iterations) >= job.max_iterations:
            return f"reached the iteration limit ({job.max_iterations})"
        return None

    def _next_iteration(self, job: JobState) -> None:
        from rules import advise, hypothesis_text
        from workers.compile import ScheduleError, apply_edit

        while True:
            best = best_iteration(job.iterations)
            # from the best correct version; with none yet, from the last one (a repair builds on the repairs before it)
            current = (best or job.iterations[-1]).params
            request = AdviceRequest(model=job.model, current=current, history=[_history(i) for i in job.iterations],
                                    max_iterations=job.max_iterations, rejected=list(job.rejected))
            decision = advise(request, self.experience)
            job.last_decision = decision
            if decision.action != "continue" or decision.hypothesis is None:
                job.status, job.stop_reason = _final_status(job), decision.stop_reason or "the advisor stopped"
                return
            version = len(job.iterations)
            it = IterationState(version, "compiling", current, hypothesis_text(decision, request),
                                hypothesis=decision.hypothesis, evidence=decision.evidence, started=time.time())
            job.iterations.append(it)
            try:
                it.params = apply_edit(current, decision.hypothesis.edit)
                return
            except ScheduleError as e:  # the edit itself is invalid: vN fails without compiling
                it.compile = CompileResult(version, False, "schedule", error=f"schedule edit rejected: {e}")
                it.stage, it.outcome, it.finished = "complete", "failure", time.time()
                job.rejected.append(decision.hypothesis)
                reason = self._stop_reason(job, it)
                if reason is not None:
                    job.status, job.stop_reason = _final_status(job), reason
                    return

    # -- side effects after a commit -------------------------------------------------------------
    def _announce(self, before: JobState, after: JobState, report: TaskReport) -> None:
        name = after.job_id
        if report.stage == "frontend":
            if after.model is None:
                log.error("[%s] frontend failed: %s", name, after.error)
            else:
                log.info("[%s] lowered %s in %.1f s on %s (%d linalg ops)", name, os.path.basename(after.model_path),
                         report.seconds, report.worker, len(after.model.ops))
        else:
            it = next(i for i in after.iterations if i.version == before.iterations[-1].version)
            if report.stage == "compile":
                c = it.compile
                if c.ok:
                    log.info("[%s] v%d compiled in %.1f s on %s (%d kernels)", name, it.version,
                             c.compile_seconds, report.worker, c.kernel_count)
                    twin = same_kernels(before.iterations[:-1], c)
                    if twin is not None and not after.compile_only:
                        log.info("[%s] v%d runs the same kernels as v%d: not measured, outcome %s", name,
                                 it.version, twin.version, it.outcome)
                else:
                    log.warning("[%s] v%d did not compile (%s): %s", name, it.version, c.stage, c.error[:300])
            elif it.measure.status == "skipped":
                log.warning("[%s] v%d not measured on %s: %s", name, it.version, report.worker, it.measure.error)
            else:
                m = it.measure
                timing = f"{m.time.median_us:.1f} us" if m.time else "no timing"
                log.info("[%s] v%d measured on %s: %s, %s, outcome %s", name, it.version, report.worker, m.status,
                         timing, it.outcome)
                self._record_experience(after, it)
            for new in after.iterations[len(before.iterations):]:  # its first line: "hypothesis: ..."
                log.info("[%s] v%d %s", name, new.version, new.hypothesis_text.splitlines()[0])
        if after.status in TERMINAL:
            log.info("[%s] %s: %s", name, after.status, after.stop_reason)

    def _record_experience(self, job: JobState, it: IterationState) -> None:
        if self.experience is None or it.hypothesis is None:
            return
        from experience.store import outcome_of

        before = best_iteration([i for i in job.iterations if i.version < it.version])
        try:
            self.experience.record(outcome_of(job.model, _history(before) if before else None, _history(it)))
        except Exception as e:  # the log is advisory; a failure to write it must not stop the job
            log.warning("[%s] could not record v%d in the experience log: %s", job.job_id, it.version, e)

    def _finalize(self, job: JobState) -> JobState:
        reports.write_job_artifacts(job, best_iteration(job.iterations))
        done = self.store.update_job(job.job_id, lambda cur: _mark_reported(cur) if cur.rev == job.rev else None)
        if done is not None:
            log.info("[%s] final report: %s", job.job_id, os.path.join(job.job_dir, "final_report.md"))
        return done or self.store.get_job(job.job_id)  # type: ignore[return-value]


def _final_status(job: JobState) -> str:
    """"done" where a version compiled and, if any version was measured, one was correct; else "failed"."""
    compiled = [i for i in job.iterations if i.compile is not None and i.compile.ok]
    measured = [i for i in compiled if i.measure is not None and i.measure.status != "skipped"]
    return "done" if compiled and (not measured or any(i.measure.correct for i in measured)) else "failed"


def _mark_reported(job: JobState) -> JobState:
    job.reported = True
    return job


def _history(it: IterationState) -> IterationRecord:
    return IterationRecord(
        version=it.version, params=it.params,
        compile=it.compile or CompileResult(it.version, False, "schedule", error="not compiled"),
        measure=it.measure or MeasureResult(it.version, "skipped", error="not measured"),
        hypothesis=it.hypothesis, outcome=it.outcome, speedup_vs_best=it.speedup_vs_best)


# -- operations on jobs from other processes (CLI) --------------------------------------------------
def cancel(store: StateStore, job_id: str) -> JobState | None:
    """Mark the job cancelled: its driver writes the final report, and its task, if it has not started,
    sees the cancel and runs nothing (workers take no remote control: celery_app.configure)."""
    def change(job: JobState) -> JobState | None:
        if job.status in TERMINAL:
            return None
        job.status, job.stop_reason, job.reported = "cancelled", "cancelled by the user", False
        return job

    return store.update_job(job_id, change)


def reopen(store: StateStore, job_id: str) -> JobState | None:
    """Make a cancelled job active again, to be driven from its last complete iteration."""
    def change(job: JobState) -> JobState | None:
        if job.status != "cancelled":
            return None
        job.status = "iterating" if job.model else "queued"
        job.stop_reason, job.reported = "", False
        return job

    return store.update_job(job_id, change)
