"""Predicted step times, tokens per second and speedups from two profiles (module docstring of
:mod:`mdsd.costs`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mdsd.costs.profile import CostProfile
from mdsd.token_tree import Tree
from mdsd.tree.plan import DynamicTree, Plan, static_plan, truncated_plan

__all__ = ["Overhead", "Prediction", "step_forwards", "step_seconds", "predict", "depth_seconds"]


@dataclass(frozen=True)
class Overhead:
    """Seconds a decoding step spends outside the model forwards: ``per_step + per_row_node · B · (F + M)``.

    F is the number of nodes of the target forward (root included) and M of expanded nodes: each forwarded
    node has a target distribution p and each expanded node a draft distribution q over the vocabulary, the
    rows that sampling and verification go through. Fitted by :func:`measure_overhead` for one model pair,
    verifier and temperature; ``rms_relative_error`` is the fit's error over its ``runs``.

    >>> plan = static_plan(Tree.kary([2]))  # F = 3 forwarded nodes, M = 1 expanded node
    >>> round(Overhead(per_step=1e-3, per_row_node=1e-5).seconds(plan, batch=4), 12)
    0.00116
    """

    per_step: float
    per_row_node: float
    verifier: str | None = None
    temperature: float | None = None
    runs: int = 0
    rms_relative_error: float | None = None

    def __post_init__(self) -> None:
        for name in ("per_step", "per_row_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def seconds(self, plan: Plan | Tree | DynamicTree | None, batch: float) -> float:
        """The overhead of one step of ``plan`` (or of a tree's plan) for ``batch`` rows; ``None``: of an
        autoregressive step (F = 1 forwarded node, M = 0 expanded).

        >>> round(Overhead(per_step=1e-3, per_row_node=1e-5).seconds(None, batch=4), 12)  # 1e-3 + 1e-5 · 4
        0.00104
        """
        rows = 1 if plan is None else vocabulary_rows(as_plan(plan))
        return self.per_step + self.per_row_node * batch * rows


def vocabulary_rows(plan: Plan) -> int:
    """Vocabulary rows per row of the batch: one per forwarded node (p), one per expanded node (q)."""
    return plan.num_forward + sum(g.size for g in plan.groups)


def as_plan(tree: Tree | DynamicTree | Plan) -> Plan:
    if isinstance(tree, Plan):
        return tree
    if isinstance(tree, Tree):
        return static_plan(tree)
    if isinstance(tree, DynamicTree):
        return tree.plan()
    raise TypeError(f"tree must be an mdsd.Tree, DynamicTree or Plan, got {type(tree).__name__}")


def step_forwards(plan: Plan | Tree | DynamicTree, static: bool = False) -> tuple[list[int], int]:
    """New tokens per row of each draft forward of a decoding step (not the first) and of its target forward.

    The draft first reads the last emitted tokens it has not seen — two on the eager path, its whole
    pending block of depth + 1 on the fast path (``static``: fixed shapes) — then the nodes expanded at
    each depth d >= 1; the target reads the root and the forwarded nodes (mdsd.tree.draft.draft_tree,
    mdsd.tree.step.target_tree).

    >>> step_forwards(Tree.kary([2, 2])), step_forwards(DynamicTree(depth=3, k=2, expand=2, budget=5))
    (([2, 2], 7), ([2, 2, 2], 6))
    >>> step_forwards(Tree.kary([2, 2]), static=True)
    ([3, 2], 7)
    >>> from mdsd.tree.plan import with_retrieval  # retrieved chains are not drafted; alone, no draft runs
    >>> mixed, alone = with_retrieval(static_plan(Tree.chain(1)), 1, 3), with_retrieval(None, 1, 3)
    >>> step_forwards(mixed), step_forwards(alone)
    (([2], 5), ([], 4))
    """
    plan = as_plan(plan)
    if plan.retrieval is not None and not any(g.k > 0 for g in plan.groups):  # a source alone: no draft model
        return [], plan.num_forward
    draft = [plan.max_depth + 1 if static else 2]
    for d in range(1, plan.max_depth):
        size = sum(g.size for g in plan.groups_at(d) if g.k > 0)  # a retrieved chain's nodes are not drafted
        if not size:
            break
        draft.append(size)
    return draft, plan.num_forward


def _step_parts(target_profile, draft_profile, plan, batch, context, overhead, extrapolate):
    if overhead is not None and not isinstance(overhead, Overhead):
        raise TypeError(f"overhead must be an Overhead or None, got {type(overhead).__name__}")
    draft_tokens, target_tokens = step_forwards(plan, static=draft_profile.path != "eager")
    draft = sum(draft_profile.seconds(batch, n, context, extrapolate) for n in draft_tokens)
    target = target_profile.seconds(batch, target_tokens, context, extrapolate)
    extra = overhead.seconds(plan, batch) if overhead is not None else 0.0
    return draft, target, extra


def check_profiles(target_profile: object, draft_profile: object) -> None:
    for name, value in (("target_profile", target_profile), ("draft_profile", draft_profile)):
        if not isinstance(value, CostProfile):
            raise TypeError(f"{name} must be a CostProfile, got {type(value).__name__}")


def step_seconds(
    target_profile: CostProfile,
    draft_profile: CostProfile,
    plan: Plan | Tree | DynamicTree,
    batch: float,
    context: float,
    overhead: Overhead | None = None,
    extrapolate: bool = False,
) -> float:
    """Predicted seconds of one decoding step of ``plan`` for ``batch`` rows after ``context`` cache entries.

    .. math:: S = \\sum_d \\tau_q(B, n_d, c) + \\tau_p(B, F, c) + o_0 + o_1 B (F + M)

    (see the module docstring). A :class:`~mdsd.Tree` stands for its static plan (truncate it first for an
    adaptive depth), a :class:`~mdsd.DynamicTree` for its plan. Without ``overhead`` only the forwards count.
    The forwards' shapes are those of the path the draft profile measured (:func:`step_forwards`).

    >>> prof = CostProfile.from_function(lambda b, t, c: 1.0 + t, [1], [1, 8], [0])
    >>> step_seconds(prof, prof, Tree.kary([2, 2]), batch=1, context=0)  # draft: 2, 2 tokens; target: 7
    14.0
    """
    check_profiles(target_profile, draft_profile)
    return float(
        sum(_step_parts(target_profile, draft_profile, as_plan(plan), batch, context, overhead, extrapolate))
    )


@dataclass(frozen=True)
class Prediction:
    """What the cost model predicts for one plan, batch size and context (all times in seconds).

    ``tokens_per_second`` counts every row of the batch; ``speedup`` is its ratio to autoregressive decoding
    (one target forward of one token per row and step, plus the autoregressive step's own overhead where one
    is given: ``autoregressive_overhead_seconds``, else 0).
    """

    batch: float
    context: float
    tokens_per_step: float
    draft_seconds: float
    target_seconds: float
    overhead_seconds: float
    step_seconds: float
    tokens_per_second: float
    autoregressive_seconds: float
    autoregressive_overhead_seconds: float
    autoregressive_tokens_per_second: float
    speedup: float


def predict(
    target_profile: CostProfile,
    draft_profile: CostProfile,
    tree_or_plan: Tree | DynamicTree | Plan,
    acceptance: Sequence[float] | None,
    batch: float,
    context: float,
    *,
    tokens_per_step: float | None = None,
    overhead: Overhead | None = None,
    autoregressive_overhead: Overhead | None = None,
    extrapolate: bool = False,
) -> Prediction:
    """Tokens per second of speculative and of autoregressive decoding at one batch size, and the speedup.

    .. math::

        \\text{rate} = \\frac{B \\, E}{S(B, c)}, \\qquad
        \\text{rate}_{AR} = \\frac{B}{\\tau_p(B, 1, c) + o^{AR}_0 + o^{AR}_1 B}

    with E = Sequoia's F of the tree for the per-sibling ``acceptance`` vector (Chen et al. 2024;
    :meth:`mdsd.Tree.expected_tokens`), or a measured ``tokens_per_step`` (then ``acceptance`` is None;
    needed for dynamic trees, whose shape depends on the draft), S from :func:`step_seconds` (``overhead``:
    the method's step overhead) and o^AR the autoregressive step's own overhead, fitted to autoregressive
    steps (``autoregressive_overhead``; 0 without it). Charging one side only biases the speedup: give both
    or neither.

    >>> prof = CostProfile.from_function(lambda b, t, c: 0.1 * t, [1], [1, 8], [0])
    >>> pred = predict(prof, prof, Tree.kary([2]), [0.5, 0.25], batch=1, context=0)
    >>> round(pred.step_seconds, 6), round(pred.speedup, 6)  # 0.2 (draft, 2 tokens) + 0.3 (target, 3)
    (0.5, 0.35)
    """
    check_profiles(target_profile, draft_profile)
    if (acceptance is None) == (tokens_per_step is None):
        raise ValueError("give exactly one of acceptance (a per-sibling vector) and tokens_per_step")
    plan = as_plan(tree_or_plan)
    if acceptance is not None:
        if isinstance(tree_or_plan, DynamicTree) or plan.parent is None:
            raise ValueError(
                "acceptance needs a static tree (Sequoia's F); give tokens_per_step for a dynamic one"
            )
        tree = (
            tree_or_plan if isinstance(tree_or_plan, Tree) else Tree(tuple(int(p) for p in plan.parent[1:]))
        )
        expected = tree.expected_tokens(acceptance)
    else:
        if (
            isinstance(tokens_per_step, bool)
            or not isinstance(tokens_per_step, (int, float))
            or not (1 <= tokens_per_step <= plan.max_depth + 1)
        ):
            raise ValueError(
                f"tokens_per_step must be a number in [1, {plan.max_depth + 1}], got {tokens_per_step!r}"
            )
        expected = float(tokens_per_step)
    draft, target, extra = _step_parts(
        target_profile, draft_profile, plan, batch, context, overhead, extrapolate
    )
    if autoregressive_overhead is not None and not isinstance(autoregressive_overhead, Overhead):
        kind = type(autoregressive_overhead).__name__
        raise TypeError(f"autoregressive_overhead must be an Overhead or None, got {kind}")
    step = draft + target + extra
    ar_extra = autoregressive_overhead.seconds(None, batch) if autoregressive_overhead is not None else 0.0
    ar = target_profile.seconds(batch, 1, context, extrapolate) + ar_extra
    return Prediction(
        batch=batch,
        context=context,
        tokens_per_step=expected,
        draft_seconds=draft,
        target_seconds=target,
        overhead_seconds=extra,
        step_seconds=step,
        tokens_per_second=batch * expected / step,
        autoregressive_seconds=ar,
        autoregressive_overhead_seconds=ar_extra,
        autoregressive_tokens_per_second=batch / ar,
        speedup=expected * ar / step,
    )


def depth_seconds(
    target_profile: CostProfile,
    draft_profile: CostProfile,
    tree: Tree | DynamicTree,
    batch: float,
    context: float,
    overhead: Overhead | None = None,
    extrapolate: bool = False,
) -> Callable[[int], float]:
    """``seconds(depth)`` for :class:`mdsd.tree.adaptive.ExpectedRate`: the step time of ``tree`` truncated at
    each depth 1..max depth, at one batch size and context (computed once here).

    >>> prof = CostProfile.from_function(lambda b, t, c: 1.0 + t, [1], [1, 8], [0])
    >>> seconds = depth_seconds(prof, prof, Tree.chain(3), batch=1, context=0)
    >>> [seconds(d) for d in (1, 2, 3)]  # a level adds a one-token draft forward (2 s), a target token (1 s)
    [6.0, 9.0, 12.0]
    """
    check_profiles(target_profile, draft_profile)
    deepest = tree.max_depth if isinstance(tree, Tree) else tree.depth
    plans = {d: truncated_plan(tree, d) for d in range(1, deepest + 1)}
    table = {
        d: step_seconds(target_profile, draft_profile, p, batch, context, overhead, extrapolate)
        for d, p in plans.items()
    }

    def seconds(depth: int) -> float:
        if depth not in table:
            raise ValueError(f"depth must be in 1..{deepest}, got {depth!r}")
        return table[depth]

    return seconds
