"""Mixed nodes: the exact acceptance and optimum of a source's proposals beside drawn children.

The closed forms p(D) + α(p̃, q̃) are checked against the simplified LP on the enumerated joint law of the
drafted tuple, and the decoder's batched verification of mixed nodes against the exact output law.
"""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from mdsd.laws import IID, Greedy, Hub, WithoutReplacement
from mdsd.otm import solve_otm
from mdsd.sampling import block_masses
from mdsd.sources.mixed import mixed_acceptance, mixed_law, mixed_optimum, phantom_target, restricted_draft
from mdsd.verifiers import VERIFIERS, verifier


def _pairs(seed, count, n):
    """Random and adversarial (p, q): exact zeros, one-hot, ties, entries down to 1e-300."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        logits = rng.normal(size=(2, n)) * rng.choice([1.0, 5.0, 40.0])
        p, q = np.exp(logits - logits.max(1, keepdims=True))
        if i % 4 == 1:
            p[rng.random(n) < 0.4] = 0.0
        if i % 4 == 2:
            q[rng.integers(n)] = 1e-300
        if i % 5 == 3:
            p = np.eye(n)[rng.integers(n)]
        if i % 7 == 4:
            q[:2] = q[0]
        p = p / p.sum() if p.sum() > 0 else np.full(n, 1 / n)
        yield p, q / q.sum()


LAWS = [IID(1), IID(2), WithoutReplacement(2), Hub(), Greedy(2)]


@pytest.mark.parametrize("law", LAWS, ids=repr)
def test_the_mixed_optimum_equals_the_lp_on_the_joint_law(law):
    checked = 0
    rng = np.random.default_rng(1)
    for p, q in _pairs(hash(repr(law)) % 1000, 60, 5):
        fixed = list(rng.choice(5, size=rng.integers(1, 3), replace=False))
        q_rest = q.copy()
        q_rest[fixed] = 0
        if np.count_nonzero(q_rest) < law.min_support():
            continue
        lp = solve_otm(p, q, mixed_law(q, fixed, law), method="lp").value
        assert abs(mixed_optimum(p, q, fixed, law) - lp) < 1e-9
        checked += 1
    assert checked >= 40


@pytest.mark.parametrize("name", VERIFIERS)
def test_every_verifier_at_a_mixed_node_is_at_most_the_optimum(name):
    for p, q in _pairs(7, 40, 5):
        v = verifier(name, 1 if name == "single" else 2)
        fixed = [int(np.argmax(p))]
        q_rest = restricted_draft(q, fixed) if q[[i for i in range(5) if i not in fixed]].sum() > 0 else None
        if q_rest is None or np.count_nonzero(q_rest) < v.law.min_support():
            continue
        got = mixed_acceptance(v, p, q, fixed)
        best = mixed_optimum(p, q, fixed, v.law)
        assert got <= best + 1e-12
        if name in ("spechub", "greedy", "topk"):  # optimal for their laws, hence for the mixed ones
            assert abs(got - best) < 1e-12


def test_phantom_target_is_a_distribution_with_the_mass_of_d_on_one_token():
    p = np.array([0.1, 0.0, 0.3, 0.6])
    t = phantom_target(p, [3, 1])
    assert t.tolist() == [0.1, 0.0, 0.3, 0.6] and abs(t.sum() - 1) < 1e-15
    assert phantom_target(p, [0, 2]).tolist() == [0.4, 0.0, 0.0, 0.6]
    with pytest.raises(ValueError, match="fixed"):
        phantom_target(p, [1, 1])
    with pytest.raises(ValueError, match="all its mass"):
        restricted_draft(np.array([1.0, 0, 0, 0]), [0])


class _Group:
    def __init__(self, fixed, k):
        self.fixed, self.k = fixed, k


class _Expansion:
    def __init__(self, q, valid, fixed, k):
        self.q, self.valid, self.group = q, valid, _Group(fixed, k)
        self.masses = block_masses(q)  # as the decoder's drafting hands them on


@pytest.mark.parametrize("name", ["rrs", "rrsw", "spechub", "greedy", "kseq", "topk"])
def test_the_decoders_mixed_verification_emits_p_and_accepts_at_the_exact_rate(name):
    from mdsd.tree.step import _verify_mixed

    rng = np.random.default_rng(3)
    n, fixed, draws = 6, [4, 1], 200_000
    logits = rng.normal(size=(2, n)) * 2
    p, q = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    v = verifier(name, 2)
    q_tilde = torch.tensor(restricted_draft(q, fixed), dtype=torch.float64).expand(draws, n)
    g = torch.Generator().manual_seed(5)
    drawn = v.draft(q_tilde, g)  # [draws, 2]
    drafts = torch.cat([torch.tensor(fixed).expand(draws, 2), drawn], dim=1)[:, None, :]  # [draws, 1, 4]
    e = _Expansion(q_tilde[:, None, :], torch.ones(draws, 1, 4, dtype=torch.bool), 2, 2)
    tok, idx = _verify_mixed(v, torch.tensor(p).expand(draws, 1, n), e, drafts, g)
    counts = np.bincount(tok.flatten().numpy(), minlength=n)
    assert chisquare(counts, p * draws).pvalue > 1e-3
    accepted = float((idx >= 0).double().mean())
    exact = mixed_acceptance(v, p, q, fixed)
    assert abs(accepted - exact) < 4 * np.sqrt(exact * (1 - exact) / draws) + 1e-9
    hit = drafts[:, 0, :].gather(1, idx.clamp(min=0)) == tok
    assert bool(hit[idx >= 0].all())  # the reported child holds the emitted token
