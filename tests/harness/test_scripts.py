"""The experiment scripts' entry point (mdsd.harness.experiment.run_script): bad input is one line
``<script>: error: ...`` and exit status 2, as with the ``mdsd`` command (mdsd.errors); a bug is a traceback,
a line that says so, and status 1. And what the scripts and commands check before any work, in the command
line's words: a config's fields by their flags, the method specs of a sweep."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdsd.cli import main as mdsd_main
from mdsd.harness.experiment import config_from_cli, output_dir, run_script
from mdsd.harness.methods import MethodsConfig
from mdsd.harness.report import ReportConfig

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"


def _exit(main, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        run_script(main, [])
    return stop.value.code, capsys.readouterr().err


def test_bad_input_raised_by_mdsd_is_one_line_and_status_2(capsys):
    def main(argv):
        output_dir("x", "/dev/null/x")  # mdsd's own ValueError about its input

    code, err = _exit(main, capsys)
    assert code == 2
    assert err == "test_scripts.py: error: --output-dir /dev/null/x: cannot write there (Not a directory)\n"

    def missing(argv):
        open("/nonexistent/file.txt")  # an OSError: a missing file, whoever opens it

    code, err = _exit(missing, capsys)
    assert code == 2 and err.startswith("test_scripts.py: error: [Errno 2]") and "Traceback" not in err


def test_a_bug_is_a_traceback_and_status_1(capsys):
    def main(argv):
        np.ones(2) + np.ones(3)  # numpy's ValueError: a bug, not the user's input

    code, err = _exit(main, capsys)
    assert code == 1 and "Traceback" in err
    assert (
        "test_scripts.py: internal error: ValueError" in err
        and "This is a bug in mdsd or test_scripts.py" in err
    )


def test_a_script_s_own_raise_counts_as_bad_input(capsys):
    """... where the script's line is a ``raise`` (its check of a flag); numpy failing on one of its lines
    is a bug (the test above)."""

    def main(argv):
        raise ValueError("--ks must be positive")  # raised in the script's own file

    assert _exit(main, capsys) == (2, "test_scripts.py: error: --ks must be positive\n")


def test_a_script_that_returns_is_not_stopped():
    assert run_script(lambda argv: None, []) is None


def test_every_experiment_script_ends_in_run_script():
    for path in sorted(EXPERIMENTS.glob("*.py")):
        tree = ast.parse(path.read_text())
        last = tree.body[-1]
        assert isinstance(last, ast.If) and ast.unparse(last.test) == "__name__ == '__main__'", path.name
        assert [ast.unparse(s) for s in last.body] == ["run_script(main)"], path.name


@pytest.mark.slow  # two interpreters that import torch and mdsd
@pytest.mark.parametrize(
    "script, flags, message",
    [
        (
            "toy_table",
            ["--output-dir", "/dev/null/x"],
            "toy_table.py: error: --output-dir /dev/null/x: cannot write there (Not a directory)",
        ),
        (
            "batch_efficiency",
            ["--methods", "chain:2/nosuch"],
            "batch_efficiency.py: error: --methods: method 'chain:2/nosuch': unknown verifier 'nosuch'",
        ),
    ],
)
def test_a_script_run_with_bad_input_prints_one_line_regression(script, flags, message, tmp_path):
    """Bug: a bad --output-dir or an unknown verifier in --methods printed a Python traceback (the method
    after three attempts of a sweep task); the mdsd command printed one line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(EXPERIMENTS / f"{script}.py"), "--quick", *flags]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "error" in line or "Traceback" in line]
    assert len(lines) == 1 and lines[0].startswith(message), done.stderr[-2000:]


def test_a_config_s_checks_name_its_flags():
    """A config's check that names a field (``n must be``, ``real_rows must be``) names its flag instead when
    the config comes from the command line; the API keeps the field's name."""
    with pytest.raises(ValueError, match="^real_rows must be >= 1"):
        ReportConfig(real_rows=0)
    with pytest.raises(ValueError, match="^--real-rows must be >= 1, got 0$"):
        config_from_cli(ReportConfig, ["--real-rows", "0"])


def test_mdsd_drafters_names_its_flags_regression(tmp_path, capsys):
    """Bug: `mdsd drafters distill --prompts 0` said "prompts must be a positive int" (the config's field)."""
    argv = ["drafters", "distill", "--target", str(tmp_path), "--out", str(tmp_path / "o"), "--prompts", "0"]
    assert mdsd_main(argv) == 2
    assert capsys.readouterr().err == "mdsd drafters: error: --prompts must be a positive int, got 0\n"


@pytest.mark.parametrize(
    "methods, temperatures, message",
    [
        (("chain:2/nosuch",), (0.6,), "--methods: method 'chain:2/nosuch': unknown verifier 'nosuch'"),
        (
            ("binary:3/block",),
            (0.6,),
            "--methods: method 'binary:3/block': verifier 'block' verifies a chain",
        ),
        (("kary:2/traversal+lookup",), (0.6,), "verifier 'traversal' verifies a whole static mdsd.Tree"),
        (
            ("sequoia:8/rrs",),
            (0.0, 0.6),
            "--methods sequoia:8/rrs: a Sequoia tree is built from the verifier",
        ),
    ],
)
def test_a_sweep_s_methods_are_checked_when_its_config_is_made(methods, temperatures, message):
    """... before a prompt is read or a model loaded (they were checked inside each sweep task, which failed
    three times and ended the run with a traceback)."""
    with pytest.raises(ValueError) as refused:
        MethodsConfig(methods=methods, temperatures=temperatures)
    assert message in str(refused.value)
    MethodsConfig(methods=("hf-assisted-heuristic", "chain:3/block", "sequoia:8/rrs"))
