"""mdsd.highs: optimality proven by an independent KKT check, errors unless optimal, and no output."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import sparse

from mdsd.highs import LPError, solve_sparse_lp


def random_lp(rng: np.random.Generator, rows: int, cols: int):
    """A feasible, bounded LP: x = 0 is feasible, every column is boxed or costs against the sense."""
    A = sparse.random(rows, cols, density=0.4, random_state=rng, data_rvs=lambda m: rng.normal(size=m))
    kind = rng.integers(3, size=rows)  # 0: <= b, 1: >= -b, 2: ranged
    b = rng.random(rows)  # b >= 0 keeps x = 0 feasible
    row_lower = np.where(kind == 0, -np.inf, -b)
    row_upper = np.where(kind == 1, np.inf, b)
    col_lower = np.where(rng.random(cols) < 0.5, 0.0, -rng.random(cols))
    col_upper = rng.random(cols) * 3.0
    return rng.normal(size=cols), A, row_lower, row_upper, col_lower, col_upper


def kkt_gap(lp, c, A, row_lower, row_upper, col_lower, col_upper, maximize: bool, tol: float) -> float:
    """Check primal feasibility and dual feasibility from the row duals alone; return |primal − dual|.

    With y the row duals (HiGHS: d objective / d active row bound) the column duals are d = c − Aᵀy; at an
    optimum of a maximisation each y_i, d_j has the sign that its active bound allows, and
    c·x = Σ y_i (active row bound) + Σ d_j (active column bound) (strong duality).
    """
    x, y = lp.x, lp.row_dual
    ax = A @ x
    assert np.all(ax >= row_lower - tol) and np.all(ax <= row_upper + tol)
    assert np.all(x >= col_lower - tol) and np.all(x <= col_upper + tol)
    d = c - A.T @ y
    sign = 1.0 if maximize else -1.0
    dual = 0.0
    for value, lo, hi, where in ((y, row_lower, row_upper, "row"), (d, col_lower, col_upper, "col")):
        up = sign * value > tol  # a maximisation gains by raising the upper bound
        down = sign * value < -tol
        assert np.all(np.isfinite(hi[up])), where
        assert np.all(np.isfinite(lo[down])), where
        dual += float(value[up] @ hi[up] + value[down] @ lo[down])
    return abs(float(c @ x) - dual)


@pytest.mark.parametrize("maximize", [True, False])
def test_random_lps_are_optimal_by_strong_duality(maximize):
    rng = np.random.default_rng(1 + maximize)
    for _ in range(60):
        c, A, rl, ru, cl, cu = random_lp(rng, int(rng.integers(1, 12)), int(rng.integers(1, 12)))
        if not maximize:
            c = -c
        lp = solve_sparse_lp(c, A, rl, ru, cl, cu, maximize=maximize)
        assert lp.status == "Optimal"
        assert lp.objective == pytest.approx(float(c @ lp.x), abs=1e-9)
        assert kkt_gap(lp, c, A, rl, ru, cl, cu, maximize, tol=1e-8) <= 1e-8


def test_row_duals_are_the_objective_rate_per_unit_of_bound():
    rng = np.random.default_rng(3)
    c, A, rl, ru, cl, cu = random_lp(rng, 6, 8)
    base = solve_sparse_lp(c, A, rl, ru, cl, cu)
    delta = 1e-6
    for i in range(6):
        moved_lo, moved_hi = rl.copy(), ru.copy()
        if np.isfinite(ru[i]):
            moved_hi[i] += delta
        if np.isfinite(rl[i]):
            moved_lo[i] -= delta
        moved = solve_sparse_lp(c, A, moved_lo, moved_hi, cl, cu)
        slope = (moved.objective - base.objective) / delta  # both bounds loosened: one of them is active
        assert slope == pytest.approx(abs(base.row_dual[i]), abs=1e-5), i


def test_equality_rows_and_a_known_optimum():
    """max x0 + 2 x1 s.t. x0 + x1 = 1, x >= 0: x = (0, 1), objective 2, dual of the row 2."""
    A = sparse.csr_matrix([[1.0, 1.0]])
    lp = solve_sparse_lp([1.0, 2.0], A, [1.0], [1.0], [0.0, 0.0], [np.inf, np.inf])
    np.testing.assert_allclose(lp.x, [0.0, 1.0], atol=1e-12)
    assert lp.objective == pytest.approx(2.0) and lp.row_dual == pytest.approx([2.0])


@pytest.mark.parametrize(
    "row_lower, row_upper, col_upper, match",
    [
        ([2.0], [np.inf], [1.0], "Infeasible"),  # x <= 1 but x >= 2
        ([-np.inf], [np.inf], [np.inf], "Unbounded"),  # max x, x free above
    ],
)
def test_not_optimal_raises(row_lower, row_upper, col_upper, match):
    with pytest.raises(LPError, match=match):
        solve_sparse_lp([1.0], sparse.csr_matrix([[1.0]]), row_lower, row_upper, [0.0], col_upper)


def test_a_limit_hit_is_not_an_optimum():
    rng = np.random.default_rng(4)
    c, A, rl, ru, cl, cu = random_lp(rng, 30, 30)
    with pytest.raises(LPError, match="limit"):
        solve_sparse_lp(c, A, rl, ru, cl, cu, options={"simplex_iteration_limit": 1, "presolve": "off"})


@pytest.mark.parametrize(
    "change, match",
    [
        ({"c": [1.0, 2.0]}, "c must have shape"),
        ({"row_upper": [np.nan]}, "row_upper contains NaN"),
        ({"A": np.ones((1, 1))}, "A must be a scipy sparse matrix"),
        ({"col_lower": [[0.0]]}, "col_lower must have shape"),
        ({"options": {"no_such_option": 1}}, "options: HiGHS rejects no_such_option"),
    ],
)
def test_bad_arguments_name_themselves(change, match):
    args = {
        "c": [1.0],
        "A": sparse.csr_matrix([[1.0]]),
        "row_lower": [-np.inf],
        "row_upper": [1.0],
        "col_lower": [0.0],
        "col_upper": [np.inf],
    }
    args.update(change)
    with pytest.raises(ValueError, match=match):
        solve_sparse_lp(**args)


def test_nothing_reaches_stdout_in_a_fresh_interpreter():
    """HiGHS's banner goes to the C stdout on the first solver of a process; it must not appear."""
    code = (
        "import numpy as np; from scipy import sparse; from mdsd.highs import solve_sparse_lp\n"
        "lp = solve_sparse_lp([1.0], sparse.csr_matrix([[1.0]]), [-np.inf], [1.0], [0.0], [np.inf])\n"
        "print(lp.objective)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "1.0\n"
