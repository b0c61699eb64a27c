"""The Luce rule with levels for drafts without replacement: its law and residual hits against exact
enumeration of every draft tuple (n <= 7, k = 2..4, weights 1e-15..1e15, light tokens in groups); the
weight solver against the LP optimum; the verifier's output law = p and acceptance by enumeration on
adversarial pairs; its kernel against a slow loop under the same uniforms; a seeded G-test of the sampler
at V = 151,936 that a broken variant fails."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verifier_cases import adversarial_pair
from verifier_gtest import ALPHA, g_test

import mdsd
import mdsd.verifiers.optimal.luce_rule as luce_rule_module
import mdsd.verifiers.optimal.verifier as verifier_module
from mdsd.verifiers.optimal import OptimalVerifier
from mdsd.verifiers.optimal.luce import (
    _lexsort,
    _top_product,
    _tops_times,
    default_step,
    luce_hits,
    luce_law,
    quadrature_error,
)
from mdsd.verifiers.optimal.luce_rule import levels_of, luce_rule, luce_select
from mdsd.verifiers.optimal.twostep import two_step
from mdsd.verifiers.reference import draw_index


def shares(x, level, w):
    """Exact Luce selection over the drafted set x: {token: probability}."""
    top = min(level[i] for i in x)
    mine = [i for i in x if level[i] == top]
    total = sum(w[i] for i in mine)
    return {i: w[i] / total for i in mine}


def enumerated(q, level, w, k, marks=None):
    """(F [n], per-token marked integral [n]) by summing over every tuple of WithoutReplacement(k)."""
    law, hits = np.zeros(q.size), np.zeros(q.size)
    for x, prob in mdsd.WithoutReplacement(k).joint(q).items():
        for z, s in shares(x, level, w).items():
            law[z] += prob * s
            if marks is not None:
                hits[z] += prob * s * sum(marks[y] for y in x if y != z)
    return law, hits


def random_rule(rng, n, kind):
    """q [n] and a rule: one to three levels, weights spread over up to 1e-15..1e15, or a near one-hot q."""
    q = rng.dirichlet(np.full(n, 0.6))
    if kind == 3:  # a near one-hot draft with tiny tails, one of them 1e-300
        q = np.full(n, 1e-9)
        q[0], q[1] = 1.0, 1e-300
        q /= q.sum()
    level = rng.integers(0, 1 + kind % 3, size=n)
    log_w = rng.normal(size=n) * (3.0 if kind % 2 else 12.0)
    return q, level, log_w


@pytest.mark.parametrize("k", [2, 3, 4])
def test_law_matches_enumeration_within_its_bound(k):
    rng = np.random.default_rng(10 + k)
    for kind in range(12):
        q, level, log_w = random_rule(rng, 6 if k < 4 else 5, kind)
        result = luce_law(q, level, log_w, k)
        exact, _ = enumerated(q, level, np.exp(log_w), k)
        assert np.abs(result.law - exact).sum() <= result.error, (kind, result.law, exact)
        assert result.error < 1e-12


@pytest.mark.parametrize("k", [2, 3, 4])
def test_groups_of_light_tokens_match_enumeration(k):
    """Four light tokens of one level are summed as groups, one per weight (group=2 forces it): one group
    where they share a weight, groups of one or two where they do not."""
    rng = np.random.default_rng(20 + k)
    for kind in range(9):
        q = np.r_[0.5, 0.3, 0.2 - 4e-3, 1e-3 * rng.dirichlet(np.ones(4)) * 4]
        level = np.r_[rng.integers(0, 2, size=3), np.full(4, kind % 2)]
        light = (np.full(4, rng.normal()), rng.normal(size=4), np.repeat(rng.normal(size=2), 2))[kind % 3]
        log_w = np.r_[rng.normal(size=3) * 2, light]
        grouped = luce_law(q, level, log_w, k, group=2).law
        exact, _ = enumerated(q, level, np.exp(log_w), k)
        np.testing.assert_allclose(grouped, exact, rtol=1e-11, atol=1e-15)
        np.testing.assert_allclose(luce_law(q, level, log_w, k).law, grouped, rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_tops_of_a_product_by_contraction_match_the_product_formed(k):
    """The singles' context (:func:`_tops_times`: one matrix product per order shortfall) against
    :func:`_top_product` term by term, for the law's and the hits' monomials, with shortfalls that vary
    along the tokens (surely arrived tokens), that are negative, or that are one value throughout."""
    rng = np.random.default_rng(40 + k)
    for monomials, tops in ((2, (1, 0)), (4, (3, 2))):
        for trial in range(24):
            nodes, n = rng.integers(1, 4), rng.integers(1, 40)
            coef = rng.random((monomials, k, nodes, n + 1))[..., ::-1][..., 1:]  # a reverse scan's view
            shift = rng.integers(0, k + 1, (nodes, n)) if trial % 2 else np.full((nodes, n), trial % (k + 1))
            poly = (np.zeros(()), shift, coef * 10.0 ** rng.integers(-300, 10))
            unshifted = np.zeros((nodes, 1), dtype=np.int64)
            factor = (np.zeros(()), unshifted, rng.random((monomials, k, nodes, 1)))
            expected = np.stack([_top_product(poly, factor, k, m) for m in tops])
            np.testing.assert_allclose(_tops_times(poly, factor, k, tops), expected, rtol=1e-13, atol=0)


def test_the_radix_lexsort_is_numpys():
    """The law's sort (stable radix sorts of order-preserving int64 keys) against np.lexsort: ties, −0 and +0,
    denormals, infinities, integer and float keys."""
    rng = np.random.default_rng(5)
    extremes = np.array([1e-300, -1e-300, 0.0, -0.0, 5e-324, -5e-324, 1.0, -1.0, np.inf, -np.inf])
    np.testing.assert_array_equal(_lexsort(extremes), np.lexsort((extremes,)))
    for _ in range(200):
        n = int(rng.integers(1, 300))
        q = np.round(rng.random(n), int(rng.integers(1, 4))) + 1e-3
        log_w = np.where(rng.random(n) < 0.2, -0.0, np.round(-rng.random(n) * 3, 1))
        level = rng.integers(0, int(rng.integers(1, n + 2)), n)
        np.testing.assert_array_equal(_lexsort(-q, log_w, level), np.lexsort((-q, log_w, level)))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_residual_hits_match_enumeration(k):
    rng = np.random.default_rng(30 + k)
    for kind in range(8):
        q, level, log_w = random_rule(rng, 6 if k < 4 else 5, kind)
        reject = np.where(rng.random(q.size) < 0.5, rng.random(q.size), 0.0)
        marks = np.where(reject > 0, 0.0, rng.random(q.size))
        _, per_token = enumerated(q, level, np.exp(log_w), k, marks)
        assert luce_hits(q, level, log_w, k, reject, marks) == pytest.approx(reject @ per_token, abs=1e-13)
    with pytest.raises(ValueError, match="both be positive"):
        luce_hits(q, level, log_w, k, np.ones(q.size), np.ones(q.size))


def test_two_drafts_in_closed_form_match_the_quadrature_and_enumeration(monkeypatch):
    """k = 2's closed form against the quadrature (n = 200, levels, ties of weights, groups of light
    tokens, entries down to 1e-300, a near one-hot q in float32) within the two bounds, its hits too;
    against enumeration to float rounding on small rules; a level with too many weights is integrated
    instead."""
    import mdsd.verifiers.optimal.luce as luce_module

    rng = np.random.default_rng(7)
    for kind in range(6):
        n = 200
        q = rng.dirichlet(np.full(n, 0.2 if kind % 2 else 1.0))
        q[rng.integers(n, size=20)] = 0.0
        q[rng.integers(n, size=10)] = 1e-300
        if kind == 4:  # near one-hot, in float32
            q = np.full(n, 1e-12, dtype=np.float32)
            q[3] = 1.0
        q = q / q.sum()
        level = rng.integers(0, 1 + kind % 3, size=n)
        log_w = np.round(rng.normal(size=n) * 3) / 2  # many ties: classes of one weight
        closed = luce_law(q, level, log_w, 2)
        quad = luce_law(q, level, log_w, 2, method="quadrature")
        assert closed.nodes == 0 and quad.nodes > 0
        assert np.abs(closed.law - quad.law).sum() <= closed.error + quad.error, kind
        assert closed.law[q == 0].sum() == 0.0 and closed.law.sum() == pytest.approx(1.0, abs=1e-13)
        reject = np.where(rng.random(n) < 0.3, rng.random(n), 0.0)
        marks = np.where(reject > 0, 0.0, rng.random(n))
        marks /= marks.sum()
        assert luce_hits(q, level, log_w, 2, reject, marks) == pytest.approx(
            luce_hits(q, level, log_w, 2, reject, marks, method="quadrature"), abs=1e-13
        )
    for kind in range(40):  # against every pair, ties and 1e-300 entries included
        q, level, log_w = random_rule(rng, 7, kind)
        log_w = np.round(log_w) if kind % 4 == 0 else log_w
        exact, _ = enumerated(q, level, np.exp(log_w), 2)
        assert np.abs(luce_law(q, level, log_w, 2).law - exact).sum() <= 1e-15
    monkeypatch.setattr(luce_module, "PAIR_WEIGHTS", 3)  # more weights than that in a level: the quadrature
    q, level, log_w = random_rule(rng, 7, 1)
    assert luce_law(q, np.zeros(7, dtype=int), log_w, 2).nodes > 0
    with pytest.raises(ValueError, match="method must be"):
        luce_law(q, level, log_w, 2, method="exact")


def test_degenerate_supports_and_bad_input():
    """k = 1 selects q; a support of exactly k is drafted whole; the top level shares by weight."""
    q = np.array([0.5, 0.0, 0.5])
    np.testing.assert_allclose(luce_law(q, [0, 0, 0], [0.0, 0.0, 0.0], 1).law, q)
    np.testing.assert_allclose(luce_law(q, [0, 0, 0], [0.0, 0.0, np.log(3.0)], 2).law, [0.25, 0.0, 0.75])
    np.testing.assert_allclose(luce_law(q, [0, 0, 1], [0.0, 0.0, 5.0], 2).law, [1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="at least k"):
        luce_law(q, [0, 0, 0], [0.0, 0.0, 0.0], 3)
    with pytest.raises(ValueError, match="finite"):
        luce_law(q, [0, 0, 0], [np.inf, 0.0, 0.0], 2)


def test_quadrature_bound_and_steps():
    """The default step keeps the bound below 1e-13 and shrinks with k; the bound falls with the step."""
    steps = [default_step(k) for k in range(1, 9)]
    assert steps == sorted(steps, reverse=True)
    assert all(quadrature_error(h, k) <= 1e-13 for k, h in enumerate(steps, start=1))
    assert quadrature_error(0.5, 3) > quadrature_error(0.25, 3) > quadrature_error(0.2, 3)


def test_levels_from_tight_prefixes():
    order, slack = np.array([3, 1, 0, 2]), np.array([0.0, 0.0, 0.2, 0.0, 0.0])
    assert levels_of(order, slack).tolist() == [1, 1, 2, 0]  # cuts after the 1st and the 3rd token


def test_select_kernel():
    """Highest level first, then by weight; never a draft of weight zero relative to its level."""
    level = torch.tensor([[0, 1, 0, 0]])
    log_w = torch.tensor([[0.0, 50.0, -800.0, np.log(3.0)]], dtype=torch.float64)
    drafts = torch.tensor([[1, 2, 3], [1, 0, 3], [1, 2, 2]])
    u = torch.tensor([0.999, 0.2, 0.3], dtype=torch.float64)
    assert luce_select(level, log_w, drafts, u).tolist() == [3, 0, 2]


# -- the solver and the verifier --------------------------------------------------------------------------

EXTREME = [  # entries spanning 1e-300..1, one-hot rows, ties, disjoint supports, p = q
    (np.array([1.0, 0.0, 0.0, 0.0, 0.0]), np.array([1e-300, 0.5, 0.25, 0.25 - 1e-300, 0.0])),
    (np.array([0.5, 0.5, 0.0, 0.0, 0.0]), np.array([0.0, 0.0, 0.4, 0.3, 0.3])),
    (np.array([1e-300, 1.0 - 1e-300, 0.0, 0.0, 0.0]), np.array([0.2, 0.2, 0.2, 0.2, 0.2])),
    (np.array([0.0, 1.0, 0.0, 0.0, 0.0]), np.array([1.0 - 3e-16, 1e-16, 1e-16, 1e-16, 0.0])),
    (np.array([0.2, 0.2, 0.2, 0.2, 0.2]), np.array([0.2, 0.2, 0.2, 0.2, 0.2])),
    (np.array([0.1, 0.2, 0.3, 0.4, 0.0]), np.array([0.1, 0.2, 0.3, 0.4, 0.0])),
]


def cases(k, count, seed):
    """``count`` adversarial pairs (n = 5..6) with at least k positive draft entries (exactly k: the drafts
    are the whole support, 4-7 of them per k), then the extremes."""
    rng = np.random.default_rng(seed)
    out, kind = [], 0
    while len(out) < count:
        p, q = adversarial_pair(rng, 5 + kind % 2, kind)
        kind += 1
        if np.count_nonzero(q) >= k:
            out.append((p, q))
    return out + [(p, q) for p, q in EXTREME if np.count_nonzero(q) >= k]


def output_law(p, q, k, rule):
    """Law of the emitted token and the acceptance, with the rule's exact shares and its computed law."""
    law = rule.law
    gain = np.maximum(p - law, 0.0)
    residual = gain / gain.sum() if gain.sum() > 0 else p
    out, accepted = np.zeros(p.size), 0.0
    for x, prob in mdsd.WithoutReplacement(k).joint(q).items():
        for z, s in shares(x, rule.level, np.exp(rule.log_weight)).items():
            a = min(1.0, p[z] / law[z]) if law[z] > 0 else 1.0
            out += prob * s * (1.0 - a) * residual
            out[z] += prob * s * a
            accepted += prob * s * (a + (1.0 - a) * residual[list(x)].sum())
    return out, accepted


