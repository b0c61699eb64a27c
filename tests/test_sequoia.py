"""Sequoia's dynamic programme against brute-force enumeration of every tree."""

import itertools

import numpy as np
import pytest

from mdsd import Tree
from mdsd.sequoia import sequoia_value


def _plane_trees(nodes, depth, width):
    """Every ordered tree with exactly ``nodes`` nodes (root included), as parents-lists."""

    def forests(n, d):  # ordered lists of at most `width` subtrees with n nodes in all, depth <= d
        if n == 0:
            yield []
            return
        if d < 0:
            return
        for parts in _compositions(n, width):
            for subs in itertools.product(*[list(subtrees(s, d)) for s in parts]):
                yield list(subs)

    def subtrees(n, d):  # nested tuples: a subtree is the tuple of its children
        for f in forests(n - 1, d - 1):
            yield tuple(f)

    def flatten(node, children, parents):
        for c in children:
            parents.append(node)
            flatten(len(parents), c, parents)
        return parents

    for t in subtrees(nodes, depth):
        yield Tree(tuple(flatten(0, t, [])))


def _compositions(n, most):
    """Ordered tuples of positive integers summing to n, of length at most `most`."""
    for length in range(1, min(n, most) + 1):
        for cuts in itertools.combinations(range(1, n), length - 1):
            bounds = (0, *cuts, n)
            yield tuple(bounds[i + 1] - bounds[i] for i in range(length))


def _brute_force(a, budget, max_depth):
    best = 1.0
    for nodes in range(2, budget + 2):
        for tree in _plane_trees(nodes, max_depth, len(a)):
            best = max(best, tree.expected_tokens(a))
    return best


def test_enumeration_counts_catalan():
    # unrestricted ordered trees with n nodes: Catalan(n - 1)
    assert [sum(1 for _ in _plane_trees(n, 10, 10)) for n in range(1, 7)] == [1, 1, 2, 5, 14, 42]


@pytest.mark.parametrize("seed", range(8))
def test_sequoia_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    width = int(rng.integers(1, 4))
    a = np.sort(rng.dirichlet(np.ones(width + 1))[:width])[::-1]
    if seed % 3 == 0:  # unsorted and with a zero entry: the programme must not assume monotone a
        a = rng.permutation(a)
        a[-1] = 0.0
    budget, max_depth = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    tree = Tree.sequoia(a, budget, max_depth)
    assert tree.size <= budget and tree.max_depth <= max_depth
    assert int(tree.branching.max()) <= width
    assert tree.expected_tokens(a) == pytest.approx(_brute_force(a, budget, max_depth), abs=1e-12)
    assert sequoia_value(a, budget, max_depth) == pytest.approx(tree.expected_tokens(a))


def test_sequoia_limits():
    assert Tree.sequoia([0.8], budget=5, max_depth=3) == Tree.chain(3)  # width 1, depth 3
    assert Tree.sequoia([0.5, 0.3], budget=0, max_depth=4).size == 0
    big = Tree.sequoia([0.5, 0.2, 0.1, 0.05], budget=60, max_depth=6)
    assert big.size <= 60 and big.max_depth <= 6
    # more budget never hurts
    assert big.expected_tokens([0.5, 0.2, 0.1, 0.05]) >= Tree.sequoia(
        [0.5, 0.2, 0.1, 0.05], budget=30, max_depth=6
    ).expected_tokens([0.5, 0.2, 0.1, 0.05])
    with pytest.raises(ValueError, match="budget"):
        Tree.sequoia([0.5], budget=-1, max_depth=2)
    with pytest.raises(ValueError, match="acceptance"):
        Tree.sequoia([0.7, 0.7], budget=3, max_depth=2)
