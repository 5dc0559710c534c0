"""The trust boundary: a worker runs only files inside its output root, the farm's Redis user reaches the
farm's keys only, Redis listens on loopback unless told otherwise, and the units run as a user of their own."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MODELS, REDIS_PASSWORD, Farm, RedisServer, cli_env, farm_processes, wait_until

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


@pytest.mark.slow
def test_a_worker_runs_no_file_outside_its_output_root(farm, tmp_path):
    """A task naming a model outside the worker's output root (anyone holding the broker's password could
    send one) is refused before the model is read; the same model inside the root is lowered."""
    from orchestrator import tasks
    from orchestrator.celery_app import configure
    from orchestrator.records import LoweringRequest, TaskReport

    f = farm()
    f.start_workers(compile_workers=1, gpu_workers=0)
    configure(f.settings)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    marker = tmp_path / "the model ran"
    evil = (MODELS / "matmul64.py").read_text() + f"\nopen({str(marker)!r}, 'w').close()\n"
    (elsewhere / "evil.py").write_text(evil)
    (f.out / "inside").mkdir(parents=True)
    (f.out / "inside" / "evil.py").write_text(evil)

    def lower(model: Path, job_dir: Path, name: str) -> TaskReport:
        request = LoweringRequest(str(model), str(job_dir), "sm_90a")
        sent = tasks.frontend_task.apply_async((f"b.{name}", request.to_json()), task_id=f"b.{name}:frontend")
        return TaskReport.from_json(sent.get(timeout=180))

    for name, model, job_dir in (("model", elsewhere / "evil.py", f.out / "a"),
                                 ("folder", f.out / "inside" / "evil.py", elsewhere / "b")):
        refused = lower(model, job_dir, name)
        assert "lies outside this worker's output root" in refused.error and refused.model is None, refused.error
        assert not marker.exists()
    assert lower(f.out / "inside" / "evil.py", f.out / "inside", "inside").model is not None
    assert marker.exists()


def _acl_lines() -> list[str]:
    return [line for line in (DEPLOY / "redis.conf").read_text().splitlines() if line.startswith("user ")]


@pytest.mark.slow
def test_the_farm_runs_with_the_deploy_acl_and_reaches_only_its_keys(tmp_path):
    """redis-server with deploy/redis.conf's users: a whole farm job (workers, submit, cancel's revoke)
    works as the `farm` user, which can neither read nor write a key outside the farm's."""
    import redis

    server = RedisServer(tmp_path / "redis", users=_acl_lines())
    server.start()
    f = Farm(server, tmp_path / "out")
    try:
        f.start_workers(compile_workers=1, gpu_workers=1)
        done = f.cli("submit", str(MODELS / "matmul64.py"), "--compile-only")
        assert done.returncode == 0, done.stderr
        assert f.cli("cancel", "matmul64").returncode == 1  # done already; the command itself works
        farm_user = redis.Redis.from_url(server.url)
        for touch in (lambda: farm_user.get("other-app:secret"), lambda: farm_user.set("other-app:x", "1"),
                      farm_user.flushall):
            with pytest.raises(redis.exceptions.NoPermissionError):
                touch()
    finally:
        f.stop()
        server.stop()


def test_redis_listens_on_loopback_and_the_compose_file_publishes_it_there():
    conf = (DEPLOY / "redis.conf").read_text()
    binds = [line.split()[1:] for line in conf.splitlines() if line.startswith("bind ")]
    assert binds == [["127.0.0.1", "-::1"]]
    assert not any("~*" in line.split() for line in _acl_lines()), "the farm's user reaches every key"
    compose = (DEPLOY / "compose.yaml").read_text()
    ports = re.findall(r'ports:\s*\[([^\]]*)\]', compose)
    assert ports and all(p.strip().strip('"').startswith("127.0.0.1:") for group in ports for p in group.split(","))
    # the password reaches redis-server through a file, not its command line (seen by anyone in `ps`)
    command = compose.split("\n  redis:\n", 1)[1].split("\n  compile:\n", 1)[0]
    assert "${REDIS_PASSWORD}" not in command and "$$REDIS_PASSWORD" in command


def test_the_units_run_as_the_farm_user_with_an_output_root():
    for unit in ("mlir-farm-compile.service", "mlir-farm-gpu@.service"):
        text = (DEPLOY / "systemd" / unit).read_text()
        assert "\nUser=mlir-farm\n" in text, unit
    env = (DEPLOY / "systemd" / "mlir-farm.env").read_text()
    assert re.search(r"^MLIR_FARM_OUT_ROOT=/\S+", env, re.M)
    assert "MLIR_FARM_OUT_ROOT" in (DEPLOY / "compose.yaml").read_text()


SECRET_ON_A_COMMAND_LINE = re.compile(r"requirepass|password=|rediss?://[^\s@/]*:[^\s@/]+@")


def _command_lines_under(root: int) -> list[str]:
    """The command lines of `root` and every process descended from it."""
    parents, lines = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue

    def descends(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    return [line for pid, line in lines.items() if descends(pid)]


@pytest.mark.slow
def test_farm_on_one_node_keeps_its_password_off_command_lines(tmp_path):
    """deploy/farm_on_one_node.sh: Redis, workers and submit for one batch. No process it starts shows the
    Redis password in its command line (`ps` shows those to every user) at any moment of the run; the
    workers run the batch's models under its --out; nothing it started is left."""
    out = tmp_path / "out"
    run = subprocess.Popen(["bash", str(DEPLOY / "farm_on_one_node.sh"), "--logs", str(tmp_path / "logs"), "--",
                            str(MODELS / "matmul64.py"), "--compile-only", "--out", str(out)],
                           env=cli_env(PYTHON=sys.executable), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while run.poll() is None:
        seen.update(c for c in _command_lines_under(run.pid) if SECRET_ON_A_COMMAND_LINE.search(c))
        time.sleep(0.02)
    assert not seen, seen
    assert run.returncode == 0, run.stderr.read()
    assert (out / "matmul64" / "v0" / "kernels.ptx").is_file()
    wait_until(lambda: not farm_processes(out), 30, "the script's processes to end")


def test_the_readmes_draw_the_trust_boundary_and_no_example_puts_the_password_on_a_command_line():
    """Model files are Python the workers run, and whoever holds the broker's password can send them one:
    both READMEs say so and name the output root; deploy/README says how to turn TLS on. No example gives
    the password as a command's argument (`ps` shows those to every user)."""
    readme, deploy = (DEPLOY.parent / "README.md").read_text(), (DEPLOY / "README.md").read_text()
    for text in (readme, deploy):
        assert "Trust boundary" in text and "MLIR_FARM_OUT_ROOT" in text
    assert "tls-port" in deploy and "rediss://" in deploy
    examples = [readme, deploy, *((DEPLOY / n).read_text() for n in ("compose.yaml", "redis.conf")),
                (DEPLOY.parent / "orchestrator" / "cli.py").read_text()]
    argument = re.compile(r"--broker[ =]rediss?://[^\s@/]*:[^\s@/]+@|redis-cli .*-a |--requirepass")
    assert not [line for text in examples for line in text.splitlines() if argument.search(line)]
