"""The sequence-level optimum of tokens per step (docs/mathematics.md §7): node-level OTM at depth 1, the
literal coupling LP, certificates, Sun et al.'s worked example from first principles, and its limits."""

from __future__ import annotations

import itertools
import time
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from sequence_cases import FAMILIES, one_step_error, random_pair

import mdsd
from mdsd.sequence import SequenceModel, decode_law, law_distance, solve_tree_otm, target_law
from mdsd.sequence import drafts as drafts_module
from mdsd.sequence import optimum as optimum_module
from mdsd.sequence.coupling import match
from mdsd.sequence.models import prefixes

TOL = 1e-8


def _depth_one_laws(n: int) -> list:
    laws = [mdsd.IID(1), mdsd.IID(2), mdsd.Hub(), mdsd.Greedy(2), mdsd.TopK(2)]
    if n >= 2:
        laws.append(mdsd.WithoutReplacement(2))
    if n >= 3:
        laws += [mdsd.IID(3), mdsd.WithoutReplacement(3)]
    return laws


@pytest.mark.parametrize("n", [2, 3, 4])
def test_depth_one_is_one_plus_the_node_level_optimum(n):
    """One level of k children: the best tokens per step is 1 + α*(p, Q), which the four node-level
    OTM solvers (coupling LP, simplified LP, max-flow, min-cut dual) agree on."""
    rng = np.random.default_rng(n)
    for case, family in enumerate(FAMILIES):
        for law in _depth_one_laws(n):
            target, draft = random_pair(rng, n, 1, family, min_support=law.min_support())
            tree = mdsd.Tree.kary([law.k])
            value = solve_tree_otm(target, draft, tree, law).value
            methods = ("lp", "maxflow", "dual") + (("coupling",) if case == 0 else ())
            alphas = {m: mdsd.optimal_acceptance(target(()), draft(()), law, method=m) for m in methods}
            assert max(alphas.values()) - min(alphas.values()) < TOL, (family, law, alphas)
            assert value - 1.0 == pytest.approx(alphas["lp"], abs=TOL), (family, law, value, alphas)


@pytest.mark.parametrize(
    ("n", "tree", "law"),
    [
        (2, mdsd.Tree.chain(2), "iid"),
        (3, mdsd.Tree.chain(2), "iid"),
        (2, mdsd.Tree.chain(3), "iid"),
        (3, mdsd.Tree.kary([2]), "wor"),
        (3, mdsd.Tree((0, 0, 1)), "iid"),  # uneven: one child goes on, the other is a leaf
        (2, mdsd.Tree.kary([2, 2]), "iid"),
        (3, mdsd.Tree.kary([2, 1]), "without_replacement"),
    ],
)
def test_compact_program_equals_the_literal_coupling_lp(n, tree, law):
    rng = np.random.default_rng(len(tree.parents) * 10 + n)
    for family in FAMILIES:
        target, draft = random_pair(rng, n, tree.max_depth, family, min_support=2 if "w" in law else 1)
        compact = solve_tree_otm(target, draft, tree, law)
        literal = solve_tree_otm(target, draft, tree, law, method="coupling")
        assert compact.value == pytest.approx(literal.value, abs=TOL), family
        assert literal.status == compact.status == "optimal"
        assert literal.coupling and all(m <= match(frozenset(key), y) for key, y, m in literal.coupling)


@pytest.mark.parametrize(
    ("n", "tree", "law"), [(3, mdsd.Tree.chain(3), "iid"), (3, mdsd.Tree.kary([2, 2]), "wor")]
)
def test_result_carries_a_plan_and_a_certificate(n, tree, law):
    rng = np.random.default_rng(5)
    for family in FAMILIES:
        target, draft = random_pair(rng, n, tree.max_depth, family, min_support=2)
        r = solve_tree_otm(target, draft, tree, law, context=())
        assert r.status == "optimal" and abs(r.gap) < 1e-7 and r.dual_bound >= r.value - 1e-7
        marginal = {}
        for (key, s), mass in r.plan.items():
            assert s[:-1] == () or s[:-1] in key  # the accepted part is a path of the drafted tree
            marginal[key] = marginal.get(key, 0.0) + mass
        assert max(abs(marginal.get(key, 0.0) - w) for key, w in r.trees.items()) < 1e-9
        assert sum(len(s) * a for s, a in r.emitted.items()) == pytest.approx(r.value, abs=1e-9)
        assert one_step_error(target, r.emitted, tree.max_depth) < 1e-9  # the plan is lossless
        assert set(r.sizes) == {"trees", "variables", "constraints", "nonzeros"} and r.seconds >= 0


