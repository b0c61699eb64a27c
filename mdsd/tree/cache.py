"""Key/value caches of tree decoding, and the one way the decoder runs a model over them.

A decoding step appends blocks of new tokens to a model's cache: the pending tokens and the tree's nodes.
Every cache of mdsd keeps the same two regions per row:

* the **committed** entries (the prefix the row has emitted), each visible to every later token;
* the **step's** entries (``local``: the slots appended since :meth:`begin`, in order), each visible only
  where the caller says so: ``local [B, Q, S]`` over the S step slots written so far, and ``visible [B, Q,
  Q]`` inside the new block (causal for pending tokens, "ancestors or self" for tree nodes;
  docs/mathematics.md §4).

:meth:`forward` runs the model on a block, records it and returns its logits at the cache's sampling
temperature T (:func:`tempered`: logits / T, the argument of the laws' softmax, so that the step never
divides); :meth:`commit` keeps the accepted path's step
entries (``index [B, W]`` slot offsets into the step region, ``count [B]`` of them valid), moved in order
to the end of the committed region by an in-place gather, so a step costs O(block) cache traffic, not
O(context).

The contract is the :class:`Cache` protocol. Two caches of a causal LM implement it: :class:`ModelCache`,
the ``transformers`` dynamic cache of any causal LM (the eager reference path; the committed region of a
row may hold dead slots), and :class:`mdsd.tree.static.StaticLM`, preallocated keys and values written at
explicit slots (the fast path); a drafter that reads the target's features has its own
(:class:`mdsd.drafters.cache.LayerCache`). No module here imports ``transformers``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from typing import NamedTuple, Protocol, runtime_checkable

import torch

__all__ = [
    "Forward",
    "Cache",
    "block_mask",
    "ModelCache",
    "layer_outputs",
    "decoder_features",
    "cache_keywords",
    "returned_cache",
    "finite",
    "tempered",
]


class Forward(NamedTuple):
    """What a cache's forward over a block returns, for the block's last ``keep`` tokens."""

    logits: torch.Tensor  # [B, keep, V] at the cache's temperature (logits / T), non-finite entries zeroed
    bad: torch.Tensor  # [B] bool: the row had non-finite logits
    hidden: torch.Tensor | None  # [B, keep, H or n·H] the features a drafter reads (made with hidden=True)


@runtime_checkable
class Cache(Protocol):
    """A model over its key/value cache, as a decoding step drives it (see the module docstring).

    ``reads_features``: whether :meth:`forward` needs ``features`` [B, Q, H] for its tokens (a feature
    head reads the target's hidden states, :mod:`mdsd.drafters.head`); such a drafter keeps none of its
    tree's entries and reads the accepted path again with the target's features.
    """

    reads_features: bool

    def begin(self) -> None:
        """Start a step: the slots written so far are committed (or forgotten, for a static cache)."""

    def live(self) -> torch.Tensor:
        """Committed live entries per row [B]: the position of the row's next token."""

    def forward(
        self,
        ids: torch.Tensor,
        visible: torch.Tensor,
        positions: torch.Tensor,
        keep: int,
        block_valid: torch.Tensor,
        local: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> Forward:
        """Run over a block ``ids`` [B, Q] at ``positions`` [B, Q] (visibility ``local`` [B, Q, S] over the
        step's S earlier slots and ``visible`` [B, Q, Q] inside the block)."""

    def commit(self, index: torch.Tensor, count: torch.Tensor) -> None:
        """Keep the step's slots ``index[b, :count[b]]``, in order, as committed entries."""

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` [B'] (the eager path drops finished rows; a static cache on the
        fast path never does, and need not implement it)."""


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


@contextlib.contextmanager
def layer_outputs(model: torch.nn.Module, layers: tuple[int, ...]) -> Iterator[dict[int, torch.Tensor]]:
    """Within the block, the outputs [B, Q, H] of ``model``'s decoder layers ``layers`` (the residual stream
    after each: EAGLE-3's features) in the dict it yields, {layer: output of its latest call}; forward
    hooks, removed on leaving."""
    got: dict[int, torch.Tensor] = {}
    stack = model.get_decoder().layers
    handles = []
    for i in layers:

        def keep(module, args, out, i=i):  # noqa: ARG001
            got[i] = out[0] if isinstance(out, tuple) else out

        handles.append(stack[i].register_forward_hook(keep))
    try:
        yield got
    finally:
        for handle in handles:
            handle.remove()


def decoder_features(
    model: torch.nn.Module, feature_layers: tuple[int, ...] = (), keep: int | None = None, **kwargs
) -> tuple[object, torch.Tensor, torch.Tensor]:
    """One forward of ``model``'s decoder (its base model, no output layer) on ``kwargs``: its output, the
    final hidden states [B, keep, H] of the last ``keep`` tokens (None: all; after the last norm: what the
    output layer reads) and the features a drafter head reads there: those states, or with ``feature_layers``
    the outputs of those decoder layers concatenated [B, keep, n·H] (EAGLE-3's fused features)."""
    with layer_outputs(model, feature_layers) as layers:
        out = model.get_decoder()(**kwargs)
    window = slice(None) if keep is None else slice(-keep, None)
    h = out.last_hidden_state[:, window]
    if not feature_layers:
        return out, h, h
    return out, h, torch.cat([layers[i][:, window] for i in feature_layers], dim=-1)


@functools.cache
def _arguments(model_type: type) -> tuple[str, bool]:
    """The name of the cache argument of the model's forward ("cache" from transformers 5.24, before that
    "past_key_values"), and whether it can compute only the last logits (``logits_to_keep``)."""
    names = inspect.signature(model_type.forward).parameters
    return ("cache" if "cache" in names else "past_key_values"), "logits_to_keep" in names


def cache_keywords(model: torch.nn.Module, cache: object) -> dict:
    """The keyword that passes ``cache`` to ``model``'s forward, under the name its transformers version
    takes (``cache`` from 5.24, ``past_key_values`` before; the old name is deprecated in 5.24)."""
    return {_arguments(type(model))[0]: cache}


def returned_cache(out) -> object:
    """The key/value cache a transformers forward returned (``out.cache`` from 5.24, else
    ``out.past_key_values``)."""
    return out.get("cache") if "cache" in out else out.get("past_key_values")


def _dtype(model: torch.nn.Module) -> torch.dtype:
    return next(p.dtype for p in model.parameters() if p.is_floating_point())


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logits at temperature T: ``logits / T`` in float32 for T > 0 (none needed at T = 1); as they are at
    T = 0 (greedy decoding reads their argmax only). softmax of them is the law at T."""
    if temperature in (0.0, 1.0):
        return logits
    return logits.float() / temperature


def finite(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits`` [B, Q, V] with non-finite entries replaced by zeros, and the flag [B] of rows that had
    any (so a step can finish and the caller raise once it reads the flag)."""
    # x − x is 0 where x is finite and NaN where it is ±∞ or NaN, so the row sums are NaN exactly on the
    # rows to flag (and never overflow): three passes over the logits where isfinite and where take five
    bad = (logits - logits).sum(-1, dtype=torch.float32).isnan().any(-1)
    return torch.nan_to_num(logits, nan=0.0, posinf=0.0, neginf=0.0), bad


class ModelCache:
    """A ``transformers`` causal LM with its dynamic key/value cache and each row's live-slot mask.

    ``cache`` is what the model returned last (None before the first forward); ``valid [B, C]`` marks the
    slots each row may attend to, and its width always equals the cache's slot count. The step's region
    begins at slot ``start`` (:meth:`begin`). Logits come out at ``temperature`` (:func:`tempered`);
    ``hidden``: :meth:`forward` also returns the features a drafter head reads: the final hidden states
    (after the last norm: what the output layer reads) or, with ``feature_layers``, the outputs of those
    decoder layers concatenated (:func:`layer_outputs`).
    """

    reads_features = False

    def __init__(
        self,
        model: torch.nn.Module,
        rows: int,
        device: torch.device,
        temperature: float = 1.0,
        hidden: bool = False,
        feature_layers: tuple[int, ...] = (),
    ) -> None:
        self.model = model
        self.temperature = temperature
        self.hidden = hidden
        self.feature_layers = tuple(feature_layers)
        self.cache: object = None
        self.valid = torch.zeros(rows, 0, dtype=torch.bool, device=device)  # [B, C]
        self.start = 0

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    @property
    def local(self) -> int:
        """Slots appended since :meth:`begin`."""
        return self.length - self.start

    def live(self) -> torch.Tensor:
        """Committed live entries per row [B] (the position of the row's next token)."""
        return self.valid[:, : self.start].sum(1)

    def begin(self) -> None:
        """Start a step: every slot written so far counts as committed."""
        self.start = self.length

    def forward(
        self,
        ids: torch.Tensor,
        visible: torch.Tensor,
        positions: torch.Tensor,
        keep: int,
        block_valid: torch.Tensor,
        local: torch.Tensor | None = None,
        features: torch.Tensor | None = None,  # noqa: ARG002 (a language model reads tokens only)
    ) -> Forward:
        """Run the model on a block ``ids`` [B, Q] at ``positions`` [B, Q]: the logits of its last ``keep``
        tokens [B, keep, V] at the cache's temperature (non-finite ones zeroed), the flag [B] of rows that
        had non-finite logits, and (``hidden``) the final hidden states of those tokens [B, keep, H].

        Each new token sees the committed slots, the step's slots given by ``local`` [B, Q, S] (None: none)
        and the block's tokens given by ``visible`` [B, Q, Q]; ``block_valid`` [B, Q] says which new slots
        hold real tokens (the others are dead from now on).
        """
        B, Q = ids.shape
        past = self.valid[:, None, : self.start].expand(B, Q, self.start)
        if local is not None:
            past = torch.cat([past, local], dim=2)
        if past.shape[2] != self.length:
            raise ValueError(
                f"local covers {past.shape[2] - self.start} step slots; the step has {self.local}"
            )
        kwargs = {
            "input_ids": ids,
            "attention_mask": block_mask(past, visible, _dtype(self.model)),
            "position_ids": positions,
            "use_cache": True,
            **cache_keywords(self.model, self.cache),
        }
        if self.hidden:  # the base model's last hidden states, then the output layer on the kept ones
            out, h, hidden = decoder_features(self.model, self.feature_layers, keep, **kwargs)
            logits = self.model.get_output_embeddings()(h)
        else:
            if _arguments(type(self.model))[1]:
                kwargs["logits_to_keep"] = keep
            out = self.model(**kwargs)
            logits, hidden = out.logits[:, -keep:], None
        self.cache = returned_cache(out)
        self.valid = torch.cat([self.valid, block_valid], dim=1)
        return Forward(*finite(tempered(logits, self.temperature)), hidden)

    def commit(self, index: torch.Tensor, count: torch.Tensor) -> None:
        """Keep of the step's slots only ``start + index[b, :count[b]]`` of each row, in order, and start
        the next step after them.

        ``index`` [B, W] (W: the largest count, or more) holds slot offsets into the step's region; entries
        past a row's count are ignored (their slots become dead).
        """
        width, start = index.shape[1], self.start
        for layer in _layers(self.cache):
            for name in ("keys", "values"):
                kv = getattr(layer, name)  # [B, H, C, D]
                B, H, _, D = kv.shape
                slots = (start + index).to(kv.device)[:, None, :, None].expand(B, H, width, D)
                kv[:, :, start : start + width] = kv.gather(2, slots)  # gather copies before the write
                setattr(layer, name, kv[:, :, : start + width])
        kept = torch.arange(width, device=self.valid.device)[None, :] < count[:, None]
        self.valid = torch.cat([self.valid[:, :start], kept], dim=1)
        self.start = self.length

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` (LongTensor [B']), in place."""
        if self.cache is not None:
            for layer in _layers(self.cache):
                layer.keys = layer.keys[rows.to(layer.keys.device)]
                layer.values = layer.values[rows.to(layer.values.device)]
        self.valid = self.valid[rows]
