"""Token trees for multi-draft speculative decoding (docs/mathematics.md §4).

A tree has a root (node 0: the last accepted token, not drafted) and ``size`` drafted nodes
``1..size``. A node's children are the k drafts sampled from q(· | path to the node). Nodes are kept
in breadth-first order (by depth, then by parent, then by sibling position), so every level is a
contiguous block and a parent always precedes its children.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from mdsd.sequoia import sequoia_parents
from mdsd.validation import check_acceptance_vector, check_k

__all__ = ["Tree"]


@dataclass(frozen=True)
class Tree:
    """A token tree given by the parent of every drafted node.

    Parameters
    ----------
    parents : sequence of int
        ``parents[i - 1]`` is the parent of drafted node ``i`` (``i = 1..size``); 0 is the root.
        Each parent must come earlier (``parents[i - 1] < i``). Nodes are renumbered breadth-first.

    Examples
    --------
    >>> t = Tree.kary([2, 2])
    >>> t.size, t.max_depth, t.children[0]
    (6, 2, [1, 2])
    >>> Tree.chain(3).parents
    (0, 1, 2)
    """

    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        raw = tuple(self.parents)
        for i, p in enumerate(raw, start=1):
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p < i:
                raise ValueError(f"parents[{i - 1}] must be an integer node index in [0, {i - 1}], got {p!r}")
        object.__setattr__(self, "parents", _breadth_first(tuple(int(p) for p in raw)))

    # ---- constructors -------------------------------------------------------------------------

    @classmethod
    def chain(cls, depth: int) -> Tree:
        """A single path of ``depth`` drafted tokens (classic single-draft speculative decoding)."""
        check_k(depth, "depth", minimum=0)
        return cls(tuple(range(depth)))

    @classmethod
    def kary(cls, branching: Sequence[int]) -> Tree:
        """The full tree with ``branching[d]`` children under every node of depth ``d``.

        ``[2, 2, 2, 2]`` is the full binary tree of 2 + 4 + 8 + 16 = 30 drafted nodes.
        """
        if isinstance(branching, (str, bytes)) or not isinstance(branching, Sequence):
            raise TypeError(f"branching must be a list of integers, got {branching!r}")
        parents: list[int] = []
        level = [0]
        for d, b in enumerate(branching):
            check_k(b, f"branching[{d}]", minimum=1)
            nxt = []
            for node in level:
                for _ in range(b):
                    parents.append(node)
                    nxt.append(len(parents))
            level = nxt
        return cls(tuple(parents))

    @classmethod
    def sequoia(cls, acceptance: Sequence[float], budget: int, max_depth: int) -> Tree:
        """Sequoia's tree: the most expected tokens for at most ``budget`` drafted nodes.

        See :func:`mdsd.sequoia.sequoia_parents`.
        """
        return cls(sequoia_parents(acceptance, budget, max_depth))

    @classmethod
    def from_json(cls, text: str) -> Tree:
        """Read a tree written by :meth:`to_json` (``{"parents": [...]}``)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"tree JSON is malformed: {err}") from None
        if not isinstance(data, dict) or not isinstance(data.get("parents"), list):
            raise ValueError('tree JSON must be an object {"parents": [parent of node 1, ...]}')
        return cls(tuple(data["parents"]))

    def truncate(self, depth: int) -> Tree:
        """The tree of the nodes at depth <= ``depth`` (the first levels).

        >>> Tree.kary([2, 2]).truncate(1).parents
        (0, 0)
        """
        check_k(depth, "depth", minimum=0)
        return Tree(self.parents[: int(np.count_nonzero(self.depth[1:] <= depth))])

    def to_json(self) -> str:
        """``{"parents": [...]}``, plus the per-node branching for readers' convenience."""
        return json.dumps({"parents": list(self.parents), "branching": self.branching.tolist()})

    # ---- structure ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of drafted nodes (the root excluded)."""
        return len(self.parents)

    @property
    def num_nodes(self) -> int:
        """Number of nodes including the root (= tokens in the target's tree forward)."""
        return len(self.parents) + 1

    @cached_property
    def parent(self) -> np.ndarray:
        """Parent of every node [N]; -1 for the root."""
        return np.array((-1, *self.parents), dtype=np.int64)

    @cached_property
    def depth(self) -> np.ndarray:
        """Depth of every node [N]; the root has depth 0."""
        depth = np.zeros(self.num_nodes, dtype=np.int64)
        for i, p in enumerate(self.parents, start=1):
            depth[i] = depth[p] + 1
        return depth

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    @cached_property
    def children(self) -> list[list[int]]:
        """Children of every node, in sibling order."""
        kids: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for i, p in enumerate(self.parents, start=1):
            kids[p].append(i)
        return kids

    @cached_property
    def child_index(self) -> np.ndarray:
        """Sibling position of every node [N] (0 for a first child); -1 for the root."""
        index = np.full(self.num_nodes, -1, dtype=np.int64)
        for kids in self.children:
            index[kids] = np.arange(len(kids))
        return index

    @cached_property
    def branching(self) -> np.ndarray:
        """Number of children of every node [N]."""
        return np.array([len(k) for k in self.children], dtype=np.int64)

    @cached_property
    def levels(self) -> list[np.ndarray]:
        """Node indices of each depth 0..max_depth (contiguous blocks, breadth-first)."""
        return [np.flatnonzero(self.depth == d) for d in range(self.max_depth + 1)]

    @cached_property
    def ancestors(self) -> np.ndarray:
        """``ancestors[i, j]`` is True iff node j is on the path root → i (i itself included) [N, N]."""
        anc = np.zeros((self.num_nodes, self.num_nodes), dtype=bool)
        anc[0, 0] = True
        for i, p in enumerate(self.parents, start=1):
            anc[i] = anc[p]
            anc[i, i] = True
        return anc

    # ---- expected tokens ----------------------------------------------------------------------

    def expected_tokens(self, acceptance: Sequence[float]) -> float:
        r"""Expected tokens per step under the per-position acceptance model (Sequoia).

        ``acceptance[j]`` is the probability that a node's ``(j+1)``-th child is the one accepted
        (mutually exclusive events, so the entries sum to at most 1). A node is accepted iff every
        edge on its path is, and each step emits the accepted nodes plus one more token:

        .. math::
            F(\mathcal{T}) = 1 + \sum_{v \neq \text{root}} \prod_{e \in \text{path}(v)} a_{\text{index}(e)}

        Chen et al. (2024), *Sequoia*, §3.

        >>> Tree.kary([2]).expected_tokens([0.5, 0.25])
        1.75
        """
        a = check_acceptance_vector(acceptance)
        widest = int(self.branching.max())
        if widest > a.size:
            raise ValueError(f"acceptance has {a.size} entries but a node of the tree has {widest} children")
        reach = np.ones(self.num_nodes)
        for i, p in enumerate(self.parents, start=1):
            reach[i] = reach[p] * a[self.child_index[i]]
        return float(reach.sum())


def _breadth_first(parents: tuple[int, ...]) -> tuple[int, ...]:
    """Renumber nodes breadth-first, keeping sibling order; return the new parents tuple."""
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents, start=1):
        kids[p].append(i)
    order, new_index, new_parents = [0], {0: 0}, []
    for node in order:  # order grows while we walk it: a queue
        for child in kids[node]:
            new_index[child] = len(order)
            order.append(child)
            new_parents.append(new_index[node])
    return tuple(new_parents)
