"""A Llama / Qwen2-family causal LM over static key/value caches: the decoder's fast path.

The model's own modules (embedding, norms, projections, rotary embedding, MLPs, output layer: the same
weights, loaded once by ``transformers``) run with mdsd's attention over preallocated caches, so that a
forward has a fixed shape and never allocates: what a CUDA graph or ``torch.compile`` can capture.

**Layout.** Keys and values of every layer live in one ``[2, layers, B, kv_heads, C, head_dim]`` buffer. Row b
holds its committed entries in slots ``[0, length[b])`` — dense, so a slot's index is its token's position
— and a step's entries right after them (the step's region, :mod:`mdsd.tree.cache`). A forward of Q tokens
writes them at slots ``length[b] + local + i`` (``local``: the step's slots written so far, a host int
fixed by the plan) and attends with a boolean mask over all C slots:

.. math:: \\text{allowed}[b, i, s] = [s < \\ell_b] \\lor
          [\\ell_b \\le s < \\ell_b + S + Q \\land \\text{step}[b, i, s - \\ell_b]]

with step = [local | visible] over the step's S earlier and Q new slots. :meth:`StaticLM.commit` moves the
kept step slots, in order, to ``[length[b], length[b] + count[b])`` by one gather and one copy over all
layers, keys and values at once, and advances ``length``: the accepted path becomes committed, nothing is
truncated or reallocated, and positions stay equal to slot indices.

Grouped-query attention runs without copying the cache: the query heads that share a key/value head are
stacked as extra query rows of it. Supported: ``model_type`` in :data:`FAMILIES` with full attention
(no sliding window); anything else raises ``ValueError`` naming the eager path (``compile=False``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mdsd.tree.cache import Forward, finite, tempered

__all__ = ["StaticLM", "FAMILIES", "static_obstacle"]

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")  # pre-norm decoders with rotary attention and no extras


def static_obstacle(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot run over mdsd's static caches (the fast path), or None."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    if family not in FAMILIES:
        return f"the fast path runs {', '.join(FAMILIES)} models; this one is {family!r}"
    core = getattr(model, "model", None)
    if core is None or not all(hasattr(core, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return f"{type(model).__name__} does not have the layout of a transformers {family} model"
    if getattr(config, "use_sliding_window", False) or any(
        t != "full_attention" for t in getattr(config, "layer_types", None) or ()
    ):
        return "the fast path does not run sliding-window attention"
    return None


class StaticLM:
    """``model`` over static caches of ``rows`` rows and ``capacity`` slots per row.

    Implements :class:`mdsd.tree.cache.Cache` (logits at ``temperature``; with ``hidden``, also the final
    hidden states or the outputs of ``feature_layers``, as :class:`~mdsd.tree.cache.ModelCache`); ``length``
    [B] (committed entries per row) and the caches are updated in place, so a captured step can reuse them.
    """

    reads_features = False

    def __init__(
        self,
        model: torch.nn.Module,
        rows: int,
        capacity: int,
        temperature: float = 1.0,
        hidden: bool = False,
        feature_layers: tuple[int, ...] = (),
    ) -> None:
        reason = static_obstacle(model)
        if reason is not None:
            raise ValueError(f"{reason}; decode with compile=False (the eager path) instead")
        self.model = model
        config = model.config
        self.layers = list(model.model.layers)
        attn = self.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.kv_heads = int(config.num_key_value_heads)
        self.groups = int(config.num_attention_heads) // self.kv_heads
        self.scale = float(attn.scaling)
        param = next(p for p in model.parameters() if p.is_floating_point())
        shape = (2, len(self.layers), rows, self.kv_heads, capacity, self.head_dim)
        # keys and values in one buffer, written and compacted through its flat view [entries, head_dim] with
        # one linear index (an index_copy_ of head_dim vectors, not indexing by layer, row, head and slot),
        # read through views made where they are read. torch.compile keeps the writes in place only so: a
        # write into a view copies the whole buffer back, and so does a write into a buffer that another
        # tensor the step holds aliases (keys and values kept as views would be)
        self._shape = shape
        self._flat = torch.zeros(math.prod(shape[:-1]), self.head_dim, dtype=param.dtype, device=param.device)
        self.length = torch.zeros(rows, dtype=torch.long, device=param.device)
        # flat index of slot 0 of each (keys or values, layer, row, head) [2, L, B, H, 1], made once
        self._base = (torch.arange(math.prod(shape[:4]), device=param.device) * capacity).view(*shape[:4], 1)
        self.capacity = capacity
        self.local = 0
        self.temperature = temperature
        self.hidden = hidden
        self.feature_layers = tuple(feature_layers)
        # logits / T as (h / T) W: the division runs over [B, Q, hidden], not [B, Q, V], where the model's
        # dtype holds h / T (not float16: h / 1e-3 overflows it; there the float32 logits are divided)
        wide = torch.finfo(param.dtype).max > 1e38
        self._fold = 1.0 / temperature if temperature not in (0.0, 1.0) and wide else None

    # -- the cache interface ----------------------------------------------------------------------------

    def begin(self) -> None:
        """Start a step (step slots written and not committed are forgotten)."""
        self.local = 0

    def reset(self) -> None:
        """Forget every row's entries (a new decode in the same buffers)."""
        self.length.zero_()
        self.local = 0

    def live(self) -> torch.Tensor:
        """Committed entries per row [B] (the position of the row's next token)."""
        return self.length

    @torch.no_grad()  # a cache must never hold an autograd graph (each write would chain the last one's)
    def forward(
        self,
        ids: torch.Tensor,
        visible: torch.Tensor,
        positions: torch.Tensor,
        keep: int,
        block_valid: torch.Tensor,  # noqa: ARG002 (dead slots are those a later mask leaves out)
        local: torch.Tensor | None = None,
        features: torch.Tensor | None = None,  # noqa: ARG002 (a language model reads tokens only)
    ) -> Forward:
        """:meth:`mdsd.tree.cache.ModelCache.forward` over the static caches (same arguments, same
        results)."""
        B, Q = ids.shape
        S = self.local
        step = visible if local is None else torch.cat([local, visible], dim=2)  # [B, Q, S + Q]
        slot = torch.arange(self.capacity, device=ids.device)
        rel = slot[None, :] - self.length[:, None]  # [B, C]: slot offset from the step's region
        inside = (rel >= 0) & (rel < S + Q)
        seen = step.gather(2, rel.clamp(0, S + Q - 1)[:, None, :].expand(B, Q, self.capacity))
        allowed = (rel < 0)[:, None, :] | (inside[:, None, :] & seen)  # [B, Q, C]
        mask = allowed[:, None, None].expand(B, 1, self.groups, Q, self.capacity)
        mask = mask.reshape(B, 1, self.groups * Q, self.capacity)
        write = self.length[:, None, None] + S + torch.arange(Q, device=ids.device)  # [B, 1, Q] slots
        core = self.model.model
        h = core.embed_tokens(ids)
        cos, sin = core.rotary_emb(h, positions)
        outputs = {}
        for i, layer in enumerate(self.layers):
            h = h + self._attention(i, layer.self_attn, layer.input_layernorm(h), cos, sin, write, mask)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
            if i in self.feature_layers:
                outputs[i] = h[:, -keep:]
        h = core.norm(h[:, -keep:])
        self.local = S + Q
        hidden = h if self.hidden else None
        if self.hidden and self.feature_layers:
            hidden = torch.cat([outputs[i] for i in self.feature_layers], dim=-1)
        if self._fold is not None:
            return Forward(*finite(self.model.get_output_embeddings()(h * self._fold)), hidden)
        return Forward(*finite(tempered(self.model.get_output_embeddings()(h), self.temperature)), hidden)

    @torch.no_grad()
    def commit(self, index: torch.Tensor, count: torch.Tensor) -> None:
        """Keep of the step's slots only ``index[b, :count[b]]`` (offsets into the step's region), in
        order, as committed entries; start the next step after them."""
        W = index.shape[1]
        target = self.length[:, None, None] + torch.arange(W, device=index.device)  # [B, 1, W]
        source = self._base + (self.length[:, None] + index)[:, None, :]  # [2, L, B, H, W]
        moved = self._flat.index_select(0, source.reshape(-1))  # a copy, made before the write
        self._flat.index_copy_(0, (self._base + target).reshape(-1), moved)
        self.length.add_(count)
        self.local = 0

    # -- one layer's attention --------------------------------------------------------------------------

    def _attention(self, i, attn, x, cos, sin, write, mask) -> torch.Tensor:
        B, Q, _ = x.shape
        q = attn.q_proj(x).view(B, Q, -1, self.head_dim)
        k = attn.k_proj(x).view(B, Q, -1, self.head_dim)
        v = attn.v_proj(x).view(B, Q, -1, self.head_dim).transpose(1, 2)
        if hasattr(attn, "q_norm"):  # Qwen3: per-head norms before the rotation
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin)
        at = self._base[:, i] + write  # [2, B, H, Q]: layer i's keys, then its values
        self._flat.index_copy_(0, at.reshape(-1), torch.stack([k, v]).reshape(-1, self.head_dim))
        # [B, H, Q, D] -> [B, kv_heads, groups · Q, D]: the heads sharing a key/value head as query rows
        q = q.reshape(B, self.kv_heads, self.groups * Q, self.head_dim)
        cache = self._flat.view(self._shape)  # [keys | values, layer, B, kv_heads, C, head_dim]
        out = F.scaled_dot_product_attention(q, cache[0, i], cache[1, i], attn_mask=mask, scale=self.scale)
        out = out.reshape(B, self.kv_heads * self.groups, Q, self.head_dim).transpose(1, 2)
        return attn.o_proj(out.reshape(B, Q, -1))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [B, H, Q, D] with cos, sin [B, Q, D] (the halves convention of Llama)."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
