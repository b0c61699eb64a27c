"""TreeDecoder: greedy equals the target's greedy generate, output bookkeeping, EOS, bad input."""

import copy

import numpy as np
import pytest
import torch
from tiny_lms import perturbed, tiny_lm

from mdsd import DynamicTree, Tree, TreeDecodeOutput, TreeDecoder
from mdsd.tree.adaptive import ExpectedRate, GrowShrink, SourceFirst

TREES = [
    Tree.chain(0),
    Tree.chain(4),
    Tree.kary([2, 2, 2]),
    Tree.kary([3, 1]),
    Tree((0, 0, 1, 1, 3, 2, 5)),
    DynamicTree(depth=3, k=3, expand=2, budget=6),
]


def _reference(target, x, n):
    """The target's own greedy decoding (an explicit mask: token 0 is a real token here, not padding)."""
    ones = torch.ones_like(x)
    out = target.generate(x, attention_mask=ones, max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, x.shape[1] :]


@pytest.mark.parametrize("path", [False, "none"], ids=["eager", "fast"])
@pytest.mark.parametrize("tree", TREES, ids=str)
@pytest.mark.parametrize("family, attn", [("qwen2", "sdpa"), ("llama", "eager")])
def test_greedy_equals_target_generate(tree, family, attn, path):
    target = tiny_lm(5, vocab=32, family=family, attn=attn)
    for draft in (perturbed(target, 0.1, seed=6), tiny_lm(7, vocab=32, family=family, attn=attn)):
        dec = TreeDecoder(target, draft, tree, verifier="rrsw", temperature=0, compile=path)
        for prompt in ([[2]], [[4, 9, 1, 30, 7]]):
            x = torch.tensor(prompt)
            ref = _reference(target, x, 24)
            out = dec.generate(x, 24)
            assert out.tokens.tolist() == ref.tolist()
            assert sum(out.tokens_per_step) == 24 and out.steps == len(out.tokens_per_step)
            bonus = np.subtract(out.tokens_per_step, out.accepted_per_step)[:-1]  # the last step is cut
            # one residual or bonus token per step; none when a step ends on a node the target did not see
            assert set(bonus) <= ({0, 1} if isinstance(tree, DynamicTree) else {1})


@pytest.mark.parametrize(
    "tree", [Tree.kary([2, 2, 2]), DynamicTree(depth=3, k=2, expand=2, budget=4)], ids=str
)
def test_greedy_batches_of_ragged_prompts_equal_each_prompt_alone(tree):
    target = tiny_lm(5, vocab=32)
    dec = TreeDecoder(target, perturbed(target, 0.05, seed=6), tree, temperature=0)
    prompts = [[4, 9, 1], [3], [0, 31, 8, 8, 2, 17, 5], [12, 12]]
    outs = dec.generate_batch(prompts, 25)
    for row, out in zip(prompts, outs, strict=True):
        ref = _reference(target, torch.tensor([row]), 25)
        assert out.tokens.tolist() == ref.tolist()
        assert out.tokens.tolist() == dec.generate(torch.tensor([row]), 25).tokens.tolist()
    assert max(max(o.accepted_per_step) for o in outs) == 3  # whole paths accepted: leaves enter the caches
    assert np.mean([o.mean_tokens_per_step for o in outs]) > 2


def test_one_row_stops_at_eos_while_the_others_go_on():
    target = tiny_lm(5, vocab=32)
    draft = perturbed(target, 0.05, seed=6)
    prompts = [[4, 9, 1], [3], [0, 31, 8, 8, 2]]
    free = TreeDecoder(target, draft, Tree.kary([2, 2]), temperature=0).generate_batch(prompts, 20)
    eos = free[1].tokens[3].item()  # the fourth token of the second row
    dec = TreeDecoder(target, draft, Tree.kary([2, 2]), temperature=0, eos_token_id=eos)
    outs = dec.generate_batch(prompts, 20)
    for out, ref in zip(outs, free, strict=True):
        tokens = ref.tokens.tolist()
        cut = tokens.index(eos) + 1 if eos in tokens else len(tokens)
        assert out.tokens.tolist() == tokens[:cut] and out.stopped_by_eos == (eos in tokens)
    assert len(outs[1].tokens) <= 4 and any(len(o.tokens) == 20 for o in outs)


