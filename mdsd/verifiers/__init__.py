"""Lossless multi-draft verifiers (MATH.md §3), each a batched torch sampler with an exact acceptance.

The registry below is the one place verifier names live: ``VERIFIERS`` lists them, ``verifier(name, k)``
builds one, ``supports(name, k)`` says whether it runs with k drafts, ``verifier_class(name)`` gives its
class, which declares what it supports (``supported_k``, ``supports_k(k)``) and the law it drafts with
(``verifier(name, k).law``), like :mod:`mdsd.laws`' registry. The CLI, the report and the experiments
ask here instead of testing names. A new verifier touches its module,
its reference (:mod:`mdsd.verifiers.reference`), its tests and one line of ``_CLASSES``.

Every verifier has a slow float64 reference that its sampler matches under the same uniforms.
"""

from __future__ import annotations

import inspect

from mdsd.laws import DraftLaw
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.estimate import AcceptanceEstimate, estimate_acceptance
from mdsd.verifiers.greedy import GreedyVerifier
from mdsd.verifiers.kseq import KSeqVerifier
from mdsd.verifiers.ops import Uniforms, draw_uniforms
from mdsd.verifiers.optimal import OptimalVerifier
from mdsd.verifiers.rrs import RRSVerifier
from mdsd.verifiers.rrsw import RRSwVerifier
from mdsd.verifiers.single import SingleDraftVerifier
from mdsd.verifiers.spechub import SpecHubVerifier
from mdsd.verifiers.topk import TopKVerifier

__all__ = [
    "VERIFIERS",
    "verifier",
    "verifier_class",
    "supports",
    "Verifier",
    "SingleDraftVerifier",
    "RRSVerifier",
    "RRSwVerifier",
    "KSeqVerifier",
    "SpecHubVerifier",
    "GreedyVerifier",
    "TopKVerifier",
    "AcceptanceEstimate",
    "estimate_acceptance",
    "Uniforms",
    "draw_uniforms",
]

_CLASSES: dict[str, type[Verifier]] = {
    cls.name: cls
    for cls in (
        SingleDraftVerifier,
        RRSVerifier,
        RRSwVerifier,
        KSeqVerifier,
        SpecHubVerifier,
        GreedyVerifier,
        TopKVerifier,
        OptimalVerifier,
    )
}
VERIFIERS: tuple[str, ...] = tuple(_CLASSES)


def _parts(name: str) -> tuple[str, str]:
    """(registered name, draft law or "") of ``NAME``, ``NAME:LAW`` or ``NAME-LAW`` ("optimal-wor")."""
    if not isinstance(name, str):
        return name, ""
    base, _, law = name.partition(":")
    head, _, tail = name.partition("-")
    if not law and base not in _CLASSES and head in _CLASSES and tail:
        return head, tail
    return base, law


def verifier_class(name: str) -> type[Verifier]:
    """The class registered as ``name`` (one of :data:`VERIFIERS`, or ``NAME:LAW`` / ``NAME-LAW`` such as
    "optimal:wor", "optimal-wor").

    >>> cls = verifier_class("spechub")
    >>> cls.__name__, cls.supports_k(2), cls.supports_k(3)
    ('SpecHubVerifier', True, False)
    """
    base = _parts(name)[0]
    if base not in _CLASSES:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(VERIFIERS)}")
    return _CLASSES[base]


def supports(name: str, k: int) -> bool:
    """Whether the verifier ``name`` runs with ``k`` drafts (single: k = 1 only, SpecHub: k = 2 only).

    >>> supports("spechub", 2), supports("spechub", 3), supports("rrs", 8)
    (True, False, True)
    """
    return verifier_class(name).supports_k(k)


def verifier(name: str, k: int, law: str | DraftLaw | None = None) -> Verifier:
    """The verifier ``name`` (one of :data:`VERIFIERS`) for ``k`` drafts.

    ``law`` picks the draft law of verifiers that take one ("optimal": "iid", "wor" or a
    :class:`mdsd.DraftLaw`); the others have a fixed law and refuse it. ``name`` may carry it as
    ``NAME:LAW`` (``"optimal:wor"``, or ``"optimal-wor"``), the form the tree decoder, the CLI and the
    experiments take.

    >>> v = verifier("spechub", 2)
    >>> v.name, v.k, v.law.name
    ('spechub', 2, 'hub')
    >>> verifier("optimal", 3, law="wor").law.name, verifier("optimal-wor", 3).law.name
    ('without_replacement', 'without_replacement')
    """
    cls = verifier_class(name)
    named = _parts(name)[1]
    if named:
        if law is not None:
            raise ValueError(f"give the law once: verifier {name!r} names it, and law={law!r}")
        law = named
    if law is None:
        return cls(k)
    if "law" not in inspect.signature(cls.__init__).parameters:
        raise ValueError(f"verifier {name!r} has a fixed draft law; law={law!r} is only for 'optimal'")
    return cls(k, law=law)
