"""The training losses equal the exact optima mdsd computes (dual scan and LP), on random and adversarial
pairs, and their gradients are those of the maximising prefix."""

import numpy as np
import pytest
import torch

import mdsd
from mdsd.drafters.losses import (
    kl_divergence,
    lump,
    optimal_acceptance_iid,
    optimal_acceptance_wor2,
    total_variation,
)


def _pairs(seed: int, n: int, rows: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Pairs with entries spanning 1e-300..1, exact zeros, one-hot rows, ties, p = q and disjoint supports."""
    gen = np.random.default_rng(seed)
    p = 10.0 ** gen.uniform(-300, 0, (rows, n)) * (gen.random((rows, n)) < 0.8)
    q = 10.0 ** gen.uniform(-300, 0, (rows, n)) * (gen.random((rows, n)) < 0.8)
    p[:, 0] += 1e-3  # no empty row
    q[:, -1] += 1e-3
    p[0], q[0] = np.eye(n)[0], np.eye(n)[0]  # one-hot, equal
    p[1], q[1] = np.eye(n)[0], np.eye(n)[-1]  # disjoint
    p[2] = q[2] = np.full(n, 1.0)  # ties everywhere, p = q
    p[3], q[3] = np.full(n, 1.0), gen.dirichlet(np.ones(n))
    p[4] = gen.dirichlet(np.full(n, 0.1))
    q[4] = p[4][::-1]
    return p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)


@pytest.mark.parametrize("n", [2, 3, 7, 40])
@pytest.mark.parametrize("seed", range(3))
def test_alpha_equals_the_exact_optimum(n, seed):
    p, q = _pairs(seed, n)
    P, Q = torch.tensor(p), torch.tensor(q)
    for k in (1, 2, 4):
        got = optimal_acceptance_iid(P, Q, k).numpy()
        want = np.array(
            [mdsd.optimal_acceptance(a, b, mdsd.IID(k), method="dual") for a, b in zip(p, q, strict=True)]
        )
        assert np.allclose(got, want, rtol=0, atol=1e-12), (k, np.abs(got - want).max())
    both = (q > 0).sum(1) >= 2  # two distinct drafts need two tokens of q
    got = optimal_acceptance_wor2(P[both], Q[both]).numpy()
    want = [
        mdsd.optimal_acceptance(a, b, mdsd.WithoutReplacement(2), method="dual")
        for a, b in zip(p[both], q[both], strict=True)
    ]
    assert np.allclose(got, want, rtol=0, atol=1e-12)


def test_alpha_with_one_draft_is_one_minus_tv_and_the_lp_agrees():
    p, q = _pairs(7, 5)
    P, Q = torch.tensor(p), torch.tensor(q)
    assert torch.allclose(optimal_acceptance_iid(P, Q, 1), 1 - total_variation(P, Q), atol=1e-14)
    want = [
        mdsd.optimal_acceptance(a, b, mdsd.IID(3), method="lp") for a, b in zip(p[:8], q[:8], strict=True)
    ]
    assert np.allclose(optimal_acceptance_iid(P[:8], Q[:8], 3).numpy(), want, atol=1e-9)


def test_alpha_gradient_is_the_maximising_prefixs():
    """d alpha / d q equals the finite difference where the maximising prefix is unique."""
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, 9, generator=gen, dtype=torch.float64), -1)
    z = torch.randn(6, 9, generator=gen, dtype=torch.float64, requires_grad=True)
    for loss in (lambda q: optimal_acceptance_iid(p, q, 4), optimal_acceptance_wor2.__get__(p)):
        (grad,) = torch.autograd.grad(loss(torch.softmax(z, -1)).sum(), z)
        h = 1e-7
        for i in range(9):
            bump = torch.zeros_like(z)
            bump[:, i] = h
            with torch.no_grad():
                fd = (loss(torch.softmax(z + bump, -1)) - loss(torch.softmax(z - bump, -1))) / (2 * h)
            assert torch.allclose(grad[:, i], fd, atol=1e-6), i


def test_kl_is_the_divergence_and_zero_at_p_equals_q():
    p, q = _pairs(3, 6)
    P, Q = torch.tensor(p), torch.tensor(q)
    logs = np.log(np.where(p > 0, p, 1)) - np.log(np.maximum(q, np.finfo(np.float64).tiny))
    want = np.where(p > 0, p * logs, 0).sum(1)
    assert np.allclose(kl_divergence(P, Q).numpy(), want, rtol=1e-12)
    assert torch.allclose(kl_divergence(P, P), torch.zeros(len(p), dtype=torch.float64), atol=1e-14)


def test_lump_puts_what_is_off_the_draft_vocabulary_in_one_cell():
    """Top-K tokens outside the draft vocabulary join the tail cell; q's cell is its mass off the rest; the
    lumped acceptance bounds the full one from above by at most min(p_lump, q_lump)."""
    gen = torch.Generator().manual_seed(1)
    V, K = 30, 6
    full_p = torch.softmax(3 * torch.randn(4, V, generator=gen, dtype=torch.float64), -1)
    vocab = torch.tensor([0, 2, 3, 5, 8, 13, 21, 29])
    slot = torch.full((V,), -1)
    slot[vocab] = torch.arange(len(vocab))
    log_q = torch.log_softmax(2 * torch.randn(4, len(vocab), generator=gen, dtype=torch.float64), -1)
    top = full_p.topk(K, -1)
    p, q = lump(top.indices, top.values, slot, log_q)
    assert torch.allclose(p.sum(-1), torch.ones(4, dtype=torch.float64)) and torch.allclose(
        q.sum(-1), torch.ones(4, dtype=torch.float64)
    )
    full_q = torch.zeros(4, V, dtype=torch.float64).index_copy(1, vocab, log_q.exp())
    exact = torch.minimum(full_p, full_q).sum(-1)
    lumped = 1 - total_variation(p, q)
    assert bool((lumped >= exact - 1e-14).all()) and bool(
        (lumped - exact <= torch.minimum(p[:, -1], q[:, -1]) + 1e-14).all()
    )
