"""Lossless: the decoder's first two tokens follow the target's exact sequence law, for every verifier.

For a vocabulary of 12 the exact law of (t1, t2) at temperature T is enumerated by plain target
forwards, p_T(t1 | prompt) p_T(t2 | prompt, t1), and compared with 20,000 seeded decodes (one batch)
by Pearson's chi-square test at α = 1e-3 (cells with expected count < 5 pooled). The trees mix nodes
with 1, 2 and 3 children, so the walk visits single-draft nodes, multi-draft nodes and bonus tokens,
and accepted paths of every length occur. A deliberately broken verifier (a rejection resampled from
p instead of the residual) must fail the same test.
"""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tiny_lms import perturbed

from mdsd import VERIFIERS, Tree, TreeDecoder
from mdsd.verifiers import supports

ALPHA = 1e-3
DECODES = 20_000
PROMPT = [3, 1, 4]


def _tree(name):
    """The widest small tree the verifier supports (nodes with one child use the single-draft rule)."""
    if supports(name, 3):
        return Tree((0, 0, 0, 1, 1, 2))  # root: three children; node 1: two; node 2: one
    if supports(name, 2):
        return Tree((0, 0, 1, 1, 2))  # root and node 1: two children; node 2: one
    return Tree.chain(2)


@torch.no_grad()
def _exact_law(target, temperature):
    """P(t1, t2) [V, V] in float64 by enumeration."""
    first = target(torch.tensor([PROMPT])).logits[0, -1].double()
    V = first.shape[-1]
    seconds = target(torch.tensor([[*PROMPT, t] for t in range(V)])).logits[:, -1].double()
    return torch.softmax(first / temperature, -1)[:, None] * torch.softmax(seconds / temperature, -1)


def _p_value(dec, law, seed):
    outs = dec.generate_batch(torch.tensor([PROMPT] * DECODES), 2, torch.Generator().manual_seed(seed))
    V = law.shape[0]
    pairs = np.array([out.tokens.tolist() for out in outs])  # [DECODES, 2]
    counts = np.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V).astype(float)
    expected = law.numpy().ravel() * DECODES
    small = expected < 5
    obs, exp = counts[~small], expected[~small]
    if small.any():
        obs, exp = np.append(obs, counts[small].sum()), np.append(exp, expected[small].sum())
    accepted = np.mean([out.accepted_per_step[0] for out in outs])
    return chisquare(obs, exp).pvalue, accepted


@pytest.mark.parametrize("temperature", [0.7, 1.0])
@pytest.mark.parametrize("name", VERIFIERS)
def test_first_two_tokens_follow_the_target_law(pair, name, temperature):
    target, draft = pair
    dec = TreeDecoder(target, draft, _tree(name), verifier=name, temperature=temperature)
    p_value, accepted = _p_value(dec, _exact_law(target, temperature), seed=17)
    assert accepted > 0.2  # drafts are accepted often, so multi-token steps are exercised
    assert p_value > ALPHA


class _ResampleFromP:
    """Broken on purpose: after a rejection it draws from p instead of the residual."""

    def __init__(self, inner):
        self.inner = inner

    def draft(self, q, generator):
        return self.inner.draft(q, generator)

    def verify(self, p, q, drafts, generator):
        tokens, index = self.inner.verify(p, q, drafts, generator)
        fresh = torch.multinomial(p, 1, generator=generator).squeeze(-1)
        return torch.where(index < 0, fresh, tokens), index


def test_broken_verifier_fails_the_test(pair):
    target, _ = pair
    draft = perturbed(target, 1.0, seed=2)  # a looser draft: more rejections for the bug to act on
    dec = TreeDecoder(target, draft, _tree("rrs"), verifier="rrs", temperature=1.0)
    dec.verifiers = {k: _ResampleFromP(v) for k, v in dec.verifiers.items()}
    p_value, _ = _p_value(dec, _exact_law(target, 1.0), seed=17)
    assert p_value < ALPHA
