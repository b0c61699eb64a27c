"""Tree attention: the 4-D attention masks, position ids and KV-cache surgery of tree decoding.

Each decoded row keeps its own key/value cache inside one batched ``transformers`` cache. Rows can
hold different numbers of live entries, so every row carries a validity mask over the cache slots
(``valid [B, C]``); dead slots are never attended to. A forward appends a block of ``Q`` new tokens
to every row; the mask lets each new token see

* the live cache entries of its row,
* inside the block, exactly the tokens given by ``visible [B, Q, Q]`` (causal for a pending prefix,
  "ancestors or self" for tree nodes; ../shared/MATH.md §4).

No module here imports ``transformers``: the cache is the one the model returns, edited through its
``layers[i].keys / values`` tensors ``[B, heads, C, head_dim]``.
"""

from __future__ import annotations

import torch

__all__ = ["block_mask", "select_cache", "select_rows"]


def block_mask(past: torch.Tensor, visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4-D attention mask for appending a block of tokens to a cache.

    Parameters
    ----------
    past : BoolTensor [B, C] or [B, Q, C]
        Cache entries each row (or each new token of each row) may attend to.
    visible : BoolTensor [B, Q, Q]
        ``visible[b, i, j]``: new token i of row b may attend to new token j. Every token must see
        itself (so no query row is fully masked).
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
    assert bool(visible.diagonal(dim1=1, dim2=2).all()), "every new token must see itself"
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
    return layers


def select_cache(cache: object, index: torch.Tensor) -> None:
    """Keep, in every row ``b`` of ``cache``, the entries ``index[b]`` (in that order), in place.

    ``index`` is a LongTensor [B, C'] of slot positions; the cache becomes ``[B, heads, C', head_dim]``.
    """
    for layer in _layers(cache):
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        slots = index.to(layer.keys.device)[:, None, :, None]  # [B, 1, C', 1]
        for name in ("keys", "values"):
            kv = getattr(layer, name)  # [B, heads, C, head_dim]
            B, H, _, D = kv.shape
            setattr(layer, name, kv.gather(2, slots.expand(B, H, index.shape[1], D)))


def select_rows(cache: object, rows: torch.Tensor) -> None:
    """Keep only the batch rows ``rows`` (LongTensor [B']) of ``cache``, in place."""
    for layer in _layers(cache):
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        layer.keys = layer.keys[rows.to(layer.keys.device)]
        layer.values = layer.values[rows.to(layer.values.device)]
