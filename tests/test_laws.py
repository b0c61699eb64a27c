"""Draft laws: exact joints against an independent sequential enumerator, and seeded sampling tests."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from scipy import stats

import mdsd
import mdsd.laws
from mdsd import IID, Greedy, Hub, Joint, TopK, WithoutReplacement
from mdsd.laws import DraftLaw, law_from_name, law_names, register, supports

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


# ----- the registry -----


def test_registry_builds_every_law_by_name_and_alias():
    assert law_names() == ("iid", "without_replacement", "hub", "greedy", "topk")
    assert law_from_name("iid", 3) == IID(3)
    assert law_from_name("without_replacement", 2) == law_from_name("wor", 2) == WithoutReplacement(2)
    assert law_from_name("hub", 2) == Hub()
    assert law_from_name("greedy", 4) == Greedy(4) and law_from_name("topk", 1) == TopK(1)
    assert supports("hub", 2) and not supports("hub", 3) and supports("wor", 7)


@pytest.mark.parametrize(
    "name, k, error, match",
    [
        ("beam", 2, ValueError, "law must be one of iid, without_replacement \\(wor\\), hub"),
        ("hub", 3, ValueError, "the hub law has k = 2 drafts; got k = 3"),
        ("iid", 0, ValueError, "k must be >= 1"),
        ("greedy", 2.0, TypeError, "k must be an integer"),
    ],
)
def test_registry_refuses_unknown_names_and_unsupported_k(name, k, error, match):
    with pytest.raises(error, match=match):
        law_from_name(name, k)


def test_register_refuses_a_taken_name(monkeypatch):
    monkeypatch.setattr(mdsd.laws, "_REGISTRY", dict(mdsd.laws._REGISTRY))

    @dataclass(frozen=True)
    class Other(IID):
        name = "other"
        aliases = ("wor",)

    with pytest.raises(ValueError, match="'wor' is already registered to WithoutReplacement"):
        register(Other)


def test_a_new_law_needs_only_its_class(monkeypatch):
    """A law written and registered here is built by name and solved (no dual: max-flow, LP) with no other
    change: k copies of one draw x ~ q accept Σ min(p, q), like a single draft."""
    monkeypatch.setattr(mdsd.laws, "_REGISTRY", dict(mdsd.laws._REGISTRY))

    @register
    @dataclass(frozen=True)
    class Echo(DraftLaw):
        name = "echo"

        def _joint(self, q):
            for x in np.flatnonzero(q).tolist():
                yield (x,) * self.k, q[x]

        def _sample(self, q, generator, shape=None, masses=None):
            x = torch.multinomial(q.reshape(-1, q.shape[-1]), 1, generator=generator)
            return x.expand(-1, self.k).reshape(*q.shape[:-1], self.k)

    assert "echo" in law_names()
    law = law_from_name("echo", 3)
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.1, 0.1, 0.4, 0.4])
    for method in ("auto", "lp", "maxflow"):
        assert mdsd.solve_otm(p, q, law, method=method).value == pytest.approx(0.4, abs=1e-12)
    assert law.containment(q, np.array([True, False, True, False])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="does not support"):
        mdsd.solve_otm(p, q, law, method="dual")


# ----- the containment probability Q(set(x̄) ⊆ A) -----


def extreme_qs(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Drafts spanning the float range: log-uniform to 1e-300, softmax at T = 0.01, decades with ties,
    denormals, exact zeros."""
    z = rng.standard_normal(n) / 0.01
    qs = [
        10.0 ** rng.uniform(-300.0, 0.0, n),
        np.exp(z - z.max()),
        10.0 ** -rng.choice([0.0, 8.0, 16.0, 16.0, 310.0], n),
        np.where(rng.random(n) < 0.4, 0.0, rng.dirichlet(np.ones(n))),
    ]
    out = []
    for q in qs:
        if q.sum() == 0:
            q[0] = 1.0
        out.append(q / q.sum())
    return out


CONTAINMENT_LAWS = [
    IID(1),
    IID(3),
    WithoutReplacement(1),
    WithoutReplacement(2),
    WithoutReplacement(3),
    WithoutReplacement(4),
    Hub(),
    Greedy(1),
    Greedy(3),
    TopK(2),
    Joint({(0, 1): 0.5, (2, 2): 0.25, (3, 0): 0.25}),
]


def enumerated_containment(joint: dict[tuple[int, ...], float], inside: np.ndarray) -> float:
    return float(sum(w for x, w in joint.items() if inside[list(x)].all()))


@pytest.mark.parametrize("law", CONTAINMENT_LAWS, ids=repr)
def test_containment_equals_the_enumerated_joint(law):
    """Each law's formula for Q(set ⊆ A) (closed forms, the race integral) against its own enumerated
    joint (itself checked against the sequential process above), over every A ⊆ V."""
    rng = np.random.default_rng(3)
    for n in (4, 6):
        for q in extreme_qs(rng, n):
            if np.count_nonzero(q) < law.min_support():
                continue
            joint = law.joint(q)
            assert law.tuple_count(q) >= len(joint)  # tuples of tiny Q(x̄) may underflow to 0
            for inside in itertools.product([False, True], repeat=n):
                inside = np.array(inside)
                want = enumerated_containment(joint, inside)
                assert law.containment(q, inside) == pytest.approx(want, abs=1e-12), (q, inside)


@pytest.mark.parametrize(
    "law", [law for law in CONTAINMENT_LAWS if law.name in ("iid", "without_replacement")]
)
def test_prefix_statistics_equal_or_bound_the_containment_at_every_prefix(law):
    """Exact statistics equal the enumeration at every prefix; inexact ones (k ≥ 3 without replacement)
    are an upper bound, with containment_lower below and prefix_containment equal."""
    rng = np.random.default_rng(4)
    for n in (5, 7):
        for q in extreme_qs(rng, n):
            if np.count_nonzero(q) < law.min_support():
                continue
            qs = q[rng.permutation(n)]
            stats_ = law.prefix_statistics(qs)
            sums = np.concatenate([np.zeros((stats_.weights.shape[0], 1)), np.cumsum(stats_.weights, -1)], -1)
            outside = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])
            by_sums = stats_.containment(sums, outside)
            joint = law.joint(qs)
            exact = [enumerated_containment(joint, np.arange(n) < j) for j in range(n + 1)]
            assert law.dual_form().exact == stats_.exact
            if stats_.exact:
                np.testing.assert_allclose(by_sums, exact, rtol=0, atol=1e-14)
                continue
            assert np.all(by_sums >= np.array(exact) - 1e-15)
            values, errors = law.prefix_containment(qs)
            np.testing.assert_allclose(values, exact, rtol=0, atol=1e-12)
            for j in range(n + 1):
                assert law.containment_lower(qs[:j], outside[j]) <= exact[j] + 1e-15
