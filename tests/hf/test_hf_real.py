"""The real Qwen2.5-Coder pair in the mdsd cache (`mdsd models fetch qwen2.5-coder`); skipped without it."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

from mdsd.hf.fetch import is_fetched
from mdsd.hf.load import load_pair, pair_paths

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not is_fetched("qwen2.5-coder"), reason="qwen2.5-coder not in the mdsd cache"),
]


def test_real_pair_loads_offline_and_agrees_on_easy_code(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    target, draft, tokenizer = load_pair(*pair_paths("qwen2.5-coder"), dtype="float32")
    assert len(tokenizer) <= target.config.vocab_size == draft.config.vocab_size == 151_936
    assert tokenizer.chat_template, "the converted tokenizer keeps the GGUF chat template"
    text = (
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"
    )
    ids = torch.tensor([tokenizer.encode(text)])
    with torch.no_grad():
        p = target(ids).logits[0, :-1].float()
        q = draft(ids).logits[0, :-1].float()
    assert torch.isfinite(p).all() and torch.isfinite(q).all()
    # Working weights predict this textbook code well; garbage (mis-mapped or corrupt) weights would not.
    truth = ids[0, 1:]
    assert (p.argmax(-1) == truth).float().mean() > 0.5
    assert (q.argmax(-1) == truth).float().mean() > 0.5


def test_real_prompts_fit_the_budget_with_the_chat_template():
    from mdsd.data.prompts import prompts
    from mdsd.hf.load import load_tokenizer

    tokenizer = load_tokenizer(pair_paths("qwen2.5-coder")[0])
    for name in ("mt-bench", "humaneval", "news"):
        batch = prompts(name, 5, tokenizer, max_tokens=128)
        assert all(len(p.input_ids) <= 128 for p in batch)
        if name != "mt-bench":  # the first HumanEval stubs and news articles are longer: cut to exactly 128
            assert any(len(p.input_ids) == 128 for p in batch)
        text = tokenizer.decode(batch[0].input_ids)
        assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_tree_theorems_on_the_real_pair_records_its_provenance_regression(tmp_path, monkeypatch):
    """Bug: experiments/tree_theorems.py --real wrote no model provenance (results/tree_theorems_real has
    empty "models" and "prompt_sets"): now the weights' sha256 and the pinned prompt sets. And --positions 1
    (the prompts alone) ran into "stack expects a non-empty TensorList"."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    script = Path(__file__).resolve().parents[2] / "experiments" / "tree_theorems.py"
    flags = ["--real", "--ns", "2", "--trees", "chain2", "--laws", "iid", "--temperatures", "1.0"]
    flags += ["--cases", "1", "--prompts-per-set", "1", "--positions", "1", "--datasets", "humaneval"]
    monkeypatch.setattr(sys, "argv", ["tree_theorems", *flags, "--output-dir", str(tmp_path)])
    runpy.run_path(str(script), run_name="__main__")
    meta = json.loads((tmp_path / "tree_theorems.json").read_text())["metadata"]
    assert {meta["models"][role]["pair"] for role in ("target", "draft")} == {"qwen2.5-coder"}
    assert all(len(meta["models"][role]["weights_sha256"]) == 64 for role in ("target", "draft"))
    assert [s["name"] for s in meta["prompt_sets"]] == ["humaneval"]
