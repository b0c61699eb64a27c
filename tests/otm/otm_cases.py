"""Shared OTM test material: random and adversarial (p, q, law) instances, brute force, certificate checks.

The brute force is independent of every solver: it enumerates the law's exact joint (mdsd.laws) and
minimises p(A) + 1 − Q(set(x̄) ⊆ A) over all 2^n token subsets (MATH.md §1, Hu et al. 2025).
"""

from __future__ import annotations

import itertools

import numpy as np

import mdsd
from mdsd.laws import DraftLaw

LAW_NAMES = ("iid", "without_replacement", "hub", "greedy", "topk", "joint")


def random_vector(rng: np.random.Generator, n: int) -> np.ndarray:
    """A probability vector from a mix of shapes: flat, peaked, sparse, integer-valued (ties)."""
    kind = rng.integers(5)
    if kind == 0:
        v = rng.dirichlet(np.ones(n))
    elif kind == 1:
        v = rng.dirichlet(np.full(n, 0.3))
    elif kind == 2:
        v = rng.integers(0, 6, n).astype(float)  # ties and exact zeros
    elif kind == 3:
        v = rng.dirichlet(np.ones(n)) * (rng.random(n) < 0.6)
    else:
        v = np.zeros(n)
        v[rng.integers(n)] = 1.0  # one-hot
    v[v < 1e-6] = 0.0  # no denormal-scale mass: exact enumeration stays well conditioned
    if v.sum() == 0:
        v[rng.integers(n)] = 1.0
    return v / v.sum()


def random_joint(rng: np.random.Generator, n: int, k: int) -> mdsd.Joint:
    """A sparse Joint law: a handful of random ordered k-tuples (repeats allowed) with random weights."""
    size = int(rng.integers(1, 7))
    table: dict[tuple[int, ...], float] = {}
    for _ in range(size):
        x = tuple(int(t) for t in rng.integers(0, n, k))
        table[x] = table.get(x, 0.0) + float(rng.random() + 0.05)
    total = sum(table.values())
    return mdsd.Joint({x: w / total for x, w in table.items()})


def make_law(name: str, k: int, rng: np.random.Generator, n: int) -> DraftLaw:
    if name == "joint":
        return random_joint(rng, n, k)
    return mdsd.otm.law_from_name(name, k)


def instance(rng: np.random.Generator, name: str, max_n: int = 7, max_k: int = 4, max_tuples: int = 400):
    """One feasible (p, q, law) for law ``name``: n <= max_n, k <= max_k, at most max_tuples tuples."""
    while True:
        n = int(rng.choice(np.arange(2, max_n + 1), p=_size_weights(max_n)))
        k = 2 if name == "hub" else int(rng.integers(1, max_k + 1))
        if n**k > max_tuples and name in ("iid", "without_replacement"):
            continue
        q = random_vector(rng, n)
        p = random_vector(rng, n)
        style = rng.integers(8)
        if style == 0:
            p = q.copy()  # p = q
        elif style == 1:  # disjoint supports where possible
            half = rng.permutation(n)
            p = random_vector(rng, n)
            p[half[: n // 2]] = 0.0
            q[half[n // 2 :]] = 0.0
            if p.sum() == 0 or q.sum() == 0:
                continue
            p, q = p / p.sum(), q / q.sum()
        law = make_law(name, k, rng, n)
        try:
            law.check(q)
        except ValueError:
            continue
        return p, q, law


def _size_weights(max_n: int) -> np.ndarray:
    w = 1.0 / np.arange(2, max_n + 1) ** 0.5  # favour small n: the coupling LP grows as n^k · n
    return w / w.sum()


def cut_value(p: np.ndarray, q: np.ndarray, law: DraftLaw, cut: tuple[int, ...]) -> float:
    """p(A) + 1 − Q(set(x̄) ⊆ A) from the law's enumerated joint."""
    inside = set(cut)
    contained = sum(w for x, w in law.joint(q).items() if set(x) <= inside)
    return float(sum(p[list(cut)])) + 1.0 - contained


def brute_force(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> float:
    """min over all 2^n subsets A of p(A) + 1 − Q(set(x̄) ⊆ A), from the enumerated joint."""
    n = p.size
    joint = law.joint(q)
    tuples = np.array(list(joint), dtype=np.int64).reshape(len(joint), law.k)
    weight = np.array(list(joint.values()))
    subsets = np.array(list(itertools.product([False, True], repeat=n)))  # [2^n, n]
    contained = subsets[:, tuples].all(axis=2) @ weight  # [2^n]
    return float((subsets @ p + 1.0 - contained).min())


def check_certificate(result: mdsd.OTMResult, p: np.ndarray, q: np.ndarray, law: DraftLaw, tol: float = 1e-9):
    """The cut proves the value, and the flow (if any) is feasible with total equal to the value."""
    assert result.status == "optimal", result.message
    assert abs(result.gap) <= tol, (result.value, result.cut_value)
    assert list(result.cut) == sorted(set(result.cut))
    assert abs(cut_value(p, q, law, result.cut) - result.cut_value) <= tol
    if result.flow is None:
        return
    joint = law.joint(q)
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
