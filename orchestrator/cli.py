"""`orchestrator`: submit models to the farm, follow, cancel and resume jobs, and write reports."""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import tempfile
import time

from orchestrator.records import TERMINAL, JobState
from orchestrator.settings import EMBEDDED_DIR, FarmSettings, redact
from workers.atomic import write_text

log = logging.getLogger("orchestrator")

EXAMPLES = """examples:
  orchestrator submit models/*.py --iterations 6 --out runs  # embedded farm: nothing to start first
  orchestrator submit a.py b.py --compile-only            # exit 0 only if every model compiled
  orchestrator status                                      # the jobs in the latest submit's --out
  orchestrator watch                                       # live progress of the latest batch
  orchestrator status matmul64                             # one job (id or model name)
  orchestrator cancel 20261202-101500.matmul64
  orchestrator resume                                      # the latest batch's unfinished jobs
  orchestrator resume 20261202-101500.matmul64
  orchestrator report                                      # final reports, table and plot of the latest batch
  orchestrator gpus                                        # GPU timelines of the latest batch; overlaps
  orchestrator replay matmul64 v2                          # rebuild v2's kernels from its folder alone
  orchestrator experience recommend --help
  . /etc/mlir-farm/farm.env; export MLIR_FARM_BROKER      # a Redis farm (its password stays out of `ps`)
  orchestrator workers
Without --broker (or $MLIR_FARM_BROKER) the farm is embedded: its queue, results and state live
in OUT/.farm and `submit`/`resume` start and stop the worker processes themselves."""
ENV_OUT = "MLIR_FARM_OUT"
ENV_EXPERIENCE = "MLIR_FARM_EXPERIENCE"
EXPERIENCE_FILE = "experience.jsonl"  # in OUT, next to the batch reports


class UserError(Exception):
    """A problem the user can fix; printed as one paragraph, no traceback."""


# -- helpers shared by the commands ---------------------------------------------------------------
def _last_out_file() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "mlir-farm", "last-out")


def _out_dir(given: str | None) -> str:
    """--out, else $MLIR_FARM_OUT, else the folder of the latest submit or resume, else farm-out."""
    if given or os.environ.get(ENV_OUT):
        return given or os.environ[ENV_OUT]
    try:
        with open(_last_out_file()) as f:
            return f.read().strip() or "farm-out"
    except FileNotFoundError:
        return "farm-out"


def _remember_out(out: str) -> None:
    try:
        write_text(_last_out_file(), os.path.abspath(out) + "\n")
    except OSError as e:  # a convenience: the next command can still be given --out
        log.debug("could not remember %s: %s", out, e)


def _experience_log(out: str, given: str | None = None) -> str:
    """The experience log `submit` appends to and `experience` reads: --experience/--log, else
    $MLIR_FARM_EXPERIENCE, else OUT/experience.jsonl."""
    return given or os.environ.get(ENV_EXPERIENCE) or os.path.join(out, EXPERIENCE_FILE)


def _farm(args) -> tuple[FarmSettings, object]:
    """The farm's settings and state store; the jobs of OUT's folders put back where the store lost them."""
    from orchestrator.celery_app import configure
    from orchestrator.state import JOB_FILE, StoreUnreachable, open_store, recover_jobs

    settings = FarmSettings.resolve(args.broker, args.out)
    try:
        store = open_store(settings.state_url)
        store.probe()
    except (ValueError, StoreUnreachable) as e:
        raise UserError(str(e)) from None
    configure(settings, worker=False)  # the driver waits out a Redis outage itself, not inside Celery's reads
    recovered = recover_jobs(store, args.out)
    if recovered:
        log.warning("the farm's state store did not know %d job(s) whose folders are in %s (a Redis restarted "
                    "without its data?): put back from their %s", len(recovered), args.out, JOB_FILE)
    return settings, store


def _find_job(store, key: str) -> JobState:
    """A job by id, or by model name (the newest job of that model)."""
    job = store.get_job(key)
    if job is not None:
        return job
    matches = [j for j in store.jobs() if j.job_id.split(".", 1)[-1] == key]
    if not matches:
        raise UserError(f"no job {key!r}; `orchestrator status` lists the jobs")
    return matches[-1]


