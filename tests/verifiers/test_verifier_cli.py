"""``mdsd acceptance``: the table and JSON match the library, files load, bad input exits with status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mdsd
from mdsd.cli import main
from mdsd.verifiers.optimal.fallback import fallback_acceptance
from mdsd.verifiers.optimal.luce_rule import RTOL


def test_builtin_example_json_matches_the_library(capsys):
    assert main(["acceptance", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["example"] and out["k"] == 2
    assert [r["verifier"] for r in out["rows"]] == [*mdsd.VERIFIERS, "optimal:wor"]
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


def test_optimal_without_replacement_exact_at_every_k(tmp_path, capsys):
    """n = 60: beyond the flow's size for k >= 3, so optimal:wor runs its Luce rule: exact (to its
    quadrature) at every k and at the without-replacement optimum to the solver's stopping tolerance
    (RTOL · α*_wor, the acceptance further steps could still buy when it stops); the
    i.i.d.-stream fallback stays between the two optima."""
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.full(60, 0.3)), rng.dirichlet(np.full(60, 0.3))
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "q.npy", q)
    for k in (4, 5):
        args = ["acceptance", "--p", str(tmp_path / "p.npy"), "--q", str(tmp_path / "q.npy"), "--k", str(k)]
        assert main([*args, "--samples", "4000", "--json"]) == 0
        row = {r["verifier"]: r for r in json.loads(capsys.readouterr().out)["rows"]}["optimal:wor"]
        assert row["law"] == "without_replacement" and row["exact"] is True
        best = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k))
        assert row["optimum"] == pytest.approx(best)
        assert best * (1.0 - RTOL) - 1e-12 <= row["acceptance"] <= best + 1e-9
    low = mdsd.optimal_acceptance(p, q, mdsd.IID(4))
    assert (
        low - 1e-12
        <= fallback_acceptance(p, q, 4)
        <= mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(4))
    )


def test_bad_input_exits_with_status_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("[0.5, 0.6]")
    (tmp_path / "ok.json").write_text("[0.5, 0.5]")
    assert main(["acceptance", "--p", str(tmp_path / "bad.json"), "--q", str(tmp_path / "ok.json")]) == 2
    assert f"mdsd acceptance: error: --p {tmp_path / 'bad.json'} must sum to 1" in capsys.readouterr().err
    assert main(["acceptance", "--p", str(tmp_path / "ok.json")]) == 2
    assert (
        main(["acceptance", "--p", str(tmp_path / "ok.json"), "--q", str(tmp_path / "ok.json"), "--k", "0"])
        == 2
    )


def test_the_table_is_aligned_with_optimal_wor_regression(capsys):
    """Bug: the optimal:wor row (the longest name) was shifted right of the others."""
    assert main(["acceptance"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines[-1].startswith("optimal:wor ") and len({len(line) for line in lines}) == 1


@pytest.mark.parametrize("samples", ["0", "-5"])
def test_samples_are_checked_before_the_work_regression(capsys, samples):
    """Bug: --samples 0 or -5 was accepted unless a Monte Carlo estimate happened to be needed."""
    assert main(["acceptance", "--samples", samples]) == 2
    assert capsys.readouterr().err == f"mdsd acceptance: error: --samples must be >= 1, got {samples}\n"


def test_k_beyond_the_vocabulary_skips_only_those_verifiers(tmp_path, capsys):
    """Regression (issue 12 §6): `mdsd acceptance --k 5` at n = 4 aborted because one law needs 5
    distinct tokens; now the rows that apply are reported and the others listed with the reason."""
    p, q = tmp_path / "p.json", tmp_path / "q.json"
    p.write_text(json.dumps([0.1, 0.2, 0.3, 0.4]))
    q.write_text(json.dumps([0.4, 0.3, 0.2, 0.1]))
    args = ["acceptance", "--p", str(p), "--q", str(q), "--k", "5"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["verifier"], r["k"]) for r in out["rows"]] == [
        ("single", 1),
        ("rrs", 5),
        ("kseq", 5),
        ("spechub", 2),
        ("optimal", 5),
    ]
    assert [s["verifier"] for s in out["skipped"]] == ["rrsw", "greedy", "topk", "optimal:wor"]
    assert all("needs at least 5" in s["reason"] and s["k"] == 5 for s in out["skipped"])
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "skipped: rrsw (k = 5): q has 4 tokens" in text and text.count("skipped:") == 4


def test_degenerate_q_gets_the_top_k_rule_and_no_optimum(tmp_path, capsys):
    """A one-hot q: laws needing two positive tokens cannot draw, the verifiers use the top-k rule
    (acceptance p(top-k)) and the optimum is reported as not available, with the solver's reason."""
    p, q = tmp_path / "p.json", tmp_path / "q.json"
    p.write_text(json.dumps([0.1, 0.2, 0.3, 0.4]))
    q.write_text(json.dumps([0.0, 0.0, 1.0, 0.0]))
    assert main(["acceptance", "--p", str(p), "--q", str(q), "--json"]) == 0
    rows = {r["verifier"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for name in ("rrsw", "spechub", "greedy"):
        assert rows[name]["acceptance"] == pytest.approx(0.3 + 0.1) and rows[name]["optimum"] is None
        assert "needs at least 2" in rows[name]["optimum_note"]
    assert rows["rrs"]["optimum"] == pytest.approx(rows["rrs"]["acceptance"] + rows["rrs"]["gap"])
    assert main(["acceptance", "--p", str(p), "--q", str(q)]) == 0
    assert "(optimum: q has 1 tokens with positive probability" in capsys.readouterr().out


def test_a_bug_is_reported_as_a_bug_with_status_1(monkeypatch, capsys):
    """Exit 2 only for errors mdsd raises about its input; a library's ValueError or any other exception
    inside mdsd is an internal error (exit 1, traceback, a message that says it is a bug)."""
    from mdsd.cli import acceptance

    def broken(*_):
        np.ones(2) + np.ones(3)  # numpy's ValueError: a bug, not the user's input

    monkeypatch.setattr(acceptance, "acceptance_rows", broken)
    assert main(["acceptance"]) == 1
    err = capsys.readouterr().err
    assert "internal error: ValueError" in err and "This is a bug in mdsd" in err and "Traceback" in err

    def crash(*_):
        raise IndexError("index 3 is out of bounds")

    monkeypatch.setattr(acceptance, "acceptance_rows", crash)
    assert main(["acceptance"]) == 1
    assert "internal error: IndexError" in capsys.readouterr().err
