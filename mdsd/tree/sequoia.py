r"""Sequoia's dynamic programme: the token tree with the most expected tokens for a node budget.

Chen et al. (2024), *Sequoia: Scalable, Robust, and Hardware-aware Speculative Decoding*, §3.1.
Under the per-position acceptance model a node's (j+1)-th child is the one accepted with probability
``a[j]``, and a tree's expected tokens per step is

.. math::
    F(\mathcal{T}) = \sum_{v} \prod_{e \in \text{path}(v)} a_{\text{index}(e)} \quad (\text{root}: 1).

With ``G(d, n)`` the best value of a subtree of exactly ``n`` nodes (its root included) and depth at most
``d``, and ``H(d, j, m)`` the best value of distributing ``m`` nodes over the children ``j, j+1, ...``:

.. math::
    G(d, n) = 1 + H(d, 0, n - 1), \qquad
    H(d, j, m) = \max_{1 \le s \le m} \bigl[a_j\, G(d - 1, s) + H(d, j + 1, m - s)\bigr],
    \qquad H(d, j, 0) = 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mdsd.tree.tree import Tree, _check_acceptance, _check_positive_int

__all__ = ["sequoia_tree", "sequoia_value"]


def _tables(a: np.ndarray, nodes: int, max_depth: int):
    """G[d, n] and the best first-child size choices C[d, j, m] (0 = no more children)."""
    k = a.size
    G = np.full((max_depth + 1, nodes + 1), -np.inf)  # [depth limit, subtree size incl. root]
    G[:, 1] = 1.0
    choice = np.zeros((max_depth + 1, k + 1, nodes + 1), dtype=np.int64)
    for d in range(1, max_depth + 1):
        H = np.full((k + 1, nodes + 1), -np.inf)  # H[j, m]: m nodes over children j, j+1, ...
        H[:, 0] = 0.0
        for j in range(k - 1, -1, -1):
            for m in range(1, nodes):
                s = np.arange(1, m + 1)
                sub = G[d - 1, s]  # -inf where no subtree of that size fits; 0 * -inf must stay -inf
                vals = np.where(np.isfinite(sub), a[j] * np.where(np.isfinite(sub), sub, 0.0), -np.inf)
                vals = vals + H[j + 1, m - s]
                best = int(np.argmax(vals))
                H[j, m] = vals[best]
                choice[d, j, m] = s[best]
        G[d, 1:] = 1.0 + H[0, :nodes]
    return G, choice


def sequoia_value(acceptance: Sequence[float], budget: int, max_depth: int) -> float:
    """Expected tokens per step of :func:`sequoia_tree` (the optimum of the programme).

    >>> sequoia_value([0.5, 0.25], budget=1, max_depth=3)
    1.5
    """
    return sequoia_tree(acceptance, budget, max_depth).expected_tokens(acceptance)


def sequoia_tree(acceptance: Sequence[float], budget: int, max_depth: int) -> Tree:
    """The tree of at most ``budget`` drafted nodes and depth at most ``max_depth`` maximising F.

    Nodes have at most ``len(acceptance)`` children (pass a vector of length 2 for SpecHub).
    Among optimal trees the smallest is returned.

    Parameters
    ----------
    acceptance : sequence of float
        ``a[j]``: probability that a node's (j+1)-th child is accepted; entries in [0, 1], sum <= 1.
    budget : int
        Most drafted nodes (the root is not counted).
    max_depth : int
        Deepest allowed drafted node.

    Examples
    --------
    >>> Tree.sequoia([0.6, 0.3], budget=2, max_depth=2).parents  # a chain beats two siblings
    (0, 1)
    >>> Tree.sequoia([0.9, 0.05], budget=3, max_depth=1).parents  # depth 1: siblings only
    (0, 0)
    """
    a = _check_acceptance(acceptance)
    budget = _check_positive_int(budget, "budget", minimum=0)
    max_depth = _check_positive_int(max_depth, "max_depth", minimum=0)
    nodes = budget + 1
    G, choice = _tables(a, nodes, max_depth)
    top = G[max_depth, 1:]
    size = 1 + int(np.flatnonzero(top >= top.max() - 1e-12)[0])  # smallest optimal tree

    parents: list[int] = []

    def build(node: int, n: int, d: int) -> None:
        m, j = n - 1, 0
        while m > 0:
            s = int(choice[d, j, m])
            parents.append(node)
            child = len(parents)
            build(child, s, d - 1)
            m -= s
            j += 1

    build(0, size, max_depth)
    return Tree(tuple(parents))
