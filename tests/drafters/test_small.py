"""The small drafter: its cache is its whole-sequence forward, packed rows are separate sequences, it decodes
losslessly on both paths, it saves and loads, and it refuses a target or tokenizer it was not made for."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tiny_lms import tiny_lm

import mdsd
from mdsd.drafters.cache import LayerCache
from mdsd.drafters.head import FILL
from mdsd.drafters.small import SmallDrafter, is_small
from mdsd.tree.draft import causal

PROMPTS = [[3, 4, 5, 3, 4], [7], [1, 2, 1, 2, 1, 2, 9]]
SHAPE = {"hidden_size": 16, "layers": 3, "heads": 4, "kv_heads": 2, "intermediate_size": 24}


def _drafter(target, vocab, seed=0, scale=0.3) -> SmallDrafter:
    """A fresh drafter with its weights moved off their initial values (every input exercised)."""
    drafter = SmallDrafter.fresh(target, vocab, **SHAPE, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return drafter


@pytest.mark.parametrize("temperature", [0.0, 1e-3, 0.7, 1.0])
def test_the_cache_gives_the_whole_sequences_forward_block_by_block(temperature):
    """Blocks read through the drafter's cache (committed in between) give the logits of one causal forward
    over the whole sequence: on the draft vocabulary logits / T, FILL off it (q exactly 0 there)."""
    target = tiny_lm(0, vocab=24)
    vocab = torch.tensor([0, 3, 5, 6, 9, 15, 16, 17, 20, 21, 22, 23, 1, 2, 4, 7, 8])
    drafter = _drafter(target, vocab)
    ids = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(3))
    positions = torch.arange(9).expand(2, -1)
    with torch.no_grad():
        small = drafter(ids, positions)
    cache = LayerCache(drafter, 2, 32, temperature)
    got = []
    for lo, hi in ((0, 4), (4, 5), (5, 9)):
        cache.begin()
        real = torch.ones(2, hi - lo, dtype=torch.bool)
        out = cache.forward(ids[:, lo:hi], causal(real), positions[:, lo:hi], hi - lo, real)
        cache.commit(torch.arange(hi - lo).expand(2, -1), torch.full((2,), hi - lo))
        assert out.hidden is None  # it reads no features and hands none on
        got.append(out.logits)
    logits = torch.cat(got, 1)
    want = small if temperature in (0.0, 1.0) else small / temperature
    assert torch.allclose(logits[..., vocab], want, rtol=1e-5, atol=1e-4 * float(want.abs().max()))
    off = torch.ones(24, dtype=torch.bool)
    off[vocab] = False
    assert bool((logits[..., off] == FILL).all())
    assert bool((torch.softmax(logits, -1)[..., off] == 0).all())


def test_packed_sequences_are_read_as_separate_sequences():
    """Two sequences packed in one row (a block-diagonal causal mask, positions restarting) give each
    sequence's own forward."""
    target = tiny_lm(0, vocab=24)
    drafter = _drafter(target, torch.arange(20))
    a, b = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[1, 2, 3]])
    row = torch.cat([a, b], 1)
    doc = torch.tensor([0] * 5 + [1] * 3)
    t = torch.arange(8)
    mask = ((doc[:, None] == doc[None, :]) & (t[None, :] <= t[:, None]))[None]
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2]])
    with torch.no_grad():
        packed = drafter(row, positions, mask)
        alone = torch.cat([drafter(a, torch.arange(5)[None]), drafter(b, torch.arange(3)[None])], 1)
    assert torch.allclose(packed, alone, atol=1e-5)


@pytest.mark.parametrize("compile", [False, "none"])
@pytest.mark.parametrize("tree", ["chain", "binary", "dynamic"])
def test_greedy_decoding_with_the_drafter_gives_the_targets_greedy_tokens(compile, tree):
    trees = {
        "chain": mdsd.Tree.chain(3),
        "binary": mdsd.Tree.kary([2, 2]),
        "dynamic": mdsd.DynamicTree(depth=3, k=2, expand=2, budget=5),
    }
    target = tiny_lm(0, vocab=24)
    drafter = _drafter(target, torch.arange(0, 24, 2))
    ar = mdsd.TreeDecoder(target, None, None, temperature=0.0).generate_batch(PROMPTS, 12)
    dec = mdsd.TreeDecoder(target, drafter, trees[tree], "rrs", temperature=0.0, compile=compile)
    outs = dec.generate_batch(PROMPTS, 12)
    assert [o.tokens.tolist() for o in outs] == [o.tokens.tolist() for o in ar]
    assert all(o.draft_forwards > 0 for o in outs)


