"""Seeded G-tests of the batched samplers: output law = p and acceptance = v.acceptance, at n = 16 and 1000.

Each test draws 2·10^5 (draft, verify) rounds with ``v.simulate`` and applies, at significance
α = 10^-3, a G-test of the emitted tokens against p (bins with expected count < 5 pooled) and a
z-test |â − α| < 4 standard errors of the acceptance. The seeds are fixed, so the outcome is
deterministic; a deliberately wrong verifier must fail the same check.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verifier_gtest import ALPHA, g_test

import mdsd
from mdsd.verifiers import RRSVerifier
from mdsd.verifiers.ops import take

SAMPLES = 200_000
STAT_GRID = [
    ("single", 1),
    ("rrs", 2),
    ("rrsw", 2),
    ("kseq", 2),
    ("spechub", 2),
    ("greedy", 2),
    ("topk", 2),
    ("optimal", 2),
]


def toy(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A related pair: q's logits are a noisy, flattened copy of p's."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=n) * 2.0
    p = np.exp(logits - logits.max())
    q = np.exp(0.7 * logits + rng.normal(size=n) - (0.7 * logits).max())
    return p / p.sum(), q / q.sum()


def check(v, p, q, claimed: float, seed: int) -> tuple[bool, str]:
    tokens, accepted = v.simulate(p, q, SAMPLES, seed)
    pvalue = g_test(tokens, p)
    rate = float((accepted >= 0).double().mean())
    se = np.sqrt(claimed * (1 - claimed) / SAMPLES)
    z = (rate - claimed) / se if se > 0 else (0.0 if rate == claimed else np.inf)
    return pvalue > ALPHA and abs(
        z
    ) < 4, f"G-test p = {pvalue:.3g}, acceptance {rate:.5f} vs {claimed:.5f} (z = {z:.2f})"


CASES = [(name, k, n) for name, k in STAT_GRID for n in (16, 1000)] + [
    ("rrsw", 3, 16),
    ("kseq", 4, 16),
    ("greedy", 3, 1000),
    ("rrs", 4, 1000),
]


@pytest.mark.parametrize(("name", "k", "n"), CASES)
def test_output_law_and_acceptance(name, k, n):
    v = mdsd.verifier(name, k)
    p, q = toy(n, seed=n)
    ok, message = check(v, p, q, v.acceptance(p, q), seed=k)
    assert ok, f"{name} k={k} n={n}: {message}"


class AcceptEveryDraft(RRSVerifier):
    """Deliberately wrong: always emits the first draft (claims RRS's acceptance)."""

    def _verify(self, rows):
        x = rows.drafts[..., 0]
        return x, torch.ones_like(x, dtype=torch.bool), x


class SkipResidualRenormalisation(RRSVerifier):
    """Deliberately wrong, subtly: after a rejection it keeps testing against p instead of p_{i+1}."""

    def _verify(self, rows):
        drafts = rows.drafts
        accept = rows.u.accept * take(rows.q, drafts) < take(rows.p, drafts)
        _, _, residual = super()._verify(rows)
        first = accept.int().argmax(-1, keepdim=True)
        return drafts.gather(-1, first)[..., 0], accept.any(-1), residual


@pytest.mark.parametrize("n", [16, 1000])
@pytest.mark.parametrize("wrong", [AcceptEveryDraft, SkipResidualRenormalisation])
def test_a_wrong_verifier_fails_the_same_check(wrong, n):
    v = wrong(2)
    p, q = toy(n, seed=n)
    ok, message = check(v, p, q, mdsd.verifier("rrs", 2).acceptance(p, q), seed=2)
    assert not ok, message
