"""A bundled corpus of real (p, q) next-token pairs from Qwen2.5-Coder-1.5B (target) / 0.5B (draft).

How the corpus was made (``experiments/make_real_pairs.py`` regenerates it from the cached models):
prompts from MT-Bench, HumanEval and news articles (:mod:`mdsd.data.prompts`, chat template, at most
128 tokens) get a continuation sampled from the target with a fixed seed; one teacher-forced forward
pass of each model over prompt + continuation gives the next-token logits z^p, z^q at every
continuation position (:mod:`mdsd.hf.record`). Per position, the corpus keeps

* the support S = top-m(z^p) ∪ top-m(z^q) (m = 256 by default; ranks do not depend on T),
* the raw logits z^p_i, z^q_i for i ∈ S (float32),
* for each stored temperature T, each model's log-mass outside S:
  :math:`\\ell_T = \\log \\sum_{i \\notin S} e^{z_i / T}`.

Reconstruction at a stored temperature T is exact on S, with everything outside S lumped into one
extra "tail" token:

.. math::

    p_i = \\frac{e^{z^p_i / T}}{e^{\\ell^p_T} + \\sum_{j \\in S} e^{z^p_j / T}} \\ (i \\in S), \\qquad
    p_{\\text{tail}} = \\frac{e^{\\ell^p_T}}{e^{\\ell^p_T} + \\sum_{j \\in S} e^{z^p_j / T}},

and likewise q. The masses are the true ones; only the split of the tail among its tokens is lost.
So any acceptance computed on the lumped pair differs from the full-vocabulary one by at most the
tail mass ``min(p_tail, q_tail)`` (lumping can only merge overlap: Σ_tail min(p_i, q_i) ≤
min(p_tail, q_tail)); ``real_pairs`` returns the tails so that users can bound it.
Other temperatures are refused: the tail mass at T cannot be recovered from the T = 1 tail.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch

__all__ = ["RealPairs", "truncate_logits", "concat_records", "save_corpus", "load_corpus", "real_pairs"]

TEMPERATURES = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # stored tail temperatures


def truncate_logits(
    target_logits: torch.Tensor,  # [L, V]
    draft_logits: torch.Tensor,  # [L, V]
    m: int = 256,
    temperatures: tuple[float, ...] = TEMPERATURES,
) -> dict[str, np.ndarray]:
    """Keep the union of both models' top-``m`` tokens per row, plus each model's tail log-mass per T.

    Returns a record of L rows in the corpus' ragged layout: ``offsets`` [L+1], ``support``,
    ``target_logits``, ``draft_logits`` [nnz] (row r is ``offsets[r]:offsets[r+1]``, ids ascending),
    ``target_tail``, ``draft_tail`` [L, len(temperatures)] (:math:`\\ell_T`, -inf if S is everything).

    >>> rec = truncate_logits(torch.tensor([[0.0, 1.0, 2.0]]), torch.tensor([[2.0, 1.0, 0.0]]), m=1)
    >>> rec["support"].tolist(), rec["target_tail"][0, -1].item()
    ([0, 2], 1.0)
    """
    zp, zq = torch.as_tensor(target_logits).double(), torch.as_tensor(draft_logits).double()
    if zp.ndim != 2 or zp.shape != zq.shape:
        raise ValueError(
            f"target_logits and draft_logits must be [L, V] of one shape, got {zp.shape}, {zq.shape}"
        )
    if not (torch.isfinite(zp).all() and torch.isfinite(zq).all()):
        raise ValueError("target_logits and draft_logits must be finite")
    if not 1 <= m <= zp.shape[1]:
        raise ValueError(f"m must be in [1, {zp.shape[1]}], got {m}")
    keep = torch.zeros(zp.shape, dtype=torch.bool)
    keep.scatter_(1, zp.topk(m, dim=1).indices, True)
    keep.scatter_(1, zq.topk(m, dim=1).indices, True)
    temps = torch.tensor(temperatures, dtype=torch.float64)
    tails = []
    for z in (zp, zq):
        rest = z.masked_fill(keep, -torch.inf)  # [L, V]
        tails.append(
            torch.logsumexp(rest[:, None, :] / temps[None, :, None], dim=-1).float().numpy()
        )  # [L, M]
    rows, cols = keep.nonzero(as_tuple=True)  # row-major: ids ascending within a row
    counts = keep.sum(dim=1)
    return {
        "offsets": np.concatenate([[0], np.cumsum(counts.numpy())]).astype(np.int64),
        "support": cols.numpy().astype(np.int32),
        "target_logits": zp[rows, cols].float().numpy(),
        "draft_logits": zq[rows, cols].float().numpy(),
        "target_tail": tails[0],
        "draft_tail": tails[1],
    }


def concat_records(records: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack records of :func:`truncate_logits` (plus equal-length per-row arrays) into one corpus."""
    if not records:
        raise ValueError("records must not be empty")
    out: dict[str, np.ndarray] = {}
    shift = 0
    offsets = [np.zeros(1, dtype=np.int64)]
    for rec in records:
        offsets.append(rec["offsets"][1:] + shift)
        shift += int(rec["offsets"][-1])
    out["offsets"] = np.concatenate(offsets)
    for key in records[0]:
        if key != "offsets":
            out[key] = np.concatenate([rec[key] for rec in records])
    return out