def test_decoding_accepts_where_the_drafters_training_forward_agrees_with_the_target():
    """At T = 0 with one draft a step, a step's draft is accepted exactly where the drafter's whole-sequence
    forward (what training reads) picks the target's greedy token."""
    target = tiny_lm(0, vocab=24)
    drafter = _drafter(target, torch.arange(24), seed=2, scale=0.05)
    with torch.no_grad():  # a drafter close to the target's own next-token rows agrees now and then
        drafter.out.copy_(3 * drafter.out / drafter.out.norm(dim=1, keepdim=True))
    prompt = [3, 4, 5, 6]
    dec = mdsd.TreeDecoder(target, drafter, mdsd.Tree.chain(1), "single", temperature=0.0)
    out = dec.generate(torch.tensor([prompt]), 40)
    ids = torch.tensor([prompt + out.tokens.tolist()])
    with torch.no_grad():
        mine = drafter.vocab[drafter(ids, torch.arange(ids.shape[1])[None])[0].argmax(-1)]
        agree = (mine == target(ids).logits[0].argmax(-1)).tolist()
    expected, at = [0], len(prompt)
    for _ in out.accepted_per_step[1:]:
        expected.append(int(agree[at]))
        at += 1 + expected[-1]
    assert list(out.accepted_per_step) == expected
    assert 0 < sum(expected) < len(expected) - 1  # both outcomes occur


@pytest.mark.slow
@pytest.mark.parametrize("compile", [False, "none"])
def test_sampling_with_the_drafter_keeps_the_targets_law(compile):
    """The first two tokens after a prompt, decoded with the drafter on a binary tree with the optimal
    verifier, follow the target's law (chi-square at alpha = 1e-3, 8-token vocabulary, 3,000 decodes)."""
    target = tiny_lm(5, vocab=8, sharpness=1.5)
    drafter = SmallDrafter.fresh(
        target,
        torch.tensor([0, 2, 3, 5, 6]),
        hidden_size=4,
        layers=2,
        heads=2,
        kv_heads=1,
        intermediate_size=8,
        seed=4,
    )
    prompt = [1, 4]
    with torch.no_grad():
        first = torch.softmax(target(torch.tensor([prompt])).logits[0, -1] / 0.8, -1)
        second = torch.softmax(target(torch.tensor([[*prompt, t] for t in range(8)])).logits[:, -1] / 0.8, -1)
    law = (first[:, None] * second).flatten().double().numpy()
    law /= law.sum()
    dec = mdsd.TreeDecoder(
        target, drafter, mdsd.Tree.kary([2, 2]), "optimal", temperature=0.8, compile=compile
    )
    counts = np.zeros(64)
    gen = torch.Generator().manual_seed(11)
    for _ in range(30):
        for o in dec.generate_batch([prompt] * 100, 2, gen):
            a, b = o.tokens.tolist()
            counts[8 * a + b] += 1
    keep = law * counts.sum() >= 5  # the rare pairs pooled into one cell, where there are any
    expected, observed = law[keep] * counts.sum(), counts[keep]
    if (~keep).any():
        expected, observed = (
            np.append(expected, law[~keep].sum() * counts.sum()),
            np.append(observed, counts[~keep].sum()),
        )
    assert chisquare(observed, expected).pvalue > 1e-3


