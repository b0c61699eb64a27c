"""Each experiment script's --quick mode runs, writes its results with metadata, and its numbers are
the API's."""

import contextlib
import csv
import dataclasses
import gzip
import io
import itertools
import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import mdsd
import mdsd.verifiers.optimal.luce_rule as luce_rule_module

pytestmark = pytest.mark.slow  # every experiment's --quick run (pytest -m "not slow" leaves them out)

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def run_script(name: str, out: Path, *flags: str) -> dict:
    """Run experiments/<name>.py --quick --output-dir out; return its JSON results. The script must say
    where it wrote."""
    argv = sys.argv
    sys.argv = [name, "--quick", "--output-dir", str(out), *flags]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(EXPERIMENTS / f"{name}.py"), run_name="__main__")
    finally:
        sys.argv = argv
    assert f"results in {out}" in printed.getvalue()
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
    assert claims["optimal_verifier_best_of_its_law"]["checks"] > 0
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


def test_a_flag_with_a_const_may_be_given_alone_and_run_fields_are_recorded_apart():
    from dataclasses import dataclass, field

    from mdsd.harness.experiment import config_from_cli, metadata

    @dataclass(frozen=True)
    class Config:
        n: int = field(default=3, metadata={"help": "size"})
        ray: str = field(default="", metadata={"help": "where", "const": "local", "run": True})

    assert config_from_cli(Config, []).ray == ""
    assert config_from_cli(Config, ["--ray"]).ray == "local"
    assert config_from_cli(Config, ["--ray", "10.0.0.1:6379", "--n", "4"]) == Config(4, "10.0.0.1:6379")
    meta = metadata(Config(4, "auto"), seed=1)
    assert meta["config"] == {"n": 4} and meta["run"] == {"ray": "auto"}


def test_partial_results_is_kept_on_failure_refused_without_resume_and_deleted_on_success(tmp_path):
    from dataclasses import dataclass, field

    from mdsd.harness.experiment import partial_results

    @dataclass(frozen=True)
    class Config:
        n: int = 3
        resume: bool = field(default=False, metadata={"run": True})

    with pytest.raises(RuntimeError, match="interrupted"):
        with partial_results(tmp_path, "exp", Config(), resume=False) as path:
            path.write_text("a finished task\n")
            raise RuntimeError("interrupted")
    assert path.read_text() == "a finished task\n" and path.name.startswith("exp.")
    with pytest.raises(FileExistsError, match="--resume"):
        with partial_results(tmp_path, "exp", Config(), resume=False):
            pass
    with partial_results(tmp_path, "exp", Config(resume=True), resume=True) as same:  # run fields: same file
        assert same == path and same.exists()
    assert not path.exists()
    with partial_results(tmp_path, "exp", Config(n=4), resume=False) as other:  # another config: another file
        assert other != path


def test_two_runs_in_one_second_get_two_folders_regression(tmp_path, monkeypatch):
    """Bug: two runs started in the same second wrote into one runs/<name>-<second>/ and one run's results
    were lost. Each run now creates its own folder, atomically."""
    import datetime

    import mdsd.harness.experiment as experiment

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=tz)

    monkeypatch.setattr(experiment.datetime, "datetime", Frozen)
    monkeypatch.setattr(experiment, "_runs_root", lambda: tmp_path / "runs")
    first, second, third = (experiment.output_dir("toy") for _ in range(3))
    assert [p.name for p in (first, second, third)] == [
        "toy-20260102-030405",
        "toy-20260102-030405-2",
        "toy-20260102-030405-3",
    ]
    assert all(p.is_dir() for p in (first, second, third))


