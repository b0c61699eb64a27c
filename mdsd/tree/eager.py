"""The eager step runner: the reference path, over the models' own ``transformers`` caches.

Each step runs :func:`mdsd.tree.step.decode_step` on the target's and the drafter's caches
(:class:`~mdsd.tree.cache.ModelCache` for a causal LM), commits the accepted path in both and keeps what
each reads next; finished rows leave the batch (their cache rows are dropped). On the CPU (or with
``profile=True``) it times the phases draft, target, verify and cache (on an accelerator that costs a
device synchronisation per phase).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from mdsd.sampling import UniformStream
from mdsd.tree.cache import ModelCache
from mdsd.tree.config import DecodeConfig
from mdsd.tree.draft import Pending
from mdsd.tree.drafter import Drafter
from mdsd.tree.loop import StepReport, StepRequest
from mdsd.tree.prefill import prefill
from mdsd.tree.step import Summary, decode_step

__all__ = ["EagerRunner", "PHASES", "capacity"]

PHASES = ("draft", "target", "verify", "cache")
_ALIGN = 64  # cache capacity is rounded up to a multiple of this (caches and graphs are reused across calls)


def capacity(config: DecodeConfig, longest: int, max_new_tokens: int, pending: int) -> int:
    """Slots a row's cache needs for a decode: the longest prompt (twice: the first step reads it beside
    the tree), the new tokens, the drafter's pending buffer and one step's region, rounded up."""
    region = config.plan(config.full_depth).num_nodes + pending
    return _ALIGN * math.ceil((2 * longest + max_new_tokens + pending + region) / _ALIGN)


class EagerRunner:
    """Steps over the models' own caches (see the module docstring); ``profile``: time the phases (None:
    on the CPU only)."""

    proposes_inside = False

    def __init__(
        self, config: DecodeConfig, target: torch.nn.Module, drafter: Drafter | None, profile: bool | None
    ) -> None:
        self.config, self.target, self.drafter, self.profile = config, target, drafter, profile
        self.device = next(target.parameters()).device

    def start(self, prompts: list[list[int]], max_new_tokens: int, generator: torch.Generator) -> None:
        B, dev, T = len(prompts), self.device, self.config.temperature
        self.generator = generator
        profile = self.profile if self.profile is not None else dev.type == "cpu"
        self._timings = dict.fromkeys(PHASES, 0.0) if profile else {}
        features = self.drafter is not None and self.drafter.reads_features
        layers = tuple(getattr(self.drafter, "feature_layers", ())) if features else ()
        self.target_cache = ModelCache(self.target, B, dev, T, hidden=features, feature_layers=layers)
        self.draft_cache = None
        if self.drafter is not None:
            # the drafter's pending block grows by a step's tokens after each step that does not read it
            pending = max_new_tokens + self.config.full_depth + 1
            size = capacity(self.config, max(map(len, prompts)), max_new_tokens, pending)
            self.draft_cache = self.drafter.eager_cache(B, size, T)
        self.target_pending = self.draft_pending = Pending.from_rows(prompts, dev)
        self._prefill = features  # the first step: the target reads the prompts (mdsd.tree.prefill)

    def step(self, request: StepRequest) -> StepReport:
        clock = _Clock(self.device, self._timings)
        if self._prefill:
            self._prefill = False
            done = prefill(self.target_cache, self.target_pending, self.config.temperature, self._stream())
            self.target_pending, self.draft_pending = done.root, done.drafter
            clock.lap("target")
            return StepReport(done.summary, 0, drafted=False)
        limit = None if request.limits is None else torch.as_tensor(request.limits, device=self.device)
        out = decode_step(
            self.target_cache,
            self.draft_cache,
            self.target_pending,
            self.draft_pending,
            self.config.plan(request.depth),
            self.config.rule,
            self._stream(),
            limit,
            request.retrieved,
            clock.lap,
        )
        summary = Summary.read(out.packed())  # the step's one synchronisation
        clock.lap("verify")
        self.target_cache.commit(out.target_keep[:, : summary.target_kept.max()], out.target_kept)
        if self.draft_cache is not None and summary.draft_kept.max() > 0:  # 0: it read nothing (a lag step)
            self.draft_cache.commit(out.draft_keep[:, : summary.draft_kept.max()], out.draft_kept)
        width = int(summary.draft_pending.max())  # the draft's pending block, trimmed to its widest row
        self.target_pending = out.target_next
        nxt = out.draft_next
        features = None if nxt.features is None else nxt.features[:, -width:]
        self.draft_pending = Pending(nxt.ids[:, -width:], nxt.real[:, -width:], features)
        clock.lap("cache")
        return StepReport(summary, out.draft_forwards)

    def _stream(self) -> UniformStream:
        return UniformStream(generator=self.generator)  # a step's one source of random numbers

    def retire(self, done: np.ndarray) -> None:
        keep = torch.as_tensor(np.flatnonzero(~done), device=self.device)
        for cache in (self.target_cache, self.draft_cache):
            if cache is not None:
                cache.select_rows(keep)
        self.target_pending = _rows(self.target_pending, keep)
        self.draft_pending = _rows(self.draft_pending, keep)

    def timings(self) -> dict[str, float]:
        return dict(self._timings)


def _rows(pending: Pending, keep: torch.Tensor) -> Pending:
    features = None if pending.features is None else pending.features[keep]
    return Pending(pending.ids[keep], pending.real[keep], features)


class _Clock:
    """Laps of a step's phases into ``timings`` (nothing where it is empty: not profiling)."""

    def __init__(self, device: torch.device, timings: dict[str, float]) -> None:
        self.device, self.timings = device, timings
        self.start = time.perf_counter()

    def lap(self, phase: str) -> None:
        if not self.timings:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.timings[phase] += now - self.start
        self.start = now
