"""Sampling primitives that never wait for the device: inverse-CDF draws, the race and the top-k.

Every function here works on the last axis (V tokens) of tensors with any leading batch dimensions,
creates its tensors on its input's device, and has only data-independent shapes: no ``.item()``, no
``nonzero``, no branch on a tensor's value. A decoding loop on an accelerator can call them without a
host synchronisation. Weights are non-negative and need not be normalised.

The inverse-CDF draw works on two levels: tokens are cut into blocks of about √V (:func:`block_size`),
the block masses are summed once (in the weights' precision, torch's cascade summation, then kept in
float64), a draw picks a block from their float64 cumulative sums and then a token inside it. After
the one pass over the weights a draw costs O(√V), so many draws from one row (``simulate``) stay
cheap, and a token of zero weight is never drawn while the row has mass.

**Where the uniforms come from.** Every random number of mdsd's samplers is a float64 uniform drawn by
:func:`uniform` from a *source*: a ``torch.Generator`` (``torch.rand``), or a :class:`UniformStream`, a
buffer drawn up front that hands out consecutive slices. A decoding step captured in a CUDA graph or
traced by ``torch.compile`` cannot call a generator inside; it reads its numbers from a stream whose
buffer is refilled by one ``torch.rand`` per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "UniformStream",
    "uniform",
    "block_size",
    "block_masses",
    "masses_without",
    "inverse_cdf",
    "race_top_k",
    "top_k",
    "drawn_top_k",
]


@dataclass
class UniformStream:
    """Float64 uniforms drawn up front, handed out in order: each :meth:`take` returns the next slice.

    ``values`` [U] is the buffer; ``used`` counts what was taken. Without ``values`` the stream draws
    from ``generator`` and only counts (how a step learns the size of its buffer). A stream is made
    fresh for every step, so that a traced step sees ``used`` as a constant.

    >>> s = UniformStream(torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
    >>> s.take((2,)).tolist(), s.take((1, 1)).tolist(), s.used
    ([0.1, 0.2], [[0.3]], 3)
    """

    values: torch.Tensor | None = None
    generator: torch.Generator | None = None
    used: int = 0

    def take(self, shape: tuple[int, ...], device: torch.device | str | None = None) -> torch.Tensor:
        count = math.prod(shape)
        start, self.used = self.used, self.used + count
        if self.values is None:
            dev = device if device is not None else "cpu"
            return torch.rand(*shape, generator=self.generator, dtype=torch.float64, device=dev)
        if self.used > self.values.numel():
            raise ValueError(
                f"the uniform buffer holds {self.values.numel()} numbers; {self.used} were asked"
            )
        return self.values[start : self.used].view(shape)


def uniform(
    shape: tuple[int, ...], source: torch.Generator | UniformStream | None, device: torch.device | str
) -> torch.Tensor:
    """Float64 uniforms in [0, 1) of ``shape`` on ``device`` from ``source``: a generator (None: fresh
    entropy from the operating system) or a :class:`UniformStream`."""
    if isinstance(source, UniformStream):
        return source.take(tuple(shape), device)
    if source is None:
        source = torch.Generator(device=device)
        source.seed()
    return torch.rand(*shape, generator=source, dtype=torch.float64, device=device)


def block_size(n: int) -> int:
    """Tokens per block for a vocabulary of ``n``: ⌈√n⌉ (the last block may be shorter)."""
    return math.isqrt(n - 1) + 1 if n > 1 else 1


def block_masses(w: torch.Tensor) -> torch.Tensor:
    """Sums of the blocks of ``w`` [*B, V] as float64 [*B, NB], NB = ⌈V / block_size(V)⌉.

    Each block (about √V entries) is summed in w's precision (a float32 block to about 1e-7 relative,
    with no float64 copy of w), the NB sums are then float64.

    >>> block_masses(torch.tensor([0.25, 0.25, 0.5, 0.0]))
    tensor([0.5000, 0.5000], dtype=torch.float64)
    """
    n = w.shape[-1]
    size = block_size(n)
    full = n // size
    head = w[..., : full * size].unflatten(-1, (full, size)).sum(-1)
    if full * size != n:
        head = torch.cat([head, w[..., full * size :].sum(-1, keepdim=True)], dim=-1)
    return head.to(torch.float64)


def _block_values(w: torch.Tensor, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The entries of block ``blocks`` [*B, M] of each row of ``w`` [*Bw, V] (Bw broadcastable to B):
    (values [*B, M, size], token ids [*B, M, size]); positions past the vocabulary hold 0."""
    n = w.shape[-1]
    size = block_size(n)
    ids = blocks.unsqueeze(-1) * size + torch.arange(size, device=w.device)  # [*B, M, size]
    inside = ids.clamp_max(n - 1) if n % size else ids
    values = torch.gather(w.expand(*blocks.shape[:-1], n), -1, inside.flatten(-2)).view(ids.shape)
    if n % size:
        values = values.masked_fill(ids >= n, 0)
    return values, ids


