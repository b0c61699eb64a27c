"""The law D(T) of a drafted token tree: every node's children drawn by a node-level law from q(· | path).

A drafted tree is the topology of a :class:`mdsd.Tree` plus one token per drafted node; it is written as
the tuple of its node tokens in the tree's breadth-first order (the root, node 0, holds no token and is
left out). Node u with k children draws them as one k-tuple from ``law(k)`` applied to the draft's
conditional q(· | context, path(u)), independently of every other node given the path:

.. math:: D(T) = \\prod_{u \\text{ internal}} Q_{k_u}\\bigl(\\text{children}(u) \\mid q(\\cdot \\mid
          \\text{context}, \\text{path}(u))\\bigr).

A node with one child always draws it from q (``IID(1)``), as :class:`mdsd.TreeDecoder` does.
See docs/mathematics.md §2, §4, §7.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mdsd.laws import IID, DraftLaw
from mdsd.otm import law_from_name
from mdsd.sequence.models import SequenceModel
from mdsd.token_tree import Tree

__all__ = ["node_laws", "enumerate_drafts", "node_paths", "MAX_TREES"]

MAX_TREES = 200_000  # drafted trees enumerated at most (the exact routines refuse larger instances)

LawSpec = str | DraftLaw | Callable[[int], DraftLaw]


def node_laws(tree: Tree, law: LawSpec) -> dict[int, DraftLaw]:
    """The draft law of every internal node of ``tree``: {node: law of its k children}.

    ``law`` is a law name of :func:`mdsd.otm.law_from_name` ("iid", "without_replacement" / "wor", "hub",
    "greedy", "topk"), resolved for each k >= 2; a :class:`mdsd.DraftLaw`, which every node with more than
    one child must match in k; or a callable k -> DraftLaw. Nodes with one child use ``IID(1)``.

    >>> node_laws(Tree.kary([2, 1]), "wor")
    {0: WithoutReplacement(k=2), 1: IID(k=1), 2: IID(k=1)}
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be an mdsd.Tree, got {type(tree).__name__}")
    if tree.size == 0:
        raise ValueError("tree has no drafted node; use a tree of depth >= 1")
    out = {}
    for u in np.flatnonzero(tree.branching > 0).tolist():
        k = int(tree.branching[u])
        if k == 1:
            out[u] = IID(1)
        elif isinstance(law, str):
            out[u] = law_from_name(law, k)
        elif isinstance(law, DraftLaw):
            if law.k != k:
                raise ValueError(f"law {law!r} draws {law.k} children but node {u} of the tree has {k}")
            out[u] = law
        elif callable(law):
            out[u] = law(k)
            if not isinstance(out[u], DraftLaw) or out[u].k != k:
                raise ValueError(f"law({k}) must return a DraftLaw with k = {k}, got {out[u]!r}")
        else:
            raise TypeError(
                f"law must be a law name, an mdsd.DraftLaw or a callable k -> DraftLaw; got {law!r}"
            )
    return out


def node_paths(tree: Tree, tokens: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The token path root -> node of every node [N] for node tokens ``tokens`` (nodes 1..size)."""
    paths: list[tuple[int, ...]] = [()]
    for i, parent in enumerate(tree.parents, start=1):
        paths.append((*paths[parent], tokens[i - 1]))
    return paths


def enumerate_drafts(
    draft: SequenceModel,
    tree: Tree,
    laws: dict[int, DraftLaw],
    context: tuple[int, ...] = (),
    max_trees: int | None = None,
) -> list[tuple[tuple[int, ...], float]]:
    """Every drafted tree with positive probability: [(node tokens (nodes 1..size), D(T))].

    Internal nodes are expanded in breadth-first order (a parent before its children), each joint
    law computed once per path. Raises ``ValueError`` as soon as more than ``max_trees`` (default
    :data:`MAX_TREES`) partial trees exist.

    >>> from mdsd.sequence.models import SequenceModel
    >>> q = SequenceModel.context_free([0.5, 0.5])
    >>> enumerate_drafts(q, Tree.chain(2), node_laws(Tree.chain(2), "iid"))[:2]
    [((0, 0), 0.25), ((0, 1), 0.25)]
    """
    size = tree.size
    max_trees = MAX_TREES if max_trees is None else max_trees
    joints: dict[tuple[DraftLaw, tuple[int, ...]], list[tuple[tuple[int, ...], float]]] = {}
    # partial trees: (token of each node, token path of each node, probability); None = not drawn yet
    partial = [([None] * (size + 1), [()] + [None] * size, 1.0)]
    for u in sorted(laws):
        grown = []
        for tokens, paths, weight in partial:
            key = (laws[u], context + paths[u])  # two nodes may share a path but not their k
            if key not in joints:
                joints[key] = sorted(laws[u].joint(draft(key[1])).items())
            for xs, w in joints[key]:
                new_tokens, new_paths = tokens.copy(), paths.copy()
                for child, x in zip(tree.children[u], xs, strict=True):
                    new_tokens[child] = x
                    new_paths[child] = (*paths[u], x)
                grown.append((new_tokens, new_paths, weight * w))
            if len(grown) > max_trees:
                raise ValueError(
                    f"the tree law has more than {max_trees:,} drafted trees (n = {draft.n}, "
                    f"{size} drafted nodes); use a smaller vocabulary or tree"
                )
        partial = grown
    return [(tuple(tokens[1:]), float(w)) for tokens, _, w in partial if w > 0]