def test_a_script_run_from_experiments_writes_to_the_checkouts_runs_regression():
    """Bug: running a script from experiments/ created an untracked experiments/runs/. Runs go to the
    checkout's runs/ (ignored by git) whatever the working directory, and the script says where."""
    root = EXPERIMENTS.parent
    fresh = not (root / "runs").exists()
    env = {**os.environ, "PYTHONPATH": str(root)}  # this checkout's mdsd, whatever is installed
    command = [sys.executable, "toy_table.py", "--quick"]
    done = subprocess.run(command, cwd=EXPERIMENTS, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    written = Path(done.stdout.strip().splitlines()[-1].removeprefix("results in "))
    try:
        assert written.parent == root / "runs" and (written / "toy_table.json").is_file()
        assert not (EXPERIMENTS / "runs").exists()
        ignored = subprocess.run(["git", "check-ignore", "-q", str(written)], cwd=root)
        assert ignored.returncode == 0  # runs/ is not tracked
    finally:
        shutil.rmtree(written, ignore_errors=True)
        if fresh and (root / "runs").is_dir() and not any((root / "runs").iterdir()):
            (root / "runs").rmdir()  # leave the checkout as the test found it


def test_batch_efficiency_quick(tmp_path):
    methods = ["hf-autoregressive", "chain:3/single", "dynamic:3,2,2,4/rrsw/grow", "binary:1/rrs+lookup"]
    rows = run_script("batch_efficiency", tmp_path, "--max-new-tokens", "6", "--methods", *methods)["rows"]
    assert [r["method"] for r in rows] == methods
    for r in rows:  # every method emits the budget; the ratio is the totals'
        assert r["tokens"] == 4 * 6 and r["tokens_per_forward"] == pytest.approx(
            r["tokens"] / r["target_forwards"]
        )
        assert sum(p["tokens"] for p in r["per_prompt"]) == r["tokens"]
    assert rows[0]["target_forwards"] == rows[0]["tokens"]  # autoregressive: one forward per token
    summary = (tmp_path / "summary.md").read_text()
    assert "| 0.6 | chain:3/single |" in summary
    # regression: --quick's random prompts were called "(mt-bench, humaneval)"
    assert "4 prompts (random tokens (--quick))" in summary and "mt-bench" not in summary


def test_batch_efficiency_in_checkpointed_runs_of_batches(tmp_path, capsys):
    """Prompts decoded two at a time, as one task or as runs of two prompts per task, give the same rows;
    --partial writes what an interrupted run's checkpoint holds, cut to the prompts every method finished,
    and leaves the checkpoint for --resume."""
    methods = ["chain:3/single", "binary:1/rrs"]
    flags = ("--max-new-tokens", "6", "--batch-size", "2", "--methods", *methods)
    whole = run_script("batch_efficiency", tmp_path / "whole", *flags)["rows"]
    runs = run_script("batch_efficiency", tmp_path / "runs", *flags, "--prompts-per-task", "2")["rows"]
    assert [r["method"] for r in runs] == methods
    for a, b in zip(whole, runs, strict=True):
        assert [p["batch"] for p in a["per_prompt"]] == [0, 0, 2, 2]  # a batch by its first prompt
        assert [p["seed"] for p in a["per_prompt"]] == [0, 0, 2, 2]
        for name in ("tokens_per_forward", "ci95", "tokens", "target_forwards", "draft_forwards"):
            assert a[name] == b[name], name
        drop = ("seconds",)
        assert [{k: v for k, v in p.items() if k not in drop} for p in a["per_prompt"]] == [
            {k: v for k, v in p.items() if k not in drop} for p in b["per_prompt"]
        ]
    summary = (tmp_path / "runs" / "summary.md").read_text()
    assert "| chain:3/single | binary:1/rrs | " in summary and "Paired, T = 0.6" in summary

    # an interrupted run: its checkpoint holds the first round (both methods on prompts 0-1) and the first
    # method's run of prompts 2-3, each line what run_method returned for that task
    module = runpy.run_path(str(EXPERIMENTS / "batch_efficiency.py"))
    from mdsd.harness.experiment import config_from_cli, partial_results
    from mdsd.harness.methods import chunked, merge_runs

    argv = ["--quick", "--output-dir", str(tmp_path / "partial"), *flags, "--prompts-per-task", "2"]
    config = config_from_cli(module["Config"], argv)
    tasks = chunked([{"temperature": 0.6, "method": m} for m in methods], [4], config)
    with partial_results(tmp_path / "partial", "batch_efficiency", config, resume=True) as checkpoint:
        pass
    with pytest.raises(SystemExit):  # nothing finished yet: nothing to write
        run_script("batch_efficiency", tmp_path / "partial", *argv[3:], "--partial")
    assert "--partial:" in capsys.readouterr().err
    measures = {"per_prompt", "tokens", "ci95", "tokens_per_forward"}
    lines = []
    for i, task in enumerate(tasks[:3]):
        row = next(r for r in runs if r["method"] == task["method"])
        a, b = task["prompts"]
        own = {k: v for k, v in row.items() if k not in measures} | {
            "per_prompt": [p for p in row["per_prompt"] if a <= p["prompt"] < b]
        }
        lines.append(json.dumps({"index": i, "task": task, "result": merge_runs([own])[0]}))
    checkpoint.write_text("\n".join(lines) + "\n")
    partial = run_script("batch_efficiency", tmp_path / "partial", *argv[3:], "--partial")
    payload = json.loads((tmp_path / "partial" / "batch_efficiency.json").read_text())
    assert payload["partial"] == {
        "tasks_finished": 3,
        "tasks": 4,
        "prompts": [0, 1],
        "methods_not_started": [],
    }
    for got, row in zip(partial["rows"], runs, strict=True):  # both methods, on the prompts both finished
        first = [p for p in row["per_prompt"] if p["prompt"] < 2]
        assert got["per_prompt"] == first and got["tokens"] == sum(p["tokens"] for p in first)
    assert checkpoint.exists()  # kept for --resume
    assert (
        "partial: the prompts every method finished so far"
        in (tmp_path / "partial" / "summary.md").read_text()
    )
    checkpoint.write_text(lines[0] + "\n")  # one method has run: its rows, and the other named as not started
    partial = run_script("batch_efficiency", tmp_path / "partial", *argv[3:], "--partial")
    payload = json.loads((tmp_path / "partial" / "batch_efficiency.json").read_text())
    assert [r["method"] for r in partial["rows"]] == methods[:1]
    assert payload["partial"]["methods_not_started"] == [{"temperature": 0.6, "method": methods[1]}]
    with pytest.raises(SystemExit):
        run_script("batch_efficiency", tmp_path / "bad", *flags, "--prompts-per-task", "3")
    assert "--prompts-per-task must be 0 or a multiple of --batch-size 2, got 3" in capsys.readouterr().err


def test_paired_runs_pairs_two_runs_prompt_by_prompt(tmp_path):
    """The same method in two runs of the same prompts and seeds pairs to exactly 1; another method's ratio
    is the ratio of the sums; runs of other prompts are refused."""
    flags = ("--max-new-tokens", "6", "--batch-size", "2")
    run_script("batch_efficiency", tmp_path / "a", *flags, "--methods", "chain:3/single", "binary:1/rrs")
    methods = ("binary:1/rrs", "chain:2/single", "hf-autoregressive")  # HF's: one prompt at a time, no pair
    b = run_script("batch_efficiency", tmp_path / "b", *flags, "--methods", *methods)
    argv = sys.argv
    sys.argv = ["paired_runs", "--runs", str(tmp_path / "a" / "batch_efficiency.json")]
    sys.argv += [str(tmp_path / "b" / "batch_efficiency.json"), "--labels", "one", "two"]
    sys.argv += ["--against", "chain:2/single", "--output-dir", str(tmp_path / "p")]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(EXPERIMENTS / "paired_runs.py"), run_name="__main__")
    finally:
        sys.argv = argv
    rows = json.loads((tmp_path / "p" / "paired_runs.json").read_text())["rows"]
    assert len(rows) == 4 and {r["prompts"] for r in rows} == {4}
    same = next(r for r in rows if r["method_a"] == r["method_b"] == "binary:1/rrs")
    assert same["ratio"] == 1 and same["ci95"] == [1, 1] and not same["significant"]
    other = next(r for r in rows if (r["method_a"], r["method_b"]) == ("chain:3/single", "chain:2/single"))
    mine = next(r for r in b["rows"] if r["method"] == "chain:2/single")
    assert other["tokens_per_forward_b"] == pytest.approx(mine["tokens_per_forward"])
    assert other["ratio"] == pytest.approx(other["tokens_per_forward_a"] / mine["tokens_per_forward"])
    summary = (tmp_path / "p" / "summary.md").read_text()
    assert "| all | binary:1/rrs | binary:1/rrs | 4 |" in summary
    assert "chain:3/single | chain:2/single" in summary
    run_script("batch_efficiency", tmp_path / "c", "--max-new-tokens", "5", "--methods", "binary:1/rrs")
    sys.argv = ["paired_runs", "--runs", str(tmp_path / "a" / "batch_efficiency.json")]
    sys.argv += [str(tmp_path / "c" / "batch_efficiency.json"), "--output-dir", str(tmp_path / "q")]
    try:
        with pytest.raises(SystemExit) as stop, contextlib.redirect_stderr(io.StringIO()) as err:
            runpy.run_path(str(EXPERIMENTS / "paired_runs.py"), run_name="__main__")
    finally:
        sys.argv = argv
    assert stop.value.code == 2 and "max_new_tokens" in err.getvalue()


def test_batch_efficiency_quick_on_the_fast_path(tmp_path):
    """--compile runs mdsd's methods on the fast path, counted by the decoder (one target forward a step)."""
    methods = ["chain:3/single", "binary:1/rrs+lookup"]
    flags = ("--max-new-tokens", "6", "--compile", "none", "--methods", *methods)
    rows = run_script("batch_efficiency", tmp_path, *flags)["rows"]
    assert [r["method"] for r in rows] == methods
    for r in rows:
        assert r["tokens"] == 4 * 6 and 0 < r["target_forwards"] <= r["tokens"]
        assert r["tokens_per_forward"] == pytest.approx(r["tokens"] / r["target_forwards"])


def test_batch_efficiency_verdicts_name_the_winner_and_overlapping_intervals():
    verdicts = runpy.run_path(str(EXPERIMENTS / "batch_efficiency.py"))["verdicts"]

    def row(method, tpf, ci, speed, speed_ci):
        return dict(
            method=method,
            tokens_per_forward=tpf,
            ci95=ci,
            tokens_per_second=speed,
            tokens_per_second_ci95=speed_ci,
        )

    rows = [
        row("hf-assisted", 4.0, (3.0, 5.0), 2.0, (1.8, 2.2)),
        row("chain:4/single", 3.0, (2.5, 3.5), 2.5, (2.3, 2.7)),
        row("binary:3/rrsw", 5.0, (4.5, 5.5), 1.5, (1.0, 2.0)),
        row("dynamic:8,2,3,24/rrsw", 6.0, (5.2, 6.8), 1.2, None),
    ]
    lines = verdicts(rows, 0.6)
    assert lines[1] == "## T = 0.6"
    assert lines[3] == "- tokens per target forward: dynamic:8,2,3,24/rrsw beats hf-assisted (6.00 vs 4.00)"
    assert lines[4] == "- tokens/s: chain:4/single beats hf-assisted (2.50 vs 2.00)"
    dynamic = "- rrsw, tokens per target forward: dynamic:8,2,3,24/rrsw beats binary:3/rrsw (6.00 vs 5.00"
    assert lines[5] == dynamic + "; the 95% intervals overlap)" and len(lines) == 6
    rows[1]["tokens_per_second_ci95"] = (2.1, 2.7)  # now it meets hf-assisted's interval
    assert verdicts(rows, 0.6)[4].endswith("(2.50 vs 2.00; the 95% intervals overlap)")
    assert verdicts(rows[1:3], 0.6) == []  # nothing to compare: no heading either


