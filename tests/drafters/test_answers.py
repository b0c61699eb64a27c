"""Exact acceptance along the target's answers: the laws' acceptances against enumeration and the LP, and
greedy chains computed from agreement against the decoder's own steps, for every kind of drafter."""

import numpy as np
import pytest
import torch
from tiny_lms import perturbed, tiny_lm

import mdsd
from mdsd.drafters.answers import greedy_chain, position_acceptance, teacher_forced_logits
from mdsd.drafters.head import FeatureHead
from mdsd.drafters.small import SmallDrafter


def _drafter(kind: str, seed: int):
    """(target, drafter) of one kind: a perturbed draft model, a small drafter with moved weights, or a
    feature head made to compute a one-layer target exactly (its fc reading e(x_t) alone), then moved."""
    target = tiny_lm(0, vocab=24)
    gen = torch.Generator().manual_seed(seed)
    if kind == "model":
        return target, perturbed(target, 0.3, seed=seed)
    if kind == "small":
        drafter, scale = SmallDrafter.fresh(target, torch.arange(24), 16, 3, 4, 2, 24, seed=seed), 0.05
    else:
        target.model.layers = target.model.layers[:1]
        target.config.num_hidden_layers = 1
        target.model.norm = torch.nn.Identity()
        drafter, scale = FeatureHead.from_target(target, torch.arange(24)), 0.1
        H = target.config.hidden_size
        with torch.no_grad():
            drafter.fc.weight.zero_()
            drafter.fc.weight[:, :H] = torch.eye(H)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
        if kind == "small":
            drafter.out.copy_(3 * drafter.out / drafter.out.norm(dim=1, keepdim=True))
    return target, drafter


@pytest.mark.parametrize("kind, depth", [("model", 1), ("model", 3), ("small", 1), ("small", 3), ("head", 1)])
def test_greedy_chains_from_agreement_are_the_decoders_steps(kind, depth):
    """At T = 0, the tokens per step that greedy_chain computes from teacher-forced agreement along the
    target's greedy answer are those the decoder emits, step by step, for every kind of drafter (a feature
    head at depth 1: deeper, it drafts from its own features)."""
    prompt = [5, 6, 7]
    for seed in range(20):  # the first drafter of this kind that agrees with the target now and then
        target, drafter = _drafter(kind, seed)
        dec = mdsd.TreeDecoder(target, drafter, mdsd.Tree.chain(depth), "single", temperature=0.0)
        out = dec.generate(torch.tensor([prompt]), 40)
        ids = torch.tensor(prompt + out.tokens.tolist())
        p, (q,) = teacher_forced_logits(target, [drafter], ids, len(prompt))
        agree = position_acceptance(p, q, 0.0)["agree"]
        if 0 < agree[1:].sum() < agree.size - 1:
            break
    assert 0 < agree[1:].sum() < agree.size - 1, "no drafter of 20 both agrees and disagrees"
    assert torch.equal(p.argmax(-1), torch.tensor(out.tokens.tolist()))  # the target's greedy answer
    want = [1, *greedy_chain(agree[1:], depth)] if kind == "head" else greedy_chain(agree, depth)
    assert want == list(out.tokens_per_step)


def test_one_target_forward_serves_every_drafter():
    """Several drafters read in one call get the logits each gets alone."""
    target, model = _drafter("model", 0)
    _, small = _drafter("small", 1)
    ids = torch.tensor([5, 6, 7, 1, 9, 2])
    p, qs = teacher_forced_logits(target, [model, small], ids, 3)
    for drafter, q in zip((model, small), qs, strict=True):
        alone, (mine,) = teacher_forced_logits(target, [drafter], ids, 3)
        assert torch.equal(p, alone) and torch.equal(q, mine) and q.shape == (3, 24)
    assert not torch.equal(qs[0], qs[1])


def test_the_target_runs_once_and_its_logits_are_its_forwards():
    """With a model, a small drafter and a feature head, the target's decoder runs once, and p is the
    target's own forward's logits at the answer's positions."""
    target, head = _drafter("head", 0)
    _, model = _drafter("model", 1)
    ids = torch.tensor([5, 6, 7, 1, 9, 2])
    calls = []
    hook = target.get_decoder().register_forward_hook(lambda *_: calls.append(1))
    try:
        p, qs = teacher_forced_logits(target, [model, head], ids, 3)
    finally:
        hook.remove()
    assert len(calls) == 1 and len(qs) == 2
    with torch.no_grad():
        want = target(ids[None]).logits[0, 2:-1].float()
    assert torch.allclose(p, want, atol=1e-5)


