"""One entry point for the optimal multi-draft acceptance α*(p, Q): validation and method dispatch.

Methods (exact; they agree to 1e-9 in the tests):

- ``"coupling"``: the full coupling LP in cvxpy (T · n variables over the T draft tuples, tiny n);
- ``"lp"``: the simplified LP over the distinct draft sets, HiGHS via :mod:`mdsd.highs`;
- ``"maxflow"``: the set-token flow network, networkx (Boykov-Kolmogorov augmenting paths);
- ``"dual"``: the min-cut dual, O(n log n): the sorted-prefix scan or a closed form, as the law's
  :meth:`~mdsd.laws.DraftLaw.dual_form` says (every registered law; not Joint);
- ``"auto"``: ``"dual"`` where the law has one, else ``"maxflow"`` for small networks and ``"lp"`` above.

Results say how sure they are (:class:`OTMResult` ``status`` and ``basis``): LP and max-flow optima are
proven; the dual is proven for i.i.d. drafts, drafts without replacement with k ≤ 2 and the closed forms,
and "conjectured" for k ≥ 3 drafts without replacement (an unproven sorted-prefix claim, checked against
brute force in the tests, with a quadrature whose error estimate is reported).
See docs/mathematics.md §1 and Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mdsd.laws import DraftLaw, law_from_name
from mdsd.otm.coupling import solve_coupling
from mdsd.otm.dual import modular_dual, prefix_order, prefix_scan
from mdsd.otm.lp import solve_lp
from mdsd.otm.maxflow import solve_maxflow
from mdsd.otm.network import build_network
from mdsd.otm.result import OTMResult
from mdsd.otm.scan import best_gains
from mdsd.validation import as_pair, check_k

METHODS = ("auto", "dual", "maxflow", "lp", "coupling")
_ENUMERATED = {"maxflow": solve_maxflow, "lp": solve_lp, "coupling": solve_coupling}
MAX_TUPLES = 1_000_000  # enumerated joints larger than this are refused (use the dual)
# The coupling LP has a row per tuple and T · n variables; cvxpy/HiGHS take about 0.5 ms a tuple (8 s at
# 16,384 tuples, n = 4, k = 7; 1.8 s at 4,096 tuples, n = 64, k = 2), minutes at n = 4, k = 8.
MAX_COUPLING_TUPLES = 20_000
MAX_COUPLING_VARIABLES = 2_000_000
_MAXFLOW_EDGES = 2_000  # "auto" without a dual: max-flow up to this many accepting edges, LP above


def _validate(p: object, q: object, law: object, method: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(law, DraftLaw):
        raise TypeError(f"law must be a draft law from mdsd.laws (e.g. mdsd.IID(2)); got {law!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    p_arr, q_arr = as_pair(p, q)
    law.check(q_arr)
    return p_arr, q_arr


def check_enumerable(q: np.ndarray, law: DraftLaw, method: str, flag: str = "") -> None:
    """Raise ``ValueError`` if ``method`` (an enumerating one) would build too large a problem for q [n].

    Every enumerating method lists the law's T draft tuples (at most :data:`MAX_TUPLES`); the coupling LP
    also has a row per tuple and T · n variables (at most :data:`MAX_COUPLING_TUPLES` and
    :data:`MAX_COUPLING_VARIABLES`). The message suggests other methods as ``method='lp'``, or, given the
    command line's ``flag``, as ``--method lp``.
    """

    def spelled(name: str) -> str:
        return f"{flag} {name}" if flag else f"method={name!r}"

    dual = law.dual_form() is not None
    tuples = law.tuple_count(q)
    instead = f"use {spelled('dual')}" if dual else "use a smaller vocabulary"
    if tuples > MAX_TUPLES:
        raise ValueError(
            f"{law!r} on {q.size} tokens has too many draft tuples ({_count(tuples)} > {MAX_TUPLES:,}) for "
            f"{spelled(method)}; {instead}"
        )
    if method == "coupling" and (tuples > MAX_COUPLING_TUPLES or tuples * q.size > MAX_COUPLING_VARIABLES):
        more = ["maxflow", "dual"] if dual else ["maxflow"]
        more = (
            more if flag else [repr(name) for name in more]
        )  # --method lp or maxflow / method='lp' or 'maxflow'
        raise ValueError(
            f"{law!r} on {q.size} tokens makes a coupling LP of {_count(tuples)} tuples and "
            f"{_count(tuples * q.size)} variables (at most {MAX_COUPLING_TUPLES:,} and "
            f"{MAX_COUPLING_VARIABLES:,}); use {spelled('lp')} or {', or '.join(more)}"
        )


def _count(n: int) -> str:
    """An exact count up to 10^9 (with thousands separators), else three significant digits.

    >>> _count(40_320), _count(8**100)
    ('40,320', '2.04e+90')
    """
    return f"{n:,}" if n < 10**9 else f"{float(n):.3g}"


def _solve_dual(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> OTMResult:
    """The dual's minimising set A, and α* = p(A) + 1 − Q(set ⊆ A) from the law's own containment
    formula for that one set (so ``value == cut_value``); the scan's error estimate comes at a finer step."""
    form = law.dual_form()
    if form is None:
        raise ValueError(f"method 'dual' does not support {law!r}; use 'maxflow', 'lp' or 'coupling'")
    basis, error = form.basis, 0.0
    if form.kind == "prefix":
        scan = prefix_scan(p, q, law, fine=True)
        inside = np.zeros(p.shape, dtype=bool)
        inside[scan.order[: int(scan.length)]] = True
        error = float(scan.error)
        how = "sorted-prefix scan over p/q"
        if not form.exact:
            basis += f" (error <= {error:.1e})"
    else:
        inside = modular_dual(p, q, law)[1]
        how = "closed form"
    cut_value = float(p[inside].sum()) + 1.0 - law.containment(q, inside)
    return OTMResult(
        value=min(max(cut_value, 0.0), 1.0),
        method="dual",
        status="optimal" if form.proven else "conjectured",
        basis=basis,
        message=f"min-cut dual, {how}",
        cut=tuple(np.flatnonzero(inside).tolist()),
        cut_value=cut_value,
        error=error,
    )