@pytest.mark.parametrize(("k", "count"), [(2, 70), (3, 70), (4, 60)])
def test_verifier_output_law_and_acceptance_by_enumeration(k, count):
    """Output law = p to 1e-12 on adversarial pairs; acceptance() is the enumerated value and reaches
    α*_wor (LP) to RTOL relative, also where the solve stalls short of its stop (seed 43, pair 60: q
    one-hot to 1e-6; there the start accepts α*_wor, exactly, while its Σ min(F, p) is 0.16)."""
    v = OptimalVerifier(k, law="wor", flow_tuples=0)
    for p, q in cases(k, count, seed=40 + k):
        rule = v.luce(p, q)
        law, accepted = output_law(p, q, k, rule)
        np.testing.assert_allclose(law, p, rtol=0, atol=1e-12, err_msg=f"p={p} q={q}")
        assert v.acceptance(p, q) == pytest.approx(accepted, abs=1e-12), (p, q)
        best = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k), method="lp")
        assert best * (1.0 - luce_rule_module.RTOL) - 1e-9 <= accepted <= best + 1e-9, (p, q, rule.remaining)


def test_verifier_kernel_matches_a_slow_loop():
    """Batched rows and one pair shared by many tuples: the kernel's tokens equal a plain loop's under the
    same uniforms (Luce shares by draw_index, then accept or residual)."""
    gen = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(4, 9, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(4, 9, generator=gen, dtype=torch.float64), -1)
    for k in (2, 3):
        v = OptimalVerifier(k, law="wor", flow_tuples=0)
        drafts = v.draft(q.expand(50, 4, 9), gen)
        u = mdsd.verifiers.draw_uniforms((50, 4), v._uniform_columns(), gen)
        tokens, _ = v.verify_with(p, q, drafts, u)
        for row in range(4):
            rule = v.luce(p[row].numpy(), q[row].numpy())
            for b in range(50):
                x = drafts[b, row].tolist()
                pick = shares(x, rule.level, np.exp(rule.log_weight))
                order = [z for z in x if z in pick]
                z = order[draw_index(np.array([pick[z] for z in order]), float(u.accept[b, row, 0]))]
                a = min(1.0, float(p[row, z]) / rule.law[z])
                ur = float(u.residual[b, row])
                want = (
                    z
                    if ur < a
                    else draw_index(np.maximum(p[row].numpy() - rule.law, 0.0), (ur - a) / (1 - a))
                )
                assert int(tokens[b, row]) == want


