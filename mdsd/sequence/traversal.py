r"""Traversal Verification of a drafted token tree (Weng et al., "Traversal Verification for Speculative
Tree Decoding", NeurIPS 2025, arXiv 2505.12398): leaf-to-root, path-level acceptance.

Every node α keeps a weight w_α, a target law P_α (initially p(· | path α)) and, if internal, a draft
law Q_α of its remaining children (initially q(· | path α)). The root has w = 1. Nodes are visited in
DFS post-order (children in sibling order, i.e. draw order); when the subtree of α starts, its weight
is set from its parent β,

.. math:: w_\alpha = \min\Bigl(1, w_\beta \frac{P_\beta(x_\alpha)}{Q_\beta(x_\alpha)}\Bigr),

and when α is visited (all its children gone) it is accepted with probability w_α: the step emits the
path to α and one token drawn from P_α. Otherwise α is deleted and its parent updated:

.. math:: S = \sum_x (w_\beta P_\beta - Q_\beta)_+, \quad P_\beta \leftarrow \frac{(w_\beta P_\beta -
          Q_\beta)_+}{S}, \quad w_\beta \leftarrow \frac{S}{\sum_x (Q_\beta - w_\beta P_\beta)_+}
          \;\Bigl(= \frac{S}{S + 1 - w_\beta}\Bigr),

and Q_β loses x_α (renormalised) for children drawn without replacement; for i.i.d. children Q_β stays
(law ``"iid"``, this module's variant: the paper treats drafts without replacement). The root is
never deleted (its weight stays 1), so the step always ends. On a chain this is exactly block
verification (:mod:`mdsd.sequence.block`); with one level of children and w = 1 it is RRSw (RRS for
i.i.d.). 0/0 weights arise only on branches of probability zero and are read as 1.

Shapes: B batch, N tree nodes (node 0 the root, breadth-first as :class:`mdsd.Tree`), M internal
nodes, V vocabulary. The uniforms of one call come from :func:`mdsd.verifiers.draw_uniforms`:
``accept`` [B, N] (column α tests node α; column 0 unused) and ``residual`` [B].
"""

from __future__ import annotations

import numpy as np
import torch

from mdsd.sampling import inverse_cdf
from mdsd.sequence.drafts import enumerate_drafts, node_laws, node_paths
from mdsd.sequence.models import SequenceModel, check_pair
from mdsd.token_tree import Tree
from mdsd.validation import as_probability_tensor
from mdsd.verifiers.ops import Uniforms, draw_uniforms
from mdsd.verifiers.reference import draw_index
from mdsd.verifiers.registry import PathRule, register_path_rule

__all__ = [
    "TRAVERSAL_LAWS",
    "traversal_verify",
    "traversal_verify_with",
    "traversal_verify_unchecked",
    "reference_traversal_verify",
    "traversal_step_law",
    "traversal_tokens_per_step",
]


def _step(p: torch.Tensor, q: torch.Tensor, tree: Tree, tokens: torch.Tensor, generator):
    """The decoder's step of Traversal Verification on a static tree of i.i.d. children
    (:attr:`PathRule.kernel`)."""
    B, N = tokens.shape
    return traversal_verify_unchecked(p, q, tree, tokens, False, draw_uniforms((B,), N, generator, p.device))


# The tree decoder's verifier="traversal": a static tree whose children are drawn i.i.d. (RRS's law).
register_path_rule(PathRule("traversal", drafts_with="rrs", chains_only=False, kernel=_step))

TRAVERSAL_LAWS = ("without_replacement", "iid")  # the children's law; Traversal Verification's own: the first


def _events(tree: Tree) -> tuple[tuple[bool, int], ...]:
    """DFS over ``tree``: (True, α) when the subtree of α starts, (False, α) when α is visited."""
    out: list[tuple[bool, int]] = []

    def walk(u: int) -> None:
        out.append((True, u))
        for c in tree.children[u]:
            walk(c)
        out.append((False, u))

    walk(0)
    return tuple(out[1:])  # the root's start is implicit (w = 1)


