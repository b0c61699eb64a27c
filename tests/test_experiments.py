"""Each experiment script's --quick mode runs, writes its results with metadata, and its numbers are
the API's."""

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mdsd

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def run_script(name: str, out: Path, *flags: str) -> dict:
    """Run experiments/<name>.py --quick --output-dir out; return its JSON results."""
    argv = sys.argv
    sys.argv = [name, "--quick", "--output-dir", str(out), *flags]
    try:
        runpy.run_path(str(EXPERIMENTS / f"{name}.py"), run_name="__main__")
    finally:
        sys.argv = argv
    payload = json.loads((out / f"{name}.json").read_text())
    meta = payload["metadata"]
    assert meta["config"]["quick"] is True and meta["seed"] == meta["config"]["seed"]
    assert "git_revision" in meta and meta["versions"]["torch"]
    assert (out / f"{name}.csv").read_text().count("\n") == len(payload["rows"]) + 1
    return payload


def test_toy_table_quick(tmp_path):
    payload = run_script("toy_table", tmp_path)
    rows = payload["rows"]
    assert len(rows) == 6 * 7 and {r["pairs"] for r in rows} == {4}
    markdown = (tmp_path / "toy_table.md").read_text()
    assert "(0.8321)" in markdown and "Why the numbers differ" in markdown
    assert (tmp_path / "toy_table.png").stat().st_size > 1000
    # one entry recomputed from the API: OTM without replacement at T = 0.25, s = 0.7
    row = next(
        r
        for r in rows
        if (r["temperature"], r["similarity"], r["method"]) == (0.25, 0.7, "OTM (WithoutReplacement)")
    )
    p, q = mdsd.toy_pair(10, 0.25, 0.7, torch.Generator().manual_seed(0), batch=4)
    direct = [
        mdsd.optimal_acceptance(a, b, mdsd.WithoutReplacement(2))
        for a, b in zip(p.numpy(), q.numpy(), strict=True)
    ]
    assert row["mean"] == pytest.approx(np.mean(direct), abs=1e-12)
    assert [r["n"] for r in payload["n_sweep"]] == [10, 20]


def test_optimal_gap_quick(tmp_path):
    rows = run_script("optimal_gap", tmp_path)["rows"]
    assert {r["n"] for r in rows} == {10, 50} and {r["k"] for r in rows} == {2, 3}
    skipped = {(r["method"], r["k"]) for r in rows if r["skipped"]}
    assert ("spechub", 3) in skipped and ("spechub", 2) not in skipped
    for r in rows:
        if r["method"].startswith("OTM") or r["skipped"]:
            continue
        assert r["gap_to_own_optimum"] >= -1e-9, r  # no verifier beats the optimum of its own law
    for name in ("optimal_gap.png", "optimal_gap_vs_k.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_theorems_quick(tmp_path):
    payload = run_script("theorems", tmp_path)
    claims = {r["claim"]: r for r in payload["rows"]}
    assert set(claims) >= {"lp_equals_otm", "lossless", "hub_emitted_p_hub", "kseq_bound", "wr_beats_iid"}
    assert all(r["checks"] > 0 for r in claims.values())
    assert "counter-examples" in (tmp_path / "theorems.md").read_text()
    assert len(payload["spechub_wins"]) == 2


def test_theorems_enumerated_laws_are_p_and_the_check_catches_a_lossy_variant():
    """The enumerated output laws equal p; with the residual left unnormalised (a deliberately broken
    verifier) the same check sees the law move away from p."""
    theorems = runpy.run_path(str(EXPERIMENTS / "theorems.py"))
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    law, accepted = theorems["spechub_law"](p, q)
    np.testing.assert_allclose(law, p, atol=1e-12)
    assert accepted == pytest.approx(mdsd.verifier("spechub", 2).acceptance(p, q), abs=1e-12)
    for wr in (False, True):
        law, accepted = theorems["rrs_law"](p, q, 2, wr)
        np.testing.assert_allclose(law, p, atol=1e-12)
        assert accepted == pytest.approx(
            mdsd.verifier("rrsw" if wr else "rrs", 2).acceptance(p, q), abs=1e-12
        )
    theorems["spechub_law"].__globals__["_norm"] = lambda v: v  # the residual is no longer normalised
    for broken, _ in (theorems["spechub_law"](p, q), theorems["rrs_law"](p, q, 2, False)):
        assert np.abs(broken - p).sum() > 1e-3


def test_optimal_wor_gap_quick(tmp_path):
    rows = run_script("optimal_wor_gap", tmp_path)["rows"]
    assert len(rows) == 2 and {(r["temperature"], r["k"]) for r in rows} == {(1.0, 2)}
    corpus = mdsd.data.real_pairs(1.0)
    for r in rows:
        p, q = corpus.p[r["row"]], corpus.q[r["row"]]
        assert r["alpha_iid"] == pytest.approx(mdsd.optimal_acceptance(p, q, mdsd.IID(2)), abs=1e-12)
        # the fallback is lossless with acceptance in [α*_iid, α*_wor]: its 95% interval meets that range
        assert r["fallback_low"] <= r["alpha_wor"] + 1e-9 and r["fallback_high"] >= r["alpha_iid"] - 1e-9
    assert "gap to α*_wor" in (tmp_path / "optimal_wor_gap.md").read_text()
