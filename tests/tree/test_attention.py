"""Tree attention: the logits at every tree node equal those of a plain forward over the node's path.

The decoder's target and draft forwards are recorded during real decodes (so the KV caches have been
reused and pruned across steps, and batch rows hold different numbers of live entries); every recorded
node is then recomputed by a plain causal forward over prompt + emitted tokens + the node's path.
"""

import numpy as np
import pytest
import torch
from tiny_lms import perturbed, tiny_lm

from mdsd import Tree, TreeDecoder

TREES = [Tree.chain(3), Tree.kary([2, 2]), Tree.kary([3, 1, 2]), Tree((0, 0, 1, 1, 3, 2, 5))]


def _record(dec):
    """Wrap the decoder's target and draft calls; return the lists they append to."""
    target_calls, draft_calls = [], []
    target_tree, expand = dec._target_tree, dec._expand

    def record_target(state, node_tok):
        logits = target_tree(state, node_tok)
        target_calls.append((node_tok.clone(), logits.clone()))
        return logits

    def record_expand(nodes, logits, node_tok, q, generator):
        draft_calls.append((nodes.copy(), logits.clone(), node_tok))  # node_tok is filled in later
        return expand(nodes, logits, node_tok, q, generator)

    dec._target_tree, dec._expand = record_target, record_expand
    return target_calls, draft_calls


def _path(tree, node_tok_row, u):
    path = []
    while u > 0:
        path.append(int(node_tok_row[u]))
        u = int(tree.parent[u])
    return path[::-1]


def _prefixes(prompt, outs, steps):
    """Sequence (prompt + emitted tokens) before each step, per row: prefixes[step][row] (None = done)."""
    result = []
    for s in range(steps):
        row = []
        for out in outs:
            if s < out.steps:
                row.append(prompt + out.tokens[: sum(out.tokens_per_step[:s])].tolist())
        result.append(row)
    return result


@torch.no_grad()
def _plain_last_logits(model, seq):
    return model(torch.tensor([seq])).logits[0, -1]


@pytest.mark.parametrize("tree", TREES, ids=lambda t: str(t.parents))
@pytest.mark.parametrize("family, attn", [("qwen2", "sdpa"), ("llama", "eager")])
def test_tree_logits_equal_path_forwards(tree, family, attn):
    target = tiny_lm(3, vocab=16, family=family, attn=attn)
    draft = perturbed(target, 0.2, seed=4)  # close: long accepted paths, so caches are pruned and reused
    dec = TreeDecoder(target, draft, tree, verifier="rrsw", temperature=0.9)
    target_calls, draft_calls = _record(dec)
    prompt = [1, 5, 7]
    outs = dec.generate_batch(torch.tensor([prompt] * 3), 12, torch.Generator().manual_seed(0))
    steps = max(o.steps for o in outs)
    assert len(target_calls) == steps
    # some step accepted a whole path down to a leaf: the leaf then enters the draft cache a step late
    assert any(tree.max_depth in o.accepted_per_step for o in outs)
    prefixes = _prefixes(prompt, outs, steps)
    worst = 0.0
    for s, (node_tok, logits) in enumerate(target_calls):
        for b, seq in enumerate(prefixes[s]):
            assert seq[-1] == int(node_tok[b, 0])  # the root is the last token so far
            for u in range(tree.num_nodes):
                plain = _plain_last_logits(target, seq + _path(tree, node_tok[b], u))
                worst = max(worst, float((logits[b, u] - plain).abs().max()))
    assert worst < 1e-5
    # draft: one call per level per step; check the nodes of every level
    worst, s = 0.0, -1
    for nodes, logits, node_tok in draft_calls:
        if nodes.tolist() == [0]:
            s += 1
        for b, seq in enumerate(prefixes[s]):
            for i, u in enumerate(nodes.tolist()):
                plain = _plain_last_logits(draft, seq + _path(tree, node_tok[b], u))
                worst = max(worst, float((logits[b, i] - plain).abs().max()))
    assert worst < 1e-5


def test_a_wrong_mask_is_caught():
    """The check above can fail: dropping the ancestor structure (a plain causal mask) breaks it."""
    target = tiny_lm(3, vocab=16)
    tree = Tree.kary([2, 2])
    dec = TreeDecoder(target, target, tree, verifier="rrs", temperature=1.0)
    target_calls, _ = _record(dec)
    good = tree.ancestors
    tree.__dict__["ancestors"] = np.tril(np.ones_like(good))  # every node sees every earlier node
    try:
        out = dec.generate(torch.tensor([[1, 5, 7]]), 1, torch.Generator().manual_seed(0))
    finally:
        tree.__dict__["ancestors"] = good
    node_tok, logits = target_calls[0]
    seq = [1, 5, 7]
    errors = [
        float((logits[0, u] - _plain_last_logits(target, seq + _path(tree, node_tok[0], u))).abs().max())
        for u in range(tree.num_nodes)
    ]
    assert out.steps == 1 and max(errors) > 1e-3