def test_the_optimum_bounds_every_verifier():
    rng = np.random.default_rng(11)
    for n, family in itertools.product((2, 3), FAMILIES):
        target, draft = random_pair(rng, n, 2, family, min_support=2)
        chain = solve_tree_otm(target, draft, mdsd.Tree.chain(2), "iid").value
        assert mdsd.block_tokens_per_step(target, draft, 2) <= chain + TOL
        assert mdsd.nodewise_tokens_per_step(target, draft, mdsd.Tree.chain(2), "single") <= chain + TOL
        tree = mdsd.Tree.kary([2, 1])
        for name in ("rrs", "rrsw", "kseq", "spechub", "greedy", "topk"):
            law = mdsd.verifier(name, 2).law
            best = solve_tree_otm(target, draft, tree, law).value
            assert mdsd.nodewise_tokens_per_step(target, draft, tree, name) <= best + TOL, (name, family)
        for law in mdsd.sequence.TRAVERSAL_LAWS:
            best = solve_tree_otm(target, draft, tree, law).value
            assert mdsd.traversal_tokens_per_step(target, draft, tree, law) <= best + TOL, (law, family)


# ---- Sun et al.'s worked example, from first principles ---------------------------------------------------

P = (Fraction(1, 3), Fraction(2, 3))  # target at every prefix
Q = (Fraction(2, 3), Fraction(1, 3))  # draft at every prefix
CHAINS = list(itertools.product(range(2), repeat=2))


def _tokenwise_accepted() -> Fraction:
    """Leviathan et al.: accept X_i w.p. min(1, p/q), stop at the first rejection."""
    total = Fraction(0)
    for x in CHAINS:
        a1, a2 = min(1, P[x[0]] / Q[x[0]]), min(1, P[x[1]] / Q[x[1]])
        total += Q[x[0]] * Q[x[1]] * (a1 * (1 - a2) + 2 * a1 * a2)
    return total


def _block_accepted() -> Fraction:
    """Sun et al.'s block verification in exact arithmetic: w_i = min(1, w_{i-1} p/q), h_1 = Σ(w_1 p − q)+ /
    (Σ(w_1 p − q)+ + 1 − w_1), h_2 = w_2; τ = 2 w.p. h_2, else 1 w.p. h_1, else 0."""
    total = Fraction(0)
    for x in CHAINS:
        w1 = min(Fraction(1), P[x[0]] / Q[x[0]])
        w2 = min(Fraction(1), w1 * P[x[1]] / Q[x[1]])
        s = sum(max(Fraction(0), w1 * P[y] - Q[y]) for y in range(2))
        h1 = s / (s + 1 - w1) if s + 1 - w1 > 0 else Fraction(1)
        total += Q[x[0]] * Q[x[1]] * (2 * w2 + (1 - w2) * h1)
    return total


def _idealised_accepted() -> float:
    """max over couplings of the drafted chain X and the target's y_1 y_2 of E[match(X, y)], by scipy's
    linprog on the 4 x 4 transport problem (no losslessness asked)."""
    ys = CHAINS
    cost = [-(x[0] == y[0]) * (1 + (x[1] == y[1])) for x in CHAINS for y in ys]  # −match(x, y)
    rows = [[1.0 if a == i else 0.0 for a in range(4) for _ in range(4)] for i in range(4)]
    cols = [[1.0 if b == j else 0.0 for _ in range(4) for b in range(4)] for j in range(4)]
    marg = [float(Q[x[0]] * Q[x[1]]) for x in CHAINS] + [float(P[y[0]] * P[y[1]]) for y in ys]
    out = linprog(cost, A_eq=rows + cols, b_eq=marg, bounds=(0, None), method="highs")
    assert out.status == 0
    return -out.fun


def test_sun_et_al_worked_example():
    target, draft = SequenceModel.context_free([1 / 3, 2 / 3]), SequenceModel.context_free([2 / 3, 1 / 3])
    chain = mdsd.Tree.chain(2)
    tokenwise, block, idealised = _tokenwise_accepted(), _block_accepted(), _idealised_accepted()
    # the paper's figures, only as a cross-check of the enumerations above
    assert (tokenwise, block) == (Fraction(10, 9), Fraction(11, 9)) and idealised == pytest.approx(
        12 / 9, abs=1e-12
    )
    assert mdsd.nodewise_tokens_per_step(target, draft, chain, "single") - 1 == pytest.approx(
        float(tokenwise), abs=1e-12
    )
    assert mdsd.block_tokens_per_step(target, draft, 2) - 1 == pytest.approx(float(block), abs=1e-12)
    best = solve_tree_otm(target, draft, chain, "iid")
    assert best.value - 1 == pytest.approx(float(block), abs=1e-12) and best.status == "optimal"
    for method in ("auto", "coupling"):
        ideal = solve_tree_otm(target, draft, chain, "iid", lossless=False, method=method)
        assert ideal.value - 1 == pytest.approx(idealised, abs=1e-12)


