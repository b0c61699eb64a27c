"""The draft phase of a decoding step: grow the step's tree level by level with the draft model.

For every row of the batch, one draft forward per depth runs over the nodes expanded at that depth (tree
attention: each node sees the prefix and its ancestors; position = root position + depth, docs/mathematics.md
§4), and each expanded node draws its children with its verifier's law from ``q = softmax(logits / T)``
(float32; the draft's cache returns the logits divided by T, :func:`mdsd.tree.cache.tempered`).
At T = 0 the children are the draft's top-k tokens (greedy decoding has its own path). Everything stays on
the model's device; nothing here waits for the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mdsd.sampling import block_masses
from mdsd.tree.cache import Cache
from mdsd.tree.plan import Group, Plan

__all__ = ["Expansion", "Drafted", "Pending", "draft_tree", "causal"]


@dataclass
class Pending:
    """Tokens a model has not seen yet, left-padded per row: ``ids [B, P]``, ``real [B, P]``, and for a
    drafter that reads the target's features (:attr:`mdsd.tree.cache.Cache.reads_features`) each token's
    feature ``features [B, P, H]`` (the target's hidden state at the position before it)."""

    ids: torch.Tensor
    real: torch.Tensor
    features: torch.Tensor | None = None

    @classmethod
    def from_rows(cls, rows: list[list[int]], device: torch.device) -> Pending:
        width = max(len(r) for r in rows)
        ids = torch.tensor([[0] * (width - len(r)) + r for r in rows], dtype=torch.long, device=device)
        real = torch.tensor([[False] * (width - len(r)) + [True] * len(r) for r in rows], device=device)
        return cls(ids, real)


@dataclass
class Expansion:
    """One expansion group as drafted: its nodes, their children and the law the drawn ones came from."""

    group: Group
    node: torch.Tensor  # [B, M] expanded node of each slot
    children: torch.Tensor  # [B, M, fixed + k] node indices of its children, the deterministic ones first
    valid: torch.Tensor  # [B, M, fixed + k] bool: the child exists (a source may propose fewer tokens)
    q: torch.Tensor | None  # [B, M, V] law of the drawn children: q with the deterministic ones removed
    active: torch.Tensor  # [B, M] bool: the slot is expanded in this row (adaptive depths switch it off)
    masses: torch.Tensor | None = None  # [B, M, NB] q's block masses (drafting and verification share them)


@dataclass
class Drafted:
    """The drafted tree of one step, per row (B rows, N nodes, F of them forwarded to the target)."""

    plan: Plan
    tokens: torch.Tensor  # [B, N] node tokens (root: the last emitted token)
    parent: torch.Tensor  # [B, N] parent node (-1 for the root)
    ancestors: torch.Tensor  # [B, N, N] bool: ancestors[b, i, j] iff j is on the path root → i (i included)
    score: torch.Tensor  # [B, N] log path probability under the draft (0 below deterministic nodes)
    expansions: list[Expansion]
    forward: torch.Tensor  # [B, F] nodes of the target forward, root first, ancestors before descendants
    draft_nodes: torch.Tensor  # [B, Fd] nodes forwarded to the draft below the root, in cache order
    forwards: int  # draft forwards run
    bad: torch.Tensor  # [B] bool: the draft's logits were not finite
    lag: bool = False  # the draft did not read its pending block: the block carries over to the next step
    rereads: bool = False  # the drafter keeps none of its tree's entries and reads the accepted path again


def causal(real: torch.Tensor) -> torch.Tensor:
    """Visibility inside a left-padded pending block [B, P] -> [B, P, P]: causal over real tokens."""
    P = real.shape[1]
    tri = torch.ones(P, P, dtype=torch.bool, device=real.device).tril()
    eye = torch.eye(P, dtype=torch.bool, device=real.device)
    return (tri & real[:, None, :] & real[:, :, None]) | eye


def draft_tree(
    cache: Cache | None,
    pending: Pending,
    plan: Plan,
    verifiers: dict,
    temperature: float,
    stream,
    limit: torch.Tensor | None = None,
    retrieved: torch.Tensor | None = None,
    catch_up: bool = False,
) -> Drafted:
    """Draft one step's tree (with the flag [B] of rows whose draft logits were not finite).

    ``cache`` is the drafter's cache (:class:`mdsd.tree.cache.Cache`; None when there is no draft model);
    one that reads the target's features gets each pending token's from ``pending.features`` and each
    node's from its own output at the node's parent. ``verifiers[k]`` draws the k children of a node
    (``draft_unchecked(q, stream)``; ``stream`` the step's :class:`mdsd.sampling.UniformStream` or a
    torch.Generator); ``limit`` [B] (optional) switches off expansions at depths >= the row's limit
    (adaptive draft lengths); ``retrieved`` [B, width, depth] holds the tokens of the plan's retrieved
    chains (-1: none). A plan of retrieved chains alone runs no draft forward and leaves the draft's pending
    block to a later step (:attr:`Drafted.lag`), unless ``catch_up``: then the draft reads it all the same.
    """
    B, dev, N = pending.ids.shape[0], pending.ids.device, plan.num_nodes
    tree = _Growing.start(plan, pending, retrieved)
    bad = torch.zeros(B, dtype=torch.bool, device=dev)
    draft_nodes = torch.zeros(B, 0, dtype=torch.long, device=dev)
    expansions: list[Expansion] = []
    forwards = 0
    read = catch_up or bool(plan.widths)  # widths: the plan's nodes with drawn children
    features = cache is not None and cache.reads_features
    if cache is not None and read:  # level 0: the pending tokens (causal, left-padded), the root last
        cache.begin()
        live = cache.live()
        positions = live[:, None] + (pending.real.cumsum(1) - 1).clamp(min=0)
        root_pos = live + pending.real.sum(1) - 1
        logits, bad, hidden = cache.forward(
            pending.ids, causal(pending.real), positions, 1, pending.real, features=pending.features
        )
        forwards = 1
        if features:  # the drafter's own feature at each node, the input of the node's children
            tree.hidden = hidden.new_zeros(B, N, hidden.shape[2])
            tree.hidden[:, 0] = hidden[:, 0]
    for d in range(plan.max_depth):
        groups = plan.groups_at(d)
        chosen = [_expanded_nodes(g, tree.score, plan) for g in groups]  # [B, M_g] each
        drawn = [i for i, g in enumerate(groups) if g.k > 0]  # these need the draft's q at their nodes
        group_logits = dict.fromkeys(range(len(groups)))
        if d == 0 and drawn:
            group_logits[drawn[0]] = logits  # the root's, from the pending block
        elif drawn:
            nodes = torch.cat([chosen[i] for i in drawn], dim=1)  # [B, M]
            M = nodes.shape[1]
            anc = tree.ancestors.gather(1, nodes[..., None].expand(-1, -1, N))  # [B, M, N]
            # step slots: the pending block (every node sees its real tokens), then the drafted ancestors
            local = torch.cat(
                [pending.real[:, None, :].expand(-1, M, -1), anc.gather(2, _rows(draft_nodes, nodes))], dim=2
            )
            eye = torch.eye(M, dtype=torch.bool, device=dev).expand(B, -1, -1)
            inputs = None
            if features:  # each node reads its parent's output
                parents = tree.parent.gather(1, nodes)
                inputs = tree.hidden.gather(1, parents[..., None].expand(-1, -1, tree.hidden.shape[2]))
            logits, worse, hidden = cache.forward(
                tree.tokens.gather(1, nodes),
                eye,
                root_pos[:, None] + d,
                M,
                torch.ones_like(nodes, dtype=torch.bool),
                local,
                features=inputs,
            )
            if features:
                tree.hidden.scatter_(1, nodes[..., None].expand(-1, -1, hidden.shape[2]), hidden)
            bad |= worse
            draft_nodes = torch.cat([draft_nodes, nodes], dim=1)
            forwards += 1
            for i, part in zip(drawn, logits.split([groups[i].size for i in drawn], dim=1), strict=True):
                group_logits[i] = part
        for i, g in enumerate(groups):
            expansions.append(
                _expand(g, chosen[i], group_logits[i], tree, verifiers, temperature, stream, limit)
            )
    forward = _forward_nodes(plan, tree.score)
    drafted = Drafted(
        plan,
        tree.tokens,
        tree.parent,
        tree.ancestors,
        tree.score,
        expansions,
        forward,
        draft_nodes,
        forwards,
        bad,
        cache is not None and not read,
        features,
    )
    return drafted


@dataclass
class _Growing:
    """The tree while it is drafted, filled in level by level (B rows, N nodes)."""

    plan: Plan
    tokens: torch.Tensor  # [B, N] node tokens (root: the last pending token)
    valid: torch.Tensor  # [B, N] the node exists (a retrieved chain may be shorter than its depth)
    parent: torch.Tensor  # [B, N]
    ancestors: torch.Tensor  # [B, N, N]
    score: torch.Tensor  # [B, N] log path probability under the draft
    hidden: torch.Tensor | None = None  # [B, N, H] the drafter's output at each node (a feature reader)

    @classmethod
    def start(cls, plan: Plan, pending: Pending, retrieved: torch.Tensor | None) -> _Growing:
        B, dev, N = pending.ids.shape[0], pending.ids.device, plan.num_nodes
        tokens = torch.zeros(B, N, dtype=torch.long, device=dev)
        tokens[:, 0] = pending.ids[:, -1]  # the root: the last pending token
        valid = torch.ones(B, N, dtype=torch.bool, device=dev)
        if plan.retrieval is not None:
            chains = plan.constant(plan.retrieval, dev).reshape(-1)
            tokens[:, chains] = retrieved.reshape(B, -1).clamp(min=0)
            valid[:, chains] = retrieved.reshape(B, -1) >= 0
        parent = plan.constant(plan.parent, dev).expand(B, -1).clone()
        ancestors = plan.constant(plan.static_ancestors, dev).expand(B, -1, -1).clone()
        score = torch.zeros(B, N, device=dev)
        return cls(plan, tokens, valid, parent, ancestors, score)


def _rows(draft_nodes: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    """Index [B, M, Fd] gathering, for each of ``nodes``, the ancestor flags of the draft-forwarded nodes."""
    return draft_nodes[:, None, :].expand(-1, nodes.shape[1], -1)


def _expanded_nodes(g: Group, score: torch.Tensor, plan: Plan) -> torch.Tensor:
    """The group's expanded nodes [B, M]: fixed, or the M most probable nodes of its pool."""
    B = score.shape[0]
    if g.nodes is not None:
        return plan.constant(g.nodes, score.device).expand(B, -1)
    lo, hi = g.pool
    order = torch.sort(score[:, lo:hi], dim=1, descending=True, stable=True).indices  # ties: lower index
    return lo + order[:, : g.size]


def _expand(g, nodes, logits, tree, verifiers, temperature, stream, limit) -> Expansion:
    """Give every node of group ``g`` its children: the deterministic ones (already in ``tokens``) and ``k``
    drawn with the verifier's law from q without them; record parents, ancestors and path scores."""
    plan, tokens, valid, parent, ancestors, score = (
        tree.plan,
        tree.tokens,
        tree.valid,
        tree.parent,
        tree.ancestors,
        tree.score,
    )
    B, M = nodes.shape
    children = plan.constant(g.children, nodes.device).expand(B, -1, -1)  # [B, M, fixed + k]
    fixed = children[..., : g.fixed]
    kept = valid.gather(1, fixed.reshape(B, -1)).reshape(B, M, g.fixed)  # deterministic children that exist
    q = masses = None
    step = torch.zeros(B, M, g.fixed + g.k, device=nodes.device)
    if g.k > 0:
        taken = None  # D, the deterministic children's tokens (none: q is the softmax itself)
        if g.fixed:
            ids = tokens.gather(1, fixed.reshape(B, -1)).reshape(B, M, g.fixed)
            taken = torch.zeros_like(logits, dtype=torch.int32).scatter_add_(-1, ids, kept.to(torch.int32))
            taken = taken > 0
        if temperature == 0:
            law = torch.log_softmax(logits.float(), dim=-1)  # log q at T = 1, for the path scores
            scores = logits.float()
            drafts = torch.topk(
                scores if taken is None else scores.masked_fill(taken, -torch.inf), g.k
            ).indices
        else:
            law = q = torch.softmax(logits, dim=-1, dtype=torch.float32)  # [B, M, V]; logits / T already
            if taken is not None:  # q restricted to V ∖ D, renormalised by what remains
                q = q.masked_fill(taken, 0.0)
                q = q.div_(q.sum(-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny))
            if verifiers[g.k].law.inverts:  # one pass over q for its draws and its verification
                masses = block_masses(q)
            drafts = verifiers[g.k].draft_unchecked(q, stream, masses)  # [B, M, k]
        drawn = children[..., g.fixed :].reshape(B, -1)
        tokens.scatter_(1, drawn, drafts.reshape(B, -1))
        step = law.gather(-1, tokens.gather(1, children.reshape(B, -1)).reshape(B, M, -1))  # (log) q(child)
        if temperature > 0:
            step = step.log()  # -inf where q underflows to 0: those paths rank last (q < e^-87 is rounded)
    flat = children.reshape(B, -1)
    if g.k > 0:  # below deterministic children only, the path scores stay 0
        score.scatter_(1, flat, (score.gather(1, nodes)[..., None] + step).reshape(B, -1))
    if g.nodes is None:  # nodes chosen while drafting: their children's parents and ancestors are new
        parent.scatter_(1, flat, nodes[..., None].expand(-1, -1, children.shape[2]).reshape(B, -1))
        rows = ancestors.gather(
            1, nodes.repeat_interleave(children.shape[2], dim=1)[..., None].expand(-1, -1, ancestors.shape[2])
        )
        ancestors.scatter_(1, flat[..., None].expand(-1, -1, ancestors.shape[2]), rows)
        _mark_self(ancestors, flat)
    active = torch.ones(B, M, dtype=torch.bool, device=nodes.device)
    if limit is not None:
        active &= limit[:, None] > g.depth
    alive = torch.cat([kept, torch.ones(B, M, g.k, dtype=torch.bool, device=nodes.device)], dim=2)
    return Expansion(g, nodes, children, alive, q, active, masses)


def _mark_self(ancestors: torch.Tensor, nodes: torch.Tensor) -> None:
    """Set ancestors[b, u, u] for every u in nodes [B, M] (each node is its own ancestor)."""
    B, N = ancestors.shape[0], ancestors.shape[1]
    flat = ancestors.view(B, N * N)
    flat.scatter_(1, nodes * (N + 1), True)


def _forward_nodes(plan: Plan, score: torch.Tensor) -> torch.Tensor:
    """Nodes [B, F] of the target forward: all; or the root, the most probable model nodes within the
    budget, and every retrieved node."""
    B, N = score.shape
    dev = score.device
    if plan.forward is None:
        return torch.arange(N, device=dev).expand(B, -1)
    model = plan.model_nodes
    best = (
        torch.sort(score[:, 1:model], dim=1, descending=True, stable=True).indices[:, : plan.forward - 1] + 1
    )
    best = torch.sort(best, dim=1).values  # node order: ancestors first
    root = torch.zeros(B, 1, dtype=torch.long, device=dev)
    return torch.cat([root, best, torch.arange(model, N, device=dev).expand(B, -1)], dim=1)
