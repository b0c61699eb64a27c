"""Draft laws: the joint law Q of the k-tuple of drafts x̄ = (x_1, ..., x_k) drawn from a draft q.

Each law can check that its k is feasible for a given q, enumerate its exact joint law (small n), sample
drafts for a batch of draft distributions (torch, batched over leading dimensions), and compute the
containment probability Q(set(x̄) ⊆ A) that the min-cut dual of the optimal acceptance needs
(docs/mathematics.md §1): for one set, and for every prefix of a token order at once where the law has such
a form (:meth:`DraftLaw.dual_form` says which, and on what grounds the dual's answer is the optimum).
Ties in q are broken towards the lower token index everywhere ("the hub", "the top k").

The laws that can be built from a name and k register themselves here (:func:`register`); everything
else asks this registry (:func:`law_from_name`, :func:`law_names`, :func:`supports`). Adding a law means
writing its class (with ``@register``) and its tests. See docs/mathematics.md §2.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from mdsd import race
from mdsd.sampling import UniformStream, block_masses, inverse_cdf, race_top_k, top_k, uniform
from mdsd.validation import as_probabilities, as_probability_tensor, check_k

__all__ = [
    "DraftLaw",
    "IID",
    "WithoutReplacement",
    "Hub",
    "Greedy",
    "TopK",
    "Joint",
    "DualForm",
    "PrefixStatistics",
    "register",
    "law_from_name",
    "law_names",
    "law_class",
    "supports",
    "ranked",
]

_REGISTRY: dict[str, type[DraftLaw]] = {}  # names and aliases -> class


def register(cls: type[DraftLaw]) -> type[DraftLaw]:
    """Class decorator: make ``cls`` buildable by its ``name`` and ``aliases`` (:func:`law_from_name`)."""
    for key in (cls.name, *cls.aliases):
        if key in _REGISTRY:
            raise ValueError(f"draft law name {key!r} is already registered to {_REGISTRY[key].__name__}")
        _REGISTRY[key] = cls
    return cls


def law_names() -> tuple[str, ...]:
    """The registered laws' canonical names, in registration order (aliases left out)."""
    return tuple(key for key, cls in _REGISTRY.items() if key == cls.name)


def _described() -> str:
    return ", ".join(
        name + (f" ({', '.join(_REGISTRY[name].aliases)})" if _REGISTRY[name].aliases else "")
        for name in law_names()
    )


def law_class(name: str) -> type[DraftLaw]:
    """The law class registered under ``name`` or one of its aliases; ``ValueError`` listing them if none."""
    if name not in _REGISTRY:
        raise ValueError(f"law must be one of {_described()}; got {name!r}")
    return _REGISTRY[name]


def supports(name: str, k: int) -> bool:
    """Whether the law called ``name`` has a version with ``k`` drafts (the hub pair: only k = 2)."""
    return law_class(name).supports_k(k)


def law_from_name(name: str, k: int) -> DraftLaw:
    """The draft law called ``name`` (a registered name or alias) with ``k`` drafts.

    >>> law_from_name("wor", 3), law_from_name("hub", 2)
    (WithoutReplacement(k=3), Hub(k=2))
    """
    cls = law_class(name)
    k = check_k(k, "k")
    if not cls.supports_k(k):
        raise ValueError(f"the {cls.name} law has k = {cls.fixed_k} drafts; got k = {k}")
    return cls.from_k(k)


def ranked(q: np.ndarray) -> np.ndarray:
    """Token indices of ``q`` (last axis) by decreasing probability, ties towards lower index."""
    return np.argsort(-q, axis=-1, kind="stable")


def _support(q: np.ndarray) -> int:
    return int(np.count_nonzero(q))


@dataclass(frozen=True)
class DualForm:
    """How a law's min-cut dual :math:`\\min_A p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A)` is solved.

    Attributes
    ----------
    kind : str
        "prefix": the minimising A is a prefix of the tokens sorted by p/q
        (:meth:`DraftLaw.prefix_statistics`);
        "modular": Q(set ⊆ A) is modular beyond a forced set, a closed form (:meth:`DraftLaw.modular_form`).
    basis : str
        Why the dual's value is the optimum, e.g. "sorted-prefix theorem (i.i.d.)".
    proven : bool
        False where the basis is a conjecture (checked in the tests, not proven).
    exact : bool
        False where the scan's containment is numerical (:meth:`DraftLaw.prefix_containment`) and
        :meth:`DraftLaw.prefix_statistics` only bounds it from above.
    """

    kind: str
    basis: str
    proven: bool
    exact: bool = True