@pytest.mark.parametrize("temperature", [1e-3, 0.6, 1.0, 2.5])
def test_acceptances_are_the_exact_optima(temperature):
    """Σ min(p, q) and α*_k of the softmaxed logits, against a direct sum and the OTM LP on a small
    vocabulary, including extreme logits (one-hot rows in float32, ties, p = q)."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(6, 5, generator=gen) * 4
    w = torch.randn(6, 5, generator=gen) * 4
    z[1] = torch.tensor([0.0, -1e4, -1e4, -1e4, -1e4])  # one-hot in float32
    w[2] = z[2]  # p = q
    w[3] = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0])  # uniform: every rank tied
    got = position_acceptance(z, w, temperature, ks=(2, 3))
    p = torch.softmax(z.double() / temperature, -1).numpy()
    q = torch.softmax(w.double() / temperature, -1).numpy()
    assert np.allclose(got["acceptance"], np.minimum(p, q).sum(1), atol=1e-12)
    for k in (2, 3):
        want = [mdsd.optimal_acceptance(p[r], q[r], mdsd.IID(k), method="lp") for r in range(6)]
        assert np.allclose(got[f"alpha_{k}"], want, atol=1e-7)
    assert got["acceptance"][2] == pytest.approx(1.0)


def test_zero_temperature_is_agreement_and_bad_inputs_are_refused():
    z = torch.tensor([[1.0, 3.0, 2.0], [5.0, 5.0, 0.0]])
    w = torch.tensor([[0.0, 9.0, 0.0], [0.0, 1.0, 0.0]])
    got = position_acceptance(z, w, 0.0)
    assert got["agree"].tolist() == [True, False] and got["alpha_4"].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="temperature must be finite"):
        position_acceptance(z, w, -1.0)
    with pytest.raises(ValueError, match="p_logits and q_logits must be"):
        position_acceptance(z, w[:1], 1.0)
    with pytest.raises(ValueError, match="depth must be a positive int"):
        greedy_chain([True], 0)
    target, model = _drafter("model", 0)
    with pytest.raises(ValueError, match="start must lie in"):
        teacher_forced_logits(target, [model], torch.tensor([1, 2]), 2)
    with pytest.raises(ValueError, match="vocabulary"):
        teacher_forced_logits(target, [model, tiny_lm(0, vocab=16)], torch.tensor([1, 2, 3]), 1)


def test_a_head_reads_the_features_its_training_data_holds(tmp_path):
    """A head reading the final state and one reading layers 0 and 1 fused get, along an answer, the logits
    of their training forward on that sequence's features file (mdsd drafters features), in one call."""
    from mdsd.drafters.features import features_path, load_features, write_features

    target = tiny_lm(0, vocab=24, sharpness=4.0, layers=3)
    ids = torch.tensor([5, 6, 7, 1, 9, 2, 2, 11])
    heads, qs_from_files = [], []
    for layers in ((), (0, 1)):
        head = FeatureHead.from_target(target, torch.arange(24), feature_layers=layers)
        with torch.no_grad():
            for param in head.parameters():
                param.add_(
                    0.1 * torch.randn(param.shape, generator=torch.Generator().manual_seed(len(layers)))
                )
        path = write_features(
            features_path(tmp_path, len(layers)), target, [ids.tolist()], [3], 4, feature_layers=layers
        )
        hidden = load_features(path)["hidden"].float()[None]
        shifted = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], 1)
        with torch.no_grad():
            g, _ = head(ids[None], shifted, torch.arange(ids.numel())[None])
        heads.append(head)
        qs_from_files.append(head.draft_logits(g[0, 2:-1], 1.0))
    _, qs = teacher_forced_logits(target, heads, ids, 3)
    for q, want in zip(qs, qs_from_files, strict=True):
        assert torch.allclose(q, want, atol=0.05)  # the files keep features in bfloat16
    assert not torch.allclose(qs[0], qs[1], atol=0.05)