def _batch_jobs(store, batch: str | None = None) -> list[JobState]:
    """The jobs of `batch`, or of the latest batch when none is named."""
    jobs = store.jobs()
    if not jobs:
        return []
    batch = batch or jobs[-1].batch
    return [j for j in jobs if j.batch == batch]


def _new_batch() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def _job_dir(out: str, name: str) -> str | None:
    """OUT/<model name>, the output contract's place for the job; None if an earlier job's iterations
    are there (never overwritten). A folder holding only a lowered model is taken as the job's start."""
    job_dir = os.path.abspath(os.path.join(out, name))
    taken = os.path.isdir(job_dir) and any(entry.startswith("v") and entry[1:].isdigit()
                                           for entry in os.listdir(job_dir))
    return None if taken else job_dir


def _name_problem(name: str) -> str | None:
    """Why a model of this name cannot have the job folder OUT/<name>, or None."""
    from orchestrator.reports import BATCH_FILES

    if name.startswith("."):
        return f"a model's name may not start with '.' (OUT/{name} would be hidden, or the embedded farm's {EMBEDDED_DIR})"
    if name in (*BATCH_FILES, EXPERIENCE_FILE):
        return f"OUT/{name} is where the batch keeps its {name}"
    return None


def _check_writable(out: str) -> None:
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror or e}); give a folder you may write to") from None


def _stage_of(job: JobState) -> str:
    from orchestrator.loop import current_task

    task = current_task(job)
    if task is None or job.status == "queued":
        return job.status
    stage = {"frontend": "lowering", "compile": "compiling", "measure": "measuring"}[task[1]]
    return stage if task[1] == "frontend" else f"{stage} v{job.iterations[-1].version}"


def _job_row(job: JobState) -> str:
    from orchestrator.reports import best_iteration

    best = best_iteration(job.iterations)
    best_text = f"v{best.version} {best.measure.time.median_us:.1f} us" if best else "-"
    note = job.stop_reason or job.error if job.status in TERMINAL else ""
    return f"{job.job_id:<40} {_stage_of(job):<16} {len(job.iterations):>4} {best_text:>16}  {note[:90]}"


def _table(jobs: list[JobState]) -> str:
    head = f"{'JOB':<40} {'STATE':<16} {'VERS':>4} {'BEST':>16}  NOTE"
    return "\n".join([head] + [_job_row(j) for j in jobs])


def _succeeded(job: JobState) -> bool:
    """Done, and did what was asked: compiled (--compile-only), or measured at least one version."""
    if job.status != "done":
        return False
    if job.compile_only:
        return job.iterations[-1].compile.ok
    return any(it.measure is not None and it.measure.status != "skipped" for it in job.iterations)


def _experience(args):
    """The experience log the advisor reads and the driver appends to (not needed to compile only)."""
    if getattr(args, "compile_only", False):
        return None
    from experience.store import ExperienceStore

    return ExperienceStore(_experience_log(args.out, args.experience))


def _drive(args, settings: FarmSettings, store, job_ids: list[str]) -> list[JobState]:
    """Run the driver over the jobs; on the embedded farm, with workers started for the run."""
    from orchestrator.embedded import FarmBusy, embedded_farm
    from orchestrator.loop import Driver

    _remember_out(args.out)
    driver = Driver(store, experience=_experience(args))
    if not settings.is_embedded:
        log.info("farm %s: %d job(s) queued; progress follows (Ctrl-C leaves them resumable)",
                 redact(settings.broker_url), len(job_ids))
        return driver.run(job_ids)
    try:
        with embedded_farm(settings, args.out, args.compile_workers):
            return driver.run(job_ids)
    except FarmBusy as e:
        raise UserError(str(e)) from None


def _finish_batch(out: str, jobs: list[JobState]) -> None:
    from orchestrator.reports import write_batch_report

    if jobs:
        paths = write_batch_report(jobs, out)
        print(_table(jobs))
        print(f"batch summary: {paths[0]}")


