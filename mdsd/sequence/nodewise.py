"""Exact tokens per step of the node-wise verifiers of :mod:`mdsd.verifiers` on a drafted token tree.

One step, as :class:`mdsd.TreeDecoder` runs it (docs/mathematics.md §4): at a node with path v and k children,
the children are drafted by the verifier's law from q(· | v) and verified against p(· | v); the emitted token
y is either one of the children (the first child holding y, even when a residual draw produced it: the walk
moves there) or ends the step; at a leaf a bonus token is drawn from p(· | v). A node with one child uses
single-draft verification. The law of the emitted string is, with r_v the verifier's output law given the
drafts,

.. math:: L_u(v) = \\sum_{\\bar x} Q(\\bar x) \\sum_y r_v(y \\mid \\bar x)
          \\begin{cases} y \\cdot L_{c(y)}(v y) & y \\in \\bar x
          \\text{ (} c(y) \\text{: the first child holding } y) \\\\
          \\delta_{v y} & \\text{otherwise} \\end{cases}

computed by recursion over (node, path), each once. The output laws r_v(· | x̄) are the verifiers' own
(:meth:`mdsd.Verifier.output_law`, written once beside each batched sampler in :mod:`mdsd.verifiers`).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from mdsd.sequence.models import SequenceModel, check_pair
from mdsd.token_tree import Tree
from mdsd.verifiers import verifier

__all__ = ["nodewise_step_law", "nodewise_tokens_per_step", "node_output_law"]


def node_output_law(name: str, p: np.ndarray, q: np.ndarray, drafts: tuple[int, ...]) -> np.ndarray:
    """The exact law [n] of the token that verifier ``name`` emits for one pair p, q [n] and drafts
    (:meth:`mdsd.Verifier.output_law` of ``mdsd.verifier(name, len(drafts))``).

    >>> node_output_law("single", np.array([0.5, 0.5]), np.array([1.0, 0.0]), (0,)).tolist()
    [0.5, 0.5]
    """
    return verifier(name, len(drafts)).output_law(p, q, drafts)


def nodewise_step_law(
    target: SequenceModel,
    draft: SequenceModel,
    tree: Tree,
    name: str,
    context: tuple[int, ...] = (),
) -> dict[tuple[int, ...], float]:
    """The exact law {emitted string: probability} of one node-wise decoding step on ``tree``.

    ``name`` is a verifier of :data:`mdsd.VERIFIERS`, or ``NAME:LAW`` ("optimal:wor"): nodes with k >= 2
    children use ``mdsd.verifier(name, k)``, its law and its output law; nodes with one child single-draft
    verification.

    >>> from mdsd.sequence.models import SequenceModel
    >>> p, q = SequenceModel.context_free([1 / 3, 2 / 3]), SequenceModel.context_free([2 / 3, 1 / 3])
    >>> law = nodewise_step_law(p, q, Tree.chain(2), "single")
    >>> round(sum(len(s) * w for s, w in law.items()) * 9, 9)  # 1 + 10/9: Sun et al.'s token-wise figure
    19.0
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be an mdsd.Tree, got {type(tree).__name__}")
    context = tuple(int(t) for t in context)
    check_pair(target, draft, tree.max_depth, context)
    rules = {}
    for k in set(tree.branching.tolist()) - {0}:
        rules[k] = verifier("single" if k == 1 else name, k)  # raises for a k the verifier cannot take

    @cache
    def law_at(u: int, path: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], float], ...]:
        p = target(context + path)
        kids = tree.children[u]
        if not kids:  # a leaf: the bonus token
            return tuple(((y,), float(p[y])) for y in range(p.size) if p[y] > 0)
        q = draft(context + path)
        v = rules[len(kids)]
        out: dict[tuple[int, ...], float] = {}
        for xs, weight in v.law.joint(q).items():
            emitted = v.output_law(p, q, xs)
            for y in np.flatnonzero(emitted > 0).tolist():
                mass = float(weight) * float(emitted[y])
                if y in xs:  # accepted: continue below the first child holding y
                    for rest, w in law_at(kids[xs.index(y)], (*path, y)):
                        out[(y, *rest)] = out.get((y, *rest), 0.0) + mass * w
                else:
                    out[(y,)] = out.get((y,), 0.0) + mass
        return tuple(out.items())

    return dict(law_at(0, ()))


def nodewise_tokens_per_step(
    target: SequenceModel,
    draft: SequenceModel,
    tree: Tree,
    name: str,
    context: tuple[int, ...] = (),
) -> float:
    """Exact expected tokens per step E[accepted + 1] of node-wise verifier ``name`` on ``tree``."""
    return sum(len(s) * w for s, w in nodewise_step_law(target, draft, tree, name, context).items())
