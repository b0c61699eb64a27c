"""Exact tokens per step of the node-wise verifiers on a tree, against an independent enumerator of each
verifier, the verifiers' own exact acceptance, whole-decode laws, and Monte Carlo of the batched samplers."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from sequence_cases import FAMILIES, chi_square, one_step_error, random_pair

import mdsd
from mdsd.sequence import decode_law, law_distance, node_output_law, nodewise_step_law, target_law
from mdsd.sequence.nodewise import NODE_RULES
from mdsd.verifiers.kseq import kseq_rho

VERIFIER_TESTS = Path(__file__).resolve().parents[1] / "verifiers"
ALPHA = 1e-3  # chi-square tests: a correct sampler fails a given seed with probability 1e-3


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, VERIFIER_TESTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


enumeration, cases = _load("verifier_enumeration"), _load("verifier_cases")


def test_every_verifier_has_an_exact_output_law():
    # but the optimal verifier: its rule given the drafts is a layout or a flow (tests/verifiers checks
    # its law by enumeration), not a closed form to plug into a tree's step law
    assert set(NODE_RULES) == set(mdsd.VERIFIERS) - {"optimal"}
    with pytest.raises(ValueError, match="unknown verifier"):
        node_output_law("nope", np.ones(2) / 2, np.ones(2) / 2, (0,))


@pytest.mark.parametrize(("name", "k"), [(name, k) for name, k in cases.GRID if name in NODE_RULES])
def test_output_law_matches_the_independent_enumerator(name, k, monkeypatch):
    # K-SEQ's ρ: the enumerator finds it by Brent's method, the package (and its sampler) by bisection;
    # where the root is flat (p = q) they differ by up to (1e-16)^(1/k). Give both the package's ρ.
    monkeypatch.setattr(
        enumeration,
        "kseq_rho",
        lambda p, q, k: float(kseq_rho(torch.from_numpy(p), torch.from_numpy(q), k)[0]),
    )
    rng = np.random.default_rng(k)
    v = mdsd.verifier(name, k)
    for kind in range(22):
        n = int(rng.integers(max(k, 2), 6))
        p, q = cases.adversarial_pair(rng, n, kind)
        if np.count_nonzero(q) < v.law.min_support():
            continue
        for xs in list(v.law.joint(q))[:12]:
            law, ref = node_output_law(name, p, q, xs), enumeration.RULES[name](p, q, xs)
            assert math.fsum(law) == pytest.approx(1.0, abs=1e-12)
            # K-SEQ: ρ from the package's bisection (what its sampler uses) vs Brent's method; they differ by
            # ~1e-8 where the root is flat (p = q), and the output law by as much
            tol = 1e-7 if name == "kseq" else 1e-12
            if (
                abs(ref.sum() - 1.0) > 1e-12
            ):  # the enumerator drops an underflowed residual's mass; we draw p_i
                assert np.all(law >= ref - tol), (kind, xs)
            else:
                np.testing.assert_allclose(law, ref, atol=tol, err_msg=f"{kind} {xs}")


@pytest.mark.parametrize("name", [name for name in mdsd.VERIFIERS if name in NODE_RULES])
def test_depth_one_is_one_plus_the_verifiers_acceptance(name):
    k = 1 if name == "single" else 2
    rng = np.random.default_rng(3)
    for family in FAMILIES:
        target, draft = random_pair(rng, 4, 1, family, min_support=2)
        exact = mdsd.nodewise_tokens_per_step(target, draft, mdsd.Tree.kary([k]), name)
        assert exact == pytest.approx(1 + mdsd.verifier(name, k).acceptance(target(()), draft(())), abs=1e-12)


@pytest.mark.parametrize("name", ["single", "rrs", "rrsw", "kseq", "spechub", "greedy", "topk"])
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


@pytest.mark.parametrize("name", ["rrs", "rrsw", "kseq", "spechub"])
def test_monte_carlo_of_the_batched_verifiers_matches_the_exact_step(name):
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.5, 0.4, torch.Generator().manual_seed(4))
    tree = mdsd.Tree.kary([2, 1])
    exact = nodewise_step_law(target, draft, tree, name)
    samples = simulate_nodewise(target, draft, tree, name, 6000, seed=5)
    assert chi_square(samples, exact) > ALPHA
    mean, sd = np.mean([len(s) for s in samples]), np.std([len(s) for s in samples]) / math.sqrt(len(samples))
    assert abs(mean - sum(len(s) * w for s, w in exact.items())) < 4.5 * sd + 1e-12  # alpha ~ 7e-6
