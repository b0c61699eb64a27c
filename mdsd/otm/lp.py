"""The simplified OTM linear program (SpecHub, Theorem 1), solved by HiGHS through highspy.

Only the accepting variables π(x̄, y), y ∈ set(x̄), are kept:

.. math:: \\max \\sum_{\\bar x} \\sum_{y \\in \\mathrm{set}(\\bar x)} \\pi(\\bar x, y)
          \\quad \\text{s.t.} \\quad
          \\sum_{y \\in \\mathrm{set}(\\bar x)} \\pi(\\bar x, y) \\le Q(\\bar x), \\;
          \\sum_{\\bar x \\ni y} \\pi(\\bar x, y) \\le p(y), \\; \\pi \\ge 0.

Tuples with the same set(x̄) are interchangeable, so the LP runs on the draft sets (:mod:`network`). The
constraint matrix is the incidence matrix of a bipartite graph (totally unimodular), so the simplex ends at
an integral dual: the token rows with dual 1 form a minimum cut A, the certificate. HiGHS runs silently
through :func:`mdsd.highs.solve_sparse_lp`, which raises unless the optimum is proven.
Sun et al., "SpecHub", EMNLP 2024; see docs/mathematics.md §1.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from mdsd.highs import solve_sparse_lp
from mdsd.otm.network import Network
from mdsd.otm.result import OTMResult


def accepted_flow(p: np.ndarray, net: Network) -> tuple[np.ndarray, np.ndarray]:
    """Solve the simplified LP on the draft sets: (edge flows [E], token-row duals [n]).

    Raises :class:`mdsd.highs.LPError` unless HiGHS proves the optimum.
    """
    n_edges, n_sets = net.edge_set.size, net.sets.shape[0]
    rows = np.concatenate([net.edge_set, n_sets + net.edge_token])
    cols = np.concatenate([np.arange(n_edges), np.arange(n_edges)])
    matrix = sparse.csc_matrix((np.ones(2 * n_edges), (rows, cols)), shape=(n_sets + net.n, n_edges))
    upper = np.concatenate([net.set_weight, p])
    lp = solve_sparse_lp(
        np.ones(n_edges),
        matrix,
        np.full(upper.size, -np.inf),
        upper,
        np.zeros(n_edges),
        np.full(n_edges, np.inf),
    )
    return np.clip(lp.x, 0.0, None), np.abs(lp.row_dual[n_sets:])


def solve_lp(p: np.ndarray, net: Network) -> OTMResult:
    """α* from the simplified LP on the enumerated network, with its flow and min-cut certificate.

    >>> from mdsd.laws import IID
    >>> from mdsd.otm.network import build_network
    >>> q = np.array([0.5, 0.5])  # two fair i.i.d. drafts hold token 0 with probability 3/4
    >>> round(solve_lp(np.array([1.0, 0.0]), build_network(q, IID(2))).value, 9)
    0.75
    """
    flow, duals = accepted_flow(p, net)
    cut, cut_value = net.best_level_cut(p, duals)
    return OTMResult(
        value=float(flow.sum()),
        method="lp",
        status="optimal",
        basis="LP simplex optimality (HiGHS)",
        message=f"HiGHS simplex on {flow.size} accepting variables over {net.sets.shape[0]} draft sets",
        cut=cut,
        cut_value=cut_value,
        flow=net.tuple_flow(flow),
    )
