"""mdsd.harness.report and `mdsd report`: a tiny configuration runs, and its numbers equal direct API
calls."""

import csv
import json
import math

import numpy as np
import pytest
import torch

import mdsd
from mdsd.cli import main
from mdsd.harness.report import Block, ReportConfig, real_blocks, report, summarise

TINY = ReportConfig(k=(1, 2, 3), temperatures=(0.3, 1.0), n=6, pairs=3, real=False, seed=5)


@pytest.fixture(scope="module")
def rows():
    return report(TINY)


def _pairs(temperature):
    """The toy pairs the report should use, rebuilt here from the documented recipe."""
    generator = torch.Generator().manual_seed(TINY.seed)
    p, q = mdsd.toy_pair(TINY.n, temperature, TINY.similarity, generator, batch=TINY.pairs)
    return p.numpy(), q.numpy()


def _law(name, k):
    return {
        "iid": mdsd.IID,
        "without_replacement": mdsd.WithoutReplacement,
        "greedy": mdsd.Greedy,
        "topk": mdsd.TopK,
    }[name](k)


def test_every_quantity_has_one_row(rows):
    expected = len(TINY.temperatures) * len(TINY.k) * (len(TINY.laws) + len(TINY.verifiers))
    assert len(rows) == expected
    keys = {(r["temperature"], r["k"], r["kind"], r["name"]) for r in rows}
    assert len(keys) == expected


def test_optima_equal_direct_calls(rows):
    for r in rows:
        if r["kind"] != "optimum" or r["skipped"]:
            continue
        p, q = _pairs(r["temperature"])
        law = mdsd.Hub() if r["name"] == "hub" else _law(r["name"], r["k"])
        direct = [mdsd.optimal_acceptance(pi, qi, law) for pi, qi in zip(p, q, strict=True)]
        assert r["mean"] == pytest.approx(np.mean(direct), abs=1e-12), r
        assert r["pairs"] == TINY.pairs and r["n"] == TINY.n and r["source"] == "toy"


def test_verifier_acceptances_and_gaps_equal_direct_calls(rows):
    checked = 0
    for r in rows:
        if r["kind"] != "verifier" or r["skipped"]:
            continue
        p, q = _pairs(r["temperature"])
        v = mdsd.verifier(r["name"], r["k"])
        direct = np.array([v.acceptance(pi, qi) for pi, qi in zip(p, q, strict=True)])
        best = np.array([mdsd.optimal_acceptance(pi, qi, v.law) for pi, qi in zip(p, q, strict=True)])
        assert r["mean"] == pytest.approx(direct.mean(), abs=1e-12), r
        assert r["optimum"] == pytest.approx(best.mean(), abs=1e-12), r
        assert r["gap"] == pytest.approx(best.mean() - direct.mean(), abs=1e-12), r
        assert r["law"] == v.law.name
        half = 4.302653 * direct.std(ddof=1) / math.sqrt(direct.size)  # t_{0.975, 2}
        assert r["ci95"] == pytest.approx(half, rel=1e-5)
        checked += 1
    assert checked >= 10


def test_invalid_combinations_are_skipped_with_a_reason(rows):
    skipped = {(r["name"], r["k"]) for r in rows if r["skipped"]}
    for k in TINY.k:
        assert (("single", k) in skipped) == (k != 1)
        assert (("spechub", k) in skipped) == (k != 2)
        assert (("hub", k) in skipped) == (k != 2)
    assert all(isinstance(r["skipped"], str) for r in rows)
    assert all(r["mean"] is None and r["gap"] is None for r in rows if r["skipped"])


def test_given_blocks_are_reported_as_is():
    """The real-pairs path: any block of pairs, here a hand-made one with p = q (acceptance 1)."""
    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    config = ReportConfig(laws=("iid",), verifiers=("rrs", "spechub"), k=(2,), real=False)
    rows = report(config, blocks=[Block("real", None, p, p.copy())])
    assert [r["source"] for r in rows] == ["real"] * 3
    for r in rows:
        assert r["mean"] == pytest.approx(1.0, abs=1e-12) and r["temperature"] is None
    assert "real pairs" in summarise(rows)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="laws"):
        ReportConfig(laws=("bogus",))
    with pytest.raises(ValueError, match="verifiers"):
        ReportConfig(verifiers=("bogus",))
    with pytest.raises(ValueError, match="temperatures"):
        ReportConfig(temperatures=(0.0,))
    with pytest.raises(ValueError, match="k"):
        ReportConfig(k=(0,))
    with pytest.raises(ValueError, match="n must be >= 2, got 1: on a vocabulary of one token"):
        ReportConfig(n=1)