# -- commands ---------------------------------------------------------------------------------------
def cmd_submit(args) -> int:
    from orchestrator import user_schedule
    from orchestrator.celery_app import MAX_LOWERING_S

    if args.lowering_timeout is not None and not 0 < args.lowering_timeout <= MAX_LOWERING_S:
        raise UserError(f"--lowering-timeout must be more than 0 and at most {MAX_LOWERING_S} s (the frontend task's limit)")
    if args.lowering_memory_gb is not None and args.lowering_memory_gb <= 0:
        raise UserError("--lowering-memory-gb must be more than 0")
    limits = {k: v for k, v in (("seconds", args.lowering_timeout), ("memory_gb", args.lowering_memory_gb)) if v}
    start_params = None
    if args.schedule:
        try:
            start_params = user_schedule.read(args.schedule, args.chip)
        except (OSError, ValueError) as e:
            raise UserError(f"--schedule {args.schedule}: not a schedule for this job: {e}") from None
    _check_writable(args.out)
    settings, store = _farm(args)
    batch = _new_batch()
    job_ids, missing = [], []
    for path in args.models:
        name = os.path.splitext(os.path.basename(path))[0]
        if not os.path.isfile(path):
            missing.append(path)
            log.error("%s: no such model file; the other models go on", path)
            continue
        if problem := _name_problem(name):
            missing.append(path)
            log.error("%s: %s; rename the file; the other models go on", path, problem)
            continue
        job_dir = _job_dir(args.out, name)
        if job_dir is None or f"{batch}.{name}" in job_ids:
            missing.append(path)
            log.error("%s: %s already holds a job of that name; resume it (orchestrator resume %s) or submit "
                      "with another --out; the other models go on", path, os.path.join(args.out, name), name)
            continue
        job = JobState(job_id=f"{batch}.{name}", batch=batch, model_path=os.path.abspath(path),
                       job_dir=job_dir, chip=args.chip, tf32=args.tf32,
                       max_iterations=args.iterations, compile_only=args.compile_only,
                       status="queued", created=time.time(), start_params=start_params, lowering_limits=limits)
        os.makedirs(job_dir, exist_ok=True)
        shutil.copyfile(path, job.model_copy)  # the workers read this copy, inside the farm's output root
        store.create_job(job)
        job_ids.append(job.job_id)
    log.info("batch %s: %d job(s) in %s", batch, len(job_ids), args.out)
    jobs = _drive(args, settings, store, job_ids) if job_ids else []
    _finish_batch(args.out, jobs)
    if len(jobs) < len(job_ids):
        log.error("%d job(s) of the batch are gone from the farm's state store", len(job_ids) - len(jobs))
    unmeasured = [j for j in jobs if j.status == "done" and not j.compile_only and not _succeeded(j)]
    if unmeasured:
        log.error("%d job(s) measured nothing: %s", len(unmeasured), unmeasured[0].stop_reason)
    return 0 if len(jobs) == len(job_ids) and all(map(_succeeded, jobs)) and not missing else 1


def cmd_status(args) -> int:
    _, store = _farm(args)
    if args.job:
        job = _find_job(store, args.job)
        if args.json:
            print(job.to_json(indent=2))
            return 0
        print(_table([job]))
        for it in job.iterations:
            timing = f"{it.measure.time.median_us:.1f} us" if it.measure and it.measure.time else "-"
            print(f"  v{it.version}: {it.stage:<9} outcome {it.outcome:<8} {timing:>12}  {it.hypothesis_text.splitlines()[0]}")
        print(f"  folder: {job.job_dir}")
        return 0
    jobs = store.jobs()
    print(_table(jobs) if jobs else f"no jobs in {os.path.abspath(args.out)} yet; `orchestrator submit MODEL.py` starts one")
    return 0


def cmd_watch(args) -> int:
    _, store = _farm(args)
    try:
        while True:
            jobs = [_find_job(store, args.job)] if args.job else _batch_jobs(store)
            if sys.stdout.isatty():
                print("\033[2J\033[H", end="")
            print(time.strftime("%H:%M:%S"), f"{sum(j.status in TERMINAL for j in jobs)}/{len(jobs)} jobs finished")
            print(_table(jobs))
            if all(j.status in TERMINAL for j in jobs):
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def cmd_cancel(args) -> int:
    from orchestrator.loop import cancel

    _, store = _farm(args)
    job = _find_job(store, args.job)
    if cancel(store, job.job_id) is None:
        print(f"{job.job_id} is already {job.status}")
        return 1
    print(f"{job.job_id} cancelled; its driver writes the final report (`orchestrator resume` takes it up again)")
    return 0


