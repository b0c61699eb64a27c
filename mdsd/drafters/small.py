"""A small drafter: a few decoder layers of modest width with the target's tokenizer (seed 004's drafters).

Seed 004 (Yi, Kim et al., 2024) drafts with small causal LMs of the target's tokenizer, pretrained on generic
text and finetuned on one task's self-distilled data (:mod:`mdsd.drafters.stages`). mdsd's small drafter
reads token x_t through the target's own (frozen) input embedding and a learned map to its width h, runs L
pre-norm decoder layers (:class:`~mdsd.drafters.layer.DecoderLayer`), and reads its output with learned rows
of a draft vocabulary M:

.. math::

    x^{(0)}_t = W_{in}\\, e(x_t), \\qquad x^{(l)} = \\mathrm{layer}_l(x^{(l-1)}), \\qquad
    q(\\cdot \\mid x_{\\le t}) = \\mathrm{softmax}\\bigl(U\\, \\mathrm{RMSNorm}(x^{(L)}_t) / T\\bigr)
    \\text{ on } M, \\quad 0 \\text{ off } M,

with e [V, E] the target's embedding (every token of the vocabulary has an input; none is trained), W_in
[h, E] and U [|M|, h]. Most of a small LM's parameters would be its embedding and output layer over the
whole vocabulary; here the input side is the target's and the output side only the draft vocabulary (the
tokens the training text uses most: FR-Spec's observation that most rows are almost never drawn). Its
forward at batch 1 reads W_in, the layers and U: a 4-layer drafter of width 512 with |M| = 32,768 reads
about 2% of the 1.5B target's weights, so its captured GPU time is set by its L layers' kernel launches
rather than their bytes (BENCHMARKS.md). Every verifier stays lossless: q is whatever the drafter says.

A fresh drafter (:meth:`SmallDrafter.fresh`) starts with W_in and U on the principal directions of the
target's input embedding and of its output rows of M (so that its width starts with the directions that
separate tokens most) and random layers. It is saved as ``drafter.safetensors`` (W_in, the layers, the norm,
U and M) and ``drafter.json`` (its shape and the target and tokenizer it belongs to); loading takes e from
the target after checking the target's family, sizes, weights digest and tokenizer against the file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from mdsd.drafters.cache import LayerCache
from mdsd.drafters.head import _check_vocab, widened
from mdsd.drafters.layer import DecoderLayer, LayeredConfig, LayerShape, RMSNorm, rotary
from mdsd.validation import check_positive_ints

__all__ = ["SmallConfig", "SmallDrafter", "is_small", "tokenizer_digest", "CONFIG", "WEIGHTS"]

CONFIG = "drafter.json"
WEIGHTS = "drafter.safetensors"


@dataclass(frozen=True)
class SmallConfig(LayeredConfig):
    """What a small drafter is: its layers' shape and count, its draft vocabulary's size, and the target
    (and tokenizer) whose embedding it reads."""

    WHAT = "a small drafter's config"  # drafter.json is format LayeredConfig.FORMAT

    layer: LayerShape
    layers: int
    vocab_size: int  # the target's vocabulary V
    embed_size: int  # the target's embedding width E
    draft_vocab: int  # |M|
    target: str  # the target's name
    target_weights: str  # the target's weights sha256 (mdsd.hf.describe_model), or "" if unknown
    tokenizer: str  # tokenizer_digest of the target's tokenizer, or "" if unknown
    family: str  # the target's model_type

    def shape(self) -> dict:
        """Its architecture (what a finetuning run must match): width, layers, heads, MLP, |M|."""
        s = self.layer
        return {
            "hidden_size": s.hidden_size,
            "layers": self.layers,
            "heads": s.heads,
            "kv_heads": s.kv_heads,
            "intermediate_size": s.intermediate_size,
            "draft_vocab": self.draft_vocab,
        }


def is_small(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a small drafter (``drafter.json``).

    >>> is_small("/nonexistent")
    False
    """
    return (Path(path).expanduser() / CONFIG).is_file()


def tokenizer_digest(tokenizer) -> str:
    """sha256 of a tokenizer's vocabulary (token → id, sorted) and special tokens: two tokenizers with one
    digest split every text alike into the same ids."""
    vocab = sorted(tokenizer.get_vocab().items())
    special = sorted(map(str, getattr(tokenizer, "all_special_tokens", [])))
    return hashlib.sha256(json.dumps([vocab, special], ensure_ascii=False).encode()).hexdigest()


