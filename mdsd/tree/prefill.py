"""The prompt's features for a drafter that reads the target's hidden states.

A feature drafter (:mod:`mdsd.drafters.head`) reads each token with the target's hidden state at the
position before it. Before the first step the target has seen nothing, so the decode starts with one target
forward over each prompt but its last token (committed to the target's cache): the drafter then reads the
whole prompt with those features (zeros before a prompt's first token), and the first step's target reads
the last token as its root, as every later step does.
"""

from __future__ import annotations

import torch

from mdsd.tree.cache import Cache
from mdsd.tree.draft import Pending, causal

__all__ = ["prefill_features"]


def prefill_features(cache: Cache, prompts: Pending) -> tuple[Pending, Pending]:
    """(the target's pending block, the drafter's) after the target's ``cache`` read ``prompts`` (left-padded
    [B, P]) but their last tokens: each prompt's last token [B, 1], and the prompts with their features
    [B, P, H]."""
    ids, real = prompts.ids, prompts.real
    B, P = ids.shape
    before = torch.cat([torch.zeros_like(real[:, :1]), real[:, :-1]], 1)  # the token has a real predecessor
    hidden = None
    if P > 1:
        head = real[:, :-1]  # every real token but the last (the last column is every row's last token)
        cache.begin()
        positions = cache.live()[:, None] + (head.cumsum(1) - 1).clamp(min=0)
        hidden = cache.forward(ids[:, :-1], causal(head), positions, P - 1, head).hidden  # [B, P - 1, H]
        order = torch.sort((~head).to(torch.uint8), dim=1, stable=True).indices  # real slots first, in order
        cache.commit(order, head.sum(1))
    size = _hidden_size(cache) if hidden is None else hidden.shape[2]
    dtype = next(p.dtype for p in cache.model.parameters() if p.is_floating_point())
    shifted = torch.zeros(B, 1, size, dtype=dtype, device=ids.device)
    if hidden is not None:
        shifted = torch.cat([shifted, hidden.to(dtype)], 1)  # token j's feature: the state at token j - 1
    features = shifted * before[..., None]
    root = Pending(ids[:, -1:], torch.ones(B, 1, dtype=torch.bool, device=ids.device))
    return root, Pending(ids, real, features)


def _hidden_size(cache: Cache) -> int:
    return int(cache.model.get_output_embeddings().weight.shape[1])
