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

from mdsd.validation import check_acceptance_vector, check_k

__all__ = ["sequoia_parents", "sequoia_value"]


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
    """Expected tokens per step of the tree :func:`sequoia_parents` builds (the programme's optimum).

    >>> sequoia_value([0.5, 0.25], budget=1, max_depth=3)
    1.5
    """
    a, nodes, max_depth = _checked(acceptance, budget, max_depth)
    return float(_tables(a, nodes, max_depth)[0][max_depth, 1:].max())


def _checked(acceptance, budget, max_depth) -> tuple[np.ndarray, int, int]:
    a = check_acceptance_vector(acceptance)
    return a, check_k(budget, "budget", minimum=0) + 1, check_k(max_depth, "max_depth", minimum=0)


def sequoia_parents(acceptance: Sequence[float], budget: int, max_depth: int) -> tuple[int, ...]:
    """The parents (as :class:`mdsd.Tree` takes them) of the tree of at most ``budget`` drafted nodes and
    depth at most ``max_depth`` maximising F; ``Tree.sequoia`` builds that tree.

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
    >>> sequoia_parents([0.6, 0.3], budget=2, max_depth=2)  # a chain beats two siblings
    (0, 1)
    >>> sequoia_parents([0.9, 0.05], budget=3, max_depth=1)  # depth 1: siblings only
    (0, 0)
    """
    a, nodes, max_depth = _checked(acceptance, budget, max_depth)
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
    return tuple(parents)
