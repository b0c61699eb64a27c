"""Tree construction, JSON round trip and expected tokens (exact formula and Monte Carlo)."""

import numpy as np
import pytest

from mdsd import Tree


def test_chain_and_kary_shapes():
    chain = Tree.chain(4)
    assert chain.size == 4 and chain.max_depth == 4 and chain.branching.tolist() == [1, 1, 1, 1, 0]
    binary = Tree.kary([2, 2, 2, 2])
    assert binary.size == 30 and binary.num_nodes == 31 and binary.max_depth == 4
    assert [len(level) for level in binary.levels] == [1, 2, 4, 8, 16]
    mixed = Tree.kary([3, 2, 1])
    assert mixed.size == 3 + 6 + 6
    assert mixed.child_index[mixed.children[0]].tolist() == [0, 1, 2]
    assert Tree.chain(0).size == 0 and Tree.kary([]).size == 0


def test_breadth_first_renumbering_keeps_structure():
    # depth-first numbering of root -> a -> (b, c), root -> d
    t = Tree((0, 1, 1, 0))
    assert t.parents == (0, 0, 1, 1)
    assert t.depth.tolist() == [0, 1, 1, 2, 2]
    assert t.children == [[1, 2], [3, 4], [], [], []]
    # every level is a contiguous block and parents precede children
    for level in t.levels:
        assert level.tolist() == list(range(level[0], level[-1] + 1))
    assert all(p < i for i, p in enumerate(t.parents, start=1))


def test_ancestors_match_parent_walk():
    t = Tree.kary([2, 3, 1])
    for i in range(t.num_nodes):
        path, node = set(), i
        while node >= 0:
            path.add(node)
            node = t.parent[node]
        assert set(np.flatnonzero(t.ancestors[i]).tolist()) == path


@pytest.mark.parametrize("tree", [Tree.chain(3), Tree.kary([2, 2]), Tree((0, 0, 1, 3, 3, 2))])
def test_json_round_trip(tree):
    again = Tree.from_json(tree.to_json())
    assert again == tree
    assert again.parents == tree.parents


@pytest.mark.parametrize(
    "bad, error",
    [((1,), ValueError), ((0, 2), ValueError), ((-1,), ValueError), ((0.5,), ValueError)],
)
def test_bad_parents(bad, error):
    with pytest.raises(error, match="parents"):
        Tree(bad)


def test_bad_json_and_branching():
    with pytest.raises(ValueError, match="malformed"):
        Tree.from_json("{")
    with pytest.raises(ValueError, match="parents"):
        Tree.from_json('{"nodes": []}')
    with pytest.raises(ValueError, match="branching"):
        Tree.kary([2, 0])
    with pytest.raises(TypeError, match="branching"):
        Tree.kary("22")
    with pytest.raises(ValueError, match="depth"):
        Tree.chain(-1)


def _expected_by_enumeration(tree, a):
    """Sum over every possible accepted path of (its length + 1) times its probability."""

    def walk(node):  # expected tokens from `node` on: 1 (residual or bonus) or accept child j
        kids = tree.children[node]
        stop = 1.0 - sum(a[tree.child_index[c]] for c in kids)
        return stop * 1.0 + sum(a[tree.child_index[c]] * (1.0 + walk(c)) for c in kids)

    return walk(0)


@pytest.mark.parametrize("tree", [Tree.chain(4), Tree.kary([2, 2, 1]), Tree((0, 0, 0, 1, 1, 4, 2))])
def test_expected_tokens_equals_path_enumeration(tree):
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.dirichlet(np.ones(4))[:3]
        assert tree.expected_tokens(a) == pytest.approx(_expected_by_enumeration(tree, a), abs=1e-12)


def test_expected_tokens_monte_carlo():
    """Simulate the acceptance model: at each node child j is accepted w.p. a_j (else stop)."""
    tree, a = Tree.kary([2, 2, 2]), np.array([0.5, 0.3])
    rng = np.random.default_rng(1)
    n, total = 40_000, 0
    for _ in range(n):
        node, tokens = 0, 1
        while tree.children[node]:
            j = rng.choice(3, p=[*a, 1 - a.sum()])
            if j == 2:
                break
            node, tokens = tree.children[node][j], tokens + 1
        total += tokens
    exact = tree.expected_tokens(a)  # 1 + .8 + .64 + .512
    assert exact == pytest.approx(1 + 0.8 + 0.8**2 + 0.8**3)
    # standard error of the mean is < 1.2 / sqrt(n) = 0.006; 5 sigma
    assert abs(total / n - exact) < 0.03


def test_expected_tokens_bad_acceptance():
    tree = Tree.kary([3])
    with pytest.raises(ValueError, match="3 children"):
        tree.expected_tokens([0.5, 0.2])
    with pytest.raises(ValueError, match="sum to <= 1"):
        tree.expected_tokens([0.6, 0.5, 0.1])
    with pytest.raises(ValueError, match="finite"):
        tree.expected_tokens([float("nan"), 0.1, 0.1])