def accepted_first_term(p, rule):
    """Σ min(F, p) of a rule's (fine) law: the solver's objective."""
    return float(np.minimum(rule.law, p).sum())


@pytest.mark.parametrize("k", [2, 3, 4])
def test_the_returned_weights_accept_at_least_as_much_as_the_start(k):
    """Best-iterate guarantee: on adversarial pairs (1e-300 entries, exact zeros, one-hot rows, ties, p = q,
    disjoint supports) the solved rule's Σ min(F, p) is at least the start's (0 steps), cold and warm."""
    rng = np.random.default_rng(70 + k)
    for p, q in cases(k, 30, seed=60 + k):
        noise = rng.normal(size=q.size) * 5.0  # a poor warm start
        for init in (None, noise):
            start = luce_rule(p, q, k, iterations=0, init=init)
            solved = luce_rule(p, q, k, init=init)
            assert accepted_first_term(p, solved) >= accepted_first_term(p, start) - 1e-12, (p, q)
            assert start.iterations == 0 and solved.remaining <= start.remaining + 1e-12


def test_a_warm_start_keeps_the_exact_law_and_reaches_the_cold_acceptance():
    """Warm-started from a neighbouring pair's weights (or from the same pair's), the rule's law is still
    its exact law (the output law = p by enumeration) and its acceptance within 1e-4 of the cold solve's;
    restarting from the cold solution stops at once."""
    rng, k = np.random.default_rng(8), 3
    for _ in range(6):
        p, q = rng.dirichlet(np.full(6, 0.5)), rng.dirichlet(np.full(6, 0.5))
        near_p, near_q = (x * np.exp(0.3 * rng.normal(size=6)) for x in (p, q))
        previous = luce_rule(near_p / near_p.sum(), near_q / near_q.sum(), k)
        cold = luce_rule(p, q, k)
        warm = luce_rule(p, q, k, init=previous.log_weight)
        again = luce_rule(p, q, k, init=cold.log_weight)
        for rule in (warm, again):
            law, accepted = output_law(p, q, k, rule)
            np.testing.assert_allclose(law, p, rtol=0, atol=1e-12)
            exact, _ = enumerated(q, rule.level, np.exp(rule.log_weight), k)
            assert np.abs(rule.law - exact).sum() <= rule.error
            assert accepted >= output_law(p, q, k, cold)[1] - 1e-4
        if cold.remaining <= luce_rule_module.RTOL * np.minimum(cold.target, p).sum():
            assert again.iterations == 0  # its start already passes the stop


