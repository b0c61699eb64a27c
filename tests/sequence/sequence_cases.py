"""Random and adversarial tiny sequence-model pairs for the sequence-level tests, and shared oracles."""

from __future__ import annotations

import itertools

import numpy as np
import torch

from mdsd.sequence import SequenceModel, toy_sequence_pair
from mdsd.sequence.models import prefixes

FAMILIES = (
    "toy",
    "toy_cold",
    "context_free",
    "equal",
    "one_hot",
    "zeros",
    "disjoint",
    "extreme",
    "ties",
    "cold_close",
    "cold_tail",
)


def _row(rng: np.random.Generator, n: int, family: str) -> np.ndarray:
    """One next-token law [n] of the given family (never smoothed: exact zeros and 1e-300 stay)."""
    if family == "one_hot":
        return np.eye(n)[rng.integers(n)]
    if family == "cold_tail":  # one token and a tail of 1e-300 down to subnormals (a real pair at T << 1)
        v = 10.0 ** rng.uniform(-323, -300, n)
        v[rng.integers(n)] = 1.0
        return v / v.sum()
    if family == "zeros":
        v = rng.dirichlet(np.ones(n)) * (rng.random(n) < 0.6)
    elif family == "extreme":
        v = 10.0 ** rng.uniform(-300, 0, n)
    elif family == "ties":
        v = rng.integers(0, 3, n).astype(float)
    else:
        v = rng.dirichlet(np.full(n, 0.5))
    if v.sum() == 0:
        v[rng.integers(n)] = 1.0
    return v / v.sum()


def _support(rng: np.random.Generator, v: np.ndarray, need: int) -> np.ndarray:
    """``v`` with at least ``need`` tokens of positive mass (a draft law may need k distinct tokens)."""
    zeros = np.flatnonzero(v == 0)
    missing = need - (v.size - zeros.size)
    if missing > 0:
        v = v.copy()
        v[rng.choice(zeros, missing, replace=False)] = rng.random(missing) + 0.1
        v /= v.sum()
    return v


def random_pair(
    rng: np.random.Generator, n: int, depth: int, family: str, min_support: int = 1
) -> tuple[SequenceModel, SequenceModel]:
    """A (target, draft) pair covering prefixes of length <= depth; every draft row has at least
    ``min_support`` tokens with positive mass."""
    if family in ("toy", "toy_cold", "context_free", "cold_close"):
        temperature = {"toy": rng.choice([0.1, 0.3, 1.0]), "toy_cold": 1e-3, "context_free": 0.3}.get(family)
        similarity = float(rng.random())
        if family == "cold_close":  # target and draft nearly agree, both nearly one-hot (real pairs, T << 1)
            temperature, similarity = rng.choice([1e-3, 2e-3, 1e-2]), float(rng.choice([1.0, 0.99, 0.95]))
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        return toy_sequence_pair(
            n, depth, float(temperature), similarity, gen, context_free=family == "context_free"
        )
    target, draft = {}, {}
    for u in prefixes(n, depth):
        target[u] = _row(rng, n, family)
        if family == "equal":
            draft[u] = _support(rng, target[u], min_support)
            target[u] = draft[u]
        elif family == "disjoint" and n >= 2:
            cut = int(rng.integers(1, n))
            target[u] = np.r_[rng.dirichlet(np.ones(cut)), np.zeros(n - cut)]
            draft[u] = _support(rng, np.r_[np.zeros(cut), rng.dirichlet(np.ones(n - cut))], min_support)
        else:
            draft[u] = _support(rng, _row(rng, n, family), min_support)
    return SequenceModel.from_table(target), SequenceModel.from_table(draft)


def one_step_error(target: SequenceModel, law: dict, depth: int, context: tuple[int, ...] = ()) -> float:
    """max_y |Σ_m a(y_1..y_{m+1}) P(y_{m+2..} | y_1..y_{m+1}) − P(y)| over y of length depth + 1: zero iff
    the emitted string followed by the target's continuation has the target's law (one lossless step)."""
    worst = 0.0
    for y in itertools.product(range(target.n), repeat=depth + 1):
        mixed = sum(
            law.get(y[: m + 1], 0.0) * target.prob(y[m + 1 :], context + y[: m + 1]) for m in range(depth + 1)
        )
        worst = max(worst, abs(mixed - target.prob(y, context)))
    return worst


def draft_batch(
    target: SequenceModel, draft: SequenceModel, tree, laws: dict, rows: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rows`` drafted trees, each node's children drawn by ``laws[node]``'s sampler from q(· | path):
    (p at every node [B, N, n], q at every internal node [B, M, n], node tokens [B, N]), float64."""
    N, n = tree.num_nodes, target.n
    internal = np.flatnonzero(tree.branching > 0)
    tokens = torch.zeros(rows, N, dtype=torch.long)
    paths = [[()] * N for _ in range(rows)]
    for u in internal:  # breadth-first: a parent's token is drawn before its children
        q = torch.from_numpy(np.stack([draft(paths[b][u]) for b in range(rows)]))
        kids = tree.children[u]
        drawn = laws[int(u)].sample(q, gen)  # [B, k]
        tokens[:, kids] = drawn
        for b in range(rows):
            for c, x in zip(kids, drawn[b].tolist(), strict=True):
                paths[b][c] = (*paths[b][u], x)
    p = torch.from_numpy(np.stack([[target(paths[b][u]) for u in range(N)] for b in range(rows)]))
    q = torch.from_numpy(np.stack([[draft(paths[b][u]) for u in internal] for b in range(rows)]))
    return p.reshape(rows, N, n), q.reshape(rows, internal.size, n), tokens


def emitted_strings(tree, tokens: torch.Tensor, accepted: torch.Tensor, next_token: torch.Tensor) -> list:
    """The string each row emits: the tokens on the path root -> accepted node, then the next token."""
    out = []
    for b in range(tokens.shape[0]):
        path = np.flatnonzero(tree.ancestors[int(accepted[b])])[1:]  # breadth-first: ancestors in order
        out.append((*tokens[b, path].tolist(), int(next_token[b])))
    return out


def chi_square(samples: list, law: dict, min_expected: float = 5.0) -> float:
    """p-value of Pearson's test of ``samples`` against ``law`` (0 if any sample has probability 0 under
    it); cells expecting fewer than ``min_expected`` draws are pooled into one, dropped if the pool itself
    expects fewer."""
    from scipy.stats import chisquare

    count: dict = {}
    for s in samples:
        count[s] = count.get(s, 0) + 1
    if any(law.get(s, 0.0) == 0.0 for s in count):
        return 0.0
    n = len(samples)
    big = [s for s, w in law.items() if w * n >= min_expected]
    observed = [count.get(s, 0) for s in big]
    expected = [law[s] * n for s in big]
    rest_o, rest_e = n - sum(observed), n - sum(expected)
    if rest_e >= min_expected:
        observed.append(rest_o)
        expected.append(rest_e)
    else:
        expected = [e * sum(observed) / sum(expected) for e in expected]
    return float(chisquare(observed, expected).pvalue)
