"""The feature head: its layer is the target's, its cache is its own forward, it decodes losslessly on both
paths, and it refuses a target it was not made for."""

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tiny_lms import tiny_lm

import mdsd
from mdsd.drafters.cache import LayerCache
from mdsd.drafters.head import FILL, FeatureHead
from mdsd.drafters.layer import DecoderLayer, LayerShape
from mdsd.tree.draft import causal

PROMPTS = [[3, 4, 5, 3, 4], [7], [1, 2, 1, 2, 1, 2, 9]]
TREES = {
    "chain": mdsd.Tree.chain(3),
    "binary": mdsd.Tree.kary([2, 2]),
    "kary": mdsd.Tree.kary([3, 1]),
    "dynamic": mdsd.DynamicTree(depth=3, k=2, expand=2, budget=5),
}


def _trained_like(head: FeatureHead, seed: int) -> FeatureHead:
    """The head with random weights (an untrained head passes the feature through; random ones exercise
    every input)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return head


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_the_layer_is_the_targets_layer(family):
    """A layer built from a transformers layer's state dict computes what that layer computes."""
    target = tiny_lm(0, vocab=16, family=family)
    shape = LayerShape.of_config(target.config)
    hf = target.model.layers[1]
    mine = DecoderLayer.from_state(shape, hf.state_dict())
    x = torch.randn(2, 7, target.config.hidden_size, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(3, 10).expand(2, -1)
    with torch.no_grad():
        cos, sin = target.model.rotary_emb(x, positions)
        mask = torch.full((7, 7), torch.finfo(x.dtype).min).triu(1)[None, None].expand(2, 1, 7, 7)
        out = hf(x, attention_mask=mask, position_ids=positions, position_embeddings=(cos, sin))
        want = out[0] if isinstance(out, tuple) else out
        got = mine(x, positions)
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


def test_a_narrower_mlp_keeps_the_first_units():
    target = tiny_lm(0, vocab=16)
    shape = LayerShape.of_config(target.config, intermediate_size=16)
    layer = DecoderLayer.from_state(shape, target.model.layers[0].state_dict())
    assert torch.equal(layer.mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight[:16])
    assert torch.equal(layer.mlp.down_proj.weight, target.model.layers[0].mlp.down_proj.weight[:, :16])


def test_a_fresh_head_passes_the_feature_through_its_input_map():
    target = tiny_lm(0, vocab=16)
    head = FeatureHead.from_target(target, torch.arange(16))
    ids, features = torch.tensor([[1, 2]]), torch.randn(1, 2, target.config.hidden_size)
    assert torch.allclose(head.inputs(ids, features), features)


@pytest.mark.parametrize("temperature", [0.0, 1e-3, 0.7, 1.0])
def test_the_cache_gives_the_whole_sequences_forward_block_by_block(temperature):
    """Blocks read through the head's cache (committed in between, rows of different lengths) give the
    features and logits of one causal forward over the whole sequence; off the draft vocabulary the
    logits are FILL, on it logits / T."""
    target = tiny_lm(0, vocab=16)
    vocab = torch.tensor([0, 3, 5, 6, 9, 15])
    head = _trained_like(FeatureHead.from_target(target, vocab), seed=2)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 16, (2, 9), generator=gen)
    features = torch.randn(2, 9, target.config.hidden_size, generator=gen)
    positions = torch.arange(9).expand(2, -1)
    with torch.no_grad():
        g, small = head(ids, features, positions)
    cache = LayerCache(head, 2, 32, temperature)
    got_g, got_logits = [], []
    for lo, hi in ((0, 4), (4, 5), (5, 9)):
        cache.begin()
        real = torch.ones(2, hi - lo, dtype=torch.bool)
        out = cache.forward(
            ids[:, lo:hi], causal(real), positions[:, lo:hi], hi - lo, real, features=features[:, lo:hi]
        )
        cache.commit(torch.arange(hi - lo).expand(2, -1), torch.full((2,), hi - lo))
        got_g.append(out.hidden)
        got_logits.append(out.logits)
    assert torch.allclose(torch.cat(got_g, 1), g, atol=1e-5)
    logits = torch.cat(got_logits, 1)
    want = small if temperature in (0.0, 1.0) else small / temperature
    assert torch.allclose(logits[..., vocab], want, rtol=1e-5, atol=1e-4 * float(want.abs().max()))
    off = torch.ones(16, dtype=torch.bool)
    off[vocab] = False
    assert bool((logits[..., off] == FILL).all())
    assert bool((torch.softmax(logits, -1)[..., off] == 0).all())  # q is exactly 0 off the draft vocabulary