_REQUIRED = (
    "offsets",  # [N+1] int64 row starts in the ragged arrays
    "support",  # [nnz] int32 vocabulary ids
    "target_logits",  # [nnz] float32
    "draft_logits",  # [nnz] float32
    "target_tail",  # [N, M] float32 log-mass outside the support, per temperature
    "draft_tail",  # [N, M] float32
    "temperatures",  # [M] float64
    "dataset",  # [N] int8 index into dataset_names
    "dataset_names",  # [D] str
    "prompt",  # [N] int32 prompt index within its dataset
    "position",  # [N] int32 continuation position
)


def save_corpus(path: str | os.PathLike, arrays: dict[str, np.ndarray], info: dict) -> Path:
    """Write the corpus (compressed npz) with ``info`` (how it was made) as a JSON string."""
    missing = [key for key in _REQUIRED if key not in arrays]
    if missing:
        raise ValueError(f"arrays lacks {missing}")
    n = arrays["offsets"].size - 1
    for key in ("target_tail", "draft_tail", "dataset", "prompt", "position"):
        if arrays[key].shape[0] != n:
            raise ValueError(f"arrays[{key!r}] has {arrays[key].shape[0]} rows, offsets says {n}")
    path = Path(path)
    np.savez_compressed(path, info=np.array(json.dumps(info, sort_keys=True)), **arrays)
    return path


def load_corpus(path: str | os.PathLike | None = None) -> dict:
    """The raw corpus arrays (the bundled ``mdsd/data/real_pairs.npz`` by default) and its ``info``."""
    if path is None:
        source = resources.files("mdsd.data") / "real_pairs.npz"
        with resources.as_file(source) as file, np.load(file) as npz:
            arrays = {key: npz[key] for key in npz.files}
    else:
        with np.load(Path(path)) as npz:
            arrays = {key: npz[key] for key in npz.files}
    arrays["info"] = json.loads(str(arrays["info"]))
    return arrays


@dataclass(frozen=True)
class RealPairs:
    """Real (p, q) pairs at one temperature: rows padded to a common width, last column = tail lump."""

    p: np.ndarray  # [N, W + 1] float64 target probabilities; p[:, W] is the lumped tail
    q: np.ndarray  # [N, W + 1] float64 draft probabilities; q[:, W] is the lumped tail
    support: np.ndarray  # [N, W] int64 vocabulary ids of columns 0..W-1; -1 = padding (p = q = 0)
    dataset: np.ndarray  # [N] str: "mt-bench", "humaneval" or "news"
    prompt: np.ndarray  # [N] int: index of the prompt within its dataset
    position: np.ndarray  # [N] int: index of the continuation token this row predicts
    temperature: float
    info: dict  # how the corpus was made (models, seed, m, sampling temperature, ...)

    def __len__(self) -> int:
        return self.p.shape[0]


def _softmax_with_tail(
    logits: np.ndarray, offsets: np.ndarray, tail: np.ndarray, temperature: float, width: int
):
    # [N, width + 1]: row r = softmax over (z_S / T, tail log-mass) placed left-aligned, tail last.
    n = offsets.size - 1
    counts = np.diff(offsets)
    rows = np.repeat(np.arange(n), counts)
    cols = np.arange(offsets[-1]) - np.repeat(offsets[:-1], counts)
    scaled = np.full((n, width + 1), -np.inf)
    scaled[rows, cols] = logits.astype(np.float64) / temperature
    scaled[:, width] = tail
    top = scaled.max(axis=1, keepdims=True)
    weights = np.exp(scaled - top)
    return weights / weights.sum(axis=1, keepdims=True)


def real_pairs(temperature: float = 1.0, path: str | os.PathLike | None = None) -> RealPairs:
    """Real target/draft next-token pairs from the bundled corpus at ``temperature``.

    ``temperature`` must be one of the stored ones (0.1, 0.2, 0.25, 0.3, 0.4, ..., 1.0); see the module
    docstring for the exact reconstruction (support S exact, the rest lumped into one tail token).
    ``path`` reads another corpus written by :func:`save_corpus` instead of the bundled one.

    >>> pairs = real_pairs(0.6)
    >>> len(pairs) >= 1000, bool(np.allclose(pairs.p.sum(axis=1), 1.0)), pairs.p.shape == pairs.q.shape
    (True, True, True)
    """
    corpus = load_corpus(path)
    temps = corpus["temperatures"]
    match = np.flatnonzero(np.isclose(temps, temperature, rtol=0, atol=1e-9))
    if match.size == 0:
        raise ValueError(f"temperature must be one of the stored {temps.tolist()}, got {temperature!r}")
    column = int(match[0])
    offsets = corpus["offsets"]
    counts = np.diff(offsets)
    width = int(counts.max())
    support = np.full((counts.size, width), -1, dtype=np.int64)
    support[
        np.repeat(np.arange(counts.size), counts), np.arange(offsets[-1]) - np.repeat(offsets[:-1], counts)
    ] = corpus["support"]
    p = _softmax_with_tail(
        corpus["target_logits"], offsets, corpus["target_tail"][:, column], temps[column], width
    )
    q = _softmax_with_tail(
        corpus["draft_logits"], offsets, corpus["draft_tail"][:, column], temps[column], width
    )
    return RealPairs(
        p=p,
        q=q,
        support=support,
        dataset=corpus["dataset_names"][corpus["dataset"]],
        prompt=corpus["prompt"].astype(np.int64),
        position=corpus["position"].astype(np.int64),
        temperature=float(temps[column]),
        info=corpus["info"],
    )
