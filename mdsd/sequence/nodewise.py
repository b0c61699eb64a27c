"""Exact tokens per step of the node-wise verifiers of :mod:`mdsd.verifiers` on a drafted token tree.

One step, as :class:`mdsd.TreeDecoder` runs it (MATH.md §4): at a node with path v and k children, the
children are drafted by the verifier's law from q(· | v) and verified against p(· | v); the emitted token
y is either one of the children (the first child holding y, even when a residual draw produced it: the
walk moves there) or ends the step; at a leaf a bonus token is drawn from p(· | v). A node with one child
uses single-draft verification. The law of the emitted string is, with r_v the verifier's output law
given the drafts,

.. math:: L_u(v) = \\sum_{\\bar x} Q(\\bar x) \\sum_y r_v(y \\mid \\bar x)
          \\begin{cases} y \\cdot L_{c(y)}(v y) & y \\in \\bar x
          \\text{ (} c(y) \\text{: the first child holding } y) \\\\
          \\delta_{v y} & \\text{otherwise} \\end{cases}

computed by recursion over (node, path), each once. The output laws r_v(· | x̄) are written here in
float64 from MATH.md §3 (the rules the batched samplers of :mod:`mdsd.verifiers` implement).
"""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np
import torch

from mdsd.laws import ranked
from mdsd.sequence.models import SequenceModel, check_pair
from mdsd.tree import Tree
from mdsd.verifiers import VERIFIERS, verifier
from mdsd.verifiers.kseq import kseq_rho

__all__ = ["nodewise_step_law", "nodewise_tokens_per_step", "node_output_law", "NODE_RULES"]


def _norm(w: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    total = w.sum()
    return w / total if total > 0 else fallback


def _ratio(num: float, den: float) -> float:
    """min(1, num / den); a zero denominator is a branch of probability zero (any value will do)."""
    return 1.0 if num >= den else num / den  # never num / den > 1: no overflow for subnormal den


def _onehot(n: int, y: int) -> np.ndarray:
    e = np.zeros(n)
    e[y] = 1.0
    return e


def _single(p, q, xs):
    (x,) = xs
    a = _ratio(p[x], q[x])
    return a * _onehot(p.size, x) + (1 - a) * _norm(np.maximum(p - q, 0.0), p)


def _rrs(p, q, xs, without_replacement=False):
    out, alive, pi, qi = np.zeros(p.size), 1.0, p, q
    for x in xs:
        a = _ratio(pi[x], qi[x])
        out += alive * a * _onehot(p.size, x)
        alive *= 1 - a
        pi = _norm(np.maximum(pi - qi, 0.0), pi)
        if without_replacement:
            qi = qi.copy()
            qi[x] = 0.0
            qi = _norm(qi, qi)
    return out + alive * pi


def _rrsw(p, q, xs):
    return _rrs(p, q, xs, without_replacement=True)


@lru_cache(maxsize=4096)
def _kseq_terms(p: bytes, q: bytes, k: int) -> tuple[float, float, float]:
    """ρ, β, p_acc of K-SEQ for one pair (as float64 bytes), by the package's bisection (the sampler's)."""
    pt, qt = (torch.from_numpy(np.frombuffer(b, dtype=np.float64).copy()) for b in (p, q))
    return tuple(float(t) for t in kseq_rho(pt, qt, k))


def _kseq(p, q, xs):
    rho, beta, pacc = _kseq_terms(p.tobytes(), q.tobytes(), len(xs))
    out, alive = np.zeros(p.size), 1.0
    for x in xs:
        a = _ratio(p[x], rho * q[x])
        out += alive * a * _onehot(p.size, x)
        alive *= 1 - a
    gamma = pacc / beta if beta > 0 else rho
    return out + alive * _norm(np.maximum(p - gamma * np.minimum(p / rho, q), 0.0), p)


def _spechub(p, q, xs):
    n, a = p.size, int(ranked(q)[0])
    others = np.arange(n) != a
    total = q[others].sum()
    pair = np.zeros(n)  # Q(a, j)
    if total > 0:
        pair[others] = q[a] * (q[others] / total)
    gain = np.where(others, np.maximum(p - q, 0.0), 0.0)
    s_ia = np.maximum(q - p, 0.0)[others].sum()
    s_ai = np.maximum(pair - gain, 0.0)[others].sum()
    if xs[1] == a:  # pair (i, a)
        i = xs[0]
        first, second = _ratio(p[i], q[i]), _ratio(max(p[a] - s_ai, 0.0), s_ia)
    else:  # pair (a, i)
        i = xs[1]
        first, second = _ratio(gain[i], pair[i]), _ratio(p[a], s_ai)
    rest = np.maximum(gain - pair, 0.0)
    rest[a] = max(max(p[a] - s_ai, 0.0) - s_ia, 0.0)
    out = first * _onehot(n, i) + (1 - first) * second * _onehot(n, a)
    return out + (1 - first) * (1 - second) * _norm(rest, p)


def _greedy(p, q, xs):
    top, x = list(xs[:-1]), xs[-1]
    qr = q.copy()
    qr[top] = 0.0
    qr = qr / qr.sum()
    a = _ratio(p[x], qr[x])
    return a * _onehot(p.size, x) + (1 - a) * _norm(np.maximum(p - qr, 0.0), p)


def _topk(p, q, xs):
    return p.copy()


NODE_RULES = {
    "single": _single,
    "rrs": _rrs,
    "rrsw": _rrsw,
    "kseq": _kseq,
    "spechub": _spechub,
    "greedy": _greedy,
    "topk": _topk,
}


def node_output_law(name: str, p: np.ndarray, q: np.ndarray, drafts: tuple[int, ...]) -> np.ndarray:
    """The exact law [n] of the token that verifier ``name`` emits for one pair p, q [n] and drafts.

    >>> node_output_law("single", np.array([0.5, 0.5]), np.array([1.0, 0.0]), (0,)).tolist()
    [0.5, 0.5]
    """
    if name not in NODE_RULES:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(VERIFIERS)}")
    return NODE_RULES[name](p, q, tuple(drafts))


def nodewise_step_law(
    target: SequenceModel,
    draft: SequenceModel,
    tree: Tree,
    name: str,
    context: tuple[int, ...] = (),
) -> dict[tuple[int, ...], float]:
    """The exact law {emitted string: probability} of one node-wise decoding step on ``tree``.

    ``name`` is a verifier of :data:`mdsd.VERIFIERS` (nodes with k >= 2 children use
    ``mdsd.verifier(name, k)`` and its law; nodes with one child single-draft verification).

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
        v = verifier("single" if k == 1 else name, k)  # raises for a k the verifier cannot take
        rules[k] = (v.law, NODE_RULES[v.name])

    @cache
    def law_at(u: int, path: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], float], ...]:
        p = target(context + path)
        kids = tree.children[u]
        if not kids:  # a leaf: the bonus token
            return tuple(((y,), float(p[y])) for y in range(p.size) if p[y] > 0)
        q = draft(context + path)
        law, rule = rules[len(kids)]
        out: dict[tuple[int, ...], float] = {}
        for xs, weight in law.joint(q).items():
            emitted = rule(p, q, xs)
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
