"""Adaptive draft depth: each row chooses, before every step, how deep to draft its tree.

A policy sees, per row, the depth it drafted and the drafts accepted at the last step, and returns the
depth of the next step (1 ≤ depth ≤ the tree's depth); the decoder drafts the tree truncated at that depth.
A policy that reads a draft source's proposals may then lower the step's depths to 0 (no model drafting:
the source's chains alone) once the source has proposed. Either choice uses only what earlier steps emitted
(a source proposes from the emitted context), never the current step's drafts, so it cannot bias the
output: every node's children are still drawn by its verifier's law (docs/mathematics.md §4).

* :class:`GrowShrink` — Hugging Face's assisted-generation heuristic: grow by 2 after a step that accepted
  every drafted level, else shrink by 1.
* :class:`ExpectedRate` — maximise expected tokens per second: per row, the chance that a drafted level is
  accepted given its parent was is estimated online (a Beta posterior per depth), the expected tokens of the
  tree truncated at depth L follow (docs/mathematics.md §4, Sequoia's F with one acceptance per level), and
  the step time comes from a cost model ``seconds(depth)`` (e.g. :func:`mdsd.depth_seconds` of measured
  profiles).
* :class:`SourceFirst` — the model drafts only in the steps where the source falls short: the source's
  chains alone (depth 0) when every row's source proposed, the whole tree beside them otherwise.

A policy class registers its spec name (``key``: ``grow``, ``rate``, ``first``) with
:func:`register_policy` and builds itself from a spec (``from_spec``), so ``mdsd decode --adaptive NAME``
and the method specs ``TREE/VERIFIER/NAME`` (:mod:`mdsd.tree.spec`) find it; :func:`make_policy` builds
one, :func:`policy_names` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

__all__ = [
    "DepthPolicy",
    "GrowShrink",
    "ExpectedRate",
    "SourceFirst",
    "register_policy",
    "policy_names",
    "make_policy",
]

_POLICIES: dict[str, type] = {}  # registration order: the order users see


class DepthPolicy:
    """Chooses the next draft depth of every row from its last depth and accepted count."""

    reads_proposals: ClassVar[bool] = False  # whether :meth:`given_proposals` needs a source's proposals
    key: ClassVar[str] = ""  # its name in specs (mdsd decode --adaptive KEY, methods TREE/VERIFIER/KEY)

    @classmethod
    def from_spec(cls, spec: str, **context) -> DepthPolicy:  # noqa: ARG003
        """The policy a spec ``key`` names; ``context`` holds what some policies need (``seconds``: the
        cost model of :class:`ExpectedRate`). By default the class built without arguments; a class with
        options parses ``key:OPTIONS``."""
        if spec != cls.key:
            raise ValueError(f"policy {spec!r}: {cls.key} takes no options")
        return cls()

    def start(self, rows: int, max_depth: int) -> np.ndarray:
        """Depths [rows] of the first step."""
        raise NotImplementedError

    def update(self, depth: np.ndarray, accepted: np.ndarray, max_depth: int) -> np.ndarray:
        """Depths of the next step, from this step's depths and accepted counts [rows]."""
        raise NotImplementedError

    def keep(self, rows: np.ndarray) -> None:  # noqa: B027 (a stateless policy keeps nothing)
        """Rows ``rows`` (indices into the current batch) stay; the others left the batch."""

    def given_proposals(self, depth: np.ndarray, proposed: np.ndarray) -> np.ndarray:
        """This step's depths [rows] once the source has proposed: ``proposed`` [rows] is the longest chain
        each row's source proposed (0: none). Only a policy that ``reads_proposals`` changes ``depth``.
        Depth 0 (the source's chains alone) should go to every row or to none: in a step where other rows
        draft deeper, a row limited to depth 0 has its root's expansion, retrieved chains included,
        switched off (it emits one token)."""
        return depth


def register_policy(cls: type) -> type:
    """Class decorator: build the :class:`DepthPolicy` subclass ``cls`` for the spec name ``cls.key``."""
    if not (isinstance(cls, type) and issubclass(cls, DepthPolicy)) or not cls.key or ":" in cls.key:
        raise TypeError(f"register_policy takes a DepthPolicy subclass with a spec name key, got {cls!r}")
    if _POLICIES.get(cls.key, cls) is not cls:
        raise ValueError(f"policy name {cls.key!r} is already registered to {_POLICIES[cls.key].__name__}")
    _POLICIES[cls.key] = cls
    return cls