def test_a_batch_of_one_is_generate(pair):
    target, draft = pair
    dec = TreeDecoder(target, draft, DynamicTree(depth=2, k=2, expand=1), verifier="rrsw", temperature=0.8)
    one = dec.generate(torch.tensor([[1, 2, 3]]), 15, torch.Generator().manual_seed(4))
    batch = dec.generate_batch([[1, 2, 3]], 15, torch.Generator().manual_seed(4))[0]
    assert one.tokens.tolist() == batch.tokens.tolist() and one.tokens_per_step == batch.tokens_per_step


def test_output_fields_and_timings(pair):
    target, draft = pair
    dec = TreeDecoder(target, draft, Tree.kary([2, 2]), verifier="spechub", temperature=0.8)
    out = dec.generate(torch.tensor([[1, 2]]), 17, torch.Generator().manual_seed(3))
    assert isinstance(out, TreeDecodeOutput)
    assert out.tokens.dtype == torch.long and out.tokens.shape == (17,)
    assert out.steps == len(out.tokens_per_step) == len(out.accepted_per_step)
    assert all(0 <= a <= 2 for a in out.accepted_per_step)
    assert sum(out.tokens_per_step) == 17 > sum(out.tokens_per_step[:-1])
    assert set(out.timings) == {"total", "draft", "target", "verify", "cache"}
    assert all(t > 0 for t in out.timings.values())
    again = dec.generate(torch.tensor([[1, 2]]), 17, torch.Generator().manual_seed(3))
    assert again.tokens.tolist() == out.tokens.tolist()  # randomness comes from the generator only


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_eos_stops_cleanly(pair, temperature):
    target, draft = pair
    free = TreeDecoder(target, draft, Tree.kary([2, 2]), verifier="rrs", temperature=temperature)
    tokens = free.generate(torch.tensor([[5, 6]]), 30, torch.Generator().manual_seed(1)).tokens.tolist()
    eos = tokens[7]
    first = tokens.index(eos)
    dec = TreeDecoder(target, draft, Tree.kary([2, 2]), "rrs", temperature=temperature, eos_token_id=eos)
    out = dec.generate(torch.tensor([[5, 6]]), 30, torch.Generator().manual_seed(1))
    assert out.tokens.tolist() == tokens[: first + 1] and out.stopped_by_eos


def test_eos_defaults_to_the_generation_config(pair):
    target, draft = pair
    target.generation_config.eos_token_id = [4, 7]
    try:
        dec = TreeDecoder(target, draft, Tree.chain(2), verifier="single", temperature=0)
        assert dec.eos_token_ids == {4, 7}
    finally:
        target.generation_config.eos_token_id = None