def test_the_verifier_warm_starts_from_its_last_pair_only_when_asked(monkeypatch):
    """warm_start=True hands the last rule's weights to the next pair's solve; off (the default), every
    solve starts cold, so a pair's rule is a function of the pair alone. Both are lossless."""
    rng, k, starts = np.random.default_rng(3), 2, []
    pairs = [(rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))) for _ in range(3)]

    def spy(p, q, k, init=None):
        starts.append(init)
        return luce_rule(p, q, k, init=init)

    monkeypatch.setattr(verifier_module, "luce_rule", spy)
    for warm_start in (True, False):
        v = OptimalVerifier(k, law="wor", flow_tuples=0, warm_start=warm_start)
        rules = [v.luce(p, q) for p, q in pairs]
        for (p, q), rule in zip(pairs, rules, strict=True):
            np.testing.assert_allclose(output_law(p, q, k, rule)[0], p, rtol=0, atol=1e-12)
        assert starts[0] is None
        for init, previous in zip(starts[1:], rules[:-1], strict=True):
            assert init is previous.log_weight if warm_start else init is None
        starts.clear()
    with pytest.raises(TypeError, match="warm_start"):
        OptimalVerifier(k, law="wor", warm_start="yes")


def test_the_solver_stops_once_the_acceptance_left_to_buy_is_below_rtol():
    """The stop: R = min(α* − A, Σ_u (F*(u) − F_θ(u))+) <= RTOL · α*. A looser rtol stops sooner, a
    tighter one later, and each stopped rule's Σ min(F, p) is within its rtol (plus the coarse law's
    rounding) of α*_wor; rtol = 0 runs to the stall or the cap."""
    rng, k = np.random.default_rng(0), 3
    z = 3.0 * rng.standard_normal(200)
    p, q = np.exp(z - z.max()), np.exp(z + rng.standard_normal(200) - z.max())
    p, q = p / p.sum(), q / q.sum()
    best = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k))
    rules = {rtol: luce_rule(p, q, k, rtol=rtol) for rtol in (1e-2, 1e-5, 0.0)}
    steps = [rules[rtol].iterations for rtol in (1e-2, 1e-5, 0.0)]
    assert steps == sorted(steps) and steps[0] < steps[2], steps
    for rtol, rule in rules.items():
        if rtol:
            assert rule.remaining <= rtol * best
            assert best - accepted_first_term(p, rule) <= rtol * best + 1e-9
    assert luce_rule_module.remaining(1.0, 0.75, np.array([0.5, 0.5]), np.array([0.375, 0.625])) == 0.125
    assert luce_rule_module.remaining(
        1.0, 0.99, np.array([0.5, 0.5]), np.array([0.25, 0.75])
    ) == pytest.approx(0.01)


