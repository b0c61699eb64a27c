"""The plan of one decoding step: which nodes are drafted, which are expanded, which go to the target.

A plan is the host-side skeleton of the drafted tree of one step; the tokens (and, for dynamic trees, the
parents) are filled in on the device while drafting. Node 0 is the root (the last emitted token); nodes are
numbered level by level, so every depth is a contiguous block and a parent precedes its children.

* An **expansion group** is a set of nodes of one depth that each draw ``k`` children with one node-level
  verifier's law. Its nodes are fixed (a static :class:`~mdsd.tree.tree.Tree`) or chosen while drafting
  (``nodes=None``: the ``size`` nodes of that depth with the highest draft path probability, EAGLE-2 style).
  Its children are a fixed block of the next level.
* ``forward`` nodes go to the target's one forward per step (all of them for a static tree; the root and
  the ``forward - 1`` most probable nodes for a budgeted dynamic tree). A drafted node the target does not
  see can still be accepted by its parent's verifier; the step then ends there, without a bonus token.

Losslessness never depends on the plan: every node's children are drawn by its verifier's law from
q(· | path) with a k fixed before they are drawn, and which nodes are expanded or forwarded depends only on
draft-side values (../shared/MATH.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from mdsd.tree.tree import Tree, _check_positive_int

__all__ = ["Group", "Plan", "DynamicTree", "static_plan", "chain_plan"]


@dataclass(frozen=True)
class Group:
    """Nodes of one depth that each draw ``k`` children (one node-level verifier)."""

    depth: int
    k: int
    size: int  # M, the number of expanded nodes
    children: np.ndarray  # [M, k] node indices of the children, a block of level depth + 1
    nodes: np.ndarray | None = None  # [M] fixed expanded nodes; None: the M most probable nodes of the depth


@dataclass(frozen=True)
class Plan:
    """The skeleton of one step's tree: depths, (static) parents, expansion groups, target budget."""

    depth: np.ndarray  # [N] depth of every node (root 0)
    groups: tuple[Group, ...]  # by depth
    parent: np.ndarray | None = None  # [N] fixed parents (static trees); None: set while drafting
    forward: int | None = None  # nodes sent to the target, root included; None: all
    _constants: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def constant(self, array: np.ndarray, device: torch.device) -> torch.Tensor:
        """``array`` (one of this plan's arrays) as a tensor on ``device``, copied there once per plan."""
        key = (id(array), str(device))
        if key not in self._constants:
            self._constants[key] = torch.as_tensor(array, device=device)
        return self._constants[key]

    @property
    def num_nodes(self) -> int:
        return int(self.depth.size)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    @property
    def num_forward(self) -> int:
        return self.num_nodes if self.forward is None else self.forward

    @cached_property
    def widths(self) -> tuple[int, ...]:
        """The distinct numbers of children of expanded nodes."""
        return tuple(sorted({g.k for g in self.groups}))

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


def chain_plan(length: int) -> Plan:
    """A chain of ``length`` drafted tokens (single-draft speculative decoding of that length)."""
    return static_plan(Tree.chain(length))


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
        _check_positive_int(self.depth, "depth", minimum=1)
        _check_positive_int(self.k, "k", minimum=1)
        _check_positive_int(self.expand, "expand", minimum=1)
        if self.budget is not None:
            _check_positive_int(self.budget, "budget", minimum=1)

    def plan(self) -> Plan:
        depth = [0]
        groups = []
        width = 1  # nodes at the current depth
        start = 1  # first node index of the next level
        for d in range(self.depth):
            size = 1 if d == 0 else min(self.expand, width)
            children = np.arange(start, start + size * self.k, dtype=np.int64).reshape(size, self.k)
            groups.append(Group(depth=d, k=self.k, size=size, children=children))
            depth += [d + 1] * (size * self.k)
            start += size * self.k
            width = size * self.k
        groups[0] = Group(depth=0, k=self.k, size=1, children=groups[0].children, nodes=np.zeros(1, np.int64))
        n = len(depth)
        forward = None if self.budget is None or self.budget + 1 >= n else self.budget + 1
        return Plan(depth=np.array(depth, dtype=np.int64), groups=tuple(groups), forward=forward)
