r"""The optimal selection law: the law F of the token a two-step verifier should select
(docs/mathematics.md §6).

A selection rule s(z | x̄) picks one draft; its law F(z) = Σ_x̄ Q(x̄) s(z | x̄) lies in the base polytope
of g(A) = P(set(x̄) ∩ A ≠ ∅), and the two-step verifier accepts Σ_z min(F(z), p(z)). For a law whose
min-cut dual is solved over the tokens sorted by p/q (:mod:`mdsd.otm.dual`), one optimal F has a closed
form in g over the sorted prefixes P_i = {y_1..y_i} (p/q descending):

.. math:: F(y_i) = p(y_i) - (m_{i-1} - m_i) + (S_i - S_{i-1}), \quad h_i = g(P_i) - p(P_i),
          \ m_i = \min_{j \le i} h_j, \ S_i = \min_{j \ge i} h_j,

p less the drops of the running minimum of h from the top, plus its rises from the bottom. Then
F(P_i) = p(P_i) + max(m_i, S_i) <= g(P_i), F <= p on the min-cut side B* = P_{i*}, F >= p on A*, and
Σ min(F, p) = g(B*) + p(A*) = α*.

* **i.i.d. drafts**: g(A) = 1 − (1 − q(A))^k depends on q(A) alone, so the prefix bounds give every set's
  bound; proven, and realised at any vocabulary by the priority layout (:mod:`mdsd.verifiers.optimal.layout`,
  whose ``target`` this equals).
* **drafts without replacement**: g(A) = 1 − Q(set ⊆ V∖A) (the race integral). That this F is a base of
  g (F(A) <= g(A) for every token set, not only prefixes) is *checked, not proven*: the tests enumerate
  every subset on random and adversarial pairs (n <= 6, k <= 4). It gives the target an exactly optimal
  without-replacement rule would have to realise; no rule realising it at full vocabulary is known here
  (:class:`mdsd.verifiers.optimal.OptimalVerifier` falls back to the i.i.d. rule there).

Precision: F is formed from h in absolute terms (~1e-16 for exact containments, the quadrature's error
for drafts without replacement, k >= 3), which is what an acceptance needs; the layout forms F with
relative precision where its window geometry needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsd.laws import DraftLaw
from mdsd.otm.dual import _with_zero
from mdsd.race import suffix_mass
from mdsd.validation import as_pair

__all__ = ["SelectionLaw", "optimal_selection_law"]


@dataclass(frozen=True)
class SelectionLaw:
    """An optimal selection law and how sure it is.

    Attributes
    ----------
    law : ndarray [n]
        F(y), summing to 1; Σ min(F, p) = α*.
    proven : bool
        True where F is proven to be a base of g (i.i.d. drafts); False where it is checked only.
    basis : str
        The grounds, in words.
    order : ndarray [n]
        The tokens by p/q descending (ties in token order): P_i is its first i tokens.
    slack : ndarray [n + 1]
        g(P_i) − F(P_i) >= 0 for i = 0..n (0 where the prefix is tight: every draft tuple meeting P_i
        selects a token of P_i).
    """

    law: np.ndarray
    proven: bool
    basis: str
    order: np.ndarray
    slack: np.ndarray


def optimal_selection_law(p: object, q: object, law: DraftLaw) -> SelectionLaw:
    """The closed-form optimal selection law F for ``law`` (module docstring), one pair p, q [n].

    ``law`` must have a sorted-prefix dual (:class:`mdsd.IID`, :class:`mdsd.WithoutReplacement`).

    >>> import mdsd
    >>> s = optimal_selection_law([1.0, 0.0], [0.5, 0.5], mdsd.IID(2))
    >>> s.law.tolist(), s.proven  # token 0 is selected whenever drafted: 1 − (1/2)²
    ([0.75, 0.25], True)
    """
    form = law.dual_form()
    if form is None or form.kind != "prefix":
        raise ValueError(f"law must have a sorted-prefix dual (IID, WithoutReplacement); got {law!r}")
    p, q = as_pair(p, q)
    if p.ndim != 1:
        raise ValueError(f"p must be one distribution [n]; got shape {p.shape}")
    law.check(q)
    with np.errstate(divide="ignore", invalid="ignore"):  # p/q descending, ties in token order (the layout's)
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, -np.inf))
    order = np.argsort(-ratio, kind="stable")[::-1]  # ascending: A_j = its first j tokens, P_i = V ∖ A_{n−i}
    qs = q[order]
    stats = law.prefix_statistics(q)
    if stats.exact:
        weights = np.take_along_axis(stats.weights, np.broadcast_to(order, stats.weights.shape), axis=-1)
        inside = stats.containment(_with_zero(weights), suffix_mass(qs))
    else:
        inside = law.prefix_containment(qs)[0]
    spent = _with_zero(p[order])  # p(A_j)
    h = (spent - inside)[::-1]  # h_i = g(P_i) − p(P_i) = p(A_{n−i}) − Q(set ⊆ A_{n−i}), i = 0..n
    top = np.minimum.accumulate(h)
    bottom = np.minimum.accumulate(h[::-1])[::-1]
    descending = order[::-1]
    f = np.maximum(p[descending] - (top[:-1] - top[1:]) + (bottom[1:] - bottom[:-1]), 0.0)
    out = np.empty_like(f)
    out[descending] = f
    slack = np.maximum(h - np.maximum(top, bottom), 0.0)
    if form.proven and law.name == "iid":
        return SelectionLaw(
            out, True, "sorted prefixes bound every set (g depends on q(A) only)", descending, slack
        )
    basis = f"{form.basis}; base of g checked by enumerating every set (n <= 6)"
    return SelectionLaw(out, False, basis, descending, slack)
