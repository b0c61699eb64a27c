"""Read a tiny sequence-model pair off two real causal LMs at a real prefix, restricted to a few tokens.

The n tokens kept are the target's n most likely next tokens after the prefix (ties towards the lower
id). For every string u of length 0..depth over those tokens, both models' next-token laws after
prefix + u are read by one forward per model (every string a node of a trie under tree attention) and
restricted to the n tokens, renormalised over them in log space:

.. math:: p_n(t \\mid u) = \\exp(\\ell_t(u) / T) \\Big/ \\sum_{t' \\in K} \\exp(\\ell_{t'}(u) / T),

with K the kept tokens and ℓ(u) the model's logits after prefix + u.

The result feeds :func:`mdsd.solve_tree_otm` and every exact routine of :mod:`mdsd.sequence`, so the
sequence-level theory runs on real conditionals. See docs/mathematics.md §7.
"""

from __future__ import annotations

import itertools
import math

import torch

from mdsd.sequence.models import SequenceModel
from mdsd.tree.cache import ModelCache
from mdsd.validation import check_k

__all__ = ["read_sequence_pair"]


@torch.no_grad()
def _restricted(model, prefix: torch.Tensor, kept: torch.Tensor, depth: int, temperature: float) -> dict:
    """{u: p(· | prefix + kept[u]) restricted to ``kept`` and renormalised} for every u of length <= depth.

    One forward: the prefix, then every string u (length 1..depth) as a node of the complete n-ary trie, each
    seeing the prefix and its own ancestors (tree attention, docs/mathematics.md §4) at position P − 1 + |u|.
    """
    dev = next(model.parameters()).device
    n, P = kept.numel(), prefix.shape[1]
    strings = [u for length in range(1, depth + 1) for u in itertools.product(range(n), repeat=length)]
    at = {u: P + i for i, u in enumerate(strings)}
    Q = P + len(strings)
    visible = torch.zeros(1, Q, Q, dtype=torch.bool)
    visible[0, :, :P] = torch.ones(Q, P, dtype=torch.bool)
    visible[0, :P, :P] = torch.ones(P, P, dtype=torch.bool).tril()
    for u, i in at.items():
        visible[0, i, [at[u[:j]] for j in range(1, len(u) + 1)]] = True
    tail = kept[torch.tensor([u[-1] for u in strings], dtype=torch.long)]
    ids = torch.cat([prefix[0], tail])[None]
    lengths = torch.tensor([len(u) for u in strings], dtype=torch.long)
    positions = torch.cat([torch.arange(P), P - 1 + lengths])
    cache = ModelCache(model, 1, dev)
    cache.begin()
    logits, bad, _ = cache.forward(
        ids.to(dev),
        visible.to(dev),
        positions[None].to(dev),
        keep=len(strings) + 1,
        block_valid=torch.ones(1, Q, dtype=torch.bool, device=dev),
    )
    if bool(bad.any()):
        raise ValueError("a model returned NaN or infinite logits")
    scaled = logits[0].double().cpu()[:, kept] / temperature  # [1 + len(strings), n]
    rows = (scaled - torch.logsumexp(scaled, dim=-1, keepdim=True)).exp().numpy()
    return dict(zip([(), *strings], rows, strict=True))


def read_sequence_pair(
    target, draft, prefix_ids: torch.Tensor, n: int, depth: int, temperature: float = 1.0
) -> tuple[SequenceModel, SequenceModel, list[int]]:
    """(target table, draft table, the n kept token ids) read off two causal LMs after ``prefix_ids``.

    Parameters
    ----------
    target, draft : transformers causal LMs
        Sharing one vocabulary.
    prefix_ids : LongTensor [1, P] or [P]
        The real prefix (P >= 1).
    n : int
        How many of the target's most likely next tokens to keep (the tiny vocabulary; token i of the
        tables is ``token_ids[i]``).
    depth : int
        Conditionals for every string of length <= depth over the kept tokens: trees of depth <= depth.
    temperature : float
        T > 0, applied to both models' logits.

    Cost: one forward per model over P + Σ_{1<=l<=depth} n^l tokens (the prefix and the trie of strings).
    """
    n = check_k(n, "n")
    depth = check_k(depth, "depth", minimum=0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
    if not math.isfinite(temperature):
        raise ValueError(f"temperature must be finite, got {temperature}")
    prefix = torch.as_tensor(prefix_ids).long().reshape(1, -1).cpu()
    if prefix.shape[1] == 0:
        raise ValueError("prefix_ids must hold at least one token")
    vocab = {
        who: m.get_output_embeddings().weight.shape[0] for who, m in (("target", target), ("draft", draft))
    }
    if vocab["target"] != vocab["draft"]:
        raise ValueError(f"target and draft must share one vocabulary; got sizes {vocab}")
    if n > vocab["target"]:
        raise ValueError(f"n = {n} exceeds the vocabulary of {vocab['target']} tokens")
    if bool((prefix < 0).any()) or bool((prefix >= vocab["target"]).any()):
        raise ValueError(f"prefix_ids holds token ids outside [0, {vocab['target']})")
    with torch.no_grad():
        first = target(input_ids=prefix.to(next(target.parameters()).device)).logits[0, -1].double().cpu()
    kept = torch.sort(first, descending=True, stable=True).indices[:n]  # [n]
    tables = [
        SequenceModel.from_table(_restricted(m, prefix, kept, depth, temperature)) for m in (target, draft)
    ]
    return tables[0], tables[1], kept.tolist()
