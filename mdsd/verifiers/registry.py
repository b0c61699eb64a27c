"""The verifier registry: the one place verification rules are known by name.

Two kinds of rule register here, each from its own module:

* **node verifiers** (:class:`~mdsd.verifiers.base.Verifier` subclasses, ``@register``): a rule for the k
  drafts of one node, with its draft law, exact acceptance, exact output law and float64 reference. A
  verifier that takes a draft law (``laws``) is also named ``NAME:LAW`` or ``NAME-LAW`` ("optimal:wor").
* **path rules** (:class:`PathRule`, :func:`register_path_rule`): sequence-level rules of
  :mod:`mdsd.sequence` that verify a whole static tree per decoding step (block verification on a chain,
  Traversal Verification on a tree), drafting each node's children with a node verifier's law.

The CLI, the report, the experiments and the tree decoder ask here (:func:`verifier_names`,
:func:`check_name`, :func:`path_rule`) instead of testing names, so a new verifier is its module (which
registers itself; :mod:`mdsd.verifiers` imports every module of the package) and its tests.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from mdsd.laws import DraftLaw
from mdsd.verifiers.base import Verifier

__all__ = [
    "register",
    "register_path_rule",
    "PathRule",
    "node_names",
    "verifier_names",
    "verifier_class",
    "verifier",
    "supports",
    "path_rule",
    "check_name",
]

_NODE: dict[str, type[Verifier]] = {}  # registration order: the order users see


@dataclass(frozen=True)
class PathRule:
    """A sequence-level rule the tree decoder runs on a whole static tree per step.

    Attributes
    ----------
    name : str
        Its registry name (a ``verifier=`` of :class:`mdsd.TreeDecoder`).
    drafts_with : str
        The node verifier whose draft law draws each node's children ("single": one draft per node,
        "rrs": i.i.d. children).
    chains_only : bool
        Whether it verifies chains only (``Tree.chain``), not trees.
    kernel : callable
        ``kernel(p, q, tree, tokens, generator) -> (accepted, token)``: one step of the rule for a batch of
        rows, with p [B, N, V] at every node, q [B, M, V] at the internal nodes (in node order), the node
        tokens [B, N] (the root first) and the step's random numbers (a torch.Generator or a
        :class:`mdsd.sampling.UniformStream`); returns the accepted node [B] and the token that follows it
        [B]. No validation and no host synchronisation: the decoder calls it inside its step.
    """

    name: str
    drafts_with: str
    chains_only: bool
    kernel: Callable


_PATH: dict[str, PathRule] = {}


def register(cls: type[Verifier]) -> type[Verifier]:
    """Class decorator: register a :class:`~mdsd.verifiers.base.Verifier` subclass under ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, Verifier)):
        raise TypeError(f"register takes a Verifier subclass, got {cls!r}")
    _claim(cls.name, cls)
    _NODE[cls.name] = cls
    return cls


def register_path_rule(rule: PathRule) -> PathRule:
    """Register a sequence-level rule (see :class:`PathRule`)."""
    _claim(rule.name, rule)
    _PATH[rule.name] = rule
    return rule


def _claim(name: str, what: object) -> None:
    holder = _NODE.get(name) or _PATH.get(name)
    if holder is not None and holder is not what:
        raise ValueError(f"verifier name {name!r} is already registered to {holder!r}")


def node_names() -> tuple[str, ...]:
    """The node verifiers' names in registration order (``mdsd.VERIFIERS``)."""
    return tuple(_NODE)


def verifier_names(paths: bool = True) -> tuple[str, ...]:
    """Every name a user may give the tree decoder or ``mdsd decode``: the node verifiers, their
    ``NAME:LAW`` forms for each law beyond the default, and (``paths``) the path rules.

    >>> verifier_names(paths=False)[-2:]
    ('optimal', 'optimal:wor')
    """
    named = [f"{name}:{law}" for name, cls in _NODE.items() for law in cls.laws[1:]]
    return (*_NODE, *named, *(_PATH if paths else ()))


def _parts(name: str) -> tuple[str, str]:
    """(registered name, draft law or "") of ``NAME``, ``NAME:LAW`` or ``NAME-LAW`` ("optimal-wor")."""
    base, _, law = name.partition(":")
    head, _, tail = name.partition("-")
    if not law and base not in _NODE and head in _NODE and tail:
        return head, tail
    return base, law


def verifier_class(name: str) -> type[Verifier]:
    """The node verifier class registered as ``name`` (``NAME``, ``NAME:LAW`` or ``NAME-LAW``), after
    checking the law part: ``ValueError`` naming what is unknown.

    >>> cls = verifier_class("spechub")
    >>> cls.__name__, cls.supports_k(2), cls.supports_k(3)
    ('SpecHubVerifier', True, False)
    >>> verifier_class("optimal:foo")
    Traceback (most recent call last):
    ...
    ValueError: verifier 'optimal:foo': unknown draft law 'foo'; 'optimal' takes iid, wor
    """
    if not isinstance(name, str):
        raise TypeError(f"verifier name must be a string, got {name!r}")
    base, law = _parts(name)
    if base in _PATH:
        raise ValueError(
            f"{name!r} verifies whole trees in the tree decoder (a path rule), not one node; node verifiers: "
            f"{', '.join(_NODE)}"
        )
    if base not in _NODE:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(_NODE)}")
    cls = _NODE[base]
    if law:
        cls.check_law(law, name)
    return cls


def path_rule(name: str) -> PathRule | None:
    """The path rule registered as ``name``, or None if ``name`` is not one."""
    return _PATH.get(name) if isinstance(name, str) else None


def check_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is one of :func:`verifier_names` (any law spelling): the check
    the decoder and ``mdsd decode`` run before loading anything.

    >>> check_name("optimal-wor"), check_name("block")
    (None, None)
    """
    if path_rule(name) is not None:
        return
    if isinstance(name, str) and _parts(name)[0] in _NODE:
        verifier_class(name)
        return
    raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(verifier_names())}")


def supports(name: str, k: int) -> bool:
    """Whether the node verifier ``name`` runs with ``k`` drafts (single: k = 1 only, SpecHub: 2 only).

    >>> supports("spechub", 2), supports("spechub", 3), supports("rrs", 8)
    (True, False, True)
    """
    return verifier_class(name).supports_k(k)


def verifier(name: str, k: int, law: str | DraftLaw | None = None) -> Verifier:
    """The node verifier ``name`` (one of :data:`mdsd.VERIFIERS`) for ``k`` drafts.

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
        raise ValueError(f"verifier {name!r} has a fixed draft law; law={law!r} is not for it")
    return cls(k, law=law)
