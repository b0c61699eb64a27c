"""The one parser of decoding methods' spellings, shared by ``mdsd decode``, the experiments and the decoder.

A method is ``TREE/VERIFIER[/POLICY][+SOURCE]`` (:func:`parse_method`, :class:`Method`):

* TREE, a token tree: ``chain:N``, ``binary:D`` (the full binary tree of depth D), ``kary:b1,b2,...``
  (branching per depth), ``dynamic:DEPTH,K,EXPAND[,BUDGET]`` (:class:`mdsd.DynamicTree`), a JSON file
  written by ``Tree.to_json`` (e.g. a Sequoia tree), ``sequoia:N`` (Sequoia's best tree of N nodes for the
  verifier's acceptance vector, which the experiments measure) or ``none`` (no draft model: the source
  alone); every number is an integer >= 1;
* VERIFIER: a name of :func:`mdsd.verifiers.verifier_names` (the verifier registry);
* POLICY: an adaptive depth policy's spec (:func:`mdsd.tree.adaptive.policy_names`: ``grow``, ``rate``,
  ``first[:N[:M]]``, ...);
* SOURCE: a draft source's spec (:func:`mdsd.sources.source_names`: ``lookup``, ``datastore``,
  ``dictionary``, ..., several joined by ``,``).

Each part is checked against its registry before anything is loaded; :meth:`Method.decoder_arguments`
builds the decoder's arguments (``mdsd.TreeDecoder.from_method``). The decoder's path: ``--compile``
(:func:`compile_option`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mdsd.sources.registry import make_source, source_names
from mdsd.token_tree import Tree
from mdsd.tree.adaptive import make_policy, policy_names
from mdsd.tree.config import path_rule_obstacle
from mdsd.tree.memory import TreeShape
from mdsd.tree.plan import DynamicTree
from mdsd.verifiers.registry import check_name

__all__ = ["Method", "parse_method", "parse_tree", "tree_shape", "compile_option"]

SOURCE_POLICIES = ("first",)  # policies that choose between a source's chains and the model's tree


@dataclass(frozen=True)
class Method:
    """A decoding method's parts (module docstring), each checked; '' where a part is absent."""

    tree: str
    verifier: str
    policy: str = ""
    source: str = ""

    def __str__(self) -> str:
        policy = f"/{self.policy}" if self.policy else ""
        source = f"+{self.source}" if self.source else ""
        return f"{self.tree}/{self.verifier}{policy}{source}"

    def decoder_arguments(
        self,
        datastore: str = "",
        seconds: Callable[[int], float] | None = None,
        acceptance: list[float] | None = None,
        sequoia_depth: int = 8,
    ) -> dict:
        """The keyword arguments of :class:`mdsd.TreeDecoder` for this method: ``tree``, ``verifier``,
        ``depth`` and ``source``, built fresh (``datastore``: the directory of a ``datastore`` source;
        ``seconds``: the cost model of the ``rate`` policy; ``acceptance``: the acceptance vector a
        ``sequoia:N`` tree is built for, at most ``sequoia_depth`` deep)."""
        if self.tree.startswith("sequoia:"):
            if acceptance is None:
                raise ValueError(
                    f"method {str(self)!r}: a Sequoia tree needs the verifier's acceptance vector"
                )
            tree = Tree.sequoia(acceptance, int(self.tree.split(":")[1]), sequoia_depth)
        else:
            tree = None if self.tree == "none" else parse_tree(self.tree)
        return {
            "tree": tree,
            "verifier": self.verifier,
            "depth": make_policy(self.policy, seconds=seconds) if self.policy else None,
            "source": make_source(self.source, datastore) if self.source else None,
        }


def parse_method(spec: str) -> Method:
    """The :class:`Method` of a spelling ``TREE/VERIFIER[/POLICY][+SOURCE]``, every part checked against its
    registry (``ValueError`` naming the method and the part).

    >>> parse_method("chain:4/single/first:3+lookup")
    Method(tree='chain:4', verifier='single', policy='first:3', source='lookup')
    >>> parse_method("chain:2/rrs/first")
    Traceback (most recent call last):
    ...
    ValueError: method 'chain:2/rrs/first': the policy first chooses between a model tree and a +SOURCE
    """
    if not isinstance(spec, str):
        raise TypeError(f"a method must be a string TREE/VERIFIER[/POLICY][+SOURCE], got {spec!r}")
    head, _, source = spec.partition("+")
    parts = head.split("/")
    if len(parts) not in (2, 3):
        raise ValueError(f"method {spec!r} must be TREE/VERIFIER[/POLICY][+SOURCE] or an hf-* baseline")
    method = Method(parts[0], parts[1], parts[2] if len(parts) == 3 else "", source)
    try:
        check_method(method)
    except ValueError as err:
        raise ValueError(f"method {spec!r}: {err}") from None
    return method


