"""A drafter's forward time as a share c of its target's, read by shape from a table of measured and
predicted ratios (``benchmarks/bench_drafter_cost.py``'s ``drafter_cost.json``, or a gpu_fast heads file).

The table's rows are named by shape: ``draft`` (the real pair's draft model), ``small:H:L:M`` (a small
drafter of width H and L layers with M output rows), ``head:I:M`` (a feature head of MLP width I reading the
target's final state) and ``fusedN:I:M`` (one reading the outputs of N of the target's layers). With c
known, greedy or sampled decoding with a chain of k drafts, forwards only and at B = 1, runs at

.. math:: \\text{speedup} = \\frac{\\text{tokens per target forward}}{1 + k\\,c}

of autoregressive decoding's rate (one draft forward per depth, one target forward per step; the step's
other work left out). A drafter whose M has no row reads the row of its shape with the next larger M: an upper
bound, since the cost grows with M (barely: the output rows are a small part of a small drafter's reads).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["cost_ratio", "drafter_config"]


def drafter_config(folder: str | os.PathLike):
    """The config a drafter folder holds: a :class:`mdsd.drafters.SmallConfig`, a
    :class:`mdsd.drafters.HeadConfig`, or None for anything else (a Hugging Face draft model)."""
    from mdsd.drafters.head import HeadConfig
    from mdsd.drafters.small import is_small, read_config

    path = Path(folder).expanduser()
    if is_small(path):
        return read_config(path)
    if (path / "head.json").is_file():
        return HeadConfig.from_json(json.loads((path / "head.json").read_text()), str(path))
    return None


def cost_ratio(table: dict[str, dict], drafter) -> tuple[float | None, str | None]:
    """(c, row name): the drafter's forward time over the target's from ``table`` ({row name: row with
    ``measured_ratio`` and ``predicted_ratio``}; the measured one where there is one), and the row it was read
    from; (None, None) where the table has none. ``drafter`` is a small drafter or feature head, its config,
    or anything else for the pair's draft model (row ``draft``)."""
    from mdsd.drafters.head import HeadConfig
    from mdsd.drafters.small import SmallConfig

    config = getattr(drafter, "small_config", None) or getattr(drafter, "head_config", None) or drafter
    if isinstance(config, SmallConfig):
        name = _covering(table, f"small:{config.layer.hidden_size}:{config.layers}:", config.draft_vocab)
    elif isinstance(config, HeadConfig):
        reads = f"fused{len(config.feature_layers)}" if config.feature_layers else "head"
        name = _covering(table, f"{reads}:{config.layer.intermediate_size}:", config.draft_vocab)
    else:
        name = "draft"
    row = table.get(name)
    if row is None:
        return None, None
    ratio = row["measured_ratio"] if row.get("measured_ratio") is not None else row["predicted_ratio"]
    return ratio, name


def _covering(table: dict, shape: str, draft_vocab: int) -> str:
    """The row ``shape + M`` of ``table`` with the least M >= ``draft_vocab`` (``draft_vocab`` if none)."""
    sizes = sorted(int(k.removeprefix(shape)) for k in table if k.startswith(shape))
    return shape + str(next((m for m in sizes if m >= draft_vocab), draft_vocab))
