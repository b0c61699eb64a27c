"""The full OTM coupling LP, written in cvxpy (tiny vocabularies: T · n variables, T ≤ n^k tuples).

.. math:: \\alpha^*(p, Q) = \\max_{\\pi \\ge 0}
          \\sum_{\\bar x} \\sum_{y \\in \\mathrm{set}(\\bar x)} \\pi(\\bar x, y)
          \\quad \\text{s.t.} \\quad \\sum_y \\pi(\\bar x, y) = Q(\\bar x), \\;
          \\sum_{\\bar x} \\pi(\\bar x, y) = p(y).

Every lossless verifier is such a coupling, so this is the definition of the optimum (Sun et al.,
"SpecHub", EMNLP 2024; Hu et al., ICLR 2025). The duals g(y) of the p-marginal rows are a potential whose
level sets contain a minimum cut A. It runs on the draft tuples themselves (not the sets of
:mod:`network`), the literal definition; HiGHS is silenced (:func:`mdsd.highs.quiet`) and anything short of a
proven optimum raises :class:`mdsd.highs.LPError`. See docs/mathematics.md §1.
"""

from __future__ import annotations

import numpy as np

from mdsd.highs import LPError, quiet
from mdsd.otm.network import Network
from mdsd.otm.result import OTMResult

SOLVER = "HIGHS"  # cvxpy's interface to highspy (a dependency); simplex duals are integral
# Presolve off: HiGHS's presolve declares some feasible instances with tiny Q(x̄) (~1e-11) infeasible.
_OPTIONS = {"presolve": "off", "primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def solve_coupling(p: np.ndarray, net: Network) -> OTMResult:
    """α* from the full coupling LP, with the whole plan π(x̄, y) and a min-cut certificate.

    >>> from mdsd.laws import IID
    >>> from mdsd.otm.network import build_network
    >>> q = np.array([0.5, 0.5])  # two fair i.i.d. drafts hold token 0 with probability 3/4
    >>> round(solve_coupling(np.array([1.0, 0.0]), build_network(q, IID(2))).value, 8)
    0.75
    """
    n_tuples = net.tuples.shape[0]
    member = net.sets[net.group].astype(np.float64)  # [T, n]: 1 where y ∈ set(x̄)
    import cvxpy as cp  # here, not at module level: importing cvxpy takes seconds

    plan = cp.Variable((n_tuples, net.n), nonneg=True)
    rows = cp.sum(plan, axis=1) == net.weight
    cols = cp.sum(plan, axis=0) == p
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(member, plan))), [rows, cols])
    with quiet():
        problem.solve(solver=SOLVER, **_OPTIONS)
    if problem.status != cp.OPTIMAL or plan.value is None:
        raise LPError(
            f"cvxpy/{SOLVER} did not solve the coupling LP ({plan.size} variables): {problem.status}"
        )
    values = np.clip(plan.value, 0.0, None)
    cut, cut_value = net.best_level_cut(p, np.asarray(cols.dual_value, dtype=np.float64))
    keys = net.keys()
    full = {(keys[t], int(y)): float(values[t, y]) for t, y in np.argwhere(values > 0)}
    accepted = {(keys[t], int(y)): float(values[t, y]) for t, y in np.argwhere(member > 0)}
    return OTMResult(
        value=float((member * values).sum()),
        method="coupling",
        status="optimal",
        basis="LP optimality (full coupling, cvxpy/HiGHS)",
        message=f"cvxpy/{SOLVER} on {values.size} variables: {problem.status}",
        cut=cut,
        cut_value=cut_value,
        flow={key: f for key, f in accepted.items() if f > 0},
        plan=full,
    )