def policy_names() -> tuple[str, ...]:
    """The registered policies' spec names, in registration order.

    >>> policy_names()[:3]
    ('grow', 'rate', 'first')
    """
    return tuple(_POLICIES)


def make_policy(spec: str, **context) -> DepthPolicy:
    """The policy a spec names (``grow``, ``rate``, ``first[:N[:M]]``, ...; ``context`` as
    :meth:`DepthPolicy.from_spec` takes it).

    >>> make_policy("first:2")
    SourceFirst(min_tokens=2, backoff=0)
    """
    name = spec.partition(":")[0] if isinstance(spec, str) else None
    if name not in _POLICIES:
        raise ValueError(f"policy {spec!r} must be one of {', '.join(_POLICIES)}")
    return _POLICIES[name].from_spec(spec, **context)


@register_policy
@dataclass
class GrowShrink(DepthPolicy):
    """HF assisted generation's schedule: depth + grow after a fully accepted step, else depth − shrink.

    >>> GrowShrink(initial=5).update(np.array([5, 5]), np.array([5, 2]), max_depth=20).tolist()
    [7, 4]
    """

    initial: int = 5
    grow: int = 2
    shrink: int = 1
    key: ClassVar[str] = "grow"

    def start(self, rows, max_depth):
        return np.full(rows, min(self.initial, max_depth), dtype=np.int64)

    def update(self, depth, accepted, max_depth):
        full = accepted >= depth
        return np.clip(np.where(full, depth + self.grow, depth - self.shrink), 1, max_depth)


@register_policy
@dataclass
class ExpectedRate(DepthPolicy):
    """The depth with the most expected tokens per second, from acceptance measured online per row.

    With a_d the probability that depth d is accepted once depth d − 1 was (a Beta(prior) posterior from the
    row's own steps), the tree truncated at depth L emits in expectation

    .. math:: E[\\text{tokens} \\mid L] = 1 + \\sum_{d=1}^{L} \\prod_{j \\le d} a_j

    (one acceptance per level, as for a chain or any tree summarised by its level acceptance), and the policy
    picks argmax_L E[tokens | L] / seconds(L).

    Parameters
    ----------
    seconds : callable
        ``seconds(depth) -> float``: the predicted time of one step drafting that depth.
    prior : (float, float)
        Beta prior (accepted, rejected) of every level's acceptance.

    >>> policy = ExpectedRate(seconds=lambda depth: 1.0 + 0.1 * depth, prior=(9.0, 1.0))
    >>> int(policy.start(1, max_depth=12)[0])  # a_d = 0.9: deep trees pay off while drafting is cheap
    10
    """

    seconds: Callable[[int], float]
    prior: tuple[float, float] = (1.0, 1.0)
    key: ClassVar[str] = "rate"

    @classmethod
    def from_spec(cls, spec: str, seconds: Callable[[int], float] | None = None, **context) -> ExpectedRate:
        """The policy of the spec ``rate`` on the cost model ``seconds(depth)``."""
        if spec != cls.key:
            raise ValueError(f"policy {spec!r}: rate takes no options")
        if seconds is None:
            raise ValueError(
                "policy rate needs a cost model: the seconds of a step at each depth (method specs: "
                "--profiles, the output directory of experiments/cost_model.py)"
            )
        return cls(seconds=seconds)

    def __post_init__(self) -> None:
        self._counts: np.ndarray | None = None  # [rows, max_depth, 2]: accepted / rejected at each level

    def start(self, rows, max_depth):
        self._counts = np.zeros((rows, max_depth, 2))
        return self._choose(max_depth)

    def update(self, depth, accepted, max_depth):
        levels = np.arange(1, max_depth + 1)
        tried = levels[None, :] <= np.minimum(accepted + 1, depth)[:, None]  # levels the step reached
        won = levels[None, :] <= accepted[:, None]
        self._counts[..., 0] += tried & won
        self._counts[..., 1] += tried & ~won
        return self._choose(max_depth)

    def keep(self, rows):
        self._counts = self._counts[rows]

    def _choose(self, max_depth: int) -> np.ndarray:
        a0, b0 = self.prior
        rate = (self._counts[..., 0] + a0) / (self._counts.sum(-1) + a0 + b0)  # [rows, max_depth]
        tokens = 1.0 + np.cumsum(np.cumprod(rate, axis=1), axis=1)  # E[tokens | L], L = 1..max_depth
        cost = np.array([self.seconds(L) for L in range(1, max_depth + 1)])
        return 1 + np.argmax(tokens / cost, axis=1)


