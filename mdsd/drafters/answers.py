"""Exact acceptance of any drafter along the target's own answers, and greedy chains decoded from it.

Given a prompt and the target's answer to it, one teacher-forced forward of the target and of a drafter over
prompt + answer gives, at every answer position t, the target's law p_t and the drafter's q_t at temperature
T (softmax of logits / T; at T = 0 the point masses on their argmaxes). Then, exactly:

* the single-draft acceptance :math:`\\sum_i \\min(p_t(i), q_t(i))` (Leviathan et al.) and the optimal
  acceptance :math:`\\alpha^*_k` of k i.i.d. drafts (:func:`mdsd.drafters.losses.optimal_acceptance_iid`, the
  min-cut dual) at depth 1: what a step starting at t accepts of its first token;
* at T = 0, whether the drafter's greedy token is the target's (``agree``). Along a greedy answer this says
  what a greedy chain decodes: a step starting at t drafts the drafter's greedy tokens while they are the
  target's (the drafts then read exactly the text the target wrote) and emits the accepted ones and one
  more (:func:`greedy_chain`), which is what :class:`mdsd.TreeDecoder` does (tested), without decoding
  (a feature head: at depth 1 only).

The drafter is a causal LM over the whole vocabulary, a :class:`~mdsd.drafters.SmallDrafter`, or a
:class:`~mdsd.drafters.FeatureHead` (which reads the target's features of the same forward: its final hidden
state, or the outputs of the head's ``feature_layers``, as its training data holds them).
"""

from __future__ import annotations

import numpy as np
import torch

from mdsd.drafters.losses import optimal_acceptance_iid

__all__ = ["teacher_forced_logits", "position_acceptance", "greedy_chain"]


@torch.no_grad()
def teacher_forced_logits(
    target, drafters, ids: torch.Tensor, start: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The target's next-token logits p [L - start, V] (float32) at the positions that predict tokens
    ``ids[start:]`` of one sequence ``ids`` [L] (``start`` ≥ 1: the answer's first token), and each of
    ``drafters``' logits q there: one target forward serves them all."""
    from mdsd.drafters.head import FeatureHead, widened
    from mdsd.drafters.small import SmallDrafter

    if not 1 <= start < ids.numel():
        raise ValueError(f"start must lie in [1, {ids.numel()}) to predict at least one token, got {start}")
    x = ids[None].long()
    positions = torch.arange(x.shape[1])[None]
    heads = [d for d in drafters if isinstance(d, FeatureHead)]
    final, features = _target_features(target, {h.feature_layers for h in heads}, x)
    p = target.get_output_embeddings()(final[0, start - 1 : -1]).float()
    qs = []
    for drafter in drafters:
        if isinstance(drafter, FeatureHead):
            g, _ = drafter(x, features[drafter.feature_layers], positions)
            q = drafter.draft_logits(g[0, start - 1 : -1], 1.0)
        elif isinstance(drafter, SmallDrafter):
            q = widened(drafter(x, positions)[0, start - 1 : -1], drafter.vocab, drafter.vocab_size(), 1.0)
        else:
            q = drafter(x).logits[0, start - 1 : -1].float()
        if q.shape != p.shape:
            raise ValueError(f"the drafter's vocabulary ({q.shape[-1]}) is not the target's ({p.shape[-1]})")
        qs.append(q)
    return p, qs


def _target_features(
    target, layer_sets: set[tuple[int, ...]], x: torch.Tensor
) -> tuple[torch.Tensor, dict[tuple[int, ...], torch.Tensor]]:
    """The target's final hidden states [1, L, H] over ``x`` [1, L] (what its output layer reads), and for
    each set of feature layers the features [1, L, H or n·H] each token of ``x`` reads (the position
    before it's; zeros at the first): one decoder forward per distinct set (one with none or one set)."""
    from mdsd.tree.cache import decoder_features

    final, features = None, {}
    for layers in sorted(layer_sets) or [()]:
        _, final, f = decoder_features(target, layers, input_ids=x)
        features[layers] = torch.cat([torch.zeros_like(f[:, :1]), f[:, :-1]], 1)
    return final, features


def position_acceptance(
    p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float, ks: tuple[int, ...] = (2, 4)
) -> dict[str, np.ndarray]:
    """Per position (rows of the logits [N, V]): ``acceptance`` Σ min(p, q) and ``alpha_k`` (k in ``ks``)
    of p = softmax(p_logits / T), q = softmax(q_logits / T), in float64; at T = 0 the point masses on the
    argmaxes (ties: the lowest id), so every one of them is ``agree``, also returned.

    >>> z = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    >>> position_acceptance(z, torch.zeros(2, 2), 1.0)["acceptance"].round(4).tolist()
    [0.7689, 0.6192]
    """
    if p_logits.shape != q_logits.shape or p_logits.ndim != 2:
        raise ValueError(f"p_logits and q_logits must be [N, V] alike, got {tuple(p_logits.shape)}, "
                         f"{tuple(q_logits.shape)}")  # fmt: skip
    if not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
    agree = p_logits.argmax(-1) == q_logits.argmax(-1)
    if temperature == 0:
        one = agree.double().numpy()
        return {"acceptance": one, **{f"alpha_{k}": one for k in ks}, "agree": agree.numpy()}
    p = torch.softmax(p_logits.double() / temperature, -1)
    q = torch.softmax(q_logits.double() / temperature, -1)
    out = {"acceptance": torch.minimum(p, q).sum(-1).numpy()}
    for k in ks:
        out[f"alpha_{k}"] = optimal_acceptance_iid(p, q, k).numpy()
    return out | {"agree": agree.numpy()}


def greedy_chain(agree, depth: int) -> list[int]:
    """Tokens per step of greedy decoding with a chain of ``depth`` drafts a step, along a greedy answer whose
    positions' drafter-target agreement is ``agree`` [n]: a step whose next token is the answer's t-th
    accepts the a ≤ depth drafts while ``agree[t], agree[t + 1], ...`` hold, and emits a + 1 tokens (the
    last step cut at the answer's end): the steps of :class:`mdsd.TreeDecoder` with a draft model or a small
    drafter. With a feature head it reads the prompt in a step of its own, which emits the answer's first
    token (the head needs the target's features), and its drafts below the first read its own features, not
    the target's that ``agree`` was computed with: at depth 1 its steps are 1 and ``greedy_chain(agree[1:],
    1)``; deeper chains are not computed from teacher-forced agreement.

    >>> greedy_chain([True, True, False, True, True, True, True, False], 2)
    [3, 3, 2]
    """
    agree = [bool(a) for a in agree]
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}")
    steps, t = [], 0
    while t < len(agree):
        a = 0
        while a < depth and t + a < len(agree) and agree[t + a]:
            a += 1
        emitted = min(a + 1, len(agree) - t)
        steps.append(emitted)
        t += emitted
    return steps
