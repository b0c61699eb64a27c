"""The plan of one decoding step: which nodes are drafted, which are expanded, which go to the target.

A plan is the host-side skeleton of the drafted tree of one step; the tokens (and, for dynamic trees, the
parents) are filled in on the device while drafting. Node 0 is the root (the last emitted token); nodes are
numbered level by level, so every depth is a contiguous block and a parent precedes its children.

* An **expansion group** is a set of nodes of one depth that each draw ``k`` children with one node-level
  verifier's law. Its nodes are fixed (a static :class:`~mdsd.token_tree.Tree`) or chosen while drafting
  (``nodes=None``: the ``size`` most probable drafted nodes of a pool, EAGLE-2 style). Its children are fixed
  node indices. A group may also hold ``fixed`` deterministic children per node, placed before the random
  ones: tokens proposed by a training-free source (:mod:`mdsd.sources`), verified with the drawn ones by
  :func:`mdsd.tree.step.verify_nodes` (docs/mathematics.md §2, mixed nodes).
* **Retrieved chains** (``retrieval``, [width, depth] node indices) hang below the root: chain i is the i-th
  proposal of a source, one deterministic token per node. They follow the model's nodes in the numbering.
* ``forward`` nodes go to the target's one forward per step (all of them for a static tree; the root and
  the ``forward - 1`` most probable nodes for a budgeted dynamic tree). A drafted node the target does not
  see can still be accepted by its parent's verifier; the step then ends there, without a bonus token.

Losslessness never depends on the plan: every node's children are drawn by its verifier's law from
q(· | path) with a k fixed before they are drawn, and which nodes are expanded or forwarded depends only on
draft-side values (docs/mathematics.md §4).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from mdsd.token_tree import Tree
from mdsd.validation import check_k

__all__ = ["Group", "Plan", "DynamicTree", "static_plan", "truncated_plan", "with_retrieval"]


@dataclass(frozen=True)
class Group:
    """Nodes of one depth that each get ``fixed`` deterministic and ``k`` drawn children."""

    depth: int
    k: int  # children drawn with the node-level verifier's law (0: deterministic children only)
    size: int  # M, the number of expanded nodes
    children: np.ndarray  # [M, fixed + k] node indices of the children, the deterministic ones first
    nodes: np.ndarray | None = None  # [M] fixed expanded nodes; None: the M most probable nodes of ``pool``
    pool: tuple[int, int] | None = None  # node range [lo, hi) the dynamic choice picks from
    fixed: int = 0  # deterministic children per node (proposed by a source)
    first: int | None = field(init=False)  # the first node where the nodes are fixed and consecutive

    def __post_init__(self) -> None:  # a Python int: a traced step reads it without numpy
        run = self.nodes is not None and bool((np.diff(self.nodes) == 1).all())
        object.__setattr__(self, "first", int(self.nodes[0]) if run and self.nodes.size else None)


@dataclass(frozen=True)
class Plan:
    """The skeleton of one step's tree: depths, (static) parents, expansion groups, target budget."""

    depth: np.ndarray  # [N] depth of every node (root 0)
    groups: tuple[Group, ...]  # by depth
    parent: np.ndarray | None = None  # [N] fixed parents where known before drafting; -1 elsewhere
    forward: int | None = None  # model nodes sent to the target, root included; None: all
    retrieval: np.ndarray | None = None  # [width, depth] nodes of the retrieved chains (after the model's)
    num_nodes: int = field(init=False)
    max_depth: int = field(init=False)
    model_nodes: int = field(init=False)  # drafted by the model, root included (retrieved chains follow)
    _constants: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def root(cls) -> Plan:
        """The plan with no drafted node: a step emits one token from p (autoregressive decoding)."""
        return cls(depth=np.zeros(1, dtype=np.int64), groups=(), parent=np.full(1, -1, dtype=np.int64))

    def constant(self, array: np.ndarray, device: torch.device) -> torch.Tensor:
        """``array`` (one of this plan's arrays) as a tensor on ``device``, copied there once per plan."""
        key = (id(array), str(device))
        if key not in self._constants:
            self._constants[key] = torch.as_tensor(array, device=device)
        return self._constants[key]

    def __post_init__(self) -> None:  # sizes as Python ints: a traced step reads them without numpy
        retrieved = 0 if self.retrieval is None else int(self.retrieval.size)
        object.__setattr__(self, "num_nodes", int(self.depth.size))
        object.__setattr__(self, "max_depth", int(self.depth.max()))
        object.__setattr__(self, "model_nodes", self.num_nodes - retrieved)

    @property
    def num_forward(self) -> int:
        model = self.model_nodes if self.forward is None else self.forward
        return model + (0 if self.retrieval is None else self.retrieval.size)

    @cached_property
    def widths(self) -> tuple[int, ...]:
        """The distinct numbers of drawn children of expanded nodes (each needs a verifier)."""
        return tuple(sorted({g.k for g in self.groups} - {0}))

    @cached_property
    def static_ancestors(self) -> np.ndarray:
        """``[N, N]`` bool: node j is on the path root → i (i included) wherever the parents up to the root
        are fixed; a node whose parent is chosen while drafting (-1) has itself only until it is drafted.

        >>> with_retrieval(None, width=1, depth=2).static_ancestors.astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
        """
        n = self.num_nodes
        out = np.eye(n, dtype=bool)
        parent = self.parent if self.parent is not None else np.full(n, -1, dtype=np.int64)
        for i in range(1, n):  # a parent precedes its children
            if parent[i] >= 0:
                out[i] |= out[parent[i]]
        return out

    @cached_property
    def deterministic(self) -> Group | None:
        """The groups with deterministic children only (k = 0) joined into one, their nodes in group order
        and ``fixed`` their widest (narrower rows padded with node 0, which their validity masks leave
        out; :func:`mdsd.tree.step.verify_nodes` verifies them in one pass); None with fewer than two.

        >>> with_retrieval(None, width=1, depth=3).deterministic.nodes.tolist()
        [0, 1, 2]
        """
        fixed = [g for g in self.groups if g.k == 0]  # the root and retrieved chains: static nodes
        if len(fixed) < 2:
            return None
        nodes = np.concatenate([g.nodes for g in fixed])
        width = max(g.fixed for g in fixed)
        children = np.concatenate([np.pad(g.children, ((0, 0), (0, width - g.fixed))) for g in fixed])
        return Group(depth=-1, k=0, size=int(nodes.size), children=children, nodes=nodes, fixed=width)

    def groups_at(self, depth: int) -> list[Group]:
        return [g for g in self.groups if g.depth == depth]


