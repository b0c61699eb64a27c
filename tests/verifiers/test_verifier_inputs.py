"""Bad input fails with a clear error; registry, estimate, enumeration limit, simulate drafts."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import Counter

import numpy as np
import pytest
import torch

import mdsd
from mdsd.verifiers import registry, verifier_class
from mdsd.verifiers.rrsw import ENUMERATION_LIMIT, _acceptance_enumerated, _acceptance_k2

P, Q = [0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]


KNOWN = {  # the verifiers the README lists, first in the registry in this order (a new one comes after)
    "single": ("SingleDraftVerifier", {1}),
    "rrs": ("RRSVerifier", None),
    "rrsw": ("RRSwVerifier", None),
    "kseq": ("KSeqVerifier", None),
    "spechub": ("SpecHubVerifier", {2}),
    "greedy": ("GreedyVerifier", None),
    "topk": ("TopKVerifier", None),
    "optimal": ("OptimalVerifier", None),
}


def test_registry():
    assert mdsd.VERIFIERS[: len(KNOWN)] == tuple(KNOWN)
    classes = [verifier_class(name) for name in mdsd.VERIFIERS]
    for name, cls in zip(KNOWN, classes, strict=False):
        assert (cls.__name__, cls.supported_k) == KNOWN[name]
    # mdsd.Greedy is a law, not a verifier; each registry answers supports(name, k) for its own names
    assert set(mdsd.verifiers.__all__) & set(mdsd.laws.__all__) == {"supports"}
    for name, cls in zip(mdsd.VERIFIERS, classes, strict=True):
        ks = [k for k in range(1, 6) if cls.supports_k(k)]
        assert ks == sorted(cls.supported_k or range(1, 6))
        v = mdsd.verifier(name, ks[0])
        assert isinstance(v, cls) and v.name == name and v.law.k == v.k
    assert [mdsd.verifier(n, 2).law.name for n in ("rrs", "rrsw", "kseq", "spechub", "greedy", "topk")] == [
        "iid",
        "without_replacement",
        "iid",
        "hub",
        "greedy",
        "topk",
    ]
    with pytest.raises(ValueError, match="unknown verifier"):
        mdsd.verifier("otm", 2)


def test_every_verifier_class_of_the_package_registers_itself():
    """Importing mdsd.verifiers imports each of its modules; every concrete Verifier defined there is in
    the registry under its name (nothing to add to a list elsewhere)."""
    found = {
        cls.name
        for info in pkgutil.iter_modules(mdsd.verifiers.__path__)
        for cls in vars(importlib.import_module(f"mdsd.verifiers.{info.name}")).values()
        if isinstance(cls, type) and issubclass(cls, mdsd.Verifier) and not inspect.isabstract(cls)
    }
    assert found == set(mdsd.VERIFIERS)


def test_a_new_verifier_is_its_class(monkeypatch):
    """A verifier module only defines its class with @register: the registry, the decoder's names, the
    exact output law of a tree step and the name checks follow. A taken name is refused."""
    monkeypatch.setattr(registry, "_NODE", dict(registry._NODE))

    @registry.register
    class Echo(mdsd.verifiers.RRSVerifier):
        name = "echo"

    assert registry.node_names()[-1] == "echo" and "echo" in mdsd.verifiers.verifier_names()
    registry.check_name("echo")
    assert isinstance(mdsd.verifier("echo", 2), Echo)
    target, draft = mdsd.toy_sequence_pair(3, 2, 0.5, 0.4, torch.Generator().manual_seed(0))
    tree = mdsd.Tree.kary([2])
    assert mdsd.nodewise_tokens_per_step(target, draft, tree, "echo") == pytest.approx(
        mdsd.nodewise_tokens_per_step(target, draft, tree, "rrs"), abs=1e-15
    )

    class Impostor(mdsd.verifiers.RRSVerifier):
        name = "rrs"

    with pytest.raises(ValueError, match="already registered"):
        registry.register(Impostor)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_path_rule(
            registry.PathRule(
                "echo", drafts_with="rrs", chains_only=False, kernel=registry.path_rule("block").kernel
            )
        )


def test_names_with_a_law_are_checked_by_the_registry():
    assert mdsd.verifier("optimal:wor", 2).law.name == "without_replacement"
    with pytest.raises(ValueError, match="unknown draft law 'foo'; 'optimal' takes iid, wor"):
        verifier_class("optimal:foo")
    with pytest.raises(ValueError, match="'rrs' has a fixed draft law"):
        verifier_class("rrs:wor")
    with pytest.raises(ValueError, match="'block' verifies whole trees in the tree decoder"):
        mdsd.verifier("block", 1)


@pytest.mark.parametrize(("name", "k"), [("single", 2), ("spechub", 3), ("spechub", 1), ("rrs", 0)])
def test_k_out_of_range(name, k):
    with pytest.raises(ValueError, match="k"):
        mdsd.verifier(name, k)
    with pytest.raises(TypeError):
        mdsd.verifier("rrs", 2.0)


@pytest.mark.parametrize("name", ["rrsw", "greedy", "spechub"])
def test_one_hot_q_follows_the_degenerate_rule(name):
    """Regression (issue 12 §2): a one-hot q used to raise "needs at least 2"; now its drafts are its
    top-2 and the acceptance is p(top-2). Only a vocabulary too small for k drafts is refused."""
    v = mdsd.verifier(name, 2)
    q = [0.0, 0.0, 1.0, 0.0]
    assert v.acceptance(P, q) == P[2] + P[0]
    assert v.draft(torch.tensor(q)).tolist() == [2, 0]
    assert v.draft(torch.tensor([q, Q], dtype=torch.float32), torch.Generator().manual_seed(0))[
        0
    ].tolist() == [2, 0]
    with pytest.raises(ValueError, match="needs at least 2"):
        mdsd.optimal_acceptance(P, q, v.law)  # the OTM solvers still refuse such a q for the law
    with pytest.raises(ValueError, match="needs at least 2"):
        v.acceptance([1.0], [1.0])
    with pytest.raises(ValueError, match="needs at least 2"):
        v.draft(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="top-2"):
        v.verify(torch.tensor(P), torch.tensor(q), torch.tensor([2, 1]))  # not the top-2 of q


@pytest.mark.parametrize(
    ("p", "q", "match"),
    [
        ([0.1, np.nan, 0.5, 0.4], Q, "p contains NaN"),
        (P, [0.4, np.inf, 0.2, 0.1], "q contains NaN or infinite"),
        ([0.5, -0.1, 0.3, 0.3], Q, "p has negative"),
        ([0.5, 0.5, 0.5, 0.5], Q, "p must sum to 1"),
        (P, [0.5, 0.5], "same shape"),
        ([P, P], [Q, Q], "one pair"),
        ([], [], "n >= 1"),
    ],
)
def test_bad_distributions(p, q, match):
    with pytest.raises(ValueError, match=match):
        mdsd.verifier("rrs", 2).acceptance(p, q)


def test_bad_verify_inputs():
    v = mdsd.verifier("rrs", 2)
    p, q = torch.tensor(P), torch.tensor(Q)
    with pytest.raises(ValueError, match="p contains NaN"):
        v.verify(torch.tensor([0.1, float("nan"), 0.5, 0.4]), q, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="same shape"):
        v.verify(p, torch.tensor([0.5, 0.5]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"shape \[..., 2\]"):
        v.verify(p, q, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"tokens in \[0, 4\)"):
        v.verify(p, q, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"tokens in \[0, 4\)"):
        v.verify(p, q, torch.tensor([-1, 0]))
    with pytest.raises(TypeError, match="integer"):
        v.verify(p, q, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="do not match the batch"):
        v.verify(p.expand(3, 4), q.expand(3, 4), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="q = 0"):
        v.verify(p, torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="distinct"):
        mdsd.verifier("rrsw", 2).verify(p, q, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="hub pair"):
        mdsd.verifier("spechub", 2).verify(p, q, torch.tensor([1, 2]))  # the hub is token 0
    with pytest.raises(ValueError, match="hub pair"):
        mdsd.verifier("spechub", 2).verify(p, q, torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="num_samples"):
        v.simulate(P, Q, 0, seed=0)


def test_spechub_accepts_both_orders_of_the_hub_pair():
    v = mdsd.verifier("spechub", 2)
    p, q = torch.tensor(P), torch.tensor(Q)
    for drafts in ([2, 0], [0, 2]):
        tokens, index = v.verify(p.expand(500, 4), q.expand(500, 4), torch.tensor(drafts).expand(500, 2))
        assert set(tokens.tolist()) <= {0, 1, 2, 3}
        assert bool(((index >= 0) == ((tokens == 0) | (tokens == 2))).all())


def test_rrsw_k2_prefix_form_equals_enumeration():
    rng = np.random.default_rng(1)
    for n in (2, 3, 10, 60):
        for _ in range(20):
            p, q = rng.dirichlet(np.full(n, 0.4)), rng.dirichlet(np.full(n, 0.4))
            assert _acceptance_k2(p, q) == pytest.approx(_acceptance_enumerated(p, q, 2), abs=1e-12)


def test_rrsw_enumeration_limit_points_to_the_estimate():
    v = mdsd.verifier("rrsw", 3)
    n = int(ENUMERATION_LIMIT ** (1 / 3)) + 2
    p = np.full(n, 1.0 / n)
    with pytest.raises(ValueError, match="estimate_acceptance"):
        v.acceptance(p, p)
    est = mdsd.estimate_acceptance(v, p, p, 2000, seed=0)
    assert isinstance(est, mdsd.AcceptanceEstimate) and est.value == 1.0 and est.low > 0.99


def test_estimate_interval_covers_the_exact_value():
    rng = np.random.default_rng(5)
    covered = 0
    for seed in range(20):
        p, q = rng.dirichlet(np.ones(12)), rng.dirichlet(np.ones(12))
        v = mdsd.verifier("kseq", 3)
        est = mdsd.estimate_acceptance(v, p, q, 4000, seed=seed)
        assert est.low <= est.value <= est.high and est.num_samples == 4000
        covered += est.low <= v.acceptance(p, q) <= est.high
    assert covered >= 16  # 95% intervals: P(fewer than 16 of 20 cover) < 2e-2
    with pytest.raises(TypeError, match="Verifier"):
        mdsd.estimate_acceptance("rrs", P, Q, 10, seed=0)


@pytest.mark.parametrize(("name", "k"), [("rrs", 2), ("rrsw", 2), ("rrsw", 3), ("spechub", 2), ("greedy", 3)])
def test_simulate_drafts_follow_the_law(name, k):
    """The one-pair draft samplers of simulate() against the law's exact joint (G-test, α = 1e-3)."""
    from scipy.stats import chi2

    v = mdsd.verifier(name, k)
    q = np.array([0.05, 0.0, 0.4, 0.25, 0.1, 0.2])
    joint = v.law.joint(q)
    drafts = v.law._sample(torch.tensor(q), torch.Generator().manual_seed(k), (100_000,))
    seen = Counter(map(tuple, drafts.tolist()))
    assert set(seen) <= set(joint)
    obs = np.array([seen.get(x, 0) for x in joint], dtype=float)
    exp = np.array(list(joint.values())) * 100_000
    g = 2 * np.sum(np.where(obs > 0, obs * np.log(np.maximum(obs, 1) / exp), 0.0))
    assert chi2.sf(g, len(joint) - 1) > 1e-3
