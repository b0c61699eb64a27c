"""The ``Verifier`` contract: a lossless verification rule bundled with its draft law.

A verifier sees the target p, the draft q and the k drafts x̄ drawn from its law Q(q), and emits a token
Y whose law is exactly p whatever x̄ was drawn. Its acceptance is P(Y ∈ set(x̄)) (docs/mathematics.md §1, §3): a
token that equals a draft counts as accepted even when a residual or bonus draw produced it (§4).
Shapes: B batch (any leading dimensions), K drafts, V vocabulary.

**Two entry points.** The public ``draft`` / ``verify`` validate their inputs (and may synchronise
with the device to do so); ``draft_unchecked`` / ``verify_unchecked`` are the kernels a decoding loop
calls: no validation, no host synchronisation, every tensor created on the inputs' device.

**Degenerate rows.** A law that needs m = ``law.min_support()`` > 1 tokens of positive probability (k
drafts without replacement, the hub pair, the greedy drafts) cannot draw from a q with fewer; a float32
softmax at low temperature is often exactly one-hot. Every verifier then does the same, defined here
once: the drafts are the deterministic top-k of q (its whole support by decreasing q, then the
lowest-index tokens with q = 0), and the verification emits y ~ p, accepted iff y is a draft: the
top-k verifier, lossless and optimal for a deterministic draft set, with acceptance p(drafts).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from mdsd.laws import DraftLaw
from mdsd.sampling import block_masses, drawn_top_k, inverse_cdf, top_k
from mdsd.validation import as_pair, as_probability_tensor, check_k
from mdsd.verifiers.ops import Uniforms, draw_uniforms, first_match, take, top_tokens

__all__ = ["Verifier", "Rows", "SIMULATE_CHUNK", "CPU_SLAB"]

SIMULATE_CHUNK = 1 << 21  # simulate() runs about SIMULATE_CHUNK / √V samples at a time (O(√V) memory each)
# On the CPU the kernels run over slabs of rows holding about CPU_SLAB entries [rows, V]: each [rows, V]
# temporary then stays under glibc's 32 MB mmap threshold and is recycled instead of page-faulted in
# afresh (a fresh 600 MB temporary costs ~8x the arithmetic on it).
CPU_SLAB = 1 << 21


@dataclass(frozen=True)
class Rows:
    """One verify call as a kernel sees it.

    ``p``, ``q`` [*Bp, V] (Bp broadcastable to B), ``drafts`` [*B, K], the call's uniforms, and
    ``degenerate`` [*B] (None when the law has none): on those rows q and the drafts are a stand-in
    (uniform q, drafts 0..k−1) so that the kernel's arithmetic stays finite; :meth:`draw` returns a
    draw of p there and the base class ignores the kernel's accept decision. ``shared``: one pair
    p, q [V] drafted many times by :meth:`Verifier.simulate` (a kernel may lay the pair out once,
    on the host); never set on the decoder's path. ``q_masses``: the
    :func:`~mdsd.sampling.block_masses` of q where the caller had them (the drafting's), else None.
    """

    p: torch.Tensor
    q: torch.Tensor
    drafts: torch.Tensor
    u: Uniforms
    degenerate: torch.Tensor | None
    shared: bool = False
    q_masses: torch.Tensor | None = None

    def draw(self, w: torch.Tensor, dropped: torch.Tensor | None = None) -> torch.Tensor:
        """The residual token [*B]: a draw of weights ``w`` [*Bw, V] (less the tokens ``dropped``) with
        the residual uniform; a draw of p where ``w`` has no mass and on degenerate rows."""
        u = self.u.residual.unsqueeze(-1)
        return inverse_cdf(w, u, dropped=dropped, fallback=self.p, use_fallback=self.degenerate)[..., 0]

    def draw_p(self) -> torch.Tensor:
        """A draw of p [*B] with the residual uniform."""
        return inverse_cdf(self.p, self.u.residual.unsqueeze(-1))[..., 0]


def _rows(t: torch.Tensor | None, start: int, stop: int) -> torch.Tensor | None:
    """Rows ``start:stop`` of a flat [rows, ...] tensor, or None."""
    return None if t is None else t[start:stop]


def collapse(t: torch.Tensor, batch: tuple[int, ...], event: int = 0) -> torch.Tensor:
    """Reduce ``t`` [*B, *E] (``event`` trailing dimensions E) to [*batch, *E], ``batch`` broadcastable
    to B: any / max over the dimensions that ``batch`` broadcasts. Used for what is one value per row
    of q but is read off the drafts (a degenerate q, its hub, its top tokens), identical along them."""
    b = t.ndim - event
    if tuple(t.shape[:b]) == tuple(batch):
        return t
    if t.numel() == 0:
        return t.new_empty((*batch, *t.shape[b:]))
    full = (1,) * (b - len(batch)) + tuple(batch)
    dims = tuple(i for i in range(b) if full[i] == 1 and t.shape[i] != 1)
    if dims:
        t = t.any(dim=dims, keepdim=True) if t.dtype == torch.bool else t.amax(dim=dims, keepdim=True)
    return t.reshape((*batch, *t.shape[b:]))


class Verifier(ABC):
    """A lossless multi-draft verifier for ``k`` drafts from the law :attr:`law`.

    A subclass declares once what it supports: :attr:`name` (its registry key), :attr:`supported_k`
    (None: every k >= 1; :meth:`supports_k`) and the law it drafts with (``_law``). It implements
    ``_acceptance`` (float64 numpy, one non-degenerate pair) and the kernel ``_verify`` (torch,
    batched, synchronisation-free). Everything else (validation, degenerate rows, CPU slabs,
    simulate) lives here.
    """

    name: ClassVar[str] = "verifier"
    supported_k: ClassVar[frozenset[int] | None] = None
    sync_free: ClassVar[bool] = True  # the kernels never wait for the device (False: they read values back)
    laws: ClassVar[tuple[str, ...]] = ()  # draft laws it takes by name (NAME:LAW), default first; (): fixed
    slab_share: ClassVar[int] = 1  # its CPU slabs hold CPU_SLAB / slab_share entries (many temporaries: > 1)

    def __init__(self, k: int) -> None:
        self.k = check_k(k, "k")
        if not self.supports_k(self.k):
            raise ValueError(
                f"the {self.name} verifier needs k in {sorted(self.supported_k)}, got k = {self.k}"
            )
        self.law: DraftLaw = self._law(self.k)

    @classmethod
    def supports_k(cls, k: int) -> bool:
        """Whether this verifier runs with ``k`` drafts."""
        return cls.supported_k is None or k in cls.supported_k

    def reads_back(self, n: int) -> bool:  # noqa: ARG002
        """Whether the kernels read values back to the host on a vocabulary of ``n`` tokens (a captured
        decoding step cannot run them): not :attr:`sync_free`, unless a verifier knows better."""
        return not type(self).sync_free

    @classmethod
    def check_law(cls, law: str, spelled: str) -> None:
        """Raise ``ValueError`` unless this verifier takes the draft law named ``law`` (from the verifier
        name ``spelled``, e.g. "optimal:wor")."""
        if law not in cls.laws:
            if not cls.laws:
                raise ValueError(f"verifier {spelled!r}: {cls.name!r} has a fixed draft law, it takes none")
            raise ValueError(
                f"verifier {spelled!r}: unknown draft law {law!r}; {cls.name!r} takes {', '.join(cls.laws)}"
            )

    def _uniform_columns(self) -> int:
        """Columns of ``Uniforms.accept`` one draft tuple consumes (default k; hook for wider rules)."""
        return self.k

    def __repr__(self) -> str:
        return f"verifier({self.name!r}, k={self.k})"

    @classmethod
    @abstractmethod
    def _law(cls, k: int) -> DraftLaw:
        """The law this verifier drafts with for ``k`` drafts."""

    @abstractmethod
    def _acceptance(self, p: np.ndarray, q: np.ndarray) -> float:
        """Exact acceptance of one pair [n] whose q has at least ``law.min_support()`` positive tokens."""

    @abstractmethod
    def _output_law(self, p: np.ndarray, q: np.ndarray, drafts: tuple[int, ...]) -> np.ndarray:
        """Exact law [n] of the emitted token given the drafts, float64, for one non-degenerate pair."""

    @abstractmethod
    def _reference(
        self, p: np.ndarray, q: np.ndarray, drafts: list[int], accept: np.ndarray, residual: float
    ) -> int:
        """The slow float64 reference: the token emitted for one non-degenerate row and its uniforms
        (``accept`` [columns], ``residual``), a plain loop that the kernel must match exactly
        (:func:`mdsd.verifiers.reference.reference_verify`)."""

    @abstractmethod
    def _verify(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The kernel: (proposal [*B], accepted [*B] bool, residual [*B]).

        The emitted token is ``proposal`` where ``accepted``, else ``residual`` (drawn with
        :meth:`Rows.draw`). Arithmetic and sums over the vocabulary in p's dtype (float32 or float64),
        scalars and cumulative sums in float64; no host synchronisation, no data-dependent shape, no
        tensor off the inputs' device.
        """

    # -- exact acceptance ---------------------------------------------------------------------------------

    def acceptance(self, p: object, q: object) -> float:
        """Exact acceptance P(Y ∈ set(x̄)) for one pair of vectors p, q [n].

        On a degenerate pair (q has fewer than ``law.min_support()`` positive tokens) this is
        p(top-k of q), the acceptance of the degenerate rule (module docstring): exact, and optimal for
        that deterministic draft set. :func:`mdsd.optimal_acceptance` refuses such a q for the law.
        """
        pa, qa = as_pair(p, q)
        if pa.ndim != 1:
            raise ValueError(f"acceptance takes one pair of vectors [n]; got p, q of shape {pa.shape}")
        reason = self.vocabulary_obstacle(qa.size)
        if reason is not None:
            raise ValueError(reason)
        if np.count_nonzero(qa) < self.law.min_support():
            return float(pa[top_tokens(qa, self.k)].sum())
        return float(self._acceptance(pa, qa))

    def output_law(self, p: object, q: object, drafts: object) -> np.ndarray:
        """The exact law of the emitted token Y given the drafts x̄, for one pair p, q [n] (float64 [n]):

        .. math:: r(y \\mid \\bar x) = P(Y = y \\mid \\bar x), \\qquad
                  \\sum_{\\bar x} Q(\\bar x)\\, r(\\cdot \\mid \\bar x) = p \\ \\text{(lossless)}.

        On a degenerate pair (q has fewer than ``law.min_support()`` positive tokens) it is p (the
        degenerate rule of the module docstring). This is the law the exact tests enumerate and
        :mod:`mdsd.sequence.nodewise` composes into a tree's step law.

        >>> from mdsd.verifiers import verifier
        >>> verifier("single", 1).output_law([0.5, 0.5], [1.0, 0.0], [0]).tolist()
        [0.5, 0.5]
        """
        pa, qa = as_pair(p, q)
        if pa.ndim != 1:
            raise ValueError(f"output_law takes one pair of vectors [n]; got p, q of shape {pa.shape}")
        xs = tuple(int(x) for x in np.asarray(drafts).reshape(-1))
        if len(xs) != self.k or not all(0 <= x < qa.size for x in xs):
            raise ValueError(f"drafts must be {self.k} tokens in [0, {qa.size}); got {list(xs)}")
        if np.count_nonzero(qa) < self.law.min_support():
            return pa.copy()
        return self._output_law(pa, qa, xs)

    def vocabulary_obstacle(self, n: int) -> str | None:
        """Why this verifier cannot run on a vocabulary of ``n`` tokens (its law draws more distinct
        tokens than there are), or None."""
        try:
            self.law.check(np.full(n, 1.0 / n))
        except ValueError as err:
            return str(err)
        return None

    def exact_obstacle(self, q: np.ndarray, limit: int | None = None) -> str | None:  # noqa: ARG002
        """Why :meth:`acceptance` cannot compute the exact acceptance for draft rows ``q`` [..., n]
        (too costly, beyond ``limit`` units of work where the verifier has such a limit), or None."""
        return None

    # -- drafting -----------------------------------------------------------------------------------------

    def draft(self, q: object, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw k drafts for every row of q [..., V]: LongTensor [..., k] (validated).

        Degenerate rows get the top-k of q (module docstring). See :meth:`draft_unchecked`.
        """
        qt = as_probability_tensor(q, "q")
        reason = self.vocabulary_obstacle(qt.shape[-1])
        if reason is not None:
            raise ValueError(reason)
        if generator is None:
            generator = torch.Generator(device=qt.device)
            generator.seed()
        return self.draft_unchecked(qt, generator)

    def draft_unchecked(
        self, q: torch.Tensor, generator: torch.Generator | None, masses: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The drafting kernel: k drafts [*B, k] (int64) for each row of q [*B, V], on q's device.

        ``q`` float32 or float64, each row non-negative and summing to 1, V large enough for the law
        (:meth:`vocabulary_obstacle`). No validation and no host synchronisation. A row with fewer
        than ``law.min_support()`` positive tokens gets its deterministic top-k (all of its support by
        decreasing q, ties towards the lower index, then the lowest-index tokens with q = 0); every
        other row a draw of the law, never a token with q = 0. ``masses`` [*B, NB]: q's
        :func:`~mdsd.sampling.block_masses`, if the caller has them (same draws, one pass less).
        """
        starts = self._slab_starts(q, q.shape[:-1])
        if starts is None:
            return self._draft_rows(q, generator, masses)
        flat = q.reshape(-1, q.shape[-1])
        flat_masses = None if masses is None else masses.reshape(flat.shape[0], -1)
        bounds = zip(starts, [*starts[1:], flat.shape[0]], strict=True)
        out = torch.cat([self._draft_rows(flat[a:b], generator, _rows(flat_masses, a, b)) for a, b in bounds])
        return out.reshape(*q.shape[:-1], self.k)

    def _draft_rows(
        self, q: torch.Tensor, generator: torch.Generator | None, masses: torch.Tensor | None
    ) -> torch.Tensor:
        drawn = self.law._sample(q, generator, masses=masses)
        need = self.law.min_support()
        if need <= 1:
            return drawn
        # rows with fewer than `need` positive tokens take the top-k, from the draws (all their support)
        degenerate, top = drawn_top_k(q, drawn, need)
        return torch.where(degenerate.unsqueeze(-1), top, drawn)

    # -- verification -------------------------------------------------------------------------------------

    def verify(
        self, p: object, q: object, drafts: object, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Verify the drafts (validated): returns (tokens [...], accepted_index [...]).

        p, q [..., V] (any float dtype; arithmetic in float32, or float64 for float64 input), drafts
        [..., k] as drawn by :meth:`draft`. p and q may also have fewer (broadcastable) leading dimensions
        than the drafts, e.g. one pair [V] for many draft tuples [N, k]. See :meth:`verify_unchecked`.
        """
        pt, qt, dt = self._inputs(p, q, drafts)
        u = draw_uniforms(tuple(dt.shape[:-1]), self._uniform_columns(), generator, pt.device)
        tokens = self._tokens(pt, qt, dt, u)
        return tokens, first_match(dt, tokens)

    def verify_unchecked(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        drafts: torch.Tensor,
        generator: torch.Generator | None,
        q_masses: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The verification kernel: (tokens [*B], accepted_index [*B]), both int64 on p's device.

        p, q [*Bp, V] of one dtype (float32 or float64) and device, Bp broadcastable to B, each row
        non-negative and summing to 1; drafts [*B, k] int64 as :meth:`draft_unchecked` drew them for
        that q. ``accepted_index`` is the index of the first draft equal to the emitted token, -1 if
        none (a residual token that equals a draft counts as accepted). One ``torch.rand`` of shape
        [*B, k + 1] from ``generator`` per call. No validation, no host synchronisation; on
        degenerate rows (a draft with q = 0) the token is a draw of p. ``q_masses`` [*Bp, NB]: q's
        :func:`~mdsd.sampling.block_masses` if the caller has them (the same tokens, a pass less).
        """
        u = draw_uniforms(tuple(drafts.shape[:-1]), self._uniform_columns(), generator, p.device)
        tokens = self._tokens(p, q, drafts, u, q_masses)
        return tokens, first_match(drafts, tokens)

    def verify_with(
        self, p: object, q: object, drafts: object, uniforms: Uniforms
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`verify` with given uniforms (from :func:`mdsd.verifiers.draw_uniforms`), for references."""
        pt, qt, dt = self._inputs(p, q, drafts)
        tokens = self._tokens(pt, qt, dt, uniforms)
        return tokens, first_match(dt, tokens)

    def _tokens(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        drafts: torch.Tensor,
        u: Uniforms,
        q_masses: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch = drafts.shape[:-1]
        starts = self._slab_starts(p, batch)
        if starts is None:  # one block (off the CPU, small, or one pair shared by many tuples)
            return self._verify_block(p, q, drafts, u, q_masses=q_masses)
        n, rows = p.shape[-1], math.prod(batch)
        p, q, drafts = p.reshape(rows, n), q.reshape(rows, n), drafts.reshape(rows, self.k)
        q_masses = None if q_masses is None else q_masses.reshape(rows, -1)
        u = Uniforms(u.accept.reshape(rows, u.accept.shape[-1]), u.residual.reshape(rows))
        out = [
            self._verify_block(p[a:b], q[a:b], drafts[a:b], u.rows(a, b), q_masses=_rows(q_masses, a, b))
            for a, b in zip(starts, [*starts[1:], rows], strict=True)
        ]
        return torch.cat(out).reshape(batch)

    def _verify_block(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        drafts: torch.Tensor,
        u: Uniforms,
        shared: bool = False,
        q_masses: torch.Tensor | None = None,
    ) -> torch.Tensor:
        degenerate = None
        if self.law.min_support() > 1:
            degenerate = (take(q, drafts) == 0).any(-1)  # [*B]: only the degenerate rule drafts q = 0
            flag = collapse(degenerate, q.shape[:-1]).unsqueeze(-1).to(q.dtype)
            q = torch.addcmul(flag / q.shape[-1], q, 1.0 - flag)  # stand-in: uniform q (exactly q elsewhere)
            if q_masses is not None:  # the stand-in's: a block holds size / V of the mass
                uniform = block_masses(torch.full_like(q[(0,) * (q.ndim - 1)], 1.0 / q.shape[-1]))
                q_masses = torch.where(flag.bool(), uniform, q_masses)
            stand_in = torch.arange(self.k, device=drafts.device)
            drafts = torch.where(degenerate.unsqueeze(-1), stand_in, drafts)
        proposal, accepted, residual = self._verify(Rows(p, q, drafts, u, degenerate, shared, q_masses))
        if degenerate is not None:
            accepted = accepted & ~degenerate
        return torch.where(accepted, proposal, residual)

    def _slab_starts(self, t: torch.Tensor, batch: torch.Size) -> list[int] | None:
        """First rows of the CPU slabs (see :data:`CPU_SLAB` and :attr:`slab_share`) for one row of
        ``t`` [*batch, V] per batch entry, or None to run in one block."""
        rows, step = math.prod(batch), max(1, CPU_SLAB // self.slab_share // t.shape[-1])
        if t.device.type != "cpu" or t.shape[:-1] != batch or rows <= step:
            return None
        return list(range(0, rows, step))

    # -- simulation ---------------------------------------------------------------------------------------

    def simulate(
        self, p: object, q: object, num_samples: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft and verify ``num_samples`` times for one pair p, q [V]: (tokens [N], accepted_index [N]).

        Runs in chunks so memory stays bounded; seeded, so the result is reproducible. Every sample
        shares the pair, so drafts and residuals use one-pair paths (O(√V) or less per sample) that
        invert the same CDFs as :meth:`verify` on expanded rows.
        """
        num_samples = check_k(num_samples, "num_samples")
        pt, qt, _ = self._inputs(p, q, None)
        if pt.ndim != 1:
            raise ValueError(f"simulate takes one pair of vectors [V]; got shape {tuple(pt.shape)}")
        reason = self.vocabulary_obstacle(qt.shape[-1])
        if reason is not None:
            raise ValueError(reason)
        degenerate = int((qt > 0).sum()) < self.law.min_support()
        generator = torch.Generator(device=pt.device).manual_seed(int(seed))
        chunk = max(1, min(num_samples, SIMULATE_CHUNK // (math.isqrt(pt.shape[-1]) + 1)))
        tokens, accepted = [], []
        for start in range(0, num_samples, chunk):
            rows = min(chunk, num_samples - start)
            if degenerate:
                drafts = top_k(qt, self.k).expand(rows, self.k)
            else:
                drafts = self.law._sample(qt, generator, (rows,))
            u = draw_uniforms((rows,), self._uniform_columns(), generator, pt.device)
            out = self._verify_block(pt, qt, drafts, u, shared=True)
            tokens.append(out)
            accepted.append(first_match(drafts, out))
        return torch.cat(tokens), torch.cat(accepted)

    # -- validation ---------------------------------------------------------------------------------------

    def _inputs(
        self, p: object, q: object, drafts: object
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
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
        reason = self.vocabulary_obstacle(qt.shape[-1])
        if reason is not None:
            raise ValueError(reason)
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
        """Raise ``ValueError`` for drafts this verifier's law cannot produce (cheap checks only).

        Degenerate rows must carry the top-k of q; the others only tokens with q > 0, and whatever
        :meth:`_check_law_drafts` asks of the law.
        """
        batch = drafts.shape[:-1]
        degenerate = ((q > 0).sum(-1) < self.law.min_support()).expand(batch)
        if bool(degenerate.any()):
            top = top_k(q, self.k).expand(*batch, self.k)
            if not bool((drafts == top).all(-1)[degenerate].all()):
                raise ValueError(
                    f"where q has fewer than {self.law.min_support()} tokens of positive probability, "
                    f"the drafts must be its top-{self.k} (what draft() returns there)"
                )
        if not bool(((take(q, drafts) > 0).all(-1) | degenerate).all()):
            raise ValueError("drafts contain a token with q = 0, which the draft law never draws")
        self._check_law_drafts(q, drafts, ~degenerate)

    def _check_law_drafts(self, q: torch.Tensor, drafts: torch.Tensor, rows: torch.Tensor) -> None:  # noqa: B027
        """Raise ``ValueError`` if the drafts of the non-degenerate ``rows`` [*B] break the law."""
