"""A tiny random-weight target/draft pair built from a config: no download, for smoke runs and the tour."""

from __future__ import annotations

import torch

__all__ = ["tiny_pair"]


def tiny_pair(seed: int = 0, vocab: int = 64):
    """``(target, draft)``: a random-weight Qwen2 target (2 layers, hidden size 64) and a smaller draft (1
    layer, hidden size 32) over a vocabulary of ``vocab`` tokens, in eval mode, seeded (transformers
    initialises weights from the global RNG; it is forked, so the caller's stream is untouched). Their
    next-token laws are unrelated: an acceptance floor, not a real pair's.

    >>> target, draft = tiny_pair(0, vocab=16)
    >>> target.config.vocab_size, draft.config.num_hidden_layers
    (16, 1)
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    models = []
    for offset, (hidden, layers) in enumerate(((64, 2), (32, 1))):
        config = Qwen2Config(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=False,
            eos_token_id=None,
        )
        config._attn_implementation = "sdpa"
        with torch.random.fork_rng():
            torch.manual_seed(seed + offset)
            models.append(Qwen2ForCausalLM(config).eval())
    return tuple(models)