@dataclass(frozen=True)
class PrefixStatistics:
    """Q(set(x̄) ⊆ A) as a function of sums over A of per-token weights and of λ = q(V∖A).

    Attributes
    ----------
    weights : ndarray [m, ..., n]
        m additive weights per token.
    containment : callable
        ``containment(sums [m, ...], outside [...]) -> [...]``: Q(set ⊆ A) from the weights' sums over A
        and q(V∖A); both broadcast over leading axes (every prefix of every row at once).
    exact : bool
        False when ``containment`` is only an upper bound (the law then has an exact
        :meth:`DraftLaw.prefix_containment` and a :meth:`DraftLaw.containment_lower`).
    """

    weights: np.ndarray
    containment: Callable[[np.ndarray, np.ndarray], np.ndarray]
    exact: bool = True


def _uniforms(q: torch.Tensor, shape: tuple[int, ...], m: int, generator) -> torch.Tensor:
    """Float64 uniforms [*shape, m] on q's device, for m inverse-CDF draws per row."""
    return uniform((*shape, m), generator, q.device)


@dataclass(frozen=True)
class DraftLaw(ABC):
    """A law of k drafts built from one draft distribution q."""

    k: int

    name: ClassVar[str] = "law"
    aliases: ClassVar[tuple[str, ...]] = ()
    fixed_k: ClassVar[int | None] = None  # the only k this law has (None: any k >= 1)
    inverts: ClassVar[bool] = True  # _sample inverts q's CDF, so q's block masses save it a pass

    def __post_init__(self) -> None:
        check_k(self.k, "k")

    @classmethod
    def supports_k(cls, k: int) -> bool:
        """Whether this law has a version with ``k`` drafts."""
        return cls.fixed_k is None or k == cls.fixed_k

    @classmethod
    def from_k(cls, k: int) -> DraftLaw:
        """The law with ``k`` drafts (``k`` already checked by :func:`law_from_name`)."""
        return cls(k)

    def tuple_count(self, q: np.ndarray) -> int:
        """How many ordered draft tuples have positive probability under q [n] (the enumerated joint's size,
        less any whose probability underflows in float): what enumerating methods would build."""
        return len(self.joint(q))

    # ----- the containment probability Q(set(x̄) ⊆ A) that the min-cut dual needs (docs/mathematics.md §1)

    def dual_form(self) -> DualForm | None:
        """How the min-cut dual of this law is solved, or None (enumerate: LP / max-flow)."""
        return None

    def prefix_statistics(self, q: np.ndarray) -> PrefixStatistics:
        """Q(set ⊆ A) from additive per-token weights of q [..., n] (laws of dual kind "prefix")."""
        raise NotImplementedError(f"{self!r} has no prefix form")

    def prefix_containment(
        self, qs: np.ndarray, wanted: np.ndarray | None = None, fine: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Q(set ⊆ A_j) at the prefixes ``wanted`` [n + 1] (all if None) of one row qs [n] in prefix order.

        Returns (values [n + 1], error estimates [n + 1]), NaN at prefixes not wanted. Needed where
        :meth:`prefix_statistics` is only an upper bound; ``fine`` asks a numerical method for a tighter
        error estimate at a higher cost.
        """
        raise NotImplementedError(f"{self!r} has no prefix containment beyond its statistics")

    def containment_lower(self, a: np.ndarray, outside: float) -> float:
        """A lower bound on Q(set ⊆ A) from A's masses ``a`` [m] and q(V∖A) (where statistics are inexact)."""
        raise NotImplementedError(f"{self!r} has no containment lower bound")

    def modular_form(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(forced F [..., n], weights r [..., n], base [...]) with Q(set ⊆ A) = [F ⊆ A] (base + r(A ∖ F)).

        For laws of dual kind "modular"; base + r(V ∖ F) = 1.
        """
        raise NotImplementedError(f"{self!r} has no modular form")

    def containment(self, q: np.ndarray, inside: np.ndarray) -> float:
        """Q(set(x̄) ⊆ A) for one q [n] and the membership mask ``inside`` [n] of A, by the law's formula.

        >>> round(IID(2).containment(np.array([0.5, 0.3, 0.2]), np.array([True, True, False])), 12)
        0.64
        """
        form = self.dual_form()
        if form is None:
            return float(sum(w for x, w in self.joint(q).items() if inside[list(x)].all()))
        if form.kind == "modular":
            forced, r, base = self.modular_form(q)
            return float(base + r[inside & ~forced].sum()) if inside[forced].all() else 0.0
        stats = self.prefix_statistics(q)
        if stats.exact:
            return np.asarray(stats.containment(stats.weights[..., inside].sum(-1), q[~inside].sum())).item()
        wanted = np.zeros(q.size + 1, dtype=bool)
        wanted[int(inside.sum())] = True
        values, _ = self.prefix_containment(np.concatenate([q[inside], q[~inside]]), wanted)
        return float(values[int(inside.sum())])

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
                f"q has a row with only {int(support.min())} token(s) of positive probability; "
                f"{self!r} needs at least {self.min_support()}"
            )
        return self._sample(qt, generator)

    @abstractmethod
    def _sample(
        self,
        q: torch.Tensor,
        generator: torch.Generator | None,
        shape: tuple[int, ...] | None = None,
        masses: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Drafts [*shape, k] for q [*Bq, V] (Bq broadcastable to ``shape``, default q's batch shape).

        Unchecked and free of host synchronisation; q must be normalised with at least
        :meth:`min_support` positive tokens per row. On a row with fewer, the sampler still returns
        tokens in [0, V) (no error, no NaN), which are not a draw of the law. One pair shared by many
        tuples (``shape`` larger than q's batch) costs O(√V) a tuple, not O(V). ``masses``: the
        :func:`~mdsd.sampling.block_masses` of q where the caller has them (the inversions then make no
        pass of their own over q).
        """


_PREFIX_BASIS = "sorted-prefix theorem"  # proofs: mdsd.otm.dual's module docstring
_MODULAR = DualForm("modular", "closed form (containment modular beyond a forced set)", proven=True)


def _top_mask(q: np.ndarray, m: int) -> np.ndarray:
    """The m most likely tokens of q [..., n] (ties towards the lower index) as a mask [..., n]."""
    mask = np.zeros(q.shape, dtype=bool)
    np.put_along_axis(mask, ranked(q)[..., :m], True, axis=-1)
    return mask


def _off_forced(q: np.ndarray, forced: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Modular form of "the forced tokens, then one draw from q off them": r = q off F, renormalised."""
    off = np.where(forced, 0.0, q)
    return forced, off / off.sum(axis=-1, keepdims=True), np.zeros(q.shape[:-1])  # 1 − q(F) as a sum


@register
@dataclass(frozen=True)
class IID(DraftLaw):
    """k i.i.d. drafts: Q(x̄) = Π_i q(x_i) (duplicates possible); Q(set(x̄) ⊆ A) = q(A)^k."""

    name = "iid"

    def tuple_count(self, q):
        return _support(q) ** self.k

    def dual_form(self):
        return DualForm("prefix", f"{_PREFIX_BASIS} (i.i.d. drafts)", proven=True)

    def prefix_statistics(self, q):
        return PrefixStatistics(q[None], lambda sums, outside: np.minimum(sums[0], 1.0) ** self.k)

    def _joint(self, q):
        support = np.flatnonzero(q)
        for x in itertools.product(support.tolist(), repeat=self.k):
            yield x, math.prod(q[i] for i in x)

    def _sample(self, q, generator, shape=None, masses=None):
        shape = q.shape[:-1] if shape is None else shape
        u = _uniforms(q, shape, self.k, generator)
        return inverse_cdf(q, u, masses=masses)  # k inversions of one CDF


@register
@dataclass(frozen=True)
class WithoutReplacement(DraftLaw):
    """k drafts without replacement: Q(x̄) = Π_i q(x_i) / (1 − Σ_{j<i} q(x_j)), distinct x_i.

    Sampled as an exponential race: E_x ~ Exp(1), arrival time E_x / q(x), drafts = the first k
    arrivals in order (equivalent to Gumbel-top-k on log q), in log space and float64
    (:func:`mdsd.sampling.race_top_k`). Many tuples from one shared q are drawn sequentially instead,
    each draw an inversion of q restricted to the tokens not drawn yet (O(k √V) a tuple).
    Q(set(x̄) ⊆ A): q(A) for k = 1, a closed form in prefix sums for k = 2, the race integral for
    k ≥ 3 (:mod:`mdsd.race`).
    """

    name = "without_replacement"
    aliases = ("wor",)

    def min_support(self) -> int:
        return self.k

    def tuple_count(self, q):
        return math.perm(_support(q), self.k)

    def dual_form(self):
        if self.k <= 2:
            return DualForm("prefix", f"{_PREFIX_BASIS} (drafts without replacement, k <= 2)", proven=True)
        return DualForm("prefix", "sorted-prefix conjecture + race quadrature", proven=False, exact=False)

    def prefix_statistics(self, q):
        """Exact for k <= 2; for k ≥ 3 the upper bound min(Q(first two drafts in A), q(A)^k)."""
        if self.k == 1:
            return PrefixStatistics(q[None], lambda sums, outside: np.minimum(sums[0], 1.0))
        weights, q_top = race.pair_weights(q)
        q_top = q_top[..., None]  # broadcasts against [..., prefixes]
        if self.k == 2:
            return PrefixStatistics(
                weights, lambda sums, outside: race.pair_containment(sums, outside, q_top)
            )

        def upper(sums: np.ndarray, outside: np.ndarray) -> np.ndarray:
            pair = race.pair_containment(sums, outside, q_top)
            return np.minimum(pair, np.minimum(sums[0], 1.0) ** self.k)

        return PrefixStatistics(weights, upper, exact=False)

    def prefix_containment(self, qs, wanted=None, fine=False):
        """The race integral (:func:`mdsd.race.race_containment`); ``fine``: at half its default step."""
        return race.race_containment(qs, self.k, wanted, race.default_step(self.k) / (2.0 if fine else 1.0))

    def containment_lower(self, a, outside):
        return race.containment_lower(a, outside, self.k)

    def _joint(self, q):
        support = np.flatnonzero(q)
        for x in itertools.permutations(support.tolist(), self.k):
            w = 1.0
            for pos, i in enumerate(x):  # 1 − q(drawn) as the sum of the rest: no cancellation near one-hot q
                w *= q[i] / np.delete(q, x[:pos]).sum()
            yield x, w

    def _sample(self, q, generator, shape=None, masses=None):
        # one race per row (V uniforms) from a generator; k sequential inverse-CDF draws (k uniforms)
        # from a stream, whose buffer holds a step's numbers, or for many tuples of one pair
        racing = not isinstance(generator, UniformStream)
        if racing and (shape is None or math.prod(shape) == math.prod(q.shape[:-1])):
            return race_top_k(q if shape is None else q.expand(*shape, q.shape[-1]), self.k, generator)
        u = _uniforms(q, q.shape[:-1] if shape is None else shape, self.k, generator)
        masses = block_masses(q) if masses is None else masses  # one pass over q for the k draws
        drawn = inverse_cdf(q, u[..., :1], masses=masses)  # [*shape, 1]
        for i in range(1, self.k):
            more = inverse_cdf(q, u[..., i : i + 1], masses=masses, dropped=drawn)
            drawn = torch.cat([drawn, more], dim=-1)
        return drawn


@register
@dataclass(frozen=True)
class Hub(DraftLaw):
    """SpecHub's pair (k = 2) around the hub a = argmax q.

    x_1 ~ q; if x_1 ≠ a then x_2 = a, else x_2 ~ q restricted to V∖{a}. So Q(i, a) = q_i and
    Q(a, i) = q_a q_i / (1 − q_a) for i ≠ a: every pair contains the hub.
    """

    k: int = field(default=2, init=False)
    name = "hub"
    fixed_k = 2

    @classmethod
    def from_k(cls, k):
        return cls()

    def min_support(self) -> int:
        return 2

    def tuple_count(self, q):
        return 2 * (_support(q) - 1)

    def dual_form(self):
        return _MODULAR

    def modular_form(self, q):
        """Every pair holds the hub a; Q(set ⊆ A) = [a ∈ A] q(A ∖ a) / (1 − q_a)."""
        return _off_forced(q, _top_mask(q, 1))

    def _joint(self, q):
        a = int(ranked(q)[0])
        rest = np.delete(q, a).sum()  # 1 − q_a without cancellation
        for i in np.flatnonzero(q).tolist():
            if i != a:
                yield (i, a), q[i]
                yield (a, i), q[a] * q[i] / rest

    def _sample(self, q, generator, shape=None, masses=None):
        shape = q.shape[:-1] if shape is None else shape
        hub = q.argmax(dim=-1, keepdim=True).expand(*shape, 1)  # first maximum = lowest index
        u = _uniforms(q, shape, 2, generator)
        masses = block_masses(q) if masses is None else masses
        first = inverse_cdf(q, u[..., :1], masses=masses)  # [*shape, 1]
        other = inverse_cdf(q, u[..., 1:], masses=masses, dropped=hub)  # q restricted to V∖{hub}
        return torch.cat([first, torch.where(first == hub, other, hub)], dim=-1)


@register
@dataclass(frozen=True)
class Greedy(DraftLaw):
    """Hu et al.'s greedy drafts: the top k−1 tokens T of q, then one draw from q restricted to V∖T.

    Q((t_1, ..., t_{k−1}, x)) = q(x) / (1 − q(T)) for x ∉ T, with t the top tokens in rank order.
    """

    name = "greedy"

    def min_support(self) -> int:
        return self.k

    def tuple_count(self, q):
        return _support(q) - (self.k - 1)

    def dual_form(self):
        return _MODULAR

    def modular_form(self, q):
        """Q(set ⊆ A) = [T ⊆ A] q(A ∖ T) / (1 − q(T)), T the top k − 1 tokens."""
        return _off_forced(q, _top_mask(q, self.k - 1))

    def _joint(self, q):
        order = ranked(q)
        top = tuple(int(t) for t in order[: self.k - 1])
        rest = np.delete(q, list(top)).sum()  # 1 − q(T) without cancellation
        for x in order[self.k - 1 :].tolist():
            yield (*top, x), q[x] / rest

    def _sample(self, q, generator, shape=None, masses=None):
        shape = q.shape[:-1] if shape is None else shape
        u = _uniforms(q, shape, 1, generator)
        if self.k == 1:
            return inverse_cdf(q, u, masses=masses)
        top = top_k(q, self.k - 1).expand(*shape, self.k - 1)  # T [*shape, k-1]
        rest = inverse_cdf(q, u, masses=masses, dropped=top)  # then q restricted to V∖T
        return torch.cat([top, rest], dim=-1)


@register
@dataclass(frozen=True)
class TopK(DraftLaw):
    """Deterministic top-k drafts (EAGLE-2/3, SGLang): x̄ = the k most likely tokens of q, Q(x̄) = 1."""

    name = "topk"
    inverts: ClassVar[bool] = False

    def check(self, q: np.ndarray, name: str = "q") -> None:
        if q.shape[-1] < self.k:
            raise ValueError(f"{name} has {q.shape[-1]} tokens; {self!r} needs at least {self.k}")

    def min_support(self) -> int:
        return 1

    def tuple_count(self, q):
        return 1

    def dual_form(self):
        return _MODULAR

    def modular_form(self, q):
        """Q(set ⊆ A) = [top k ⊆ A]."""
        return _top_mask(q, self.k), np.zeros(q.shape), np.ones(q.shape[:-1])

    def _joint(self, q):
        yield tuple(int(t) for t in ranked(q)[: self.k]), 1.0

    def sample(self, q: object, generator: torch.Generator | None = None) -> torch.Tensor:
        qt = as_probability_tensor(q, "q")
        if qt.shape[-1] < self.k:
            raise ValueError(f"q has {qt.shape[-1]} tokens; {self!r} needs at least {self.k}")
        return self._sample(qt, generator)

    def _sample(self, q, generator, shape=None, masses=None):
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
    inverts: ClassVar[bool] = False

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

    def tuple_count(self, q):
        return len(self.table)

    def check(self, q: np.ndarray, name: str = "q") -> None:
        top = max(max(x) for x, _ in self.table)
        if top >= q.shape[-1]:
            raise ValueError(f"Joint law uses token {top}, outside {name}'s vocabulary of {q.shape[-1]}")

    def _joint(self, q):
        yield from self.table

    def _sample(self, q, generator, shape=None, masses=None):
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
