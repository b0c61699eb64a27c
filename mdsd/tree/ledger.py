"""The host's record of a decode: what every row emitted at every step, kept as numpy arrays.

A step's outcome reaches the host as one :class:`mdsd.tree.step.Summary` (numpy arrays over the batch's
rows); :meth:`Ledger.record` cuts each row's tokens at its first EOS token or its budget, appends them and
says which rows are done, with whole-array operations only, so the host's work per step does not grow with
the batch in Python. Per-row objects (:class:`TreeDecodeOutput`) are built once, at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mdsd.tree.step import Summary

__all__ = ["TreeDecodeOutput", "Ledger"]


@dataclass(frozen=True)
class TreeDecodeOutput:
    """What one decoded prompt produced.

    Attributes
    ----------
    tokens : LongTensor [T]
        The generated tokens only: ``max_new_tokens`` of them, or fewer if an EOS token came first
        (the EOS token is included).
    steps : int
        Target forward passes (decoding steps).
    tokens_per_step : list of int
        Tokens each step emitted (accepted drafts + 1, or + 0 when a step ends on a drafted node the target
        did not see; the last step only up to ``max_new_tokens`` or EOS), so ``sum(tokens_per_step)`` is
        ``len(tokens)`` and batch efficiency is ``len(tokens) / steps``.
    accepted_per_step : list of int
        Drafted tokens each step's verification accepted (the last step may accept more than it emits).
    retrieved_per_step : list of int
        How many of them came from a source's retrieved chains (the rest from the draft model).
    depth_per_step : list of int
        Depth of the tree drafted at each step (below the tree's depth under an adaptive depth policy).
    draft_forwards : int
        Draft-model forward passes run while this prompt was decoded.
    draft_buffer_reads : int
        Drafting steps whose first draft forward read the draft's whole pending buffer
        (:attr:`mdsd.tree.compiled.CapturedRunner.LAG` blocks) instead of one block: on the fast path, under a
        policy that may draft a source's chains alone, a drafting step after chains-only steps that left
        more than a block of tokens. A cost model prices that forward at the buffer's width. Not counted:
        the draft forwards of chains-only steps (catch-ups over the whole buffer, and the prompt's read
        where a decode's first step is of chains alone).
    step_seconds : list of float
        Wall time of each step (the whole batch's step), read between the steps' host synchronisations, so
        measuring it costs nothing on an accelerator.
    timings : dict of str to float
        Seconds: ``total``, and per phase (``draft``, ``target``, ``verify``, ``cache``) when the decoder
        profiles (always on the CPU; on an accelerator only with ``profile=True``, which synchronises the
        device at each phase boundary). For a batch decode the times are those of the whole batch.
    stopped_by_eos : bool
        Whether generation ended on an EOS token.
    verified_by : str
        What verified the drafts (:attr:`mdsd.tree.config.DecodeConfig.verified_by`): the verifier's name,
        and where a node with one child fell back to the single-draft rule, that too.
    """

    tokens: torch.Tensor
    steps: int
    tokens_per_step: list[int]
    accepted_per_step: list[int]
    retrieved_per_step: list[int]
    depth_per_step: list[int]
    draft_forwards: int
    draft_buffer_reads: int
    step_seconds: list[float]
    timings: dict[str, float]
    stopped_by_eos: bool = False
    verified_by: str = ""

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens emitted per target forward, ``len(tokens) / steps``."""
        return sum(self.tokens_per_step) / max(self.steps, 1)


class Ledger:
    """Tokens and per-step statistics of ``rows`` decodes of at most ``max_new_tokens`` tokens each."""

    def __init__(self, rows: int, max_new_tokens: int, eos_token_ids: frozenset[int]) -> None:
        self.max_new_tokens = max_new_tokens
        self.eos_ids = np.array(sorted(eos_token_ids), dtype=np.int64)
        self.tokens = np.full((rows, max_new_tokens), -1, dtype=np.int64)
        self.length = np.zeros(rows, dtype=np.int64)
        self.eos = np.zeros(rows, dtype=bool)
        # (rows, tokens, accepted, retrieved, depths, forwards, buffer reads, seconds)
        self._steps: list[tuple] = []

    def emitted(self, row: int) -> list[int]:
        """The tokens row ``row`` emitted so far."""
        return self.tokens[row, : self.length[row]].tolist()

    def record(
        self,
        rows: np.ndarray,
        summary: Summary,
        depths: np.ndarray,
        forwards: int,
        seconds: float,
        buffer_reads: int = 0,
    ) -> np.ndarray:
        """Append a step of the original rows ``rows`` [B'] (the summary's rows, in order), which ran
        ``forwards`` draft forwards in ``seconds`` (``buffer_reads``: 1 where it drafted reading the draft's
        whole buffer); return which of them are done [B'] (an EOS token emitted, or ``max_new_tokens``
        reached).

        Raises ValueError where a model returned non-finite logits."""
        if summary.bad.any():
            who = "draft" if int(summary.bad[summary.bad > 0][0]) & 1 else "target"
            raise ValueError(f"the {who} model returned NaN or infinite logits")
        width = summary.emitted.shape[1]
        at = np.arange(width)
        eos = np.isin(summary.emitted, self.eos_ids) & (at < summary.count[:, None])
        through = np.where(eos.any(1), eos.argmax(1) + 1, width + 1)  # tokens up to the first EOS
        room = self.max_new_tokens - self.length[rows]
        n = np.minimum(np.minimum(summary.count, through), room)
        r, c = np.nonzero(at < n[:, None])
        self.tokens[rows[r], self.length[rows[r]] + c] = summary.emitted[r, c]
        self.length[rows] += n
        self.eos[rows] = through <= n
        self._steps.append(
            (rows, n, summary.accepted, summary.retrieved, depths, forwards, buffer_reads, seconds)
        )
        return self.eos[rows] | (self.length[rows] == self.max_new_tokens)

    def outputs(self, timings: dict[str, float], verified_by: str = "") -> list[TreeDecodeOutput]:
        """One :class:`TreeDecodeOutput` per row (the per-row work of the whole decode, done once)."""
        rows = len(self.length)
        if self._steps:
            columns = [np.concatenate([step[i] for step in self._steps]) for i in range(5)]
            forwards, reads, seconds = (
                np.concatenate([np.full(len(step[0]), step[i]) for step in self._steps]) for i in (5, 6, 7)
            )
        else:
            columns = [np.zeros(0, np.int64)] * 5
            forwards, reads, seconds = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        order = np.argsort(columns[0], kind="stable")  # steps grouped by row, in step order
        bounds = np.searchsorted(columns[0][order], np.arange(rows + 1))
        out = []
        for b in range(rows):
            mine = order[bounds[b] : bounds[b + 1]]
            out.append(
                TreeDecodeOutput(
                    tokens=torch.from_numpy(self.tokens[b, : self.length[b]].copy()),
                    steps=len(mine),
                    tokens_per_step=columns[1][mine].tolist(),
                    accepted_per_step=columns[2][mine].tolist(),
                    retrieved_per_step=columns[3][mine].tolist(),
                    depth_per_step=columns[4][mine].tolist(),
                    draft_forwards=int(forwards[mine].sum()),
                    draft_buffer_reads=int(reads[mine].sum()),
                    step_seconds=seconds[mine].tolist(),
                    timings=dict(timings),
                    stopped_by_eos=bool(self.eos[b]),
                    verified_by=verified_by,
                )
            )
        return out
