"""mdsd.harness.sweep.run_tasks: in this process and on a local Ray instance (skipped without Ray), and the
experiments that use it, resumed and run on Ray, writing the same files as a plain local run."""

from __future__ import annotations

import json
import math
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mdsd.harness.sweep import SweepError, TaskFailure, per_process, run_tasks

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def seeded(task: dict) -> dict:
    """A task whose result depends on its seed only, and that reports the threads it ran on."""
    generator = torch.Generator().manual_seed(task["seed"])
    x = torch.rand(1000, generator=generator, dtype=torch.float64)
    return {"i": task["i"], "sum": x.sum().item(), "first": x[0].item(), "threads": torch.get_num_threads()}


def flaky(task: dict, marker_dir: str) -> int:
    """Fails its first ``task["fail"]`` attempts; each attempt counted in a file (seen by all processes)."""
    path = Path(marker_dir) / f"attempts-{task['i']}"
    with path.open("a") as handle:
        handle.write("x")
    attempt = len(path.read_text())
    if attempt <= task["fail"]:
        raise RuntimeError(f"task {task['i']} fails at attempt {attempt}")
    return task["i"]


def attempts(marker_dir: Path, i: int) -> int:
    path = marker_dir / f"attempts-{i}"
    return len(path.read_text()) if path.exists() else 0


def returns(task: object) -> object:
    return task["value"]


# ---- in this process ---------------------------------------------------------------------------------------


def test_results_come_in_task_order_with_their_seeds_on_num_cpus_threads():
    tasks = [{"i": i, "seed": 1000 - 7 * i} for i in range(6)]
    before = torch.get_num_threads()
    results = run_tasks(seeded, tasks, num_cpus=1, progress=False)
    assert torch.get_num_threads() == before  # restored
    assert [r["i"] for r in results] == list(range(6))
    assert {r["threads"] for r in results} == {1}
    for task, result in zip(tasks, results, strict=True):
        x = torch.rand(1000, generator=torch.Generator().manual_seed(task["seed"]), dtype=torch.float64)
        assert result["first"] == x[0].item()  # exact: the float went through JSON and came back
    assert len({r["sum"] for r in results}) == 6


def test_results_are_json_values_nan_and_exact_floats_included():
    values = [(1, 2), 0.1 + 0.2, math.nan, {"a": [1e-300, None]}]
    results = run_tasks(returns, [{"value": v} for v in values], progress=False)
    assert results[0] == [1, 2] and results[1] == 0.1 + 0.2 and math.isnan(results[2])
    assert results[3] == {"a": [1e-300, None]}


def test_a_task_that_fails_once_is_retried(tmp_path):
    assert run_tasks(flaky, [{"i": 0, "fail": 1}], shared={"marker_dir": str(tmp_path)}, progress=False) == [
        0
    ]
    assert attempts(tmp_path, 0) == 2


def test_a_task_that_always_fails_is_reported_and_every_other_result_kept(tmp_path):
    tasks = [{"i": i, "fail": 2 if i == 2 else 0} for i in range(4)]
    checkpoint = tmp_path / "sweep.jsonl"
    with pytest.raises(SweepError, match=r"1 of 4 tasks failed after 2 attempt") as caught:
        run_tasks(flaky, tasks, shared={"marker_dir": str(tmp_path)}, retries=1, checkpoint=checkpoint)
    error = caught.value
    assert error.results == [0, 1, None, 3]
    (failure,) = error.failures
    assert isinstance(failure, TaskFailure) and (failure.index, failure.task, failure.attempts) == (
        2,
        tasks[2],
        2,
    )
    assert failure.error == "RuntimeError: task 2 fails at attempt 2" and "flaky" in failure.traceback
    assert str(checkpoint) in str(error) and "task 2 {'i': 2, 'fail': 2}" in str(error)
    assert [json.loads(line)["index"] for line in checkpoint.read_text().splitlines()] == [0, 1, 3]
    # resume: only the failed task runs again (its third attempt succeeds)
    results = run_tasks(flaky, tasks, shared={"marker_dir": str(tmp_path)}, checkpoint=checkpoint)
    assert results == [0, 1, 2, 3]
    assert [attempts(tmp_path, i) for i in range(4)] == [1, 1, 3, 1]


