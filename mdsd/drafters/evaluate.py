"""Exact acceptance of drafters at held-out positions: the head against a draft model, position by position.

At every held-out position of a features folder (:class:`mdsd.drafters.train.HeadData`) the target's law p
is known (top-K and tail) and each drafter gives its law q there: a feature head reading the target's
features (teacher forcing: what it drafts at depth 1) or, at depth d, its own outputs chained d − 1 times
from them (:func:`mdsd.drafters.train.unrolled`: what it drafts d tokens after the target's last feature,
the tokens before being the text's; every position of the pass reads chained features, a harsher test than
a decoding step's depth d, whose context holds the target's), a draft model reading the tokens (the same at
every depth). On the lumped pair
(:func:`mdsd.drafters.losses.lump`) the position's single-draft acceptance Σ min(p, q) and the optimal
acceptances α*_k of k i.i.d. drafts (k = 2, 4) are exact; lumping the tail can only raise them, by at most
min(p_lump, q_lump), for every drafter alike. Whole sequences are read (no chunking), so every position sees
its whole context.
"""

from __future__ import annotations

import numpy as np
import torch

from mdsd.drafters.losses import lump, optimal_acceptance_iid, total_variation

__all__ = ["ACCEPTANCES", "position_acceptance", "paired_difference"]

ACCEPTANCES = ("acceptance", "alpha_2", "alpha_4")  # k = 1 (single draft), 2 and 4 i.i.d. drafts


@torch.no_grad()
def position_acceptance(
    data, drafter, answers_only: bool = True, limit: int | None = None, depth: int = 1
) -> dict[str, np.ndarray]:
    """Per held-out position of ``data`` (in sequence order; ``answers_only``: the positions whose next token
    is an answer's): the exact acceptances of :data:`ACCEPTANCES` and the sequence each position belongs to,
    for ``drafter``: a :class:`mdsd.drafters.FeatureHead` (at ``depth``: module docstring), or a causal LM
    over the whole vocabulary. ``limit``: stop after that many positions (whole sequences)."""
    from mdsd.drafters.head import FeatureHead
    from mdsd.drafters.train import unrolled
    from mdsd.validation import check_positive_ints

    check_positive_ints({"depth": depth})

    V = data.files[0]["top_ids"].max() + 1  # only used for a model's slot map below
    out = {name: [] for name in (*ACCEPTANCES, "sequence")}
    count = 0
    for n, (i, a, b) in enumerate(data.sequences["held_out"]):
        f = data.files[i]
        batch = data.batch([(i, a, a, b)])
        if isinstance(drafter, FeatureHead):
            *_, (_, logits) = unrolled(drafter, batch["ids"], batch["features"], batch["positions"], depth)
            slot = torch.full((drafter.head_config.vocab_size,), -1, dtype=torch.long)
            slot[drafter.vocab] = torch.arange(drafter.vocab.numel())
        else:
            logits = drafter(batch["ids"]).logits
            slot = torch.arange(max(int(V), logits.shape[-1]))
        log_q = torch.log_softmax(logits[0].double(), -1)
        p, q = lump(batch["top_ids"][0], batch["top_logp"][0].double().exp(), slot, log_q)
        keep = torch.ones(b - a, dtype=torch.bool)
        if answers_only:
            start = int(f["answers"][_row(f, a)])
            keep[: max(start - 1, 0)] = False
        p, q = p[keep], q[keep]
        out["acceptance"].append((1 - total_variation(p, q)).numpy())
        out["alpha_2"].append(optimal_acceptance_iid(p, q, 2).numpy())
        out["alpha_4"].append(optimal_acceptance_iid(p, q, 4).numpy())
        out["sequence"].append(np.full(int(keep.sum()), n))
        count += int(keep.sum())
        if limit is not None and count >= limit:
            break
    return {name: np.concatenate(values) for name, values in out.items()}


def _row(f: dict, start: int) -> int:
    """The row of the sequence starting at ``start`` in a features file."""
    return int(torch.searchsorted(f["offsets"], torch.tensor(start)))


def paired_difference(
    a: np.ndarray, b: np.ndarray, sequences: np.ndarray, samples: int = 2000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """mean(a − b) over positions and its 95% bootstrap interval, resampling whole sequences (positions of
    one sequence are not independent).

    >>> mean, (low, high) = paired_difference(np.array([1.0, 1.0, 0.0]), np.zeros(3), np.array([0, 0, 1]))
    >>> round(mean, 3), low <= mean <= high
    (0.667, True)
    """
    diff = a - b
    ids, where = np.unique(sequences, return_inverse=True)
    sums = np.bincount(where, weights=diff, minlength=len(ids))
    counts = np.bincount(where, minlength=len(ids))
    rng = np.random.default_rng(seed)
    draws = rng.integers(len(ids), size=(samples, len(ids)))
    means = sums[draws].sum(1) / counts[draws].sum(1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(diff.mean()), (float(low), float(high))
