"""Tree attention: the distributions at every tree node equal those of a plain forward over the node's path.

The decoder's target forwards and draft expansions are recorded during real decodes (so the KV caches have
been reused and pruned across steps, batch rows hold different numbers of live entries, prompts have
different lengths, and dynamic trees have different shapes per row); every recorded node is then recomputed
by a plain causal forward over prompt + emitted tokens + the node's path.
"""

import dataclasses

import pytest
import torch
from tiny_lms import perturbed, tiny_lm

import mdsd.tree.step as step_module
from mdsd import DynamicTree, Tree, TreeDecoder

TREES = [
    Tree.chain(3),
    Tree.kary([2, 2]),
    Tree.kary([3, 1, 2]),
    Tree((0, 0, 1, 1, 3, 2, 5)),
    DynamicTree(depth=3, k=2, expand=2, budget=5),
]
PROMPTS = [[1, 5, 7], [2], [9, 9, 3, 1, 4, 4]]
TEMPERATURE = 0.9


def _record(monkeypatch):
    """Record (drafted tree, target logits) of every step."""
    calls = []
    target_tree = step_module.target_tree

    def record(cache, pending, drafted):
        seen = target_tree(cache, pending, drafted)
        calls.append((drafted, seen.logits.clone()))
        return seen

    monkeypatch.setattr(step_module, "target_tree", record)
    return calls


def _path(drafted, b, u):
    path = []
    while u > 0:
        path.append(int(drafted.tokens[b, u]))
        u = int(drafted.parent[b, u])
    return path[::-1]


def _prefixes(outs, steps, fast):
    """Per step, (batch row, prompt + emitted tokens before the step) of each active row: the eager path
    drops finished rows from the batch, the fast path keeps every row in place."""
    out = []
    for s in range(steps):
        active = [
            (i, prompt + o.tokens[: sum(o.tokens_per_step[:s])].tolist())
            for i, (prompt, o) in enumerate(zip(PROMPTS, outs, strict=True))
            if s < o.steps
        ]
        out.append(active if fast else [(b, seq) for b, (_, seq) in enumerate(active)])
    return out


@torch.no_grad()
def _plain(model, seq):
    return model(torch.tensor([seq])).logits[0, -1]


@pytest.mark.parametrize("tree", TREES, ids=str)
@pytest.mark.parametrize(
    "family, attn, path",
    [
        ("qwen2", "sdpa", False),
        ("llama", "eager", False),
        ("qwen2", "sdpa", "none"),  # the fast path: static caches (mdsd.tree.static), same checks
        ("llama", "eager", "none"),
        ("qwen3", "sdpa", "none"),  # per-head query and key norms
    ],
)
def test_tree_distributions_equal_path_forwards(monkeypatch, tree, family, attn, path):
    target = tiny_lm(3, vocab=16, family=family, attn=attn, random_norms=True)
    draft = perturbed(target, 0.2, seed=4)  # close: long accepted paths, so caches are pruned and reused
    dec = TreeDecoder(target, draft, tree, verifier="rrsw", temperature=TEMPERATURE, compile=path)
    calls = _record(monkeypatch)
    outs = dec.generate_batch(PROMPTS, 12, torch.Generator().manual_seed(0))
    steps = max(o.steps for o in outs)
    assert len(calls) == steps
    depth = dec.plan.max_depth
    assert any(depth in o.accepted_per_step for o in outs)  # whole paths accepted: leaves enter the caches
    worst_target = worst_draft = 0.0
    for (drafted, logits), prefix in zip(calls, _prefixes(outs, steps, bool(path)), strict=True):
        for b, seq in prefix:
            assert seq[-1] == int(drafted.tokens[b, 0])  # the root is the last token so far
            for f, u in enumerate(drafted.forward[b].tolist()):
                plain = (
                    _plain(target, seq + _path(drafted, b, u)) / TEMPERATURE
                )  # logits at T, as caches give
                worst_target = max(worst_target, float((logits[b, f] - plain).abs().max()))
            for e in drafted.expansions:
                for m, u in enumerate(e.node[b].tolist()):
                    q = torch.softmax(_plain(draft, seq + _path(drafted, b, u)) / TEMPERATURE, -1)
                    worst_draft = max(worst_draft, float((e.q[b, m] - q).abs().max()))
    assert worst_target < 1e-5 and worst_draft < 1e-5


def test_a_wrong_mask_is_caught(monkeypatch):
    """The check above can fail: letting every node see every earlier node breaks it."""
    target = tiny_lm(3, vocab=16)
    dec = TreeDecoder(target, target, Tree.kary([2, 2]), verifier="rrs", temperature=1.0)
    calls = []
    target_tree = step_module.target_tree

    def leaky(cache, pending, drafted):
        leaked = dataclasses.replace(drafted, ancestors=torch.ones_like(drafted.ancestors).tril())
        seen = target_tree(cache, pending, leaked)
        calls.append((drafted, seen.logits.clone()))
        return seen

    monkeypatch.setattr(step_module, "target_tree", leaky)
    out = dec.generate(torch.tensor([[1, 5, 7]]), 1, torch.Generator().manual_seed(0))
    drafted, logits = calls[0]
    errors = [
        float((logits[0, f] - _plain(target, [1, 5, 7] + _path(drafted, 0, u))).abs().max())
        for f, u in enumerate(drafted.forward[0].tolist())
    ]
    assert out.steps == 1 and max(errors) > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("temperature", [0.0, 1e-3, 0.05, 0.6, 1.0])
def test_both_caches_return_the_logits_at_their_temperature(dtype, temperature):
    """Every cache returns logits / T (as they are at T = 0 and 1): the static one as (h / T) W where the
    dtype holds h / T, which float16 does not at T = 1e-3 (there it divides the float32 logits)."""
    from mdsd.tree.cache import ModelCache
    from mdsd.tree.draft import causal
    from mdsd.tree.static import StaticLM

    model = tiny_lm(3, vocab=16, sharpness=40.0).to(dtype)
    ids = torch.tensor([[1, 5, 7, 2], [3, 3, 9, 4]])
    real = torch.ones_like(ids, dtype=torch.bool)
    args = (ids, causal(real), torch.arange(4).expand(2, -1), 4, real)
    with torch.no_grad():
        plain = model(ids).logits.float()
    want = plain if temperature == 0 else plain / temperature
    for cache in (ModelCache(model, 2, ids.device, temperature), StaticLM(model, 2, 8, temperature)):
        logits, bad, _ = cache.forward(*args)
        assert not bad.any()
        tol = 1e-5 if dtype == torch.float32 else 2e-2  # bfloat16 / float16: the logits' own rounding
        assert torch.allclose(logits.float(), want, rtol=tol, atol=tol * float(want.abs().max()))
