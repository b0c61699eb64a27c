"""The optimal verifier: exact output law p and acceptance α* by enumeration (n <= 6, k <= 4, i.i.d. and
without replacement), α* at full vocabulary (synthetic V = 151,936 and the bundled real corpus), and a
seeded G-test of the sampler at V = 151,936 that a broken variant fails."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verifier_cases import adversarial_pair, feasible
from verifier_enumeration import output_law
from verifier_gtest import ALPHA, g_test

import mdsd
from mdsd.verifiers.optimal import OptimalVerifier
from mdsd.verifiers.optimal.fallback import fallback_acceptance

pytestmark = pytest.mark.slow  # full vocabulary, the fallback's exact acceptance (-m "not slow" skips)


def _cases(v, count, seed, sizes):
    rng = np.random.default_rng(seed)
    out, kind = [], 0
    while len(out) < count:
        p, q = adversarial_pair(rng, sizes[kind % len(sizes)], kind)
        kind += 1
        if feasible(v, q):
            out.append((p, q))
    return out


EXTREME = [  # entries spanning 1e-300..1, one-hot rows, ties, disjoint supports
    (np.array([1.0, 0.0, 0.0, 0.0]), np.array([1e-300, 0.5, 0.25, 0.25 - 1e-300])),
    (np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.0, 0.0, 0.5, 0.5])),
    (np.array([1e-300, 1.0 - 1e-300, 0.0, 0.0]), np.array([0.25, 0.25, 0.25, 0.25])),
    (np.array([0.0, 1.0, 0.0, 0.0]), np.array([1.0 - 2e-16, 1e-16, 1e-16, 0.0])),
    (np.array([0.25, 0.25, 0.25, 0.25]), np.array([0.25, 0.25, 0.25, 0.25])),
]


@pytest.mark.parametrize(("k", "count"), [(2, 40), (3, 30), (4, 30)])
def test_iid_output_law_and_acceptance_by_enumeration(k, count):
    """k = 1..3 run in the shared battery (test_verifier_exact); here k = 4 and the extremes."""
    v = mdsd.verifier("optimal", k)
    sizes = (2, 3, 4) if k == 4 else (3, 4, 5, 6)
    for p, q in _cases(v, count, seed=40 + k, sizes=sizes) + EXTREME:
        law, accepted = output_law(v, p, q)
        np.testing.assert_allclose(law, p, rtol=0, atol=1e-12, err_msg=f"k={k} p={p} q={q}")
        best = mdsd.optimal_acceptance(p, q, v.law, method="lp")
        assert v.acceptance(p, q) == pytest.approx(accepted, abs=1e-12)
        assert accepted == pytest.approx(best, abs=1e-9), (p, q)


@pytest.mark.parametrize(("k", "count"), [(1, 40), (2, 100), (3, 24), (4, 12)])
def test_without_replacement_flow_is_exact_and_optimal(k, count):
    v = mdsd.verifier("optimal", k, law="wor")
    sizes = (4, 5) if k == 4 else (3, 4, 5, 6)
    for p, q in _cases(v, count, seed=50 + k, sizes=sizes):
        law, accepted = output_law(v, p, q)
        np.testing.assert_allclose(law, p, rtol=0, atol=1e-12, err_msg=f"k={k} p={p} q={q}")
        assert v.acceptance(p, q) == pytest.approx(accepted, abs=1e-12)
        assert accepted == pytest.approx(mdsd.optimal_acceptance(p, q, v.law, method="lp"), abs=1e-9)


@pytest.mark.parametrize(
    "law", [mdsd.Hub(), mdsd.Greedy(3), mdsd.Joint({(0, 1): 0.5, (2, 2): 0.3, (1, 3): 0.2})]
)
def test_other_laws_take_the_flow(law):
    v = mdsd.verifier("optimal", law.k, law=law)
    rng = np.random.default_rng(7)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        law_out, accepted = output_law(v, p, q)
        np.testing.assert_allclose(law_out, p, rtol=0, atol=1e-12)
        assert v.acceptance(p, q) == pytest.approx(mdsd.optimal_acceptance(p, q, law, method="lp"), abs=1e-9)
        assert accepted == pytest.approx(v.acceptance(p, q), abs=1e-12)


def _fallback_output_law(p, q, k):
    """Drafts without replacement turned into k i.i.d. drafts (a repeat of an earlier draft s with
    probability q(s), else the next draft), then the i.i.d. rule: law and acceptance by enumeration."""
    out, accepted, iid = np.zeros(p.size), 0.0, mdsd.verifier("optimal", k)
    for drafts, w in mdsd.WithoutReplacement(k).joint(q).items():
        paths = [((drafts[0],), 1, 1.0)]  # (i.i.d. draws, distinct drafts used, probability)
        for _ in range(k - 1):
            grown = []
            for draws, used, weight in paths:
                grown += [((*draws, s), used, weight * q[s]) for s in drafts[:used]]
                grown.append(
                    ((*draws, drafts[used]), used + 1, weight * (1.0 - q[list(drafts[:used])].sum()))
                )
            paths = grown
        for draws, _, weight in paths:
            emitted = iid.output_law(p, q, draws)
            out += w * weight * emitted
            accepted += w * weight * emitted[list(drafts)].sum()
    return out, accepted


@pytest.mark.parametrize("k", [2, 3, 4])
def test_without_replacement_fallback_is_lossless_and_its_acceptance_exact(k):
    """Forced with flow_tuples = 0: exact law p; acceptance between α*_iid and α*_wor; acceptance() is the
    enumerated value, whichever tokens are summed one by one (explicit) and which as vectors."""
    v = OptimalVerifier(k, law="wor", flow_tuples=0, wor_rule="fallback")
    light = 0
    for p, q in (
        _cases(v, {2: 60, 3: 30, 4: 24}[k], seed=60 + k, sizes=(4, 5, 6) if k < 4 else (4, 5)) + EXTREME
    ):
        if np.count_nonzero(q) < k:
            continue
        law, accepted = _fallback_output_law(p, q, k)
        np.testing.assert_allclose(law, p, rtol=0, atol=1e-12)
        low = mdsd.optimal_acceptance(p, q, mdsd.IID(k), method="lp")
        high = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k), method="lp")
        assert low - 1e-9 <= accepted <= high + 1e-9
        assert v.acceptance(p, q) == pytest.approx(accepted, abs=1e-12), (p, q)
        assert fallback_acceptance(p, q, k, explicit=q.size) == pytest.approx(accepted, abs=1e-12)
        for explicit in (2, 3):
            try:
                value = fallback_acceptance(p, q, k, explicit=explicit)
            except ValueError:  # the light tokens too heavy for so few explicit ones
                continue
            light += 1
            assert value == pytest.approx(accepted, abs=1e-12), (explicit, p, q)
    assert light >= 20  # the vector sums were exercised


@pytest.mark.parametrize("k", [2, 3, 4])
def test_without_replacement_fallback_vector_sums_equal_the_one_by_one_sums(k):
    """Medium vocabularies (beyond enumeration): every token explicit against mostly light tokens, on
    unsmoothed pairs (zeros, one-hot rows, ties, disjoint supports, entries down to 1e-300)."""
    rng = np.random.default_rng(70 + k)
    for kind in range(24 if k < 4 else 12):
        p, q = adversarial_pair(rng, (8, 12, 16)[kind % 3], kind)
        if np.count_nonzero(q) < k:
            continue
        every = fallback_acceptance(p, q, k, explicit=q.size)
        assert fallback_acceptance(p, q, k) == pytest.approx(every, abs=1e-12), (p, q)
        assert fallback_acceptance(p, q, k, explicit=6) == pytest.approx(every, abs=1e-12), (p, q)


def test_without_replacement_fallback_refuses_k_5():
    v = OptimalVerifier(5, law="wor", flow_tuples=0, wor_rule="fallback")
    with pytest.raises(ValueError, match="estimate it"):
        v.acceptance(np.full(6, 1 / 6), np.full(6, 1 / 6))
    with pytest.raises(ValueError, match="explicit"):
        fallback_acceptance(np.full(6, 1 / 6), np.full(6, 1 / 6), 3, explicit=0)
    with pytest.raises(ValueError, match="too small"):  # one explicit token leaves 3 × 0.2 of light mass
        fallback_acceptance(np.eye(5)[0], np.full(5, 0.2), 3, explicit=1)


@pytest.mark.parametrize(("k", "temperatures"), [(2, (0.05, 1.0)), (3, (0.05,)), (4, (0.3,))])
def test_without_replacement_fallback_acceptance_at_full_vocabulary(k, temperatures):
    """V = 151,936 (the fallback's own path): between α*_iid and α*_wor, within a Wilson interval of the
    sampler's acceptance, and the same whichever tokens are summed one by one (k = 2 at T = 0.05 and 1, k = 3
    and 4 at one temperature each: their nodes cost seconds)."""
    rng = np.random.default_rng(5)
    v = OptimalVerifier(k, law="wor", wor_rule="fallback")
    for temperature in temperatures:
        logits = 3.0 * rng.normal(size=151_936)
        p = np.exp(logits / temperature - np.logaddexp.reduce(logits / temperature))
        drafted = (logits + rng.normal(size=logits.size)) / temperature
        q = np.exp(drafted - np.logaddexp.reduce(drafted))
        p, q = p / p.sum(), q / q.sum()  # as acceptance() normalises them (logaddexp leaves them 1e-12 off)
        exact = v.acceptance(p, q)
        low = mdsd.optimal_acceptance(p, q, mdsd.IID(k))
        assert low - 1e-12 <= exact <= mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k)) + 1e-9
        assert fallback_acceptance(p, q, k, explicit=16) == pytest.approx(exact, abs=1e-12)
        est = mdsd.estimate_acceptance(v, p, q, 20_000, seed=1)
        assert est.low - 1e-3 <= exact <= est.high + 1e-3, (temperature, exact, est)


def test_without_replacement_fallback_acceptance_on_the_real_corpus():
    """k = 3, 4 on bundled real rows at every stored temperature (a first, middle and last row, k taking
    turns): the sums agree whichever tokens are explicit, and the value lies between the two optima."""
    for temperature in mdsd.data.corpus.TEMPERATURES:
        pairs = mdsd.data.real_pairs(temperature)
        for turn, r in enumerate(np.linspace(0, len(pairs) - 1, 3).astype(int)):
            p, q = pairs.p[r], pairs.q[r]
            for k in (3, 4) if turn == 1 else (3,) if turn == 0 else (4,):
                exact = fallback_acceptance(p, q, k)
                assert fallback_acceptance(p, q, k, explicit=16) == pytest.approx(exact, abs=1e-12)
                low = mdsd.optimal_acceptance(p, q, mdsd.IID(k))
                high = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k))
                assert low - 1e-12 <= exact <= high + 1e-9


def test_acceptance_is_alpha_star_at_full_vocabulary():
    """>= 200 full-size pairs: synthetic V = 151,936 for k = 2, 4, 8 and the bundled corpus at every
    stored temperature for k = 1..8 (its rows are the real pairs with the tail lumped)."""
    gen = torch.Generator().manual_seed(0)
    n, checked = 151_936, 0
    for scale, noise in ((3.0, 1.0), (1.0, 0.5), (6.0, 3.0)):
        logits = scale * torch.randn(n, generator=gen, dtype=torch.float64)
        p = torch.softmax(logits, 0).numpy()
        q = torch.softmax(logits + noise * torch.randn(n, generator=gen, dtype=torch.float64), 0).numpy()
        for k in (2, 4, 8):
            alpha = mdsd.verifier("optimal", k).acceptance(p, q)
            assert alpha == pytest.approx(mdsd.optimal_acceptance(p, q, mdsd.IID(k)), abs=1e-12)
            checked += 1
    for temperature in mdsd.data.corpus.TEMPERATURES:
        pairs = mdsd.data.real_pairs(temperature)
        rows = np.linspace(0, len(pairs) - 1, 3).astype(int)
        for k in range(1, 9):
            v = mdsd.verifier("optimal", k)
            best = mdsd.optimal_acceptance(pairs.p[rows], pairs.q[rows], mdsd.IID(k))
            for r, b in zip(rows, best, strict=True):
                assert v.acceptance(pairs.p[r], pairs.q[r]) == pytest.approx(b, abs=1e-12)
                checked += 1
    assert checked >= 200


class FirstDraftOptimal(OptimalVerifier):
    """Deliberately wrong: selects the first draft (law q) but accepts against the optimal F."""

    def _verify_iid(self, p, q, drafts, u_depth, u_emit):
        from mdsd.verifiers.optimal.layout import iid_layout
        from mdsd.verifiers.optimal.twostep import two_step

        law = iid_layout(p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1]), self.k).target
        return two_step(p, law.reshape(p.shape), drafts[..., 0], u_emit)


def test_sampler_at_full_vocabulary_passes_a_g_test_that_a_broken_variant_fails():
    """V = 151,936, k = 4, 10^5 draws: G-test of the emitted tokens against p at α = 10^-3 (bins with
    expected count < 5 pooled) and the acceptance within 4 standard errors; seeded, so deterministic."""
    gen = torch.Generator().manual_seed(1)
    n = 151_936
    logits = 3 * torch.randn(n, generator=gen, dtype=torch.float64)
    p = torch.softmax(logits, 0)
    q = torch.softmax(logits + torch.randn(n, generator=gen, dtype=torch.float64), 0)
    v = mdsd.verifier("optimal", 4)
    tokens, index = v.simulate(p, q, 100_000, seed=2)
    alpha = v.acceptance(p, q)
    rate = float((index >= 0).double().mean())
    assert g_test(tokens, p.numpy()) > ALPHA
    assert abs(rate - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / 100_000), (rate, alpha)
    broken, _ = FirstDraftOptimal(4).simulate(p, q, 100_000, seed=2)
    assert g_test(broken, p.numpy()) < ALPHA


def test_batches_and_duplicates():
    """Rows with their own p, q (Newton windows) give the per-row results; repeated i.i.d. drafts and
    k = 1 work; the emitted index is that of a draft equal to the token."""
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(6, 40, generator=gen), -1)
    q = torch.softmax(torch.randn(6, 40, generator=gen), -1)
    for k in (1, 3):
        v = mdsd.verifier("optimal", k)
        drafts = v.draft(q, gen)
        drafts[0] = drafts[0, 0]  # a tuple of one token repeated
        u = mdsd.verifiers.draw_uniforms((6,), k, gen)
        tokens, index = v.verify_with(p, q, drafts, u)
        for r in range(6):
            sub = mdsd.verifiers.Uniforms(u.accept[r : r + 1], u.residual[r : r + 1])
            one, _ = v.verify_with(p[r], q[r], drafts[r : r + 1], sub)
            assert int(one[0]) == int(tokens[r])
        hit = index >= 0
        assert torch.equal(drafts[hit].gather(-1, index[hit].unsqueeze(-1))[..., 0], tokens[hit])


def test_law_argument_and_registry():
    assert "optimal" in mdsd.VERIFIERS
    assert (
        repr(mdsd.verifier("optimal", 2, law="wor")) == "verifier('optimal', k=2, law='without_replacement')"
    )
    assert mdsd.verifier("optimal", 2).law == mdsd.IID(2)
    for name, law in (("optimal:wor", "without_replacement"), ("optimal-wor", "without_replacement")):
        assert mdsd.verifier(name, 2).law.name == law  # the spelling and the NAME:LAW form
    assert mdsd.verifier("optimal-iid", 2).law == mdsd.IID(2)
    with pytest.raises(ValueError, match="unknown verifier"):
        mdsd.verifier("optimal-", 2)
    with pytest.raises(ValueError, match="law must be"):
        mdsd.verifier("optimal", 2, law="hub")
    with pytest.raises(ValueError, match="draws 2 drafts"):
        mdsd.verifier("optimal", 3, law=mdsd.IID(2))
    with pytest.raises(ValueError, match="fixed draft law"):
        mdsd.verifier("rrs", 2, law="iid")
    with pytest.raises(ValueError, match="flow on at most"):
        OptimalVerifier(2, law=mdsd.Greedy(2), flow_tuples=1).acceptance([0.5, 0.5, 0.0], [0.2, 0.3, 0.5])
    v = mdsd.verifier("optimal", 3, law="wor")
    with pytest.raises(ValueError, match="distinct"):
        v.verify([0.5, 0.5, 0.0], [0.4, 0.3, 0.3], [[0, 0, 1]])
