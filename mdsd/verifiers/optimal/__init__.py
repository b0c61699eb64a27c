"""The optimal verifier and its support: the two-step verifier that reaches the optimum α*(p, IID(k)) exactly.

* :mod:`~mdsd.verifiers.optimal.verifier` — :class:`OptimalVerifier` (registered as ``optimal``): the
  two-step verifier with a selection rule that reaches α*;
* :mod:`~mdsd.verifiers.optimal.twostep` — the two-step verifier (docs/mathematics.md §6): select one draft,
  then single-draft speculative sampling against p, lossless for any rule whose law F is exact;
* :mod:`~mdsd.verifiers.optimal.layout` — the priority layout, the exact selection rule for i.i.d. drafts
  that reaches α*(p, IID(k)) at any vocabulary size (device kernels), and
  :mod:`~mdsd.verifiers.optimal.layout_reference`, its float64 reference and exact output law;
* :mod:`~mdsd.verifiers.optimal.luce` and :mod:`~mdsd.verifiers.optimal.luce_rule` — the Luce rule with
  priority levels for drafts without replacement: its selection law, and the levels and weights that make
  it the optimal one;
* :mod:`~mdsd.verifiers.optimal.fallback` — the exact acceptance of the fallback for drafts without
  replacement (the drafts turned into i.i.d. draws, then the priority layout).

Only :mod:`mdsd.verifiers` imports this subpackage among the verifiers' modules; its modules import the
shared support (:mod:`mdsd.verifiers.base`, ``.registry``, ``.ops``, ``.reference``), never the other way.
The function ``luce_rule`` is not re-exported here: it would hide the module of that name
(``import mdsd.verifiers.optimal.luce_rule as m`` would give the function).
"""

from __future__ import annotations

from mdsd.verifiers.optimal.fallback import fallback_acceptance
from mdsd.verifiers.optimal.layout import IIDLayout, PairLayout, iid_layout, pair_layout
from mdsd.verifiers.optimal.luce import LuceLaw, luce_law
from mdsd.verifiers.optimal.twostep import selection_acceptance, two_step
from mdsd.verifiers.optimal.verifier import FLOW_ENTRIES, FLOW_TUPLES, OptimalVerifier, flow_rule

__all__ = [
    "OptimalVerifier",
    "FLOW_TUPLES",
    "FLOW_ENTRIES",
    "flow_rule",
    "two_step",
    "selection_acceptance",
    "IIDLayout",
    "iid_layout",
    "PairLayout",
    "pair_layout",
    "LuceLaw",
    "luce_law",
    "fallback_acceptance",
]
