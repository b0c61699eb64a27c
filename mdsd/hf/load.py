"""Load a local Hugging Face target/draft pair (offline) and check that they share a vocabulary.

Any two local causal-LM directories work; the names of known pairs (``"qwen2.5-coder"``, see
:data:`mdsd.hf.fetch.PAIRS`) resolve to their converted copies in the mdsd cache. Nothing is ever
downloaded here: every ``from_pretrained`` call is ``local_files_only``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from mdsd.hf.deps import dtype_argument
from mdsd.hf.fetch import PAIRS, model_dir
from mdsd.validation import check_device

__all__ = ["load_model", "load_tokenizer", "load_pair", "pair_paths", "model_directory"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ValueError(f"dtype must be a torch floating dtype or its name, got {dtype!r}")
    return resolved


def model_directory(path: str | os.PathLike, name: str) -> Path:
    """``path`` as a folder holding a Hugging Face model (``config.json``), or ``FileNotFoundError`` naming
    ``name`` (a feature head's folder is named as one: :func:`mdsd.drafters.load_target_and_drafter` loads
    it)."""
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        if (folder / "head.json").is_file():
            raise FileNotFoundError(
                f"{name}: {folder} holds a feature head, not a model; load it with its target by "
                "mdsd.drafters.load_target_and_drafter"
            )
        raise FileNotFoundError(f"{name}: no Hugging Face model directory (config.json) at {folder}")
    return folder


def load_model(path: str | os.PathLike, dtype: str | torch.dtype = "float32", device: str = "cpu"):
    """A causal LM from a local directory, in eval mode, on ``device``, offline."""
    from transformers import AutoModelForCausalLM

    device = check_device(device)
    folder = model_directory(path, "path")
    kwargs = dtype_argument(_dtype(dtype))
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, **kwargs)
    return model.to(device).eval()


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer saved in a local model directory, offline."""
    from transformers import AutoTokenizer

    folder = model_directory(path, "path")
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{folder} holds a model but no tokenizer (none of {', '.join(_TOKENIZER_FILES)}); "
            "save one there with tokenizer.save_pretrained(...)"
        )
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def pair_paths(name: str, cache: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """``(target_dir, draft_dir)`` of a known pair in the cache (FileNotFoundError if not fetched)."""
    if name not in PAIRS:
        raise ValueError(f"name must be one of {sorted(PAIRS)}, got {name!r}")
    return model_dir(name, "target", cache), model_dir(name, "draft", cache)


def load_pair(
    target_path: str | os.PathLike,
    draft_path: str | os.PathLike,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
):
    """Load ``(target, draft, tokenizer)`` and check that the two models can be compared token by token.

    The tokenizers must map the same strings to the same ids and both models must output logits
    over the same number of ids; otherwise :class:`ValueError` names both sizes. The target's
    tokenizer is returned. Both are models: a feature head as the draft is loaded, with its target, by
    :func:`mdsd.drafters.load_target_and_drafter` (the drafters sit above this glue).
    """
    check_device(device)
    _dtype(dtype)
    target_dir = model_directory(target_path, "target_path")
    draft_dir = model_directory(draft_path, "draft_path")
    tokenizer = load_tokenizer(target_dir)
    draft_tokenizer = load_tokenizer(draft_dir)
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise ValueError(
            f"target_path and draft_path have different tokenizers ({len(tokenizer)} vs "
            f"{len(draft_tokenizer)} tokens): speculative decoding needs one shared vocabulary"
        )
    target = load_model(target_dir, dtype, device)
    draft = load_model(draft_dir, dtype, device)
    n_target = target.get_output_embeddings().weight.shape[0]
    n_draft = draft.get_output_embeddings().weight.shape[0]
    if n_target != n_draft:
        raise ValueError(f"target and draft output different vocabulary sizes: {n_target} vs {n_draft}")
    return target, draft, tokenizer
