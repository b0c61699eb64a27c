"""Training a head end to end on a tiny target: features, each loss, the learning curve, resuming exactly,
two processes under torchrun, and the refusals."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_lms import tiny_lm

import mdsd
from mdsd.drafters.features import (
    FEATURES,
    _check_same,
    corpus_order,
    features_path,
    load_features,
    write_features,
)
from mdsd.drafters.head import FeatureHead
from mdsd.drafters.train import CHECKPOINT, TRAINING, HeadData, TrainConfig, train
from mdsd.hf import describe_model

SMALL = dict(
    steps=30, batch_tokens=96, chunk=16, eval_every=10, checkpoint_every=10, draft_vocab=20, held_out=0.2
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny target saved as a model directory, and the features of 48 of its own sampled sequences."""
    root = tmp_path_factory.mktemp("training")
    target = tiny_lm(0, vocab=24, sharpness=4.0)
    target.save_pretrained(root / "target")
    decoder = mdsd.TreeDecoder(target, None, None, temperature=1.0)
    prompts = [[i % 24, (3 * i) % 24] for i in range(48)]
    outs = decoder.generate_batch(prompts, 30, torch.Generator().manual_seed(0))
    sequences = [p + o.tokens.tolist() for p, o in zip(prompts, outs, strict=True)]
    features = root / "features"
    features.mkdir()
    for s in range(2):
        part = sequences[24 * s : 24 * (s + 1)]
        write_features(features_path(features, s), target, part, [2] * len(part), top_k=8)
    record = {"source": {"tiny": True}, "target": describe_model(root / "target"), "top_k": 8}
    (features / FEATURES).write_text(json.dumps(record))
    return root / "target", features


def test_features_are_the_targets_laws_and_states(setup):
    target_dir, features = setup
    target = mdsd.hf.load_model(target_dir)
    f = load_features(features_path(features, 0))
    a, b = int(f["offsets"][0]), int(f["offsets"][1])
    with torch.no_grad():
        out = target(f["tokens"][a:b][None].long(), output_hidden_states=True)
    logp = torch.log_softmax(out.logits[0].float(), -1)
    assert torch.allclose(f["top_logp"][a:b], logp.topk(8, -1).values, atol=1e-5)
    assert torch.equal(f["top_ids"][a:b, 0].long(), logp.argmax(-1))
    hidden = (
        target.model.norm(out.hidden_states[-1][0])
        if len(out.hidden_states) == 2
        else out.hidden_states[-1][0]
    )
    assert torch.allclose(f["hidden"][a:b].float(), hidden, atol=0.05)  # stored in bfloat16


def test_a_batch_is_its_files_rows_shifted_and_padded(setup):
    """HeadData.batch of a whole sequence and of a chunk from its middle: each token reads the stored state
    before it (zeros at the sequence's start, the state before the chunk inside it), in float32."""
    _, features = setup
    data = HeadData(features, 0.2, 0)
    i, a, b = data.sequences["train"][0]
    f = data.files[i]
    batch = data.batch([(i, a, a, b), (i, a, a + 2, a + 5)])
    n = b - a
    assert batch["features"].dtype == batch["next"].dtype == torch.float32
    assert torch.equal(batch["ids"][0, :n], f["tokens"][a:b].long())
    assert torch.equal(batch["next"][0, :n], f["hidden"][a:b].float())
    assert torch.equal(batch["features"][0, 1:n], f["hidden"][a : b - 1].float())
    assert not batch["features"][0, 0].any()
    assert torch.equal(batch["features"][1, :3], f["hidden"][a + 1 : a + 4].float())
    assert batch["positions"][1, :3].tolist() == [2, 3, 4] and batch["valid"][1].sum() == 3
    assert not batch["next"][1, 3:].any() and (batch["top_logp"][1, 3:] == -torch.inf).all()