def test_bad_solver_arguments():
    p, q = np.array([0.2, 0.3, 0.5]), np.array([0.5, 0.3, 0.2])
    with pytest.raises(ValueError, match="rtol"):
        luce_rule(p, q, 2, rtol=-1.0)
    with pytest.raises(ValueError, match="iterations"):
        luce_rule(p, q, 2, iterations=-1)
    with pytest.raises(ValueError, match="init"):
        luce_rule(p, q, 2, init=np.zeros(4))


def test_the_host_reference_is_not_the_fallbacks_for_the_luce_rule():
    """The float64 reference replays the fallback's stream; for the Luce rule it refuses instead of
    answering with another rule's token."""
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    accept = np.full(4, 0.5)
    fallback = OptimalVerifier(2, law="wor", flow_tuples=0, wor_rule="fallback")
    assert fallback._reference(p, q, (0, 1), accept, 0.5) in range(4)
    with pytest.raises(ValueError, match="Luce"):
        OptimalVerifier(2, law="wor", flow_tuples=0)._reference(p, q, (0, 1), accept, 0.5)


def test_wor_rule_argument():
    assert OptimalVerifier(3, law="wor", wor_rule="fallback")._uniform_columns() == 7
    assert OptimalVerifier(3, law="wor")._uniform_columns() == 3
    with pytest.raises(ValueError, match="wor_rule"):
        OptimalVerifier(2, law="wor", wor_rule="flow")