@pytest.mark.parametrize("compile", [False, "none"])
@pytest.mark.parametrize("tree", list(TREES))
def test_greedy_decoding_with_the_head_gives_the_targets_greedy_tokens(compile, tree):
    target = tiny_lm(0, vocab=24)
    head = _trained_like(FeatureHead.from_target(target, torch.arange(0, 24, 2)), seed=1)
    ar = mdsd.TreeDecoder(target, None, None, temperature=0.0).generate_batch(PROMPTS, 12)
    dec = mdsd.TreeDecoder(target, head, TREES[tree], "rrs", temperature=0.0, compile=compile)
    outs = dec.generate_batch(PROMPTS, 12)
    assert [o.tokens.tolist() for o in outs] == [o.tokens.tolist() for o in ar]
    assert all(o.draft_forwards > 0 for o in outs)


def test_a_head_that_copies_the_target_is_accepted_whole():
    """A head whose output is the target's next feature makes every drafted token the target's greedy
    token: the target's own last layer, fed the target's features, at a one-layer target."""
    target = tiny_lm(0, vocab=24)
    target.model.layers = target.model.layers[:1]  # a one-layer target: the head can be exactly it
    target.config.num_hidden_layers = 1
    head = FeatureHead.from_target(target, torch.arange(24))
    H = target.config.hidden_size
    with torch.no_grad():  # the head reads e(x_t) only: its layer computes the target's pre-norm state
        head.fc.weight.zero_()
        head.fc.weight[:, :H] = torch.eye(H)
    # the target's output is norm(layer(e(x))) and the head's out(layer(e(x))): equal up to the final norm,
    # whose argmax may differ; so compare against a target without a final norm
    target.model.norm = torch.nn.Identity()
    for compile in (False, "none"):
        dec = mdsd.TreeDecoder(target, head, mdsd.Tree.chain(4), "rrs", temperature=0.0, compile=compile)
        out = dec.generate(torch.tensor([[3, 4, 5]]), 20)
        # the prompt's read emits one token (mdsd.tree.prefill); every later step accepts all four drafts
        assert out.tokens_per_step[0] == 1 and set(out.tokens_per_step[1:-1]) == {5}, out.tokens_per_step


@pytest.mark.parametrize("layers", [(), (0, 1)])
@pytest.mark.parametrize("compile", [False, "none"])
def test_decoding_reads_the_features_the_head_was_trained_on(compile, layers):
    """At T = 0 with one draft a step, the decoder accepts a step's draft exactly where the head's training
    forward (each token with the target's feature of the position before it, as the features files store
    them: its final hidden state, or the outputs of the head's feature layers from transformers'
    ``hidden_states``) agrees with the target's greedy token: the decoder pairs tokens and features as
    training does."""
    target = tiny_lm(0, vocab=24, layers=3)
    head = FeatureHead.from_target(target, torch.arange(24), feature_layers=layers)
    noise = 0.5 if layers else 0.05  # a head that agrees with the target at some positions and not at others
    with torch.no_grad():
        for param in head.parameters():
            param.add_(noise * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    prompt = [3, 4, 5, 6]
    dec = mdsd.TreeDecoder(target, head, mdsd.Tree.chain(1), "single", temperature=0.0, compile=compile)
    out = dec.generate(torch.tensor([prompt]), 30)
    ids = torch.tensor([prompt + out.tokens.tolist()])
    with torch.no_grad():
        read = target.get_decoder()(input_ids=ids, output_hidden_states=True)
        # hidden_states[i + 1]: layer i's output (the last entry is the final norm's, so the last layer's
        # output is not read here: 3 layers, features of the first two)
        f = torch.cat([read.hidden_states[i + 1] for i in layers], -1) if layers else read.last_hidden_state
        _, logits = head(
            ids, torch.cat([torch.zeros_like(f[:, :1]), f[:, :-1]], 1), torch.arange(ids.shape[1])[None]
        )
        agree = (head.vocab[logits[0].argmax(-1)] == target(ids).logits[0].argmax(-1)).tolist()
    expected, at = [0], len(prompt)  # the prompt's read emits the first token; then each step drafts one
    for _ in out.accepted_per_step[1:]:
        expected.append(int(agree[at]))
        at += 1 + expected[-1]
    assert list(out.accepted_per_step) == expected
    assert 0 < sum(expected) < len(expected) - 1  # both outcomes occur


@pytest.mark.parametrize("compile", [False, "none"])
@pytest.mark.parametrize("tree", ["binary", "dynamic"])
def test_a_head_reading_several_layers_decodes_losslessly(compile, tree):
    """EAGLE-3's features (the outputs of target layers 0 and 2 of 3, fused): greedy decoding gives the
    target's greedy tokens on both paths, and the decoder hands the head features of width 2H."""
    target = tiny_lm(0, vocab=24, layers=3)
    head = _trained_like(FeatureHead.from_target(target, torch.arange(0, 24, 2), feature_layers=(0, 2)), 1)
    seen = []
    head.fuse.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[-1]))
    ar = mdsd.TreeDecoder(target, None, None, temperature=0.0).generate_batch(PROMPTS, 12)
    dec = mdsd.TreeDecoder(target, head, TREES[tree], "rrs", temperature=0.0, compile=compile)
    outs = dec.generate_batch(PROMPTS, 12)
    assert [o.tokens.tolist() for o in outs] == [o.tokens.tolist() for o in ar]
    assert seen and set(seen) == {2 * target.config.hidden_size}