def test_draft_sources_quick(tmp_path):
    rows = run_script("draft_sources", tmp_path, "--max-new-tokens", "6")["rows"]
    assert {r["dataset"] for r in rows} == {"humaneval", "mt-bench"}
    assert not any("datastore" in r["method"] for r in rows)  # --quick has no datastore
    alone = [r for r in rows if r["method"].startswith("none/")]
    assert alone and all(r["draft_forwards"] == 0 for r in alone)
    assert all(r["model_step_share"] is None for r in alone)
    assert all(r["model_step_share"] == 1 for r in rows if r["method"] == "chain:4/single")
    first = [r for r in rows if r["method"] == "chain:4/single/first+lookup"]
    assert len(first) == 2 and all(0 <= r["model_step_share"] <= 1 for r in first)
    assert all(r["draft_buffer_reads"] == 0 for r in rows)  # the eager path reads what is pending, as is
    assert "## humaneval, T = 0.6" in (tmp_path / "summary.md").read_text()


def test_languages_quick(tmp_path):
    flags = ["--languages", "udhr-eng", "udhr-fra", "--record-prompts", "2", "--record-tokens", "5"]
    rows = run_script("languages", tmp_path, *flags, "--max-new-tokens", "6")["rows"]
    acceptance = [r for r in rows if r["part"] == "acceptance"]
    assert {r["language"] for r in acceptance} == {"udhr-eng", "udhr-fra"}
    assert all(r["positions"] == 10 for r in acceptance)
    for r in acceptance:  # no verifier beats the optimum of its own law
        if r["kind"] == "verifier" and not r["skipped"]:
            assert r["mean"] <= r["optimum"] + 1e-9
    # the table's numbers are mdsd.harness.report's on the saved corpus
    pairs = mdsd.data.real_pairs(0.6, tmp_path / "corpus_udhr-eng.npz")
    row = next(r for r in acceptance if (r["language"], r["name"], r["k"]) == ("udhr-eng", "rrs", 2))
    values = [mdsd.verifier("rrs", 2).acceptance(p, q) for p, q in zip(pairs.p, pairs.q, strict=True)]
    assert row["mean"] == pytest.approx(np.mean(values), abs=1e-12)
    assert len([r for r in rows if r["part"] == "decode"]) == 2 * 3


def test_tree_theorems_quick(tmp_path):
    payload = run_script("tree_theorems", tmp_path)
    claims = {r["claim"]: r for r in payload["rows"]}
    for name in ("lp_chain_equals_block", "tokenwise_le_block", "traversal_le_lp", "nodewise_le_lp"):
        assert claims[name]["checks"] > 0 and claims[name]["counterexamples"] == 0, claims[name]
    example = payload["worked_example"]
    assert example["block_accepted"] == pytest.approx(11 / 9, abs=1e-9)
    assert example["decode4_distance_idealised_plan"] > 1e-3 > example["decode4_distance_block"]
    settings = {(s["n"], s["tree"], s["law"], s["method"]) for s in payload["settings"]}
    assert (3, "binary2", "without_replacement", "traversal") in settings
    assert len(settings) == len(payload["settings"])
    # one entry recomputed from the API: the LP optimum of the first n = 2 chain case
    theorems = runpy.run_path(str(EXPERIMENTS / "tree_theorems.py"))
    config = theorems["Config"](quick=True)
    _, target, draft = theorems["draw_case"](config, (2, "chain2", "q"), 0)
    with gzip.open(tmp_path / "tree_theorems_cases.csv.gz", "rt") as handle:
        first = next(
            r for r in csv.DictReader(handle) if (r["n"], r["tree"], r["case"]) == ("2", "chain2", "0")
        )
    assert float(first["optimum"]) == pytest.approx(
        mdsd.optimal_tokens_per_step(target, draft, mdsd.Tree.chain(2), "iid")
    )
    assert (tmp_path / "tree_theorems.png").stat().st_size > 1000
    assert "Sun et al.'s worked example" in (tmp_path / "tree_theorems.md").read_text()


def test_tree_theorems_real_quick(tmp_path):
    tmp_path = tmp_path / "fresh"  # a directory the run creates
    payload = run_script("tree_theorems", tmp_path, "--real")
    claims = {r["claim"]: r for r in payload["rows"]}
    for name in ("lp_certified", "lp_chain_equals_block", "block_le_lp", "nodewise_le_lp", "traversal_le_lp"):
        assert claims[name]["checks"] > 0 and claims[name]["counterexamples"] == 0, claims[name]
    prefixes = payload["prefixes"]
    assert [p["position"] for p in prefixes] == [0, 4] * 2
    saved = np.load(tmp_path / "real_tables.npz")
    assert saved["target"].shape == saved["draft"].shape == (4, 1 + 3 + 9 + 27, 3)
    np.testing.assert_allclose(saved["target"].sum(-1), 1.0, rtol=1e-12)
    assert "real cases per setting" in (tmp_path / "tree_theorems.md").read_text()


def test_real_cases_restrict_and_retemper_exactly():
    """A case's tables (read at n = 3, T = 1, then cut to n = 2 and re-tempered) are softmax(ℓ[:2] / T) of
    the logits ℓ exactly, and the tables read directly at n = 2, T = 0.05 up to the float32 forwards."""
    theorems = runpy.run_path(str(EXPERIMENTS / "tree_theorems.py"))
    gen = np.random.default_rng(0)
    logits = {u: gen.normal(0, 30, 3) for u in [(), (0,), (1,), (2,)]}
    model = mdsd.SequenceModel.from_table({u: np.exp(v - np.logaddexp.reduce(v)) for u, v in logits.items()})
    for temperature in (1e-3, 0.05, 1.0):
        cut = theorems["_retempered"](model, 2, temperature)
        for u in [(), (0,), (1,)]:
            expected = torch.softmax(torch.from_numpy(logits[u][:2] / temperature), 0).numpy()
            np.testing.assert_allclose(cut(u), expected, rtol=1e-9, atol=1e-300)
    from mdsd.hf import read_sequence_pair, tiny_pair

    target, draft = tiny_pair(0)
    prefix = torch.tensor([5, 9, 2, 40])
    wide = read_sequence_pair(target, draft, prefix, 3, 2, temperature=1.0)
    narrow = read_sequence_pair(target, draft, prefix, 2, 2, temperature=0.05)
    assert narrow[2] == wide[2][:2]
    for model, direct in zip(wide[:2], narrow[:2], strict=True):
        cut = theorems["_retempered"](model, 2, 0.05)
        for u in [(), (0,), (1,), (0, 1), (1, 1)]:
            np.testing.assert_allclose(cut(u), direct(u), rtol=1e-4, atol=1e-12)