def cmd_resume(args) -> int:
    from orchestrator.loop import reopen

    settings, store = _farm(args)
    if args.jobs:
        jobs = [_find_job(store, key) for key in args.jobs]
    else:
        jobs = [j for j in _batch_jobs(store) if j.status not in TERMINAL or j.status == "cancelled"]
        if not jobs:
            raise UserError(f"the latest batch in {args.out} has no unfinished job; `orchestrator status` lists them")
    for job in jobs:
        if job.status == "cancelled":
            reopen(store, job.job_id)
        elif job.status in TERMINAL:
            raise UserError(f"{job.job_id} is {job.status}; only cancelled or interrupted jobs can be resumed")
        done = [it.version for it in job.iterations if it.stage == "complete"]
        log.info("[%s] resuming after %s", job.job_id, f"v{done[-1]}" if done else "no complete iteration")
    finished = _drive(args, settings, store, [j.job_id for j in jobs])
    _finish_batch(args.out, finished)
    return 0 if len(finished) == len(jobs) and all(map(_succeeded, finished)) else 1


def cmd_report(args) -> int:
    from orchestrator.reports import best_iteration, write_batch_report, write_job_artifacts

    _, store = _farm(args)
    jobs = _batch_jobs(store, args.batch)
    if not jobs:
        raise UserError("no jobs to report on" + (f" in batch {args.batch}" if args.batch else ""))
    for job in jobs:
        write_job_artifacts(job, best_iteration(job.iterations))
    paths = write_batch_report(jobs, args.out)
    print(_table(jobs))
    for job in jobs:
        print(f"{job.job_id}: {os.path.join(job.job_dir, 'final_report.md')}")
    print("batch: " + ", ".join(paths))
    return 0


def cmd_workers(args) -> int:
    from orchestrator.heartbeat import is_alive

    settings, store = _farm(args)
    workers = store.workers()
    print(f"farm: {redact(settings.broker_url)}")
    if not workers:
        print("no workers have announced themselves" +
              (" (the embedded farm has workers only while submit/resume runs)" if settings.is_embedded else ""))
        return 1
    now = time.time()
    print(f"{'WORKER':<36} {'QUEUES':<10} {'GPU':<6} {'PID':>8}  STATE")
    for w in workers:
        state = "up" if is_alive(w, now) else f"silent for {now - w.last_seen:.0f} s"
        print(f"{w.hostname:<36} {','.join(w.queues):<10} {w.gpus or 'all':<6} {w.pid:>8}  {state}")
    up = [w for w in workers if is_alive(w, now)]
    print(f"{len(up)} up: {sum('compile' in w.queues for w in up)} compile, {sum('gpu' in w.queues for w in up)} gpu")
    return 0


def cmd_gpus(args) -> int:
    from orchestrator.gpus import gpu_usage, usage_text

    _, store = _farm(args)
    jobs = store.jobs() if args.all else _batch_jobs(store, args.batch)
    if not jobs:
        raise UserError("no jobs to check" + (f" in batch {args.batch}" if args.batch else ""))
    usage = gpu_usage(jobs)
    print(usage_text(usage))
    return 1 if usage.overlaps else 0


def cmd_replay(args) -> int:
    from workers.compile import replay

    job_dir = args.job if os.path.isdir(args.job) else os.path.join(args.out, args.job)
    if not os.path.isdir(job_dir):
        raise UserError(f"{args.job} is neither a job folder nor a model name in {args.out}")
    return replay.main([job_dir] + ([args.version] if args.version else [])
                       + (["--from-params"] if args.from_params else []))


