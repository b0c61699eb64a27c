"""The decoder's one host loop, over either step runner.

Every decode — eager or on the fast path — runs :func:`decode`: per step it asks the draft source for each
row's chains (on the host, unless the runner proposes inside its step), lets the depth policy choose the
step's depth, has the runner run one step (:class:`StepRequest` in, :class:`StepReport` out: the step's one
host read), records what each row emitted (:class:`~mdsd.tree.ledger.Ledger`), updates the policy, shows
the source the new contexts, and retires the rows that are done. A runner (:class:`Runner`) only runs
steps: :class:`mdsd.tree.eager.EagerRunner` over the models' own caches, the reference;
:class:`mdsd.tree.compiled.CapturedRunner` over static caches with each step captured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from mdsd.tree.config import DecodeConfig
from mdsd.tree.ledger import Ledger, TreeDecodeOutput
from mdsd.tree.step import Summary

__all__ = ["StepRequest", "StepReport", "Runner", "decode", "retrieve"]


@dataclass(frozen=True)
class StepRequest:
    """One step as the host loop asks for it, for the rows still decoding (B' of them, in order)."""

    depth: int  # the plan's depth (the deepest row's)
    limits: np.ndarray | None  # [B'] each row's depth where rows differ, else None
    retrieved: torch.Tensor | None  # [B', width, depth] the source's chains on the device, -1 where none


@dataclass(frozen=True)
class StepReport:
    """What a step did, read on the host."""

    summary: Summary  # the rows of the request, in order
    draft_forwards: int
    buffer_reads: int = 0  # 1: a drafting step that read the draft's whole pending buffer (fast path)
    drafted: bool = True  # False: the step drafted nothing whatever the depth asked (the prompt's read)


class Runner(Protocol):
    """Runs a decode's steps; the host loop (:func:`decode`) does the rest."""

    proposes_inside: bool  # the source proposes inside the step (on the device), not on the host

    def start(self, prompts: list[list[int]], max_new_tokens: int, generator: torch.Generator) -> None:
        """Prepare a decode of ``prompts`` (every row active)."""

    def step(self, request: StepRequest) -> StepReport:
        """Run one step for the active rows."""

    def retire(self, done: np.ndarray) -> None:
        """The active rows ``done`` [B'] (bool) are finished: they leave the batch."""

    def timings(self) -> dict[str, float]:
        """Seconds per phase of the decode so far (empty where the runner does not time phases)."""


def decode(
    config: DecodeConfig,
    runner: Runner,
    prompts: list[list[int]],
    max_new_tokens: int,
    generator: torch.Generator,
    device: torch.device,
) -> list[TreeDecodeOutput]:
    """Decode ``prompts`` (checked token lists) with ``runner``; one :class:`TreeDecodeOutput` per prompt."""
    start = time.perf_counter()
    B = len(prompts)
    ledger = Ledger(B, max_new_tokens, config.eos_token_ids)
    runner.start(prompts, max_new_tokens, generator)
    rows = np.arange(B)  # the original row of each active row
    policy, full = config.policy, config.full_depth
    depths = policy.start(B, full) if policy is not None else np.full(B, full)
    on_host = config.source is not None and not runner.proposes_inside
    fork = getattr(config.source, "fork", None)  # a source with per-sequence state: one per row
    sources = [fork() if fork else config.source for _ in range(B)] if on_host else []
    while rows.size:
        step_start = time.perf_counter()
        retrieved = None
        if on_host:
            contexts = [prompts[r] + ledger.emitted(r) for r in rows]
            retrieved, proposed = retrieve([sources[r] for r in rows], contexts, config.retrieve, device)
            if policy is not None:
                depths = policy.given_proposals(depths, proposed)
        depth = int(depths.max())
        limits = depths if depths.min() < depth else None
        report = runner.step(StepRequest(depth, limits, retrieved))
        elapsed = time.perf_counter() - step_start  # up to the step's synchronisation
        done = ledger.record(
            rows, report.summary, depths, report.draft_forwards, elapsed, report.buffer_reads
        )
        if policy is not None:
            depths = policy.update(depths, report.summary.accepted, full)
        if on_host:
            for r in rows:
                sources[r].observe(prompts[r] + ledger.emitted(r))
        if done.any():
            runner.retire(done)
            rows, depths = rows[~done], depths[~done]
            if policy is not None:
                policy.keep(np.flatnonzero(~done))
    return ledger.outputs({"total": time.perf_counter() - start, **runner.timings()}, config.verified_by)


def retrieve(
    sources: list, contexts: list[list[int]], shape: tuple[int, int], device: torch.device
) -> tuple[torch.Tensor, np.ndarray]:
    """Each row's proposals on ``device``, tokens [B, width, depth] (-1 where there is none), and the
    length of each row's longest proposal [B] on the host."""
    width, depth = shape
    table = np.full((len(contexts), width, depth), -1, dtype=np.int64)
    for b, (source, context) in enumerate(zip(sources, contexts, strict=True)):
        for i, proposal in enumerate(source.propose(context, width, depth)[:width]):
            tokens = proposal.tokens[:depth]
            table[b, i, : len(tokens)] = tokens
    longest = (table >= 0).sum(2).max(1)
    host = torch.from_numpy(table)
    if device.type == "cuda":  # an asynchronous copy: the device does not wait for the host
        return host.pin_memory().to(device, non_blocking=True), longest
    return host.to(device), longest
