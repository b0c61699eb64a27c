"""One entry point for the optimal multi-draft acceptance α*(p, Q): validation and method dispatch.

Methods (all exact; they agree to 1e-8 in the tests):

- ``"coupling"``: the full coupling LP in cvxpy (n^k · n variables, tiny n);
- ``"lp"``: the simplified LP (accepting variables only) as a sparse matrix, HiGHS via highspy;
- ``"maxflow"``: the tuple-token flow network, networkx preflow-push;
- ``"dual"``: the min-cut dual by one sort and one scan, O(n log n) (IID, WithoutReplacement, Hub,
  Greedy, TopK; not Joint);
- ``"auto"``: ``"dual"`` where it exists, else ``"maxflow"`` for small networks and ``"lp"`` above.

See ../shared/MATH.md §1 and Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from mdsd.laws import IID, DraftLaw, Greedy, Hub, TopK, WithoutReplacement
from mdsd.otm.coupling import solve_coupling
from mdsd.otm.dual import (
    CLOSED_FORM_LAWS,
    PREFIX_LAWS,
    closed_form_dual,
    containment,
    prefix_dual,
    prefix_table,
)
from mdsd.otm.lp import solve_lp
from mdsd.otm.maxflow import solve_maxflow
from mdsd.otm.network import build_network
from mdsd.otm.result import OTMResult
from mdsd.otm.scan import best_gains
from mdsd.validation import as_pair, check_k

METHODS = ("auto", "dual", "maxflow", "lp", "coupling")
LAWS = {
    "iid": IID,
    "without_replacement": WithoutReplacement,
    "wor": WithoutReplacement,
    "hub": lambda k: Hub(),
    "greedy": Greedy,
    "topk": TopK,
}
MAX_TUPLES = 5_000_000  # enumerated networks larger than this are refused (use the dual)
_MAXFLOW_EDGES = 2_000  # "auto" without a dual: max-flow up to this many accepting edges, LP above


def law_from_name(name: str, k: int) -> DraftLaw:
    """The draft law called ``name`` (iid, without_replacement / wor, hub, greedy, topk) with k drafts.

    >>> law_from_name("wor", 3)
    WithoutReplacement(k=3)
    """
    if name not in LAWS:
        raise ValueError(f"law must be one of {', '.join(LAWS)}; got {name!r}")
    k = check_k(k, "k")
    if name == "hub" and k != 2:
        raise ValueError(f"the hub law has k = 2 drafts; got k = {k}")
    return LAWS[name](k)


def _validate(p: object, q: object, law: object, method: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(law, DraftLaw):
        raise TypeError(f"law must be a draft law from mdsd.laws (e.g. mdsd.IID(2)); got {law!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    p_arr, q_arr = as_pair(p, q)
    law.check(q_arr)
    return p_arr, q_arr


def has_dual(law: DraftLaw) -> bool:
    """Whether ``law`` has the O(n log n) min-cut dual (every law but Joint)."""
    return isinstance(law, PREFIX_LAWS + CLOSED_FORM_LAWS)


def _tuple_count(q: np.ndarray, law: DraftLaw) -> float:
    support = float(np.count_nonzero(q))
    if isinstance(law, (IID, WithoutReplacement)):
        return support**law.k
    return float(len(law.table)) if hasattr(law, "table") else support


def _solve_dual(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> OTMResult:
    if not has_dual(law):
        raise ValueError(f"method 'dual' does not support {law!r}; use 'maxflow', 'lp' or 'coupling'")
    if isinstance(law, PREFIX_LAWS):
        value, order, best = prefix_dual(p, q, law)
        inside = np.zeros(p.shape, dtype=bool)
        inside[order[: int(best)]] = True
        how = "sorted-prefix scan over p/q"
    else:
        value, inside = closed_form_dual(p, q, law)
        how = "closed form"
    return OTMResult(
        value=float(value),
        method="dual",
        status="optimal",
        message=f"min-cut dual, {how}",
        cut=tuple(np.flatnonzero(inside).tolist()),
        cut_value=float(p[inside].sum()) + 1.0 - containment(q, law, inside),
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
        ``value``, ``method``, ``status``, the minimising set ``cut`` with its ``cut_value``, and the
        ``flow`` (LP, max-flow, coupling) or ``plan`` (coupling).

    >>> import mdsd
    >>> r = mdsd.solve_otm([1.0, 0.0], [0.5, 0.5], mdsd.IID(2))  # P(0 is among two fair drafts)
    >>> r.value, r.cut, r.cut_value
    (0.75, (1,), 0.75)
    """
    p_arr, q_arr = _validate(p, q, law, method)
    if p_arr.ndim != 1:
        raise ValueError(
            f"solve_otm takes one pair of vectors [n]; got shape {p_arr.shape} (use optimal_acceptance)"
        )
    if method == "auto":
        method = "dual" if has_dual(law) else None
    if method == "dual":
        return _solve_dual(p_arr, q_arr, law)
    if _tuple_count(q_arr, law) > MAX_TUPLES:
        raise ValueError(
            f"{law!r} on {q_arr.size} tokens has too many draft tuples for method {method or 'auto'!r}; "
            "use method='dual'"
        )
    net = build_network(q_arr, law)
    if method is None:
        method = "maxflow" if net.edge_token.size <= _MAXFLOW_EDGES else "lp"
    solver = {"maxflow": solve_maxflow, "lp": solve_lp, "coupling": solve_coupling}[method]
    return solver(p_arr, net)


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
    if method in ("auto", "dual") and has_dual(law):  # the value alone: no certificate to build
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
    """α* for several k and the IID / WithoutReplacement laws, sharing one sort of p/q per row.

    Parameters
    ----------
    p, q : array_like [..., n]
    ks : iterable of int
        Draft counts.
    laws : iterable of str, or dict
        Any of "iid", "without_replacement" (alias "wor"), each with every k of ``ks``; or a dict
        {law name: its own ks}, e.g. ``{"iid": range(1, 9), "wor": [2]}``. Result names are canonical.
    rows_per_block : int
        Rows processed together (bounds memory at about 10 · rows_per_block · n floats).

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
    items = []
    for name, law_ks in wanted.items():
        if name not in ("iid", "without_replacement", "wor"):
            raise ValueError(f"laws must be 'iid' or 'without_replacement' ('wor'); got {name!r}")
        canonical = "without_replacement" if name == "wor" else name
        items += [(canonical, check_k(k, "ks")) for k in law_ks]
    p_arr, q_arr = as_pair(p, q)
    support = int(np.count_nonzero(q_arr > 0, axis=-1).min())
    for name, k in items:
        law = law_from_name(name, k)
        if law.min_support() > support:
            law.check(q_arr)  # raises, naming q
    check_k(rows_per_block, "rows_per_block")
    lead = p_arr.shape[:-1]
    flat_p, flat_q = p_arr.reshape(-1, p_arr.shape[-1]), q_arr.reshape(-1, q_arr.shape[-1])
    scanned = [(name, k) for name, k in items if name == "iid" or k <= 2]
    table = _scan_rows(flat_p, flat_q, scanned) if scanned else {}
    rest = {item: np.empty(flat_p.shape[0]) for item in items if item not in table}
    for start in range(0, flat_p.shape[0] if rest else 0, rows_per_block):
        block = slice(start, start + rows_per_block)
        for key, values in prefix_table(flat_p[block], flat_q[block], list(rest)).items():
            rest[key][block] = values
    table.update(rest)
    return {key: table[key].reshape(lead) for key in items}


def _scan_rows(
    p: np.ndarray, q: np.ndarray, items: list[tuple[str, int]]
) -> dict[tuple[str, int], np.ndarray]:
    """α* per row of p, q [B, n] for IID / WithoutReplacement k <= 2 items by the bucketed scan."""
    out = {item: np.empty(p.shape[0]) for item in items}
    for row in range(p.shape[0]):
        for item, gain in best_gains(p[row], q[row], items).items():
            out[item][row] = gain
    return {item: np.clip(1.0 - gains, 0.0, 1.0) for item, gains in out.items()}


def _dual_values(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> np.ndarray:
    """α* [...] by the dual, value only: closed form, bucketed scan (IID, WoR k <= 2) or full sort."""
    if isinstance(law, CLOSED_FORM_LAWS):
        return closed_form_dual(p, q, law)[0]
    if isinstance(law, WithoutReplacement) and law.k > 2:
        return prefix_dual(p, q, law)[0]
    item = ("iid" if isinstance(law, IID) else "without_replacement", law.k)
    flat_p, flat_q = p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1])
    return _scan_rows(flat_p, flat_q, [item])[item].reshape(p.shape[:-1])


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
    if _tuple_count(q_arr, law) > MAX_TUPLES:
        raise ValueError(f"{law!r} on {q_arr.size} tokens has too many draft tuples to build a coupling")
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
        value=float(matrix[net.edge_tuple, net.edge_token].sum()),
        method="lp",
        status=result.status,
        message=result.message + "; plan rebuilt from the residuals",
        cut=result.cut,
        cut_value=result.cut_value,
        flow=result.flow,
        plan=plan,
    )
