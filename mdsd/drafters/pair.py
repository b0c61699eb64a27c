"""The target and the drafter a ``--draft`` directory names: a draft model (two Hugging Face models,
:func:`mdsd.hf.load_pair`), a feature head trained for the target (:class:`~mdsd.drafters.head.FeatureHead`)
or a small drafter made for it (:class:`~mdsd.drafters.small.SmallDrafter`).

``mdsd decode --draft`` and the experiments' ``--draft`` take either; this is where the two are told apart,
above the Hugging Face glue that loads the models (:mod:`mdsd.hf` knows nothing of heads).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from mdsd.drafters.head import FeatureHead
from mdsd.drafters.small import SmallDrafter, is_small, tokenizer_digest
from mdsd.hf.fetch import describe_model
from mdsd.hf.load import load_model, load_pair, load_tokenizer, model_directory

__all__ = ["is_head", "is_small", "is_trained", "load_target_and_drafter"]


def is_head(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a feature head (``head.json``, :class:`mdsd.drafters.FeatureHead`).

    >>> is_head("/nonexistent")
    False
    """
    return (Path(path).expanduser() / "head.json").is_file()


def is_trained(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds one of mdsd's own drafters (a head or a small drafter), not a draft model."""
    return is_head(path) or is_small(path)


def load_target_and_drafter(
    target_path: str | os.PathLike,
    draft_path: str | os.PathLike,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
):
    """``(target, drafter, tokenizer)``: :func:`mdsd.hf.load_pair` of the two model directories, or, where
    ``draft_path`` holds a feature head (:func:`is_head`) or a small drafter (:func:`is_small`), the target
    and that drafter, loaded for it (its ``load`` checks that it was made for this target: sizes,
    vocabulary, weights digest, and for a small drafter the tokenizer)."""
    if not is_head(draft_path) and not is_small(draft_path):
        return load_pair(target_path, draft_path, dtype, device)
    target_dir = model_directory(target_path, "target_path")
    target, tokenizer = load_model(target_dir, dtype, device), load_tokenizer(target_dir)
    digest = describe_model(target_dir)["weights_sha256"]
    if is_small(draft_path):
        return target, SmallDrafter.load(draft_path, target, digest, tokenizer_digest(tokenizer)), tokenizer
    return target, FeatureHead.load(draft_path, target, digest), tokenizer
