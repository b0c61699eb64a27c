"""Draft laws: the joint law Q of the k-tuple of drafts x̄ = (x_1, ..., x_k) drawn from a draft q.

Each law can check that its k is feasible for a given q, enumerate its exact joint law (small n), and
sample drafts for a batch of draft distributions (torch, batched over leading dimensions).
Ties in q are broken towards the lower token index everywhere ("the hub", "the top k").
See ../shared/MATH.md §2.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

from mdsd.sampling import inverse_cdf, race_top_k, top_k
from mdsd.validation import as_probabilities, as_probability_tensor, check_k

__all__ = ["DraftLaw", "IID", "WithoutReplacement", "Hub", "Greedy", "TopK", "Joint", "ranked"]


def ranked(q: np.ndarray) -> np.ndarray:
    """Token indices of ``q`` (last axis) by decreasing probability, ties towards lower index."""
    return np.argsort(-q, axis=-1, kind="stable")


def _uniforms(q: torch.Tensor, shape: tuple[int, ...], m: int, generator) -> torch.Tensor:
    """Float64 uniforms [*shape, m] on q's device, for m inverse-CDF draws per row."""
    return torch.rand(*shape, m, generator=generator, dtype=torch.float64, device=q.device)


@dataclass(frozen=True)
class DraftLaw(ABC):
    """A law of k drafts built from one draft distribution q."""

    k: int

    name = "law"

    def __post_init__(self) -> None:
        check_k(self.k, "k")

    def min_support(self) -> int:
        """Fewest tokens with q > 0 that this law needs (k drafts must be drawable)."""
        return 1

    def check(self, q: np.ndarray, name: str = "q") -> None:
        """Raise ``ValueError`` if this law cannot draw its k drafts from ``q`` (float64, [..., n])."""
        support = np.count_nonzero(q > 0, axis=-1)
        need = self.min_support()
        if np.any(support < need):
            raise ValueError(
                f"{name} has {int(np.min(support))} tokens with positive probability; "
                f"{self!r} needs at least {need}"
            )

    def joint(self, q: object) -> dict[tuple[int, ...], float]:
        """Exact law of the ordered draft tuple: {x̄: Q(x̄)} over tuples with Q(x̄) > 0.

        Meant for small vocabularies (it may enumerate n^k tuples). ``q`` is one vector [n].
        """
        qa = as_probabilities(q, "q")
        if qa.ndim != 1:
            raise ValueError(f"q must be one vector [n] to enumerate a joint law, got {qa.shape}")
        self.check(qa)
        return {x: w for x, w in self._joint(qa) if w > 0}

    @abstractmethod
    def _joint(self, q: np.ndarray):
        """Yield (tuple, probability) pairs."""

    def sample(self, q: object, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw the k drafts for every row of ``q`` [..., V]: returns LongTensor [..., k]."""
        qt = as_probability_tensor(q, "q")
        support = (qt > 0).sum(dim=-1)
        if bool((support < self.min_support()).any()):
            raise ValueError(
                f"q has a row with {int(support.min())} tokens of positive probability; "
                f"{self!r} needs at least {self.min_support()}"
            )
        return self._sample(qt, generator)

    @abstractmethod
    def _sample(
        self, q: torch.Tensor, generator: torch.Generator | None, shape: tuple[int, ...] | None = None
    ) -> torch.Tensor:
        """Drafts [*shape, k] for q [*Bq, V] (Bq broadcastable to ``shape``, default q's batch shape).

        Unchecked and free of host synchronisation; q must be normalised with at least
        :meth:`min_support` positive tokens per row. On a row with fewer, the sampler still returns
        tokens in [0, V) (no error, no NaN), which are not a draw of the law. One pair shared by many
        tuples (``shape`` larger than q's batch) costs O(√V) a tuple, not O(V).
        """


@dataclass(frozen=True)
class IID(DraftLaw):
    """k i.i.d. drafts: Q(x̄) = Π_i q(x_i) (duplicates possible)."""

    name = "iid"

    def _joint(self, q):
        support = np.flatnonzero(q)
        for x in itertools.product(support.tolist(), repeat=self.k):
            yield x, math.prod(q[i] for i in x)

    def _sample(self, q, generator, shape=None):
        shape = q.shape[:-1] if shape is None else shape
        return inverse_cdf(q, _uniforms(q, shape, self.k, generator))  # k inversions of one CDF


@dataclass(frozen=True)
class WithoutReplacement(DraftLaw):
    """k drafts without replacement: Q(x̄) = Π_i q(x_i) / (1 − Σ_{j<i} q(x_j)), distinct x_i.

    Sampled as an exponential race: E_x ~ Exp(1), arrival time E_x / q(x), drafts = the first k
    arrivals in order (equivalent to Gumbel-top-k on log q), in log space and float64
    (:func:`mdsd.sampling.race_top_k`). Many tuples from one shared q are drawn sequentially instead,
    each draw an inversion of q restricted to the tokens not drawn yet (O(k √V) a tuple).
    """

    name = "without_replacement"

    def min_support(self) -> int:
        return self.k

    def _joint(self, q):
        support = np.flatnonzero(q)
        for x in itertools.permutations(support.tolist(), self.k):
            w = 1.0
            for pos, i in enumerate(x):  # 1 − q(drawn) as the sum of the rest: no cancellation near one-hot q
                w *= q[i] / np.delete(q, x[:pos]).sum()
            yield x, w

    def _sample(self, q, generator, shape=None):
        if shape is None or math.prod(shape) == math.prod(q.shape[:-1]):
            return race_top_k(q if shape is None else q.expand(*shape, q.shape[-1]), self.k, generator)
        u = _uniforms(q, shape, self.k, generator)
        drawn = inverse_cdf(q, u[..., :1])  # [*shape, 1]
        for i in range(1, self.k):
            drawn = torch.cat([drawn, inverse_cdf(q, u[..., i : i + 1], dropped=drawn)], dim=-1)
        return drawn


@dataclass(frozen=True)
class Hub(DraftLaw):
    """SpecHub's pair (k = 2) around the hub a = argmax q.

    x_1 ~ q; if x_1 ≠ a then x_2 = a, else x_2 ~ q restricted to V∖{a}. So Q(i, a) = q_i and
    Q(a, i) = q_a q_i / (1 − q_a) for i ≠ a: every pair contains the hub.
    """

    k: int = field(default=2, init=False)
    name = "hub"

    def min_support(self) -> int:
        return 2

    def _joint(self, q):
        a = int(ranked(q)[0])
        rest = np.delete(q, a).sum()  # 1 − q_a without cancellation
        for i in np.flatnonzero(q).tolist():
            if i != a:
                yield (i, a), q[i]
                yield (a, i), q[a] * q[i] / rest

    def _sample(self, q, generator, shape=None):
        shape = q.shape[:-1] if shape is None else shape
        hub = q.argmax(dim=-1, keepdim=True).expand(*shape, 1)  # first maximum = lowest index
        u = _uniforms(q, shape, 2, generator)
        first = inverse_cdf(q, u[..., :1])  # [*shape, 1]
        other = inverse_cdf(q, u[..., 1:], dropped=hub)  # q restricted to V∖{hub}
        return torch.cat([first, torch.where(first == hub, other, hub)], dim=-1)


@dataclass(frozen=True)
class Greedy(DraftLaw):
    """Hu et al.'s greedy drafts: the top k−1 tokens T of q, then one draw from q restricted to V∖T.

    Q((t_1, ..., t_{k−1}, x)) = q(x) / (1 − q(T)) for x ∉ T, with t the top tokens in rank order.
    """

    name = "greedy"

    def min_support(self) -> int:
        return self.k

    def _joint(self, q):
        order = ranked(q)
        top = tuple(int(t) for t in order[: self.k - 1])
        rest = np.delete(q, list(top)).sum()  # 1 − q(T) without cancellation
        for x in order[self.k - 1 :].tolist():
            yield (*top, x), q[x] / rest

    def _sample(self, q, generator, shape=None):
        shape = q.shape[:-1] if shape is None else shape
        u = _uniforms(q, shape, 1, generator)
        if self.k == 1:
            return inverse_cdf(q, u)
        top = top_k(q, self.k - 1).expand(*shape, self.k - 1)  # T [*shape, k-1]
        return torch.cat([top, inverse_cdf(q, u, dropped=top)], dim=-1)  # then q restricted to V∖T


@dataclass(frozen=True)
class TopK(DraftLaw):
    """Deterministic top-k drafts (EAGLE-2/3, SGLang): x̄ = the k most likely tokens of q, Q(x̄) = 1."""

    name = "topk"

    def check(self, q: np.ndarray, name: str = "q") -> None:
        if q.shape[-1] < self.k:
            raise ValueError(f"{name} has {q.shape[-1]} tokens; {self!r} needs at least {self.k}")

    def min_support(self) -> int:
        return 1

    def _joint(self, q):
        yield tuple(int(t) for t in ranked(q)[: self.k]), 1.0

    def sample(self, q: object, generator: torch.Generator | None = None) -> torch.Tensor:
        qt = as_probability_tensor(q, "q")
        if qt.shape[-1] < self.k:
            raise ValueError(f"q has {qt.shape[-1]} tokens; {self!r} needs at least {self.k}")
        return self._sample(qt, generator)

    def _sample(self, q, generator, shape=None):
        top = top_k(q, self.k)
        return top if shape is None else top.expand(*shape, self.k)


@dataclass(frozen=True, init=False)
class Joint(DraftLaw):
    """Any sparse law of ordered draft tuples, given as {tuple of tokens: probability}.

    The law does not depend on q; only its tokens must lie in q's vocabulary.

    >>> Joint({(0, 1): 0.5, (1, 0): 0.5}).k
    2
    """

    table: tuple[tuple[tuple[int, ...], float], ...] = ()
    name = "joint"

    def __init__(self, table: dict[tuple[int, ...], float]) -> None:
        if not isinstance(table, dict) or not table:
            raise ValueError("table must be a non-empty dict {tuple of tokens: probability}")
        lengths = {len(x) if isinstance(x, tuple) else -1 for x in table}
        if len(lengths) != 1 or min(lengths) < 1:
            raise ValueError("table keys must be non-empty tuples of tokens, all of one length k")
        rows = []
        for x, w in table.items():
            if not all(isinstance(t, (int, np.integer)) and t >= 0 for t in x):
                raise ValueError(f"table key {x!r} must hold non-negative integer tokens")
            w = float(w)
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"table probability for {x!r} must be finite and >= 0, got {w}")
            rows.append((tuple(int(t) for t in x), w))
        total = sum(w for _, w in rows)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"table probabilities must sum to 1 (within 1e-6), got {total:.9g}")
        object.__setattr__(self, "k", lengths.pop())
        object.__setattr__(self, "table", tuple((x, w / total) for x, w in rows if w > 0))

    def check(self, q: np.ndarray, name: str = "q") -> None:
        top = max(max(x) for x, _ in self.table)
        if top >= q.shape[-1]:
            raise ValueError(f"Joint law uses token {top}, outside {name}'s vocabulary of {q.shape[-1]}")

    def _joint(self, q):
        yield from self.table

    def _sample(self, q, generator, shape=None):
        shape = q.shape[:-1] if shape is None else shape
        tuples = torch.tensor([x for x, _ in self.table], device=q.device)  # [M, k]
        weights = torch.tensor([w for _, w in self.table], dtype=torch.float64, device=q.device)
        pick = inverse_cdf(weights, _uniforms(q, shape, 1, generator))[..., 0]  # [*shape]
        return tuples[pick]

    def sample(self, q: object, generator: torch.Generator | None = None) -> torch.Tensor:
        qt = as_probability_tensor(q, "q")
        self.check(np.empty((qt.shape[-1],)))
        return self._sample(qt, generator)

    def __repr__(self) -> str:
        return f"Joint(<{len(self.table)} tuples, k={self.k}>)"
