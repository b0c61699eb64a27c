"""A feature head: one decoder layer over the target's own hidden states, read by the target's output layer.

EAGLE's idea (Li et al., 2024): the target's last hidden state f_t (after its final norm: what its output
layer reads) already says most of what comes next, so a drafter that reads it needs one layer, not a whole
model. The head reads, at each position t, the embedding of token x_t and the feature of the position
before it, and predicts the feature at t:

.. math::

    g_t = \\mathrm{layer}\\bigl(W_{in} [e(x_t); f_{t-1}]\\bigr), \\qquad
    q(\\cdot \\mid x_{\\le t}) = \\mathrm{softmax}\\bigl(W_{out}[M]\\, g_t / T\\bigr)
    \\text{ on } M, \\quad 0 \\text{ off } M,

where e and W_out are the target's (frozen) embedding and output layer, W_out[M] its rows of a *draft
vocabulary* M (the tokens the distilled data uses most; FR-Spec, EAGLE-3: most of the output layer's cost
is rows that are almost never drawn). Every verifier stays lossless: q is whatever the head says, zero off M.
Below the root the head feeds its own g as the next position's feature, so it drafts each depth of any tree
from its own predictions; after the target's verification it reads the accepted tokens again with the
target's features (:attr:`mdsd.tree.cache.Cache.reads_features`).

EAGLE-3's variant (Li et al., 2025) reads several of the target's layers instead of its last state: with
``feature_layers`` (l_1, ..., l_n), n ≥ 2, the target's feature is the concatenation of those decoder layers'
outputs, mapped to the width H by a learned ``fuse`` [n·H → H],

.. math::

    f_{t-1} = W_{fuse}\\,[h^{(l_1)}_{t-1}; \\dots; h^{(l_n)}_{t-1}],

while the head's own g still feeds the next depth unchanged (a feature of width n·H is the target's, one of
width H the head's: n ≥ 2 keeps them apart).

A head is saved as ``head.safetensors`` (its input map and layer: what is trained) and ``head.json`` (its
shape, draft vocabulary and the target it belongs to); loading takes the embedding and output rows from the
target, after checking its hidden size, vocabulary and weights against the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mdsd.drafters.cache import LayerCache
from mdsd.drafters.layer import DecoderLayer, LayeredConfig, LayerShape

__all__ = ["HeadConfig", "FeatureHead", "FILL", "widened", "layer_indices"]

FILL = -1e30  # the logit of a token outside the draft vocabulary: exp(FILL - max) is 0 in float32


def widened(small: torch.Tensor, vocab: torch.Tensor, vocab_size: int, temperature: float) -> torch.Tensor:
    """A drafter's logits over the whole vocabulary [..., V] from its logits ``small`` [..., M] on the draft
    vocabulary ``vocab`` (M ids): ``small`` / T there, in float32 (undivided at T = 0 and 1, where only the
    argmax or the logits themselves count), :data:`FILL` elsewhere: q is exactly 0 off the draft vocabulary.

    >>> torch.softmax(widened(torch.tensor([0.0, 2.0]), torch.tensor([1, 3]), 4, 2.0), -1).numpy().round(3)
    array([0.   , 0.269, 0.   , 0.731], dtype=float32)
    """
    small = small.float()
    if temperature not in (0.0, 1.0):
        small = small / temperature
    full = small.new_full((*small.shape[:-1], vocab_size), FILL)
    return full.index_copy_(-1, vocab, small)


@dataclass(frozen=True)
class HeadConfig(LayeredConfig):
    """What a head is: its layer's shape, the target it reads, and its draft vocabulary's size."""

    WHAT = "a head config"  # head.json is format LayeredConfig.FORMAT

    layer: LayerShape
    vocab_size: int  # the target's vocabulary V
    draft_vocab: int  # |M|
    target: str  # the target's name
    target_weights: str  # the target's weights sha256 (mdsd.hf.describe_model), or "" if unknown
    family: str  # the target's model_type
    feature_layers: tuple[int, ...] = ()  # the target's layers whose outputs it reads; () its final state

    def __post_init__(self) -> None:  # a JSON list, read back as a tuple
        object.__setattr__(self, "feature_layers", layer_indices(self.feature_layers))


def layer_indices(layers) -> tuple[int, ...]:
    """``layers`` as a head reads them: none (the target's final state), or two or more distinct decoder
    layer indices >= 0 (one would have the width of the head's own feature); ``ValueError`` otherwise."""
    layers = tuple(layers)
    if len(layers) == 1 or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in layers):
        raise ValueError(
            f"feature layers must be none (the target's final state) or at least two decoder layer indices "
            f">= 0; got {list(layers)}"
        )
    if len(set(layers)) != len(layers):
        raise ValueError(f"feature layers must be distinct; got {list(layers)}")
    return layers


class FeatureHead(nn.Module):
    """The head of the module docstring. Trainable: ``fc`` (the input map W_in), ``layer`` and, reading
    several of the target's layers, ``fuse``; frozen buffers from the target: ``embed`` [V, H] and ``out``
    [M, H] (its output rows of the draft vocabulary ``vocab`` [M]). It is a
    :class:`mdsd.tree.drafter.Drafter`: ``TreeDecoder(target, head, tree, ...)``."""

    reads_features = True

    def __init__(
        self, config: HeadConfig, embed: torch.Tensor, out: torch.Tensor, vocab: torch.Tensor
    ) -> None:
        super().__init__()
        H = config.layer.hidden_size
        if (
            embed.shape != (config.vocab_size, H)
            or out.shape != (config.draft_vocab, H)
            or vocab.numel() != config.draft_vocab
        ):
            raise ValueError(
                f"the head ({config.vocab_size} tokens, hidden size {H}, draft vocabulary "
                f"{config.draft_vocab}) does not fit embed {tuple(embed.shape)}, out {tuple(out.shape)}, "
                f"vocab {tuple(vocab.shape)}"
            )
        self.head_config = config
        self.fc = nn.Linear(2 * H, H, bias=False)
        layers = len(config.feature_layers)
        self.fuse = nn.Linear(layers * H, H, bias=False) if layers else None
        self.layer = DecoderLayer(config.layer)
        self.register_buffer("embed", embed.detach(), persistent=False)
        self.register_buffer("out", out.detach(), persistent=False)
        self.register_buffer("vocab", vocab.detach().long(), persistent=False)

    # -- making one --------------------------------------------------------------------------------------

    @classmethod
    def from_target(
        cls,
        target: nn.Module,
        vocab: torch.Tensor,
        intermediate_size: int | None = None,
        describe: dict | None = None,
        feature_layers: tuple[int, ...] = (),
    ) -> FeatureHead:
        """A fresh head for ``target`` (a ``transformers`` Llama / Qwen2 causal LM) with draft vocabulary
        ``vocab`` [M] (token ids): its layer initialised from the target's last layer (``intermediate_size``:
        a narrower MLP, its first units), its input map passing the feature through (W_in = [0 | I]) and,
        reading the target's ``feature_layers``, its fuse map passing the last of them through.
        ``describe``: the target's :func:`mdsd.hf.describe_model` (its name and weights digest)."""
        vocab = _check_vocab(vocab, target.get_output_embeddings().weight.shape[0])
        widest = int(target.config.intermediate_size)
        if intermediate_size is not None and not 0 < intermediate_size <= widest:
            raise ValueError(
                f"--intermediate-size: a head's MLP takes the first units of the target's last layer's, so "
                f"1..{widest} here; got {intermediate_size}"
            )
        config = HeadConfig(
            layer=LayerShape.of_config(target.config, intermediate_size),
            vocab_size=int(target.get_output_embeddings().weight.shape[0]),
            draft_vocab=int(vocab.numel()),
            target=(describe or {}).get("name", getattr(target.config, "_name_or_path", "") or ""),
            target_weights=(describe or {}).get("weights_sha256", ""),
            family=str(getattr(target.config, "model_type", "")),
            feature_layers=tuple(feature_layers),
        )
        check_target(config, target)
        head = cls(config, *_frozen(target, vocab), vocab)
        layer = target.get_decoder().layers[-1]
        head.layer.load_state_dict(DecoderLayer.from_state(config.layer, layer.state_dict()).state_dict())
        H = config.layer.hidden_size
        with torch.no_grad():
            head.fc.weight.zero_()
            head.fc.weight[:, H:] = torch.eye(H)
            if head.fuse is not None:
                head.fuse.weight.zero_()
                head.fuse.weight[:, -H:] = torch.eye(H)
        param = next(target.parameters())
        return head.to(param.device, param.dtype)

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``head.safetensors`` and ``head.json`` into ``folder`` (created)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file({**state, "vocab": self.vocab.cpu().contiguous()}, str(folder / "head.safetensors"))
        (folder / "head.json").write_text(json.dumps(self.head_config.to_json(), indent=2) + "\n")
        return folder

    @classmethod
    def load(
        cls, folder: str | os.PathLike, target: nn.Module, target_weights: str | None = None
    ) -> FeatureHead:
        """The head saved in ``folder``, for ``target`` (``ValueError`` naming what does not match: hidden
        size, vocabulary, family, or the target's weights digest ``target_weights`` where both are known)."""
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / "head.json").is_file() or not (folder / "head.safetensors").is_file():
            raise FileNotFoundError(f"{folder}: no head (head.json and head.safetensors)")
        config = HeadConfig.from_json(json.loads((folder / "head.json").read_text()), str(folder))
        check_target(config, target, target_weights)
        try:
            state = load_file(str(folder / "head.safetensors"))
        except Exception as err:  # noqa: BLE001 (safetensors raises its own errors for a damaged file)
            raise ValueError(f"{folder}/head.safetensors: not a whole weights file ({err})") from None
        vocab = _check_vocab(state.pop("vocab"), config.vocab_size)
        head = cls(config, *_frozen(target, vocab), vocab)
        try:
            head.load_state_dict(state)
        except RuntimeError as err:
            raise ValueError(f"{folder}: the weights do not fit its head.json ({err})") from None
        return head.to(next(target.parameters()).device, next(target.parameters()).dtype)

    # -- the computation ---------------------------------------------------------------------------------

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target's decoder layers whose outputs it reads, concatenated; () for the final hidden state."""
        return self.head_config.feature_layers

    def read(self, features: torch.Tensor) -> torch.Tensor:
        """Features [..., H] as the layer's input map takes them: the target's several layers [..., n·H]
        fused (W_fuse), a width-H feature (the target's final state, or the head's own g) as it is."""
        features = features.to(self.fc.weight.dtype)
        if self.fuse is not None and features.shape[-1] == self.fuse.in_features:
            return self.fuse(features)
        return features

    def inputs(self, ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """The layer's inputs W_in [e(x_t); f_{t-1}] [B, Q, H] of tokens ``ids`` [B, Q] and their features
        (:meth:`read`)."""
        return self.fc(torch.cat([self.embed[ids], self.read(features)], dim=-1))

    def forward(self, ids: torch.Tensor, features: torch.Tensor, positions: torch.Tensor) -> tuple:
        """Whole sequences (training): the predicted features g [B, Q, H] and the logits on the draft
        vocabulary [B, Q, M] of tokens ``ids`` [B, Q] with features ``features`` [B, Q, H] or [B, Q, n·H]
        (each token's: the feature of the position before it) at ``positions`` [B, Q], causally."""
        g = self.layer(self.inputs(ids, features), positions)
        return g, g @ self.out.T

    def draft_logits(self, g: torch.Tensor, temperature: float) -> torch.Tensor:
        """Logits over the whole vocabulary [..., V] at temperature T from features g [..., H]: the draft
        vocabulary's divided by T (as they are at T = 0 and 1), :data:`FILL` elsewhere."""
        return widened(g @ self.out.T, self.vocab, self.head_config.vocab_size, temperature)

    def matmul_weights(self) -> list[torch.Tensor]:
        """The matrices it multiplies besides its linear layers: its output rows (:mod:`mdsd.costs`)."""
        return [self.out]

    # -- the drafter protocol (mdsd.tree.drafter.Drafter) ------------------------------------------------

    @property
    def config(self) -> dict:
        """What the decoder's memory estimate reads: one layer."""
        s = self.head_config.layer
        return {
            "num_hidden_layers": 1,
            "num_attention_heads": s.heads,
            "num_key_value_heads": s.kv_heads,
            "head_dim": s.head_dim,
            "vocab_size": self.head_config.vocab_size,
        }

    def vocab_size(self) -> int:
        return self.head_config.vocab_size

    @property
    def stack(self) -> list[DecoderLayer]:
        """Its layers (:class:`mdsd.drafters.cache.LayerCache`): one."""
        return [self.layer]

    def eager_cache(self, rows: int, capacity: int, temperature: float) -> LayerCache:
        return LayerCache(self, rows, capacity, temperature)

    def static_cache(self, rows: int, capacity: int, temperature: float) -> LayerCache:
        return LayerCache(self, rows, capacity, temperature)

    def static_obstacle(self) -> str | None:
        return None


def check_target(config: HeadConfig, target: nn.Module, target_weights: str | None = None) -> None:
    """Refuse a target the head was not made for, naming what differs."""
    hidden = int(target.get_output_embeddings().weight.shape[1])
    vocab = int(target.get_output_embeddings().weight.shape[0])
    family = str(getattr(getattr(target, "config", None), "model_type", ""))
    depth = len(target.get_decoder().layers)
    if any(i >= depth for i in config.feature_layers):
        raise ValueError(
            f"the head reads the target's layers {list(config.feature_layers)}; this target has {depth} "
            f"(0 to {depth - 1})"
        )
    for what, mine, theirs in (
        ("hidden size", config.layer.hidden_size, hidden),
        ("vocabulary", config.vocab_size, vocab),
        ("model family", config.family, family),
    ):
        if mine != theirs:
            raise ValueError(f"the head reads a target of {what} {mine}; this target's is {theirs}")
    if target_weights and config.target_weights and target_weights != config.target_weights:
        raise ValueError(
            f"the head was trained on the target {config.target!r} (weights "
            f"{config.target_weights[:12]}...); this target's weights are {target_weights[:12]}...: train a "
            "head for it"
        )


def _check_vocab(vocab: torch.Tensor, size: int) -> torch.Tensor:
    vocab = torch.as_tensor(vocab).long().flatten()
    if vocab.numel() == 0:
        raise ValueError("the draft vocabulary is empty: a head needs at least one token to draft")
    if int(vocab.min()) < 0 or int(vocab.max()) >= size or vocab.unique().numel() != vocab.numel():
        raise ValueError(f"the draft vocabulary must hold distinct token ids in [0, {size})")
    return vocab


def _frozen(target: nn.Module, vocab: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's embedding [V, H] and its output rows of ``vocab`` [M, H] (no copy of the embedding)."""
    embed = target.get_input_embeddings().weight
    out = target.get_output_embeddings().weight[vocab.to(embed.device)]
    return embed, out
