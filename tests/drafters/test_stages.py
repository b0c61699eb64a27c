"""A small drafter's two stages end to end on a tiny target: self-distilled data, pretraining, finetuning
(F and P→F), the learning curve's exactness, resuming to the same drafter, and the refusals."""

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
from tiny_lms import WORDS, word_pair

import mdsd
from mdsd.data import training
from mdsd.drafters import distill, stages
from mdsd.drafters.small import SmallDrafter
from mdsd.drafters.stages import CHECKPOINT, TRAINING, StageConfig, TokenData, train_stage
from mdsd.hf import load_model, load_tokenizer

SMALL = dict(
    hidden_size=16,
    layers=2,
    heads=4,
    kv_heads=2,
    intermediate_size=24,
    draft_vocab=10,
    lr=3e-3,
    warmup=5,
    steps=24,
    batch_tokens=64,
    row_tokens=32,
    held_out=0.25,
    eval_every=10,
    eval_tokens=64,
    checkpoint_every=8,
)
TINY = training.TrainingSet(requirements=(), licence="test", instruction="{text}", kind="chat")


def _texts(n: int, seed: int) -> list[str]:
    """Prompts of the fake training set: strings of the word pair's words, each starting with one that its
    tokenizer (loaded as a byte-level one under transformers 5) does not map to nothing."""
    rng = np.random.default_rng(seed)
    return [" ".join(["cat", *rng.choice(WORDS[1:], size=int(rng.integers(1, 5)))]) for _ in range(n)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny word-level target, and its own answers (T = 0 and 1) to 32 prompts of a fake training set."""
    root = tmp_path_factory.mktemp("stages")
    target_dir, _ = word_pair(root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(training.TRAINING_SETS, "tiny-train", TINY)
        patch.setattr(distill, "training_texts", lambda config: {"tiny-train": _texts(40, 0)})
        config = distill.DistillConfig(
            sets=("tiny-train",), prompts=32, temperatures=(0.0, 1.0), max_new_tokens=10, shard_prompts=8
        )
        distill.distill(config, target_dir, root / "distilled", progress=False)
    return target_dir, root / "distilled"


@pytest.fixture
def tiny_set(monkeypatch):
    monkeypatch.setitem(training.TRAINING_SETS, "tiny-train", TINY)
    monkeypatch.setattr(distill, "training_texts", lambda config: {"tiny-train": _texts(40, 0)})


def _generic(target_dir, n=60):
    """Pretraining data, trained whole: runs of consecutive words from random starts (each next token is the
    one after the last, so there is something to learn: random strings left the loss at ln V, where noise
    could raise it)."""
    rng = np.random.default_rng(1)
    runs = [(int(rng.integers(0, len(WORDS) - 1)), int(rng.integers(3, 20))) for _ in range(n)]
    rows = [[(start + i) % (len(WORDS) - 1) + 1 for i in range(size)] for start, size in runs]
    return rows, [0] * len(rows), {"tiny": "generic"}


def test_finetuning_data_are_the_prompts_and_the_targets_answers(setup, tiny_set, tmp_path):
    target_dir, folder = setup
    rows, starts, source = stages.finetune_data(folder, load_tokenizer(target_dir))
    shards = [distill.load_shard(distill.shard_path(folder, s)) for s in range(4)]
    answers = [a.tolist() for shard in shards for a in shard.answers()]
    assert len(rows) == len(starts) == 32 and source["shards"] == [0, 1, 2, 3]
    assert [r[s:] for r, s in zip(rows, starts, strict=True)] == answers
    tokenizer = load_tokenizer(target_dir)
    texts = _texts(40, 0)
    plan = distill._plan(
        distill.DistillConfig(**{**source["config"], "sets": ("tiny-train",), "temperatures": (0.0, 1.0)}),
        {"tiny-train": texts},
    )
    assert [r[:s] for r, s in zip(rows, starts, strict=True)] == [tokenizer.encode(texts[i]) for _, i in plan]
    first, _, part = stages.finetune_data(folder, tokenizer, 2)  # a learning curve's point: a prefix
    assert part["shards"] == [0, 1] and first == rows[: len(first)] and 0 < len(first) < len(rows)
    holed = shutil.copytree(folder, tmp_path / "holed")
    distill.shard_path(holed, 1).unlink()
    with pytest.raises(ValueError, match=r"--shards 2: .* lacks shard\(s\) \[1\]"):
        stages.finetune_data(holed, tokenizer, 2)
    for bad in (-1, 5, True):
        with pytest.raises(ValueError, match="--shards must be an int in"):
            stages.finetune_data(folder, tokenizer, bad)


def test_a_distilled_run_resumes_under_its_own_config_regression(setup, tiny_set, tmp_path):
    """Bug: a rerun of `mdsd drafters distill` with the same flags was refused as "a run of another config"
    (the manifest read back holds lists where the config holds tuples). A lost shard comes back the same."""
    target_dir, folder = setup
    again = shutil.copytree(folder, tmp_path / "again")
    distill.shard_path(again, 2).unlink()
    config = distill.DistillConfig(
        sets=("tiny-train",), prompts=32, temperatures=(0.0, 1.0), max_new_tokens=10, shard_prompts=8
    )
    distill.distill(config, target_dir, again, progress=False)
    redone, first = (distill.load_shard(distill.shard_path(f, 2)) for f in (again, folder))
    assert [a.tolist() for a in redone.answers()] == [a.tolist() for a in first.answers()]
    with pytest.raises(ValueError, match="holds a run of another config"):
        distill.distill(dataclasses.replace(config, max_new_tokens=9), target_dir, again, progress=False)


def test_packing_and_the_validation_are_exact(setup):
    """The validation's loss and top-1 agreement, computed over packed rows, equal those of each validation
    sequence read alone; a token outside the draft vocabulary counts as a miss."""
    target_dir, _ = setup
    rows, starts, _ = _generic(target_dir)
    starts = [min(2, len(r) - 1) for r in rows]
    config = StageConfig(**SMALL)
    data = TokenData.of(rows, starts, config.held_out, config.seed, config.row_tokens)
    target = load_model(target_dir)
    drafter = SmallDrafter.fresh(target, torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]), 16, 2, 4, 2, 24, seed=3)
    slot = torch.full((len(WORDS),), -1, dtype=torch.long)
    slot[drafter.vocab] = torch.arange(8)
    got = stages.evaluate(drafter, data, slot, StageConfig(**{**SMALL, "eval_tokens": 10**6}))
    loss, hits, inside, trained = 0.0, 0, 0, 0
    with torch.no_grad():
        for i in np.flatnonzero(data.held):
            seq = torch.tensor(data.sequence(i), dtype=torch.long)
            logits = drafter(seq[None], torch.arange(seq.numel())[None])[0]
            for j in range(int(data.starts[i]), seq.numel()):
                trained += 1
                k = int(slot[seq[j]])
                if k >= 0:
                    inside += 1
                    loss -= float(torch.log_softmax(logits[j - 1], -1)[k])
                    hits += int(int(logits[j - 1].argmax()) == k)
    assert got["validation_tokens"] == trained and 0 < inside < trained
    assert got["loss"] == pytest.approx(loss / inside, rel=1e-5)
    assert got["top1"] == pytest.approx(hits / trained)
    assert got["outside_vocab"] == pytest.approx(1 - inside / trained)


def test_pretraining_then_finetuning_trains_drafters_that_decode_losslessly(setup, tiny_set, tmp_path):
    target_dir, folder = setup
    config = StageConfig(**SMALL)
    train_stage("pretrain", config, _generic(target_dir), target_dir, tmp_path / "p", progress=False)
    log = json.loads((tmp_path / "p" / TRAINING).read_text())
    steps = [point["step"] for point in log["curve"]]
    assert steps == [0, 1, 2, 4, 8, 10, 16, 20, 24]  # powers of two and every eval_every: a log axis
    tokens = [point["tokens"] for point in log["curve"]]  # trained tokens seen (regression: the validation's)
    assert tokens[0] == 0 and all(b > a for a, b in zip(tokens, tokens[1:], strict=False))
    assert log["curve"][-1]["loss"] < log["curve"][0]["loss"]
    data = stages.finetune_data(folder, load_tokenizer(target_dir))
    for name, init in (("f", None), ("pf", tmp_path / "p")):
        train_stage("finetune", config, data, target_dir, tmp_path / name, init=init, progress=False)
        curve = json.loads((tmp_path / name / TRAINING).read_text())["curve"]
        assert curve[-1]["loss"] < curve[0]["loss"]
    target = load_model(target_dir)
    pretrained, drafter = (
        SmallDrafter.load(tmp_path / "p", target),
        SmallDrafter.load(tmp_path / "pf", target),
    )
    wider = StageConfig(**{**SMALL, "draft_vocab": 11, "steps": 2})  # P's 10 rows and the task's next token
    train_stage("finetune", wider, data, target_dir, tmp_path / "pf11", init=tmp_path / "p", progress=False)
    grown = SmallDrafter.load(tmp_path / "pf11", target)
    assert grown.vocab.numel() == 11 and set(pretrained.vocab.tolist()) < set(grown.vocab.tolist())
    assert torch.equal(drafter.vocab, pretrained.vocab)  # P→F keeps P's draft vocabulary, and starts from P:
    tokens = TokenData.of(*data[:2], config.held_out, config.seed, config.row_tokens)
    slot = torch.full((len(WORDS),), -1, dtype=torch.long)
    slot[pretrained.vocab] = torch.arange(pretrained.vocab.numel())
    start = json.loads((tmp_path / "pf" / TRAINING).read_text())["curve"][0]
    assert start["loss"] == pytest.approx(stages.evaluate(pretrained, tokens, slot, config)["loss"], rel=1e-6)
    prompts = [[1, 2, 3], [4, 5]]
    ar = mdsd.TreeDecoder(target, None, None, temperature=0.0).generate_batch(prompts, 10)
    for compile in (False, "none"):
        dec = mdsd.TreeDecoder(
            target, drafter, mdsd.Tree.chain(3), "single", temperature=0.0, compile=compile
        )
        assert [o.tokens.tolist() for o in dec.generate_batch(prompts, 10)] == [o.tokens.tolist() for o in ar]


def test_a_killed_run_resumes_to_the_same_drafter(setup, tmp_path, monkeypatch):
    target_dir, _ = setup
    config, data = StageConfig(**SMALL), _generic(target_dir)
    train_stage("pretrain", config, data, target_dir, tmp_path / "whole", progress=False)
    calls = {"n": 0}
    pack = stages._pack

    def dies(*args):
        calls["n"] += 1
        if calls["n"] == 25:  # evaluations pack too: this is past the checkpoint at step 16
            raise KeyboardInterrupt
        return pack(*args)

    monkeypatch.setattr(stages, "_pack", dies)
    with pytest.raises(KeyboardInterrupt):
        train_stage("pretrain", config, data, target_dir, tmp_path / "cut", progress=False)
    monkeypatch.setattr(stages, "_pack", pack)
    assert torch.load(tmp_path / "cut" / CHECKPOINT, weights_only=False)["step"] == 16
    with pytest.raises(ValueError, match="pass --resume"):
        train_stage("pretrain", config, data, target_dir, tmp_path / "cut", progress=False)
    with pytest.raises(ValueError, match="another stage, config, data or target"):
        other = StageConfig(**{**SMALL, "lr": 1e-2})
        train_stage("pretrain", other, data, target_dir, tmp_path / "cut", resume=True, progress=False)
    train_stage("pretrain", config, data, target_dir, tmp_path / "cut", resume=True, progress=False)
    target = load_model(target_dir)
    whole, cut = (SmallDrafter.load(tmp_path / d, target) for d in ("whole", "cut"))
    for (name, a), (_, b) in zip(whole.state_dict().items(), cut.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    curves = [json.loads((tmp_path / d / TRAINING).read_text())["curve"] for d in ("whole", "cut")]
    assert curves[0] == curves[1]


def test_corpus_features_keep_the_flags_caps_and_grow_regression(setup, tiny_set, tmp_path, monkeypatch):
    """`mdsd drafters features --corpus` cuts prompts and references at its flags (it used the defaults
    whatever the flags said), records them, grows by a larger --sequences and refuses other caps."""
    from mdsd.cli import main
    from mdsd.drafters.features import features_path, load_features

    items = [(text, "cat " + text) for text in _texts(70, 2)]
    monkeypatch.setattr(training, "load_training_items", lambda name, cache=None: items)
    out = tmp_path / "features"
    base = ["drafters", "features", "--corpus", "tiny-train", "--target", str(setup[0]), "--out", str(out)]
    caps = ["--max-prompt-tokens", "5", "--max-answer-tokens", "3", "--top-k", "4", "--dtype", "float32"]
    assert main([*base, *caps, "--sequences", "40"]) == 0
    record = json.loads((out / "features.json").read_text())["source"]["corpus"]
    assert (record["max_prompt_tokens"], record["max_answer_tokens"], record["sequences"]) == (5, 3, 40)
    first = features_path(out, 0).read_bytes()
    f = load_features(features_path(out, 0))
    starts, answers = f["offsets"].tolist(), f["answers"].tolist()
    assert (
        len(answers) == 32
        and all(  # prompts at most 5 tokens, answers at most 3
            a <= 5 and stop - start - a <= 3
            for a, start, stop in zip(answers, starts, starts[1:], strict=False)
        )
    )
    assert load_features(features_path(out, 1))["answers"].numel() == 8
    assert (
        main([*base, *caps, "--sequences", "70"]) == 0
    )  # grows: the whole shard stays, the partial one is redone
    assert features_path(out, 0).read_bytes() == first
    assert [load_features(features_path(out, s))["answers"].numel() for s in range(3)] == [32, 32, 6]
    grown = json.loads((out / "features.json").read_text())
    assert grown["source"]["corpus"]["sequences"] == 70 and len(grown["grown_by"]) == 1
    assert main([*base, "--max-prompt-tokens", "6", "--max-answer-tokens", "3", "--sequences", "70"]) == 2
    grown_shard = features_path(out, 2).read_bytes()
    assert main([*base, *caps, "--sequences", "71"]) == 2  # the set holds 70 items with a reference
    assert json.loads((out / "features.json").read_text()) == grown  # refused before anything changed
    assert features_path(out, 2).read_bytes() == grown_shard


def test_bad_inputs_are_refused(setup, tiny_set, tmp_path):
    target_dir, folder = setup
    config, data = StageConfig(**SMALL), _generic(target_dir)
    train_stage("pretrain", config, data, target_dir, tmp_path / "p", progress=False)
    wider = StageConfig(**{**SMALL, "hidden_size": 32})
    tuned = stages.finetune_data(folder, load_tokenizer(target_dir))
    with pytest.raises(ValueError, match="--init: .* another architecture"):
        train_stage("finetune", wider, tuned, target_dir, tmp_path / "f", init=tmp_path / "p", progress=False)
    fewer = StageConfig(**{**SMALL, "draft_vocab": 5})
    with pytest.raises(ValueError, match="a draft vocabulary as large or larger"):
        train_stage("finetune", fewer, tuned, target_dir, tmp_path / "f", init=tmp_path / "p", progress=False)
    with pytest.raises(ValueError, match="no checkpoint to resume"):
        train_stage("pretrain", config, data, target_dir, tmp_path / "x", resume=True, progress=False)
    with pytest.raises(ValueError, match="stage must be one of"):
        train_stage("warmup", config, data, target_dir, tmp_path / "x", progress=False)
    with pytest.raises(FileNotFoundError, match="holds no distilled run"):
        stages.finetune_data(tmp_path, load_tokenizer(target_dir))
    other_dir = tmp_path / "other"
    word_pair(other_dir)
    with torch.no_grad():
        model = load_model(other_dir / "target")
        model.lm_head.weight.mul_(2)
        model.save_pretrained(other_dir / "target")
    with pytest.raises(ValueError, match="written by another target"):
        train_stage("finetune", config, tuned, other_dir / "target", tmp_path / "y", progress=False)
    with pytest.raises(ValueError, match="leave no validation sequence"):
        TokenData.of([[1, 2]], [0], 0.5, 0, 8)
    with pytest.raises(ValueError, match="row_tokens must be at least 2"):
        StageConfig(row_tokens=1)
    with pytest.raises(ValueError, match="draft_vocab must be a positive int"):
        StageConfig(draft_vocab=0)


def test_an_evaluation_set_that_overlaps_the_training_data_is_refused(setup, tiny_set, tmp_path, monkeypatch):
    """The sets a drafter read (its own and its --init's) are checked against the evaluation sets."""
    import importlib

    prompts = importlib.import_module("mdsd.data.prompts")
    target_dir, folder = setup
    config = StageConfig(**{**SMALL, "steps": 2})
    data = stages.finetune_data(folder, load_tokenizer(target_dir))
    train_stage("finetune", config, data, target_dir, tmp_path / "f", progress=False)
    assert stages.training_sets(tmp_path / "f") == ("tiny-train",)
    trained = ["cat sat", "please say: the quick brown fox jumps over lazy dogs, then stop"]
    monkeypatch.setattr(training, "load_training_texts", lambda name, cache=None: trained)
    held = {
        "clean": ["nothing of the kind here at all"],
        "leaky": ["the quick brown fox jumps over lazy dogs"],
    }
    monkeypatch.setattr(prompts, "load_texts", lambda name, cache=None: held[name])
    stages.check_heldout(tmp_path / "f", ("clean",))
    with pytest.raises(
        ValueError, match=r"training item tiny-train\[1\] shares text with held-out item leaky\[0\]"
    ):
        stages.check_heldout(tmp_path / "f", ("clean", "leaky"))
