"""Shared OTM test material: adversarial (p, q, law) instances, an independent brute force, certificates.

Instances are never smoothed: entries run from 1 down to 1e-300 (log-uniform draws, softmax at
temperatures down to 0.01, isolated decades such as 1e-8 and 1e-16), with exact zeros, one-hot vectors,
ties, p = q, disjoint supports and a one-hot target on the draft's least likely token.

The brute force is independent of every solver and of mdsd.laws' own formulas for the i.i.d. and
without-replacement laws: it enumerates the joint itself (each "1 − mass" summed from what remains) and
minimises p(A) + 1 − Q(set(x̄) ⊆ A) over all 2^n token subsets (docs/mathematics.md §1, Hu et al. 2025).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

import mdsd
from mdsd.laws import DraftLaw

LAW_NAMES = ("iid", "without_replacement", "hub", "greedy", "topk", "joint")
TEMPERATURES = (0.01, 0.03, 0.1, 0.3, 1.0)


def random_vector(rng: np.random.Generator, n: int) -> np.ndarray:
    """A probability vector from a mix of shapes, several spanning 1..1e-300; see the module docstring."""
    kind = rng.integers(10)
    if kind == 0:
        v = rng.dirichlet(np.ones(n))
    elif kind == 1:
        v = rng.dirichlet(np.full(n, 0.3))
    elif kind == 2:
        v = rng.integers(0, 6, n).astype(float)  # ties and exact zeros
    elif kind == 3:
        v = rng.dirichlet(np.ones(n)) * (rng.random(n) < 0.6)
    elif kind == 4:
        v = np.zeros(n)
        v[rng.integers(n)] = 1.0  # one-hot
    elif kind == 5:
        v = 10.0 ** rng.uniform(-300.0, 0.0, n)  # log-uniform over the whole float range
    elif kind == 6:
        z = rng.standard_normal(n) / rng.choice(TEMPERATURES)  # softmax at a low temperature
        v = np.exp(z - z.max())
    elif kind == 7:
        v = 10.0 ** -rng.choice([0.0, 0.0, 8.0, 16.0, 100.0, 200.0, 300.0], n)  # isolated decades, ties
    elif kind == 8:
        v = 10.0 ** rng.uniform(-300.0, -6.0, n) * (rng.random(n) < 0.7)  # near one-hot, zeros
        v[rng.integers(n)] = 1.0
    else:
        v = np.where(rng.random(n) < 0.5, 1e-200, 0.0)  # equal tiny masses beside one large
        v[rng.integers(n)] = 1.0
    if v.sum() == 0:
        v[rng.integers(n)] = 1.0
    return v / v.sum()


def random_joint(rng: np.random.Generator, n: int, k: int) -> mdsd.Joint:
    """A sparse Joint law: a handful of random ordered k-tuples (repeats allowed), weights down to 1e-300."""
    size = int(rng.integers(1, 7))
    table: dict[tuple[int, ...], float] = {}
    for _ in range(size):
        x = tuple(int(t) for t in rng.integers(0, n, k))
        table[x] = table.get(x, 0.0) + float(10.0 ** rng.uniform(-300.0, 0.0) if rng.random() < 0.3 else 1.0)
    total = sum(table.values())
    return mdsd.Joint({x: w / total for x, w in table.items()})


def make_law(name: str, k: int, rng: np.random.Generator, n: int) -> DraftLaw:
    if name == "joint":
        return random_joint(rng, n, k)
    return mdsd.law_from_name(name, k)


def random_pair(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(p, q): independent, p = q, disjoint supports, a permutation, or p one-hot on q's rarest token."""
    q, p = random_vector(rng, n), random_vector(rng, n)
    style = rng.integers(8)
    if style == 0:
        p = q.copy()
    elif style == 1:  # disjoint supports where possible
        half = rng.permutation(n)
        p[half[: n // 2]], q[half[n // 2 :]] = 0.0, 0.0
        if p.sum() == 0 or q.sum() == 0:
            return random_pair(rng, n)
        p, q = p / p.sum(), q / q.sum()
    elif style == 2:
        p = q[rng.permutation(n)]  # the same masses on other tokens: ties across p and q
    elif style == 3:
        p = np.eye(n)[np.flatnonzero(q)[np.argmin(q[q > 0])]]  # the draft's least likely token
    return p, q


def instance(rng: np.random.Generator, name: str, max_n: int = 8, max_k: int = 4, max_tuples: int = 500):
    """One feasible (p, q, law) for law ``name``: n <= max_n, k <= max_k, at most max_tuples draft tuples."""
    while True:
        n = int(rng.choice(np.arange(2, max_n + 1), p=_size_weights(max_n)))
        k = 2 if name == "hub" else int(rng.integers(1, max_k + 1))
        p, q = random_pair(rng, n)
        law = make_law(name, k, rng, n)
        try:
            law.check(q)
        except ValueError:
            continue
        if law.tuple_count(q) <= max_tuples:
            return p, q, law


def _size_weights(max_n: int) -> np.ndarray:
    w = 1.0 / np.arange(2, max_n + 1) ** 0.5  # favour small n: the coupling LP grows as n^k · n
    return w / w.sum()


def exact_joint(q: np.ndarray, law: DraftLaw) -> dict[tuple[int, ...], float]:
    """Q(x̄) for every tuple: enumerated here for i.i.d. and without-replacement drafts (the mass left
    after each draw summed over the tokens not drawn), from ``law.joint`` for the others (checked against
    a sequential enumerator in tests/test_laws.py)."""
    support = np.flatnonzero(q)
    if law.name == "iid":
        tuples = np.array(list(itertools.product(support, repeat=law.k))).reshape(-1, law.k)
        weights = q[tuples].prod(axis=1)
    elif law.name == "without_replacement":
        tuples = np.array(list(itertools.permutations(support, law.k))).reshape(-1, law.k)
        drawn = np.zeros((tuples.shape[0], q.size), dtype=bool)
        weights = np.ones(tuples.shape[0])
        for i in range(law.k):
            weights *= q[tuples[:, i]] / np.where(drawn, 0.0, q).sum(axis=1)
            drawn[np.arange(tuples.shape[0]), tuples[:, i]] = True
    else:
        return law.joint(q)
    return {tuple(int(t) for t in x): float(w) for x, w in zip(tuples, weights, strict=True) if w > 0}


def cut_value(p: np.ndarray, joint: dict[tuple[int, ...], float], cut: tuple[int, ...]) -> float:
    """p(A) + 1 − Q(set(x̄) ⊆ A) from an enumerated joint."""
    inside = set(cut)
    contained = math.fsum(w for x, w in joint.items() if set(x) <= inside)
    return float(sum(p[list(cut)])) + 1.0 - contained


def brute_force(p: np.ndarray, q: np.ndarray, law: DraftLaw, joint: dict | None = None) -> float:
    """min over all 2^n subsets A of p(A) + 1 − Q(set(x̄) ⊆ A), from the enumerated joint (or ``joint``)."""
    n = p.size
    by_set: dict[int, float] = {}
    for x, w in (exact_joint(q, law) if joint is None else joint).items():
        mask = sum(1 << t for t in set(x))
        by_set[mask] = by_set.get(mask, 0.0) + w
    masks = np.array(list(by_set), dtype=np.int64)
    weights = np.array(list(by_set.values()))
    subsets = np.arange(1 << n, dtype=np.int64)
    contained = ((masks[None, :] & ~subsets[:, None]) == 0) @ weights  # [2^n]
    members = (subsets[:, None] >> np.arange(n)) & 1  # [2^n, n]
    return float((members @ p + 1.0 - contained).min())


def expected_status(method: str, law: DraftLaw) -> str:
    """ "conjectured" only for the dual of a law whose dual rests on an unproven claim."""
    return "conjectured" if method == "dual" and not law.dual_form().proven else "optimal"


def check_certificate(
    result: mdsd.OTMResult,
    p: np.ndarray,
    q: np.ndarray,
    law: DraftLaw,
    tol: float = 1e-9,
    joint: dict | None = None,
):
    """The status is honest, the cut proves the value, and the flow (if any) is feasible with total equal
    to the value. ``joint``: :func:`exact_joint` of (q, law) if already at hand."""
    joint = exact_joint(q, law) if joint is None else joint
    assert result.status == expected_status(result.method, law), (result.status, result.basis)
    assert result.error <= 1e-12 if result.status == "conjectured" else result.error == 0.0
    assert abs(result.gap) <= tol, (result.value, result.cut_value)
    assert list(result.cut) == sorted(set(result.cut))
    assert abs(cut_value(p, joint, result.cut) - result.cut_value) <= tol
    if result.flow is None:
        return
    out_of_tuple: dict[tuple[int, ...], float] = {}
    into_token = np.zeros(p.size)
    for (x, y), mass in result.flow.items():
        assert y in x and mass >= -tol  # flow only along accepting edges, non-negative
        out_of_tuple[x] = out_of_tuple.get(x, 0.0) + mass
        into_token[y] += mass
    for x, mass in out_of_tuple.items():
        assert mass <= joint.get(x, 0.0) + tol  # capacity of source -> x̄ (conservation at x̄)
    assert np.all(into_token <= p + tol)  # capacity of y -> sink (conservation at y)
    assert abs(into_token.sum() - result.value) <= tol