def _drop(values: torch.Tensor, ids: torch.Tensor, dropped: torch.Tensor) -> torch.Tensor:
    """``values`` [*B, M, size] with the entries of the tokens ``dropped`` [*B, D] set to 0."""
    hit = (ids.unsqueeze(-1) == dropped[..., None, None, :]).any(-1)  # [*B, M, size]
    return values.masked_fill(hit, 0)


def masses_without(w: torch.Tensor, masses: torch.Tensor, dropped: torch.Tensor) -> torch.Tensor:
    """Block masses of ``w`` [*Bw, V] with the tokens ``dropped`` [*B, D] removed: [*B, NB] float64.

    ``masses`` are :func:`block_masses` of ``w``. A block holding a dropped token is summed again
    without it (O(D √V) a row), never by subtraction, so a near-one-hot row keeps the mass of its tail:
    Σ of the result = Σ_{y ∉ dropped} w(y) to w's rounding, with no cancellation.

    >>> w = torch.tensor([1.0, 1e-30, 0.0, 0.0], dtype=torch.float64)
    >>> masses_without(w, block_masses(w), torch.tensor([0])).sum().item()
    1e-30
    """
    size = block_size(w.shape[-1])
    hit = torch.div(dropped, size, rounding_mode="floor")  # [*B, D]
    values, ids = _block_values(w, hit)  # [*B, D, size]
    again = _drop(values, ids, dropped).sum(-1).to(torch.float64)  # [*B, D]
    return masses.expand(*dropped.shape[:-1], masses.shape[-1]).scatter(-1, hit, again)