def test_save_and_load_round_trip_and_refusals(tmp_path):
    target = tiny_lm(0, vocab=24)
    described = {"name": "t", "weights_sha256": "a" * 64}
    drafter = SmallDrafter.fresh(
        target,
        torch.tensor([1, 4, 7, 9, 11, 12, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23]),
        **SHAPE,
        describe=described,
        tokenizer="c" * 64,
    )
    drafter.save(tmp_path / "d")
    assert is_small(tmp_path / "d") and not is_small(tmp_path)
    again = SmallDrafter.load(tmp_path / "d", target, "a" * 64, "c" * 64)
    for (name, a), (_, b) in zip(drafter.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert torch.equal(again.vocab, drafter.vocab)
    with pytest.raises(ValueError, match="another tokenizer"):
        SmallDrafter.load(tmp_path / "d", target, "a" * 64, "d" * 64)
    with pytest.raises(ValueError, match="this target's weights are bbbb"):
        SmallDrafter.load(tmp_path / "d", target, "b" * 64)
    with pytest.raises(ValueError, match="vocabulary 24; this target's is 32"):
        SmallDrafter.load(tmp_path / "d", tiny_lm(0, vocab=32))
    with pytest.raises(ValueError, match="model family qwen2; this target's is llama"):
        SmallDrafter.load(tmp_path / "d", tiny_lm(0, vocab=24, family="llama"))
    with pytest.raises(ValueError, match="narrower"):
        SmallDrafter.fresh(target, torch.arange(24), hidden_size=64, heads=4, kv_heads=2)
    with pytest.raises(ValueError, match="heads of even size"):
        SmallDrafter.fresh(target, torch.arange(24), hidden_size=12, heads=4, kv_heads=2)
    (tmp_path / "d" / "drafter.safetensors").write_bytes(b"\0" * 40)
    with pytest.raises(ValueError, match="not a whole weights file"):
        SmallDrafter.load(tmp_path / "d", target)
    with pytest.raises(FileNotFoundError, match="no small drafter"):
        SmallDrafter.load(tmp_path / "none", target)


def test_mdsd_decode_takes_a_small_drafter_as_its_draft(tmp_path, capsys):
    from tiny_lms import word_pair

    from mdsd.cli import main
    from mdsd.drafters.small import tokenizer_digest

    target_dir, _ = word_pair(tmp_path)
    target = mdsd.hf.load_model(target_dir)
    digest = tokenizer_digest(mdsd.hf.load_tokenizer(target_dir))
    vocab = torch.arange(target.config.vocab_size)
    _drafter(target, vocab).save(tmp_path / "small")
    base = ["decode", "--target", str(target_dir), "--temperature", "0", "--prompt", "the cat sat on"]
    assert main([*base, "--tree", "none", "--max-new-tokens", "8"]) == 0
    plain = capsys.readouterr().out.split("\n")[1]
    for compile in ("false", "none"):
        args = [*base, "--draft", str(tmp_path / "small"), "--tree", "binary:2", "--max-new-tokens", "8"]
        assert main([*args, "--compile", compile]) == 0
        out = capsys.readouterr().out
        assert out.split("\n")[1] == plain and "binary:2: 8 tokens from" in out
    assert main([*base, "--draft", str(tmp_path / "small"), "--compare"]) == 2
    assert "needs a draft model: --draft is an mdsd drafter" in capsys.readouterr().err
    SmallDrafter.fresh(target, vocab, **SHAPE, tokenizer="0" * 64).save(tmp_path / "other")
    assert main([*base, "--draft", str(tmp_path / "other"), "--tree", "chain:2"]) == 2
    assert "another tokenizer" in capsys.readouterr().err
    assert digest != "0" * 64


def test_a_small_drafters_cost_is_its_input_map_layers_and_output_rows():
    from mdsd.costs import forward_cost

    target = tiny_lm(0, vocab=24)
    drafter = SmallDrafter.fresh(target, torch.arange(20), **SHAPE)
    E, h, D = target.config.hidden_size, 16, 4
    layer = h * D * (2 * 4 + 2 * 2) + 3 * h * 24
    want = E * h + 3 * layer + 20 * h
    assert forward_cost(drafter).multiply_adds == want


def test_an_extended_drafter_keeps_its_rows_and_fits_the_new_ones():
    """Adding tokens to the draft vocabulary keeps every weight and present row (so the present tokens'
    logits), and gives each new token the target's row through the least-squares map of the present ones."""
    target = tiny_lm(0, vocab=24)
    drafter = _drafter(target, torch.tensor([1, 4, 7, 9, 11, 12, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23]))
    grown = drafter.extended(target, torch.tensor([2, 5]))
    assert grown.vocab.tolist() == sorted([*drafter.vocab.tolist(), 2, 5])
    ids, positions = torch.tensor([[3, 5, 8, 1]]), torch.arange(4)[None]
    with torch.no_grad():
        x = drafter.inputs(ids)
        for layer in drafter.layers:
            x = layer(x, positions)
        old, new = drafter.draft_logits(x, 1.0), grown.draft_logits(x, 1.0)
        assert torch.allclose(grown(ids, positions)[..., torch.searchsorted(grown.vocab, drafter.vocab)],
                              drafter(ids, positions))  # fmt: skip
    assert torch.allclose(new[..., drafter.vocab], old[..., drafter.vocab])
    rows = target.lm_head.weight.double()
    fit = torch.linalg.lstsq(rows[drafter.vocab], drafter.out.double()).solution
    at = torch.searchsorted(grown.vocab, torch.tensor([2, 5]))
    assert torch.allclose(grown.out[at].double(), rows[[2, 5]] @ fit, atol=1e-5)
    with pytest.raises(ValueError, match="outside the draft vocabulary"):
        drafter.extended(target, torch.tensor([4]))