@register_policy
@dataclass
class SourceFirst(DepthPolicy):
    """The draft model drafts only where the source falls short.

    A step drafts depth 0 (the source's chains alone, verified deterministically) when every row's source
    proposed a chain of at least ``min_tokens`` tokens, and the whole tree beside the chains otherwise. The
    choice is the batch's, not each row's: a step that drafts with the model runs its draft forwards for
    every row anyway, and the model's children only add to a row's chances. A depth-0 step runs no draft
    forward: the draft reads the tokens it missed at its next drafting step (on the fast path, where they
    would overflow the draft's buffer of ``CapturedRunner.LAG`` blocks, in a catch-up forward at once).

    ``min_tokens`` counts the tokens of a row's longest proposed chain, not how sure the source is of it:
    prompt lookup proposes its whole chain after any match, so on chat (MT-Bench, the real pair) requiring 2
    or 4 tokens changes little (``results/source_first_min_tokens``). ``backoff`` reads the source's record
    instead: after a step of chains alone in which some row's chains were all rejected at their first token,
    the next ``backoff`` steps draft the whole tree (the chains still beside it). Both read only what earlier
    steps emitted, so the target's law is kept.

    >>> policy = SourceFirst()
    >>> policy.given_proposals(policy.start(2, max_depth=4), np.array([8, 3])).tolist()
    [0, 0]
    >>> policy.given_proposals(policy.start(2, max_depth=4), np.array([8, 0])).tolist()
    [4, 4]
    >>> policy, steps = SourceFirst(backoff=2), []
    >>> depth = policy.update(np.array([0, 0]), np.array([3, 0]), max_depth=4)  # row 1's chains failed
    >>> for _ in range(3):  # every row's source proposes: two steps of the whole tree first
    ...     depth = policy.given_proposals(depth, np.array([8, 8]))
    ...     steps.append(depth.tolist())
    ...     depth = policy.update(depth, np.array([1, 1]), max_depth=4)
    >>> steps
    [[4, 4], [4, 4], [0, 0]]
    """

    min_tokens: int = 1
    backoff: int = 0
    reads_proposals: ClassVar[bool] = True
    key: ClassVar[str] = "first"

    @classmethod
    def from_spec(cls, spec: str, **context) -> SourceFirst:  # noqa: ARG003
        """The policy of a spec ``first[:N[:M]]`` (``min_tokens`` N, ``backoff`` M), as method specs and
        ``mdsd decode --adaptive`` write it.

        >>> SourceFirst.from_spec("first:1:4")
        SourceFirst(min_tokens=1, backoff=4)
        """
        name, *numbers = spec.split(":")
        if name != "first" or len(numbers) > 2 or not all(n.isdecimal() for n in numbers):
            raise ValueError(
                f"source first is written first[:N[:M]] with integers N >= 1 and M >= 0, got {spec!r}"
            )
        return cls(*map(int, numbers))

    def __post_init__(self) -> None:
        for name, least in (("min_tokens", 1), ("backoff", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        self._cooling = 0  # steps left that draft the whole tree after a failed step of chains alone

    def start(self, rows, max_depth):
        self._cooling = 0
        return np.full(rows, max_depth, dtype=np.int64)

    def update(self, depth, accepted, max_depth):
        self._cooling = max(self._cooling - 1, 0)
        if bool(((depth == 0) & (accepted == 0)).any()):
            self._cooling = self.backoff
        return np.full(depth.shape, max_depth, dtype=np.int64)

    def given_proposals(self, depth, proposed):
        if self._cooling or not bool((proposed >= self.min_tokens).all()):
            return depth
        return np.zeros_like(depth)
