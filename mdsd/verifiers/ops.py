"""Shared pieces of the batched verifiers: the uniforms, gathers, first matches and exact masses.

Every random number a verifier consumes comes from :func:`draw_uniforms`: one fixed set of tensors per
call, so the slow reference (:mod:`mdsd.verifiers.reference`) can be given exactly the same numbers.
Nothing here synchronises with the host or creates a tensor off its input's device.
Shapes: B batch (any leading dimensions), K drafts, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mdsd.sampling import UniformStream, block_masses, masses_without, uniform

__all__ = ["Uniforms", "draw_uniforms", "take", "first_match", "mass_outside", "top_tokens"]


@dataclass(frozen=True)
class Uniforms:
    """The random numbers of one ``verify`` call, all U(0, 1) in float64.

    ``accept`` [..., K]: one per accept/reject test (draft i uses column i; SpecHub uses columns 0, 1).
    ``residual`` [...]: the inverse-CDF draw of the residual (or of p, for the top-k verifier and on
    degenerate rows).
    """

    accept: torch.Tensor
    residual: torch.Tensor

    def rows(self, start: int, stop: int) -> Uniforms:
        """The uniforms of rows ``start:stop`` of a flat batch."""
        return Uniforms(self.accept[start:stop], self.residual[start:stop])


def draw_uniforms(
    batch_shape: tuple[int, ...],
    k: int,
    generator: torch.Generator | UniformStream | None,
    device: torch.device | str = "cpu",
) -> Uniforms:
    """Draw the uniforms of one ``verify`` call: one draw of shape [*batch_shape, k + 1] from
    ``generator`` (a ``torch.Generator``, a :class:`mdsd.sampling.UniformStream`, or None: a fresh
    generator seeded from the operating system).
    """
    u = uniform((*batch_shape, k + 1), generator, device)
    return Uniforms(accept=u[..., :k], residual=u[..., k])


def take(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``t[..., index]`` per row: t [*Bt, V] (Bt broadcastable to B), index [*B, M] -> [*B, M]."""
    return torch.gather(t.expand(*index.shape[:-1], t.shape[-1]), -1, index)


def first_match(drafts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Index of the first draft equal to the emitted token, or -1: drafts [*B, K], tokens [*B] -> [*B]."""
    hit = drafts == tokens.unsqueeze(-1)
    return torch.where(hit.any(-1), hit.to(torch.uint8).argmax(-1), -1)


def mass_outside(q: torch.Tensor, drawn: torch.Tensor, masses: torch.Tensor | None = None) -> torch.Tensor:
    """Σ_{y ∉ drawn} q(y) in float64 for q [*Bq, V] and tokens drawn [*B, M] -> [*B].

    Summed over the blocks of :mod:`mdsd.sampling`, each block holding a drawn token summed again
    without it: no cancellation, so a near-one-hot q keeps the exact mass of its tail (1 − q(x) is
    never computed as a difference). ``masses``: q's :func:`~mdsd.sampling.block_masses` if known (then
    O(M √V) a row instead of a pass over q).

    >>> mass_outside(torch.tensor([1.0, 1e-30, 1e-30], dtype=torch.float64), torch.tensor([0]))
    tensor(2.0000e-30, dtype=torch.float64)
    """
    return masses_without(q, block_masses(q) if masses is None else masses, drawn).sum(-1)


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