def check_method(method: Method, flags: dict[str, str] | None = None) -> None:
    """Check each part of ``method`` against its registry and the parts against each other, before anything
    is loaded; a message names the part (by its flag in ``flags``, e.g. ``{"source": "--source"}``)."""
    flags = flags or {}

    def named(part: str, check) -> None:
        try:
            check()
        except ValueError as err:
            raise ValueError(f"{flags[part]}: {err}" if part in flags else str(err)) from None

    named("tree", lambda: check_tree(method.tree))
    named("verifier", lambda: check_name(method.verifier))
    if method.source:
        names = ", ".join(source_names())
        for part in method.source.split(","):
            if part.partition(":")[0] not in source_names():
                named("source", lambda part=part: _refuse(f"source {part!r} must be one of {names}"))
    if method.policy:
        name = method.policy.partition(":")[0]
        if name not in policy_names():
            named(
                "policy",
                lambda: _refuse(
                    f"the policy must be one of {', '.join(policy_names())}, got {method.policy!r}"
                ),
            )
        if method.tree == "none":
            named("policy", lambda: _refuse("a depth policy truncates the draft model's tree: give a tree"))
        if name in SOURCE_POLICIES and not method.source:
            named("policy", lambda: _refuse(f"the policy {name} chooses between a model tree and a +SOURCE"))
        if name in SOURCE_POLICIES:  # its options, checked by building it (it has no context)
            named("policy", lambda: make_policy(method.policy))
    static = method.tree != "none" and not method.tree.startswith("dynamic:")
    branching = _branching(method.tree) if static else None  # None for a .json file, sequoia:N: not built yet
    chain = None if branching is None else max(branching) <= 1
    obstacle = path_rule_obstacle(method.verifier, static, chain, bool(method.source), bool(method.policy))
    if obstacle is not None:
        named("verifier", lambda: _refuse(obstacle))


def _refuse(message: str):
    raise ValueError(message)


def check_tree(spec: str) -> None:
    """Refuse a TREE that is not ``none``, ``sequoia:N`` or a :func:`parse_tree` spelling (a ``.json`` file
    is read when the decoder is built)."""
    if spec == "none" or Path(spec).suffix == ".json":
        return
    if spec.startswith("sequoia:"):
        _positive(spec, "N", spec.split(":", 1)[1])
        return
    tree_shape(spec)


def parse_tree(spec: str):
    """A :class:`mdsd.Tree` or :class:`mdsd.DynamicTree` from its command-line spelling.

    Every number is an integer >= 1: a tree drafts at least one token per step.

    >>> parse_tree("binary:2").size, parse_tree("kary:3,1").size, parse_tree("chain:4").size
    (6, 6, 4)
    >>> parse_tree("dynamic:4,2,3,10")
    DynamicTree(depth=4, k=2, expand=3, budget=10)
    >>> parse_tree("binary:0")
    Traceback (most recent call last):
    ...
    ValueError: --tree 'binary:0': D must be an integer >= 1, got '0'
    """
    branching = _branching(spec)
    if branching is not None:
        return Tree.kary(branching)
    kind, _, arg = spec.partition(":")
    if kind == "dynamic" and arg:
        numbers = [_positive(spec, "each of DEPTH,K,EXPAND[,BUDGET]", x) for x in arg.split(",")]
        if len(numbers) not in (3, 4):
            raise ValueError(f"--tree {spec!r}: dynamic takes DEPTH,K,EXPAND[,BUDGET]")
        return DynamicTree(*numbers)
    path = Path(spec)
    if path.suffix == ".json":
        if not path.is_file():
            raise FileNotFoundError(f"--tree {spec}: no such file")
        return Tree.from_json(path.read_text())
    raise ValueError(
        "--tree must be chain:N, binary:D, kary:b1,b2,..., dynamic:DEPTH,K,EXPAND[,BUDGET] or a tree .json "
        f"file; got {spec!r}"
    )


def tree_shape(spec: str):
    """The :class:`~mdsd.tree.memory.TreeShape` of a ``--tree`` spelling, counted without building a full
    tree (``binary:30`` has 2^31 nodes).

    >>> tree_shape("binary:30").nodes
    2147483646
    """
    branching = _branching(spec)
    if branching is not None:
        return TreeShape.of_branching(branching)
    return TreeShape.of_tree(parse_tree(spec))


def _branching(spec: str) -> list[int] | None:
    """The branching per depth of ``chain:N``, ``binary:D`` and ``kary:b1,b2,...`` (checked), else None."""
    kind, _, arg = spec.partition(":")
    named = {"chain": "N", "binary": "D", "kary": "every b"}
    if kind not in named or not arg:
        return None
    numbers = [_positive(spec, named[kind], x) for x in arg.split(",")]
    if kind in ("chain", "binary") and len(numbers) != 1:
        raise ValueError(f"--tree {spec!r}: {kind} takes one number, {kind}:{named[kind]}")
    return {"chain": [1] * numbers[0], "binary": [2] * numbers[0], "kary": numbers}[kind]


def _positive(spec: str, what: str, text: str) -> int:
    """``text`` as an integer >= 1, or a ``ValueError`` naming the tree spec."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--tree {spec!r}: {what} must be an integer >= 1, got {text!r}")
    return value


def compile_option(value: str) -> bool | str:
    """``--compile`` as :class:`mdsd.TreeDecoder` takes it: "true" / "false", or a backend name.

    >>> compile_option("true"), compile_option("false"), compile_option("cudagraph")
    (True, False, 'cudagraph')
    """
    from mdsd.tree.compiled import BACKENDS

    if value in ("true", "false"):
        return value == "true"
    if value not in BACKENDS:
        raise ValueError(f"--compile takes no value or one of {', '.join(BACKENDS)}; got {value!r}")
    return value