def solve_otm(p: object, q: object, law: DraftLaw, method: str = "auto") -> OTMResult:
    """The optimal acceptance α*(p, Q) of ``law``'s drafts from q, with its certificate.

    .. math:: \\alpha^*(p, Q) = \\max_{\\pi \\in \\Pi(Q, p)} P_\\pi[Y \\in \\mathrm{set}(\\bar x)]
              = \\min_{A \\subseteq V} p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A).

    Parameters
    ----------
    p, q : array_like [n]
        Target and draft distributions (numpy, list or torch; validated and renormalised).
    law : DraftLaw
        How the k drafts are drawn from q (``mdsd.IID(k)``, ``mdsd.WithoutReplacement(k)``, ...).
    method : str
        One of :data:`METHODS`; see the module docstring.

    Returns
    -------
    OTMResult
        ``value``, ``method``, ``status`` ("optimal" or "conjectured") and its ``basis``, the minimising
        set ``cut`` with its ``cut_value``, the quadrature ``error`` estimate (dual, k ≥ 3 drafts without
        replacement), and the ``flow`` (LP, max-flow, coupling) or ``plan`` (coupling).

    Raises
    ------
    ValueError
        On bad input, a law without a dual for method "dual", or an enumeration beyond
        :func:`check_enumerable`'s limits. :class:`mdsd.highs.LPError` if an LP solver stops short of
        a proven optimum.

    >>> import mdsd
    >>> r = mdsd.solve_otm([1.0, 0.0], [0.5, 0.5], mdsd.IID(2))  # P(0 is among two fair drafts)
    >>> r.value, r.cut, r.cut_value, r.status, r.basis
    (0.75, (1,), 0.75, 'optimal', 'sorted-prefix theorem (i.i.d. drafts)')
    """
    p_arr, q_arr = _validate(p, q, law, method)
    if p_arr.ndim != 1:
        raise ValueError(
            f"solve_otm takes one pair of vectors [n]; got shape {p_arr.shape} (use optimal_acceptance)"
        )
    if method == "auto" and law.dual_form() is not None:
        method = "dual"
    if method == "dual":
        return _solve_dual(p_arr, q_arr, law)
    check_enumerable(q_arr, law, method)
    net = build_network(q_arr, law)
    if method == "auto":
        method = "maxflow" if net.edge_token.size <= _MAXFLOW_EDGES else "lp"
    return _ENUMERATED[method](p_arr, net)