class FirstDraftLuce(OptimalVerifier):
    """Deliberately wrong: selects the first draft (law q) but accepts against the Luce law F."""

    def _verify_luce(self, p, q, drafts, u):
        rows_p, rows_q = (x.reshape(-1, x.shape[-1]).double().numpy() for x in (p, q))
        rules = [self._luce(a / a.sum(), b / b.sum()) for a, b in zip(rows_p, rows_q, strict=True)]
        law = torch.as_tensor(np.stack([rule.law for rule in rules])).reshape(p.shape)
        return two_step(p, law, drafts[..., 0], u.residual)


@pytest.mark.slow
def test_sampler_at_full_vocabulary_passes_a_g_test_that_a_broken_variant_fails():
    """V = 151,936, k = 3, 10^5 draws: G-test of the emitted tokens against p at α = 10^-3 (bins with
    expected count < 5 pooled) and the acceptance within 4 standard errors of the exact value, which lies
    within 1e-3 of α*_wor (this synthetic q spreads half its mass over light tokens, whose weights the
    rule shares by bins; real pairs put far less there); seeded, so deterministic."""
    gen = torch.Generator().manual_seed(1)
    n = 151_936
    logits = 3 * torch.randn(n, generator=gen, dtype=torch.float64)
    p = torch.softmax(logits, 0)
    q = torch.softmax(logits + torch.randn(n, generator=gen, dtype=torch.float64), 0)
    v = mdsd.verifier("optimal", 3, law="wor")
    tokens, index = v.simulate(p, q, 100_000, seed=2)
    alpha = v.acceptance(p, q)
    best = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(3))
    assert best - 1e-3 <= alpha <= best + 1e-9
    rate = float((index >= 0).double().mean())
    assert g_test(tokens, p.numpy()) > ALPHA
    assert abs(rate - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / 100_000), (rate, alpha)
    broken = FirstDraftLuce(3, law="wor")
    broken._luce_cache = v._luce_cache  # the same pair's rule, solved once
    tokens, _ = broken.simulate(p, q, 100_000, seed=2)
    assert g_test(tokens, p.numpy()) < ALPHA