def test_a_vocabulary_smaller_than_k_skips_with_a_reason_regression_n_1(capsys):
    """Bug: mdsd report --n 1 (or --n 2 with k = 3) stopped on an internal law message; n = 1 is now refused
    up front, and the laws and verifiers that draw more distinct tokens than n are skipped, saying so."""
    assert main(["report", "--n", "1"]) == 2
    assert capsys.readouterr().err.startswith("mdsd report: error: --n must be >= 2")
    rows = report(ReportConfig(k=(2, 3), temperatures=(1.0,), n=2, pairs=2, real=False))
    skipped = {(r["name"], r["k"]): r["skipped"] for r in rows if r["skipped"]}
    assert (
        skipped[("without_replacement", 3)] == "WithoutReplacement(k=3) draws more distinct tokens than n = 2"
    )
    assert skipped[("rrsw", 3)] == "verifier('rrsw', k=3) drafts more distinct tokens than n = 2"
    assert ("iid", 3) not in skipped and ("rrs", 3) not in skipped


def test_cli_writes_results_and_plots(tmp_path, capsys):
    code = main(
        [
            "report",
            "--n",
            "5",
            "--pairs",
            "2",
            "--temperatures",
            "0.5",
            "1.0",
            "--k",
            "1",
            "2",
            "--no-real",
            "--seed",
            "3",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    shown = capsys.readouterr().out
    assert "OTM iid" in shown and "spechub" in shown
    payload = json.loads((tmp_path / "report.json").read_text(), parse_constant=_not_json)
    meta = payload["metadata"]
    assert meta["seed"] == 3 and meta["config"]["n"] == 5 and "git_revision" in meta
    assert meta["versions"]["numpy"]
    assert len(payload["rows"]) == 2 * 2 * (len(TINY.laws) + len(TINY.verifiers))
    assert (tmp_path / "report.csv").read_text().splitlines()[0].startswith("source,")
    for name in ("acceptance_vs_temperature", "gap_vs_k", "optimum_vs_k"):
        assert (tmp_path / f"report_{name}.png").stat().st_size > 1000


def _not_json(constant: str):
    raise AssertionError(f"{constant} is not JSON: a strict parser rejects it")


def test_report_json_is_strict_json_regression_nan(tmp_path, capsys):
    """Bug: report.json held NaN (80 cells of the default report), which no strict JSON parser reads.
    Skipped quantities (SpecHub at k = 1, one pair: no interval) are null in JSON and empty in CSV."""
    argv = ["report", "--n", "4", "--pairs", "1", "--temperatures", "1.0", "--k", "1", "2", "--no-real"]
    assert main([*argv, "--no-plots", "--output-dir", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "report.json").read_text(), parse_constant=_not_json)["rows"]
    skipped = [r for r in rows if r["skipped"]]
    assert skipped and all(r["mean"] is None for r in skipped) and all(r["ci95"] is None for r in rows)
    table = list(csv.DictReader((tmp_path / "report.csv").open()))
    assert (
        all(r["mean"] == "" for r in table if r["skipped"])
        and "nan" not in (tmp_path / "report.csv").read_text()
    )


def test_an_output_dir_that_cannot_be_written_fails_before_the_work_regression(monkeypatch, capsys):
    """Bug: --output-dir /dev/null/x failed only after all the work."""
    import mdsd.cli.report as cli_report

    def no_work(*args, **kwargs):
        raise AssertionError("the report ran before its output folder was checked")

    monkeypatch.setattr(cli_report, "report", no_work)
    assert main(["report", "--output-dir", "/dev/null/x"]) == 2
    err = capsys.readouterr().err
    assert err == "mdsd report: error: --output-dir /dev/null/x: cannot write there (Not a directory)\n"


def test_cli_bad_flag_value_is_a_one_line_error(tmp_path, capsys):
    assert main(["report", "--laws", "bogus", "--output-dir", str(tmp_path)]) == 2
    assert "bogus" in capsys.readouterr().err


def test_real_blocks_take_evenly_spaced_rows_at_stored_temperatures(monkeypatch):
    """real_blocks with a stand-in corpus: only stored temperatures, ``real_rows`` rows spread evenly."""
    import mdsd.harness.report as report_module

    generator = torch.Generator().manual_seed(0)
    p, q = mdsd.dirichlet_pair(12, 0.5, generator, batch=9)

    class Corpus:  # what mdsd.data.real_pairs(T) returns: .p, .q [N, W + 1] and len()
        def __init__(self, temperature):
            self.p, self.q = p.numpy() ** (1 / temperature), q.numpy()
            self.p = self.p / self.p.sum(-1, keepdims=True)

        def __len__(self):
            return self.p.shape[0]

    monkeypatch.setattr(report_module, "real_pairs", Corpus)
    monkeypatch.setattr(report_module, "REAL_TEMPERATURES", (0.5, 1.0))
    config = ReportConfig(temperatures=(0.25, 0.5, 1.0), real_rows=3)
    blocks = report_module.real_blocks(config)
    assert [(b.source, b.temperature) for b in blocks] == [("real", 0.5), ("real", 1.0)]
    for block in blocks:
        expected = Corpus(block.temperature)
        np.testing.assert_allclose(block.p, expected.p[[0, 4, 8]], rtol=1e-12)
        np.testing.assert_allclose(block.q, expected.q[[0, 4, 8]], rtol=1e-12)


def test_bundled_real_pairs_are_included_by_default():
    from mdsd.data import real_pairs

    config = ReportConfig(temperatures=(0.05, 0.6), real_rows=5)
    [block] = real_blocks(config)  # 0.05 is not a stored temperature
    corpus = real_pairs(0.6)
    rows = np.linspace(0, len(corpus) - 1, 5).round().astype(int)
    assert (block.source, block.temperature) == ("real", 0.6)
    np.testing.assert_allclose(block.p, corpus.p[rows], rtol=1e-12)
    np.testing.assert_allclose(block.q, corpus.q[rows], rtol=1e-12)


def test_plots_zoom_on_real_acceptance_and_name_the_verifiers_at_zero_regression(monkeypatch, tmp_path):
    """Bugs: the real-pair acceptance plot's 0-1 axis flattened the 0.80-0.95 differences that matter, and in
    the gap-vs-k plot five verifiers' lines lay on top of each other at 0, hiding four of them."""
    import mdsd.cli.report as cli_report

    figures = []
    monkeypatch.setattr(cli_report, "_save", lambda fig, path: figures.append((path.name, fig)) or path)

    def row(source, name, k, mean, optimum):
        kind = "verifier" if name != "iid" else "optimum"
        return dict(source=source, temperature=0.6, kind=kind, name=name, k=k, mean=mean, optimum=optimum)

    rows = []
    for k in (1, 2):
        rows += [row("real", "rrs", k, 0.82 + 0.05 * k, 0.9 + 0.05 * k), row("real", "iid", k, 0.9, 0.9)]
        rows += [row("real", name, k, 0.9, 0.9) for name in ("spechub", "greedy", "optimal")]
    for r in rows:
        r.update(skipped="", gap=r["optimum"] - r["mean"] if r["kind"] == "verifier" else None)
    cli_report.plot(rows, tmp_path)
    shown = dict(figures)
    acceptance = shown["report_acceptance_vs_temperature_real.png"].axes[0]
    assert acceptance.get_ylim()[0] == pytest.approx(0.85)  # the lowest value, floored to 0.05
    labels = [t.get_text() for t in shown["report_gap_vs_k.png"].axes[0].get_legend().get_texts()]
    assert labels == ["rrs", "0 (optimal for its law): spechub, greedy, optimal"]


def test_every_name_another_command_takes_is_taken_regression(tmp_path, capsys):
    """Bug: `mdsd optimal --law wor` worked and `mdsd report --laws wor` did not; `optimal:wor`, listed by
    `mdsd acceptance`, was refused by `mdsd report`. Laws and verifiers are read by their registries."""
    from mdsd.laws import _REGISTRY
    from mdsd.verifiers import verifier_names

    every_law = tuple(_REGISTRY)  # names and aliases
    every_verifier = (*verifier_names(paths=False), "optimal-wor")  # NAME:LAW and NAME-LAW
    ReportConfig(laws=every_law, verifiers=every_verifier)
    names = {"laws": ("wor",), "verifiers": ("optimal:wor",)}
    rows = report(ReportConfig(**names, k=(2,), temperatures=(1.0,), n=5, pairs=2, real=False))
    optimum, verifier = rows
    assert (optimum["name"], optimum["law"]) == ("wor", "without_replacement")
    assert (verifier["name"], verifier["law"]) == ("optimal:wor", "without_replacement")
    assert verifier["optimum"] == pytest.approx(optimum["mean"])  # the optimal verifier reaches its optimum
    flags = ["--k", "2", "--n", "5", "--pairs", "2", "--temperatures", "1", "--no-real", "--no-plots"]
    argv = ["report", "--laws", "wor", "--verifiers", "optimal:wor", "optimal-wor", *flags]
    assert main([*argv, "--output-dir", str(tmp_path)]) == 0
    assert "OTM wor" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--n", "0"], "--n must be >= 2 (the toy vocabulary's size: two tokens at least), got 0"),
        (
            ["--n", "1"],
            "--n must be >= 2, got 1: on a vocabulary of one token p = q and every acceptance is 1",
        ),
        (
            ["--laws", "beam"],
            "--laws: law must be one of iid, without_replacement (wor), hub, greedy, topk; got 'beam'",
        ),
        (
            ["--verifiers", "block"],
            "--verifiers: 'block' verifies whole trees in the tree decoder (a path rule)",
        ),
        (["--k", "0"], "--k: every number of drafts must be an integer >= 1, got 0"),
        (["--real-rows", "0"], "--real-rows must be >= 1, got 0"),
        (["--similarity", "2"], "--similarity must lie in [0, 1], got 2.0"),
    ],
)
def test_errors_name_the_flags_regression(capsys, argv, message):
    """Bug: `mdsd report --n 0` said "on a vocabulary of one token" (the reason for n = 1), and the
    messages named the config's fields, not the command's flags."""
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mdsd report: error: {message}") and err.count("\n") == 1