def test_feature_layers_are_checked_saved_and_fused():
    """Feature layers: none, or two or more distinct indices of the target's layers (else one clear line);
    a fresh head's fuse map passes the last layer through and a width-H feature (its own g) is not fused;
    they survive save and load, and a head.json without them reads as none."""
    target = tiny_lm(0, vocab=16, layers=3)
    for bad in ((1,), (0, 0), (-1, 2), (True, 1)):
        with pytest.raises(ValueError, match="feature layers"):
            FeatureHead.from_target(target, torch.arange(16), feature_layers=bad)
    with pytest.raises(ValueError, match=r"layers \[0, 3\]; this target has 3"):
        FeatureHead.from_target(target, torch.arange(16), feature_layers=(0, 3))
    head = FeatureHead.from_target(target, torch.arange(16), feature_layers=(2, 0))
    H = target.config.hidden_size
    ids, a, b = torch.tensor([[1, 2]]), torch.randn(1, 2, H), torch.randn(1, 2, H)
    assert torch.allclose(head.inputs(ids, torch.cat([a, b], -1)), b)  # the last listed layer, layer 0
    assert torch.equal(head.read(a), a)
    head = _trained_like(head, 3)
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        head.save(folder)
        again = FeatureHead.load(folder, target)
        assert again.feature_layers == (2, 0) and torch.equal(again.fuse.weight, head.fuse.weight)
        plain = FeatureHead.from_target(target, torch.arange(16))
        plain.save(folder)
        config = json.loads((Path(folder) / "head.json").read_text())
        config.pop("feature_layers")
        (Path(folder) / "head.json").write_text(json.dumps(config))
        assert (
            FeatureHead.load(folder, target).feature_layers == ()
            and FeatureHead.load(folder, target).fuse is None
        )
    with pytest.raises(ValueError, match="this target has 2"):
        from mdsd.drafters.head import check_target

        check_target(head.head_config, tiny_lm(0, vocab=16))


@pytest.mark.slow
@pytest.mark.parametrize("compile", [False, "none"])
@pytest.mark.parametrize("verifier", ["rrs", "spechub", "optimal"])
def test_sampling_with_the_head_keeps_the_targets_law(compile, verifier):
    """The first two tokens after a prompt, decoded with the head on a binary tree, follow the target's law
    (chi-square at alpha = 1e-3 over the 64 pairs of a 8-token vocabulary, 3,000 decodes)."""
    target = tiny_lm(5, vocab=8, sharpness=1.5)
    head = _trained_like(FeatureHead.from_target(target, torch.tensor([0, 2, 3, 5, 6])), seed=4)
    prompt = [1, 4]
    with torch.no_grad():
        first = torch.softmax(target(torch.tensor([prompt])).logits[0, -1] / 0.8, -1)
        second = torch.softmax(target(torch.tensor([[*prompt, t] for t in range(8)])).logits[:, -1] / 0.8, -1)
    law = (first[:, None] * second).flatten().double().numpy()
    law /= law.sum()
    dec = mdsd.TreeDecoder(target, head, mdsd.Tree.kary([2, 2]), verifier, temperature=0.8, compile=compile)
    counts = np.zeros(64)
    gen = torch.Generator().manual_seed(11)
    for _ in range(30):
        for o in dec.generate_batch([prompt] * 100, 2, gen):
            a, b = o.tokens.tolist()
            counts[8 * a + b] += 1
    keep = law * counts.sum() >= 5  # the rare pairs pooled into one cell, where there are any
    expected = np.append(law[keep], law[~keep].sum()) * counts.sum() if (~keep).any() else law * counts.sum()
    observed = np.append(counts[keep], counts[~keep].sum()) if (~keep).any() else counts
    assert chisquare(observed, expected).pvalue > 1e-3


