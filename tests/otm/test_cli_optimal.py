"""``mdsd optimal``: built-in example, files, JSON output, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import mdsd
from mdsd.cli import main
from mdsd.cli.optimal import EXAMPLE_P, EXAMPLE_Q


def run_json(capsys, *argv: str) -> dict:
    assert main(["optimal", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_builtin_example_matches_the_solver(capsys):
    record = run_json(capsys)
    assert record["example"] is True
    assert record["law"] == "iid" and record["k"] == 2 and record["method"] == "dual"
    expected = mdsd.optimal_acceptance(EXAMPLE_P, EXAMPLE_Q, mdsd.IID(2), method="lp")
    assert record["value"] == pytest.approx(expected, abs=1e-9)
    assert record["cut_value"] == pytest.approx(record["value"], abs=1e-12)


def test_files_laws_and_methods(tmp_path, capsys):
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    np.save(tmp_path / "p.npy", p)
    (tmp_path / "q.json").write_text(json.dumps(q.tolist()))
    files = ["--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.json")]
    for law, k, method in [
        ("wor", 3, "auto"),
        ("hub", 2, "maxflow"),
        ("greedy", 3, "lp"),
        ("topk", 2, "coupling"),
    ]:
        record = run_json(capsys, *files, "--law", law, "--k", str(k), "--method", method)
        expected = mdsd.optimal_acceptance(p, q, mdsd.law_from_name(law, k))
        assert record["value"] == pytest.approx(expected, abs=1e-8)
        assert record["n"] == 4 and record["example"] is False


def test_text_output_shows_value_and_certificate(capsys):
    assert main(["optimal", "--law", "without_replacement", "--k", "2"]) == 0
    out = capsys.readouterr().out
    value = mdsd.optimal_acceptance(EXAMPLE_P, EXAMPLE_Q, mdsd.WithoutReplacement(2))
    assert f"α* = {value:.12g}" in out
    assert "certificate: A = {" in out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--p", "P.json"], "give both --p and --q"),
        (["--law", "beam"], "--law: law must be one of iid, without_replacement (wor), hub"),
        (["--law", "hub", "--k", "3"], "--law hub --k 3: the hub law has k = 2"),
        (["--method", "simplex"], "--method must be one of auto, dual, maxflow, lp, coupling; got 'simplex'"),
        (["--k", "0"], "--k must be >= 1"),
        # regression: the tuple count was printed in full (91 digits)
        (["--k", "100", "--method", "maxflow"], "too many draft tuples (2.04e+90 > 1,000,000)"),
        (["--p", "P.json", "--q", "missing.json"], "--q missing.json: no such file"),
        (["--p", "P.json", "--q", "Q.txt"], "expected a .npy or .json file"),
        (["--p", "P.json", "--q", "BAD.json"], "not valid JSON"),
        (["--p", "P.json", "--q", "DICT.json"], "expected a JSON list"),
        (["--p", "P.json", "--q", "SHORT.json"], "--p and --q must hold vectors over one vocabulary"),
        (["--p", "P.json", "--q", "NEG.json"], "--q NEG.json has negative"),
        (["--p", "P.json", "--q", "SHORT.json", "--law", "wor", "--k", "3"], "over one vocabulary"),
        # the flags, not the Python API's words (regression: "use optimal_acceptance", "law must be")
        (["--p", "ROWS.json", "--q", "ROWS.json"], "--p ROWS.json must hold one vector"),
        (
            ["--p", "P.json", "--q", "P.json", "--law", "wor", "--k", "4"],
            "--q P.json has 3 tokens with positive",
        ),
        (["--k", "8", "--method", "coupling"], "for --method coupling; use --method dual"),
    ],
)
def test_errors_are_one_line_with_status_2(tmp_path, capsys, monkeypatch, argv, match):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "P.json").write_text("[0.5, 0.25, 0.25]")
    (tmp_path / "Q.txt").write_text("0.5 0.5")
    (tmp_path / "BAD.json").write_text("[0.5, 0.5")
    (tmp_path / "DICT.json").write_text('{"q": [0.5, 0.5]}')
    (tmp_path / "SHORT.json").write_text("[0.5, 0.5]")
    (tmp_path / "NEG.json").write_text("[1.5, -0.25, -0.25]")
    (tmp_path / "ROWS.json").write_text("[[0.5, 0.5], [0.25, 0.75]]")
    assert main(["optimal", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mdsd optimal: error: ")
    assert match in err


def test_a_fresh_interpreter_runs_the_example():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from mdsd.cli import main; sys.exit(main())",
            "optimal",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["value"] == pytest.approx(
        mdsd.optimal_acceptance(EXAMPLE_P, EXAMPLE_Q, mdsd.IID(2)), abs=1e-12
    )


@pytest.mark.parametrize("first", ["lp", "coupling"])
def test_json_output_parses_for_every_method_in_a_fresh_interpreter(first):
    """HiGHS prints a banner on the C stdout the first time a process creates a solver (LP and the cvxpy
    coupling both create one); stdout of --json must still be one JSON object per call."""
    methods = [first] + [m for m in ("lp", "coupling", "maxflow", "dual", "auto") if m != first]
    code = (
        "from mdsd.cli import main\n"
        f"for method in {methods!r}:\n"
        "    main(['optimal', '--json', '--law', 'wor', '--k', '3', '--method', method])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert len(lines) == len(methods)
    records = [json.loads(line) for line in lines]
    assert [r["method"] for r in records[:4]] == methods[:4] and records[4]["method"] == "dual"
    values = [r["value"] for r in records]
    assert max(values) - min(values) <= 1e-9
    for r in records:
        assert r["status"] == ("conjectured" if r["method"] == "dual" else "optimal")
        assert r["basis"] and r["error"] >= 0.0


def test_coupling_too_large_is_a_one_line_error(tmp_path, capsys):
    """--method coupling --k 8 at n = 4 (262,144 variables) ran for minutes; now refused at once."""
    (tmp_path / "p.json").write_text("[0.4, 0.3, 0.2, 0.1]")
    files = ["--p", str(tmp_path / "p.json"), "--q", str(tmp_path / "p.json")]
    assert main(["optimal", *files, "--method", "coupling", "--k", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "coupling LP of 65,536 tuples" in err and "use --method lp" in err


def test_help_quotes_the_builtin_example():
    from mdsd.cli import optimal

    for name, values in (("p", EXAMPLE_P), ("q", EXAMPLE_Q)):
        assert f"{name} = [{', '.join(f'{x:.2f}' for x in values)}]" in optimal.__doc__
