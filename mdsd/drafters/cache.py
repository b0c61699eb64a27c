"""The key/value cache of mdsd's own drafters: a stack of decoder layers over static keys and values.

A drafter made of :class:`~mdsd.drafters.layer.DecoderLayer` s (the feature head: one layer over the target's
features; the small drafter: a few layers over its own embedding) keeps, per layer, preallocated keys and
values [rows, kv_heads, capacity, head_dim] written at explicit slots (the layout of
:class:`mdsd.tree.static.StaticLM`): one cache for both decoder paths, updated in place so that a captured
step reuses it. It implements :class:`mdsd.tree.cache.Cache`; what the drafter contributes is three things:

* ``inputs(ids, features)`` [B, Q, H]: the first layer's inputs (``features``: the target's, for a drafter
  that ``reads_features``; None otherwise);
* ``stack``: its layers, in order;
* ``draft_logits(g, T)`` [B, Q, V]: logits over the target's whole vocabulary at temperature T from the last
  layer's outputs g (:data:`mdsd.drafters.head.FILL` off its draft vocabulary).

The forward returns g as ``hidden`` for a drafter that reads features (below the root it feeds its own g as
the next position's feature), None otherwise.
"""

from __future__ import annotations

import torch
from torch import nn

from mdsd.drafters.layer import rotary
from mdsd.tree.cache import Forward, finite

__all__ = ["LayerCache"]


class LayerCache:
    """A drafter's layers over their own static keys and values (module docstring)."""

    def __init__(self, drafter: nn.Module, rows: int, capacity: int, temperature: float = 1.0) -> None:
        layers = list(drafter.stack)
        s = layers[0].shape
        param = next(drafter.parameters())
        self.drafter, self.layers, self.capacity, self.temperature = drafter, layers, capacity, temperature
        self.reads_features = bool(drafter.reads_features)
        self.groups = s.heads // s.kv_heads
        # one buffer per layer (not views of one): compiled steps keep their writes in place
        shape = (rows, s.kv_heads, capacity, s.head_dim)
        self.keys = [torch.zeros(shape, dtype=param.dtype, device=param.device) for _ in layers]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.length = torch.zeros(rows, dtype=torch.long, device=param.device)
        self.local = 0
        self.model = drafter  # what mdsd.tree.prefill reads the dtype from

    def begin(self) -> None:
        self.local = 0

    def reset(self) -> None:
        self.length.zero_()
        self.local = 0

    def live(self) -> torch.Tensor:
        return self.length

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` [B'] (the eager path drops finished rows)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.length = self.length[rows]

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        visible: torch.Tensor,
        positions: torch.Tensor,
        keep: int,
        block_valid: torch.Tensor,  # noqa: ARG002 (dead slots are those a later mask leaves out)
        local: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> Forward:
        """:meth:`mdsd.tree.cache.Cache.forward`: the draft logits of the block's last ``keep`` tokens (and,
        for a feature reader, the last layer's outputs there as ``hidden``) from tokens ``ids`` [B, Q]."""
        B, Q = ids.shape
        S, C = self.local, self.capacity
        step = visible if local is None else torch.cat([local, visible], dim=2)  # [B, Q, S + Q]
        rel = torch.arange(C, device=ids.device)[None, :] - self.length[:, None]  # [B, C]
        inside = (rel >= 0) & (rel < S + Q)
        seen = step.gather(2, rel.clamp(0, S + Q - 1)[:, None, :].expand(B, Q, C))
        allowed = (rel < 0)[:, None, :] | (inside[:, None, :] & seen)  # [B, Q, C]
        mask = allowed[:, None, None].expand(B, 1, self.groups, Q, C).reshape(B, 1, self.groups * Q, C)
        x = self.drafter.inputs(ids, features)
        shape = self.layers[0].shape
        cos, sin = rotary(positions, shape.head_dim, shape.rope_theta, x.dtype)
        at = (self.length[:, None] + S + torch.arange(Q, device=ids.device))[:, None, :, None]  # [B, 1, Q, 1]
        at = at.expand(B, shape.kv_heads, Q, shape.head_dim)
        for layer, keys, values in zip(self.layers, self.keys, self.values, strict=True):
            q, k, v = layer.project(x, cos, sin)
            keys.scatter_(2, at, k)
            values.scatter_(2, at, v)
            x = layer.finish(x, q, keys, values, mask)
        g = x[:, -keep:]
        self.local = S + Q
        logits, bad = finite(self.drafter.draft_logits(g, self.temperature))
        return Forward(logits, bad, g if self.reads_features else None)

    @torch.no_grad()
    def commit(self, index: torch.Tensor, count: torch.Tensor) -> None:
        """Keep the step's slots ``index[b, :count[b]]`` (offsets into the step's region), in order."""
        B, W = index.shape
        source = (self.length[:, None] + index).clamp(max=self.capacity - 1)  # [B, W]
        target = (self.length[:, None] + torch.arange(W, device=index.device)).clamp(max=self.capacity - 1)
        for kv in (*self.keys, *self.values):
            shape = (B, kv.shape[1], W, kv.shape[3])
            moved = kv.gather(2, source[:, None, :, None].expand(shape))  # a copy, made before the write
            kv.scatter_(2, target[:, None, :, None].expand(shape), moved)
        self.length.add_(count)
        self.local = 0