def _check_law(law: str) -> bool:
    if law not in TRAVERSAL_LAWS:
        raise ValueError(f"law must be one of {', '.join(map(repr, TRAVERSAL_LAWS))}; got {law!r}")
    return law == "without_replacement"


# ---- batched torch --------------------------------------------------------------------------------------


def _inputs(p, q, tree, node_tokens, law):
    if not isinstance(tree, Tree):
        tree = Tree(tuple(tree))
    wor = _check_law(law)
    pt, qt = as_probability_tensor(p, "p"), as_probability_tensor(q, "q")
    if pt.dtype != qt.dtype:
        pt, qt = pt.double(), qt.double()
    N, M = tree.num_nodes, int((tree.branching > 0).sum())
    if tree.size == 0:
        raise ValueError("tree has no drafted node")
    if pt.ndim != 3 or pt.shape[1] != N:
        raise ValueError(f"p must have shape [B, N, V] with N = {N} tree nodes, got {tuple(pt.shape)}")
    if qt.ndim != 3 or tuple(qt.shape) != (pt.shape[0], M, pt.shape[2]):
        raise ValueError(
            f"q must have shape [B, M, V] = [{pt.shape[0]}, {M}, {pt.shape[2]}] (internal nodes)"
        )
    if pt.device != qt.device:
        raise ValueError(f"p and q must be on one device; got {pt.device} and {qt.device}")
    tt = node_tokens if isinstance(node_tokens, torch.Tensor) else torch.as_tensor(np.asarray(node_tokens))
    if tt.is_floating_point() or tt.dtype == torch.bool:
        raise TypeError(f"node_tokens must be an integer tensor, got dtype {tt.dtype}")
    if tuple(tt.shape) != (pt.shape[0], N):
        raise ValueError(f"node_tokens must have shape [B, N] = [{pt.shape[0]}, {N}], got {tuple(tt.shape)}")
    tt = tt.to(device=pt.device, dtype=torch.long)
    V = pt.shape[2]
    drafted = tt[:, 1:]
    if drafted.numel() and (int(drafted.min()) < 0 or int(drafted.max()) >= V):
        raise ValueError(f"node_tokens must lie in [0, {V}) at drafted nodes")
    row = _internal_rows(tree)
    parent_rows = torch.as_tensor(row[tree.parent[1:]], device=pt.device)
    if not bool((qt[:, parent_rows].gather(-1, drafted.unsqueeze(-1)) > 0).all()):
        raise ValueError("node_tokens hold a drafted token with q = 0 at its parent, which is never drawn")
    if wor:
        for kids in tree.children:
            if len(kids) > 1:
                tok = tt[:, kids]
                if bool(((tok.unsqueeze(-1) == tok.unsqueeze(-2)).sum((-1, -2)) > len(kids)).any()):
                    raise ValueError("children drawn without replacement must be distinct tokens")
    return pt, qt, tree, tt, wor


def _internal_rows(tree: Tree) -> np.ndarray:
    """Row of each node in the q table [N] (internal nodes in increasing order), -1 for leaves."""
    row = np.full(tree.num_nodes, -1, dtype=np.int64)
    internal = np.flatnonzero(tree.branching > 0)
    row[internal] = np.arange(internal.size)
    return row