def test_bad_input(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="too wide for verifier 'spechub'"):
        TreeDecoder(target, draft, Tree.kary([3]), verifier="spechub")
    with pytest.raises(ValueError, match="share one vocabulary"):
        TreeDecoder(target, tiny_lm(1, vocab=13), Tree.chain(2), verifier="single")
    with pytest.raises(ValueError, match="temperature"):
        TreeDecoder(target, draft, Tree.chain(2), temperature=-0.5)
    with pytest.raises(ValueError, match="temperature"):
        TreeDecoder(target, draft, Tree.chain(2), temperature=float("nan"))
    with pytest.raises(TypeError, match="tree"):
        TreeDecoder(target, draft, [2, 2])
    with pytest.raises(ValueError, match="unknown|verifier"):
        TreeDecoder(target, draft, Tree.kary([2]), verifier="nope")
    dec = TreeDecoder(target, draft, Tree.kary([2]), verifier="rrs", temperature=1.0)
    with pytest.raises(ValueError, match="empty"):
        dec.generate(torch.zeros(1, 0, dtype=torch.long), 5)
    with pytest.raises(ValueError, match=r"\[1, L\]"):
        dec.generate(torch.tensor([1, 2]), 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.generate(torch.tensor([[1, 2]]), 0)
    with pytest.raises(TypeError, match="max_new_tokens"):
        dec.generate(torch.tensor([[1, 2]]), 2.5)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        dec.generate(torch.tensor([[1, 12]]), 5)
    with pytest.raises(TypeError, match="integer token ids"):
        dec.generate(torch.tensor([[1.0, 2.0]]), 5)


def test_greedy_needs_no_verifier_but_checks_its_name(pair):
    target, draft = pair
    x = torch.tensor([[1, 2, 3]])
    dec = TreeDecoder(target, draft, Tree.kary([3]), verifier="spechub", temperature=0)  # SpecHub: k = 2 only
    assert torch.equal(dec.generate(x, 6).tokens, _reference(target, x, 6))
    for tree in (Tree.chain(3), Tree.kary([3])):
        with pytest.raises(ValueError, match="unknown verifier 'nonsense'"):
            TreeDecoder(target, draft, tree, verifier="nonsense", temperature=0)


@pytest.mark.parametrize(("name", "tree"), [("block", Tree.chain(3)), ("traversal", Tree.kary([2, 2]))])
def test_sequence_rules_at_t0_are_greedy(pair, name, tree):
    target, draft = pair
    x = torch.tensor([[1, 2, 3]])
    dec = TreeDecoder(target, draft, tree, verifier=name, temperature=0)
    assert torch.equal(dec.generate(x, 7).tokens, _reference(target, x, 7))


def test_sequence_rules_need_a_static_tree_of_their_shape(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="verifier 'block' verifies a chain"):
        TreeDecoder(target, draft, Tree.kary([2]), verifier="block")
    with pytest.raises(ValueError, match="whole static mdsd.Tree"):
        TreeDecoder(target, draft, DynamicTree(depth=2, k=2, expand=1), verifier="traversal")


class _AcceleratorGenerator(torch.Generator):
    """A CPU generator that claims to live on an accelerator (this machine has none)."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def test_a_generator_on_another_device_is_refused(pair):
    target, draft = pair
    dec = TreeDecoder(target, draft, Tree.kary([2]), verifier="rrs", temperature=1.0)
    with pytest.raises(ValueError, match="generator is on cuda:0 but the models are on cpu"):
        dec.generate(torch.tensor([[1, 2]]), 4, _AcceleratorGenerator())
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        dec.generate(torch.tensor([[1, 2]]), 4, 0)


@pytest.mark.parametrize("who", ["target", "draft"])
@pytest.mark.parametrize("temperature", [0, 0.8])
def test_nan_logits_fail_loudly(who, temperature):
    target = tiny_lm(0)
    draft = perturbed(target, 0.3, seed=1)
    broken = {"target": target, "draft": draft}[who]
    with torch.no_grad():
        broken.get_output_embeddings().weight[3, 0] = float("nan")
    dec = TreeDecoder(target, draft, Tree.kary([2]), verifier="rrs", temperature=temperature)
    with pytest.raises(ValueError, match=f"{who} model returned NaN"):
        dec.generate(torch.tensor([[1, 2]]), 4, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_finite_zeroes_and_flags_exactly_the_non_finite_entries(dtype):
    """mdsd.tree.cache.finite against torch.isfinite: ±∞ and NaN zeroed, their rows flagged, and finite
    logits whose sum overflows (3e38 each in float32) neither changed nor flagged."""
    from mdsd.tree.cache import finite

    big = torch.finfo(dtype).max
    x = torch.randn(4, 3, 50, generator=torch.Generator().manual_seed(0)).to(dtype)
    x[0, 1, 7], x[1, 0, 0], x[1, 2, 49], x[2, 2, 3] = float("inf"), float("-inf"), float("nan"), big
    x[2, 0] = big  # a whole position of the largest finite value: its sum overflows
    out, bad = finite(x)
    ok = torch.isfinite(x)
    assert torch.equal(out, torch.where(ok, x, 0.0)) and out.dtype == dtype
    assert bad.tolist() == (~ok.all(-1).all(-1)).tolist() == [True, True, False, False]


def test_no_generator_leaves_the_global_rng_alone(pair):
    target, draft = pair
    dec = TreeDecoder(target, draft, Tree.kary([2, 1]), verifier="kseq", temperature=1.0)
    before = torch.get_rng_state()
    out = dec.generate(torch.tensor([[1, 2]]), 6)
    assert len(out.tokens) == 6 and torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize(
    "policy",
    [GrowShrink(initial=2), ExpectedRate(seconds=lambda depth: 1.0 + 0.2 * depth, prior=(3.0, 1.0))],
    ids=["grow-shrink", "expected-rate"],
)
@pytest.mark.parametrize(
    "tree", [Tree.chain(8), Tree.kary([2, 2, 1, 1]), DynamicTree(5, 2, 2, budget=6)], ids=str
)
def test_adaptive_depth_keeps_greedy_exact_and_adapts(policy, tree):
    target = tiny_lm(5, vocab=32)
    dec = TreeDecoder(target, perturbed(target, 0.05, seed=6), tree, temperature=0, depth=policy)
    prompts = [[4, 9, 1], [3], [0, 31, 8, 8, 2, 17, 5]]
    outs = dec.generate_batch(prompts, 30)
    for row, out in zip(prompts, outs, strict=True):
        assert out.tokens.tolist() == _reference(target, torch.tensor([row]), 30).tolist()
    for out in outs:  # replay the policy on each row's own record
        fresh = copy.deepcopy(policy)
        depth = fresh.start(1, dec.plan.max_depth)
        for drafted, accepted in zip(out.depth_per_step, out.accepted_per_step, strict=True):
            assert drafted == depth[0] and accepted <= drafted
            depth = fresh.update(depth, np.array([accepted]), dec.plan.max_depth)
    assert len({d for o in outs for d in o.depth_per_step}) > 1


@pytest.mark.parametrize("with_model", [True, False], ids=["mixed", "retrieval-only"])
def test_greedy_with_training_free_sources_equals_target_generate(with_model):
    from mdsd.sources import Datastore, Priority, PromptLookup

    target = tiny_lm(5, vocab=32)
    draft = perturbed(target, 0.3, seed=6) if with_model else None
    reference = {
        tuple(p): _reference(target, torch.tensor([p]), 30).tolist() for p in ([4, 9, 1], [3], [0, 31, 8])
    }
    corpus = [t for p, out in reference.items() for t in (*p, *out)]  # the target's own text: long matches
    source = Priority([PromptLookup(max_ngram=3), Datastore.build(corpus)])
    tree = Tree.kary([2, 1]) if with_model else None
    dec = TreeDecoder(target, draft, tree, verifier="rrsw", temperature=0, source=source, retrieve=(2, 6))
    outs = dec.generate_batch([list(p) for p in reference], 30)
    for ref, out in zip(reference.values(), outs, strict=True):
        assert out.tokens.tolist() == ref
    assert np.mean([o.mean_tokens_per_step for o in outs]) > 4  # the datastore holds the answer
    for out in outs:
        assert all(0 <= r <= a for r, a in zip(out.retrieved_per_step, out.accepted_per_step, strict=True))
        if not with_model:
            assert out.retrieved_per_step == out.accepted_per_step
    assert sum(sum(o.retrieved_per_step) for o in outs) > 0


@pytest.mark.parametrize("path", [False, "none"], ids=["eager", "fast"])
@pytest.mark.parametrize(("min_tokens", "backoff"), [(1, 0), (3, 0), (1, 2)])
def test_source_first_drafts_with_the_model_only_where_the_source_falls_short(path, min_tokens, backoff):
    """SourceFirst: a step drafts the source's chains alone (depth 0, no draft forward: the draft reads
    those tokens at its next step, on the fast path at the latest when its buffer is full) exactly where
    the source proposed at least min_tokens tokens and no step of chains alone was rejected whole in the
    last ``backoff`` steps, the whole tree otherwise; greedy output stays the target's. The draft is the
    target itself, so a model step whose path leaves the source's chain accepts the whole model chain: the
    draft's cache stays right across depth-0 steps."""
    from mdsd.sources import PromptLookup

    target = tiny_lm(5, vocab=32)
    prompts = [[4, 9, 1, 4, 9, 1, 4, 9, 1], [3], [0, 31, 8, 0, 31, 8, 0]]
    dec = TreeDecoder(
        target,
        target,
        Tree.chain(3),
        temperature=0,
        source=PromptLookup(),
        retrieve=(1, 5),
        depth=SourceFirst(min_tokens, backoff),
        compile=path,
    )
    depths, held_back = set(), 0
    for prompt in prompts:
        out = dec.generate(torch.tensor([prompt]), 30)
        assert out.tokens.tolist() == _reference(target, torch.tensor([prompt]), 30).tolist()
        lookup, context, cooling = PromptLookup(), list(prompt), 0
        for depth, emitted, accepted, retrieved in zip(
            out.depth_per_step,
            out.tokens_per_step,
            out.accepted_per_step,
            out.retrieved_per_step,
            strict=True,
        ):
            proposed = max((len(c.tokens) for c in lookup.propose(context, 1, 5)), default=0)
            assert depth == (0 if proposed >= min_tokens and not cooling else 3)
            held_back += bool(proposed >= min_tokens and cooling)
            cooling = backoff if depth == 0 and accepted == 0 else max(cooling - 1, 0)
            whole = emitted == accepted + 1 and len(context) + emitted < 30 + len(prompt)  # not cut short
            if depth and not retrieved and whole:
                assert accepted == 3  # the draft, the target itself, saw every token before
            context += out.tokens[len(context) - len(prompt) :][:emitted].tolist()
            depths.add(depth)
        chains_only = out.depth_per_step.count(0)
        model = 3 * (out.steps - chains_only)  # the pending block, then depths 1 and 2
        assert model <= out.draft_forwards <= model + (chains_only if path else 0)  # catching up
    assert depths == {0, 3} and (held_back > 0) == (backoff > 0)


