"""Batched samplers against the slow float64 references, under the same uniforms; dtypes and edge cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verifier_cases import GRID, pairs_for

import mdsd
from mdsd.verifiers import draw_uniforms
from mdsd.verifiers.kseq import kseq_rho
from mdsd.verifiers.reference import reference_verify
from mdsd.verifiers.spechub import spechub_terms


def _batch(v, rows: int, seed: int, sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """Adversarial pairs of one vocabulary size per call, stacked into [rows, n] float64 tensors."""
    cases = pairs_for(v, rows, seed=seed, sizes=sizes)
    return torch.tensor(np.array([p for p, _ in cases])), torch.tensor(np.array([q for _, q in cases]))


@pytest.mark.parametrize(("name", "k"), GRID)
@pytest.mark.parametrize("n", [5, 8, 700])
def test_sampler_matches_reference_exactly(name, k, n):
    v = mdsd.verifier(name, k)
    gen = torch.Generator().manual_seed(1000 * k + n)
    p, q = _batch(v, 40 if n == 700 else 400, seed=n + k, sizes=(n,))
    reps = 4 if n == 700 else 3  # several draft tuples per pair
    p, q = p.repeat(reps, 1), q.repeat(reps, 1)
    drafts = v.draft(q, gen)
    u = draw_uniforms((p.shape[0],), k, gen)
    tokens, index = v.verify_with(p, q, drafts, u)
    expected = reference_verify(name, p, q, drafts, u)
    assert torch.equal(tokens, expected)
    hit = drafts == tokens.unsqueeze(-1)
    first = torch.where(hit.any(-1), hit.int().argmax(-1), -1)
    assert torch.equal(index, first)


@pytest.mark.parametrize(("name", "k"), GRID)
def test_one_pair_broadcasts_over_many_draft_tuples(name, k):
    """p, q [V] with drafts [N, k] give the same tokens as the rows expanded to [N, V]."""
    v = mdsd.verifier(name, k)
    gen = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(50, generator=gen, dtype=torch.float64), 0)
    q = torch.softmax(torch.randn(50, generator=gen, dtype=torch.float64), 0)
    drafts = v.draft(q.expand(3000, -1), gen)
    u = draw_uniforms((3000,), k, gen)
    one = v.verify_with(p, q, drafts, u)
    many = v.verify_with(p.expand(3000, -1), q.expand(3000, -1), drafts, u)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])
    # a [2, 3, V] batch with drafts [2, 3, k]
    tokens, index = v.verify(p.expand(2, 3, -1), q.expand(2, 3, -1), drafts[:6].reshape(2, 3, k), gen)
    assert tokens.shape == index.shape == (2, 3)
    # one node (batch shape []), as the tree decoder calls it
    token, index = v.verify(p, q, drafts[0], gen)
    assert token.shape == index.shape == () and (index == -1 or drafts[0][index] == token)


def test_duplicate_drafts_report_the_first_index():
    """RRS draws i.i.d. drafts, so duplicates happen; the accepted index is that of the first copy."""
    v = mdsd.verifier("rrs", 3)
    p = torch.tensor([0.0, 1.0, 0.0])
    q = torch.tensor([0.5, 0.5, 0.0])
    drafts = torch.tensor([[0, 1, 1], [1, 1, 0], [0, 0, 0]]).repeat(200, 1)
    tokens, index = v.verify(p, q, drafts, torch.Generator().manual_seed(0))
    assert bool((tokens == 1).all())
    assert torch.equal(index[:3], torch.tensor([1, 0, -1]))


def test_residual_landing_on_a_draft_counts_as_accepted():
    """Greedy: a rejected random draft leaves a residual on T (the top drafts), reported with T's index."""
    v = mdsd.verifier("greedy", 2)
    p = torch.tensor([0.9, 0.0, 0.1])  # token 0 is the top draft
    q = torch.tensor([0.5, 0.3, 0.2])
    drafts = torch.tensor([[0, 1]]).repeat(4000, 1)
    tokens, index = v.verify(p, q, drafts, torch.Generator().manual_seed(0))
    # p(1) = 0: draft 1 is always rejected; norm((p − q')+) = δ_0 with q' = (0, 0.6, 0.4)
    assert bool((tokens == 0).all()) and bool((index == 0).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("name", "k"), [g for g in GRID if g[1] <= 2] + [("rrsw", 3), ("kseq", 3)])
