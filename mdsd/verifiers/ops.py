"""Shared sampling primitives for the batched verifiers: the uniforms, gathers and inverse-CDF draws.

Every random number a verifier consumes comes from :func:`draw_uniforms`: one fixed set of tensors per
call, so the slow reference (:mod:`mdsd.verifiers.reference`) can be given exactly the same numbers.
Shapes: B batch (any leading dimensions), K drafts, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Uniforms", "draw_uniforms", "take", "inverse_cdf", "first_match", "mass_outside", "top_tokens"]


@dataclass(frozen=True)
class Uniforms:
    """The random numbers of one ``verify`` call, all U(0, 1) in float64.

    ``accept`` [..., K]: one per accept/reject test (draft i uses column i; SpecHub uses columns 0, 1).
    ``residual`` [...]: the inverse-CDF draw of the residual (or of p, for the top-k verifier).
    """

    accept: torch.Tensor
    residual: torch.Tensor


def draw_uniforms(
    batch_shape: tuple[int, ...],
    k: int,
    generator: torch.Generator | None,
    device: torch.device | str = "cpu",
) -> Uniforms:
    """Draw the uniforms of one ``verify`` call: a single ``torch.rand`` of shape [*batch_shape, k + 1]."""
    if generator is None:
        generator = torch.Generator(device=device)
        generator.seed()
    u = torch.rand(*batch_shape, k + 1, generator=generator, dtype=torch.float64, device=device)
    return Uniforms(accept=u[..., :k], residual=u[..., k])


def take(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``t[..., index]`` per row: t [*Bt, V] (Bt broadcastable to B), index [*B, M] -> [*B, M]."""
    return torch.gather(t.expand(*index.shape[:-1], t.shape[-1]), -1, index)


def _last_positive(w: torch.Tensor) -> torch.Tensor:  # [..., L] -> [...]: index of the last w > 0
    return (w.shape[-1] - 1) - (w > 0).flip(-1).to(torch.uint8).argmax(-1)


def _search(cdf: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """First index i with cdf[..., i] > target, for cdf [*Bc, L] (Bc broadcastable to target's [*B])."""
    if cdf.shape[:-1] == target.shape:
        return torch.searchsorted(cdf, target.unsqueeze(-1), right=True).squeeze(-1)
    if math.prod(cdf.shape[:-1]) == 1:
        return torch.searchsorted(cdf.reshape(-1), target, right=True)
    cdf = cdf.expand(*target.shape, cdf.shape[-1]).contiguous()
    return torch.searchsorted(cdf, target.unsqueeze(-1), right=True).squeeze(-1)


def inverse_cdf(w: torch.Tensor, u: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Draw one token per row from unnormalised weights by inversion: y = min{i : Σ_{j≤i} w_j > u Σ w}.

    ``w`` [*Bw, V] ≥ 0 (Bw broadcastable to u's [*B]); rows of ``w`` with no mass draw from ``fallback``
    instead (same shape as ``w``: such a branch has probability zero, so any lossless choice will do).
    The cumulative sums run in float64, in two levels (sums of blocks of about √V tokens, then one
    block), so the per-row work and memory after the block sums are O(√V) instead of O(V). A token of
    zero weight is never returned.
    """
    empty = (w > 0).any(-1, keepdim=True).logical_not()
    if bool(empty.any()):
        w = torch.where(empty, fallback, w)
    n = w.shape[-1]
    size = math.isqrt(n - 1) + 1  # block length ⌈√V⌉
    blocks = torch.nn.functional.pad(w, (0, -n % size)).reshape(*w.shape[:-1], -1, size)  # [*Bw, NB, size]
    block_mass = blocks.sum(-1, dtype=torch.float64)  # [*Bw, NB]
    block_cdf = block_mass.cumsum(-1)
    target = u * block_cdf[..., -1]  # [*B]
    j = torch.minimum(_search(block_cdf, target), _last_positive(block_mass).expand(target.shape))
    before = torch.where(j > 0, take(block_cdf, (j - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1), 0.0)
    index = j.reshape(*j.shape, 1, 1).expand(*j.shape, 1, size)
    chosen = torch.gather(blocks.expand(*j.shape, *blocks.shape[-2:]), -2, index).squeeze(-2)  # [*B, size]
    within = torch.minimum(
        _search(chosen.to(torch.float64).cumsum(-1), target - before), _last_positive(chosen)
    )
    return j * size + within


def first_match(drafts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Index of the first draft equal to the emitted token, or -1: drafts [*B, K], tokens [*B] -> [*B]."""
    hit = drafts == tokens.unsqueeze(-1)
    return torch.where(hit.any(-1), hit.to(torch.uint8).argmax(-1), -1)


def mass_outside(q: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """Σ_{y ∉ drawn} q(y) in float64 for q [*Bq, V] and distinct tokens drawn [*B, M] -> [*B].

    Computed as Σ q − Σ q(drawn), and again as a masked sum for rows where that difference is small
    (below 1e-4 it would lose digits to cancellation, e.g. a near-one-hot q).
    """
    fast = q.sum(-1, dtype=torch.float64).expand(drawn.shape[:-1]) - take(q, drawn).sum(
        -1, dtype=torch.float64
    )
    small = fast < 1e-4
    if drawn.shape[-1] == 0 or not bool(small.any()):
        return fast
    if q.ndim > 1:
        exact = q.expand(*drawn.shape[:-1], q.shape[-1]).scatter(-1, drawn, 0.0).sum(-1, dtype=torch.float64)
        return torch.where(small, exact, fast)
    rows = small.nonzero(as_tuple=True)  # one shared q (simulate): only those rows, a bounded slab at a time
    picked, step = drawn[rows], max(1, (1 << 22) // q.shape[-1])
    exact = torch.cat(
        [
            q.expand(len(chunk), -1).scatter(-1, chunk, 0.0).sum(-1, dtype=torch.float64)
            for chunk in picked.split(step)
        ]
    )
    return fast.index_put(rows, exact)


def top_tokens(q: np.ndarray, m: int) -> np.ndarray:
    """The m most likely tokens of one q [n], ties towards the lower index (= ``mdsd.laws.ranked(q)[:m]``)
    in O(n + m log m) instead of a full sort.

    >>> top_tokens(np.array([0.2, 0.4, 0.2, 0.2]), 2)
    array([1, 0])
    """
    if m <= 0:
        return np.empty(0, dtype=np.intp)
    m = min(m, q.size)
    cut = np.partition(q, q.size - m)[q.size - m]  # the m-th largest value
    above = np.flatnonzero(q > cut)
    chosen = np.concatenate([above, np.flatnonzero(q == cut)[: m - above.size]])
    return chosen[np.lexsort((chosen, -q[chosen]))]
