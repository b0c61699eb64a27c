"""The first step of a decode with a drafter that reads the target's features: the target reads the prompt.

A feature drafter (:mod:`mdsd.drafters.head`) reads each token with the target's hidden state at the
position before it. Before the first step the target has seen nothing, so a decode with such a drafter
starts as plain autoregressive decoding does (EAGLE's prefill): one target forward over each prompt, which
emits the first token from p at the prompt's last position (drawn from the step's uniform stream, or the
argmax at T = 0: the target's law) and commits the prompt to the target's cache. The drafter then reads the
prompt and that token with their features (zeros before a prompt's first token) at the next step, whose
target reads the token as its root, as every later step does. So the prompt's read costs one target forward
and emits one token, as it does for autoregressive decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mdsd.sampling import inverse_cdf, uniform
from mdsd.tree.cache import Cache
from mdsd.tree.draft import Pending, causal
from mdsd.tree.step import COLUMNS, Summary

__all__ = ["Prefilled", "prefill"]


@dataclass
class Prefilled:
    """What the prompt's read leaves for the first drafting step."""

    root: Pending  # [B, 1] the emitted token, which the target reads next
    drafter: Pending  # [B, P + 1] the prompt and that token with their features, for the drafter
    summary: Summary  # the step as the host records it (one token emitted, no draft)


def prefill(cache: Cache, prompts: Pending, temperature: float, stream) -> Prefilled:
    """The first step (module docstring) over the target's ``cache`` (made with ``hidden=True``) for the
    left-padded ``prompts`` [B, P]; ``stream``: the step's random numbers."""
    ids, real = prompts.ids, prompts.real
    B, P = ids.shape
    cache.begin()
    positions = cache.live()[:, None] + (real.cumsum(1) - 1).clamp(min=0)
    seen = cache.forward(ids, causal(real), positions, P, real)
    order = torch.sort((~real).to(torch.uint8), dim=1, stable=True).indices  # the real slots, in order
    cache.commit(order, real.sum(1))
    last = seen.logits[:, -1]
    if temperature == 0:
        token = last.argmax(-1)
    else:
        p = torch.softmax(last, dim=-1, dtype=torch.float32)
        token = inverse_cdf(p, uniform((B, 1), stream, ids.device))[:, 0]
    before = torch.cat([torch.zeros_like(real[:, :1]), real], 1)  # the token has a real predecessor
    hidden = seen.hidden
    features = torch.cat([hidden.new_zeros(B, 1, hidden.shape[2]), hidden], 1) * before[..., None]
    one = torch.ones(B, 1, dtype=torch.bool, device=ids.device)
    drafter = Pending(torch.cat([ids, token[:, None]], 1), torch.cat([real, one], 1), features)
    host = torch.stack([token, seen.bad.long() * 2, real.sum(1) + 1], 1).cpu().numpy()  # the one read
    columns = dict.fromkeys(COLUMNS, np.zeros(B, dtype=np.int64))
    columns |= {"count": np.ones(B, dtype=np.int64), "bad": host[:, 1], "draft_pending": host[:, 2]}
    summary = Summary(**columns, emitted=host[:, :1])
    return Prefilled(Pending(token[:, None], one), drafter, summary)