def test_a_pair_normalised_two_ways_shares_its_luce_rule():
    """acceptance (NumPy) and simulate (torch) normalise the same input by sums a few ulps apart: both use
    one rule, solved once; a pair 1e-9 away, or with one more zero, gets its own."""
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.full(60, 0.3)), np.r_[np.zeros(5), rng.dirichlet(np.full(55, 0.3))]
    p[[3, 9]], q[[8, 20]] = 1e-300, 1e-300  # tiny entries are compared relatively too
    p, q = p / p.sum(), q / q.sum()
    v = OptimalVerifier(3, law="wor")
    rule = v.luce(p, q)
    v.simulate(torch.from_numpy(p), torch.from_numpy(q), 10, seed=0)
    v.acceptance(p, q)
    assert v.luce(np.nextafter(p, 1.0), q) is rule
    assert v.luce(p * (1 + 1e-9 * rng.standard_normal(60)), q) is not rule
    rule = v.luce(p, q)
    tiny = p.copy()
    tiny[3] *= 2.0  # 1e-300 -> 2e-300: another pair, however small the entry
    assert v.luce(tiny, q) is not rule
    rule = v.luce(p, q)
    p[7] = 0.0
    assert v.luce(p / p.sum(), q) is not rule


def test_small_support_at_full_vocabulary_takes_the_luce_rule_not_a_dense_flow_table():
    """Regression: 30 drafted tokens in V = 151,936 at k = 3 are 24,360 tuples, each given a dense [V]
    selection vector by the flow path (29 GB); the Luce rule runs instead, exact and at α*_wor."""
    rng = np.random.default_rng(9)
    p, q = np.zeros(151_936), np.zeros(151_936)
    p[:40], q[10:40] = rng.dirichlet(np.ones(40)), rng.dirichlet(np.ones(30))
    v = mdsd.verifier("optimal", 3, law="wor")
    best = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(3))
    assert best - 1e-6 <= v.acceptance(p, q) <= best + 1e-9