def static_plan(tree: Tree) -> Plan:
    """The plan of a fixed tree: every internal node expanded with its own number of children.

    >>> plan = static_plan(Tree.kary([2, 1]))
    >>> [(g.depth, g.k, g.nodes.tolist()) for g in plan.groups]
    [(0, 2, [0]), (1, 1, [1, 2])]
    """
    groups = []
    for d in range(tree.max_depth):
        level = tree.levels[d]
        for k in sorted(set(tree.branching[level].tolist()) - {0}):
            nodes = level[tree.branching[level] == k]
            children = np.array([tree.children[u] for u in nodes], dtype=np.int64).reshape(nodes.size, k)
            groups.append(Group(depth=d, k=int(k), size=int(nodes.size), children=children, nodes=nodes))
    return Plan(depth=tree.depth.copy(), groups=tuple(groups), parent=tree.parent.copy())


def with_retrieval(plan: Plan | None, width: int, depth: int) -> Plan:
    """``plan`` (None: no model tree) plus ``width`` retrieved chains of ``depth`` deterministic tokens.

    The chains' first nodes become deterministic children of the root, before the root's drawn children.

    >>> plan = with_retrieval(static_plan(Tree.kary([2])), width=1, depth=2)
    >>> plan.num_nodes, plan.retrieval.tolist(), [(g.depth, g.fixed, g.k) for g in plan.groups]
    (5, [[3, 4]], [(0, 1, 2), (1, 1, 0)])
    """
    check_k(width, "width", minimum=1)
    check_k(depth, "depth", minimum=1)
    base = plan or Plan.root()
    n = base.num_nodes
    chains = n + np.arange(width * depth, dtype=np.int64).reshape(width, depth)
    parent = np.concatenate(
        [
            base.parent if base.parent is not None else np.full(n, -1, dtype=np.int64),
            np.concatenate([np.zeros((width, 1), np.int64), chains[:, :-1]], axis=1).ravel(),
        ]
    )
    node_depth = np.concatenate([base.depth, np.tile(np.arange(1, depth + 1, dtype=np.int64), width)])
    root = [g for g in base.groups if g.depth == 0]
    first = chains[:, 0][None, :]  # [1, width]
    if root:
        g = root[0]
        merged = Group(0, g.k, 1, np.concatenate([first, g.children], axis=1), g.nodes, g.pool, width)
    else:
        merged = Group(0, 0, 1, first, np.zeros(1, dtype=np.int64), None, width)
    below = [Group(d, 0, width, chains[:, d : d + 1], chains[:, d - 1], None, 1) for d in range(1, depth)]
    groups = sorted([merged, *[g for g in base.groups if g.depth > 0], *below], key=lambda g: g.depth)
    return Plan(node_depth, tuple(groups), parent, base.forward, chains)