def test_the_idealised_coupling_is_not_lossless():
    """Any plan worth 12/9 accepted tokens: emitting what it emits changes the law of the text (one step,
    and a whole decode of 4 tokens repeating it), while the lossless optimum keeps the target's law."""
    target, draft = SequenceModel.context_free([1 / 3, 2 / 3]), SequenceModel.context_free([2 / 3, 1 / 3])
    chain = mdsd.Tree.chain(2)
    ideal = solve_tree_otm(target, draft, chain, "iid", lossless=False)
    best = solve_tree_otm(target, draft, chain, "iid")
    assert one_step_error(target, ideal.emitted, 2) > 1e-3
    assert one_step_error(target, best.emitted, 2) < 1e-12
    truth = target_law(target, 4)
    assert law_distance(decode_law(lambda u: ideal.emitted, 4), truth) > 1e-3
    assert law_distance(decode_law(lambda u: best.emitted, 4), truth) < 1e-12


# ---- limits and inputs ------------------------------------------------------------------------------------


def test_binary_depth_two_over_four_tokens_solves_in_seconds():
    target, draft = mdsd.toy_sequence_pair(4, 2, 0.2, 0.5, torch.Generator().manual_seed(3))
    start = time.perf_counter()
    for law in ("iid", "without_replacement"):
        r = solve_tree_otm(target, draft, mdsd.Tree.kary([2, 2]), law)
        assert r.status == "optimal" and 1.0 <= r.value <= 3.0 + 1e-9
    assert time.perf_counter() - start < 30  # about 2 s on one core


def test_refuses_programs_that_are_too_large(monkeypatch):
    target, draft = mdsd.toy_sequence_pair(6, 3, 0.5, 0.5, torch.Generator().manual_seed(0))
    monkeypatch.setattr(drafts_module, "MAX_TREES", 5_000)  # the default refuses n = 6 the same way, slower
    with pytest.raises(ValueError, match="more than 5,000 drafted trees"):
        solve_tree_otm(target, draft, mdsd.Tree.kary([2, 2, 2]), "iid")
    monkeypatch.setattr(optimum_module, "MAX_VARIABLES", 100)
    with pytest.raises(ValueError, match="MAX_VARIABLES"):
        solve_tree_otm(target, draft, mdsd.Tree.chain(2), "iid")


def test_rejects_bad_inputs():
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.5, 0.5, torch.Generator().manual_seed(0))
    chain = mdsd.Tree.chain(2)
    with pytest.raises(TypeError, match="Tree"):
        solve_tree_otm(target, draft, (0, 1), "iid")
    with pytest.raises(TypeError, match="SequenceModel"):
        solve_tree_otm(target(()), draft, chain, "iid")
    with pytest.raises(ValueError, match="method"):
        solve_tree_otm(target, draft, chain, "iid", method="simplex")
    with pytest.raises(ValueError, match="needs method='coupling'"):
        solve_tree_otm(target, draft, chain, "iid", lossless=False, method="emitted")
    with pytest.raises(ValueError, match="target covers"):
        solve_tree_otm(target, draft, mdsd.Tree.chain(3), "iid")
    with pytest.raises(ValueError, match="target covers"):
        solve_tree_otm(target, draft, chain, "iid", context=(1,))
    with pytest.raises(ValueError, match="context"):
        solve_tree_otm(target, draft, mdsd.Tree.chain(1), "iid", context=(5,))
    other, _ = mdsd.toy_sequence_pair(4, 2, 0.5, 0.5, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="vocabulary"):
        solve_tree_otm(other, draft, chain, "iid")
    narrow = SequenceModel.from_table({u: [0.5, 0.5, 0.0] for u in prefixes(3, 2)})
    with pytest.raises(ValueError, match="needs at least 3"):  # three distinct drafts from two tokens
        solve_tree_otm(target, narrow, mdsd.Tree.kary([3]), "wor")