def test_optimal_wor_gap_quick(tmp_path):
    rows = run_script("optimal_wor_gap", tmp_path)["rows"]
    assert len(rows) == 2 and {(r["temperature"], r["k"]) for r in rows} == {(1.0, 2)}
    corpus = mdsd.data.real_pairs(1.0)
    for r in rows:
        p, q = corpus.p[r["row"]], corpus.q[r["row"]]
        assert r["alpha_iid"] == pytest.approx(mdsd.optimal_acceptance(p, q, mdsd.IID(2)), abs=1e-12)
        assert r["alpha_iid"] - 1e-12 <= r["fallback"] <= r["alpha_wor"] + 1e-9  # the i.i.d. stream
        floor = r["alpha_wor"] * (1.0 - luce_rule_module.RTOL) - 1e-9  # the Luce rule: at α*_wor to its stop
        assert floor <= r["luce"] <= r["alpha_wor"] + 1e-9
        assert r["luce_lower"] <= r["luce"] + 1e-12 and r["luce_law_error"] < 1e-12
        assert r["rrsw"] == pytest.approx(mdsd.verifier("rrsw", 2).acceptance(p, q), abs=1e-12)
    assert "gap: Luce" in (tmp_path / "optimal_wor_gap.md").read_text()
    assert (tmp_path / "optimal_wor_gap.png").exists()


def _ranked_exactly(p: np.ndarray, q: np.ndarray, k: int) -> int:
    """Tokens (q > 0 here) that are a drop or a rise of the running minima of h_j = g(P_j) − p(P_j) by
    themselves alone (h_t the minimum so far at a drop, h_{t+1} the minimum after at a rise) and whose F =
    g(P_{t+1}) − g(P_t) differs from p by more than 1e-6 relative: in rational arithmetic."""
    from fractions import Fraction

    ps, qs = [Fraction(x) for x in p], [Fraction(x) for x in q]
    order = sorted(range(p.size), key=lambda y: -ps[y] / qs[y])  # stable: ties in token order
    tail_p, tail_q = [Fraction(0)], [Fraction(0)]
    for y in reversed(order):
        tail_p.append(tail_p[-1] + ps[y])
        tail_q.append(tail_q[-1] + qs[y])
    tail_p, tail_q = tail_p[::-1], tail_q[::-1]
    h = [a - b**k for a, b in zip(tail_p, tail_q, strict=True)]
    top, bottom = list(itertools.accumulate(h, min)), list(itertools.accumulate(h[::-1], min))[::-1]
    count = 0
    for t, y in enumerate(order):
        alone = (top[t + 1] < top[t] and h[t] == top[t]) or (
            bottom[t] < bottom[t + 1] and h[t + 1] == bottom[t + 1]
        )
        f = tail_q[t] ** k - tail_q[t + 1] ** k
        count += alone and abs(f - ps[y]) > Fraction(1, 10**6) * ps[y]
    return count


def test_layout_structure_quick(tmp_path):
    """The counts of tokens where F differs from p and where F is g over the token alone (ranked by F),
    against the closed-form law of mdsd.otm.selection."""
    from mdsd.otm.selection import optimal_selection_law

    rows = run_script("layout_structure", tmp_path)["rows"]
    assert {(r["pair"], r["k"]) for r in rows} == {(f"synthetic {i}", k) for i in range(2) for k in (2, 4)}
    gen = np.random.default_rng(0)
    z = [gen.normal(size=2000) * 3.0 for _ in range(2)]
    for i, x in enumerate(z):
        p, q = np.exp(x), np.exp(x + gen.normal(size=x.size))
        p, q = p / p.sum(), q / q.sum()
        for k in (2, 4):
            (row,) = [r for r in rows if r["pair"] == f"synthetic {i}" and r["k"] == k]
            law = optimal_selection_law(p, q, mdsd.IID(k)).law
            changed = np.abs(law - p) > 1e-6 * p
            assert row["changed"] == np.count_nonzero(changed)
            assert row["changed_q"] == pytest.approx(q[changed].sum(), rel=1e-9)
            assert row["ranked"] == _ranked_exactly(p, q, k) and row["ranked"] >= 0.9 * row["changed"]
            assert 1 <= row["prefixes"] <= 50 and row["distance"] >= 1
    assert "| 4 | 2 |" in (tmp_path / "layout_structure.md").read_text()


def test_real_acceptance_quick(tmp_path):
    rows = run_script("real_acceptance", tmp_path)["rows"]
    assert {r["k"] for r in rows} == {1, 2} and all(r["positions"] == 16 for r in rows)
    verifiers = [r for r in rows if r["kind"] == "verifier" and "gap_to_own_optimum" in r]
    assert {r["name"] for r in verifiers} >= {"single", "rrs", "spechub", "optimal"}
    assert all(r["gap_to_own_optimum"] > -1e-9 for r in verifiers)  # no verifier beats its law's optimum
    # the optimal verifier reaches the i.i.d. optimum on every position
    best = next(r for r in verifiers if (r["name"], r["k"], r["temperature"]) == ("optimal", 2, 0.6))
    assert best["gap_to_own_optimum"] == pytest.approx(0.0, abs=1e-9)
    # without the without-replacement optimum the summary still writes (regression: it raised)
    run_script("real_acceptance", tmp_path / "iid", "--laws", "iid", "--verifiers", "rrs", "optimal")
    assert "optimum, iid law" in (tmp_path / "iid" / "summary.md").read_text()


def test_gpu_speedups_fits_the_step_overhead_and_predicts_without_a_draft_profile(tmp_path):
    """experiments/gpu_speedups.py: the overhead fit recovers a known o0 + o1 · B · (F + M) per kind of step
    from decode rows in gpu_fast.json's layout (model trees, a source alone, autoregressive steps); each
    method is charged its kind's and autoregressive decoding its own; a profile folder holding the target's
    alone predicts exactly the draft-free methods, with the same figures as beside a draft profile."""
    from mdsd.costs import step_forwards
    from mdsd.costs.predict import vocabulary_rows
    from mdsd.tree.plan import with_retrieval

    mod = runpy.run_path(str(EXPERIMENTS / "gpu_speedups.py"))
    Config, predictions, fit_overheads, plan_of = (
        mod[k] for k in ("Config", "predictions", "fit_overheads", "plan_of")
    )
    truth = {"model": (1.5e-3, 4e-6), "source": (0.9e-3, 2e-6), "autoregressive": (0.4e-3, 1e-6)}

    def host_ms(kind, B, rows):
        return 1e3 * (truth[kind][0] + truth[kind][1] * B * rows)

    decode = [
        {"path": "cudagraph", "tree": tree, "batch": B, "host_ms": host_ms("model", B, vocabulary_rows(p))}
        for tree in ("chain:4", "binary:3", "dynamic:8,2,3,24")
        for p in [plan_of(f"{tree}/rrsw", 0.6, (1, 1))]
        for B in (1, 64)
    ]
    chains = vocabulary_rows(with_retrieval(None, 1, 8))
    decode += [
        {"path": "cudagraph", "tree": "lookup", "batch": B, "host_ms": host_ms("source", B, chains)}
        for B in (1, 64)
    ]
    decode += [
        {"path": "cudagraph", "tree": "none", "batch": B, "host_ms": host_ms("autoregressive", B, 1)}
        for B in (1, 64)
    ]
    decode += [{"path": "eager", "tree": "none", "batch": 1, "host_ms": 99.0}]  # the eager path: not fitted
    (tmp_path / "gpu_fast.json").write_text(json.dumps({"decode": decode}))
    fits = fit_overheads(tmp_path / "gpu_fast.json")
    assert set(fits) == set(truth) and [fits[k].runs for k in truth] == [6, 2, 2]
    for kind, (o0, o1) in truth.items():
        assert fits[kind].rms_relative_error < 1e-9
        assert fits[kind].per_step == pytest.approx(o0, rel=1e-9)
        assert fits[kind].per_row_node == pytest.approx(o1, rel=1e-9)

    static = EXPERIMENTS.parent / "results" / "gpu" / "profiles" / "h200-static"
    target, draft = (mdsd.CostProfile.load(static / f"{who}.json") for who in ("target", "draft"))
    config = Config(profiles=str(static), overhead=str(tmp_path / "gpu_fast.json"), batches=(1, 8))
    rows, overheads, _, _ = predictions(config)
    assert set(overheads) == set(truth)
    for r in rows:
        if "/first" in r["method"]:
            continue  # a mixture of steps, tested with the forwards
        plan = plan_of(r["method"], r["temperature"], (1, 8) if r["source"] == "batch_efficiency" else (2, 8))
        new, F = step_forwards(plan, static=True)
        B, c = r["batch"], config.context
        kind = "model" if new else "source"
        step = sum(draft.seconds(B, n, c, True) for n in new) + target.seconds(B, F, c, True)
        step += truth[kind][0] + truth[kind][1] * B * vocabulary_rows(plan)
        ar = target.seconds(B, 1, c, True) + truth["autoregressive"][0] + truth["autoregressive"][1] * B
        e = min(r["tokens_per_forward"], plan.max_depth + 1)
        assert r["speedup"] == pytest.approx(e * ar / step, rel=1e-6), r["method"]
    del decode[
        -3:-1
    ]  # no autoregressive steps measured: nobody is charged that kind, and the summary says so
    (tmp_path / "gpu_fast.json").write_text(json.dumps({"decode": decode}))
    rows, overheads, ratio, target_profile = predictions(config)
    assert "autoregressive" not in overheads
    text = mod["summary"](rows, overheads, ratio, config, target_profile)
    assert "not measured, so charged to nobody: autoregressive" in text

    eager = EXPERIMENTS.parent / "results" / "gpu" / "profiles" / "h200-eager"
    (tmp_path / "alone").mkdir()
    shutil.copy(eager / "target.json", tmp_path / "alone" / "target.json")
    both, _, ratio, _ = predictions(Config(profiles=str(eager)))
    alone, _, no_ratio, _ = predictions(Config(profiles=str(tmp_path / "alone")))
    assert ratio and not no_ratio
    free = {r["method"] for r in alone}
    assert free and all(m.startswith("none/") and "+" in m for m in free)
    assert alone == [r for r in both if r["method"] in free]

    # the fast path's profiles stop at 32 new tokens; a source-first step may read the draft's whole buffer
    # (4 blocks of 9): extrapolated, and only those rows say so
    static, _, _, target = predictions(Config(profiles=str(eager.parent / "h200-static")))
    wide = {r["method"] for r in static if r["extrapolated"]}
    assert target.tokens[-1] < 36 and wide and all("/first" in m for m in wide)


