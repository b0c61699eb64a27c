"""One pre-norm decoder layer of the Llama / Qwen2 family in plain torch: what a drafter head is made of.

The layer computes, for inputs x [B, Q, H] at positions t,

.. math::

    h = x + W_o \\,\\mathrm{attn}\\bigl(\\mathrm{rope}_t(W_q \\bar x), \\mathrm{rope}_t(W_k \\bar x),
    W_v \\bar x\\bigr), \\qquad y = h + W_d\\bigl(\\mathrm{silu}(W_g \\bar h) \\odot W_u \\bar h\\bigr),

with :math:`\\bar x = \\mathrm{RMSNorm}(x)`, grouped-query attention (each key/value head shared by
``heads / kv_heads`` query heads) and rotary embeddings in the halves convention of Llama. Its weights carry
the names of a ``transformers`` decoder layer (``self_attn.q_proj``, ``mlp.gate_proj``, ...), so a target's
layer initialises it by its state dict (:meth:`DecoderLayer.from_state`), and no ``transformers`` import is
needed here. The attention is given as keys and values with a boolean mask, so the same layer runs a whole
training sequence (causal) and a decoding step over a cache (:mod:`mdsd.drafters.head`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LayerShape", "LayeredConfig", "RMSNorm", "DecoderLayer", "rotary"]


@dataclass(frozen=True)
class LayerShape:
    """The sizes of a decoder layer (those of the target it reads)."""

    hidden_size: int
    intermediate_size: int
    heads: int
    kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    qkv_bias: bool = False  # Qwen2: biases on the query, key and value projections

    @classmethod
    def of_config(cls, config: object, intermediate_size: int | None = None) -> LayerShape:
        """The shape of a ``transformers`` Llama / Qwen2 config's layers (``intermediate_size``: another MLP
        width)."""
        heads = int(config.num_attention_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        theta = getattr(config, "rope_theta", None)
        if theta is None:  # transformers 5 keeps it in rope_parameters
            theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        return cls(
            hidden_size=int(config.hidden_size),
            intermediate_size=int(intermediate_size or config.intermediate_size),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(head_dim),
            rms_norm_eps=float(getattr(config, "rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            qkv_bias=getattr(config, "model_type", "") == "qwen2"
            or bool(getattr(config, "attention_bias", False)),
        )


class LayeredConfig:
    """JSON for a drafter's config dataclass whose ``layer`` field is a :class:`LayerShape`: its fields and a
    ``format`` number (``FORMAT``); reading anything else names the file (``where``) and what it is not."""

    FORMAT = 1
    WHAT = "a drafter's config"

    def to_json(self) -> dict:
        return {"format": self.FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict, where: str):
        try:
            if data.get("format") != cls.FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {cls.FORMAT}")
            fields = {k: v for k, v in data.items() if k != "format"}
            return cls(**{**fields, "layer": LayerShape(**fields["layer"])})
        except (TypeError, KeyError, ValueError) as err:
            raise ValueError(f"{where}: not {cls.WHAT} this mdsd reads ({err})") from None


class RMSNorm(nn.Module):
    """x / rms(x) · w, computed in float32 (as the Llama family computes it)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rotary(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple:
    """(cos, sin) [B, Q, head_dim] of rotary embeddings at ``positions`` [B, Q] (Llama's halves layout)."""
    inv = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    )
    angles = positions[..., None].float() * inv  # [B, Q, head_dim / 2]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, Q, D] rotated by cos, sin [B, Q, D]."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class _Attention(nn.Module):
    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        H, D = shape.hidden_size, shape.head_dim
        self.q_proj = nn.Linear(H, shape.heads * D, bias=shape.qkv_bias)
        self.k_proj = nn.Linear(H, shape.kv_heads * D, bias=shape.qkv_bias)
        self.v_proj = nn.Linear(H, shape.kv_heads * D, bias=shape.qkv_bias)
        self.o_proj = nn.Linear(shape.heads * D, H, bias=False)


class _MLP(nn.Module):
    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.up_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.down_proj = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """One decoder layer (module docstring) of ``shape``."""

    def __init__(self, shape: LayerShape) -> None:
        super().__init__()
        self.shape = shape
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.self_attn = _Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = _MLP(shape)

    @classmethod
    def from_state(cls, shape: LayerShape, state: dict[str, torch.Tensor]) -> DecoderLayer:
        """The layer with the weights of a ``transformers`` decoder layer's ``state_dict()`` (its MLP cut to
        the first ``shape.intermediate_size`` units where that is narrower)."""
        layer = cls(shape)
        own = layer.state_dict()
        for name, value in state.items():
            if name not in own:
                continue
            if name.startswith("mlp.") and value.shape != own[name].shape:  # a narrower MLP: its first units
                value = (
                    value[: shape.intermediate_size]
                    if name != "mlp.down_proj.weight"
                    else value[:, : shape.intermediate_size]
                )
            own[name] = value.detach().to(own[name].dtype)
        layer.load_state_dict(own)
        return layer

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple:
        """Queries [B, kv_heads, groups · Q, D] (the query heads sharing a key/value head stacked as its
        rows), keys and values [B, kv_heads, Q, D] of the normalised inputs x [B, Q, H]."""
        B, Q, _ = x.shape
        s, a = self.shape, self.self_attn
        y = self.input_layernorm(x)
        q = _rotate(a.q_proj(y).view(B, Q, s.heads, s.head_dim).transpose(1, 2), cos, sin)
        k = _rotate(a.k_proj(y).view(B, Q, s.kv_heads, s.head_dim).transpose(1, 2), cos, sin)
        v = a.v_proj(y).view(B, Q, s.kv_heads, s.head_dim).transpose(1, 2)
        return q.reshape(B, s.kv_heads, (s.heads // s.kv_heads) * Q, s.head_dim), k, v

    def finish(self, x: torch.Tensor, q, keys, values, mask: torch.Tensor | None) -> torch.Tensor:
        """The layer's output for inputs x [B, Q, H] given its queries (:meth:`project`), the keys and values
        they attend to [B, kv_heads, S, D] and ``mask`` [B, 1, groups · Q, S] (True: attend; None: causal,
        keys = the inputs' own)."""
        B, Q, _ = x.shape
        s = self.shape
        groups = s.heads // s.kv_heads
        if mask is None:  # causal over the inputs themselves: each query row t of a group sees keys <= t
            t = torch.arange(Q, device=x.device)
            mask = (t[None, :] <= t[:, None]).repeat(groups, 1)[None, None]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=s.head_dim**-0.5)
        out = out.reshape(B, s.heads, Q, s.head_dim).transpose(1, 2).reshape(B, Q, -1)
        h = x + self.self_attn.o_proj(out)
        return h + self.mlp(self.post_attention_layernorm(h))

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The layer over whole sequences x [B, Q, H] at ``positions`` [B, Q], causally."""
        cos, sin = rotary(positions, self.shape.head_dim, self.shape.rope_theta, x.dtype)
        q, k, v = self.project(x, cos, sin)
        return self.finish(x, q, k, v, None)
