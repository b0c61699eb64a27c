"""Sequence-model tables read off tiny random causal LMs (built from a config: no downloads)."""

from __future__ import annotations

import numpy as np
import pytest
import tiny_lms
import torch

import mdsd
from mdsd.hf import read_sequence_pair

PREFIX = torch.tensor([[3, 1, 4, 1, 5]])


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    target = tiny_lms.tiny_lm(0)
    return target, tiny_lms.perturbed(target, 0.3, seed=1)


@torch.no_grad()
def _direct(model, ids: list[int], kept: list[int], temperature: float) -> np.ndarray:
    """One unbatched forward: the next-token law after ``ids``, restricted to ``kept`` and renormalised."""
    logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    p = torch.softmax(logits / temperature, dim=-1)[kept]
    return (p / p.sum()).numpy()


def test_tables_are_the_models_conditionals_over_the_targets_top_tokens(models):
    target, draft = models
    tp, dp, kept = read_sequence_pair(target, draft, PREFIX, n=4, depth=2, temperature=0.7)
    with torch.no_grad():
        first = target(input_ids=PREFIX).logits[0, -1]
    assert kept == torch.topk(first, 4).indices.tolist()
    assert tp.n == dp.n == 4 and tp.depth == dp.depth == 2
    for u in [(), (0,), (3,), (1, 2), (3, 3)]:
        ids = PREFIX[0].tolist() + [kept[t] for t in u]
        np.testing.assert_allclose(tp(u), _direct(target, ids, kept, 0.7), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(dp(u), _direct(draft, ids, kept, 0.7), rtol=1e-5, atol=1e-7)


def test_deep_tries_match_one_forward_per_string(models):
    target, draft = models
    tp, dp, kept = read_sequence_pair(target, draft, PREFIX[0], n=3, depth=3, temperature=0.05)
    for u in [(2,), (1, 0), (0, 2, 1), (2, 2, 2)]:
        ids = PREFIX[0].tolist() + [kept[t] for t in u]
        np.testing.assert_allclose(tp(u), _direct(target, ids, kept, 0.05), rtol=1e-4, atol=1e-12)
        np.testing.assert_allclose(dp(u), _direct(draft, ids, kept, 0.05), rtol=1e-4, atol=1e-12)


def test_the_theory_runs_on_real_conditionals(models):
    target, draft = models
    tp, dp, _ = read_sequence_pair(target, draft, PREFIX[0], n=3, depth=2, temperature=1.0)
    best = mdsd.solve_tree_otm(tp, dp, mdsd.Tree.chain(2), "iid")
    assert best.status == "optimal"
    assert mdsd.block_tokens_per_step(tp, dp, 2) == pytest.approx(best.value, abs=1e-8)
    assert mdsd.nodewise_tokens_per_step(tp, dp, mdsd.Tree.chain(2), "single") <= best.value + 1e-9


def test_rejects_bad_arguments(models):
    target, draft = models
    with pytest.raises(ValueError, match="exceeds the vocabulary"):
        read_sequence_pair(target, draft, PREFIX, n=13, depth=1)
    with pytest.raises(ValueError, match="temperature"):
        read_sequence_pair(target, draft, PREFIX, n=2, depth=1, temperature=0.0)
    with pytest.raises(ValueError, match="at least one token"):
        read_sequence_pair(target, draft, torch.zeros(1, 0, dtype=torch.long), n=2, depth=1)
    with pytest.raises(ValueError, match="outside"):
        read_sequence_pair(target, draft, torch.tensor([[12]]), n=2, depth=1)
    with pytest.raises(ValueError, match="share one vocabulary"):
        read_sequence_pair(target, tiny_lms.tiny_lm(2, vocab=13), PREFIX, n=2, depth=1)
