"""The simplified OTM linear program (SpecHub, Theorem 1), solved by HiGHS through highspy.

Only the accepting variables π(x̄, y), y ∈ set(x̄), are kept:

.. math:: \\max \\sum_{\\bar x} \\sum_{y \\in \\mathrm{set}(\\bar x)} \\pi(\\bar x, y)
          \\quad \\text{s.t.} \\quad
          \\sum_{y \\in \\mathrm{set}(\\bar x)} \\pi(\\bar x, y) \\le Q(\\bar x), \\;
          \\sum_{\\bar x \\ni y} \\pi(\\bar x, y) \\le p(y), \\; \\pi \\ge 0.

The constraint matrix is the incidence matrix of a bipartite graph (totally unimodular), so the dual
simplex ends at an integral dual: the token rows with dual 1 form a minimum cut A, the certificate.
Sun et al., "SpecHub", EMNLP 2024; see ../shared/MATH.md §1.
"""

from __future__ import annotations

import highspy
import numpy as np
from scipy import sparse

from mdsd.otm.network import Network
from mdsd.otm.result import OTMResult


def accepted_flow(p: np.ndarray, net: Network) -> tuple[np.ndarray, np.ndarray, str]:
    """Solve the simplified LP: (edge flows [E], token-row duals [n], HiGHS status text)."""
    n_edges, n_tuples = net.edge_tuple.size, net.tuples.shape[0]
    rows = np.concatenate([net.edge_tuple, n_tuples + net.edge_token])
    cols = np.concatenate([np.arange(n_edges), np.arange(n_edges)])
    matrix = sparse.csc_matrix((np.ones(2 * n_edges), (rows, cols)), shape=(n_tuples + net.n, n_edges))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_edges, n_tuples + net.n
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.ones(n_edges)
    lp.col_lower_ = np.zeros(n_edges)
    lp.col_upper_ = np.full(n_edges, highspy.kHighsInf)
    lp.row_lower_ = np.full(n_tuples + net.n, -highspy.kHighsInf)
    lp.row_upper_ = np.concatenate([net.weight, p])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = matrix.indptr
    lp.a_matrix_.index_ = matrix.indices
    lp.a_matrix_.value_ = matrix.data
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("solver", "simplex")
    highs.setOptionValue("primal_feasibility_tolerance", 1e-10)
    highs.setOptionValue("dual_feasibility_tolerance", 1e-10)
    highs.passModel(lp)
    highs.run()
    status = highs.modelStatusToString(highs.getModelStatus())
    solution = highs.getSolution()
    flow = np.clip(np.asarray(solution.col_value), 0.0, None)
    duals = np.abs(np.asarray(solution.row_dual)[n_tuples:])
    return flow, duals, status


def solve_lp(p: np.ndarray, net: Network) -> OTMResult:
    """α* from the simplified LP on the enumerated network, with its flow and min-cut certificate.

    >>> from mdsd.laws import IID
    >>> from mdsd.otm.network import build_network
    >>> q = np.array([0.5, 0.5])  # two fair i.i.d. drafts hold token 0 with probability 3/4
    >>> round(solve_lp(np.array([1.0, 0.0]), build_network(q, IID(2))).value, 9)
    0.75
    """
    flow, duals, status = accepted_flow(p, net)
    cut, cut_value = net.best_level_cut(p, duals)
    keys = net.keys()
    edges = zip(net.edge_tuple, net.edge_token, flow, strict=True)
    pairs = {(keys[t], int(y)): float(f) for t, y, f in edges if f > 0}
    return OTMResult(
        value=float(flow.sum()),
        method="lp",
        status="optimal" if status == "Optimal" else status.lower(),
        message=f"HiGHS simplex on {flow.size} accepting variables: {status}",
        cut=cut,
        cut_value=cut_value,
        flow=pairs,
    )
