"""The KernelBench harness (benchmarks/kernelbench.py) on small problems: compile rows, resuming, the time limit,
packing for a GPU node, the fast_p tables (the measurement itself needs a GPU: its rows are hand-made), and the
loop on a GPU node (its GPU the orchestrator's test double)."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import kernelbench  # noqa: E402
from kernelbench import CompileRow, MeasureRow, measure_table  # noqa: E402
from workers.layout import REFERENCE_FILE  # noqa: E402

BREADTH = REPO / "tests" / "data" / "breadth"


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "kernelbench.py"), *args],
                          capture_output=True, text=True, timeout=600)


def test_compile_records_a_row_per_problem_resumes_and_packs_what_a_gpu_node_needs(tmp_path):
    out = tmp_path / "kb"
    models = [str(BREADTH / "mse_loss.py"), str(BREADTH / "random_state.py")]
    done = harness("compile", *models, "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = {r.problem: r for r in (CompileRow.from_json(p.read_text()) for p in (out / "level0").glob("*.compile.json"))}
    assert rows["mse_loss"].ok and rows["mse_loss"].stage == "done" and rows["mse_loss"].kernels >= 1
    assert not rows["random_state"].ok and rows["random_state"].stage == "frontend"
    assert "forward draws random numbers" in rows["random_state"].error
    assert "| 0 | 2 | 1 (50%) | frontend: 1 |" in done.stdout
    again = harness("compile", *models, "--out", str(out))
    assert "2 of 2 problems have a row" in again.stderr and "level0/mse_loss: compiled" not in again.stderr
    packed = harness("pack", *models, "--out", str(out), "--to", str(tmp_path / "jobs.tar.xz"))
    assert packed.returncode == 0 and "1 compiled problems" in packed.stdout, packed.stderr
    with tarfile.open(tmp_path / "jobs.tar.xz") as tar:
        names = set(tar.getnames())
    assert {f"kb/level0/mse_loss/{n}" for n in kernelbench.MEASURE_NEEDS} | {"kb/level0/mse_loss.compile.json"} <= names
    assert not any("random_state" in n for n in names)
    # what a GPU node measured travels with the next pack, so that the next node resumes after it
    (out / "level0" / "mse_loss.measure.json").write_text(MeasureRow("mse_loss", 0, "ok", correct=True).to_json())
    (out / "level0" / "mse_loss" / "reference_timing.json").write_text("{}")
    harness("pack", *models, "--out", str(out), "--to", str(tmp_path / "jobs.tar.xz"))
    with tarfile.open(tmp_path / "jobs.tar.xz") as tar:
        assert {"kb/level0/mse_loss.measure.json", "kb/level0/mse_loss/reference_timing.json"} <= set(tar.getnames())


def test_a_tree_without_peer_times_packs_another_trees_for_the_same_model(tmp_path):
    """torch.compile's compilation is most of a GPU node's time per problem: a tree compiled after a change to the
    compile stage (kb/new beside kb/old) carries the peer times that kb/old's measurement left, for a model.py
    that is the same byte for byte, and none where the model differs."""
    model = str(BREADTH / "mse_loss.py")
    old, new = tmp_path / "kb" / "old", tmp_path / "kb" / "new"
    for tree in (old, new):
        assert harness("compile", model, "--out", str(tree)).returncode == 0
    (old / "level0" / "mse_loss" / REFERENCE_FILE).write_text('{"device": "H100"}')
    archive = tmp_path / "jobs.tar.xz"

    def packed_peers() -> bytes | None:
        assert harness("pack", model, "--out", str(new), "--to", str(archive)).returncode == 0
        with tarfile.open(archive) as tar:
            name = f"new/level0/mse_loss/{REFERENCE_FILE}"
            return tar.extractfile(name).read() if name in tar.getnames() else None

    assert packed_peers() == b'{"device": "H100"}'
    (old / "level0" / "mse_loss" / "model.py").write_text("# another model\n")
    assert packed_peers() is None


def test_keep_lowering_compiles_v0_anew_on_the_recorded_lowering(tmp_path):
    """After a change to the compile stage: --again --keep-lowering redoes v0 alone; the lowering (the hours of
    a suite) stays as it was, and a job folder without a finished lowering is lowered as before."""
    out, model = tmp_path / "kb", str(BREADTH / "mse_loss.py")
    assert harness("compile", model, "--out", str(out)).returncode == 0
    job = out / "level0" / "mse_loss"
    lowering = (job / "model_linalg.mlir").stat().st_mtime_ns
    (job / "v0" / "kernels.ptx").write_text("stale")
    done = harness("compile", model, "--out", str(out), "--again", "--keep-lowering")
    assert done.returncode == 0 and "level0/mse_loss: compiled" in done.stderr, done.stderr
    row = CompileRow.from_json((out / "level0" / "mse_loss.compile.json").read_text())
    assert row.ok and row.lower_s == 0
    assert (job / "model_linalg.mlir").stat().st_mtime_ns == lowering
    assert ".entry" in (job / "v0" / "kernels.ptx").read_text()
    (job / "model_info.json").unlink()  # an unfinished lowering
    assert harness("compile", model, "--out", str(out), "--again", "--keep-lowering").returncode == 0
    assert CompileRow.from_json((out / "level0" / "mse_loss.compile.json").read_text()).lower_s > 0


def test_stale_recompiles_only_the_problems_whose_v0_schedule_changed(tmp_path):
    """After a change to v0's rules, --stale finds the lowered problems whose schedule today differs from the
    params their v0 compiled, without compiling: here the one whose recorded params.json was edited."""
    import json

    out = tmp_path / "kb"
    models = [str(BREADTH / "mse_loss.py"), str(BREADTH / "gelu_tanh.py")]
    assert harness("compile", *models, "--out", str(out)).returncode == 0
    current = harness("compile", *models, "--out", str(out), "--again", "--keep-lowering", "--stale")
    assert current.returncode == 2 and "whose v0 schedule changed" in current.stderr, current.stderr
    params = out / "level0" / "gelu_tanh" / "v0" / "params.json"
    edited = json.loads(params.read_text())
    edited["ops"][0]["block_tile"] = [b * 2 for b in edited["ops"][0]["block_tile"]]
    params.write_text(json.dumps(edited))
    assert [p for _, p in kernelbench.problems([0], models) if kernelbench.v0_stale(out, 0, p)] == [Path(models[1])]
    redone = harness("compile", *models, "--out", str(out), "--again", "--keep-lowering", "--stale")
    assert redone.returncode == 0 and "level0/gelu_tanh: compiled" in redone.stderr, redone.stderr
    assert "mse_loss" not in redone.stderr
    assert not kernelbench.v0_stale(out, 0, Path(models[1]))


def test_sample_takes_every_nth_problem_of_a_level(tmp_path):
    (tmp_path / "level1").mkdir()
    for n in range(1, 8):
        row = CompileRow(f"{n}_P", 1, ok=True, stage="done")
        (tmp_path / "level1" / f"{n}_P.compile.json").write_text(row.to_json())
    done = harness("table", "--out", str(tmp_path), "--level", "1", "--sample", "3")
    assert "| 1 | 3 | 3 (100%) | - |" in done.stdout, done.stdout + done.stderr  # 1, 4 and 7


def test_named_problems_are_measured_in_the_order_they_are_named(tmp_path):
    """A device call's budget cuts the last problems of its list: named problems keep their order (level 3's
    networks first, say); a level's keep the suite's."""
    for level, name in ((1, "9_b"), (1, "10_c"), (3, "2_d"), (3, "11_e")):
        (tmp_path / f"level{level}").mkdir(exist_ok=True)
        (tmp_path / f"level{level}" / f"{name}.compile.json").write_text("{}")
    named = ["level3/11_e.py", "level1/10_c.py", "level3/2_d.py"]
    assert [str(p) for _, p in kernelbench.recorded(tmp_path, [1, 3], named)] == ["11_e", "10_c", "2_d"]
    assert [str(p) for _, p in kernelbench.recorded(tmp_path, [1, 3], [])] == ["9_b", "10_c", "2_d", "11_e"]


def test_a_problem_past_its_time_limit_is_recorded_with_that_reason(tmp_path):
    done = harness("compile", str(BREADTH / "group_norm.py"), "--out", str(tmp_path / "kb"), "--limit", "1")
    row = CompileRow.from_json((tmp_path / "kb" / "level0" / "group_norm.compile.json").read_text())
    assert done.returncode == 0 and not row.ok and row.stage == "crash" and "ran past 1 s" in row.error


def test_fast_p_counts_a_wrong_or_failed_problem_as_not_fast():
    rows = [MeasureRow("a", 1, "ok", correct=True, ours_us=50, eager_us=100, compiled_us=40),   # 2x eager, 0.8x compile
            MeasureRow("b", 1, "ok", correct=True, ours_us=100, eager_us=110, compiled_us=200),  # 1.1x, 2x
            MeasureRow("c", 1, "wrong_result", correct=False, ours_us=10, eager_us=100, compiled_us=100),
            MeasureRow("d", 1, "not compiled")]
    line = measure_table(rows).splitlines()[2]
    # correct 2 of 4; fast_1 vs eager 2/4, fast_1.2 1/4; vs torch.compile 1/4 both; geomeans over the correct
    assert line.startswith("| 1 | 4 | 2 (50%) | 0.50 / 0.25 | 1.48x | 0.25 / 0.25 | 1.26x |"), line


def test_measure_writes_a_row_per_problem_as_the_batch_goes_and_resumes_after_them(tmp_path, monkeypatch, capsys):
    """`measure` over two compiled problems, the GPU child being test_measure_worker's TEST DOUBLE (no GPU
    here): a row per problem, the fault one's too, with a progress line each; a second run finds them
    recorded and starts no GPU process."""
    import shutil

    from test_measure_worker import FAKE_BATCH_CHILD, POC

    from workers.records import CompileResult

    monkeypatch.setattr("workers.measure.gpu_unavailable", lambda: None)
    monkeypatch.setattr("workers.measure.gpu_run.COMMAND", [sys.executable, "-c", FAKE_BATCH_CHILD])
    monkeypatch.setattr(kernelbench, "_precompile_peers", lambda jobs, workers: [])  # torch.compile needs CUDA
    out, items = tmp_path / "kb", []
    for name in ("ok-a", "fault-b"):
        job = out / "level0" / name
        shutil.copytree(POC, job / "v0")
        shutil.copy(POC / "model.py", job / "model.py")
        (job / "v0" / "compile_result.json").write_text(
            CompileResult(version=0, ok=True, stage="done", kernels_digest=f"digest-{name}").to_json())
        items.append((0, Path(f"{name}.py")))
    assert all(kernelbench.kernels_changed(out, 0, p) for _, p in items), "no row yet"
    rows = kernelbench.measure_all(items, out, again=False, timeout_s=5, budget_s=60, peer_workers=8)
    assert sorted(r.status for r in rows) == ["illegal_address", "ok"]
    assert {r.kernels_digest for r in rows} == {"digest-ok-a", "digest-fault-b"}, "a row names the kernels it timed"
    assert not any(kernelbench.kernels_changed(out, 0, p) for _, p in items)
    assert MeasureRow.from_json((out / "level0" / "fault-b.measure.json").read_text()).status == "illegal_address"
    err = capsys.readouterr().err
    assert "level0/ok-a: ok, ours" in err and "level0/fault-b: illegal_address: " in err
    fault = MeasureRow("fault-b", 0, "illegal_address", error="CUDA error: an illegal memory access\nstack")
    assert kernelbench.progress(fault) == "illegal_address: CUDA error: an illegal memory access"
    wrong = MeasureRow("w", 0, "wrong_result", ours_us=2.0, max_abs_err=0.0097)
    assert kernelbench.progress(wrong).startswith("wrong_result (max abs error 0.0097), ours 2.0 us")
    timed = MeasureRow("t", 0, "ok", correct=True, ours_us=10.0,
                       kernel_us={"forward_kernel": 2.0, "forward_kernel_0": 6.0})
    assert kernelbench.progress(timed).endswith("slowest of 2 kernels alone: forward_kernel_0 6.0 us (75%)")
    (out / "level0" / "starts.log").unlink()
    assert len(kernelbench.measure_all(items, out, False, 5, 60, 8)) == 2
    assert not (out / "level0" / "starts.log").exists(), "recorded rows are not measured again"
    # v0 compiled anew to other kernels: --changed picks that problem alone
    (out / "level0" / "ok-a" / "v0" / "compile_result.json").write_text(
        CompileResult(version=0, ok=True, stage="done", kernels_digest="digest-2").to_json())
    assert [p.stem for _, p in items if kernelbench.kernels_changed(out, 0, p)] == ["ok-a"]


def test_warm_ups_are_admitted_while_their_gpu_memory_fits(tmp_path):
    """Four warm-ups of 40 units each on a budget of 100 run two at a time; one larger than the budget runs
    alone; without a budget (no nvidia-smi) all run at once. The estimate comes from model_info.json."""
    import threading
    import time

    from workers.records import ModelInfo

    def peak(admission, needs: list[int]) -> int:
        seen, lock, at_once = [], threading.Lock(), [0]

        def work(need: int) -> None:
            with admission.hold(need):
                with lock:
                    at_once[0] += 1
                    seen.append(at_once[0])
                time.sleep(0.05)
                with lock:
                    at_once[0] -= 1

        threads = [threading.Thread(target=work, args=(n,)) for n in needs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return max(seen)

    assert peak(kernelbench.MemoryAdmission(100), [40] * 4) == 2
    assert peak(kernelbench.MemoryAdmission(100), [500, 40]) == 1
    assert peak(kernelbench.MemoryAdmission(None), [40] * 4) == 4
    info = ModelInfo(name="m", model_path="m.py", ops=[], input_shapes=[[1024, 1024]], input_dtypes=["float16"],
                     weight_names=[], output_shapes=[[1024]], export_seconds=0.0)
    (tmp_path / "model_info.json").write_text(info.to_json())
    assert kernelbench.warm_up_bytes(tmp_path) == int(kernelbench.WARM_MEMORY_FACTOR * (1024 * 1024 * 2 + 1024 * 4))


def test_a_record_names_the_commit_the_caller_gives_else_head_marked_when_the_tree_differs(tmp_path, monkeypatch):
    """A GPU node's copy of the tree named a stale git HEAD in its records: FARM_COMMIT overrides it, and a
    tree that differs from HEAD says so."""
    import subprocess

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    monkeypatch.delenv("FARM_COMMIT", raising=False)
    assert kernelbench._commit() in (head, head + "+changes")
    monkeypatch.setenv("FARM_COMMIT", "abc1234")
    kernelbench.record(str(tmp_path / "r.md"), "t", "| table |", "GPU")
    assert "Commit: abc1234." in (tmp_path / "r.md").read_text()


def test_loop_runs_the_farm_on_each_compiled_problem_from_its_lowering_and_keeps_its_best_version(tmp_path):
    """On a GPU node (no torch-mlir there: a stand-in package that fails to import takes its place) the loop
    reuses each job folder's lowering; the GPU is the orchestrator's TEST DOUBLE (FakeGpuMeasure, synthetic
    timings). A row per problem names its best correct version; the table compares it with v0's row."""
    out = tmp_path / "kb"
    model = str(BREADTH / "gelu_tanh.py")
    assert harness("compile", model, "--out", str(out)).returncode == 0
    (out / "level0" / "gelu_tanh.measure.json").write_text(
        MeasureRow("gelu_tanh", 0, "ok", correct=True, ours_us=100.0, eager_us=25.0).to_json())
    (tmp_path / "no_mlir" / "torch_mlir").mkdir(parents=True)
    (tmp_path / "no_mlir" / "torch_mlir" / "__init__.py").write_text("raise ImportError('no torch-mlir here')\n")
    env = {**os.environ, "MLIR_FARM_MEASURE": "test_orchestrator_doubles:FakeGpuMeasure.measure_iteration",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "no_mlir"), str(REPO / "tests"), str(REPO)])}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "kernelbench.py"), "loop", model, "--out",
                           str(out), "--iterations", "3", "--compile-workers", "1", "--budget", "300"],
                          capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    row = MeasureRow.from_json((out / "level0" / "gelu_tanh.loop.json").read_text())
    assert row.correct and row.ours_us > 0 and "TEST DOUBLE" in row.device and 0 <= row.version < 3
    job = out / "loop" / "level0" / "gelu_tanh"
    assert (job / "v0" / "kernels.ptx").exists() and (job / "final_report.md").exists()
    assert f"| level0/gelu_tanh | v{row.version} | {100.0 / row.ours_us:.2f}x |" in done.stdout