def test_a_result_that_is_not_json_is_a_task_failure():
    with pytest.raises(SweepError) as caught:
        run_tasks(returns, [{"value": 1}, {"value": np.arange(2)}], retries=0, progress=False)
    assert caught.value.results == [1, None]
    assert caught.value.failures[0].error.startswith("TypeError: a sweep task must return JSON values")


def test_resume_skips_finished_tasks_and_drops_a_line_cut_off_mid_write(tmp_path):
    tasks = [{"i": i, "fail": 0} for i in range(3)]
    checkpoint = tmp_path / "sweep.jsonl"
    shared = {"marker_dir": str(tmp_path)}
    assert run_tasks(flaky, tasks, shared=shared, checkpoint=checkpoint, progress=False) == [0, 1, 2]
    text = checkpoint.read_text()
    checkpoint.write_text(text[: len(text) - 10])  # the run stopped while writing task 2's line
    assert run_tasks(flaky, tasks, shared=shared, checkpoint=checkpoint, progress=False) == [0, 1, 2]
    assert [attempts(tmp_path, i) for i in range(3)] == [1, 1, 2]
    assert checkpoint.read_text() == text


def test_a_checkpoint_of_another_sweep_is_refused(tmp_path):
    checkpoint = tmp_path / "sweep.jsonl"
    run_tasks(returns, [{"value": 1}, {"value": 2}], checkpoint=checkpoint, progress=False)
    with pytest.raises(ValueError, match="written by another sweep"):
        run_tasks(returns, [{"value": 1}, {"value": 3}], checkpoint=checkpoint, progress=False)
    with pytest.raises(ValueError, match="written by another sweep"):
        run_tasks(returns, [{"value": 1}], checkpoint=checkpoint, progress=False)
    checkpoint.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1 is not a task result"):
        run_tasks(returns, [{"value": 1}], checkpoint=checkpoint, progress=False)
    with pytest.raises(TypeError, match="tasks must be JSON values; task 0"):
        run_tasks(returns, [{"value": np.arange(2)}], checkpoint=tmp_path / "other.jsonl", progress=False)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="retries"):
        run_tasks(returns, [], retries=-1)
    with pytest.raises(ValueError, match="num_cpus"):
        run_tasks(returns, [], num_cpus=0)
    with pytest.raises(ValueError, match="ray must be"):
        run_tasks(returns, [], ray="")
    with pytest.raises(TypeError, match="fn must be callable"):
        run_tasks(None, [])


def test_without_ray_installed_the_error_gives_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ImportError, match=r'pip install -e "\.\[ray\]"'):
        run_tasks(returns, [{"value": 1}], ray="local", progress=False)


def test_per_process_keeps_the_last_value_only():
    first = per_process(np.arange, 3)
    assert per_process(np.arange, 3) is first
    assert per_process(np.arange, 4).size == 4
    assert per_process(np.arange, 3) is not first


# ---- experiments: resumed after a failure, the same files -------------------------------------------------


def comparable(out: Path, name: str) -> dict:
    """Everything an experiment wrote to ``out``, less what may differ between two runs of the same config
    (into the same folder): ``metadata.created`` (when) and ``metadata.run`` (how: --ray, --resume).
    No row field is a timing in these experiments, so the rows are compared whole."""
    payload = json.loads((out / f"{name}.json").read_text())
    del payload["metadata"]["created"], payload["metadata"]["run"]
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".csv", ".md")}
    arrays = {}
    if (out / "per_position.npz").exists():
        with np.load(out / "per_position.npz") as npz:
            arrays = {key: npz[key].tobytes() for key in npz}
    return {"json": payload, "files": files, "arrays": arrays}


REAL = ["--max-positions", "6", "--temperatures", "0.6", "1.0", "--ks", "1", "2", "3"]


def real_acceptance(out: Path, *flags: str, run_task=None) -> Path:
    script = runpy.run_path(str(EXPERIMENTS / "real_acceptance.py"))
    if run_task is not None:
        script["main"].__globals__["run_task"] = run_task(script["run_task"])
    script["main"]([*REAL, "--output-dir", str(out), *flags])
    return out


