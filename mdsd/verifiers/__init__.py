"""Lossless multi-draft verifiers (MATH.md §3), each a batched torch sampler with an exact acceptance.

``verifier(name, k)`` builds one; ``VERIFIERS`` lists the names. Every verifier has a slow float64
reference in :mod:`mdsd.verifiers.reference` that its sampler matches under the same uniforms.
"""

from __future__ import annotations

import inspect

from mdsd.laws import DraftLaw
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.estimate import AcceptanceEstimate, estimate_acceptance
from mdsd.verifiers.greedy import GreedyVerifier
from mdsd.verifiers.kseq import KSeq
from mdsd.verifiers.ops import Uniforms, draw_uniforms
from mdsd.verifiers.optimal import OptimalVerifier
from mdsd.verifiers.rrs import RRS
from mdsd.verifiers.rrsw import RRSw
from mdsd.verifiers.single import SingleDraft
from mdsd.verifiers.spechub import SpecHub
from mdsd.verifiers.topk import TopKVerifier

__all__ = [
    "VERIFIERS",
    "verifier",
    "Verifier",
    "AcceptanceEstimate",
    "estimate_acceptance",
    "Uniforms",
    "draw_uniforms",
]

_CLASSES: dict[str, type[Verifier]] = {
    cls.name: cls
    for cls in (SingleDraft, RRS, RRSw, KSeq, SpecHub, GreedyVerifier, TopKVerifier, OptimalVerifier)
}
VERIFIERS: tuple[str, ...] = tuple(_CLASSES)


def verifier(name: str, k: int, law: str | DraftLaw | None = None) -> Verifier:
    """The verifier ``name`` (one of :data:`VERIFIERS`) for ``k`` drafts.

    ``law`` picks the draft law of verifiers that take one ("optimal": "iid", "wor" or a
    :class:`mdsd.DraftLaw`); the others have a fixed law and refuse it.

    >>> v = verifier("spechub", 2)
    >>> v.name, v.k, v.law.name
    ('spechub', 2, 'hub')
    >>> verifier("optimal", 3, law="wor").law.name
    'without_replacement'
    """
    if name not in _CLASSES:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(VERIFIERS)}")
    cls = _CLASSES[name]
    if law is None:
        return cls(k)
    if "law" not in inspect.signature(cls.__init__).parameters:
        raise ValueError(f"verifier {name!r} has a fixed draft law; law={law!r} is only for 'optimal'")
    return cls(k, law=law)
