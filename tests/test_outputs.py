"""What a results file records of where it comes from, and the committed results folders' refusal of a dirty
tree (mdsd.outputs), on a throwaway git checkout standing in for mdsd's."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

import mdsd.outputs
from mdsd.harness.experiment import output_dir, write_results


def _git(folder, *args):
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    subprocess.run(command, cwd=folder, check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A git checkout with one commit, as the checkout mdsd comes from; no MDSD_* variable set."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", "code.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    monkeypatch.setattr(mdsd.outputs, "_CHECKOUT", tmp_path)
    for name in ("MDSD_SCRATCH", "MDSD_COMMIT"):
        monkeypatch.delenv(name, raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True)
    return tmp_path, head.stdout.strip()


def _meta(folder):
    return json.loads((folder / "r.json").read_text())["metadata"]


def test_a_clean_tree_writes_into_results_with_command_revision_versions_device_and_time(checkout):
    top, head = checkout
    write_results(top / "results" / "x", "r", [{"a": 1}], {"n": 2})
    meta = _meta(top / "results" / "x")
    assert meta["git_revision"] == head and meta["revision_from"] == "git" and "git_changes" not in meta
    assert shlex.split(meta["command"]) == sys.argv
    assert meta["versions"]["numpy"] and meta["device"] and meta["created"]
    assert "scratch" not in meta


@pytest.mark.parametrize("folder", ["results/x", "benchmarks/results"])
def test_a_dirty_tree_is_refused_by_the_committed_results_before_any_file(checkout, folder):
    top, _ = checkout
    (top / "code.py").write_text("x = 2\n")
    with pytest.raises(ValueError, match=r"clean tree.*\(code\.py\).*MDSD_SCRATCH"):
        write_results(top / folder, "r", [{"a": 1}], {"n": 2})
    assert not (top / folder / "r.json").exists() and not (top / folder / "r.csv").exists()
    with pytest.raises(ValueError, match="--output-dir"):
        output_dir("x", str(top / folder))  # an experiment stops before its work


def test_a_scratch_run_from_a_dirty_tree_writes_into_results_and_says_so(checkout, monkeypatch):
    top, head = checkout
    (top / "code.py").write_text("x = 2\n")
    monkeypatch.setenv("MDSD_SCRATCH", "trying a fix")
    write_results(top / "results" / "x", "r", [{"a": 1}], {"n": 2})
    meta = _meta(top / "results" / "x")
    assert meta["scratch"] is True and meta["scratch_reason"].startswith("MDSD_SCRATCH=trying a fix;")
    assert meta["git_revision"] == f"{head}-dirty" and meta["git_changes"] == [" M code.py"]


def test_a_dirty_tree_writes_outside_results_and_records_its_changes(checkout, tmp_path_factory):
    top, head = checkout
    (top / "code.py").write_text("x = 2\n")
    for folder in (top / "runs" / "x", tmp_path_factory.mktemp("elsewhere")):
        write_results(folder, "r", [{"a": 1}], {"n": 2})
        meta = _meta(folder)
        assert meta["git_revision"] == f"{head}-dirty" and meta["git_changes"] == [" M code.py"]
        assert "scratch" not in meta


def test_mdsd_commit_names_the_revision_of_a_copy_that_is_not_a_checkout(checkout, monkeypatch):
    top, _ = checkout
    (top / "code.py").write_text("x = 2\n")  # a device machine's copy: its git says nothing of the tree
    monkeypatch.setenv("MDSD_COMMIT", "abc123")
    write_results(top / "results" / "x", "r", [{"a": 1}], {"n": 2})
    meta = _meta(top / "results" / "x")
    assert meta["git_revision"] == "abc123" and meta["revision_from"] == "MDSD_COMMIT"


def test_the_device_is_the_cpu_model_until_cuda_is_used(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert mdsd.outputs.device_name() == mdsd.outputs.provenance()["cpu"] != ""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA H200")
    assert mdsd.outputs.device_name() == "NVIDIA H200"


def test_results_written_one_after_another_do_not_refuse_each_other(checkout):
    """Regression: gpu_speedups' four commands into results/gpu, run in a row, refused from the second on,
    the first's files being uncommitted changes. Changes inside the results folders are not code."""
    top, head = checkout
    write_results(top / "results" / "x", "r", [{"a": 1}], {"n": 2})
    _git(top, "add", "results")
    _git(top, "commit", "-q", "-m", "results")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=top, capture_output=True, text=True
    ).stdout.strip()
    write_results(top / "results" / "x", "r", [{"a": 2}], {"n": 2})  # the committed file now differs
    write_results(top / "results" / "x", "s", [{"a": 3}], {"n": 2})
    assert _meta(top / "results" / "x")["git_revision"] == head  # not dirty: no code changed
    (top / "code.py").write_text("x = 3\n")
    with pytest.raises(ValueError, match=r"\(code\.py\)"):
        write_results(top / "results" / "x", "r", [{"a": 1}], {"n": 2})
