"""Draft laws: exact joints against an independent sequential enumerator, and seeded sampling tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from mdsd import IID, Greedy, Hub, Joint, TopK, WithoutReplacement

ALPHA = 1e-3  # false-alarm rate of each chi-square test below


def sequential_law(q: np.ndarray, k: int, next_draw) -> dict[tuple[int, ...], float]:
    """Enumerate a law defined as a sequential process: ``next_draw(q, drawn)`` gives the law of the
    next draft given those drawn so far. Independent of mdsd.laws' own formulas."""
    law: dict[tuple[int, ...], float] = {}

    def walk(drawn: tuple[int, ...], weight: float) -> None:
        if len(drawn) == k:
            law[drawn] = law.get(drawn, 0.0) + weight
            return
        step = next_draw(q, drawn)
        for token in np.flatnonzero(step > 0):
            walk((*drawn, int(token)), weight * step[token])

    walk((), 1.0)
    return law


def first_max(q: np.ndarray, excluded: tuple[int, ...] = ()) -> int:
    best = -1
    for i, w in enumerate(q):
        if i not in excluded and (best < 0 or w > q[best]):
            best = i
    return best


def one_hot(n: int, i: int) -> np.ndarray:
    e = np.zeros(n)
    e[i] = 1.0
    return e


def restricted(q: np.ndarray, excluded) -> np.ndarray:
    r = q.copy()
    r[list(excluded)] = 0.0
    return r / r.sum()


def iid_step(q, drawn):
    return q


def wor_step(q, drawn):
    return restricted(q, drawn)


def hub_step(q, drawn):
    hub = first_max(q)
    if not drawn:
        return q
    return one_hot(len(q), hub) if drawn[0] != hub else restricted(q, [hub])


def greedy_step(k):
    def step(q, drawn):
        if len(drawn) < k - 1:
            return one_hot(len(q), first_max(q, drawn))
        return restricted(q, drawn)

    return step


def topk_step(q, drawn):
    return one_hot(len(q), first_max(q, drawn))


CASES = [
    (IID(1), iid_step),
    (IID(3), iid_step),
    (WithoutReplacement(2), wor_step),
    (WithoutReplacement(3), wor_step),
    (Hub(), hub_step),
    (Greedy(1), greedy_step(1)),
    (Greedy(3), greedy_step(3)),
    (TopK(3), topk_step),
]