# -- parser -----------------------------------------------------------------------------------------
def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", help="output folder: one job folder per model, OUT/<model name> (default: "
                                      "$MLIR_FARM_OUT, else the latest submit's or resume's, else farm-out)")
    common.add_argument("--broker", help="Redis URL of a farm, e.g. redis://farm:PASSWORD@host:6379/0; better in "
                                         "$MLIR_FARM_BROKER, out of `ps` (default: that, else the embedded farm in "
                                         "OUT/.farm)")
    common.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    parser = argparse.ArgumentParser(prog="orchestrator", description=__doc__, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=func)
        return p

    def add_farm_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--compile-workers", type=_at_least_one, default=2,
                       help="embedded farm: compile worker processes (default 2)")
        p.add_argument("--experience", metavar="PATH",
                       help=f"experience log (default ${ENV_EXPERIENCE}, else OUT/{EXPERIENCE_FILE})")

    p = add("submit", cmd_submit, "optimize models (KernelBench-format .py files), one job each, until done")
    p.add_argument("models", nargs="+", metavar="MODEL.py")
    p.add_argument("--iterations", type=_at_least_one, default=6, help="most versions per model, v0 included (default 6)")
    p.add_argument("--compile-only", action="store_true",
                   help="lower and compile v0 only (a v0 that does not compile is repaired on the conservative path, "
                        "within --iterations); exit 0 only if every model compiled")
    p.add_argument("--chip", default="sm_90a", help="target GPU architecture (default sm_90a)")
    p.add_argument("--schedule", metavar="PARAMS.json",
                   help="start from this ScheduleParams instead of v0's own (its chip, precision and ops must be the job's)")
    p.add_argument("--tf32", action="store_true",
                   help="let fp32 models compute in TF32: f32 matmuls on tensor cores, judged with TF32's tolerance "
                        "(5e-3) against PyTorch peers that use TF32 too")
    p.add_argument("--lowering-timeout", type=float, metavar="S",
                   help="seconds a model's lowering may take before it fails with that reason "
                        "(default: LoweringLimits in workers/frontend.py)")
    p.add_argument("--lowering-memory-gb", type=float, metavar="GB",
                   help="resident memory a model's lowering may take before it fails with that reason "
                        "(default: LoweringLimits in workers/frontend.py)")
    add_farm_options(p)

    p = add("status", cmd_status, "list jobs, or show one job's iterations")
    p.add_argument("job", nargs="?", help="job id or model name")
    p.add_argument("--json", action="store_true", help="print the job's state record as JSON")

    p = add("watch", cmd_watch, "live progress of the latest batch (or one job) until it finishes")
    p.add_argument("job", nargs="?")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")

    p = add("cancel", cmd_cancel, "cancel a job; its task finishes, or does not start if queued; nothing more starts")
    p.add_argument("job")

    p = add("resume", cmd_resume, "continue cancelled or interrupted jobs from their last complete iteration")
    p.add_argument("jobs", nargs="*", metavar="JOB", help="job ids or model names (default: the latest batch's "
                                                          "unfinished jobs)")
    add_farm_options(p)

    p = add("report", cmd_report, "write final reports, a table across models and a plot of time per iteration")
    p.add_argument("--batch", help="batch id (default: the latest)")

    add("workers", cmd_workers, "which workers, queues and GPUs are up")

    p = add("gpus", cmd_gpus, "per physical GPU: measurements, busy time, and any two that overlapped (exit 1 if so)")
    p.add_argument("--batch", help="batch id (default: the latest)")
    p.add_argument("--all", action="store_true", help="every job in the state store, all batches together")

    p = add("replay", cmd_replay, "rebuild a version's kernels from its job folder alone (model_linalg.mlir, "
                                  "params.json, transform.mlir, pass_pipeline.txt); exit 0 if they are the recorded "
                                  "kernels.ptx and config.json byte for byte, 1 if not")
    p.add_argument("job", help="job folder, or model name in --out")
    p.add_argument("version", nargs="?", help="vN (default: every version that compiled)")
    p.add_argument("--from-params", action="store_true",
                   help="first write transform.mlir and pass_pipeline.txt again from params.json with today's "
                        "compiler: does a change to the compiler keep the recorded kernels?")

    # its own parser (experience/cli.py) takes everything after the word, options included
    sub.add_parser("experience", help="the experience log: recommend | export (see experience --help)",
                   add_help=False)
    return parser


def _interrupted(signum, frame) -> None:
    """SIGTERM (a `timeout`, a scheduler) ends the CLI as Ctrl-C does: workers stopped, jobs resumable."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["experience"]:
        from experience import cli as experience_cli

        return experience_cli.main(argv[1:], default_log=_experience_log(_out_dir(None)))
    args = build_parser().parse_args(argv)
    args.out = _out_dir(args.out)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)-7s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("celery", "kombu", "amqp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        return args.func(args)
    except UserError as e:
        print(f"orchestrator: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\norchestrator: interrupted; unfinished jobs can be continued with `orchestrator resume`",
              file=sys.stderr)
        return 130
    except Exception as e:  # the interface is a message; the traceback goes to the log at debug level
        log.debug("unexpected error", exc_info=True)
        print(f"orchestrator: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
