"""Key/value caches of tree decoding: one batched ``transformers`` cache with a live-slot mask per row.

Rows of a batch hold different numbers of live entries (ragged prompts, different accepted paths), so each
row carries a validity mask over the cache slots (``valid [B, C]``); dead slots are never attended to. A
forward appends a block of ``Q`` new tokens to every row; :func:`block_mask` lets each new token see

* the live cache entries of its row,
* inside the block, exactly the tokens given by ``visible [B, Q, Q]`` (causal for pending tokens,
  "ancestors or self" for tree nodes; ../shared/MATH.md §4).

After a step only the accepted path's entries of the block are kept (:meth:`ModelCache.keep_block`): the
block is compacted in place, so a step costs O(block) cache traffic, not O(context).
No module here imports ``transformers``: the cache is the one the model returns, edited through its
``layers[i].keys / values`` tensors ``[B, heads, C, head_dim]``.
"""

from __future__ import annotations

import torch

__all__ = ["block_mask", "ModelCache"]


def block_mask(past: torch.Tensor, visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4-D attention mask for appending a block of tokens to a cache.

    Parameters
    ----------
    past : BoolTensor [B, C] or [B, Q, C]
        Cache entries each row (or each new token of each row) may attend to.
    visible : BoolTensor [B, Q, Q]
        ``visible[b, i, j]``: new token i of row b may attend to new token j. Every token must see itself
        (so no query row is fully masked); the callers build it that way.
    dtype : torch.dtype
        The model's floating dtype.

    Returns
    -------
    Tensor [B, 1, Q, C + Q]
        0 where attention is allowed, the most negative finite value of ``dtype`` elsewhere.

    Examples
    --------
    >>> m = block_mask(torch.tensor([[True, False]]), torch.ones(1, 1, 1, dtype=torch.bool), torch.float32)
    >>> (m == 0).tolist()
    [[[[True, False, True]]]]
    """
    B, Q, _ = visible.shape
    if past.ndim == 2:
        past = past[:, None, :].expand(B, Q, past.shape[1])
    allowed = torch.cat([past, visible], dim=2)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min).unsqueeze(1)


def _layers(cache: object) -> list:
    layers = getattr(cache, "layers", None)
    if layers is None or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        raise TypeError(
            f"tree decoding needs a dynamic key/value cache with per-layer keys and values; "
            f"the model returned {type(cache).__name__}"
        )
    if any(getattr(layer, "is_sliding", False) for layer in layers):
        raise TypeError("tree decoding does not support sliding-window attention caches")
    return [layer for layer in layers if layer.keys is not None and layer.keys.numel() > 0]


class ModelCache:
    """One model's key/value cache and the live-slot mask of each row.

    ``cache`` is whatever the model returned last (None before the first forward); ``valid [B, C]`` marks the
    slots each row may attend to. The cache's slot count always equals ``valid.shape[1]``.
    """

    def __init__(self, rows: int, device: torch.device) -> None:
        self.cache: object = None
        self.valid = torch.zeros(rows, 0, dtype=torch.bool, device=device)  # [B, C]

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    def live(self) -> torch.Tensor:
        """Live entries per row [B] (the position of the next token)."""
        return self.valid.sum(1)

    def appended(self, cache: object, block_valid: torch.Tensor) -> None:
        """Record a forward that appended a block [B, Q] (``block_valid``: which new slots are real)."""
        self.cache = cache
        self.valid = torch.cat([self.valid, block_valid], dim=1)

    def keep_block(self, start: int, index: torch.Tensor, count: torch.Tensor) -> None:
        """Keep, after slot ``start``, only the slots ``start + index[b, :count[b]]`` of each row, in order.

        ``index`` [B, W] (W = the largest count, known to the caller) holds slot offsets into the block that
        begins at ``start``; entries past a row's count are ignored (their slots become dead).
        """
        width = index.shape[1]
        for layer in _layers(self.cache):
            for name in ("keys", "values"):
                kv = getattr(layer, name)  # [B, H, C, D]
                B, H, _, D = kv.shape
                slots = (start + index).to(kv.device)[:, None, :, None].expand(B, H, width, D)
                kv[:, :, start : start + width] = kv.gather(2, slots)  # gather copies before the write
                setattr(layer, name, kv[:, :, : start + width])
        kept = torch.arange(width, device=self.valid.device)[None, :] < count[:, None]
        self.valid = torch.cat([self.valid[:, :start], kept], dim=1)

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` (LongTensor [B']), in place."""
        if self.cache is not None:
            for layer in _layers(self.cache):
                layer.keys = layer.keys[rows.to(layer.keys.device)]
                layer.values = layer.values[rows.to(layer.values.device)]
        self.valid = self.valid[rows]
