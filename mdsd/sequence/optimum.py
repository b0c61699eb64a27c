"""The exact sequence-level optimum of tokens per step for a drafted token tree (docs/mathematics.md §7).

A verifier of one decoding step sees the drafted tree T (law D) and emits a string s = y_1..y_{m+1}
whose first m tokens are a path of T (m accepted drafts, one more token). It is lossless iff the emitted
string followed by the target's own continuation has the target's law: writing a(s) for the probability
of emitting exactly s and r(s) for that of emitting s or a longer string starting with s,

.. math:: r(t) = p(t), \\qquad r(u t) = p(t \\mid u)\\,\\bigl(r(u) - a(u)\\bigr) \\;(1 \\le |u| \\le L),
          \\qquad r(s) = a(s) \\;(|s| = L + 1),

i.e. given that the step goes on past u, its next token has law p(· | u) (the stop is a stopping time of
the target's sequence). Every lossless verifier is a plan x(T, s) >= 0 with Σ_s x(T, s) = D(T) and
a(s) = Σ_T x(T, s), so the best tokens per step is the linear program

.. math:: \\max_{x \\ge 0} \\sum_{T, s} |s|\\, x(T, s) \\quad \\text{s.t. the rows above.}

It is docs/mathematics.md §7's coupling LP in π(T, y, m) with its continuation summed out (π(T, y, m) =
x(T, y_{1..m+1}) P(y_{m+2..L+1} | y_{1..m+1}) maps the optima onto each other); that literal program is
``method="coupling"`` (:mod:`mdsd.sequence.coupling`), and also gives the "idealised" optimum without
the stopping-time rows (``lossless=False``: any coupling of T and y, Sun et al.'s 12/9).

Two drafted trees with the same set of token paths admit the same plans, so they are merged (their
probabilities added). Sizes, with #T the number of such classes (at most Π_u |supp Q_u|, e.g. n^size for
i.i.d. drafts), N = tree.num_nodes, L = tree depth and S = n + n² + ... + n^{L+1}:
variables <= #T · n · N + 2 S, constraints = #T + (strings emitted) + S <= #T + 2 S, nonzeros
<= 2 #T n N + (n + 2) · 2 S. The coupling LP has up to #T · n^{L+1} · (L + 1) variables.

References: Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025 (the chain);
Weng et al., "Traversal Verification for Speculative Tree Decoding", NeurIPS 2025 (trees).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsd.sequence.coupling import coupling_program
from mdsd.sequence.drafts import LawSpec, enumerate_drafts, node_laws, node_paths
from mdsd.sequence.models import SequenceModel, check_pair, prefixes
from mdsd.sequence.program import Program, Solved, solve
from mdsd.token_tree import Tree

__all__ = ["solve_tree_otm", "optimal_tokens_per_step", "TreeOTMResult", "METHODS", "MAX_VARIABLES"]

METHODS = ("auto", "emitted", "coupling")
MAX_VARIABLES = 4_000_000  # larger programs are refused with a ValueError

TreeKey = tuple[tuple[int, ...], ...]  # a drafted tree as its sorted set of token paths (root excluded)


@dataclass(frozen=True)
class TreeOTMResult:
    """The best tokens per step of a drafted tree law, with its plan and certificate.

    Attributes
    ----------
    value : float
        max E[m + 1] over lossless verifiers (over all couplings for ``lossless=False``).
    method : str
        "emitted" or "coupling" (see the module docstring).
    status : str
        "optimal" when HiGHS found an optimum AND the recomputed dual bound and primal residual are
        within 1e-7 of it; otherwise "unverified" (the message says why).
    message : str
    lossless : bool
        Whether the stopping-time (lossless) constraints were imposed.
    dual_bound : float
        An upper bound on ``value`` from the LP dual, valid whatever its rounding (the certificate).
    plan : dict
        {(tree, s): x(T, s)}: probability of drafting tree T (its sorted token paths) and emitting s.
    emitted : dict
        {s: a(s)}: the law of the emitted string.
    trees : dict
        {tree: D(T)}: the drafted tree law, trees with the same token paths merged.
    sizes : dict
        trees, variables, constraints, nonzeros of the program.
    seconds : float
        HiGHS solve time (building excluded).
    coupling : dict or None
        Method "coupling": {(tree, y, m): π(T, y, m)} over its positive entries.
    """

    value: float
    method: str
    status: str
    message: str
    lossless: bool
    dual_bound: float
    plan: dict[tuple[TreeKey, tuple[int, ...]], float]
    emitted: dict[tuple[int, ...], float]
    trees: dict[TreeKey, float]
    sizes: dict[str, int]
    seconds: float
    coupling: dict[tuple[TreeKey, tuple[int, ...], int], float] | None = None

    @property
    def gap(self) -> float:
        """``dual_bound − value``: zero (to rounding) when the certificate proves optimality."""
        return self.dual_bound - self.value


def drafted_classes(
    draft: SequenceModel, tree: Tree, law: LawSpec, context: tuple[int, ...]
) -> dict[TreeKey, float]:
    """{sorted token paths of T: D(T)}: the tree law with trees of equal path sets merged."""
    classes: dict[TreeKey, float] = {}
    for tokens, weight in enumerate_drafts(draft, tree, node_laws(tree, law), context):
        key = tuple(sorted(set(node_paths(tree, tokens)[1:])))
        classes[key] = classes.get(key, 0.0) + float(weight)
    return classes


def _validate(target, draft, tree, context, method, lossless) -> tuple[tuple[int, ...], str]:
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be an mdsd.Tree, got {type(tree).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    if not isinstance(lossless, bool):
        raise TypeError(f"lossless must be True or False, got {lossless!r}")
    context = tuple(int(t) for t in context)
    check_pair(target, draft, tree.max_depth, context)
    if method == "auto":
        method = "emitted" if lossless else "coupling"
    if method == "emitted" and not lossless:
        raise ValueError("lossless=False (the idealised coupling) needs method='coupling'")
    return context, method


def solve_tree_otm(
    target: SequenceModel,
    draft: SequenceModel,
    tree: Tree,
    law: LawSpec,
    *,
    context: tuple[int, ...] = (),
    lossless: bool = True,
    method: str = "auto",
) -> TreeOTMResult:
    """The maximum expected tokens per step E[m + 1] over lossless verifiers of a drafted tree law.

    Parameters
    ----------
    target, draft : SequenceModel
        The target's and the draft's conditionals (:func:`mdsd.toy_sequence_pair`, :mod:`mdsd.hf`).
    tree : Tree
        The token tree; every internal node draws its children by ``law`` from q(· | context, path).
    law : str, DraftLaw or callable
        The node-level draft law (see :func:`mdsd.sequence.drafts.node_laws`); one child = one draw.
    context : tuple of int
        Tokens already decoded (the step starts after them).
    lossless : bool
        False drops the stopping-time constraints: the best coupling of T and the target's sequence,
        which a verifier cannot reach (Sun et al.'s "idealised" verifier).
    method : {"auto", "emitted", "coupling"}
        The compact LP in emitted strings (default) or the coupling π(T, y, m) of docs/mathematics.md §7
        as written.

    Returns
    -------
    TreeOTMResult

    Raises
    ------
    ValueError
        For more than :data:`mdsd.sequence.drafts.MAX_TREES` drafted trees or a program of more than
        :data:`MAX_VARIABLES` variables (sizes: see the module docstring; a binary tree of depth 2 over
        4 tokens with i.i.d. children is 660 tree classes, 16,040 variables, 892 rows, about 1 s), bad
        models, tree, law or context.

    Examples
    --------
    Sun et al.'s example: p = (1/3, 2/3), q = (2/3, 1/3) at every prefix, two drafted tokens.

    >>> from mdsd.sequence.models import SequenceModel
    >>> p, q = SequenceModel.context_free([1 / 3, 2 / 3]), SequenceModel.context_free([2 / 3, 1 / 3])
    >>> r = solve_tree_otm(p, q, Tree.chain(2), "iid")
    >>> round(r.value * 9, 9), r.status, abs(r.gap) < 1e-9
    (20.0, 'optimal', True)
    """
    context, method = _validate(target, draft, tree, context, method, lossless)
    classes = drafted_classes(draft, tree, law, context)
    n, depth = target.n, tree.max_depth
    strings = sum(n**length for length in range(1, depth + 2))
    if method == "emitted":
        estimate = len(classes) * n * tree.num_nodes + 2 * strings
    else:
        estimate = len(classes) * n ** (depth + 1) * (depth + 1) + strings
    if estimate > MAX_VARIABLES:
        raise ValueError(
            f"the {method} program would have up to {estimate:,} variables > MAX_VARIABLES = "
            f"{MAX_VARIABLES:,} ({len(classes):,} drafted trees, n = {n}, depth {depth}); "
            "use a smaller vocabulary or tree"
        )
    if method == "emitted":
        program, decode = _emitted_program(target, classes, depth, context)
        coupling = None
    else:
        program, decode, coupling = coupling_program(target, classes, depth, context, lossless)
    sizes = {"trees": len(classes), **program.sizes()}
    solved = solve(program)
    return _result(solved, decode, coupling, classes, sizes, method, lossless)


def optimal_tokens_per_step(
    target: SequenceModel, draft: SequenceModel, tree: Tree, law: LawSpec, *, context: tuple[int, ...] = ()
) -> float:
    """:func:`solve_tree_otm`'s value alone (lossless, compact LP)."""
    return solve_tree_otm(target, draft, tree, law, context=context).value


def _result(solved: Solved, decode, coupling, classes, sizes, method, lossless) -> TreeOTMResult:
    plan: dict = {}
    for (key, s), j in decode:
        if solved.x[j] > 0:
            plan[key, s] = plan.get((key, s), 0.0) + float(solved.x[j])
    emitted: dict[tuple[int, ...], float] = {}
    for (_, s), mass in plan.items():
        emitted[s] = emitted.get(s, 0.0) + mass
    pi = None if coupling is None else {k: float(solved.x[j]) for k, j in coupling.items() if solved.x[j] > 0}
    gap = solved.bound - solved.value
    how = ("", "; unscaled", "; interior point")[solved.attempt]
    if solved.certified:
        status, why = "optimal", f"dual bound within {gap:.1e}, primal residual {solved.residual:.1e}{how}"
    else:
        status = "unverified"
        why = f"HiGHS optimal but dual bound − value = {gap:.1e}, primal residual {solved.residual:.1e}{how}"
    return TreeOTMResult(
        value=solved.value,
        method=method,
        status=status,
        message=f"HiGHS on {sizes['variables']:,} variables, {sizes['constraints']:,} rows: {why}",
        lossless=lossless,
        dual_bound=solved.bound,
        plan=plan,
        emitted=emitted,
        trees=dict(classes),
        sizes=sizes,
        seconds=solved.seconds,
        coupling=pi,
    )


def _emitted_program(
    target: SequenceModel, classes: dict[TreeKey, float], depth: int, context: tuple[int, ...]
) -> tuple[Program, list[tuple[tuple[TreeKey, tuple[int, ...]], int]]]:
    """The compact LP: variables x(T, s), a(s) (strings some x emits), r(s) (every string of length
    1..L+1); rows: one per tree (Σ_s x = D), one per a(s) (a − Σ_T x = 0), one per r(s) (the recursion)."""
    n = target.n
    prog = Program()
    keys = list(classes)
    tree_row = prog.add_rows([classes[key] for key in keys])
    # the strings a drafted tree can emit: one of its paths (or the empty one) plus any token
    emits = {key: [(*v, t) for v in ((), *key) for t in range(n)] for key in keys}
    strings = sorted({s for ss in emits.values() for s in ss}, key=lambda s: (len(s), s))
    a_row = _index(strings, prog.add_rows(np.zeros(len(strings))))
    all_strings = [s for s in prefixes(n, depth + 1) if s]
    # r row of s = u t: r(s) − p(t|u) r(u) + p(t|u) a(u) = [u = ()] p(t); final rows r(s) − a(s) = 0
    r_rhs = [float(target(context)[s[0]]) if len(s) == 1 else 0.0 for s in all_strings]
    r_row = _index(all_strings, prog.add_rows(r_rhs))
    final = [s for s in all_strings if len(s) == depth + 1]
    f_row = _index(final, prog.add_rows(np.zeros(len(final))))
    decode = []
    for i, key in enumerate(keys):
        for s in emits[key]:
            decode.append(
                ((key, s), prog.add_column(len(s), classes[key], [(tree_row + i, 1.0), (a_row[s], -1.0)]))
            )
    cond = {u: target(context + u) for u in prefixes(n, depth)}
    for s in strings:  # a(s): its own row, the rows of its one-token extensions (or its final row)
        entries = [(a_row[s], 1.0)]
        if len(s) <= depth:
            entries += [(r_row[(*s, t)], float(cond[s][t])) for t in range(n)]
        else:
            entries.append((f_row[s], -1.0))
        prog.add_column(0.0, 1.0, entries)
    for s in all_strings:  # r(s)
        entries = [(r_row[s], 1.0)]
        if len(s) <= depth:
            entries += [(r_row[(*s, t)], -float(cond[s][t])) for t in range(n)]
        else:
            entries.append((f_row[s], 1.0))
        prog.add_column(0.0, 1.0, entries)
    return prog, decode


def _index(items: list, first: int) -> dict:
    """{item: first + position}: the row (or column) index of each item of a block."""
    return {item: first + i for i, item in enumerate(items)}
