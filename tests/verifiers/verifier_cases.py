"""Random and adversarial (p, q) pairs for the verifier tests, and the (name, k) grid they run over."""

from __future__ import annotations

import numpy as np

from mdsd.verifiers import VERIFIERS, supports

# every verifier at every k it supports, up to 3
GRID = [(name, k) for name in VERIFIERS for k in (1, 2, 3) if supports(name, k)]


def _dirichlet(rng, n, alpha):
    x = rng.gamma(alpha, size=n)
    while x.sum() <= 0:
        x = rng.gamma(alpha, size=n)
    return x / x.sum()


def _softmax(z):
    z = np.exp(z - z.max())
    return z / z.sum()


def adversarial_pair(rng: np.random.Generator, n: int, kind: int) -> tuple[np.ndarray, np.ndarray]:
    """One pair of vectors [n]; ``kind`` cycles through the adversarial families below."""
    p, q = _dirichlet(rng, n, 0.7), _dirichlet(rng, n, 0.7)
    family = kind % 11
    if family == 1:  # q one-hot
        q = np.eye(n)[rng.integers(n)]
    elif family == 2:  # p one-hot
        p = np.eye(n)[rng.integers(n)]
    elif family == 3:  # p = q
        p = q.copy()
    elif family == 4 and n >= 2:  # disjoint supports
        cut = rng.integers(1, n)
        p = np.r_[_dirichlet(rng, cut, 1.0), np.zeros(n - cut)]
        q = np.r_[np.zeros(cut), _dirichlet(rng, n - cut, 1.0)]
    elif family == 5:  # ties in q (and often in p)
        q = rng.integers(1, 3, size=n).astype(float)
        q /= q.sum()
        p = rng.integers(0, 3, size=n).astype(float) + (np.arange(n) == 0)
        p /= p.sum()
    elif family == 6:  # q = 0 where p > 0
        q[rng.random(n) < 0.4] = 0.0
        if q.sum() == 0:
            q[0] = 1.0
        q /= q.sum()
    elif family == 7:  # low temperature: near one-hot, different argmax
        p = _softmax(rng.normal(size=n) * 30)
        q = _softmax(rng.normal(size=n) * 30)
    elif family == 8:  # near-one-hot q with tiny tails
        q = np.full(n, 1e-9)
        q[rng.integers(n)] = 1.0
        q /= q.sum()
    elif family == 9:  # sparse p
        p[rng.random(n) < 0.5] = 0.0
        if p.sum() == 0:
            p[-1] = 1.0
        p /= p.sum()
    elif family == 10:  # uniform q
        q = np.full(n, 1.0 / n)
    return p, q


def feasible(v, q: np.ndarray) -> bool:
    try:
        v.law.check(q)
    except ValueError:
        return False
    return True


def pairs_for(v, count: int, seed: int, sizes=(1, 2, 3, 4, 5, 6)) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` feasible pairs for verifier ``v`` (its law can draw k drafts from q)."""
    rng = np.random.default_rng(seed)
    out, kind = [], 0
    while len(out) < count:
        n = sizes[kind % len(sizes)] if kind % 3 else int(rng.choice(sizes))
        p, q = adversarial_pair(rng, n, kind // len(sizes) + kind)
        kind += 1
        if feasible(v, q):
            out.append((p, q))
    return out