def test_gpu_speedups_predicts_from_the_captured_forwards_of_gpu_fast(tmp_path):
    """--forwards: gpu_fast.json's forwards section (B x t at one context) as the two profiles. With times
    linear in B and in t, every predicted speedup equals E · f_p(B, 1) / (Σ_d f_q(B, n_d) + f_p(B, F)) over
    the step's forward shapes, extrapolated beyond t = 16 (rows say so); another context is refused."""
    from mdsd.costs import step_forwards

    mod = runpy.run_path(str(EXPERIMENTS / "gpu_speedups.py"))
    Config, predictions, plan_of = (mod[k] for k in ("Config", "predictions", "plan_of"))

    def ms(who, B, t):  # milliseconds: weights read once, then linear in the batch's new tokens
        return (3.8 + 0.02 * B * t) if who == "target" else (2.9 + 0.01 * B * t)

    forwards = [
        {"model": who, "B": B, "tokens": t, "context": 256, "eager_ms": 30.0, "captured_ms": ms(who, B, t)}
        for who in ("target", "draft")
        for B in (1, 64)
        for t in (1, 5, 16)
    ]
    forwards.append({"model": "target", "B": 1, "tokens": 1, "context": 256, "hf_static_captured_ms": 9.0})
    env = {"device": "cuda", "gpu": "a card", "target_parameters": 10, "draft_parameters": 3}
    (tmp_path / "gpu_fast.json").write_text(json.dumps({"env": env, "forwards": forwards}))
    config = Config(forwards=str(tmp_path / "gpu_fast.json"), context=256)
    rows, overheads, ratio, target = predictions(config)
    assert overheads == {} and target.device == "cuda (a card)" and target.path == "static:cudagraph"
    assert ratio[1] == pytest.approx(2.91 / 3.82) and ratio[64] == pytest.approx(3.54 / 5.08)
    methods = {r["method"] for r in rows}
    assert {"chain:4/single", "dynamic:8,2,3,24/rrsw", "none/topk+lookup"} <= methods  # model trees too
    measured = {  # every predicted run's rows, for the source-first runs' measured draft forwards
        (Path(result).parent.name, m.get("dataset", ""), m["method"]): m
        for result in config.results
        for m in json.loads((EXPERIMENTS.parent / result).read_text())["rows"]
    }
    for r in rows:
        plan = plan_of(r["method"], r["temperature"], (1, 8) if r["source"] == "batch_efficiency" else (2, 8))
        draft, F = step_forwards(plan, static=True)
        step = sum(ms("draft", r["batch"], n) for n in draft) + ms("target", r["batch"], F)
        if "/first" in r["method"]:  # some drafting steps, and every catch-up, read the whole buffer
            m, s = measured[(r["source"], r["dataset"], r["method"])], r["model_step_share"]
            caught = max(m["draft_forwards"] / m["target_forwards"] - len(draft) * s, 0)
            wide = m["draft_buffer_reads"] / m["target_forwards"]
            read, block = ms("draft", r["batch"], 4 * 9), ms("draft", r["batch"], draft[0])
            alone = ms("target", r["batch"], 1 + 2 * 8)
            step = s * step + wide * (read - block) + (1 - s) * alone + caught * read
        e = min(r["tokens_per_forward"], plan.max_depth + 1)
        assert r["speedup"] == pytest.approx(e * ms("target", r["batch"], 1) / step, rel=1e-9)
        assert r["extrapolated"] == (max([*draft, F]) > 16)
    assert any(r["extrapolated"] for r in rows) and not all(r["extrapolated"] for r in rows)
    assert any(0 < (r["model_step_share"] or 0) < 1 for r in rows)  # source first: a mixture of steps
    with pytest.raises(ValueError, match="--context must be 256"):
        predictions(Config(forwards=str(tmp_path / "gpu_fast.json")))

    # --fused: the fused_forwards section (B = 1, t = 1 and 16), here twice as fast
    fused = [
        {"model": who, "B": 1, "tokens": t, "context": 256, "fused_ms": ms(who, 1, t) / 2, "backend": "x"}
        for who in ("target", "draft")
        for t in (1, 16)
    ]
    payload = {"env": env, "forwards": forwards, "fused_forwards": fused}
    (tmp_path / "gpu_fast.json").write_text(json.dumps(payload))
    config = Config(forwards=str(tmp_path / "gpu_fast.json"), fused=True, context=256, batches=(1,))
    halved, _, _, target = predictions(config)
    assert target.path == "static:x" and target.batches == (1,)
    same = {(r["source"], r["dataset"], r["method"], r["temperature"]): r for r in rows if r["batch"] == 1}
    for r in halved:  # every time halved: the same speedups, the steps half as long
        twin = same[(r["source"], r["dataset"], r["method"], r["temperature"])]
        assert r["speedup"] == pytest.approx(twin["speedup"], rel=1e-9)
        assert r["step_ms"] == pytest.approx(twin["step_ms"] / 2, rel=1e-9)
    # --fused-ar: a measured fused AR step (B = 1) is a second baseline, for the B = 1 rows only
    payload["fused"] = [{"path": "inductor-cudagraph", "tree": "none", "batch": 1, "step_ms": 1.9}]
    (tmp_path / "gpu_fast.json").write_text(json.dumps(payload))
    config = Config(
        forwards=str(tmp_path / "gpu_fast.json"), context=256, fused_ar=str(tmp_path / "gpu_fast.json")
    )
    both, _, ratio, target = predictions(config)
    for r in both:
        e = r["speedup"] * r["step_ms"] / r["autoregressive_ms"]  # the tokens per step it was predicted at
        expected = e * 1.9 / r["step_ms"] if r["batch"] == 1 else None
        assert r["speedup_vs_fused_ar"] == (pytest.approx(expected, rel=1e-9) if expected else None)
    text = mod["summary"](both, {}, ratio, config, target)
    assert "B = 1 vs fused AR" in text and "measured at 1.90 ms a token" in text
    payload["fused"].append(dict(payload["fused"][0]))
    (tmp_path / "gpu_fast.json").write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="2 fused autoregressive B = 1 steps, expected one"):
        predictions(config)
    with pytest.raises(ValueError, match=r"--batches must lie in \[1, 1\]"):
        predictions(Config(forwards=str(tmp_path / "gpu_fast.json"), fused=True, context=256))
    with pytest.raises(ValueError, match="--fused reads"):
        predictions(Config(fused=True))


