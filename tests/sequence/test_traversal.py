"""Traversal Verification: batched sampler against its float64 reference, exact whole-decode laws against
the target's, its special cases (block verification on a chain, RRSw / RRS one level deep), seeded
chi-square tests and deliberately broken variants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sequence_cases import FAMILIES, chi_square, draft_batch, emitted_strings, one_step_error, random_pair

import mdsd
from mdsd.sequence import (
    TRAVERSAL_LAWS,
    block_step_law,
    decode_law,
    law_distance,
    node_laws,
    nodewise_step_law,
    reference_traversal_verify,
    target_law,
    traversal_step_law,
    traversal_verify,
    traversal_verify_with,
)
from mdsd.sequence import traversal as traversal_module
from mdsd.verifiers import draw_uniforms

ALPHA = 1e-3  # chi-square: a correct sampler fails a given seed with probability 1e-3
TREES = [
    mdsd.Tree.kary([2, 2]),
    mdsd.Tree((0, 0, 1)),
    mdsd.Tree.kary([3]),
    mdsd.Tree.chain(3),
    mdsd.Tree((0, 0, 1, 1, 2)),
]


@pytest.mark.parametrize("law", TRAVERSAL_LAWS)
@pytest.mark.parametrize("tree", TREES, ids=lambda t: str(t.parents))
def test_batched_sampler_matches_the_float64_reference(tree, law):
    rng = np.random.default_rng(tree.size)
    internal = np.flatnonzero(tree.branching > 0)
    for family in FAMILIES:
        target, draft = random_pair(rng, 4, tree.max_depth, family, min_support=3)
        gen = torch.Generator().manual_seed(1)
        p, q, tokens = draft_batch(target, draft, tree, node_laws(tree, law), 100, gen)
        u = draw_uniforms((100,), tree.num_nodes, gen)
        accepted, nxt = traversal_verify_with(p, q, tree, tokens, u, law=law)
        for b in range(100):
            ref = reference_traversal_verify(
                p[b], q[b], tree, tokens[b].tolist(), u.accept[b].numpy(), float(u.residual[b]), law
            )
            assert (int(accepted[b]), int(nxt[b])) == ref, (family, b)
        assert internal.size == q.shape[1]


@pytest.mark.parametrize("law", TRAVERSAL_LAWS)
@pytest.mark.parametrize("tree", [mdsd.Tree.kary([2, 1]), mdsd.Tree((0, 0, 1))], ids=lambda t: str(t.parents))
def test_a_whole_traversal_decode_has_the_targets_law(tree, law):
    """Four tokens over three symbols, steps repeated until four are out: the target's law to 1e-12."""
    rng = np.random.default_rng(2)
    for family in ("toy_cold", "equal", "extreme"):
        target, draft = random_pair(rng, 3, 5, family, min_support=2)
        step = lambda u, target=target, draft=draft: traversal_step_law(target, draft, tree, law, u)  # noqa: E731
        assert law_distance(decode_law(step, 4), target_law(target, 4)) < 1e-12, family


@pytest.mark.parametrize("law", TRAVERSAL_LAWS)
def test_one_step_on_a_binary_tree_is_lossless(law):
    rng = np.random.default_rng(3)
    for family in FAMILIES:
        target, draft = random_pair(rng, 3, 2, family, min_support=2)
        assert (
            one_step_error(target, traversal_step_law(target, draft, mdsd.Tree.kary([2, 2]), law), 2) < 1e-12
        )


@pytest.mark.parametrize("law", TRAVERSAL_LAWS)
def test_batched_exact_tokens_per_step_equals_the_mean_of_the_exact_law(law):
    rng = np.random.default_rng(6)
    for tree, family in zip(TREES, FAMILIES, strict=False):
        target, draft = random_pair(rng, 3, tree.max_depth, family, min_support=3)
        fast = mdsd.traversal_tokens_per_step(target, draft, tree, law)
        slow = sum(len(s) * w for s, w in traversal_step_law(target, draft, tree, law).items())
        assert fast == pytest.approx(slow, abs=1e-12), family


def test_on_a_chain_it_is_block_verification():
    rng = np.random.default_rng(4)
    for family in FAMILIES:
        target, draft = random_pair(rng, 3, 3, family)
        for law in TRAVERSAL_LAWS:
            chain = traversal_step_law(target, draft, mdsd.Tree.chain(3), law)
            assert law_distance(chain, block_step_law(target, draft, 3)) < 1e-12, family


