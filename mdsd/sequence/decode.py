"""The exact law of the text a whole speculative decode emits, by enumeration over its steps.

A step after the context u emits a string z with probability ``step(u)[z]``; the decode repeats steps
until at least ``num_tokens`` tokens are out and keeps the first ``num_tokens``. Lossless decoding means
this law equals the target's law of ``num_tokens`` tokens, Π_i p(y_i | y_<i) (:func:`target_law`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

from mdsd.sequence.models import SequenceModel
from mdsd.validation import check_k

__all__ = ["decode_law", "target_law", "law_distance"]

StepLaw = Callable[[tuple[int, ...]], Mapping[tuple[int, ...], float]]


def decode_law(step: StepLaw, num_tokens: int, context: tuple[int, ...] = ()) -> dict[tuple[int, ...], float]:
    """{the first ``num_tokens`` tokens emitted after ``context``: probability}.

    ``step(u)`` is the law {emitted string: probability} of one step after the tokens u (the context
    included), e.g. ``lambda u: mdsd.sequence.block_step_law(target, draft, 2, u)``. Each context is
    stepped once (memoised).

    >>> fair = {(0,): 0.5, (1,): 0.5}
    >>> decode_law(lambda u: fair, 2)
    {(0, 0): 0.25, (0, 1): 0.25, (1, 0): 0.25, (1, 1): 0.25}
    """
    num_tokens = check_k(num_tokens, "num_tokens")
    context = tuple(context)
    steps: dict[tuple[int, ...], Mapping[tuple[int, ...], float]] = {}
    out: dict[tuple[int, ...], float] = {}
    stack = [((), 1.0)]  # (text emitted so far, its probability)
    while stack:
        text, weight = stack.pop()
        u = context + text
        if u not in steps:
            steps[u] = step(u)
        for z, w in steps[u].items():
            longer = text + tuple(z)
            if len(longer) >= num_tokens:
                key = longer[:num_tokens]
                out[key] = out.get(key, 0.0) + weight * w
            else:
                stack.append((longer, weight * w))
    return dict(sorted(out.items()))


def target_law(
    target: SequenceModel, num_tokens: int, context: tuple[int, ...] = ()
) -> dict[tuple[int, ...], float]:
    """The target's law of the next ``num_tokens`` tokens after ``context``: {y: Π_i p(y_i | y_<i)}."""
    num_tokens = check_k(num_tokens, "num_tokens")
    return {y: target.prob(y, context) for y in itertools.product(range(target.n), repeat=num_tokens)}


def law_distance(a: Mapping[tuple[int, ...], float], b: Mapping[tuple[int, ...], float]) -> float:
    """max_y |a(y) − b(y)| over the union of both supports.

    >>> law_distance({(0,): 0.5, (1,): 0.5}, {(0,): 1.0})
    0.5
    """
    return max((abs(a.get(y, 0.0) - b.get(y, 0.0)) for y in set(a) | set(b)), default=0.0)