def traversal_verify(
    p: object,
    q: object,
    tree: Tree,
    node_tokens: object,
    generator: torch.Generator | None = None,
    law: str = "without_replacement",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Traversal-verify drafted trees: returns (accepted node [B], next_token [B]).

    Parameters
    ----------
    p : [B, N, V]
        The target at every node (node 0 the root).
    q : [B, M, V]
        The draft at every internal node, in increasing node order (``tree.branching > 0``).
    tree : Tree (or its parents)
        The topology shared by the batch.
    node_tokens : LongTensor [B, N]
        The drafted token of every node (column 0, the root, is ignored).
    generator : torch.Generator or None
        Source of the N + 1 uniforms per row.
    law : {"without_replacement", "iid"}
        How the children of a node were drawn (checked: distinct siblings without replacement).

    The step emits the tokens on the path root -> accepted node (``tree.ancestors[accepted]``), then
    ``next_token``.

    >>> tree = Tree.kary([2])
    >>> p = torch.tensor([[[0.0, 1.0, 0.0], [0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]], dtype=torch.float64)
    >>> q = torch.tensor([[[0.5, 0.5, 0.0]]], dtype=torch.float64)
    >>> node, nxt = traversal_verify(p, q, tree, torch.tensor([[0, 0, 1]]), torch.Generator().manual_seed(0))
    >>> int(node[0])  # the target always says 1: node 2 (token 1) is accepted
    2
    """
    pt, qt, tree, tt, wor = _inputs(p, q, tree, node_tokens, law)
    u = draw_uniforms((pt.shape[0],), tree.num_nodes, generator, pt.device)
    return traversal_verify_unchecked(pt, qt, tree, tt, wor, u)


def traversal_verify_with(
    p: object,
    q: object,
    tree: Tree,
    node_tokens: object,
    uniforms: Uniforms,
    law: str = "without_replacement",
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`traversal_verify` with given uniforms (``accept`` [B, N], ``residual`` [B])."""
    pt, qt, tree, tt, wor = _inputs(p, q, tree, node_tokens, law)
    return traversal_verify_unchecked(pt, qt, tree, tt, wor, uniforms)


def _walk(p, q, tree, tokens, wor, visit) -> torch.Tensor:
    """Run the traversal on every row as if every test failed, calling ``visit(α, w_α [B])`` at each test
    (the root last); return the final P_β of the internal nodes [B, M, V]. A node's own P is never
    changed after its test, so the P of the node a row accepts can be read at the end."""
    B, N, _ = p.shape
    # the tree as Python ints (tuples and lists, no numpy): a traced step reads them as constants, and
    # nothing is copied to the device
    parent, internal = (-1, *tree.parents), [u for u in range(N) if tree.children[u]]
    row = {u: m for m, u in enumerate(internal)}
    target = torch.stack([p[:, u] for u in internal], dim=1)  # P_β of the internal nodes [B, M, V]
    draft = q.clone()  # Q_β [B, M, V]
    w = torch.zeros(B, N, dtype=torch.float64, device=p.device)
    w[:, 0] = 1.0
    for starts, a in _events(tree):
        if a == 0:
            visit(0, w[:, 0])
            break
        b = parent[a]
        i = row[b]
        x = tokens[:, a : a + 1]  # [B, 1]
        if starts:  # w_α = min(1, w_β P_β(x_α) / Q_β(x_α)), without overflowing for tiny Q_β(x_α)
            num = w[:, b] * target[:, i].gather(-1, x)[:, 0].double()
            den = draft[:, i].gather(-1, x)[:, 0].double()
            w[:, a] = torch.where(num >= den, 1.0, num / den)
            continue
        visit(a, w[:, a])
        # delete α: P_β <- norm((w_β P_β − Q_β)+), w_β <- S / Σ(Q_β − w_β P_β)+, Q_β loses x_α
        diff = w[:, b, None].to(p.dtype) * target[:, i] - draft[:, i]  # [B, V]
        gain = diff.clamp_min(0)
        num = gain.sum(-1, dtype=torch.float64)
        den = num + (draft[:, i] > 0).any(-1) - w[:, b]  # Σ(Q_β − w_β P_β)+ by Σ P = 1, Σ Q ∈ {0, 1}
        scaled = (gain.double() / torch.where(num > 0, num, 1.0)[:, None]).to(p.dtype)
        target[:, i] = torch.where((num > 0)[:, None], scaled, target[:, i])
        w[:, b] = torch.where(den > num, num / torch.where(den > num, den, 1.0), 1.0)
        if wor:
            removed = draft[:, i].scatter(-1, x, 0.0)
            mass = removed.sum(-1, keepdim=True, dtype=torch.float64)
            scaled = (removed.double() / torch.where(mass > 0, mass, 1.0)).to(p.dtype)
            draft[:, i] = torch.where(mass > 0, scaled, removed)
    return target


def traversal_verify_unchecked(
    p: torch.Tensor, q: torch.Tensor, tree: Tree, tokens: torch.Tensor, wor: bool, u: Uniforms
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel of :func:`traversal_verify`: p [B, N, V], q [B, M, V] (internal nodes in increasing
    order), node tokens [B, N] int64, ``wor`` whether siblings were drawn without replacement, uniforms
    ``u`` (``accept`` [B, N], ``residual`` [B]). No validation, no host synchronisation (what the tree
    decoder calls inside its loop)."""
    B = p.shape[0]
    alive = torch.ones(B, dtype=torch.bool, device=p.device)
    accepted = torch.zeros(B, dtype=torch.long, device=p.device)

    def visit(a, w):
        nonlocal alive, accepted
        take = alive & (u.accept[:, a] < w) if a else alive
        accepted = torch.where(take, a, accepted)
        alive = alive & ~take

    target = _walk(p, q, tree, tokens, wor, visit)
    rows = torch.arange(B, device=p.device)
    bonus = p[rows, accepted]  # [B, V]
    last = bonus  # the law after the accepted node: its final P_β if it is internal, else a bonus from p
    for m, node in enumerate(u for u in range(tree.num_nodes) if tree.children[u]):  # internal, in order
        last = torch.where((accepted == node)[:, None], target[:, m], last)
    return accepted, inverse_cdf(last, u.residual.unsqueeze(-1), fallback=bonus)[..., 0]


# ---- float64 core, reference and exact law ------------------------------------------------------------


def traversal_tests(
    tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, tokens: tuple[int, ...], without_replacement: bool
) -> list[tuple[int, float, np.ndarray]]:
    """Every test of one drafted tree in float64, in visit order, as if all before it were rejected:
    [(node α, w_α, the law P_α of the token emitted after α)]; the last entry is the root (w = 1).

    ``p_rows`` [N, n] is the target at every node, ``q_rows`` [N, n] the draft (rows of leaves unused),
    ``tokens`` [N] the node tokens (tokens[0] unused).
    """
    P = {u: p_rows[u] for u in range(tree.num_nodes)}
    Q = {u: q_rows[u] for u in range(tree.num_nodes) if tree.branching[u] > 0}
    w = {0: 1.0}
    out = []
    for starts, a in _events(tree):
        if a == 0:
            out.append((0, 1.0, P[0]))
            break
        b, x = int(tree.parent[a]), tokens[a]
        if starts:
            num = w[b] * P[b][x]
            w[a] = 1.0 if num >= Q[b][x] else num / Q[b][x]
            continue
        out.append((a, w[a], P[a]))
        diff = w[b] * P[b] - Q[b]
        gain = np.maximum(diff, 0.0)
        num = gain.sum()
        den = num + float(Q[b].any()) - w[b]  # Σ(Q − w P)+ by Σ P = 1, Σ Q ∈ {0, 1}: no cancellation
        P[b] = gain / num if num > 0 else P[b]
        w[b] = num / den if den > num else 1.0
        if without_replacement:
            removed = Q[b].copy()
            removed[x] = 0.0
            Q[b] = removed / removed.sum() if removed.sum() > 0 else removed
    return out


def reference_traversal_verify(
    p: np.ndarray,
    q: np.ndarray,
    tree: Tree,
    tokens: list[int],
    accept: np.ndarray,
    residual: float,
    law: str = "without_replacement",
) -> tuple[int, int]:
    """One row in float64 (p [N, V], q [M, V] at internal nodes, tokens [N], the row's uniforms):
    (accepted node, next token): the first visited node α with η_α < w_α."""
    wor = _check_law(law)
    p = np.asarray(p, dtype=np.float64)
    p = p / p.sum(-1, keepdims=True)
    q_rows = np.zeros_like(p)
    internal = np.flatnonzero(tree.branching > 0)
    q_rows[internal] = np.asarray(q, dtype=np.float64) / np.asarray(q, dtype=np.float64).sum(
        -1, keepdims=True
    )
    for node, weight, last in traversal_tests(tree, p, q_rows, tuple(int(t) for t in tokens), wor):
        if node == 0 or accept[node] < weight:
            return node, draw_index(last, residual)
    raise AssertionError("the root always accepts")


def traversal_step_law(
    target: SequenceModel,
    draft: SequenceModel,
    tree: Tree,
    law: str = "without_replacement",
    context: tuple[int, ...] = (),
) -> dict[tuple[int, ...], float]:
    """The exact law {emitted string: probability} of one Traversal Verification step on ``tree``, its
    children drawn by ``law`` ("without_replacement" or "iid"; one child: one draw from q).

    >>> from mdsd.sequence.models import SequenceModel
    >>> p, q = SequenceModel.context_free([1 / 3, 2 / 3]), SequenceModel.context_free([2 / 3, 1 / 3])
    >>> law = traversal_step_law(p, q, Tree.chain(2))  # on a chain: block verification
    >>> round(sum(len(s) * w for s, w in law.items()) * 9, 9)
    20.0
    """
    wor = _check_law(law)
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be an mdsd.Tree, got {type(tree).__name__}")
    context = tuple(int(t) for t in context)
    check_pair(target, draft, tree.max_depth, context)
    out: dict[tuple[int, ...], float] = {}
    for drafted, weight in enumerate_drafts(draft, tree, node_laws(tree, law), context):
        paths = node_paths(tree, drafted)
        p_rows = np.stack([target(context + v) for v in paths])
        q_rows = np.stack(
            [draft(context + v) if tree.branching[u] else p_rows[u] for u, v in enumerate(paths)]
        )
        reach = float(weight)
        for node, w, last in traversal_tests(tree, p_rows, q_rows, (-1, *drafted), wor):
            for y in np.flatnonzero(last > 0).tolist():
                s = (*paths[node], y)
                out[s] = out.get(s, 0.0) + reach * float(w) * float(last[y])
            reach *= 1.0 - float(w)
    return out


def traversal_tokens_per_step(
    target: SequenceModel,
    draft: SequenceModel,
    tree: Tree,
    law: str = "without_replacement",
    context: tuple[int, ...] = (),
) -> float:
    """Exact expected tokens per step E[accepted + 1] of Traversal Verification on ``tree``:

    .. math:: \\sum_T D(T) \\sum_j \\Bigl(\\prod_{i<j} (1 - w_i)\\Bigr) w_j
              \\, (\\mathrm{depth}(\\alpha_j) + 1)

    over the tests j of each drafted tree T, run for all trees at once by the batched traversal in float64
    (the same number as Σ_s |s| · :func:`traversal_step_law`, which the tests check).
    """
    wor = _check_law(law)
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be an mdsd.Tree, got {type(tree).__name__}")
    context = tuple(int(t) for t in context)
    check_pair(target, draft, tree.max_depth, context)
    drafted = enumerate_drafts(draft, tree, node_laws(tree, law), context)
    paths = [node_paths(tree, tokens) for tokens, _ in drafted]
    internal = np.flatnonzero(tree.branching > 0)
    p = torch.from_numpy(np.stack([[target(context + v) for v in vs] for vs in paths]))  # [T, N, V]
    q = torch.from_numpy(np.stack([[draft(context + vs[u]) for u in internal] for vs in paths]))  # [T, M, V]
    tokens = torch.tensor([(0, *t) for t, _ in drafted])  # [T, N]
    depth = torch.as_tensor(tree.depth, dtype=torch.float64)
    reach = torch.tensor([w for _, w in drafted], dtype=torch.float64)  # D(T), then P(reach the test)
    total = torch.zeros((), dtype=torch.float64)

    def visit(a, w):
        nonlocal reach, total
        total = total + (reach * w).sum() * (depth[a] + 1)
        reach = reach * (1.0 - w)

    _walk(p, q, tree, tokens, wor, visit)
    return float(total)