def truncated_plan(tree: Tree | DynamicTree, depth: int) -> Plan:
    """The plan of ``tree`` cut at ``depth`` (what a depth policy makes the decoder draft).

    >>> truncated_plan(Tree.kary([2, 2]), 1).num_nodes, truncated_plan(DynamicTree(3, 2, 2), 2).max_depth
    (3, 2)
    """
    if isinstance(tree, Tree):
        return static_plan(tree.truncate(depth))
    if isinstance(tree, DynamicTree):
        return dataclasses.replace(tree, depth=depth).plan()
    raise TypeError(f"tree must be an mdsd.Tree or DynamicTree, got {type(tree).__name__}")


@dataclass(frozen=True)
class DynamicTree:
    """A tree grown every step from the draft's own probabilities (EAGLE-2 style), under budgets.

    Every expanded node draws ``k`` children with the verifier's law. At depth 0 the root is expanded; at
    depth d ≥ 1 the ``expand`` drafted nodes with the highest path probability Π q(token | path) are
    expanded (the draft forwards exactly those). After ``depth`` levels, the root and the ``budget`` most
    probable drafted nodes (ancestor-closed: a child is never more probable than its parent, ties go to the
    parent) are sent to the target; the other drafted nodes stay children their parents' verifiers may
    accept, ending the step.

    Parameters
    ----------
    depth : int
        Levels of drafted nodes (>= 1).
    k : int
        Children per expanded node.
    expand : int
        Nodes expanded per level below the root (at most the level's size).
    budget : int
        Drafted nodes in the target's forward (None: all of them).

    Examples
    --------
    >>> plan = DynamicTree(depth=3, k=2, expand=2, budget=5).plan()
    >>> plan.num_nodes, plan.num_forward, [g.size for g in plan.groups]
    (11, 6, [1, 2, 2])
    """

    depth: int
    k: int
    expand: int
    budget: int | None = None

    def __post_init__(self) -> None:
        check_k(self.depth, "depth", minimum=1)
        check_k(self.k, "k", minimum=1)
        check_k(self.expand, "expand", minimum=1)
        if self.budget is not None:
            check_k(self.budget, "budget", minimum=1)

    def plan(self) -> Plan:
        depth = [0]
        groups = []
        width = 1  # nodes at the current depth
        start = 1  # first node index of the next level
        for d in range(self.depth):
            size = 1 if d == 0 else min(self.expand, width)
            children = np.arange(start, start + size * self.k, dtype=np.int64).reshape(size, self.k)
            pool = (start - width, start)  # the nodes of depth d
            groups.append(Group(depth=d, k=self.k, size=size, children=children, pool=pool))
            depth += [d + 1] * (size * self.k)
            start += size * self.k
            width = size * self.k
        groups[0] = Group(depth=0, k=self.k, size=1, children=groups[0].children, nodes=np.zeros(1, np.int64))
        n = len(depth)
        forward = None if self.budget is None or self.budget + 1 >= n else self.budget + 1
        parent = np.full(n, -1, dtype=np.int64)
        parent[groups[0].children[0]] = 0
        return Plan(np.array(depth, dtype=np.int64), tuple(groups), parent, forward)
