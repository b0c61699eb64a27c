"""Block verification: the batched sampler against its float64 reference, the exact law of a whole decode
against the target's, seeded chi-square tests, deliberately broken variants, and Sun et al.'s optimality."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sequence_cases import FAMILIES, chi_square, draft_batch, emitted_strings, one_step_error, random_pair

import mdsd
from mdsd.sequence import block as block_module
from mdsd.sequence import (
    block_step_law,
    block_verify,
    block_verify_with,
    decode_law,
    law_distance,
    node_laws,
    nodewise_step_law,
    reference_block_verify,
    solve_tree_otm,
    target_law,
)
from mdsd.verifiers import draw_uniforms

ALPHA = 1e-3  # chi-square: a correct sampler fails a given seed with probability 1e-3


def chains(target, draft, depth, rows, seed):
    tree = mdsd.Tree.chain(depth)
    p, q, tokens = draft_batch(
        target, draft, tree, node_laws(tree, "iid"), rows, torch.Generator().manual_seed(seed)
    )
    return tree, p, q, tokens[:, 1:]


@pytest.mark.parametrize(("n", "depth"), [(2, 1), (3, 2), (5, 3)])
def test_batched_sampler_matches_the_float64_reference(n, depth):
    rng = np.random.default_rng(n)
    for family in FAMILIES:
        target, draft = random_pair(rng, n, depth, family)
        _, p, q, tokens = chains(target, draft, depth, 200, seed=n)
        u = draw_uniforms((200,), depth, torch.Generator().manual_seed(1))
        accepted, nxt = block_verify_with(p, q, tokens, u)
        for b in range(200):
            ref = reference_block_verify(
                p[b], q[b], tokens[b].tolist(), u.accept[b].numpy(), float(u.residual[b])
            )
            assert (int(accepted[b]), int(nxt[b])) == ref, (family, b)
        assert bool((p[torch.arange(200), accepted, nxt] > 0).all())  # never a token the target excludes


@pytest.mark.parametrize("family", FAMILIES)
def test_a_whole_block_decode_has_the_targets_law(family):
    """Four tokens over three symbols, block steps of two drafted tokens repeated until four are out."""
    target, draft = random_pair(np.random.default_rng(7), 3, 5, family)
    law = decode_law(lambda u: block_step_law(target, draft, 2, u), 4)
    assert law_distance(law, target_law(target, 4)) < 1e-12


def test_a_whole_decode_with_three_drafted_tokens_has_the_targets_law():
    target, draft = mdsd.toy_sequence_pair(3, 6, 0.3, 0.6, torch.Generator().manual_seed(8))
    law = decode_law(lambda u: block_step_law(target, draft, 3, u), 4)
    assert law_distance(law, target_law(target, 4)) < 1e-12


def _without_correction(p_rows, q_rows, tokens):
    """Block verification with the residual correction left out: after τ < L it draws from p_τ."""
    tests, _ = CHAIN_DECISIONS(p_rows, q_rows, tokens)
    return tests, p_rows


CHAIN_DECISIONS = block_module.chain_decisions


def test_the_enumeration_catches_block_verification_without_its_residual(monkeypatch):
    target, draft = mdsd.toy_sequence_pair(3, 5, 0.3, 0.6, torch.Generator().manual_seed(8))
    monkeypatch.setattr(block_module, "chain_decisions", _without_correction)
    law = decode_law(lambda u: block_step_law(target, draft, 2, u), 4)
    assert law_distance(law, target_law(target, 4)) > 1e-3
    assert one_step_error(target, block_step_law(target, draft, 2), 2) > 1e-3


def test_chi_square_of_the_batched_sampler_and_of_a_broken_one():
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.5, 0.3, torch.Generator().manual_seed(9))
    tree, p, q, tokens = chains(target, draft, 2, 8000, seed=10)
    exact = block_step_law(target, draft, 2)
    u = draw_uniforms((8000,), 2, torch.Generator().manual_seed(11))
    accepted, nxt = block_verify_with(p, q, tokens, u)
    node_tokens = torch.cat([torch.zeros(8000, 1, dtype=torch.long), tokens], 1)
    assert chi_square(emitted_strings(tree, node_tokens, accepted, nxt), exact) > ALPHA
    # broken: after τ < L the last token is drawn from p_τ, not from the corrected residual
    rows = torch.arange(8000)
    plain = torch.multinomial(p[rows, accepted], 1, generator=torch.Generator().manual_seed(12))[:, 0]
    broken = torch.where(accepted < 2, plain, nxt)
    assert chi_square(emitted_strings(tree, node_tokens, accepted, broken), exact) < ALPHA


def test_tokenwise_le_block_eq_optimum_on_chains():
    """Sun et al.: block verification is never worse than token-wise verification and optimal for a chain."""
    rng = np.random.default_rng(12)
    for n, depth, family in itertools.product((2, 3, 4), (2, 3), FAMILIES):
        if n == 4 and depth == 3 and family not in ("toy", "extreme"):
            continue
        target, draft = random_pair(rng, n, depth, family)
        chain = mdsd.Tree.chain(depth)
        block = mdsd.block_tokens_per_step(target, draft, depth)
        tokenwise = mdsd.nodewise_tokens_per_step(target, draft, chain, "single")
        best = solve_tree_otm(target, draft, chain, "iid").value
        assert tokenwise <= block + 1e-12 and block == pytest.approx(best, abs=1e-8), (n, depth, family)


def test_one_drafted_token_is_speculative_sampling():
    rng = np.random.default_rng(13)
    for family in FAMILIES:
        target, draft = random_pair(rng, 4, 1, family)
        single = nodewise_step_law(target, draft, mdsd.Tree.chain(1), "single")
        assert law_distance(block_step_law(target, draft, 1), single) < 1e-12, family


def test_float32_one_hot_rows():
    p = torch.zeros(3, 3, 4, dtype=torch.float32)
    p[:, :, 2] = 1.0
    q = torch.zeros(3, 2, 4, dtype=torch.float32)
    q[:, :, 2] = 1.0
    accepted, nxt = block_verify(p, q, torch.full((3, 2), 2), torch.Generator().manual_seed(0))
    assert accepted.tolist() == [2, 2, 2] and nxt.tolist() == [2, 2, 2]
    q[:, 0] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # the draft says 1, the target 2: rejected, 2 emitted
    accepted, nxt = block_verify(p, q, torch.tensor([[1, 2]] * 3), torch.Generator().manual_seed(0))
    assert accepted.tolist() == [0, 0, 0] and nxt.tolist() == [2, 2, 2]


def test_rejects_bad_inputs():
    p = torch.full((2, 3, 4), 0.25, dtype=torch.float64)
    q = torch.full((2, 2, 4), 0.25, dtype=torch.float64)
    tokens = torch.zeros(2, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="p must have shape"):
        block_verify(p[:, :2], q, tokens)
    with pytest.raises(ValueError, match="q must have shape"):
        block_verify(p, q[:, :1], tokens)
    with pytest.raises(ValueError, match="tokens must have shape"):
        block_verify(p, q, tokens[0])
    with pytest.raises(TypeError, match="integer"):
        block_verify(p, q, tokens.double())
    with pytest.raises(ValueError, match=r"lie in \[0, 4\)"):
        block_verify(p, q, tokens + 4)
    with pytest.raises(ValueError, match="NaN"):
        block_verify(p * torch.nan, q, tokens)
    bad = q.clone()
    bad[:, 0] = torch.tensor([0.0, 0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="q = 0"):
        block_verify(p, bad, tokens)
    with pytest.raises(ValueError, match="sum to 1"):
        block_verify(p * 2, q, tokens)
