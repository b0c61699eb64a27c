r"""Mixed nodes: deterministic children proposed by a source beside children drawn from the draft.

A node of a mixed tree drafts the set D of a source's proposals (deterministic: Q puts mass 1 on them) and k
tokens x̄ drawn by a law from the draft restricted to the other tokens, q̃ = q|V∖D (renormalised). Its
drafted tuple (D, x̄) has the joint law :func:`mixed_law`. Every emitted token of D is a drafted child, so
D acts as one always-drafted token: with

.. math:: \tilde p = p \text{ off } D, \qquad \tilde p(d_0) = p(D), \; \tilde p(D \setminus d_0) = 0

(one token d₀ ∈ D carries the whole mass; q̃(d₀) = 0, so it is never drawn), any lossless verifier V of the
law run on (p̃, q̃), whose verdict d₀ is replaced by a draw from p restricted to D, emits exactly p, and

.. math:: \alpha = p(D) + \alpha_V(\tilde p, \tilde q).

The optimum of the mixed law follows from the min-cut dual (docs/mathematics.md §1): a cut A must hold D (else
Q(set ⊆ A) = 0 and the cut is ≥ 1), so

.. math:: \alpha^*(p, Q_{\mathrm{mixed}})
          = \min_{A \supseteq D} p(A) + 1 - Q(\mathrm{set}(\bar x) \subseteq A)
          = p(D) + \alpha^*(\tilde p, Q(\tilde q)),

the second step because the drawn tokens never meet D and p̃'s mass p(D) sits on d₀, which no cut needs.
So a verifier optimal for the law is optimal for the mixed node too, at full vocabulary, with the same
cost. The decoder runs the torch form of this (:func:`mdsd.tree.step.verify_nodes`); these float64
routines are its exact reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mdsd.laws import DraftLaw, Joint
from mdsd.validation import as_pair

__all__ = ["phantom_target", "restricted_draft", "mixed_law", "mixed_acceptance", "mixed_optimum"]


def _fixed(fixed: Sequence[int], n: int) -> np.ndarray:
    d = np.asarray(fixed, dtype=np.int64).reshape(-1)
    if d.size == 0 or np.unique(d).size != d.size or d.min() < 0 or d.max() >= n:
        raise ValueError(f"fixed must be distinct tokens in [0, {n}), at least one; got {list(fixed)}")
    return d


def phantom_target(p: np.ndarray, fixed: Sequence[int]) -> np.ndarray:
    """p̃: p off D, all of p(D) on the first token of D, 0 on the others.

    >>> phantom_target(np.array([0.1, 0.2, 0.3, 0.4]), [2, 0]).tolist()
    [0.0, 0.2, 0.4, 0.4]
    """
    d = _fixed(fixed, p.shape[-1])
    out = p.astype(np.float64).copy()
    out[d] = 0.0
    out[d[0]] = p[d].sum()
    return out


def restricted_draft(q: np.ndarray, fixed: Sequence[int]) -> np.ndarray:
    """q̃ = q restricted to V ∖ D, renormalised by the mass outside D (summed, not 1 − q(D)).

    Raises ``ValueError`` when q has no mass outside D (then no token can be drawn there).

    >>> restricted_draft(np.array([0.5, 0.25, 0.25]), [0]).tolist()
    [0.0, 0.5, 0.5]
    """
    d = _fixed(fixed, q.shape[-1])
    out = q.astype(np.float64).copy()
    out[d] = 0.0
    rest = out.sum()
    if rest <= 0:
        raise ValueError("q puts all its mass on the fixed tokens: no token can be drawn beside them")
    return out / rest


def mixed_law(q: object, fixed: Sequence[int], law: DraftLaw) -> Joint:
    """The joint law of the drafted tuple (D, x̄), x̄ ~ law(q̃), as a :class:`~mdsd.laws.Joint` (small n).

    >>> from mdsd.laws import IID
    >>> sorted(mixed_law([0.5, 0.25, 0.25], [0], IID(1)).table)
    [((0, 1), 0.5), ((0, 2), 0.5)]
    """
    _, qa = as_pair(q, q)
    d = tuple(int(t) for t in _fixed(fixed, qa.size))
    drawn = law.joint(restricted_draft(qa, d))
    return Joint({(*d, *x): w for x, w in drawn.items()})


def mixed_acceptance(verifier, p: object, q: object, fixed: Sequence[int]) -> float:
    """Exact acceptance of ``verifier`` at a mixed node: p(D) + α_V(p̃, q̃).

    >>> from mdsd.verifiers import verifier
    >>> round(mixed_acceptance(verifier("rrs", 1), [0.5, 0.25, 0.25], [0.2, 0.2, 0.6], [0]), 12)
    1.0
    """
    pa, qa = as_pair(p, q)
    d = _fixed(fixed, pa.size)
    return float(pa[d].sum()) + verifier.acceptance(phantom_target(pa, d), restricted_draft(qa, d))


def mixed_optimum(p: object, q: object, fixed: Sequence[int], law: DraftLaw, method: str = "auto") -> float:
    """The optimal acceptance of the mixed law, p(D) + α*(p̃, law(q̃)), by any method of mdsd.solve_otm.

    >>> from mdsd.laws import IID
    >>> round(mixed_optimum([0.5, 0.25, 0.25], [0.2, 0.2, 0.6], [0], IID(1)), 12)
    1.0
    """
    from mdsd.otm import optimal_acceptance

    pa, qa = as_pair(p, q)
    d = _fixed(fixed, pa.size)
    return float(pa[d].sum()) + float(
        optimal_acceptance(phantom_target(pa, d), restricted_draft(qa, d), law, method)
    )
