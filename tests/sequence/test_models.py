"""Tiny sequence models, drafted-tree laws and whole-decode laws: the plumbing every exact routine uses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import mdsd
from mdsd.sequence import SequenceModel, decode_law, enumerate_drafts, law_distance, node_laws, target_law
from mdsd.sequence.models import prefixes


def test_toy_sequence_pair_follows_the_toy_pair_recipe_at_every_prefix():
    gen = torch.Generator().manual_seed(7)
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.4, 0.6, gen)
    keys = list(prefixes(3, 2))
    assert len(keys) == 1 + 3 + 9 and target.depth == draft.depth == 2
    gen = torch.Generator().manual_seed(7)
    a = torch.rand(len(keys), 3, generator=gen, dtype=torch.float64)
    b = torch.rand(len(keys), 3, generator=gen, dtype=torch.float64)
    for i, u in enumerate(keys):
        np.testing.assert_allclose(target(u), torch.softmax(a[i] / 0.4, -1).numpy(), rtol=1e-15)
        np.testing.assert_allclose(
            draft(u), torch.softmax((0.6 * a[i] + 0.4 * b[i]) / 0.4, -1).numpy(), rtol=1e-15
        )
    with pytest.raises(ValueError, match="prefix"):
        target((0, 1, 2))


def test_context_free_pair_has_one_law_at_every_depth():
    target, draft = mdsd.toy_sequence_pair(
        4, 1, 0.5, 0.2, torch.Generator().manual_seed(0), context_free=True
    )
    assert target.is_context_free and target.depth is None
    assert np.array_equal(target(()), target((3, 1, 2, 0, 0))) and np.array_equal(draft(()), draft((1,) * 9))
    assert target.prob((1, 2)) == pytest.approx(target(())[1] * target(())[2], rel=1e-15)


def test_prob_multiplies_the_conditionals_and_sums_to_one():
    rng = np.random.default_rng(0)
    table = {u: rng.dirichlet(np.ones(3)) for u in prefixes(3, 2)}
    m = SequenceModel.from_table(table)
    assert math.fsum(m.prob(y) for y in itertools.product(range(3), repeat=3)) == pytest.approx(
        1.0, abs=1e-14
    )
    assert m.prob((2, 0), context=(1,)) == pytest.approx(table[(1,)][2] * table[(1, 2)][0], rel=1e-15)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({(): [0.5, 0.5], (0,): [1.0, 0.0]}, "missing"),
        ({(): [0.5, 0.5], (0,): [1.0, 0.0, 0.0], (1,): [1.0, 0.0]}, "same size"),
        ({(): [0.5, 0.6]}, "sum to 1"),
        ({(): [1.5, -0.5]}, "negative"),
        ({(): [np.nan, 1.0]}, "NaN"),
        ({(): [0.5, 0.5], (0,): [1.0, 0.0], (2,): [1.0, 0.0], (1,): [0.5, 0.5]}, "outside"),
        ({}, "non-empty"),
    ],
)
def test_from_table_rejects_bad_tables(table, match):
    with pytest.raises(ValueError, match=match):
        SequenceModel.from_table(table)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"n": 0}, ValueError),
        ({"depth": -1}, ValueError),
        ({"temperature": 0.0}, ValueError),
        ({"temperature": float("nan")}, ValueError),
        ({"similarity": 1.5}, ValueError),
        ({"generator": 3}, TypeError),
    ],
)
def test_toy_sequence_pair_rejects_bad_arguments(kwargs, error):
    args = {"n": 3, "depth": 2, "temperature": 0.5, "similarity": 0.5, "generator": None} | kwargs
    with pytest.raises(error):
        mdsd.toy_sequence_pair(**args)


@pytest.mark.parametrize("law", ["iid", "without_replacement", "hub", "greedy", "topk"])
def test_enumerated_tree_law_is_the_product_of_the_node_laws(law):
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.5, 0.3, torch.Generator().manual_seed(1))
    tree = mdsd.Tree.kary([2, 1])
    laws = node_laws(tree, law)
    trees = enumerate_drafts(draft, tree, laws, context=(2,))
    assert math.fsum(w for _, w in trees) == pytest.approx(1.0, abs=1e-12)
    for tokens, weight in trees[
        :20
    ]:  # D(T) = Q_root(x_1, x_2) · q(x_3 | x_1) · q(x_4 | x_2), after context (2,)
        root = laws[0].joint(draft((2,)))[tokens[:2]]
        below = draft((2, tokens[0]))[tokens[2]] * draft((2, tokens[1]))[tokens[3]]
        assert weight == pytest.approx(root * below, rel=1e-12)


def test_nodes_sharing_a_path_keep_their_own_law():
    """Regression: i.i.d. siblings drafting the same token share a path; the drafter cached the joint law
    per path, so a one-child node reused its two-child sibling's law (zip() length error)."""
    draft = SequenceModel.context_free([0.5, 0.5])
    tree = mdsd.Tree((0, 0, 1, 1, 2))  # node 1 has two children, node 2 one
    trees = enumerate_drafts(draft, tree, node_laws(tree, "iid"))
    assert len(trees) == 2**5 and math.fsum(w for _, w in trees) == pytest.approx(1.0)


def test_node_laws_resolve_names_laws_and_callables():
    tree = mdsd.Tree.kary([3, 1])
    assert node_laws(tree, "wor")[0] == mdsd.WithoutReplacement(3)
    assert node_laws(tree, mdsd.IID(3))[1] == mdsd.IID(1)
    assert node_laws(tree, lambda k: mdsd.Greedy(k))[0] == mdsd.Greedy(3)
    with pytest.raises(ValueError, match="draws 2 children"):
        node_laws(tree, mdsd.IID(2))
    with pytest.raises(ValueError, match="hub"):
        node_laws(tree, "hub")
    with pytest.raises(TypeError):
        node_laws(tree, 3)


def test_enumeration_refuses_too_many_trees():
    draft = SequenceModel.context_free(np.full(6, 1 / 6))
    tree = mdsd.Tree.kary([2, 2, 2])
    with pytest.raises(ValueError, match="more than 1,000 drafted trees"):
        enumerate_drafts(draft, tree, node_laws(tree, "iid"), max_trees=1000)


def test_decode_law_of_a_one_token_step_is_the_target_law():
    target, _ = mdsd.toy_sequence_pair(3, 3, 0.5, 0.5, torch.Generator().manual_seed(2))
    step = lambda u: {(y,): float(target(u)[y]) for y in range(3)}  # noqa: E731 (plain sampling)
    law = decode_law(step, 4 - 1)
    assert law_distance(law, target_law(target, 3)) < 1e-15
    assert math.fsum(law.values()) == pytest.approx(1.0, abs=1e-14)
    assert law_distance({(0,): 0.5}, {(1,): 0.5}) == 0.5
