"""Training a small drafter in seed 004's two stages: pretraining on generic text, finetuning on one task's
self-distilled answers.

Seed 004 (Yi, Kim et al., 2024) trains its drafters in two stages: **pretrain** (P) a small causal LM on
generic text, then **finetune** (F) it on the target's own answers to one task's prompts (self-distilled:
:mod:`mdsd.drafters.distill`). Its ablations are P alone, F alone (finetuning a fresh drafter) and P→F. Here
each is one command (``mdsd drafters pretrain``; ``mdsd drafters finetune`` with or without ``--init`` a
pretrained drafter) over one loop:

* the data are token sequences: for pretraining, the training sets' items with their reference answers
  (:func:`mdsd.data.training.render_item`; every next token is trained); for finetuning, a distilled run's
  prompts with the target's answers (only the answer's tokens are trained: the drafter drafts answers).
  Sequences are split into training and validation ones by a seeded hash, and tokenised once into the run's
  folder (``data.npz``);
* a step packs randomly drawn training sequences into rows of ``row_tokens`` (attention causal within each
  sequence only, positions restarting: :meth:`SmallDrafter.forward`) and minimises the cross-entropy of the
  trained tokens on the draft vocabulary M, which is KL(p̂ ‖ q) for the one-hot empirical law p̂ of the
  text (a token outside M has q = 0 and no gradient; the run records how many there are). M is the
  ``draft_vocab`` tokens most frequent among the trained tokens of a fresh drafter's data, or its
  ``--init`` drafter's, extended by the data's most frequent tokens it lacks where ``draft_vocab`` is larger
  (:meth:`SmallDrafter.extended`);
* AdamW with a linear warm-up and a cosine decay to a tenth; gradients clipped at norm 1;
* the learning curve is evaluated at steps 1, 2, 4, 8, ... and every ``eval_every`` steps (a log axis of
  tokens seen has its points) on the validation sequences: the cross-entropy and the top-1 agreement, the
  share of trained tokens that are the drafter's argmax. On answers the target wrote at T = 0 (greedy), the
  top-1 agreement at a position is exactly whether a greedy single draft is accepted there;
* ``checkpoint.pt`` (the drafter, the optimizer, the step, the curve and the sampler's state) is written
  every ``checkpoint_every`` steps; ``resume=True`` continues from it, and only with the same config, data
  and target. At the end the drafter (:meth:`SmallDrafter.save`) and ``training.json`` (config, data,
  curve, command, git revision, versions) are written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mdsd.drafters.small import SmallDrafter, read_config, tokenizer_digest
from mdsd.drafters.train import _rate, save_checkpoint
from mdsd.outputs import ensure_output_dir, provenance, strict_json
from mdsd.validation import check_positive_ints

__all__ = [
    "StageConfig",
    "TokenData",
    "pretrain_data",
    "finetune_data",
    "train_stage",
    "training_sets",
    "trained_on",
    "check_heldout",
    "STAGES",
]

STAGES = ("pretrain", "finetune")
CHECKPOINT = "checkpoint.pt"
DATA = "data.npz"
TRAINING = "training.json"


@dataclass(frozen=True)
class StageConfig:
    """A training stage: the drafter's shape (a fresh one's; an ``--init`` drafter must have it), the
    optimisation and the evaluation (recorded with the drafter; a checkpoint resumes only under the same)."""

    hidden_size: int = field(default=512, metadata={"help": "the drafter's width"})
    layers: int = field(default=4, metadata={"help": "decoder layers"})
    heads: int = field(default=8, metadata={"help": "attention heads"})
    kv_heads: int = field(default=2, metadata={"help": "key/value heads"})
    intermediate_size: int = field(default=1536, metadata={"help": "MLP width"})
    draft_vocab: int = field(default=16384, metadata={"help": "the draft vocabulary's size M"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate (AdamW)"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    warmup: int = field(default=50, metadata={"help": "linear warm-up steps"})
    steps: int = field(default=1200, metadata={"help": "optimizer steps"})
    batch_tokens: int = field(default=4096, metadata={"help": "tokens per step (sequences packed in rows)"})
    row_tokens: int = field(default=512, metadata={"help": "tokens per packed row (longer sequences cut)"})
    held_out: float = field(default=0.02, metadata={"help": "share of sequences kept for validation"})
    eval_every: int = field(default=50, metadata={"help": "steps between validations (and at powers of 2)"})
    eval_tokens: int = field(default=8192, metadata={"help": "validation tokens read (whole sequences)"})
    checkpoint_every: int = field(default=25, metadata={"help": "steps between checkpoints"})
    seed: int = field(default=0, metadata={"help": "seed of the split, the batches and a fresh drafter"})

    def __post_init__(self) -> None:
        check_positive_ints(
            {
                name: getattr(self, name)
                for name in (
                    "hidden_size",
                    "layers",
                    "heads",
                    "kv_heads",
                    "intermediate_size",
                    "draft_vocab",
                    "steps",
                    "batch_tokens",
                    "row_tokens",
                    "eval_every",
                    "eval_tokens",
                    "checkpoint_every",
                )
            }
        )
        if not 0 < self.held_out < 1:
            raise ValueError(f"held_out must lie in (0, 1), got {self.held_out}")
        if self.row_tokens < 2:
            raise ValueError(f"row_tokens must be at least 2, got {self.row_tokens}")

    def shape(self) -> dict:
        """The architecture it trains (:meth:`mdsd.drafters.small.SmallConfig.shape`)."""
        return {
            "hidden_size": self.hidden_size,
            "layers": self.layers,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "intermediate_size": self.intermediate_size,
            "draft_vocab": self.draft_vocab,
        }


@dataclass
class TokenData:
    """Token sequences (``tokens[offsets[i]:offsets[i + 1]]``), the first trained position of each (token j
    of sequence i is trained where j ≥ ``starts[i]``, j ≥ 1) and which are validation sequences."""

    tokens: np.ndarray  # [total] int32
    offsets: np.ndarray  # [N + 1] int64
    starts: np.ndarray  # [N] int64
    held: np.ndarray  # [N] bool

    @classmethod
    def of(cls, rows: list[list[int]], starts: list[int], held_out: float, seed: int, cut: int) -> TokenData:
        """The sequences ``rows`` (each cut to its first ``cut`` tokens), trained from ``starts``, split by a
        seeded hash of their index."""
        rows = [r[:cut] for r in rows]
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        held = np.array(
            [
                int.from_bytes(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:8], "big") / 2**64 < held_out
                for i in range(len(rows))
            ],
            dtype=bool,
        )
        tokens = (
            np.concatenate([np.asarray(r, dtype=np.int32) for r in rows]) if rows else np.zeros(0, np.int32)
        )
        data = cls(tokens, np.concatenate([[0], np.cumsum(lengths)]), np.maximum(np.asarray(starts), 1), held)
        for part in (False, True):
            if not (data.trained(part) > 0).any():
                raise ValueError(
                    f"the data ({len(rows)} sequences) leave no {'validation' if part else 'training'} "
                    "sequence with a token to train: give more, or another held_out"
                )
        return data

    def trained(self, held: bool) -> np.ndarray:
        """Trained tokens per sequence of one part (0 for the other part's)."""
        counts = np.maximum(np.diff(self.offsets) - self.starts, 0)
        return np.where(self.held == held, counts, 0)

    def sequence(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def save(self, path: Path, key: dict) -> None:
        partial = path.with_name(path.name + ".partial.npz")
        np.savez_compressed(
            partial,
            tokens=self.tokens,
            offsets=self.offsets,
            starts=self.starts,
            held=self.held,
            key=np.array(json.dumps(key, sort_keys=True)),
        )
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path, key: dict) -> TokenData | None:
        """The data saved at ``path`` for ``key``, or None where there are none or they are another's."""
        if not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as f:
            if str(f["key"]) != json.dumps(key, sort_keys=True):
                return None
            return cls(f["tokens"], f["offsets"], f["starts"], f["held"])


def pretrain_data(
    sets: tuple[str, ...], tokenizer, max_prompt_tokens: int = 256, max_answer_tokens: int = 256
) -> tuple[list[list[int]], list[int], dict]:
    """Generic text: every item with a reference of the training ``sets``
    (:func:`mdsd.data.training.load_training_items`), rendered by
    :func:`~mdsd.data.training.render_item`, each sequence trained whole. Returns (rows, starts, source)."""
    from mdsd.data.training import TRAINING_SETS, load_training_items, render_item

    rows = []
    for name in sets:
        if name not in TRAINING_SETS:
            raise ValueError(f"--corpus: {name!r} is not a training set; choose from {sorted(TRAINING_SETS)}")
        for text, reference in load_training_items(name):
            if reference:
                prompt, answer = render_item(
                    name, text, reference, tokenizer, max_prompt_tokens, max_answer_tokens
                )
                rows.append(prompt + answer)
    source = {
        "corpus": list(sets),
        "requirements": {name: list(TRAINING_SETS[name].requirements) for name in sets},
        "max_prompt_tokens": max_prompt_tokens,
        "max_answer_tokens": max_answer_tokens,
    }
    return rows, [0] * len(rows), source


def finetune_data(
    folder: str | os.PathLike, tokenizer, shards: int = 0
) -> tuple[list[list[int]], list[int], dict]:
    """One task's self-distilled answers: the sequences prompt + answer of every shard of the distilled run in
    ``folder`` (:func:`mdsd.drafters.distill.shard_sequences`), trained on the answers; ``shards`` > 0: of its
    first ``shards`` shards only, all of which must be there (the points of a learning curve against the
    data's size, each a prefix of the next). Returns (rows, starts, source)."""
    from mdsd.drafters.distill import (
        MANIFEST,
        DistillConfig,
        load_shard,
        shard_count,
        shard_path,
        shard_sequences,
        training_texts,
    )

    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise FileNotFoundError(f"--distilled: {folder} holds no distilled run ({MANIFEST})")
    manifest = json.loads((folder / MANIFEST).read_text())
    saved = manifest["config"]
    config = DistillConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
    texts = training_texts(config)
    if isinstance(shards, bool) or not isinstance(shards, int) or not 0 <= shards <= shard_count(config):
        raise ValueError(f"--shards must be an int in [0, {shard_count(config)}] (0: all), got {shards!r}")
    missing = [s for s in range(shards) if not shard_path(folder, s).is_file()]
    if missing:
        raise ValueError(f"--shards {shards}: {folder} lacks shard(s) {missing[:5]} of the first {shards}")
    rows, starts, read = [], [], []
    for s in range(shards or shard_count(config)):
        if not shard_path(folder, s).is_file():
            continue
        shard = load_shard(shard_path(folder, s))
        sequences, answers = shard_sequences(config, shard, tokenizer, texts)
        rows += sequences
        starts += answers
        read.append(s)
    if not rows:
        raise ValueError(f"--distilled: {folder} holds no shard yet")
    source = {"distilled": str(folder), "config": saved, "target": manifest["target"], "shards": read}
    return rows, starts, source


def _vocabulary(data: TokenData, size: int, sort: bool = True) -> torch.Tensor:
    """The ``size`` tokens most frequent among the trained tokens of the training sequences (ties: lower
    id first), sorted (``sort=False``: most frequent first)."""
    picked = [data.sequence(i)[data.starts[i] :] for i in range(len(data.starts)) if not data.held[i]]
    ids, counts = np.unique(np.concatenate(picked), return_counts=True)
    order = np.lexsort((ids, -counts))[:size]
    picked = np.sort(ids[order]) if sort else ids[order]
    return torch.from_numpy(picked.astype(np.int64))


def _layers(shape: dict) -> dict:
    """An architecture's shape less its draft vocabulary (which finetuning may extend)."""
    return {k: v for k, v in shape.items() if k != "draft_vocab"}


def _pack(
    data: TokenData, sequences: list[int], row_tokens: int, slot: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``sequences`` packed first-fit in order into rows of at most ``row_tokens``: ``ids``, ``positions``,
    ``mask`` [R, L, L] (causal within a sequence), ``labels`` [R, L] (the draft-vocabulary slot of the next
    token where it is trained, -1 elsewhere; -2 where it is trained but outside the draft vocabulary)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sequences:
        n = int(data.offsets[i + 1] - data.offsets[i])
        r = next((r for r in range(len(rows)) if room[r] >= n), None)
        if r is None:
            rows.append([])
            room.append(row_tokens)
            r = len(rows) - 1
        rows[r].append(i)
        room[r] -= n
    L = max(row_tokens - r for r in room)
    R = len(rows)
    ids = torch.zeros(R, L, dtype=torch.long)
    positions = torch.zeros(R, L, dtype=torch.long)
    doc = torch.full((R, L), -1, dtype=torch.long)
    labels = torch.full((R, L), -1, dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for d, i in enumerate(members):
            seq = torch.from_numpy(data.sequence(i).astype(np.int64))
            n = seq.numel()
            ids[r, at : at + n] = seq
            positions[r, at : at + n] = torch.arange(n)
            doc[r, at : at + n] = d
            start = int(data.starts[i])
            if start < n:  # position j - 1 predicts token j, trained for j >= start
                target = seq[start:]
                place = slot[target]
                labels[r, at + start - 1 : at + n - 1] = torch.where(place >= 0, place, -2)
            at += n
    t = torch.arange(L)
    mask = (
        (doc[:, :, None] == doc[:, None, :]) & (t[None, None, :] <= t[None, :, None]) & (doc[:, :, None] >= 0)
    )
    mask |= torch.eye(L, dtype=torch.bool)[None]  # padding attends to itself (no empty row)
    return {"ids": ids, "positions": positions, "mask": mask, "labels": labels}


def _loss(drafter: SmallDrafter, batch: dict) -> tuple[torch.Tensor, int]:
    """Mean cross-entropy of the trained tokens inside the draft vocabulary, and their count."""
    logits = drafter(batch["ids"], batch["positions"], batch["mask"])
    inside = batch["labels"] >= 0
    count = int(inside.sum())
    if count == 0:
        return logits.sum() * 0.0, 0
    return F.cross_entropy(logits[inside].float(), batch["labels"][inside]), count


@torch.no_grad()
def evaluate(drafter: SmallDrafter, data: TokenData, slot: torch.Tensor, config: StageConfig) -> dict:
    """Validation: over the first validation sequences holding ``eval_tokens`` trained tokens, the mean
    cross-entropy of those inside the draft vocabulary, the top-1 agreement over all of them (a token outside
    the vocabulary is never the argmax), and the share outside."""
    picked, seen = [], 0
    counts = data.trained(True)
    for i in np.flatnonzero(counts):
        picked.append(int(i))
        seen += int(counts[i])
        if seen >= config.eval_tokens:
            break
    sums = {"loss": 0.0, "top1": 0, "inside": 0, "trained": 0}
    for lo in range(0, len(picked), 16):
        batch = _pack(data, picked[lo : lo + 16], config.row_tokens, slot)
        logits = drafter(batch["ids"], batch["positions"], batch["mask"]).float()
        labels = batch["labels"]
        inside, trained = labels >= 0, labels != -1
        sums["loss"] += float(F.cross_entropy(logits[inside], labels[inside], reduction="sum"))
        sums["top1"] += int((logits.argmax(-1) == labels)[inside].sum())
        sums["inside"] += int(inside.sum())
        sums["trained"] += int(trained.sum())
    return {
        "loss": sums["loss"] / max(sums["inside"], 1),
        "top1": sums["top1"] / max(sums["trained"], 1),
        "outside_vocab": 1 - sums["inside"] / max(sums["trained"], 1),
        "validation_tokens": sums["trained"],
    }


def _evaluated_at(step: int, config: StageConfig) -> bool:
    return step % config.eval_every == 0 or step == config.steps or (step & (step - 1)) == 0


def train_stage(
    stage: str,
    config: StageConfig,
    data_source: tuple,
    target_dir: str | os.PathLike,
    out: str | os.PathLike,
    init: str | os.PathLike | None = None,
    resume: bool = False,
    dtype: str = "float32",
    progress: bool = True,
) -> Path:
    """Train a small drafter (module docstring): ``stage`` "pretrain" or "finetune", ``data_source`` the
    (rows, starts, source) of :func:`pretrain_data` or :func:`finetune_data`, for the target in
    ``target_dir``, from a fresh drafter or the one in ``init``; write it, its checkpoint and its learning
    curve into ``out``; returns ``out``."""
    from tqdm import tqdm

    from mdsd.hf import describe_model, load_model, load_tokenizer

    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
    out = ensure_output_dir(out, "--out")
    checkpoint = out / CHECKPOINT
    if resume and not checkpoint.is_file():
        raise ValueError(f"--resume: {out} holds no checkpoint to resume")
    if not resume and checkpoint.is_file():
        raise ValueError(
            f"{out} holds a checkpoint of an earlier run: pass --resume to continue it, or another --out"
        )
    described = describe_model(target_dir)
    digest = tokenizer_digest(load_tokenizer(target_dir))
    if init is not None:
        saved = read_config(init)
        if _layers(saved.shape()) != _layers(config.shape()) or config.draft_vocab < saved.draft_vocab:
            raise ValueError(
                f"--init: {init} holds a drafter of another architecture ({saved.shape()}) than this run's "
                f"({config.shape()}): give the run its shape (a draft vocabulary as large or larger)"
            )
    rows, starts, source = data_source
    if stage == "finetune" and "distilled" in source:
        made_by = source["target"]["weights_sha256"]
        if made_by != described["weights_sha256"]:
            raise ValueError(
                f"--distilled: the answers were written by another target ({source['target']['name']})"
            )
    key = {
        "stage": stage,
        "config": dataclasses.asdict(config),
        "source": source,
        "target": described["weights_sha256"],
        "tokenizer": digest,
        "init": None if init is None else str(init),
    }
    data = TokenData.load(out / DATA, key)
    if data is None:
        data = TokenData.of(rows, starts, config.held_out, config.seed, config.row_tokens)
        data.save(out / DATA, key)
    torch.manual_seed(config.seed)
    target = load_model(target_dir, "float32")
    if init is not None:
        drafter = SmallDrafter.load(init, target, described["weights_sha256"], digest)
        if config.draft_vocab > drafter.vocab.numel():  # the task's most frequent tokens the init lacks
            ranked = _vocabulary(data, config.draft_vocab + drafter.vocab.numel(), sort=False)
            extra = ranked[~torch.isin(ranked, drafter.vocab)][: config.draft_vocab - drafter.vocab.numel()]
            drafter = drafter.extended(target, extra)
    else:
        drafter = SmallDrafter.fresh(
            target,
            _vocabulary(data, config.draft_vocab),
            config.hidden_size,
            config.layers,
            config.heads,
            config.kv_heads,
            config.intermediate_size,
            described,
            digest,
            config.seed,
        )
    del target  # the drafter keeps the embedding
    drafter.train()
    slot = torch.full((drafter.small_config.vocab_size,), -1, dtype=torch.long)
    slot[drafter.vocab] = torch.arange(drafter.vocab.numel())
    trainable = [p for p in drafter.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _rate(config, step))
    step, seen, curve = 0, 0, []
    rng = np.random.default_rng(config.seed)
    if resume:
        saved = torch.load(checkpoint, weights_only=False)
        if saved["key"] != key:
            raise ValueError(
                f"--resume: {checkpoint} is a checkpoint of another stage, config, data or target"
            )
        drafter.load_state_dict(saved["drafter"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        step, seen, curve = saved["step"], saved["seen"], saved["curve"]
        rng.bit_generator.state = saved["rng"]
    if step == 0 and not curve:
        curve.append({"step": 0, "tokens": 0} | evaluate(drafter, data, slot, config))
    train_ids = np.flatnonzero(data.trained(False))
    lengths = np.diff(data.offsets)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    bar = tqdm(total=config.steps, initial=step, desc=stage, unit="step", disable=not progress)
    while step < config.steps:
        picked, size = [], 0
        while size < config.batch_tokens:
            i = int(train_ids[rng.integers(len(train_ids))])
            picked.append(i)
            size += int(lengths[i])
        with autocast:
            loss, count = _loss(drafter, _pack(data, picked, config.row_tokens, slot))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        schedule.step()
        step += 1
        seen += count
        bar.update(1)
        if _evaluated_at(step, config):
            drafter.eval()
            metrics = evaluate(drafter, data, slot, config)
            drafter.train()
            curve.append({"step": step, "tokens": seen, "train_loss": float(loss.detach())} | metrics)
            bar.set_postfix(loss=f"{metrics['loss']:.3f}", top1=f"{metrics['top1']:.3f}")
        if step % config.checkpoint_every == 0 or step == config.steps:
            save_checkpoint(
                checkpoint,
                {
                    "key": key,
                    "drafter": drafter.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(),
                    "step": step,
                    "seen": seen,
                    "curve": curve,
                    "rng": rng.bit_generator.state,
                },
            )
    bar.close()
    drafter.eval()
    drafter.save(out)
    payload = {
        "stage": stage,
        "config": dataclasses.asdict(config),
        "init": None if init is None else str(init),
        "source": source,
        "data": {
            "train_sequences": int((~data.held).sum()),
            "train_tokens": int(data.trained(False).sum()),
            "validation_sequences": int(data.held.sum()),
            "validation_tokens": int(data.trained(True).sum()),
        },
        "target": described,
        "curve": curve,
        **provenance(),  # command, revision, versions, device, time
    }
    (out / TRAINING).write_text(json.dumps(strict_json(payload), indent=2) + "\n")
    return out


def training_sets(folder: str | os.PathLike) -> tuple[str, ...]:
    """The training sets a trained small drafter in ``folder`` read, from its ``training.json`` (those of
    the run it was initialised from, ``--init``, included)."""
    path = Path(folder) / TRAINING
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no {TRAINING} (not a finished stage)")
    record = json.loads(path.read_text())
    source = record["source"]
    sets = list(source.get("corpus", [])) + list(source.get("config", {}).get("sets", []))
    if record.get("init"):
        sets += training_sets(record["init"])
    return tuple(dict.fromkeys(sets))


def trained_on(folder: str | os.PathLike) -> dict:
    """What a small drafter in ``folder`` was trained on, from its ``training.json``: ``stage``, ``init`` (the
    name of the pretrained drafter it started from, or None), ``train_tokens`` (the trained tokens of its
    data) and, for a drafter finetuned on one set, ``home``: that set's evaluation set (``translate-deu`` for
    ``translate-deu-train``), else None."""
    record = json.loads((Path(folder) / TRAINING).read_text())
    sets = record["source"].get("config", {}).get("sets", [])
    home = sets[0].removesuffix("-train") if record["stage"] == "finetune" and len(sets) == 1 else None
    return {
        "stage": record["stage"],
        "init": Path(record["init"]).name if record["init"] else None,
        "train_tokens": record["data"]["train_tokens"],
        "home": home,
    }


def check_heldout(folder: str | os.PathLike, sets: tuple[str, ...], cache=None) -> None:
    """Refuse (``ValueError`` naming both items) evaluation prompt ``sets`` that share text with what the
    small drafter in ``folder`` was trained on (:func:`mdsd.data.training.check_disjoint`)."""
    from mdsd.data.prompts import load_texts
    from mdsd.data.training import check_disjoint, load_training_texts

    trained = {name: load_training_texts(name, cache) for name in training_sets(folder)}
    check_disjoint(trained, {name: load_texts(name, cache) for name in sets})