class SmallDrafter(nn.Module):
    """The drafter of the module docstring. Trainable: ``fc`` (W_in), ``layers``, ``norm``, ``out`` (U);
    frozen: ``embed`` [V, E] (the target's, not saved) and ``vocab`` [M]. A
    :class:`mdsd.tree.drafter.Drafter`: ``TreeDecoder(target, drafter, tree, ...)`` on both paths."""

    reads_features = False

    def __init__(self, config: SmallConfig, embed: torch.Tensor, vocab: torch.Tensor) -> None:
        super().__init__()
        H = config.layer.hidden_size
        if embed.shape != (config.vocab_size, config.embed_size) or vocab.numel() != config.draft_vocab:
            raise ValueError(
                f"the drafter ({config.vocab_size} tokens of width {config.embed_size}, draft vocabulary "
                f"{config.draft_vocab}) does not fit embed {tuple(embed.shape)}, vocab {tuple(vocab.shape)}"
            )
        if config.layers < 1:
            raise ValueError(f"layers must be at least 1, got {config.layers}")
        self.small_config = config
        self.fc = nn.Linear(config.embed_size, H, bias=False)
        self.layers = nn.ModuleList(DecoderLayer(config.layer) for _ in range(config.layers))
        self.norm = RMSNorm(H, config.layer.rms_norm_eps)
        self.out = nn.Parameter(torch.zeros(config.draft_vocab, H))
        self.register_buffer("embed", embed.detach(), persistent=False)
        self.register_buffer("vocab", vocab.detach().long(), persistent=False)

    # -- making one --------------------------------------------------------------------------------------

    @classmethod
    def fresh(
        cls,
        target: nn.Module,
        vocab: torch.Tensor,
        hidden_size: int = 512,
        layers: int = 4,
        heads: int = 8,
        kv_heads: int = 2,
        intermediate_size: int = 1536,
        describe: dict | None = None,
        tokenizer: str = "",
        seed: int = 0,
    ) -> SmallDrafter:
        """A new drafter for ``target`` (a ``transformers`` Llama / Qwen2 causal LM) with draft vocabulary
        ``vocab`` [M] (module docstring): W_in and U on principal directions, the layers random (normal, std
        0.02; the output maps of attention and MLP scaled by 1/√(2L)), seeded. ``describe``: the target's
        :func:`mdsd.hf.describe_model`; ``tokenizer``: its :func:`tokenizer_digest`."""
        embed = target.get_input_embeddings().weight
        out_rows = target.get_output_embeddings().weight
        vocab = _check_vocab(vocab, out_rows.shape[0])
        check_positive_ints({"hidden_size": hidden_size, "heads": heads, "kv_heads": kv_heads})
        if hidden_size % heads or heads % kv_heads or (hidden_size // heads) % 2:
            raise ValueError(
                f"hidden_size {hidden_size} must split into {heads} heads of even size, shared by {kv_heads} "
                "key/value heads"
            )
        if hidden_size > embed.shape[1]:
            raise ValueError(
                f"hidden_size {hidden_size} exceeds the target's width {embed.shape[1]}: a small drafter is "
                "narrower"
            )
        base = LayerShape.of_config(target.config)
        shape = LayerShape(
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=hidden_size // heads,
            rms_norm_eps=base.rms_norm_eps,
            rope_theta=base.rope_theta,
        )
        config = SmallConfig(
            layer=shape,
            layers=layers,
            vocab_size=int(out_rows.shape[0]),
            embed_size=int(embed.shape[1]),
            draft_vocab=int(vocab.numel()),
            target=(describe or {}).get("name", getattr(target.config, "_name_or_path", "") or ""),
            target_weights=(describe or {}).get("weights_sha256", ""),
            tokenizer=tokenizer,
            family=str(getattr(target.config, "model_type", "")),
        )
        drafter = cls(config, embed, vocab)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in drafter.layers.named_parameters():
                if name.endswith("layernorm.weight"):
                    continue
                if name.endswith(".bias"):
                    p.zero_()
                    continue
                std = 0.02 / (
                    math.sqrt(2 * layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1
                )
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            drafter.fc.weight.copy_(_principal(embed[vocab.to(embed.device)], hidden_size).T)
            rows = out_rows[vocab.to(out_rows.device)].float()
            drafter.out.copy_(rows @ _principal(rows, hidden_size))
        param = next(target.parameters())
        return drafter.to(param.device, param.dtype)

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``drafter.safetensors`` and ``drafter.json`` into ``folder`` (created)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file({**state, "vocab": self.vocab.cpu().contiguous()}, str(folder / WEIGHTS))
        (folder / CONFIG).write_text(json.dumps(self.small_config.to_json(), indent=2) + "\n")
        return folder

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike,
        target: nn.Module,
        target_weights: str | None = None,
        tokenizer: str | None = None,
    ) -> SmallDrafter:
        """The drafter saved in ``folder``, for ``target`` (``ValueError`` naming what does not match: the
        family, vocabulary or embedding width, the target's weights digest ``target_weights`` or the
        tokenizer digest ``tokenizer``, where both sides know them)."""
        from safetensors.torch import load_file

        config = read_config(folder)
        check_target(config, target, target_weights, tokenizer)
        try:
            state = load_file(str(Path(folder) / WEIGHTS))
        except Exception as err:  # noqa: BLE001 (safetensors raises its own errors for a damaged file)
            raise ValueError(f"{folder}/{WEIGHTS}: not a whole weights file ({err})") from None
        vocab = _check_vocab(state.pop("vocab"), config.vocab_size)
        drafter = cls(config, target.get_input_embeddings().weight, vocab)
        try:
            drafter.load_state_dict(state)
        except RuntimeError as err:
            raise ValueError(f"{folder}: the weights do not fit its {CONFIG} ({err})") from None
        param = next(target.parameters())
        return drafter.to(param.device, param.dtype)

    def extended(self, target: nn.Module, extra: torch.Tensor) -> SmallDrafter:
        """A copy with the tokens ``extra`` added to its draft vocabulary. Their output rows are the target's
        output rows of them through the least-squares linear map A [E, h] that takes the target's rows of
        the present vocabulary closest to this drafter's (min ‖W_out[M] A − U‖): the new rows stand to the
        old ones as the target's do. Every other weight, and every present row, is kept."""
        extra = torch.as_tensor(extra).long().flatten()
        if torch.isin(extra, self.vocab).any() or extra.unique().numel() != extra.numel():
            raise ValueError("extra must be distinct tokens outside the draft vocabulary")
        vocab = torch.cat([self.vocab.cpu(), extra.cpu()]).sort().values
        vocab = _check_vocab(vocab, self.small_config.vocab_size)
        rows = target.get_output_embeddings().weight.detach().double().cpu()
        old = self.out.detach().double().cpu()
        fit = torch.linalg.lstsq(rows[self.vocab.cpu()], old).solution  # [E, h]
        out = torch.empty(vocab.numel(), old.shape[1], dtype=torch.float64)
        at = torch.searchsorted(vocab, self.vocab.cpu())
        out[at] = old
        fresh = torch.ones(vocab.numel(), dtype=torch.bool)
        fresh[at] = False
        out[fresh] = rows[vocab[fresh]] @ fit
        config = replace(self.small_config, draft_vocab=int(vocab.numel()))
        grown = SmallDrafter(config, self.embed, vocab)
        state = {k: v for k, v in self.state_dict().items() if k != "out"}
        grown.load_state_dict(state | {"out": out.to(self.out.dtype)})
        return grown.to(self.out.device, self.out.dtype)

    # -- the computation ---------------------------------------------------------------------------------

    def inputs(self, ids: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:  # noqa: ARG002
        """The first layer's inputs W_in e(x_t) [B, Q, h] of tokens ``ids`` [B, Q]."""
        return self.fc(self.embed[ids].to(self.fc.weight.dtype))

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Whole sequences (training): the logits on the draft vocabulary [B, Q, M] of tokens ``ids`` [B, Q]
        at ``positions`` [B, Q]; ``mask`` [B, Q, Q] (True: token i sees token j) for several sequences
        packed in a row, causal within each; None: one causal sequence per row."""
        x = self.inputs(ids)
        if mask is not None:
            groups = self.small_config.layer.heads // self.small_config.layer.kv_heads
            B, Q, _ = mask.shape
            mask = mask[:, None].expand(B, groups, Q, Q).reshape(B, 1, groups * Q, Q)
        shape = self.small_config.layer
        cos, sin = rotary(positions, shape.head_dim, shape.rope_theta, x.dtype)
        for layer in self.layers:
            q, k, v = layer.project(x, cos, sin)
            x = layer.finish(x, q, k, v, mask)
        return self.norm(x) @ self.out.T

    def draft_logits(self, g: torch.Tensor, temperature: float) -> torch.Tensor:
        """Logits over the whole vocabulary [..., V] at temperature T from the last layer's outputs g
        [..., h] (:func:`~mdsd.drafters.head.widened`)."""
        return widened(self.norm(g) @ self.out.T, self.vocab, self.small_config.vocab_size, temperature)

    def matmul_weights(self) -> list[torch.Tensor]:
        """The matrices it multiplies besides its linear layers: its output rows U (:mod:`mdsd.costs`)."""
        return [self.out]

    # -- the drafter protocol (mdsd.tree.drafter.Drafter) ------------------------------------------------

    @property
    def stack(self) -> list[DecoderLayer]:
        """Its layers (:class:`mdsd.drafters.cache.LayerCache`)."""
        return list(self.layers)

    @property
    def config(self) -> dict:
        """What the decoder's memory estimate reads."""
        c, s = self.small_config, self.small_config.layer
        return {
            "num_hidden_layers": c.layers,
            "num_attention_heads": s.heads,
            "num_key_value_heads": s.kv_heads,
            "head_dim": s.head_dim,
            "vocab_size": c.vocab_size,
        }

    def vocab_size(self) -> int:
        return self.small_config.vocab_size

    def eager_cache(self, rows: int, capacity: int, temperature: float) -> LayerCache:
        return LayerCache(self, rows, capacity, temperature)

    def static_cache(self, rows: int, capacity: int, temperature: float) -> LayerCache:
        return LayerCache(self, rows, capacity, temperature)

    def static_obstacle(self) -> str | None:
        return None


def read_config(folder: str | os.PathLike) -> SmallConfig:
    """The :class:`SmallConfig` saved in ``folder`` (``FileNotFoundError`` if it holds no drafter)."""
    folder = Path(folder)
    if not (folder / CONFIG).is_file() or not (folder / WEIGHTS).is_file():
        raise FileNotFoundError(f"{folder}: no small drafter ({CONFIG} and {WEIGHTS})")
    return SmallConfig.from_json(json.loads((folder / CONFIG).read_text()), str(folder))


def check_target(
    config: SmallConfig, target: nn.Module, target_weights: str | None = None, tokenizer: str | None = None
) -> None:
    """Refuse a target (or tokenizer) the drafter was not made for, naming what differs."""
    family = str(getattr(getattr(target, "config", None), "model_type", ""))
    embed = target.get_input_embeddings().weight
    vocab = int(target.get_output_embeddings().weight.shape[0])
    for what, mine, theirs in (
        ("model family", config.family, family),
        ("vocabulary", config.vocab_size, vocab),
        ("embedding width", config.embed_size, int(embed.shape[1])),
    ):
        if mine != theirs:
            raise ValueError(f"the drafter reads a target of {what} {mine}; this target's is {theirs}")
    if tokenizer and config.tokenizer and tokenizer != config.tokenizer:
        raise ValueError(
            f"the drafter was made with another tokenizer (digest {config.tokenizer[:12]}...) than the "
            f"target's ({tokenizer[:12]}...): its token ids would mean other text"
        )
    if target_weights and config.target_weights and target_weights != config.target_weights:
        raise ValueError(
            f"the drafter reads the embedding of the target {config.target!r} (weights "
            f"{config.target_weights[:12]}...); this target's weights are {target_weights[:12]}..."
        )


def _principal(rows: torch.Tensor, size: int) -> torch.Tensor:
    """The top ``size`` principal directions [E, size] (orthonormal columns) of ``rows`` [N, E]; zero columns
    past the N directions that N rows have."""
    rows = rows.detach().float()
    _, _, vh = torch.linalg.svd(rows - rows.mean(0), full_matrices=False)
    out = rows.new_zeros(rows.shape[1], size)
    out[:, : min(size, vh.shape[0])] = vh[:size].T
    return out
