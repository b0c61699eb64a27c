"""What the tree decoder (and the Hugging Face baselines measured beside it) ask of a pair of causal LMs:
one vocabulary, and the tokens that end generation."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["shared_vocab_size", "eos_ids"]


def shared_vocab_size(target: torch.nn.Module, draft: torch.nn.Module) -> int:
    """The vocabulary size V of two causal LMs, checked to be one (``config.vocab_size`` and the output
    layer's rows of both), else ``ValueError`` naming both; ``TypeError`` for what is not a causal LM."""
    sizes = {}
    for who, model in (("target", target), ("draft", draft)):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"{who} must be a transformers causal LM (a torch Module), got {type(model).__name__}"
            )
        config_size = getattr(getattr(model, "config", None), "vocab_size", None)
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        head_size = head.weight.shape[0] if head is not None else config_size
        if config_size is None or head_size is None:
            raise TypeError(f"{who} has no config.vocab_size; is it a transformers causal LM?")
        sizes[who] = (int(config_size), int(head_size))
    if len({*sizes["target"], *sizes["draft"]}) != 1:
        raise ValueError(
            "target and draft must share one vocabulary: (config.vocab_size, output size) is "
            f"{sizes['target']} for the target and {sizes['draft']} for the draft"
        )
    return sizes["target"][0]


def eos_ids(target: torch.nn.Module, eos_token_id: int | list[int] | None) -> frozenset[int]:
    """The tokens that end generation: ``eos_token_id`` (an id or a list), by default the target's
    ``generation_config.eos_token_id`` (or its config's); none if neither says."""
    if eos_token_id is None:
        config = getattr(target, "generation_config", None) or getattr(target, "config", None)
        eos_token_id = getattr(config, "eos_token_id", None)
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else list(eos_token_id)
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError(f"eos_token_id must be a token id or a list of them, got {eos_token_id!r}")
    return frozenset(int(t) for t in ids)