def random_qs(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    qs = [rng.dirichlet(np.full(n, a)) for a in (0.3, 1.0, 5.0)]
    ties = np.array([2.0, 2.0, 1.0, 1.0, 0.5, 0.5][:n])
    qs.append(ties / ties.sum())
    sparse = np.zeros(n)
    support = sorted({0, 2, n - 1})
    sparse[support] = rng.dirichlet(np.ones(len(support)))
    qs.append(sparse)
    return qs


@pytest.mark.parametrize("law,step", CASES, ids=lambda c: repr(c) if not callable(c) else "")
def test_joint_equals_sequential_process(law, step):
    rng = np.random.default_rng(0)
    for n in (3, 5, 6):
        for q in random_qs(rng, n):
            if np.count_nonzero(q) < law.min_support():
                continue  # infeasible k: covered by test_infeasible_k_is_a_value_error
            expected = sequential_law(q, law.k, step)
            got = law.joint(q)
            assert set(got) == {x for x, w in expected.items() if w > 0}
            for x, w in expected.items():
                assert got[x] == pytest.approx(w, abs=1e-12)
            assert sum(got.values()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("law,step", CASES, ids=lambda c: repr(c) if not callable(c) else "")
def test_sampling_matches_exact_joint(law, step):
    """Chi-square goodness of fit of 40,000 seeded draws against the exact joint (alpha = 1e-3)."""
    q = np.array([0.35, 0.25, 0.2, 0.15, 0.05])
    exact = law.joint(q)
    draws = law.sample(torch.tensor(q).expand(40_000, 5), torch.Generator().manual_seed(1))
    assert draws.shape == (40_000, law.k) and draws.dtype == torch.long
    counts: dict[tuple[int, ...], int] = {}
    for row in map(tuple, draws.tolist()):
        counts[row] = counts.get(row, 0) + 1
    assert set(counts) <= set(exact), "sampled a tuple the law gives probability 0"
    if len(exact) == 1:
        return
    keys = sorted(exact)
    observed = np.array([counts.get(x, 0) for x in keys])
    expected = np.array([exact[x] for x in keys]) * observed.sum()
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_sampling_test_catches_the_wrong_law():
    """The chi-square test above has power: i.i.d. draws fail against the without-replacement law."""
    q = np.array([0.35, 0.25, 0.2, 0.15, 0.05])
    exact = WithoutReplacement(2).joint(q)
    draws = IID(2).sample(torch.tensor(q).expand(40_000, 5), torch.Generator().manual_seed(1))
    rows = [tuple(r) for r in draws.tolist() if r[0] != r[1]]  # even conditioned on distinct tokens
    keys = sorted(exact)
    observed = np.array([sum(1 for r in rows if r == x) for x in keys])
    expected = np.array([exact[x] for x in keys]) * observed.sum()
    assert stats.chisquare(observed, expected).pvalue < ALPHA


@pytest.mark.parametrize("law", [IID(2), WithoutReplacement(2), Hub(), Greedy(2), TopK(2)], ids=repr)
def test_sampling_is_batched_per_row(law):
    q = torch.tensor([[[0.0, 0.5, 0.5, 0.0], [0.7, 0.0, 0.0, 0.3]]] * 3, dtype=torch.float16)
    draws = law.sample(q, torch.Generator().manual_seed(0))
    assert draws.shape == (3, 2, 2)
    assert set(draws[:, 0].flatten().tolist()) <= {1, 2}
    assert set(draws[:, 1].flatten().tolist()) <= {0, 3}


def test_ties_break_towards_lower_index():
    q = np.array([0.1, 0.3, 0.3, 0.3])
    assert all(x[0] == 1 or x[1] == 1 for x in Hub().joint(q))
    assert TopK(2).joint(q) == {(1, 2): 1.0}
    assert torch.equal(TopK(2).sample(torch.tensor(q)), torch.tensor([1, 2]))
    assert set(Greedy(3).joint(q)) == {(1, 2, 3), (1, 2, 0)}


def test_sampling_does_not_mutate_input():
    q = torch.tensor([0.5, 0.3, 0.2])
    before = q.clone()
    for law in (IID(2), WithoutReplacement(2), Hub(), Greedy(2), TopK(2)):
        law.sample(q, torch.Generator().manual_seed(0))
    assert torch.equal(q, before)


def test_joint_law_table():
    law = Joint({(0, 1): 0.25, (2, 2): 0.75})
    assert law.k == 2
    assert law.joint([0.2, 0.3, 0.5]) == {(0, 1): 0.25, (2, 2): 0.75}
    draws = law.sample(torch.full((20_000, 3), 1 / 3), torch.Generator().manual_seed(0))
    share = (draws == torch.tensor([2, 2])).all(dim=-1).double().mean().item()
    assert abs(share - 0.75) < 4 * np.sqrt(0.75 * 0.25 / 20_000)


@pytest.mark.parametrize(
    "table,match",
    [
        ({}, "non-empty"),
        ({(0, 1): 0.5, (1,): 0.5}, "one length"),
        ({(0, -1): 1.0}, "non-negative integer"),
        ({(0, 1): float("nan")}, "finite"),
        ({(0, 1): 0.6}, "sum to 1"),
    ],
)
def test_joint_law_rejects_bad_tables(table, match):
    with pytest.raises(ValueError, match=match):
        Joint(table)


def test_joint_law_outside_vocabulary():
    with pytest.raises(ValueError, match="vocabulary"):
        Joint({(0, 5): 1.0}).joint([0.5, 0.5])


@pytest.mark.parametrize(
    "law,q",
    [
        (WithoutReplacement(3), [0.5, 0.5, 0.0]),
        (Greedy(3), [0.5, 0.5, 0.0]),
        (Hub(), [1.0, 0.0, 0.0]),
        (TopK(4), [0.5, 0.3, 0.2]),
    ],
    ids=repr,
)
def test_infeasible_k_is_a_value_error(law, q):
    with pytest.raises(ValueError, match="q has"):
        law.joint(q)
    with pytest.raises(ValueError, match="q has"):
        law.sample(torch.tensor(q))


@pytest.mark.parametrize("k", [0, -1])
def test_k_must_be_positive(k):
    with pytest.raises(ValueError, match="k must be >= 1"):
        IID(k)


def test_k_must_be_an_integer():
    with pytest.raises(TypeError, match="k must be an integer"):
        WithoutReplacement(2.0)
