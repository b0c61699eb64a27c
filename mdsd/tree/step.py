"""The target, verify and cache phases of a decoding step, all on the model's device.

* :func:`target_tree` — one target forward over the pending tokens and the forwarded tree nodes (a node sees
  the prefix and its forwarded ancestors; position = root position + depth).
* :func:`verify_nodes` — every expanded node is verified at once (each with its own randomness), giving per
  node the accepted child or the token to stop with; a forwarded leaf stops with a bonus token from p, drawn
  by :func:`walk` for the one node where each row stops (one draw a row, not one a forwarded node). The
  target's law p = softmax(logits / T) is formed only where it is read: at the expanded nodes, and at that
  one node a row.
  Verifying nodes the walk never reaches changes nothing: each node's outcome depends only on its own p, q,
  drafts and uniforms. At T = 0 a child is accepted iff it is the target's argmax.
* :func:`verify_paths` — instead, one sequence-level rule for the whole tree of a row (block verification on
  a chain, Traversal Verification on a static tree; :mod:`mdsd.sequence`), encoded as the same per-node
  accepted child and stop token.
* :func:`walk` — follow the accepted children from the root (a loop over the depth, no host round trip):
  the accepted path, the final token (residual or bonus; none when the walk ends on a node the target did not
  see), the tokens emitted, and what each model has to keep and to read next.

The host reads one packed tensor per step (:meth:`Outcome.packed`, read as a :class:`Summary`, whose
columns are named once, in :data:`COLUMNS`), the only synchronisation the loop needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mdsd.sampling import inverse_cdf, uniform
from mdsd.tree.cache import Cache, Forward
from mdsd.tree.draft import Drafted, Expansion, Pending, causal, draft_tree

__all__ = [
    "Rule",
    "decode_step",
    "target_tree",
    "verify_nodes",
    "verify_paths",
    "Verdicts",
    "walk",
    "Outcome",
    "Summary",
    "COLUMNS",
]

BONUS = -2  # stop token of a forwarded node that ends the step with a bonus token drawn from p there


@dataclass(frozen=True)
class Rule:
    """How a step verifies its tree: ``verifiers`` {k: the node verifier of a node with k children}, or
    the sequence-level ``path`` rule (:class:`mdsd.verifiers.registry.PathRule`: block verification,
    Traversal Verification) over the static ``tree``, whose kernel verifies a row's whole tree; at
    ``temperature`` 0 greedily (a child is accepted iff it is the target's argmax)."""

    verifiers: dict
    temperature: float
    path: object = None
    tree: object = None


def decode_step(
    target: Cache,
    draft: Cache | None,
    target_pending: Pending,
    draft_pending: Pending,
    plan,
    rule: Rule,
    stream,
    limit: torch.Tensor | None = None,
    retrieved: torch.Tensor | None = None,
    lap=None,
    catch_up: bool = False,
) -> Outcome:
    """One decoding step, the ladder draft → target forward → verify → walk, for every row at once.

    ``target`` and ``draft`` are the models' caches (:class:`mdsd.tree.cache.Cache`; ``draft`` None when a
    source drafts alone); ``stream`` the step's :class:`mdsd.sampling.UniformStream` (or a
    torch.Generator), the one source of the step's random numbers; ``limit`` [B] each row's draft depth
    (None: the plan's); ``lap(phase)``, if given, is called after "draft" and "target"; ``catch_up``: the
    draft reads its pending block even where the plan draws no children
    (:func:`mdsd.tree.draft.draft_tree`). Nothing here waits for the device.
    """
    drafted = draft_tree(
        draft, draft_pending, plan, rule.verifiers, rule.temperature, stream, limit, retrieved, catch_up
    )
    if lap is not None:
        lap("draft")
    seen = target_tree(target, target_pending, drafted)
    if lap is not None:
        lap("target")
    if rule.path is not None and rule.temperature > 0:
        verdicts = verify_paths(drafted, seen.logits, rule.path, rule.tree, stream)
    else:
        verdicts = verify_nodes(drafted, seen.logits, rule.verifiers, rule.temperature, stream)
    out = walk(drafted, verdicts, target_pending, draft_pending, seen.hidden)
    out.bad = drafted.bad.long() | 2 * seen.bad.long()
    return out


def target_tree(cache: Cache, pending: Pending, drafted: Drafted) -> Forward:
    """One target forward over the target's ``cache`` (:class:`mdsd.tree.cache.Cache`; at the decoder's
    temperature: p = the softmax of the logits) at the forwarded nodes, root first: logits [B, F, V], the
    flag [B] of rows with non-finite logits, and the hidden states [B, F, H] where the cache returns them
    (a drafter that reads the target's features)."""
    B, P = pending.ids.shape
    nodes = drafted.forward[:, 1:]  # [B, F - 1]
    F1 = nodes.shape[1]
    anc = drafted.ancestors.gather(1, nodes[..., None].expand(-1, -1, drafted.ancestors.shape[2]))
    visible = torch.zeros(B, P + F1, P + F1, dtype=torch.bool, device=nodes.device)
    visible[:, :P, :P] = causal(pending.real)
    visible[:, P:, :P] = pending.real[:, None, :]  # every node sees the real pending tokens (the root last)
    visible[:, P:, P:] = anc.gather(2, nodes[:, None, :].expand(-1, F1, -1))
    cache.begin()
    live = cache.live()
    root_pos = live + pending.real.sum(1) - 1
    depth = drafted.plan.constant(drafted.plan.depth, nodes.device)[nodes]  # [B, F - 1]
    positions = torch.cat(
        [live[:, None] + (pending.real.cumsum(1) - 1).clamp(min=0), root_pos[:, None] + depth], 1
    )
    ids = torch.cat([pending.ids, drafted.tokens.gather(1, nodes)], dim=1)
    block_valid = torch.cat([pending.real, torch.ones_like(nodes, dtype=torch.bool)], dim=1)
    return cache.forward(ids, visible, positions, F1 + 1, block_valid)


@dataclass
class Verdicts:
    """What verification decided at every node of a step's tree (B rows, N nodes)."""

    next_node: torch.Tensor  # [B, N] the accepted child, -1: none
    stop: torch.Tensor  # [B, N] the token to stop with there, -1: none, BONUS: a draw from p there
    bonus: Callable | None = None  # bonus(nodes [B]) -> tokens [B]: those draws, one node a row


def verify_nodes(
    drafted: Drafted, logits: torch.Tensor, verifiers: dict, temperature: float, stream
) -> Verdicts:
    """Every expanded node verified by the node verifier of its width, all at once (:class:`Verdicts`;
    no ``bonus`` at T = 0, where the stop tokens are the argmaxes)."""
    B, N = drafted.tokens.shape
    forward = drafted.forward
    F = forward.shape[1]
    fpos = torch.full((B, N), -1, dtype=torch.long, device=forward.device)
    fpos.scatter_(1, forward, torch.arange(F, device=forward.device).expand(B, -1))
    next_node = torch.full((B, N), -1, dtype=torch.long, device=forward.device)
    stop = torch.full((B, N), -1, dtype=torch.long, device=forward.device)
    bonus = None
    if temperature == 0:
        best = logits.argmax(-1)  # [B, F]
        stop.scatter_(1, forward, best)
    else:
        stop.scatter_(1, forward, BONUS)

        def law(rows: torch.Tensor) -> torch.Tensor:  # p = softmax(logits / T), only on the rows read
            return torch.softmax(rows, dim=-1, dtype=torch.float32)

        def bonus(nodes: torch.Tensor) -> torch.Tensor:  # a draw from p at each row's node [B]
            at = fpos.gather(1, nodes[:, None]).clamp(min=0)  # [B, 1]
            rows = logits[:, 0] if F == 1 else _rows(logits, at)[:, 0]
            return inverse_cdf(law(rows), uniform((B, 1), stream, logits.device))[:, 0]

    for e in _joined(drafted.expansions, drafted.plan):
        at = fpos.gather(1, e.node)  # [B, M]
        ok = e.active & (at >= 0)
        M, width = e.children.shape[1:]
        drafts = drafted.tokens.gather(1, e.children.reshape(B, -1)).reshape(B, M, width)
        if temperature == 0:  # greedy: the argmax, kept iff drafted
            tok = best.gather(1, at.clamp(min=0))
            idx = _first_match(drafts, e.valid, tok)
        elif e.group.k == 0:  # deterministic children only: y ~ p, kept iff drafted
            u = uniform((B, M, 1), stream, logits.device)
            tok = inverse_cdf(law(_rows_at(logits, drafted.plan, e.group, at)), u)[..., 0]
            idx = _first_match(drafts, e.valid, tok)
        else:
            pe = law(_rows_at(logits, drafted.plan, e.group, at))  # [B, M, V]
            tok, idx = _verify_mixed(verifiers[e.group.k], pe, e, drafts, stream)
        child = e.children.gather(2, idx.clamp(min=0)[..., None])[..., 0]
        next_node.scatter_(1, e.node, torch.where(ok & (idx >= 0), child, -1))
        here = stop.gather(1, e.node)
        stop.scatter_(1, e.node, torch.where(ok, torch.where(idx >= 0, -1, tok), here))
    return Verdicts(next_node, stop, bonus)


def _joined(expansions: list[Expansion], plan) -> list[Expansion]:
    """The expansions, those with deterministic children only (k = 0: the root and the retrieved chains of
    a source) joined into one (:attr:`mdsd.tree.plan.Plan.deterministic`), first: each node is still
    verified alone, all of them in one pass (a chain of 8 retrieved tokens: one softmax, one draw, not 8)."""
    group = plan.deterministic
    if group is None:
        return expansions
    fixed = [e for e in expansions if e.group.k == 0]

    def padded(t: torch.Tensor, value) -> torch.Tensor:
        wider = group.fixed - t.shape[2]
        return torch.nn.functional.pad(t, (0, wider), value=value) if wider else t

    joined = Expansion(
        group,
        torch.cat([e.node for e in fixed], 1),
        torch.cat([padded(e.children, 0) for e in fixed], 1),
        torch.cat([padded(e.valid, False) for e in fixed], 1),
        None,
        torch.cat([e.active for e in fixed], 1),
    )
    return [joined, *(e for e in expansions if e.group.k > 0)]


def verify_paths(drafted: Drafted, logits: torch.Tensor, rule, tree, stream) -> Verdicts:
    """:func:`verify_nodes` for a sequence-level ``rule`` (:class:`mdsd.verifiers.registry.PathRule`, e.g.
    block verification of a chain, Traversal Verification of a static tree of i.i.d. children), whose
    kernel verifies each row's whole ``tree``. Every node is forwarded (T > 0, a fixed plan).

    Per row the rule returns the accepted node a and the next token; the path root → a becomes the
    accepted children and the next token the stop token of a, so :func:`walk` emits
    ``tokens[path]`` then the next token, as the rule's step law says (docs/mathematics.md §7).
    """
    B, N = drafted.tokens.shape
    dev, V = logits.device, logits.shape[-1]
    fpos = torch.empty(B, N, dtype=torch.long, device=dev)
    fpos.scatter_(1, drafted.forward, torch.arange(N, device=dev).expand(B, -1))
    p = _rows(torch.softmax(logits, dim=-1, dtype=torch.float32), fpos)
    internal = drafted.plan.constant(tree.branching, dev) > 0
    row = internal.long().cumsum(0) - 1  # node -> its row of q (internal nodes in order; leaves unused)
    q = p.new_zeros(B, sum(1 for kids in tree.children if kids), V)
    for e in drafted.expansions:
        q.scatter_(1, row[e.node][..., None].expand(-1, -1, V), e.q)
    accepted, token = rule.kernel(p, q, tree, drafted.tokens, stream)
    nodes = torch.arange(N, device=dev)
    on = drafted.ancestors.gather(1, accepted[:, None, None].expand(-1, 1, N))[:, 0] & (nodes > 0)  # [B, N]
    next_node = torch.full((B, N), -1, dtype=torch.long, device=dev)
    next_node.scatter_reduce_(1, drafted.parent.clamp(min=0), torch.where(on, nodes, -1), "amax")
    stop = torch.full((B, N), -1, dtype=torch.long, device=dev)
    stop.scatter_(1, accepted[:, None], token[:, None])
    return Verdicts(next_node, stop)


def _rows_at(x: torch.Tensor, plan, group, at: torch.Tensor) -> torch.Tensor:
    """x [B, F, V] at the forward positions ``at`` [B, M] of a group's nodes: a view of x where the nodes
    are fixed and consecutive and every node is forwarded in node order (a static tree), else a copy of
    those rows (:func:`_rows`)."""
    if plan.forward is None and group.first is not None:
        return x[:, group.first : group.first + group.size]
    return _rows(x, at.clamp(min=0))


def _rows(x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """``x[b, at[b, m]]`` for x [B, F, V] (contiguous, as logits and their softmax are: the reshape is then a
    view) and ``at`` [B, M] in [0, F): [B, M, V]. Whole rows, copied by one ``index_select`` of x's rows (a
    gather with an index expanded over V reads an index per entry: 3–10× slower on a CPU)."""
    B, F, V = x.shape
    flat = at + torch.arange(0, B * F, F, device=x.device)[:, None]  # [B, M] rows of x.reshape(B * F, V)
    return x.reshape(B * F, V).index_select(0, flat.reshape(-1)).view(*at.shape, V)


def _first_match(drafts: torch.Tensor, valid: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
    """Index of the first existing child whose token is ``tok`` [B, M], or -1."""
    hit = (drafts == tok[..., None]) & valid
    return torch.where(hit.any(-1), hit.to(torch.uint8).argmax(-1), -1)


def _verify_mixed(
    verifier, p: torch.Tensor, e, drafts: torch.Tensor, stream
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify a node whose children are ``fixed`` deterministic tokens D then k drawn from q̃ = q|V∖D.

    Every emitted token of D is a drafted child, so D acts as one token: the verifier runs on the target
    p̃, equal to p off D and holding all of p(D) on one token d₀ of D (q̃(d₀) = 0: never drawn), and a
    verdict d₀ becomes a draw from p restricted to D. The output law is p for any lossless verifier, and

    .. math:: \alpha = p(D) + \alpha_{\text{verifier}}(\tilde p, \tilde q),

    which for the optimal verifier is the optimum of the mixed law (docs/mathematics.md §2;
    mdsd.sources.mixed).
    With no deterministic child (a source proposed nothing) p̃ = p.
    """
    f = e.group.fixed
    if f == 0:
        return verifier.verify_unchecked(p, e.q, drafts, stream, e.masses)
    D, have = drafts[..., :f], e.valid[..., :f]  # [B, M, f]
    mass = p.gather(-1, D) * have  # p(d) for the existing deterministic children
    phantom = D[..., :1]  # d₀: the first proposal exists whenever any does
    taken = torch.zeros_like(p, dtype=torch.int32).scatter_add_(-1, D, have.to(torch.int32)) > 0
    tilde = p.masked_fill(taken, 0.0).scatter_add_(-1, phantom, mass.sum(-1, keepdim=True))
    tok, idx = verifier.verify_unchecked(tilde, e.q, drafts[..., f:], stream, e.masses)
    u = uniform(tuple(mass.shape[:-1]), stream, mass.device).to(mass.dtype)
    cdf = mass.cumsum(-1)
    pick = torch.searchsorted(cdf, (u * cdf[..., -1])[..., None], right=True).clamp(max=f - 1)  # [B, M, 1]
    from_d = have[..., 0] & (tok == phantom[..., 0])
    tok = torch.where(from_d, D.gather(-1, pick)[..., 0], tok)
    idx = torch.where(from_d, pick[..., 0], torch.where(idx >= 0, f + idx, -1))
    return tok, idx


COLUMNS = ("count", "accepted", "target_kept", "draft_kept", "draft_pending", "retrieved", "bad")
"""The per-row counts a step packs for the host, in order (then the emitted tokens): see :class:`Summary`."""


@dataclass
class Outcome:
    """What one step decided, on the device (B rows, D the plan's depth)."""

    emitted: torch.Tensor  # [B, D + 1] tokens emitted this step (-1 after the end)
    count: torch.Tensor  # [B] tokens emitted
    accepted: torch.Tensor  # [B] drafted nodes accepted
    retrieved: torch.Tensor  # [B] of them from retrieved chains (a source's proposals)
    target_keep: torch.Tensor  # [B, W_t] step slots the target cache keeps (compacted to the front)
    target_kept: torch.Tensor  # [B]
    draft_keep: torch.Tensor  # [B, W_d]
    draft_kept: torch.Tensor  # [B]
    target_next: Pending  # [B, 1] the token the target reads next
    draft_next: Pending  # [B, D + 1] (left-padded) the tokens the draft reads next (with their features)
    draft_forwards: int = 0  # draft forwards the step ran
    bad: torch.Tensor | None = None  # [B] 1: the draft's logits were not finite, 2: the target's, 3: both

    def packed(self) -> torch.Tensor:
        """The per-row summary [B, len(COLUMNS) + D + 1] (int64) the host reads after the step: the columns
        of :data:`COLUMNS`, then the emitted tokens (see :class:`Summary`)."""
        values = {
            "count": self.count,
            "accepted": self.accepted,
            "target_kept": self.target_kept,
            "draft_kept": self.draft_kept,
            "draft_pending": self.draft_next.real.sum(1),
            "retrieved": self.retrieved,
            "bad": self.bad.long(),
        }
        return torch.cat([torch.stack([values[name] for name in COLUMNS], 1), self.emitted], dim=1)


@dataclass(frozen=True)
class Summary:
    """A step's outcome on the host, per row (numpy int64 arrays [B]; ``emitted`` [B, D + 1])."""

    count: np.ndarray  # tokens emitted (before any cut at EOS or the budget)
    accepted: np.ndarray  # drafted nodes accepted
    target_kept: np.ndarray  # step slots the target keeps
    draft_kept: np.ndarray
    draft_pending: np.ndarray  # real tokens the draft reads next
    retrieved: np.ndarray  # accepted nodes from retrieved chains
    bad: np.ndarray  # 1: the draft's logits were not finite, 2: the target's, 3: both
    emitted: np.ndarray  # the tokens, -1 after the end

    @classmethod
    def read(cls, packed: torch.Tensor) -> Summary:
        """One transfer of :meth:`Outcome.packed` (the step's synchronisation)."""
        host = packed.cpu().numpy()
        columns = dict(zip(COLUMNS, host[:, : len(COLUMNS)].T, strict=True))
        return cls(**columns, emitted=host[:, len(COLUMNS) :])

    def rows(self, index: np.ndarray) -> Summary:
        """The summary of the rows ``index`` only."""
        return Summary(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))


def walk(
    drafted: Drafted,
    verdicts: Verdicts,
    target_pending: Pending,
    draft_pending: Pending,
    hidden: torch.Tensor | None = None,
) -> Outcome:
    """Follow accepted children from the root; what is emitted, kept and read next (all on the device).
    A row that ends on a node whose stop token is :data:`BONUS` emits ``bonus`` of that node. ``hidden``
    [B, F, H]: the target's hidden states at the forwarded nodes, the features of the tokens a drafter that
    reads them (:attr:`Drafted.rereads`) reads next."""
    next_node, stop, bonus = verdicts.next_node, verdicts.stop, verdicts.bonus
    B, N = drafted.tokens.shape
    D, dev = drafted.plan.max_depth, drafted.tokens.device
    cur = torch.zeros(B, dtype=torch.long, device=dev)
    path = torch.full((B, D), -1, dtype=torch.long, device=dev)
    for i in range(D):
        nxt = next_node.gather(1, cur[:, None])[:, 0]
        path[:, i] = nxt
        cur = torch.where(nxt >= 0, nxt, cur)
    on = path >= 0
    accepted = on.sum(1)
    final = stop.gather(1, cur[:, None])[:, 0]  # -1: the walk ended on a node the target did not see
    if bonus is not None:
        final = torch.where(final == BONUS, bonus(cur), final)
    emitted = torch.full((B, D + 1), -1, dtype=torch.long, device=dev)
    emitted[:, :D] = torch.where(on, drafted.tokens.gather(1, path.clamp(min=0)), -1)
    emitted.scatter_(1, accepted[:, None], final[:, None])
    has_final = final >= 0
    last = drafted.tokens.gather(1, cur[:, None])[:, 0]
    # target: keep the real pending tokens and the accepted nodes it saw; read the final token next
    P = target_pending.ids.shape[1]
    F = drafted.forward.shape[1]
    fpos = torch.full((B, N), -1, dtype=torch.long, device=dev)
    fpos.scatter_(1, drafted.forward, torch.arange(F, device=dev).expand(B, -1))
    seen = on & (fpos.gather(1, path.clamp(min=0)) > 0)
    slots = torch.cat(
        [torch.arange(P, device=dev).expand(B, -1), P - 1 + fpos.gather(1, path.clamp(min=0))], 1
    )
    slots = slots.clamp(min=0)  # slots of dropped entries are never read, but must index the cache
    target_keep, target_kept = _compact(slots, torch.cat([target_pending.real, seen], 1))
    target_next = Pending(
        torch.where(has_final, final, last)[:, None], torch.ones(B, 1, dtype=torch.bool, device=dev)
    )
    # draft: keep the real pending tokens (unless it did not read them: they carry over) and the accepted
    # nodes it forwarded, except a last node the target did not see (the step ends there; it is read again
    # as the next root)
    Pd = draft_pending.ids.shape[1]
    Fd = drafted.draft_nodes.shape[1]
    dpos = torch.full((B, N), -1, dtype=torch.long, device=dev)
    dpos.scatter_(1, drafted.draft_nodes, torch.arange(Fd, device=dev).expand(B, -1))
    in_draft = on & (dpos.gather(1, path.clamp(min=0)) >= 0) & (not drafted.rereads)
    is_last = path == cur[:, None]
    in_draft &= ~(is_last & ~has_final[:, None])
    slots = torch.cat([torch.arange(Pd, device=dev).expand(B, -1), Pd + dpos.gather(1, path.clamp(min=0))], 1)
    slots = slots.clamp(min=0)
    read = draft_pending.real & (not drafted.lag)
    draft_keep, draft_kept = _compact(slots, torch.cat([read, in_draft], 1))
    # the draft reads next the accepted nodes it lacks (retrieved ones, a last node it did not forward; they
    # form a suffix of the path; all of them for a drafter that rereads) and the final token, left-padded to
    # [B, D + 1]; after the pending tokens it did not read, if any ([B, Pd + D + 1])
    real = torch.cat([on & ~in_draft, has_final[:, None]], 1)
    ids = torch.where(real, torch.cat([emitted[:, :D], final[:, None]], 1), 0)
    features = None
    if drafted.rereads:  # each token's feature: the target's hidden state at the node before it
        before = torch.cat([torch.zeros_like(cur[:, None]), path.clamp(min=0)], 1)[:, :D]  # before path[j]
        before = torch.cat([before, cur[:, None]], 1)  # and before the final token
        at = fpos.gather(1, before).clamp(min=0)  # [B, D + 1] forward positions
        features = hidden.gather(1, at[..., None].expand(-1, -1, hidden.shape[2]))
    if drafted.lag:
        real = torch.cat([draft_pending.real, real], 1)
        ids = torch.cat([torch.where(draft_pending.real, draft_pending.ids, 0), ids], 1)
        if features is not None:
            features = torch.cat([draft_pending.features, features], 1)
    order = torch.sort(real.to(torch.uint8), dim=1, stable=True).indices  # padding first, order kept
    if features is not None:
        features = features.gather(1, order[..., None].expand(-1, -1, features.shape[2]))
    draft_next = Pending(ids.gather(1, order), real.gather(1, order), features)
    return Outcome(
        emitted,
        accepted + has_final.long(),
        accepted,
        (path >= drafted.plan.model_nodes).sum(1),
        target_keep,
        target_kept,
        draft_keep,
        draft_kept,
        target_next,
        draft_next,
        drafted.forwards,
    )


def _compact(slots: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Move the kept ``slots`` [B, S] of each row to the front (in order); return them and their count [B]."""
    order = torch.sort((~keep).to(torch.uint8), dim=1, stable=True).indices
    return slots.gather(1, order), keep.sum(1)