def test_gpu_speedups_splits_a_run_of_several_sets_by_set():
    """--sets NAME:SIZE: a results row over two prompt sets becomes one row per set, its measures computed
    again from that set's prompts alone (tokens per target forward = their tokens ÷ their forwards); rows
    that name their dataset stay as they are; a malformed spec is refused."""
    by_set = runpy.run_path(str(EXPERIMENTS / "gpu_speedups.py"))["by_set"]
    counts = ("accepted", "retrieved", "drafted_steps", "model_steps", "draft_buffer_reads")
    prompts = [
        {"prompt": i, "seed": i, "batch": i // 2, "tokens": 8 + i, "steps": 4, "target_forwards": 2 + i % 3}
        | {"draft_forwards": 6, "seconds": 1.0, "stopped_by_eos": i == 4}
        | dict.fromkeys(counts, 0)
        for i in range(5)
    ]
    row = {"method": "chain:4/single", "temperature": 0.6, "per_prompt": prompts}
    split = by_set([row], ("a:2", "b:3"))
    assert [(r["dataset"], r["prompts"]) for r in split] == [("a", 2), ("b", 3)]
    for r, mine in zip(split, (prompts[:2], prompts[2:]), strict=True):
        expected = sum(p["tokens"] for p in mine) / sum(p["target_forwards"] for p in mine)
        assert r["tokens_per_forward"] == pytest.approx(expected)
        assert r["method"] == "chain:4/single" and r["temperature"] == 0.6
    named = [row | {"dataset": "humaneval"}]
    assert by_set(named, ("a:2", "b:3")) is named and by_set([row], ()) == [row]
    for bad in ("a", "a:0", ":3", "a:x"):
        with pytest.raises(ValueError, match="--sets"):
            by_set([row], (bad,))


def test_gpu_speedups_predicts_a_head_drafted_method_from_the_heads_section(tmp_path):
    """--heads: the heads section's target and the head of --head-shape at B = 1 (t = 1, 16) as the
    profiles; every speedup is E · f_p(1) / (Σ_d f_h(n_d) + f_p(F)), linear between the measured t; a shape
    not measured is refused, naming the ones that were."""
    from mdsd.costs import step_forwards

    mod = runpy.run_path(str(EXPERIMENTS / "gpu_speedups.py"))
    Config, predictions, plan_of = (mod[k] for k in ("Config", "predictions", "plan_of"))

    def ms(who, t):
        return {"target": 3.5 + 0.04 * t, "head": 0.2 + 0.003 * t, "draft": 2.8 + 0.03 * t}[who]

    rows = [
        {"model": who, "intermediate": 4096, "draft_vocab": vocab, "B": B, "tokens": t, "context": 256}
        | {"captured_ms": ms(who, t) * (2 if B == 64 else 1)}
        for who, vocab in (("target", 151936), ("head", 16384), ("draft", 151936))
        for B, t in ((1, 1), (1, 16), (64, 1))
    ]
    env = {"device": "cuda", "gpu": "a card", "target_parameters": 10, "draft_parameters": 3}
    (tmp_path / "gpu_fast.json").write_text(json.dumps({"env": env, "heads": rows}))
    results = "results/drafters/decode-kl-head/batch_efficiency.json"
    config = Config(heads=str(tmp_path / "gpu_fast.json"), context=256, batches=(1,), results=(results,))
    predicted, _, ratio, target = predictions(config)
    assert target.batches == (1,) and ratio[1] == pytest.approx(ms("head", 1) / ms("target", 1))
    assert {r["method"] for r in predicted} == {
        r["method"] for r in json.loads((EXPERIMENTS.parent / results).read_text())["rows"]
    }
    for r in predicted:
        draft, F = step_forwards(plan_of(r["method"], r["temperature"], (1, 8)), static=True)
        step = sum(ms("head", n) for n in draft) + ms("target", F)
        e = r["tokens_per_forward"]
        assert r["speedup"] == pytest.approx(e * ms("target", 1) / step, rel=1e-9)
    fused = [
        r | {"model": "head-fused", "captured_ms": 2 * r["captured_ms"]} for r in rows if r["model"] == "head"
    ]
    (tmp_path / "fused.json").write_text(json.dumps({"env": env, "fused_heads": [*rows, *fused]}))
    _, _, doubled, _ = predictions(
        dataclasses.replace(config, heads=str(tmp_path / "fused.json"), head_model="head-fused")
    )  # --head-model: the fused head's rows of a fused_heads section
    assert doubled[1] == pytest.approx(2 * ratio[1])
    with pytest.raises(
        ValueError, match=r"--head-shape \[2048, 8192\] was not measured.*\('head', 4096, 16384\)"
    ):
        predictions(
            Config(heads=str(tmp_path / "gpu_fast.json"), context=256, batches=(1,), head_shape=(2048, 8192))
        )
    with pytest.raises(ValueError, match="not both"):
        predictions(Config(heads="a", forwards="b"))
    costs = {"rows": [{"model": "small:8:2:64", "measured_ratio": None, "predicted_ratio": 0.125}]}
    (tmp_path / "costs.json").write_text(json.dumps(costs))
    small = {"small": "small:8:2:64", "draft_costs": str(tmp_path / "costs.json")}
    predicted, _, ratio, _ = predictions(dataclasses.replace(config, **small))  # --small: c = 0.125
    assert ratio[1] == pytest.approx(0.125)
    for r in predicted:
        draft, F = step_forwards(plan_of(r["method"], r["temperature"], (1, 8)), static=True)
        step = sum(0.125 * ms("target", n) for n in draft) + ms("target", F)
        assert r["speedup"] == pytest.approx(r["tokens_per_forward"] * ms("target", 1) / step, rel=1e-9)
    with pytest.raises(ValueError, match=r"--small 'small:8:2:32' is not .* it has \['small:8:2:64'\]"):
        predictions(dataclasses.replace(config, **(small | {"small": "small:8:2:32"})))
    with pytest.raises(ValueError, match="give --heads too"):
        predictions(Config(small="small:8:2:64"))


def test_specialised_drafters_quick(tmp_path, capsys):
    """Every drafter on every set; the greedy chains computed from agreement are the decoder's own tokens per
    target forward (the small drafter decoded here at T = 0 on the run's prompts and answers)."""
    from mdsd.drafters.head import FeatureHead
    from mdsd.drafters.small import SmallDrafter
    from mdsd.hf.tiny import tiny_pair

    target, _ = tiny_pair(0)
    drafter = SmallDrafter.fresh(target, torch.arange(64), 16, 2, 4, 2, 24, seed=1)
    drafter.save(tmp_path / "small")
    shutil.copytree(tmp_path / "small", tmp_path / "pf")
    for name, init, tokens in (("small", None, 100), ("pf", "/x/pretrained", 300)):  # finetuned on "a"
        record = {"stage": "finetune", "init": init, "source": {"config": {"sets": ["a-train"]}}}
        record["data"] = {"train_tokens": tokens}
        (tmp_path / name / "training.json").write_text(json.dumps(record))
    FeatureHead.from_target(target, torch.arange(64)).save(tmp_path / "head")
    (tmp_path / "head" / "training.json").write_text(json.dumps({"features": "x"}))  # a head's record
    folders = (str(tmp_path / "small"), str(tmp_path / "pf"), str(tmp_path / "head"))
    flags = ("--drafters", *folders, "--sets", "a", "b", "--prompts-per-set", "3")
    payload = run_script("specialised_drafters", tmp_path / "out", *flags, "--max-new-tokens", "10")
    rows = payload["rows"]
    assert [(r["drafter"], r["set"]) for r in rows] == [
        (d, s) for s in ("a", "b") for d in ("draft-0.5b", "small", "pf", "head")
    ]
    assert "home" not in next(r for r in rows if r["drafter"] == "head")
    pf = next(r for r in rows if r["drafter"] == "pf")
    assert (pf["stage"], pf["init"], pf["train_tokens"], pf["home"]) == ("finetune", "pretrained", 300, "a")
    assert (tmp_path / "out" / "learning_curves.png").stat().st_size > 1000
    table = (tmp_path / "out" / "summary.md").read_text()  # the matrix, read from the rows

    def section(title: str) -> str:
        return table.split(f"## {title}")[1].split("\n## ")[0]

    def text(set_name: str) -> str:
        r = next(r for r in rows if r["drafter"] == "pf" and r["set"] == set_name)
        return f"{r['agree']:.3f} [{r['agree_ci95'][0]:.3f}, {r['agree_ci95'][1]:.3f}]"

    assert f"| pf (P→F on a, 300 tokens) | **{text('a')}** | {text('b')} |" in section("Greedy agreement")
    assert "| head | — | — |" in section("Tokens per target forward, greedy chain:4")
    shutil.copytree(tmp_path / "small", tmp_path / "again" / "small")
    three = run_script("specialised_drafters", tmp_path / "out", *flags, "--max-new-tokens=10", "--ks=3")
    for row, before in zip(three["rows"], rows, strict=True):  # the same answers, α*_3 between α*_2 and α*_4
        assert "alpha_2" not in row and before["alpha_2"] <= row["alpha_3"] <= before["alpha_4"]
    twins = ("--drafters", folders[0], str(tmp_path / "again" / "small"), *flags[3:])
    with pytest.raises(SystemExit):  # answers.json is reused
        run_script("specialised_drafters", tmp_path / "out", *twins, "--max-new-tokens", "10")
    assert "--drafters: two drafters are named 'small'" in capsys.readouterr().err
    saved = json.loads((tmp_path / "out" / "answers.json").read_text())
    answers = saved["answers"]
    assert list(saved["provenance"]) == ["a", "b"] and saved["provenance"]["a"]["git_revision"]
    more = ("--drafters", folders[0], "--sets", "b", "c", "--prompts-per-set", "3", "--max-new-tokens", "10")
    run_script("specialised_drafters", tmp_path / "out", *more)  # b's answers reused, c's added
    grown = json.loads((tmp_path / "out" / "answers.json").read_text())
    assert grown["provenance"]["b"] == saved["provenance"]["b"] and "c" in grown["provenance"]
    grown = grown["answers"]
    assert list(grown) == ["a", "b", "c"] and grown["b"] == answers["b"] and grown["c"] != answers["a"]
    for depth in (1, 4):
        dec = mdsd.TreeDecoder(target, drafter, mdsd.Tree.chain(depth), "single", temperature=0.0)
        for set_name in ("a", "b"):
            prompts = [p for p, _ in answers[set_name]]
            outs = dec.generate_batch(prompts, 10)
            assert [o.tokens.tolist() for o in outs] == [a for _, a in answers[set_name]]
            want = sum(o.tokens.numel() for o in outs) / sum(len(o.tokens_per_step) for o in outs)
            row = next(r for r in rows if r["drafter"] == "small" and r["set"] == set_name)
            assert row[f"greedy_chain{depth}"] == pytest.approx(want)
    assert all(0 <= r["acceptance"] <= r["alpha_2"] <= r["alpha_4"] <= 1 for r in rows)


def test_sampled_drafters_quick_pools_the_seeds_of_its_runs(tmp_path, capsys):
    """Each (method, seed, set) is one batch_efficiency run; the pooled row is the ratio of the seeds' summed
    counts, each seed's ratio its run's; a finished run is read back, not redone; one of another config is
    refused."""
    flags = ("--seeds", "0", "7", "--methods", "chain:2/single", "--sets", "a", "b", "--max-new-tokens", "6")
    flags += ("--batch-size", "2", "--prompts-per-task", "2")
    rows = run_script("sampled_drafters", tmp_path, *flags)["rows"]
    assert [(r["set"], r["drafter"], r["seeds"]) for r in rows] == [(s, "draft-0.5b", [0, 7]) for s in "ab"]
    for row in rows:
        runs = [
            json.loads(
                (tmp_path / "runs" / row["set"] / "draft-0.5b" / f"chain2-single-s{s}" / name).read_text()
            )
            for s in (0, 7)
            for name in ["batch_efficiency.json"]
        ]
        assert [r["metadata"]["config"]["seed"] for r in runs] == [0, 7]
        counts = [r["rows"][0] for r in runs]
        tokens = sum(c["tokens"] for c in counts)
        assert row["tokens_per_forward"] == pytest.approx(tokens / sum(c["target_forwards"] for c in counts))
        assert row["per_seed"] == {
            str(s): c["tokens_per_forward"] for s, c in zip((0, 7), counts, strict=True)
        }
        assert row["tokens"] == tokens == 2 * 4 * 6 and row["draft_depth"] == 2 and not row["home"]
    stamp = (tmp_path / "runs" / "a" / "draft-0.5b" / "chain2-single-s0" / "batch_efficiency.json").stat()
    again = run_script("sampled_drafters", tmp_path, *flags)["rows"]
    assert (
        again == rows
        and stamp
        == (tmp_path / "runs" / "a" / "draft-0.5b" / "chain2-single-s0" / "batch_efficiency.json").stat()
    )
    with pytest.raises(SystemExit):
        run_script("sampled_drafters", tmp_path, *flags[:-6], "--max-new-tokens", "5", *flags[-4:])
    assert "holds a run of another config (max_new_tokens: 6)" in capsys.readouterr().err


def test_sampled_drafters_grid_and_pool(tmp_path):
    """A drafter finetuned on one set decodes it only; pairs compare the seeds both drafters ran, prompt by
    prompt; the predicted speedup divides by one plus the draft depth times the cost share."""
    module = runpy.run_path(str(EXPERIMENTS / "sampled_drafters.py"))
    config = module["Config"]
    checked = []
    module["grid"].__globals__["check_heldout"] = lambda folder, sets: checked.append(
        (Path(folder).name, sets)
    )
    for name, sets in (("deu", ["translate-deu-train"]), ("p", ["chat-train", "code-train"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "drafter.json").write_text("{}")  # a small drafter's folder
        record = {"stage": "finetune" if name == "deu" else "pretrain", "init": None}
        record |= {"source": {"config": {"sets": sets}}, "data": {"train_tokens": 10}}
        (tmp_path / name / "training.json").write_text(json.dumps(record))
    (tmp_path / "head").mkdir()  # a feature head's training record says nothing of stages: every set
    (tmp_path / "head" / "training.json").write_text(json.dumps({"features": "x"}))
    folders = (str(tmp_path / "deu"), str(tmp_path / "p"), str(tmp_path / "head"))
    runs = module["grid"](config(drafters=folders, sets=("translate-deu", "humaneval"), seeds=(0, 1)))
    assert [(r["method"], r["seed"], r["set"], r["drafter"]) for r in runs[:7]] == [
        ("chain:1/single", 0, "translate-deu", d) for d in ("draft-0.5b", "deu", "p", "head")
    ] + [("chain:1/single", 0, "humaneval", d) for d in ("draft-0.5b", "p", "head")]
    assert len(runs) == 2 * 2 * 7 and {r["home"] for r in runs if r["drafter"] == "deu"} == {"translate-deu"}
    assert checked == [("deu", ("translate-deu",)), ("p", ("translate-deu", "humaneval"))]
    folders = folders[:2]
    with pytest.raises(ValueError, match="finetuned for translate-deu, which is not in --sets"):
        module["grid"](config(drafters=folders, sets=("humaneval",)))
    with pytest.raises(ValueError, match="two drafters are named 'deu'"):
        module["grid"](config(drafters=(*folders, folders[0])))
    with pytest.raises(ValueError, match="--sets: unknown prompt sets"):
        module["grid"](config(sets=("translate-xyz",)))
    with pytest.raises(ValueError, match="--methods: 'none/topk.lookup' drafts no tree"):
        module["grid"](config(methods=("none/topk+lookup",)))
    assert [
        module["draft_depth"](m) for m in ("chain:4/single", "binary:3/rrs", "dynamic:8,2,3,24/rrsw")
    ] == [
        4,
        3,
        8,
    ]

    gen = np.random.default_rng(3)

    def run(drafter, seed):
        per_prompt = [
            {"prompt": i, "tokens": int(gen.integers(1, 65)), "target_forwards": int(gen.integers(1, 30)),
             "stopped_by_eos": bool(gen.integers(2))}
            for i in range(6)
        ]  # fmt: skip
        return {
            "set": "s",
            "method": "chain:4/single",
            "drafter": drafter,
            "seed": seed,
            "per_prompt": per_prompt,
        }

    runs = [run("a", 0), run("a", 1), run("b", 1), run("b", 2)]
    rows, pairs = module["pool"](runs, {"a": 0.25, "b": None})
    a, b = rows
    t = np.array([[p["tokens"] for p in r["per_prompt"]] for r in runs], dtype=float)
    f = np.array([[p["target_forwards"] for p in r["per_prompt"]] for r in runs], dtype=float)
    assert a["tokens_per_forward"] == pytest.approx(t[:2].sum() / f[:2].sum())
    assert a["ci95"] == mdsd.harness.comparison.ratio_interval(t[:2].sum(0), f[:2].sum(0))[1]
    assert a["per_seed"] == {
        "0": pytest.approx(t[0].sum() / f[0].sum()),
        "1": pytest.approx(t[1].sum() / f[1].sum()),
    }
    assert a["speedup"] == pytest.approx(a["tokens_per_forward"] / 2) and b["speedup"] is None
    assert a["eos"] == sum(p["stopped_by_eos"] for r in runs[:2] for p in r["per_prompt"])
    (pair,) = pairs  # on seed 1, the one both ran
    assert (pair["a"], pair["b"], pair["seeds"]) == ("b", "a", [1])  # the later drafter over the earlier
    assert (pair["ratio"], pair["ci95"]) == mdsd.harness.comparison.paired_ratio(t[2], f[2], t[1], f[1])
    with pytest.raises(ValueError, match="the seeds' runs hold different prompts"):
        module["pool"]([runs[0], runs[1] | {"per_prompt": runs[1]["per_prompt"][:5]}], {})


def test_drafters_reads_each_drafters_gpu_cost_from_the_file_that_measured_it(tmp_path):
    """gpu_row: a fused head's row from a fused_heads section, the draft's from the file that has one, a
    head's by its MLP width and the nearest draft vocabulary at or above its own, B = 1 and t = 1 only."""
    gpu_row = runpy.run_path(str(EXPERIMENTS / "drafters.py"))["gpu_row"]

    def row(model, ratio, inter=4096, vocab=16384, B=1, tokens=1):
        return dict(
            model=model, ratio_captured=ratio, intermediate=inter, draft_vocab=vocab, B=B, tokens=tokens
        )

    new = {"fused_heads": [row("head", 0.061), row("head-fused", 0.063), row("head-fused", 0.07, B=64)]}
    old = {"heads": [row("head", 0.05, vocab=32000), row("head", 0.04, vocab=8192), row("draft", 0.8)]}
    for name, results in (("new", new), ("old", old)):
        (tmp_path / f"{name}.json").write_text(json.dumps(results))
    paths = (str(tmp_path / "new.json"), str(tmp_path / "old.json"))
    assert gpu_row(paths, "head-fused", (4096, 16384))["ratio_captured"] == 0.063
    assert gpu_row(paths, "draft", None)["ratio_captured"] == 0.8
    assert gpu_row(paths[1:], "head", (4096, 16384))["ratio_captured"] == 0.05  # 8,192 tokens is too few
    assert gpu_row(paths[1:], "head-fused", (4096, 16384)) == {} and gpu_row((), "draft", None) == {}


def test_sampled_drafters_refuses_a_run_of_other_weights(tmp_path):
    """A finished run is read back only while its drafter's folder holds the weights it was decoded with."""
    module = runpy.run_path(str(EXPERIMENTS / "sampled_drafters.py"))
    config, read_run, kept = module["Config"](), module["read_run"], module["KEPT"]
    run = {"method": "chain:1/single", "seed": 0, "set": "translate-deu", "drafter": "deu", "home": None}
    held = {"datasets": [run["set"]], "methods": [run["method"]], "temperatures": [config.temperature]}
    held |= {"seed": 0} | {k: getattr(config, k) for k in kept if k not in held and k != "seed"}
    digests = {}
    for name, weights in (("old", b"one"), ("new", b"two")):
        (tmp_path / name / "deu").mkdir(parents=True)
        (tmp_path / name / "deu" / "drafter.safetensors").write_bytes(weights)
        digests[name] = mdsd.hf.describe_model(tmp_path / name / "deu")["weights_sha256"]
    models = {"draft": {"name": "deu", "weights_sha256": digests["old"]}}
    row = {"per_prompt": [{"prompt": 0, "tokens": 3, "target_forwards": 2}]}
    payload = {"metadata": {"config": held, "models": models}, "rows": [row]}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "batch_efficiency.json").write_text(json.dumps(payload))
    got = read_run(run | {"folder": str(tmp_path / "old" / "deu")}, tmp_path / "run", config)
    assert got["per_prompt"] == row["per_prompt"]
    with pytest.raises(
        ValueError, match=f"other weights of deu \\({digests['old'][:12]}, {digests['new'][:12]} now\\)"
    ):
        read_run(run | {"folder": str(tmp_path / "new" / "deu")}, tmp_path / "run", config)