@pytest.mark.parametrize(("law", "name"), [("without_replacement", "rrsw"), ("iid", "rrs")])
def test_one_level_deep_it_is_recursive_rejection_sampling(law, name):
    rng = np.random.default_rng(5)
    for family in FAMILIES:
        target, draft = random_pair(rng, 4, 1, family, min_support=3)
        for k in (2, 3):
            tree = mdsd.Tree.kary([k])
            assert (
                law_distance(
                    traversal_step_law(target, draft, tree, law), nodewise_step_law(target, draft, tree, name)
                )
                < 1e-12
            )


def _parent_weight_kept(tree, p_rows, q_rows, tokens, without_replacement):
    """Traversal Verification that never lowers a parent's weight after deleting a child (w_β kept)."""
    tests = CORE(tree, p_rows, q_rows, tokens, without_replacement)
    weight = {0: 1.0}
    for node in range(1, tree.num_nodes):
        b, x = int(tree.parent[node]), tokens[node]
        weight[node] = min(1.0, weight[b] * p_rows[b][x] / q_rows[b][x])
    return [(node, weight[node] if tree.branching[node] else w, last) for node, w, last in tests]


CORE = traversal_module.traversal_tests


def test_the_enumeration_catches_a_broken_traversal(monkeypatch):
    target, draft = mdsd.toy_sequence_pair(3, 5, 0.3, 0.6, torch.Generator().manual_seed(8))
    tree = mdsd.Tree.kary([2, 1])
    monkeypatch.setattr(traversal_module, "traversal_tests", _parent_weight_kept)
    law = decode_law(lambda u: traversal_step_law(target, draft, tree, "without_replacement", u), 4)
    assert law_distance(law, target_law(target, 4)) > 1e-3


def test_chi_square_of_the_batched_sampler_and_of_a_broken_one():
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.3, 0.3, torch.Generator().manual_seed(9))
    tree = mdsd.Tree.kary([2, 1])
    gen = torch.Generator().manual_seed(10)
    p, q, tokens = draft_batch(target, draft, tree, node_laws(tree, "without_replacement"), 8000, gen)
    exact = traversal_step_law(target, draft, tree)
    accepted, nxt = traversal_verify(p, q, tree, tokens, gen)
    assert chi_square(emitted_strings(tree, tokens, accepted, nxt), exact) > ALPHA
    # broken: after deleting a node's children, the token emitted there comes from p, not the residual
    rows = torch.arange(8000)
    plain = torch.multinomial(p[rows, accepted], 1, generator=gen)[:, 0]
    broken = torch.where(torch.as_tensor(tree.branching)[accepted] > 0, plain, nxt)
    assert chi_square(emitted_strings(tree, tokens, accepted, broken), exact) < ALPHA


def test_rejects_bad_inputs():
    tree = mdsd.Tree.kary([2])
    p = torch.full((2, 3, 4), 0.25, dtype=torch.float64)
    q = torch.full((2, 1, 4), 0.25, dtype=torch.float64)
    tokens = torch.tensor([[0, 1, 2], [0, 3, 2]])
    assert traversal_verify(p, q, tree, tokens, torch.Generator().manual_seed(0))[0].shape == (2,)
    assert traversal_verify(p, q, tree.parents, tokens, torch.Generator().manual_seed(0))[0].shape == (2,)
    with pytest.raises(ValueError, match="distinct"):
        traversal_verify(p, q, tree, torch.tensor([[0, 1, 1], [0, 3, 2]]))
    traversal_verify(
        p, q, tree, torch.tensor([[0, 1, 1], [0, 3, 2]]), law="iid"
    )  # duplicates are i.i.d. draws
    with pytest.raises(ValueError, match="law must be one of"):
        traversal_verify(p, q, tree, tokens, law="hub")
    with pytest.raises(ValueError, match="p must have shape"):
        traversal_verify(p[:, :2], q, tree, tokens)
    with pytest.raises(ValueError, match="q must have shape"):
        traversal_verify(p, q.expand(2, 2, 4), tree, tokens)
    with pytest.raises(ValueError, match="node_tokens must have shape"):
        traversal_verify(p, q, tree, tokens[:, :2])
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        traversal_verify(p, q, tree, tokens + 3)
    with pytest.raises(TypeError, match="integer"):
        traversal_verify(p, q, tree, tokens.float())
    bad = q.clone()
    bad[:, 0] = torch.tensor([0.5, 0.5, 0.0, 0.0])
    with pytest.raises(ValueError, match="q = 0"):
        traversal_verify(p, bad, tree, tokens)
    with pytest.raises(ValueError, match="NaN"):
        traversal_verify(p * torch.nan, q, tree, tokens)