def test_the_corpus_order_takes_turns_grows_by_a_prefix_and_outlives_a_set():
    sizes, seed = [5, 12, 3], 7
    whole = corpus_order(sizes, seed, sum(sizes))
    assert sorted(whole) == sorted((s, i) for s, n in enumerate(sizes) for i in range(n))  # each item once
    picks = [np.random.default_rng([seed, s]).permutation(n) for s, n in enumerate(sizes)]
    # while every set has items, sequence i is set i mod S's item i div S (the order runs were made in)
    assert whole[:9] == [(i % 3, int(picks[i % 3][i // 3])) for i in range(9)]
    assert [s for s, _ in whole[9:]] == [0, 1, 0, 1] + [1] * 7  # set 2 ran out, then set 0
    assert all(corpus_order(sizes, seed, n) == whole[:n] for n in range(sum(sizes) + 1))
    with pytest.raises(ValueError, match="--sequences"):
        corpus_order(sizes, seed, sum(sizes) + 1)


def test_a_corpus_run_may_grow_but_not_change():
    record = {
        "source": {"corpus": {"sets": ["a"], "sequences": 64, "seed": 0}},
        "top_k": 64,
        "target": {"weights_sha256": "x"},
    }
    grown = json.loads(json.dumps(record))
    grown["source"]["corpus"]["sequences"] = 128
    _check_same(record, grown, Path("out"))  # more sequences of the same corpus: accepted
    for change in ({"seed": 1}, {"sets": ["b"]}):
        other = json.loads(json.dumps(record))
        other["source"]["corpus"] |= change
        with pytest.raises(ValueError, match="another run"):
            _check_same(record, other, Path("out"))


def _decodes_losslessly(target, head) -> None:
    """Greedy decoding with ``head`` on a tree gives the target's greedy tokens on both paths."""
    prompts = [[1, 2, 3], [5]]
    greedy = mdsd.TreeDecoder(target, None, None, temperature=0.0).generate_batch(prompts, 10)
    for compile in (False, "none"):
        dec = mdsd.TreeDecoder(target, head, mdsd.Tree.kary([2, 1]), "rrs", temperature=0.0, compile=compile)
        assert [o.tokens.tolist() for o in dec.generate_batch(prompts, 10)] == [
            o.tokens.tolist() for o in greedy
        ]


@pytest.mark.parametrize("loss", ["kl", "tv", "alpha"])
def test_each_loss_trains_a_head_that_decodes_losslessly(setup, tmp_path, loss):
    target_dir, features = setup
    config = TrainConfig(loss=loss, **SMALL)
    train(config, features, target_dir, tmp_path, progress=False)
    log = json.loads((tmp_path / TRAINING).read_text())
    assert [p["step"] for p in log["curve"]] == [10, 20, 30] and log["processes"] == 1
    assert log["curve"][-1]["loss"] < log["curve"][0]["loss"]  # held-out loss falls
    for point in log["curve"]:
        assert point["acceptance"] <= point["alpha_2"] <= point["alpha_4"] <= 1.0
    target = mdsd.hf.load_model(target_dir)
    head = FeatureHead.load(tmp_path, target, describe_model(target_dir)["weights_sha256"])
    assert head.vocab.numel() == SMALL["draft_vocab"]
    _decodes_losslessly(target, head)


def test_the_alpha_loss_beats_kl_on_its_own_objective_or_says_by_how_much(setup, tmp_path):
    """Both losses move held-out alpha_4 up from the untrained head's (a smoke check of the objective)."""
    target_dir, features = setup
    train(TrainConfig(loss="alpha", **SMALL), features, target_dir, tmp_path / "a", progress=False)
    curve = json.loads((tmp_path / "a" / TRAINING).read_text())["curve"]
    assert curve[-1]["alpha_4"] > curve[0]["alpha_4"] - 0.02


def test_a_killed_run_resumes_to_the_same_head(setup, tmp_path, monkeypatch):
    target_dir, features = setup
    config = TrainConfig(**SMALL)
    train(config, features, target_dir, tmp_path / "whole", progress=False)
    calls = {"n": 0}
    batch = HeadData.batch

    def dies(self, chunks, device="cpu"):
        calls["n"] += 1
        if calls["n"] == 25:  # after the checkpoint at step 20
            raise KeyboardInterrupt
        return batch(self, chunks, device)

    monkeypatch.setattr(HeadData, "batch", dies)
    with pytest.raises(KeyboardInterrupt):
        train(config, features, target_dir, tmp_path / "cut", progress=False)
    monkeypatch.setattr(HeadData, "batch", batch)
    assert torch.load(tmp_path / "cut" / CHECKPOINT, weights_only=False)["step"] == 20
    with pytest.raises(ValueError, match="pass --resume"):
        train(config, features, target_dir, tmp_path / "cut", progress=False)
    with pytest.raises(ValueError, match="another config"):
        train(
            TrainConfig(**{**SMALL, "lr": 1e-3}),
            features,
            target_dir,
            tmp_path / "cut",
            resume=True,
            progress=False,
        )
    train(config, features, target_dir, tmp_path / "cut", resume=True, progress=False)
    whole, cut = (FeatureHead.load(tmp_path / d, mdsd.hf.load_model(target_dir)) for d in ("whole", "cut"))
    for (name, a), (_, b) in zip(whole.state_dict().items(), cut.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    curves = [json.loads((tmp_path / d / TRAINING).read_text())["curve"] for d in ("whole", "cut")]
    timed = [[point.pop("train_seconds") for point in curve] for curve in curves]  # wall time differs
    assert curves[0] == curves[1]
    assert all(0 < a < b for t in timed for a, b in zip(t, t[1:], strict=False))  # grows, resumed too


def test_bad_inputs_are_refused(setup, tmp_path):
    target_dir, features = setup
    with pytest.raises(ValueError, match="no checkpoint to resume"):
        train(TrainConfig(**SMALL), features, target_dir, tmp_path / "x", resume=True, progress=False)
    with pytest.raises(ValueError, match="--loss must be one of"):
        TrainConfig(loss="ce")
    with pytest.raises(ValueError, match="wor with --k 2"):
        TrainConfig(loss="alpha", law="wor", k=3)
    other = tmp_path / "other"
    tiny_lm(1, vocab=24).save_pretrained(other)
    with pytest.raises(ValueError, match="read by another target"):
        train(TrainConfig(**SMALL), features, other, tmp_path / "y", progress=False)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / FEATURES).write_text((features / FEATURES).read_text())
    data = features_path(features, 0).read_bytes()
    features_path(broken, 0).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a whole features file"):
        train(TrainConfig(**SMALL), broken, target_dir, tmp_path / "z", progress=False)


def test_a_head_reading_several_layers_trains_and_decodes(tmp_path):
    """EAGLE-3's features end to end on a 3-layer target: the features file keeps layers 0 and 1's outputs
    concatenated (transformers' hidden_states), a head trained on them (unrolled: its own width-H outputs
    feed the second pass) reads those layers and decodes losslessly on both paths; the feature regression,
    folders of other layers and impossible layers are refused."""
    from mdsd.drafters.features import check_feature_layers

    target = tiny_lm(0, vocab=24, sharpness=4.0, layers=3)
    target.save_pretrained(tmp_path / "target")
    prompts = [[i % 24, (5 * i) % 24] for i in range(24)]
    outs = mdsd.TreeDecoder(target, None, None, temperature=1.0).generate_batch(
        prompts, 24, torch.Generator().manual_seed(0)
    )
    sequences = [p + o.tokens.tolist() for p, o in zip(prompts, outs, strict=True)]
    record = {"source": {"tiny": True}, "target": describe_model(tmp_path / "target"), "top_k": 8}
    for name, layers in (("fused", (0, 1)), ("final", ())):
        (tmp_path / name).mkdir()
        write_features(
            features_path(tmp_path / name, 0), target, sequences, [2] * 24, 8, feature_layers=layers
        )
        (tmp_path / name / FEATURES).write_text(json.dumps(record | {"feature_layers": list(layers)}))
    f = load_features(features_path(tmp_path / "fused", 0))
    a, b = int(f["offsets"][0]), int(f["offsets"][1])
    with torch.no_grad():
        out = target(f["tokens"][a:b][None].long(), output_hidden_states=True)
    want = torch.cat([out.hidden_states[1][0], out.hidden_states[2][0]], -1)
    assert f["hidden"].shape[1] == 2 * target.config.hidden_size
    assert torch.allclose(f["hidden"][a:b].float(), want, atol=0.05)  # stored in bfloat16

    train(
        TrainConfig(unroll=2, **SMALL),
        tmp_path / "fused",
        tmp_path / "target",
        tmp_path / "h",
        progress=False,
    )
    head = FeatureHead.load(tmp_path / "h", target)
    assert head.feature_layers == (0, 1)
    _decodes_losslessly(target, head)
    with pytest.raises(ValueError, match="--feature-weight"):
        config = TrainConfig(feature_weight=1.0, **SMALL)
        train(config, tmp_path / "fused", tmp_path / "target", tmp_path / "w", progress=False)
    with pytest.raises(ValueError, match="feature layers than"):
        HeadData([tmp_path / "fused", tmp_path / "final"], 0.2, 0)
    for bad, match in (((0, 3), "has 3 decoder layers"), ((1,), "at least two")):
        with pytest.raises(ValueError, match=f"--feature-layers: .*{match}"):
            check_feature_layers(bad, tmp_path / "target")
    with pytest.raises(ValueError, match="--feature-layers"):
        _check_same(record | {"feature_layers": [0, 1]}, record | {"feature_layers": []}, tmp_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_under_torchrun(setup, tmp_path):
    """torch DDP with the gloo backend: two processes train one head; process 0 writes it."""
    target_dir, features = setup
    mdsd_script = str(Path(sys.executable).parent / "mdsd")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
    ]
    command += [
        "--master-port",
        str(_free_port()),
        mdsd_script,
        "drafters",
        "train",
        "--features",
        str(features),
    ]
    command += ["--target", str(target_dir), "--out", str(tmp_path), "--threads", "1", "--dtype", "float32"]
    for name, value in SMALL.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    log = json.loads((tmp_path / TRAINING).read_text())
    assert log["processes"] == 2 and log["curve"][-1]["tokens"] == 30 * SMALL["batch_tokens"] * 2
    FeatureHead.load(tmp_path, mdsd.hf.load_model(target_dir))


_PROBE = """
import gc, os, sys, weakref
from pathlib import Path
import torch
from mdsd.drafters.train import TrainConfig, train

gc.disable()  # what is left for a collection would be left to the interpreter's finalisation
made = []
wrap = torch.nn.parallel.DistributedDataParallel.__init__
def init(self, *args, **kwargs):
    wrap(self, *args, **kwargs)
    made.append(weakref.ref(self))
torch.nn.parallel.DistributedDataParallel.__init__ = init
features, target, out, small = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
rank = os.environ["RANK"]
train(TrainConfig(**small), features, target, out + rank, progress=False)
Path(out + rank + ".alive").write_text(f"{sum(r() is not None for r in made)} of {len(made)}")
"""


@pytest.mark.slow
def test_no_process_group_outlives_training_under_torchrun_regression(setup, tmp_path):
    """Bug: DDP sits in a reference cycle holding the gloo group, so it was freed by a collection during the
    interpreter's finalisation, where gloo's teardown aborted now and then (SIGABRT; once in CI). Every DDP
    wrapper is gone when ``train`` returns, with the collector off."""
    target_dir, features = setup
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr"]
    command += ["127.0.0.1", "--master-port", str(_free_port()), str(probe), str(features), str(target_dir)]
    command += [str(tmp_path / "out"), repr(SMALL)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # each process's count in its own file (the processes share one stdout, where lines interleave)
    alive = [(tmp_path / f"out{rank}.alive").read_text() for rank in range(2)]
    assert alive == ["0 of 1", "0 of 1"]


def test_held_out_acceptance_is_exact_and_one_for_the_target_itself(setup, tmp_path):
    from mdsd.drafters.evaluate import ACCEPTANCES, paired_difference, position_acceptance

    target_dir, features = setup
    data = HeadData(features, SMALL["held_out"], 0)
    target = mdsd.hf.load_model(target_dir)
    own = position_acceptance(data, target, answers_only=False)
    for name in ACCEPTANCES:  # the target drafting for itself: every lumped pair is p = q
        assert np.allclose(own[name], 1.0, atol=1e-6), name
    assert own["acceptance"].size == data.tokens("held_out")
    train(TrainConfig(**SMALL), features, target_dir, tmp_path, progress=False)
    head = FeatureHead.load(tmp_path, target)
    mine = position_acceptance(data, head)
    assert (mine["acceptance"] <= mine["alpha_2"] + 1e-12).all() and (
        mine["alpha_2"] <= mine["alpha_4"] + 1e-12
    ).all()
    mean, (low, high) = paired_difference(
        own["alpha_4"][: mine["alpha_4"].size], mine["alpha_4"], mine["sequence"]
    )
    assert low <= mean <= high and mean > 0


def _second_folder(setup, root: Path, target=None) -> Path:
    """The features of 24 more sequences of the tiny target (or of ``target``'s), as a second folder."""
    target_dir, features = setup
    model = mdsd.hf.load_model(target_dir)
    prompts = [[(5 * i + 1) % 24] for i in range(24)]
    outs = mdsd.TreeDecoder(model, None, None, temperature=1.0).generate_batch(
        prompts, 20, torch.Generator().manual_seed(1)
    )
    folder = root / "more"
    folder.mkdir()
    write_features(
        features_path(folder, 0),
        model,
        [p + o.tokens.tolist() for p, o in zip(prompts, outs, strict=True)],
        [1] * 24,
        top_k=8,
    )
    record = json.loads((features / FEATURES).read_text()) | {"source": {"tiny": "more"}}
    if target is not None:
        record["target"] = describe_model(target)
    (folder / FEATURES).write_text(json.dumps(record))
    return folder


def test_several_folders_train_one_head(setup, tmp_path):
    """Two folders: each keeps the split it has alone, held-out sequences take turns, training reads both
    (the CLI; its record names both), a checkpoint of one folder's run does not resume on two, and folders of
    another target are refused."""
    target_dir, features = setup
    more = _second_folder(setup, tmp_path)
    alone, both = HeadData(features, 0.2, 0), HeadData([features, more], 0.2, 0)
    first = len(alone.files)
    for part in ("train", "held_out"):
        mine = [s for s in both.sequences[part] if s[0] < first]
        assert sorted(mine) == sorted(alone.sequences[part])
        assert sorted(s for s in both.sequences[part] if s[0] >= first) == sorted(
            (i + first, a, b) for i, a, b in HeadData(more, 0.2, 0).sequences[part]
        )
    turns = [s[0] >= first for s in both.sequences["held_out"]]
    shorter = min(turns.count(True), turns.count(False))
    assert turns[: 2 * shorter] == [i % 2 == 1 for i in range(2 * shorter)]
    from mdsd.cli import main

    command = ["drafters", "train", "--features", str(features), str(more), "--target", str(target_dir)]
    command += ["--out", str(tmp_path / "both"), "--dtype", "float32"]
    assert main(command + [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]) == 0
    config = TrainConfig(**SMALL)
    log = json.loads((tmp_path / "both" / TRAINING).read_text())
    assert log["features"] == [str(features), str(more)]
    assert log["data"]["train_tokens"] == both.tokens("train")
    train(config, features, target_dir, tmp_path / "one", progress=False)
    with pytest.raises(ValueError, match="another config, data"):
        train(config, [features, more], target_dir, tmp_path / "one", resume=True, progress=False)
    other = tmp_path / "other"
    tiny_lm(1, vocab=24).save_pretrained(other)
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError, match="--features: .* another target"):
        HeadData([features, _second_folder(setup, tmp_path / "x", other)], 0.2, 0)


def test_each_sequence_knows_its_training_set(setup, tmp_path, monkeypatch):
    """HeadData.sets: a distilled run's prompt i is of set i mod len(sets); a corpus's sets take turns
    until one runs out (here the first after 5 items with a reference); another source says None."""
    from mdsd.data import training

    _, features = setup
    assert set(HeadData(features, 0.2, 0).sets("held_out")) == {None}
    files = [features_path(features, s) for s in range(2)]
    sources = {
        "distilled": (
            {"distilled": "d", "config": {"sets": ["a", "b", "c"], "prompts": 48, "shard_prompts": 24}},
            lambda g: "abc"[g % 3],
        ),
        "corpus": (
            {"corpus": {"sets": ["x", "y"], "seed": 0, "sequences": 48, "shard_sequences": 24}},
            lambda g: ("x" if g % 2 == 0 else "y") if g < 10 else "y",
        ),
    }
    items = {"x": [("t", "r")] * 5 + [("t", "")] * 3, "y": [("t", "r")] * 60}
    monkeypatch.setattr(training, "load_training_items", lambda name, cache=None: items[name])
    for name, (source, expected) in sources.items():
        folder = tmp_path / name
        folder.mkdir()
        record = json.loads((features / FEATURES).read_text()) | {"source": source}
        (folder / FEATURES).write_text(json.dumps(record))
        for f in files:
            (folder / f.name).write_bytes(f.read_bytes())
        data = HeadData(folder, 0.2, 0)
        for part in ("train", "held_out"):
            places = []
            for i, a, _ in data.sequences[part]:
                shard = int(Path(files[i].stem).name.rpartition("-")[2])
                places.append(24 * shard + data.files[i]["offsets"].tolist().index(a))
            assert data.sets(part) == [expected(g) for g in places], (name, part)


def test_a_heads_acceptance_at_depth_d_reads_its_own_outputs_chained(setup, tmp_path):
    """position_acceptance at depth 2 and 3: the head's laws after reading, at every position, its own
    output of the pass before one position on (written out here pass by pass), against the target's laws;
    depth 1 is the teacher-forced read, a draft model is the same at every depth, depth 0 is refused."""
    from mdsd.drafters.evaluate import position_acceptance
    from mdsd.drafters.losses import lump, total_variation

    target_dir, features = setup
    data = HeadData(features, SMALL["held_out"], 0)
    target = mdsd.hf.load_model(target_dir)
    train(TrainConfig(**SMALL), features, target_dir, tmp_path, progress=False)
    head = FeatureHead.load(tmp_path, target)
    slot = torch.full((head.head_config.vocab_size,), -1, dtype=torch.long)
    slot[head.vocab] = torch.arange(head.vocab.numel())
    by_depth = {}
    for depth in (1, 2, 3):
        got = by_depth[depth] = position_acceptance(data, head, answers_only=False, depth=depth)
        want = []
        for i, a, b in data.sequences["held_out"]:
            batch = data.batch([(i, a, a, b)])
            reads = batch["features"]
            with torch.no_grad():
                for _ in range(depth):
                    g, logits = head(batch["ids"], reads, batch["positions"])
                    reads = torch.cat([batch["features"][:, :1], g[:, :-1]], 1)  # width H: read as it is
            log_q = torch.log_softmax(logits[0].double(), -1)
            p, q = lump(batch["top_ids"][0], batch["top_logp"][0].double().exp(), slot, log_q)
            want.append((1 - total_variation(p, q)).numpy())
        assert np.allclose(got["acceptance"], np.concatenate(want), atol=1e-9), depth
    assert not np.allclose(
        by_depth[1]["acceptance"], by_depth[2]["acceptance"]
    )  # the chain reads other features
    model = position_acceptance(data, target, answers_only=False, depth=3)["acceptance"]
    assert np.array_equal(model, position_acceptance(data, target, answers_only=False)["acceptance"])
    with pytest.raises(ValueError, match="depth must be a positive int, got 0"):
        position_acceptance(data, head, depth=0)


def test_a_head_trained_on_from_another_starts_from_its_weights(setup, tmp_path):
    """--init: the run starts from the trained head (step 0's held-out figures are its own, its vocabulary
    kept) and decodes losslessly; a head of another shape, vocabulary size or feature layers is refused."""
    target_dir, features = setup
    train(TrainConfig(**SMALL), features, target_dir, tmp_path / "a", progress=False)
    first = json.loads((tmp_path / "a" / TRAINING).read_text())["curve"][-1]
    config = TrainConfig(
        **(SMALL | {"steps": 1, "eval_every": 1, "lr": 1e-12, "warmup": 1}), init=str(tmp_path / "a")
    )
    train(config, features, target_dir, tmp_path / "b", progress=False)
    again = json.loads((tmp_path / "b" / TRAINING).read_text())["curve"][-1]
    assert again["acceptance"] == pytest.approx(first["acceptance"], abs=1e-6)  # one step of lr 1e-12
    target = mdsd.hf.load_model(target_dir)
    a, b = (FeatureHead.load(tmp_path / d, target) for d in ("a", "b"))
    assert torch.equal(a.vocab, b.vocab)
    _decodes_losslessly(target, b)
    for bad, match in (
        ({"draft_vocab": 12}, "20 draft tokens; --intermediate-size and --draft-vocab ask for .* and 12"),
        ({"intermediate_size": 8}, "--draft-vocab ask for 8 and 20"),
    ):
        with pytest.raises(ValueError, match=f"--init: .*{match}"):
            train(
                TrainConfig(**(SMALL | bad), init=str(tmp_path / "a")), features, target_dir, tmp_path / "c"
            )
    fused = FeatureHead.from_target(target, torch.arange(20), feature_layers=(0, 1))
    fused.save(tmp_path / "f")
    (tmp_path / "f" / TRAINING).write_text("{}")
    with pytest.raises(
        ValueError, match=r"--init: .* reads the target's layers \[0, 1\]; these features hold the final"
    ):
        train(TrainConfig(**SMALL, init=str(tmp_path / "f")), features, target_dir, tmp_path / "d")
