"""The ``Verifier`` contract: a lossless verification rule bundled with its draft law.

A verifier sees the target p, the draft q and the k drafts x̄ drawn from its law Q(q), and emits a token
Y whose law is exactly p whatever x̄ was drawn. Its acceptance is P(Y ∈ set(x̄)) (MATH.md §1, §3): a
token that equals a draft counts as accepted even when a residual or bonus draw produced it (§4).
Shapes: B batch (any leading dimensions), K drafts, V vocabulary.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
import torch

from mdsd.laws import IID, DraftLaw, Greedy, Hub, TopK, WithoutReplacement
from mdsd.validation import as_pair, as_probability_tensor, check_k
from mdsd.verifiers.ops import Uniforms, draw_uniforms, first_match, take

__all__ = ["Verifier", "SIMULATE_CHUNK"]

SIMULATE_CHUNK = 1 << 21  # simulate() runs about SIMULATE_CHUNK / √V samples at a time (O(√V) memory each)


def _top(q: torch.Tensor, m: int) -> torch.Tensor:
    """The m most likely tokens of one q [V], ties towards the lower index: LongTensor [m]."""
    return torch.sort(q, descending=True, stable=True).indices[:m]


def _sequential_without_replacement(q: torch.Tensor, rows: int, k: int, generator) -> torch.Tensor:
    """``rows`` tuples of k draws without replacement from one q [V], each draw from q renormalised
    over the tokens not drawn yet (MATH.md §2), by inversion of the shared CDF of q: O(k² log V) a row.

    Draw i inverts t = U (1 − q(S)) over the tokens outside S (the earlier draws): the smallest j with
    C(j) − Σ_{s∈S, s≤j} q(s) > t, found by the fixed-point search j ← first{C > t + Σ_{s∈S, s≤j} q(s)}.
    """
    cdf = q.double().cumsum(0)
    qd = q.double()
    u = torch.rand(rows, k, generator=generator, dtype=torch.float64, device=q.device)
    drawn = torch.empty(rows, 0, dtype=torch.long, device=q.device)
    last = int(torch.nonzero(q > 0)[-1])
    for i in range(k):
        weights = qd[drawn]  # [rows, i]
        target = u[:, i] * (cdf[-1] - weights.sum(-1))
        j = torch.searchsorted(cdf, target, right=True).clamp_max(last)
        for _ in range(i + 1):
            skipped = (weights * (drawn <= j.unsqueeze(-1))).sum(-1)
            j = torch.searchsorted(cdf, target + skipped, right=True).clamp_max(last)
        drawn = torch.cat([drawn, j.unsqueeze(-1)], dim=-1)
    clash = (drawn.unsqueeze(-1) == drawn.unsqueeze(-2)).sum((-1, -2)) > k  # rounding at a boundary: redraw
    if bool(clash.any()):
        drawn[clash] = WithoutReplacement(k)._sample(q.expand(int(clash.sum()), -1), generator)
    return drawn


class Verifier(ABC):
    """A lossless multi-draft verifier for ``k`` drafts from the law :attr:`law`.

    Subclasses set :attr:`name` and implement ``_law``, ``_acceptance`` (float64 numpy, one pair) and
    ``_verify`` (torch, batched, given its uniforms).
    """

    name = "verifier"

    def __init__(self, k: int) -> None:
        self.k = check_k(k, "k")
        self._check_k(self.k)
        self.law: DraftLaw = self._law(self.k)

    def _check_k(self, k: int) -> None:  # noqa: B027 (optional hook: most verifiers take any k >= 1)
        """Raise ``ValueError`` if this verifier cannot run with ``k`` drafts."""

    def _uniform_columns(self) -> int:
        """Columns of ``Uniforms.accept`` one draft tuple consumes (default k; hook for wider rules)."""
        return self.k

    def __repr__(self) -> str:
        return f"verifier({self.name!r}, k={self.k})"

    @abstractmethod
    def _law(self, k: int) -> DraftLaw: ...

    @abstractmethod
    def _acceptance(self, p: np.ndarray, q: np.ndarray) -> float: ...

    @abstractmethod
    def _verify(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: Uniforms) -> torch.Tensor:
        """Emitted tokens [*B] for p, q [*Bp, V] (Bp broadcastable to B), drafts [*B, K]."""

    # -- public API ---------------------------------------------------------------------------------------

    def acceptance(self, p: object, q: object) -> float:
        """Exact acceptance P(Y ∈ set(x̄)) for one pair of vectors p, q [n]."""
        pa, qa = as_pair(p, q)
        if pa.ndim != 1:
            raise ValueError(f"acceptance takes one pair of vectors [n]; got p, q of shape {pa.shape}")
        self.law.check(qa)
        return float(self._acceptance(pa, qa))

    def draft(self, q: object, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw k drafts from this verifier's law for every row of q [..., V]: LongTensor [..., k]."""
        qt = as_probability_tensor(q, "q")
        if generator is None:
            generator = torch.Generator(device=qt.device)
            generator.seed()
        return self.law.sample(qt, generator)

    def verify(
        self, p: object, q: object, drafts: object, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Verify the drafts: returns (tokens [...], accepted_index [...]); index -1 = no draft accepted.

        p, q [..., V] (any float dtype; arithmetic in float32, or float64 for float64 input), drafts
        [..., k] as drawn by :meth:`draft`. p and q may also have fewer (broadcastable) leading dimensions
        than the drafts, e.g. one pair [V] for many draft tuples [N, k]. The reported index is that of
        the first draft equal to the emitted token, whichever branch emitted it.
        """
        pt, qt, dt = self._inputs(p, q, drafts)
        u = draw_uniforms(tuple(dt.shape[:-1]), self._uniform_columns(), generator, pt.device)
        tokens = self._verify(pt, qt, dt, u)
        return tokens, first_match(dt, tokens)

    def verify_with(
        self, p: object, q: object, drafts: object, uniforms: Uniforms
    ) -> tuple[torch.Tensor, ...]:
        """:meth:`verify` with given uniforms (from :func:`mdsd.verifiers.draw_uniforms`), for references."""
        pt, qt, dt = self._inputs(p, q, drafts)
        tokens = self._verify(pt, qt, dt, uniforms)
        return tokens, first_match(dt, tokens)

    def simulate(
        self, p: object, q: object, num_samples: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft and verify ``num_samples`` times for one pair p, q [V]: (tokens [N], accepted_index [N]).

        Runs in chunks so memory stays bounded; seeded, so the result is reproducible. Every sample
        shares the pair, so drafts and residuals use one-pair fast paths (O(√V) or less per sample);
        their draws invert the same CDFs as :meth:`verify` on expanded rows.
        """
        num_samples = check_k(num_samples, "num_samples")
        pt, qt, _ = self._inputs(p, q, None)
        if pt.ndim != 1:
            raise ValueError(f"simulate takes one pair of vectors [V]; got shape {tuple(pt.shape)}")
        self.law.check(qt.detach().cpu().double().numpy())
        generator = torch.Generator(device=pt.device).manual_seed(int(seed))
        chunk = max(1, min(num_samples, SIMULATE_CHUNK // (math.isqrt(pt.shape[-1]) + 1)))
        tokens, accepted = [], []
        for start in range(0, num_samples, chunk):
            rows = min(chunk, num_samples - start)
            drafts = self._repeat_drafts(qt, rows, generator)
            u = draw_uniforms((rows,), self._uniform_columns(), generator, pt.device)
            out = self._verify(pt, qt, drafts, u)
            tokens.append(out)
            accepted.append(first_match(drafts, out))
        return torch.cat(tokens), torch.cat(accepted)

    def _repeat_drafts(self, q: torch.Tensor, rows: int, generator: torch.Generator) -> torch.Tensor:
        """``rows`` draft tuples [rows, k] from this law for ONE q [V], without O(rows V) work where the
        law allows it; else the law's own sampler."""
        law, k = self.law, self.k
        if isinstance(law, WithoutReplacement):
            return _sequential_without_replacement(q, rows, k, generator)
        if isinstance(law, IID):
            return torch.multinomial(q, rows * k, replacement=True, generator=generator).reshape(rows, k)
        if isinstance(law, (TopK, Greedy, Hub)):
            top = law._sample(q, generator) if isinstance(law, TopK) else _top(q, k - 1)
            if isinstance(law, TopK):
                return top.expand(rows, k)
            rest = q.scatter(-1, top, 0.0)  # q restricted to V∖T (T = the hub for the hub pair)
            last = torch.multinomial(rest, rows, replacement=True, generator=generator)  # [rows]
            if isinstance(law, Greedy):
                return torch.cat([top.expand(rows, k - 1), last.unsqueeze(-1)], dim=-1)
            first = torch.multinomial(q, rows, replacement=True, generator=generator)
            return torch.stack([first, torch.where(first == top, last, top)], dim=-1)
        return law._sample(q.expand(rows, -1), generator)

    # -- validation ---------------------------------------------------------------------------------------

    def _inputs(
        self, p: object, q: object, drafts: object
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pt = as_probability_tensor(p, "p")
        qt = as_probability_tensor(q, "q")
        if pt.shape != qt.shape:
            raise ValueError(
                "p and q must have the same shape (same vocabulary); "
                f"got {tuple(pt.shape)} and {tuple(qt.shape)}"
            )
        if pt.device != qt.device:
            raise ValueError(f"p and q must be on one device; got {pt.device} and {qt.device}")
        if pt.dtype != qt.dtype:
            pt, qt = pt.double(), qt.double()
        if drafts is None:
            return pt, qt, None
        dt = drafts if isinstance(drafts, torch.Tensor) else torch.as_tensor(np.asarray(drafts))
        if dt.is_floating_point() or dt.is_complex() or dt.dtype == torch.bool:
            raise TypeError(f"drafts must be an integer tensor, got dtype {dt.dtype}")
        dt = dt.to(device=pt.device, dtype=torch.long)
        if dt.ndim == 0 or dt.shape[-1] != self.k:
            raise ValueError(f"drafts must have shape [..., {self.k}] for k={self.k}; got {tuple(dt.shape)}")
        try:
            covered = torch.broadcast_shapes(pt.shape[:-1], dt.shape[:-1]) == dt.shape[:-1]
        except RuntimeError:
            covered = False
        if not covered:
            raise ValueError(f"drafts {tuple(dt.shape)} do not match the batch of p, q {tuple(pt.shape)}")
        n = pt.shape[-1]
        if dt.numel() and (int(dt.min()) < 0 or int(dt.max()) >= n):
            raise ValueError(
                f"drafts must be tokens in [0, {n}); got values in [{int(dt.min())}, {int(dt.max())}]"
            )
        self._check_drafts(qt, dt)
        return pt, qt, dt

    def _check_drafts(self, q: torch.Tensor, drafts: torch.Tensor) -> None:
        """Raise ``ValueError`` for drafts this verifier's law cannot produce (cheap checks only)."""
        if not bool((take(q, drafts) > 0).all()):
            raise ValueError("drafts contain a token with q = 0, which the draft law never draws")