def recording(calls: list, failing: tuple | None = None):
    """Wraps the script's run_task: records each call's (T, kind, name, k); the task ``failing`` raises."""

    def wrap(run_task):
        def wrapped(task, **shared):
            calls.append((task["temperature"], task["kind"], task["name"], task["k"]))
            if calls[-1] == failing:
                raise RuntimeError("lost node")
            return run_task(task, **shared)

        return wrapped

    return wrap


def test_real_acceptance_resumed_after_a_failed_task_writes_the_files_of_a_plain_run(tmp_path):
    out, calls, failing = tmp_path / "out", [], (1.0, "verifier", "rrs", 3)
    plain = comparable(real_acceptance(out), "real_acceptance")
    with pytest.raises(SweepError, match="RuntimeError: lost node"):
        real_acceptance(out, run_task=recording(calls, failing))
    assert calls.count(failing) == 3  # retried twice
    (checkpoint,) = out.glob("real_acceptance.*.tasks.jsonl")
    assert len(checkpoint.read_text().splitlines()) == len(set(calls)) - 1
    with pytest.raises(FileExistsError, match="--resume"):
        real_acceptance(out)
    calls.clear()
    real_acceptance(out, "--resume", run_task=recording(calls))
    assert calls == [failing]  # only the failed task ran again
    assert not checkpoint.exists()
    assert comparable(out, "real_acceptance") == plain
    meta = json.loads((out / "real_acceptance.json").read_text())["metadata"]
    assert meta["run"] == {"ray": "", "resume": True} and "ray" not in meta["config"]


# ---- on a local Ray instance (2 CPUs) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray", reason='Ray is not installed (pip install -e ".[ray]")')
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_on_ray_the_results_are_the_local_ones_in_task_order(ray_instance):
    tasks = [{"i": i, "seed": 1000 - 7 * i} for i in range(6)]
    assert run_tasks(seeded, tasks, ray="local", progress=False) == run_tasks(seeded, tasks, progress=False)
    assert ray_instance.is_initialized()  # a connection made before is left open


def test_on_ray_a_task_failing_once_is_retried_and_one_always_failing_is_reported(ray_instance, tmp_path):
    tasks = [{"i": i, "fail": fail} for i, fail in enumerate((0, 1, 5, 0))]
    checkpoint = tmp_path / "sweep.jsonl"
    shared = {"marker_dir": str(tmp_path)}
    with pytest.raises(SweepError) as caught:
        run_tasks(flaky, tasks, shared=shared, ray="local", retries=2, checkpoint=checkpoint, progress=False)
    assert caught.value.results == [0, 1, None, 3]
    (failure,) = caught.value.failures
    assert (failure.index, failure.attempts) == (2, 3)
    assert failure.error == "RuntimeError: task 2 fails at attempt 3"
    assert [attempts(tmp_path, i) for i in range(4)] == [1, 2, 3, 1]
    assert sorted(json.loads(line)["index"] for line in checkpoint.read_text().splitlines()) == [0, 1, 3]


def test_on_ray_a_task_needing_more_than_the_cluster_has_is_refused(ray_instance):
    with pytest.raises(ValueError, match="the Ray cluster has"):
        run_tasks(returns, [{"value": 1}], ray="local", num_gpus=1, progress=False)


def test_real_acceptance_on_ray_writes_the_files_of_a_local_run(ray_instance, tmp_path):
    here = comparable(real_acceptance(tmp_path), "real_acceptance")
    on_ray = real_acceptance(tmp_path, "--ray")
    assert comparable(on_ray, "real_acceptance") == here
    assert json.loads((on_ray / "real_acceptance.json").read_text())["metadata"]["run"]["ray"] == "local"


def test_theorems_on_ray_writes_the_files_of_a_local_run(ray_instance, tmp_path):
    main = runpy.run_path(str(EXPERIMENTS / "theorems.py"))["main"]
    here = comparable(main(["--quick", "--output-dir", str(tmp_path)]), "theorems")
    assert comparable(main(["--quick", "--output-dir", str(tmp_path), "--ray", "local"]), "theorems") == here