def _search(cdf: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """First index i with cdf[..., i] > target, for cdf [*Bc, L] (Bc broadcastable to target's [*B])
    and target [*B, M]: [*B, M]."""
    if cdf.shape[:-1] == target.shape[:-1]:
        return torch.searchsorted(cdf, target, right=True)
    if math.prod(cdf.shape[:-1]) == 1:
        return torch.searchsorted(cdf.reshape(-1), target, right=True)
    cdf = cdf.expand(*target.shape[:-1], cdf.shape[-1]).contiguous()
    return torch.searchsorted(cdf, target, right=True)


def inverse_cdf(
    w: torch.Tensor,
    u: torch.Tensor,
    *,
    masses: torch.Tensor | None = None,
    dropped: torch.Tensor | None = None,
    fallback: torch.Tensor | None = None,
    use_fallback: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Draw tokens from unnormalised weights by inversion: ``u`` [*B, M] in [0, 1) -> tokens [*B, M].

    .. math:: y = \min\{i : \textstyle\sum_{j \le i} w_j > u \sum_j w_j\}

    Parameters
    ----------
    w : Tensor [*Bw, V]
        Non-negative weights (Bw broadcastable to B); M draws per row share one pass over ``w``.
    u : Tensor [*B, M]
        Float64 uniforms, one per draw.
    masses : Tensor [*Bw, NB], optional
        :func:`block_masses` of ``w`` if the caller has them.
    dropped : Tensor [*B, D], optional
        Tokens removed from ``w`` before drawing (w restricted to V∖dropped), computed without
        cancellation (:func:`masses_without`).
    fallback : Tensor [*Bf, V], optional
        Weights used instead on rows where ``w`` (after ``dropped``) has no mass, and on rows where
        ``use_fallback`` [*B] is True.

    A token of zero weight is never returned while its row has mass. A row without mass and without
    fallback returns an arbitrary token in [0, V) (the callers reach it only in branches of
    probability zero). Cumulative sums run in float64, so the draw is exact to the weights' rounding.

    >>> u = torch.tensor([[0.1, 0.6]], dtype=torch.float64)
    >>> inverse_cdf(torch.tensor([[1.0, 0.0, 3.0]]), u)
    tensor([[0, 2]])
    """
    n = w.shape[-1]
    size = block_size(n)
    if masses is None:
        masses = block_masses(w)
    if dropped is not None:
        masses = masses_without(w, masses, dropped)
    cdf = masses.cumsum(-1)  # [*Bm, NB]
    total = cdf[..., -1:]
    if fallback is not None:
        empty = total == 0
        if use_fallback is not None:
            empty = empty | use_fallback.unsqueeze(-1)
        cdf = torch.where(empty, block_masses(fallback).cumsum(-1), cdf)
        total = cdf[..., -1:]
    zero = total.new_zeros(())
    target = torch.minimum(u * total, torch.nextafter(total, zero))  # [*B, M]: strictly below the total
    block = _search(cdf, target).clamp_max(cdf.shape[-1] - 1)
    start = torch.nn.functional.pad(cdf, (1, 0))  # mass before each block
    before = torch.gather(start.expand(*block.shape[:-1], start.shape[-1]), -1, block)
    values, ids = _block_values(w, block)  # [*B, M, size]
    if dropped is not None:
        values = _drop(values, ids, dropped)
    if fallback is not None:
        values = torch.where(empty.unsqueeze(-1), _block_values(fallback, block)[0], values)
    inner = values.cumsum(-1, dtype=torch.float64)  # [*B, M, size]
    rest = torch.minimum(target - before, torch.nextafter(inner[..., -1], zero))
    within = torch.searchsorted(inner, rest.unsqueeze(-1), right=True).squeeze(-1).clamp_max(size - 1)
    token = block * size + within
    return token.clamp_max(n - 1) if n % size else token


def race_top_k(q: torch.Tensor, k: int, generator: torch.Generator | None) -> torch.Tensor:
    r"""k draws without replacement from each row of ``q`` [*B, V]: the first k arrivals of an
    exponential race, in order. Returns LongTensor [*B, k].

    Token i arrives at E_i / q_i with E_i ~ Exp(1); the race runs in log space and float64,
    log E_i − log q_i, so no q_i (down to 5e-324) overflows or ties with a token of q = 0, which
    arrives at +∞ and is drawn only once every positive token is (a row with fewer than k).

    .. math:: P(x_1, \dots, x_k) = \prod_{i=1}^{k} \frac{q(x_i)}{1 - \sum_{j<i} q(x_j)}

    >>> race_top_k(torch.tensor([0.0, 1e-40, 1.0]), 2, torch.Generator().manual_seed(0))
    tensor([2, 1])
    """
    u = uniform(tuple(q.shape), generator, q.device)
    exp = torch.log(1.0 - u).neg_()  # E ~ Exp(1); 1 − U is exact (U is a multiple of 2^-53)
    arrival = exp.log_().sub_(torch.log(q.to(torch.float64)))  # log(E / q)
    arrival = arrival.nan_to_num_(nan=math.inf, posinf=math.inf, neginf=-math.inf)  # E = 0 with q = 0
    return torch.topk(arrival, k, dim=-1, largest=False, sorted=True).indices


def top_k(q: torch.Tensor, k: int) -> torch.Tensor:
    """The k most likely tokens of each row of ``q`` [*B, V] (k <= V), by decreasing q, ties towards
    the lower index (``mdsd.laws.ranked(q)[:k]``): LongTensor [*B, k].

    Deterministic, unlike ``torch.topk`` on ties. float32: one ``topk`` of the integer key
    (bits of q) · 2^b + (2^b − 1 − index), exact because the bits of a non-negative float are ordered
    like its value. Other dtypes: the k-th largest value v is found first, then the tokens above v and
    the lowest-index tokens equal to v are taken.

    >>> top_k(torch.tensor([0.5, 0.0, 0.0, 0.5]), 3)
    tensor([0, 3, 1])
    """
    n = q.shape[-1]
    if k == 0:
        return torch.empty(*q.shape[:-1], 0, dtype=torch.int64, device=q.device)
    if q.dtype == torch.float32:
        b = max(1, (n - 1).bit_length())
        low = torch.arange((1 << b) - 1, (1 << b) - 1 - n, -1, device=q.device)  # 2^b − 1 − index
        key = (q + 0.0).view(torch.int32).to(torch.int64).mul_(1 << b).add_(low)  # + 0.0: −0.0 -> +0.0
        return torch.topk(key, k, dim=-1).indices
    kth = torch.topk(q, k, dim=-1).values[..., -1:]  # [*B, 1]
    rank = torch.arange(n, 0, -1, device=q.device, dtype=torch.float64)  # V − i: lower index first
    key = torch.where(q > kth, rank + n, torch.where(q == kth, rank, 0.0))
    chosen = torch.topk(key, k, dim=-1).indices.sort(dim=-1).values  # [*B, k], by index
    order = torch.gather(q, -1, chosen).sort(dim=-1, descending=True, stable=True).indices
    return torch.gather(chosen, -1, order)


def drawn_top_k(q: torch.Tensor, drawn: torch.Tensor, need: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sparse [*B], top [*B, k]) for rows of ``q`` [*B, V] and k tokens ``drawn`` [*B, k] from each row
    by a law that never draws a token of q = 0 while q has mass left (every sampler here: the race draws
    them last, an inversion without mass returns some token): ``sparse`` marks the rows with fewer than
    ``need`` <= k positive tokens, and there ``top`` equals :func:`top_k` (q, k).

    No pass over [*B, V]: a sparse row has m < k positive tokens and the first m draws are all of them, so
    its positive draws (not repeated) are its support, ranked by (q descending, index ascending); its zeros
    come next by index, and the first k − m of them lie among the tokens 0..k−1 (at most m of which are
    positive). A row that is not sparse has k distinct positive draws.

    >>> q = torch.tensor([[0.0, 0.5, 0.0, 0.5], [0.1, 0.2, 0.3, 0.4]])
    >>> sparse, top = drawn_top_k(q, torch.tensor([[3, 1, 3], [2, 0, 3]]), 3)
    >>> sparse.tolist(), top[0].tolist()
    ([True, False], [1, 3, 0])
    """
    k, n = drawn.shape[-1], q.shape[-1]
    mass = q.expand(*drawn.shape[:-1], n).gather(-1, drawn)  # [*B, k]
    again = (drawn.unsqueeze(-1) == drawn.unsqueeze(-2)).tril(-1).any(-1)  # equal to an earlier draw
    support = (mass > 0) & ~again
    count = support.sum(-1, keepdim=True)  # m
    ids, at = torch.where(support, drawn, n).sort(dim=-1)  # by index (the others last), then by q
    order = torch.where(support, mass, -1.0).gather(-1, at).sort(dim=-1, descending=True, stable=True).indices
    ranked = ids.gather(-1, order)
    head = (q[..., :k] > 0).to(torch.uint8).sort(dim=-1, stable=True).indices  # zeros of 0..k−1 first
    place = torch.arange(k, device=q.device)
    zeros = head.expand(*drawn.shape[:-1], k).gather(-1, (place - count).clamp_min(0))
    return count[..., 0] < need, torch.where(place < count, ranked, zeros)