def optimal_acceptance(p: object, q: object, law: DraftLaw, method: str = "auto") -> float | np.ndarray:
    """α*(p, Q) alone: a float for p, q of shape [n], an array [...] for batched p, q [..., n].

    Batched inputs use the O(n log n) dual when the law has one (method "auto" or "dual"); other methods
    solve row by row.

    >>> import mdsd
    >>> mdsd.optimal_acceptance([1.0, 0.0], [0.5, 0.5], mdsd.IID(1))
    0.5
    >>> mdsd.optimal_acceptance([[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]], mdsd.IID(2))
    array([1.  , 0.75])
    """
    p_arr, q_arr = _validate(p, q, law, method)
    if method in ("auto", "dual") and law.dual_form() is not None:  # the value alone: no certificate
        values = _dual_values(p_arr, q_arr, law)
        return float(values) if p_arr.ndim == 1 else values
    if p_arr.ndim == 1:
        return solve_otm(p_arr, q_arr, law, method).value
    flat_p, flat_q = p_arr.reshape(-1, p_arr.shape[-1]), q_arr.reshape(-1, q_arr.shape[-1])
    values = [solve_otm(a, b, law, method).value for a, b in zip(flat_p, flat_q, strict=True)]
    return np.array(values).reshape(p_arr.shape[:-1])


def optimal_acceptance_table(
    p: object,
    q: object,
    ks: Iterable[int] = range(1, 9),
    laws: Iterable[str] | dict[str, Iterable[int]] = ("iid", "without_replacement"),
    rows_per_block: int = 16,
) -> dict[tuple[str, int], np.ndarray]:
    """α* by the dual for several k and laws, sharing the work between them (one sort of p/q per row).

    Parameters
    ----------
    p, q : array_like [..., n]
    ks : iterable of int
        Draft counts.
    laws : iterable of str, or dict
        Registered law names (:func:`mdsd.laws.law_names`, aliases allowed), each with every k of ``ks``;
        or a dict {law name: its own ks}, e.g. ``{"iid": range(1, 9), "wor": [2], "hub": [2]}``. Result
        names are canonical.
    rows_per_block : int
        Rows processed together by the race quadrature (k ≥ 3 drafts without replacement).

    Returns
    -------
    dict
        {(law name, k): α* array of shape [...]}. WithoutReplacement with k > 2 runs the exponential-race
        integral row by row (about 1 s a row at n = 151,936).

    >>> t = optimal_acceptance_table([1.0, 0.0], [0.5, 0.5], ks=[1, 2], laws=["iid"])
    >>> {key: float(v) for key, v in t.items()}
    {('iid', 1): 0.5, ('iid', 2): 0.75}
    """
    ks = list(ks)
    wanted = laws if isinstance(laws, dict) else {name: ks for name in laws}
    items: dict[tuple[str, int], DraftLaw] = {}
    for name, law_ks in wanted.items():
        for k in law_ks:
            law = law_from_name(name, check_k(k, "ks"))
            if law.dual_form() is None:
                raise ValueError(f"laws: {name!r} has no dual; the table needs one")
            items[(law.name, law.k)] = law
    p_arr, q_arr = as_pair(p, q)
    for law in items.values():
        law.check(q_arr)  # raises, naming q
    check_k(rows_per_block, "rows_per_block")
    lead = p_arr.shape[:-1]
    flat_p, flat_q = p_arr.reshape(-1, p_arr.shape[-1]), q_arr.reshape(-1, q_arr.shape[-1])
    kinds = {key: law.dual_form() for key, law in items.items()}
    scanned = [law for key, law in items.items() if kinds[key].kind == "prefix" and kinds[key].exact]
    gains = _scan_rows(flat_p, flat_q, scanned)
    table = {}
    for key, law in items.items():
        if kinds[key].kind == "modular":
            table[key] = modular_dual(flat_p, flat_q, law)[0]
        elif kinds[key].exact:
            table[key] = gains[law]
        else:
            table[key] = np.empty(flat_p.shape[0])
    integrated = [key for key in items if kinds[key].kind == "prefix" and not kinds[key].exact]
    for start in range(0, flat_p.shape[0] if integrated else 0, rows_per_block):
        block = slice(start, start + rows_per_block)
        order = prefix_order(flat_p[block], flat_q[block])
        for key in integrated:
            table[key][block] = prefix_scan(flat_p[block], flat_q[block], items[key], order=order).value
    return {key: table[key].reshape(lead) for key in items}


