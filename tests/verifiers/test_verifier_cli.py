"""``mdsd acceptance``: the table and JSON match the library, files load, bad input exits with status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mdsd
from mdsd.cli import main


def test_builtin_example_json_matches_the_library(capsys):
    assert main(["acceptance", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["example"] and out["k"] == 2
    assert [r["verifier"] for r in out["rows"]] == list(mdsd.VERIFIERS)
    from mdsd.cli.optimal import EXAMPLE_P, EXAMPLE_Q

    for r in out["rows"]:
        v = mdsd.verifier(r["verifier"], r["k"])
        assert r["acceptance"] == pytest.approx(v.acceptance(EXAMPLE_P, EXAMPLE_Q), abs=1e-12)
        assert r["optimum"] == pytest.approx(mdsd.optimal_acceptance(EXAMPLE_P, EXAMPLE_Q, v.law), abs=1e-12)
        assert r["gap"] >= -1e-12


def test_files_and_table(tmp_path, capsys):
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    np.save(tmp_path / "p.npy", p)
    (tmp_path / "q.json").write_text(json.dumps(q.tolist()))
    assert (
        main(["acceptance", "--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.json"), "--k", "3"]) == 0
    )
    text = capsys.readouterr().out
    assert "rrsw" in text and "k = 3" in text
    line = next(x for x in text.splitlines() if x.startswith("spechub"))
    assert f"{mdsd.verifier('spechub', 2).acceptance(p, q):.6f}" in line


def test_estimate_where_no_exact_form(tmp_path, capsys):
    n = 200  # RRSw k = 3 at n = 200 is above the enumeration limit
    p = np.full(n, 1.0 / n)
    np.save(tmp_path / "p.npy", p)
    assert (
        main(
            [
                "acceptance",
                "--p",
                str(tmp_path / "p.npy"),
                "--q",
                str(tmp_path / "p.npy"),
                "--k",
                "3",
                "--samples",
                "2000",
                "--json",
            ]
        )
        == 0
    )
    rows = {r["verifier"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["rrsw"]["exact"] is False and rows["rrsw"]["acceptance"] == 1.0
    assert rows["rrs"]["exact"] is True


def test_bad_input_exits_with_status_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("[0.5, 0.6]")
    (tmp_path / "ok.json").write_text("[0.5, 0.5]")
    assert main(["acceptance", "--p", str(tmp_path / "bad.json"), "--q", str(tmp_path / "ok.json")]) == 2
    assert "p must sum to 1" in capsys.readouterr().err
    assert main(["acceptance", "--p", str(tmp_path / "ok.json")]) == 2
    assert (
        main(["acceptance", "--p", str(tmp_path / "ok.json"), "--q", str(tmp_path / "ok.json"), "--k", "0"])
        == 2
    )