def test_source_first_needs_a_source_and_a_tree(pair):
    from mdsd.sources import PromptLookup

    target, draft = pair
    with pytest.raises(ValueError, match="give both a source and a tree"):
        TreeDecoder(target, draft, Tree.chain(2), depth=SourceFirst())
    with pytest.raises(ValueError, match="give both a source and a tree"):
        TreeDecoder(target, None, None, depth=SourceFirst(), source=PromptLookup())
    with pytest.raises(ValueError, match="min_tokens"):
        SourceFirst(0)
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="backoff must be an integer >= 0"):
            SourceFirst(backoff=bad)
    with pytest.raises(ValueError, match="reads the proposals on the host"):
        TreeDecoder(
            target,
            draft,
            Tree.chain(2),
            depth=SourceFirst(),
            source=PromptLookup(),
            compile="none",
            propose_inside=True,
        )


@pytest.mark.parametrize("path", [False, "none"], ids=["eager", "fast"])
def test_a_source_alone_samples_the_same_tokens_whatever_the_verifier(path):
    """Without a model tree the source's chains are deterministic drafts, verified by one rule whatever the
    verifier's name (mdsd decode --tree none names none): sampled tokens equal under one seed."""
    from mdsd.sources import PromptLookup

    target = tiny_lm(0, vocab=12)
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [4, 5, 4, 5, 4]]
    decodes = []
    for name in ("spechub", "rrs", "topk", "single", "optimal"):
        dec = TreeDecoder(
            target,
            None,
            None,
            name,
            0.8,
            eos_token_id=[],
            source=PromptLookup(),
            retrieve=(2, 4),
            compile=path,
        )
        outs = dec.generate_batch(prompts, 20, torch.Generator().manual_seed(3))
        decodes.append([(o.tokens.tolist(), o.accepted_per_step) for o in outs])
    assert all(d == decodes[0] for d in decodes)
    assert sum(sum(a) for _, a in decodes[0]) > 0  # chains were accepted: the rule was exercised


def test_decoding_passes_the_cache_under_the_name_transformers_takes(caplog):
    """Regression (transformers 5.24 deprecated ``past_key_values`` for ``cache``, to be removed in 5.40):
    a decode triggers no deprecation warning, through the warnings module or transformers' logger."""
    import logging
    import warnings

    target = tiny_lm(5, vocab=32)
    dec = TreeDecoder(target, perturbed(target, 0.1, seed=6), Tree.kary([2, 1]), "rrs", temperature=0.7)
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        warnings.simplefilter("error")
        dec.generate(torch.tensor([[4, 9, 1]]), 8, torch.Generator().manual_seed(0))
    assert not [r for r in caplog.records if "deprecat" in r.getMessage()]