def test_low_precision_near_one_hot_inputs(name, k, dtype):
    """fp16 / bf16 logits at low temperature: no NaN, no token with p = 0, indices consistent."""
    v = mdsd.verifier(name, k)
    gen = torch.Generator().manual_seed(3)
    logits_p = torch.randn(64, 1000, generator=gen) * 40
    logits_q = logits_p + torch.randn(64, 1000, generator=gen) * 10
    p = torch.softmax(logits_p, -1).to(dtype)
    q = torch.softmax(logits_q, -1).to(dtype)
    q = (q.float() + 1e-6).to(dtype)  # full support, but near one-hot
    q = q / q.float().sum(-1, keepdim=True).to(dtype)
    drafts = v.draft(q, gen)
    tokens, index = v.verify(p, q, drafts, gen)
    assert ((tokens >= 0) & (tokens < 1000)).all()
    assert (p.float().gather(-1, tokens.unsqueeze(-1)) > 0).all()
    assert ((index == -1) | (drafts.gather(-1, index.clamp_min(0).unsqueeze(-1))[..., 0] == tokens)).all()


def test_internal_quantities_stay_finite_for_one_hot_rows():
    """Near-one-hot rows, float32 included: 1 − q_a down to a subnormal 1e-40 must not overflow."""
    p = torch.eye(6)[[0, 1, 2, 3]]
    q = torch.tensor(
        [[1.0, 0, 0, 0, 0, 0], [1 - 1e-7, 1e-7, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0, 0], [1.0, 1e-40, 0, 0, 0, 0]]
    )
    rho, beta, pacc = kseq_rho(p, q, 3)
    assert torch.isfinite(rho).all() and torch.isfinite(beta).all() and torch.isfinite(pacc).all()
    for value in spechub_terms(p[1:], q[1:], torch.zeros(3, dtype=torch.long)).values():
        assert torch.isfinite(value.double()).all()


def test_fp16_law_is_the_rounded_p():
    """Half-precision inputs: the output law is p as stored (renormalised), not a NaN-damaged version."""
    v = mdsd.verifier("spechub", 2)
    p16 = torch.softmax(torch.tensor([3.0, 1.0, 0.5, -1.0, 2.0]), 0).half()
    q16 = torch.softmax(torch.tensor([1.0, 3.0, 0.0, -2.0, 2.5]), 0).half()
    tokens, _ = v.simulate(p16, q16, 100_000, seed=5)
    freq = torch.bincount(tokens, minlength=5).double() / tokens.numel()
    target = p16.double() / p16.double().sum()
    assert float((freq - target).abs().max()) < 4 * float((target * (1 - target) / 1e5).sqrt().max())


def test_simulate_is_reproducible():
    v = mdsd.verifier("rrsw", 2)
    p, q = [0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]
    a, b = v.simulate(p, q, 1000, seed=4), v.simulate(p, q, 1000, seed=4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], v.simulate(p, q, 1000, seed=5)[0])


@pytest.mark.parametrize("k", [2, 3, 4])
def test_kseq_spread_histograms_find_the_same_optimum(k):
    """Off the CPU K-SEQ adds the tokens outside its bracket over spread bins (no atomic hot spot on two
    addresses): the same sums in another order. Forced on here: p_acc agrees with the CPU layout to
    1e-12 (ρ itself may move where g is flat at its root) and the scheme is lossless for the ρ found."""
    v = mdsd.verifier("kseq", k)
    for n in (5, 8, 700):
        p, q = _batch(v, 400 if n < 700 else 40, seed=n + k, sizes=(n,))
        rho, beta, pacc = kseq_rho(p, q, k, spread=True)
        assert (pacc - kseq_rho(p, q, k, spread=False)[2]).abs().max() <= 1e-12
        b = torch.minimum(p / rho.unsqueeze(-1), q).sum(-1)
        assert (1 - (1 - b) ** k - rho * b).max() <= 1e-15  # g(ρ) <= 0
