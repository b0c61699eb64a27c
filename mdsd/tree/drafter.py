"""What proposes a tree's drawn children: the :class:`Drafter` protocol, and the one for a causal LM.

A decoding step drafts its tree with a drafter's cache (:class:`mdsd.tree.cache.Cache`): one forward per
depth, each expanded node drawing its children from ``q = softmax(logits / T)``. Where that cache comes
from is the drafter's business:

* :class:`ModelDrafter`: a ``transformers`` causal LM sharing the target's vocabulary (a small model of
  the target's family): its dynamic cache on the eager path (:class:`~mdsd.tree.cache.ModelCache`), its
  static cache on the fast path (:class:`~mdsd.tree.static.StaticLM`);
* :class:`mdsd.drafters.FeatureHead`: one decoder layer over the target's own hidden states (EAGLE's
  idea), with its own cache on both paths; it reads the target's features, so the target's caches hand
  them over (``hidden=True``) and the step feeds them to it (:attr:`~mdsd.tree.cache.Cache.reads_features`).

:class:`mdsd.TreeDecoder` takes either (a causal LM is wrapped by :func:`as_drafter`), or none when a draft
source drafts alone.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from mdsd.tree.cache import Cache, ModelCache
from mdsd.tree.models import shared_vocab_size
from mdsd.tree.static import StaticLM, static_obstacle

__all__ = ["Drafter", "ModelDrafter", "as_drafter", "check_drafter"]


@runtime_checkable
class Drafter(Protocol):
    """A drafter: the caches that draft a step's tree on either path.

    ``reads_features``: whether its caches read the target's hidden states (then the target's caches are
    made with ``hidden=True``, handing over the outputs of its decoder layers named by an optional
    ``feature_layers`` attribute, else the final hidden states); ``config``: what the memory estimate reads
    (layers, heads, key/value heads, head size, vocabulary: :func:`mdsd.tree.memory.decode_memory`).
    """

    reads_features: bool
    config: object

    def vocab_size(self) -> int:
        """The vocabulary its logits range over (the target's)."""

    def eager_cache(self, rows: int, capacity: int, temperature: float) -> Cache:
        """A cache for the eager path: ``rows`` rows of at most ``capacity`` positions, logits at T."""

    def static_cache(self, rows: int, capacity: int, temperature: float) -> Cache:
        """A cache for the fast path (fixed shapes, updated in place: capturable)."""

    def static_obstacle(self) -> str | None:
        """Why it cannot run on the fast path, or None."""

    def parameters(self):
        """Its parameters (for the device and dtype)."""


class ModelDrafter:
    """A ``transformers`` causal LM as a drafter."""

    reads_features = False

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.config = getattr(model, "config", {})

    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def eager_cache(self, rows: int, capacity: int, temperature: float) -> Cache:  # noqa: ARG002
        return ModelCache(self.model, rows, next(self.model.parameters()).device, temperature)

    def static_cache(self, rows: int, capacity: int, temperature: float) -> Cache:
        return StaticLM(self.model, rows, capacity, temperature)

    def static_obstacle(self) -> str | None:
        return static_obstacle(self.model)

    def parameters(self):
        return self.model.parameters()


def as_drafter(draft: object) -> Drafter | None:
    """``draft`` as a :class:`Drafter`: None stays None, a drafter stays itself, a causal LM (a torch
    Module with an output layer) becomes a :class:`ModelDrafter`; ``TypeError`` for anything else."""
    if draft is None or isinstance(draft, Drafter):
        return draft
    if isinstance(draft, torch.nn.Module) and hasattr(draft, "get_output_embeddings"):
        return ModelDrafter(draft)
    raise TypeError(
        f"draft must be a transformers causal LM, an mdsd drafter (e.g. mdsd.drafters.FeatureHead) or None, "
        f"got {type(draft).__name__}"
    )


def check_drafter(target: torch.nn.Module, drafter: Drafter | None) -> int:
    """The vocabulary size V shared by ``target`` and ``drafter``, else ``ValueError`` naming both sizes
    (``TypeError`` for a target that is not a causal LM)."""
    if drafter is None or isinstance(drafter, ModelDrafter):
        return shared_vocab_size(target, target if drafter is None else drafter.model)
    size = shared_vocab_size(target, target)
    if drafter.vocab_size() != size:
        raise ValueError(
            f"the drafter's vocabulary has {drafter.vocab_size()} tokens, the target's {size}: they must be "
            "one"
        )
    return size