def _scan_rows(p: np.ndarray, q: np.ndarray, laws: list[DraftLaw]) -> dict[DraftLaw, np.ndarray]:
    """α* per row of p, q [B, n] for prefix laws with exact statistics, by the bucketed scan."""
    out = {law: np.empty(p.shape[0]) for law in laws}
    for row in range(p.shape[0] if laws else 0):
        for law, gain in best_gains(p[row], q[row], laws).items():
            out[law][row] = gain
    return {law: np.clip(1.0 - gains, 0.0, 1.0) for law, gains in out.items()}


def _dual_values(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> np.ndarray:
    """α* [...] by the dual, value only: closed form, bucketed scan (exact statistics) or the full sort."""
    form = law.dual_form()
    if form.kind == "modular":
        return modular_dual(p, q, law)[0]
    if not form.exact:
        return prefix_scan(p, q, law).value
    flat_p, flat_q = p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1])
    return _scan_rows(flat_p, flat_q, [law])[law].reshape(p.shape[:-1])


def optimal_coupling(p: object, q: object, law: DraftLaw) -> OTMResult:
    """An optimal coupling π(x̄, y) with marginals Q and p, for small vocabularies.

    The accepted part comes from the simplified LP; the rest is rebuilt from the residuals
    ρ(x̄) = Q(x̄) − Σ_{z ∈ x̄} π(x̄, z) and r(y) = p(y) − Σ_x̄ π(x̄, y) (both sum to 1 − α*):

    .. math:: \\pi(\\bar x, y) \\mathrel{+}= \\rho(\\bar x)\\, r(y) / (1 - \\alpha^*).

    At the optimum ρ(x̄) r(y) = 0 whenever y ∈ set(x̄) (else the flow could grow), so acceptance stays α*.
    Returns an :class:`OTMResult` whose ``plan`` is {(x̄, y): π(x̄, y)} over its positive entries.

    >>> import mdsd
    >>> plan = mdsd.optimal_coupling([0.5, 0.5], [1.0, 0.0], mdsd.IID(1)).plan
    >>> {key: round(v, 9) for key, v in plan.items()}
    {((0,), 0): 0.5, ((0,), 1): 0.5}
    """
    p_arr, q_arr = _validate(p, q, law, "lp")
    if p_arr.ndim != 1:
        raise ValueError(f"optimal_coupling takes one pair of vectors [n]; got shape {p_arr.shape}")
    check_enumerable(q_arr, law, "lp")
    net = build_network(q_arr, law)
    result = solve_lp(p_arr, net)
    keys = net.keys()
    row = {x: t for t, x in enumerate(keys)}
    matrix = np.zeros((net.tuples.shape[0], net.n))  # [T, n]
    for (x, y), mass in result.flow.items():
        matrix[row[x], y] = mass
    rho = np.clip(net.weight - matrix.sum(axis=1), 0.0, None)
    r = np.clip(p_arr - matrix.sum(axis=0), 0.0, None)
    if rho.sum() > 0 and r.sum() > 0:
        matrix += np.outer(rho, r) / r.sum()  # rows then sum to Q exactly; columns to p up to rounding
    plan = {(keys[t], int(y)): float(matrix[t, y]) for t, y in np.argwhere(matrix > 0)}
    return OTMResult(
        value=float((matrix * net.sets[net.group]).sum()),
        method="lp",
        status=result.status,
        basis=result.basis,
        message=result.message + "; plan rebuilt from the residuals",
        cut=result.cut,
        cut_value=result.cut_value,
        flow=result.flow,
        plan=plan,
    )
