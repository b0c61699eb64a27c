"""The command-line spellings shared by ``mdsd decode`` and the experiments' method specs.

A token tree: ``chain:N``, ``binary:D`` (the full binary tree of depth D), ``kary:b1,b2,...`` (branching
per depth), ``dynamic:DEPTH,K,EXPAND[,BUDGET]`` (:class:`mdsd.DynamicTree`), or a JSON file written by
``Tree.to_json`` (e.g. a Sequoia tree); every number is an integer >= 1. The decoder's path: ``--compile``
(:func:`compile_option`).
"""

from __future__ import annotations

from pathlib import Path

from mdsd.tree.memory import TreeShape
from mdsd.tree.plan import DynamicTree
from mdsd.tree.tree import Tree

__all__ = ["parse_tree", "tree_shape", "compile_option"]


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
        return Tree.from_json(path.read_text())  # OSError if missing: reported by the dispatcher
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
