"""Recording next-token logits along a sampled target continuation (tiny random Qwen2 models)."""

from __future__ import annotations

import pytest
import torch
from tiny_gguf import tiny_model

from mdsd.hf.record import next_token_logits, record_prompt, sample_continuation


@pytest.fixture(scope="module")
def models(tiny_pair):
    model, tokenizer, _ = tiny_pair
    return model, tiny_model(len(tokenizer), seed=7), tokenizer


def test_sampling_is_seeded_and_its_logits_match_a_full_forward(models):
    target, _, tokenizer = models
    prompt = torch.tensor(tokenizer.encode("def add(a, b):"))
    a, logits = sample_continuation(target, prompt, 6, 1.0, torch.Generator().manual_seed(3))
    b, _ = sample_continuation(target, prompt, 6, 1.0, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.numel() == 6 and logits.shape == (6, len(tokenizer))
    full = next_token_logits(target, torch.cat([prompt, a]), prompt.numel())
    torch.testing.assert_close(logits, full, rtol=1e-4, atol=1e-5)


def test_greedy_sampling_follows_the_argmax_and_stops_at_eos(models):
    target, _, tokenizer = models
    prompt = torch.tensor(tokenizer.encode("hello world"))
    tokens, logits = sample_continuation(target, prompt, 5, 0.0)
    assert torch.equal(tokens, logits.argmax(-1))
    eos = int(tokens[2])
    stopped, _ = sample_continuation(target, prompt, 5, 0.0, eos_token_id=eos)
    assert torch.equal(stopped, tokens[: int((tokens == eos).nonzero()[0]) + 1])


def test_record_prompt_pairs_each_position_with_both_models(models):
    target, draft, tokenizer = models
    prompt = torch.tensor(tokenizer.encode("The quick brown fox"))
    tokens, p_logits, q_logits = record_prompt(
        target, draft, prompt, 4, 0.6, torch.Generator().manual_seed(0)
    )
    ids = torch.cat([prompt, tokens])
    with torch.no_grad():
        expected_q = draft(ids[None]).logits[0, prompt.numel() - 1 : -1]
    torch.testing.assert_close(q_logits, expected_q)
    assert p_logits.shape == q_logits.shape == (4, len(tokenizer))


def test_bad_arguments(models):
    target, _, _ = models
    with pytest.raises(ValueError, match="temperature"):
        sample_continuation(target, torch.tensor([1, 2]), 2, -1.0)
    with pytest.raises(ValueError, match="start must be in"):
        next_token_logits(target, torch.tensor([1, 2]), 2)
