"""Exact tokens per step of the node-wise verifiers on a tree, against the verifiers' own exact acceptance,
whole-decode laws, and Monte Carlo of the batched samplers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sequence_cases import FAMILIES, chi_square, one_step_error, random_pair

import mdsd
from mdsd.sequence import decode_law, law_distance, node_output_law, nodewise_step_law, target_law
from mdsd.verifiers import verifier_names

ALPHA = 1e-3  # chi-square tests: a correct sampler fails a given seed with probability 1e-3
NODE_VERIFIERS = verifier_names(paths=False)


def test_node_output_law_is_the_verifiers_and_refuses_unknown_names():
    p, q = np.array([0.2, 0.3, 0.5]), np.array([0.5, 0.25, 0.25])
    for name in NODE_VERIFIERS:
        k = 1 if name == "single" else 2
        for xs in mdsd.verifier(name, k).law.joint(q):
            law = node_output_law(name, p, q, xs)
            np.testing.assert_array_equal(law, mdsd.verifier(name, k).output_law(p, q, xs))
    with pytest.raises(ValueError, match="unknown verifier"):
        node_output_law("nope", np.ones(2) / 2, np.ones(2) / 2, (0,))


@pytest.mark.parametrize("name", NODE_VERIFIERS)
def test_depth_one_is_one_plus_the_verifiers_acceptance(name):
    k = 1 if name == "single" else 2
    rng = np.random.default_rng(3)
    for family in FAMILIES:
        target, draft = random_pair(rng, 4, 1, family, min_support=2)
        exact = mdsd.nodewise_tokens_per_step(target, draft, mdsd.Tree.kary([k]), name)
        assert exact == pytest.approx(1 + mdsd.verifier(name, k).acceptance(target(()), draft(())), abs=1e-12)


def test_optimal_at_every_node_of_a_tree_regression_keyerror():
    """Bug: nodewise_tokens_per_step(..., "optimal") raised KeyError at any node with >= 2 children (the
    optimal verifier had no output law there). Now it composes the two-step rule's law: the optimal
    verifier of each law is never below the other verifiers of that law on a binary tree."""
    target, draft = mdsd.toy_sequence_pair(3, 3, 0.5, 0.4, torch.Generator().manual_seed(2))
    tree = mdsd.Tree.kary([2, 2])
    names = ("rrs", "kseq", "rrsw", "optimal", "optimal:wor")
    steps = {name: mdsd.nodewise_tokens_per_step(target, draft, tree, name) for name in names}
    assert steps["optimal"] >= max(steps["rrs"], steps["kseq"]) - 1e-12
    assert steps["optimal:wor"] >= steps["rrsw"] - 1e-12
    assert steps["optimal:wor"] >= steps["optimal"] - 1e-12  # α*_wor >= α*_iid at every node


@pytest.mark.parametrize(
    "name", ["single", "rrs", "rrsw", "kseq", "spechub", "greedy", "topk", "optimal", "optimal:wor"]
)
def test_a_whole_node_wise_decode_has_the_targets_law(name):
    """Four tokens over three symbols, steps repeated until four are out: the law of the text is the
    target's to 1e-12; and one step already is (the emitted string, then the target's continuation)."""
    target, draft = mdsd.toy_sequence_pair(3, 5, 0.4, 0.5, torch.Generator().manual_seed(1))
    tree = mdsd.Tree.chain(2) if name == "single" else mdsd.Tree.kary([2, 1])
    law = decode_law(lambda u: nodewise_step_law(target, draft, tree, name, u), 4)
    assert law_distance(law, target_law(target, 4)) < 1e-12
    assert one_step_error(target, nodewise_step_law(target, draft, tree, name, (2,)), 2, (2,)) < 1e-12


def simulate_nodewise(target, draft, tree, name, rows, seed):
    """One node-wise decoding step, ``rows`` times, with the batched samplers of mdsd.verifiers (as
    mdsd.TreeDecoder runs them): the emitted strings."""
    gen = torch.Generator().manual_seed(seed)
    verifiers = {
        k: mdsd.verifier("single" if k == 1 else name, k) for k in set(tree.branching.tolist()) - {0}
    }
    tokens = np.zeros((rows, tree.num_nodes), dtype=np.int64)
    paths = [[()] * tree.num_nodes for _ in range(rows)]
    for u in np.flatnonzero(tree.branching > 0):  # breadth-first: a parent's token comes first
        q = torch.from_numpy(np.stack([draft(paths[b][u]) for b in range(rows)]))
        kids = tree.children[u]
        drafts = verifiers[len(kids)].draft(q, gen).numpy()  # [B, k]
        for b in range(rows):
            for c, x in zip(kids, drafts[b].tolist(), strict=True):
                tokens[b, c], paths[b][c] = x, (*paths[b][u], x)
    emitted = [[] for _ in range(rows)]
    cur, alive = np.zeros(rows, dtype=np.int64), np.ones(rows, dtype=bool)
    while alive.any():
        for u in np.unique(cur[alive]):
            r = np.flatnonzero(alive & (cur == u))
            p = torch.from_numpy(np.stack([target(paths[b][u]) for b in r]))
            kids = tree.children[u]
            if not kids:
                tok, idx = torch.multinomial(p, 1, generator=gen)[:, 0], torch.full((r.size,), -1)
            else:
                q = torch.from_numpy(np.stack([draft(paths[b][u]) for b in r]))
                tok, idx = verifiers[len(kids)].verify(p, q, torch.from_numpy(tokens[r][:, kids]), gen)
            for b, t, i in zip(r.tolist(), tok.tolist(), idx.tolist(), strict=True):
                emitted[b].append(t)
                if i >= 0:
                    cur[b] = kids[i]
                else:
                    alive[b] = False
    return [tuple(e) for e in emitted]


@pytest.mark.parametrize("name", ["rrs", "rrsw", "kseq", "spechub", "optimal"])
def test_monte_carlo_of_the_batched_verifiers_matches_the_exact_step(name):
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.5, 0.4, torch.Generator().manual_seed(4))
    tree = mdsd.Tree.kary([2, 1])
    exact = nodewise_step_law(target, draft, tree, name)
    samples = simulate_nodewise(target, draft, tree, name, 6000, seed=5)
    assert chi_square(samples, exact) > ALPHA
    mean, sd = np.mean([len(s) for s in samples]), np.std([len(s) for s in samples]) / math.sqrt(len(samples))
    assert abs(mean - sum(len(s) * w for s, w in exact.items())) < 4.5 * sd + 1e-12  # alpha ~ 7e-6
