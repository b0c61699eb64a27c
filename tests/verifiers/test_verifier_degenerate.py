"""Degenerate rows (issue 12 §2): q with fewer positive tokens than the law needs (a float32 softmax at low
temperature is often exactly one-hot). The drafts are the top-k of q, the output is y ~ p, accepted iff
y is a draft. Exact tests for every verifier whose law can be degenerate, alone and mixed with normal
rows, in float64 and float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verifier_cases import GRID, pairs_for
from verifier_enumeration import output_law

import mdsd
from mdsd.laws import ranked
from mdsd.sampling import UniformStream
from mdsd.verifiers import draw_uniforms
from mdsd.verifiers.reference import reference_verify

DEGENERATE = [
    (n, k) for n, k in GRID + [("rrsw", 4), ("greedy", 4)] if mdsd.verifier(n, k).law.min_support() > 1
]


def _first_above(w: np.ndarray, u: float) -> int:
    c = np.cumsum(w)
    above = np.flatnonzero((c > u * c[-1]) & (w > 0))
    return int(above[0]) if above.size else int(np.flatnonzero(w > 0)[-1])


def degenerate_pairs(v, count: int, seed: int, n: int = 7) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs whose q has 1..min_support-1 positive tokens (one-hot, ties, tiny entries)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        p = rng.dirichlet(np.full(n, 0.6))
        p[rng.random(n) < 0.3] = 0.0
        p = p / p.sum() if p.sum() > 0 else np.eye(n)[0]
        support = 1 + i % (v.law.min_support() - 1)
        q = np.zeros(n)
        tokens = rng.choice(n, support, replace=False)
        q[tokens] = [1.0, 1.0, 1e-300, 0.5][i % 4] if support > 1 else 1.0
        q[tokens[0]] = 1.0
        out.append((p, q / q.sum()))
    return out


@pytest.mark.parametrize(("name", "k"), DEGENERATE)
def test_degenerate_rule_exactly(name, k):
    """Acceptance = p(top-k of q) (also by the independent enumerator), drafts = top-k of q, and the
    token is the inversion of p at the residual uniform whatever the accept uniforms: law p exactly."""
    v = mdsd.verifier(name, k)
    for p, q in degenerate_pairs(v, 40, seed=k):
        top = ranked(q)[:k]
        law, accepted = output_law(v, p, q)
        assert v.acceptance(p, q) == pytest.approx(p[top].sum(), abs=1e-15) == pytest.approx(accepted)
        np.testing.assert_array_equal(law, p)
        for dtype in (torch.float32, torch.float64):  # float32: 1e-300 is stored as 0
            stored = torch.tensor(q, dtype=dtype)
            assert v.draft(stored).tolist() == ranked(stored.double().numpy())[:k].tolist()
        c = np.cumsum(p)[:-1]
        us = np.unique(
            np.clip(np.r_[c, np.nextafter(c, 1), np.nextafter(c, 0), np.linspace(0, 1, 50)], 0, 1 - 1e-16)
        )
        u = draw_uniforms((us.size,), k, torch.Generator().manual_seed(0))
        u = type(u)(accept=u.accept, residual=torch.tensor(us))
        drafts = torch.tensor(top).expand(us.size, k)
        tokens, index = v.verify_with(torch.tensor(p), torch.tensor(q), drafts, u)
        mismatch = np.flatnonzero(tokens.numpy() != [_first_above(p, x) for x in us])
        assert all(np.isclose(us[i], c, rtol=0, atol=1e-12).any() for i in mismatch)  # summation order
        first = [top.tolist().index(t) if t in top else -1 for t in tokens.tolist()]
        assert index.tolist() == first


@pytest.mark.parametrize(("name", "k"), GRID + [("rrsw", 4), ("greedy", 4)])
def test_mixed_batches_match_the_reference(name, k):
    """Degenerate and normal rows in one batch, float64: the tokens of the reference (which detects a
    degenerate row by counting q's support, not from the drafts) under the same uniforms."""
    v = mdsd.verifier(name, k)
    normal = pairs_for(v, 60, seed=5, sizes=(7,))
    odd = degenerate_pairs(v, 60, seed=6) if v.law.min_support() > 1 else normal
    rows = [pair for two in zip(normal, odd, strict=True) for pair in two]
    p = torch.tensor(np.array([a for a, _ in rows])).repeat(3, 1)
    q = torch.tensor(np.array([b for _, b in rows])).repeat(3, 1)
    gen = torch.Generator().manual_seed(k)
    drafts = v.draft(q, gen)
    u = draw_uniforms((p.shape[0],), k, gen)
    tokens, _ = v.verify_with(p, q, drafts, u)
    assert torch.equal(tokens, reference_verify(name, p, q, drafts, u))
    assert torch.equal(
        v.verify_unchecked(p, q, drafts, torch.Generator().manual_seed(1))[0],
        v.verify(p, q, drafts, torch.Generator().manual_seed(1))[0],
    )


@pytest.mark.parametrize(("name", "k"), GRID + [("rrsw", 4), ("greedy", 4), ("kseq", 4)])
@pytest.mark.parametrize("temperature", [0.1, 0.05, 1e-3])
def test_low_temperature_float32_one_hot_rows_decode(name, k, temperature):
    """Regression (issue 12 §2): at low temperature the float32 draft softmax is exactly one-hot on many
    rows and draft/verify raised "q has a row with 1 tokens of positive probability". Now every row
    decodes; degenerate rows draft the top-k and emit the inversion of p at the residual uniform."""
    v = mdsd.verifier(name, k)
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(256, 2000, generator=gen) * 4
    p = torch.softmax(logits / temperature, -1)
    q = torch.softmax((logits + torch.randn(256, 2000, generator=gen)) / temperature, -1)
    support = (q > 0).sum(-1)
    degenerate = support < v.law.min_support()
    assert temperature > 0.05 or v.law.min_support() == 1 or degenerate.any()
    drafts = v.draft_unchecked(q, gen)
    top = torch.tensor(ranked(q.double().numpy())[:, :k])
    assert torch.equal(drafts[degenerate], top[degenerate])
    assert bool(((q.gather(-1, drafts) > 0).all(-1) | (drafts == top).all(-1)).all())  # top-k: q = 0 allowed
    u = draw_uniforms((256,), k, gen)
    tokens, _ = v.verify_with(p, q, drafts, u)
    assert bool((p.gather(-1, tokens[:, None]) > 0).all())
    expected = reference_verify(name, p.double(), q.double(), drafts, u)
    assert torch.equal(tokens[degenerate], expected[degenerate])
    tokens, index = v.verify_unchecked(p, q, drafts, gen)
    hit = drafts.gather(-1, index.clamp_min(0)[:, None])[:, 0] == tokens
    assert bool(((index == -1) | hit).all()) and bool((p.gather(-1, tokens[:, None]) > 0).all())


@pytest.mark.parametrize(("name", "k"), DEGENERATE)
def test_degenerate_rows_draft_the_top_k_from_a_uniform_stream(name, k):
    """The decoder's step draws from a UniformStream (inversion, not the race): on degenerate rows the
    drafts are still the top-k of q, found from the draws; on the other rows the law's tokens, q > 0."""
    v = mdsd.verifier(name, k)
    rows = degenerate_pairs(v, 40, seed=k + 1) + pairs_for(v, 40, seed=k + 2, sizes=(7,))
    q64 = torch.tensor(np.array([b for _, b in rows]))
    for q in (q64, q64.float()):  # float32: 1e-300 is stored as 0
        degenerate = (q > 0).sum(-1) < v.law.min_support()
        drafts = v.draft_unchecked(q, UniformStream(generator=torch.Generator().manual_seed(k)))
        top = torch.tensor(ranked(q.double().numpy())[:, :k])
        assert degenerate.any() and not degenerate.all()
        assert torch.equal(drafts[degenerate], top[degenerate])
        assert bool((q.gather(-1, drafts) > 0)[~degenerate].all())


@pytest.mark.parametrize(("name", "k"), [("rrsw", 2), ("rrsw", 3), ("spechub", 2), ("greedy", 3)])
def test_simulate_on_a_degenerate_pair(name, k):
    """simulate() on a one-hot q: emitted tokens ~ p (4-sigma per token) and acceptance p(top-k)."""
    v = mdsd.verifier(name, k)
    p = np.array([0.1, 0.05, 0.3, 0.25, 0.2, 0.1])
    q = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    tokens, accepted = v.simulate(p, q, 100_000, seed=3)
    freq = np.bincount(tokens.numpy(), minlength=6) / 1e5
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / 1e5))
    rate = float((accepted >= 0).double().mean())
    alpha = v.acceptance(p, q)
    assert alpha == pytest.approx(p[[3, 0, 1][:k]].sum(), abs=1e-15)
    assert abs(rate - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / 1e5)