def test_save_and_load_round_trip_and_refusals(tmp_path):
    target = tiny_lm(0, vocab=16)
    head = _trained_like(FeatureHead.from_target(target, torch.tensor([1, 4, 7])), seed=5)
    head.save(tmp_path / "h")
    again = FeatureHead.load(tmp_path / "h", target)
    for (name, a), (_, b) in zip(head.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert torch.equal(again.vocab, head.vocab) and torch.equal(again.out, target.lm_head.weight[[1, 4, 7]])
    wider = tiny_lm(0, vocab=24)
    with pytest.raises(ValueError, match="vocabulary 16; this target's is 24"):
        FeatureHead.load(tmp_path / "h", wider)
    with pytest.raises(ValueError, match="model family qwen2; this target's is llama"):
        FeatureHead.load(tmp_path / "h", tiny_lm(0, vocab=16, family="llama"))
    head.save(tmp_path / "d")
    described = {"name": "t", "weights_sha256": "a" * 64}
    FeatureHead.from_target(target, torch.tensor([1]), describe=described).save(tmp_path / "d")
    with pytest.raises(ValueError, match="train a head for it"):
        FeatureHead.load(tmp_path / "d", target, target_weights="b" * 64)
    with pytest.raises(ValueError, match="draft vocabulary is empty"):
        FeatureHead.from_target(target, torch.tensor([], dtype=torch.long))
    widest = target.config.intermediate_size
    for bad in (widest + 1, -1):  # wider than the layer it starts from, or no MLP
        with pytest.raises(ValueError, match=f"--intermediate-size: .*1..{widest} here; got {bad}"):
            FeatureHead.from_target(target, torch.tensor([1]), intermediate_size=bad)
    (tmp_path / "h" / "head.safetensors").write_bytes(b"\0" * 40)
    with pytest.raises(ValueError, match="not a whole weights file"):
        FeatureHead.load(tmp_path / "h", target)
    with pytest.raises(FileNotFoundError, match="no head"):
        FeatureHead.load(tmp_path / "none", target)


def test_mdsd_decode_takes_a_head_as_its_draft(tmp_path, capsys):
    from tiny_lms import word_pair

    from mdsd.cli import main

    target_dir, _ = word_pair(tmp_path)
    target = mdsd.hf.load_model(target_dir)
    head = _trained_like(FeatureHead.from_target(target, torch.arange(0, 12)), seed=3)
    head.save(tmp_path / "head")
    base = ["decode", "--target", str(target_dir), "--temperature", "0", "--prompt", "the cat sat on"]
    assert main([*base, "--tree", "none", "--max-new-tokens", "8"]) == 0
    plain = capsys.readouterr().out.split("\n")[1]
    for compile in ("false", "none"):
        args = [*base, "--draft", str(tmp_path / "head"), "--tree", "binary:2", "--max-new-tokens", "8"]
        assert main([*args, "--compile", compile]) == 0
        out = capsys.readouterr().out
        assert out.split("\n")[1] == plain and "binary:2: 8 tokens from" in out
    assert main([*base, "--draft", str(tmp_path / "head"), "--compare"]) == 2
    assert "needs a draft model: --draft is an mdsd drafter" in capsys.readouterr().err


def test_a_heads_cost_is_its_layer_input_map_and_output_rows():
    from mdsd.costs import forward_cost

    target = tiny_lm(0, vocab=24)
    head = FeatureHead.from_target(target, torch.arange(10), intermediate_size=16)
    H, s = target.config.hidden_size, head.head_config.layer
    layer = H * s.head_dim * (2 * s.heads + 2 * s.kv_heads) + 3 * H * 16
    want = 2 * H * H + layer + 10 * H
    assert forward_cost(head).multiply_adds == want and forward_cost(head).bytes == 4 * want
    full = sum(m.weight.numel() for m in target.modules() if isinstance(m, torch.nn.Linear))
    assert forward_cost(target).multiply_adds == full
