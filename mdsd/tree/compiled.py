"""The decoder's fast path: static caches, fixed shapes per plan, a captured step, one host read per step.

``TreeDecoder(..., compile=True)`` decodes with the same phases as the eager path
(:func:`mdsd.tree.step.decode_step`: the same drafting, verification and walk), arranged the way the
fastest open decoders arrange a step (gpt-fast's static caches and compiled forward, vLLM's and SGLang's
CUDA graph per batch size):

* **Static caches** (:class:`mdsd.tree.static.StaticLM`): keys and values preallocated for the whole decode
  (the longest prompt, the budget and one step's slots), written at explicit slots; the accepted path is
  compacted by an in-place gather.
* **Fixed shapes per plan.** The first step reads the prompts (eagerly, as the eager path does); every
  later step has the same shapes: the target reads one token per row, the draft a block of depth + 1
  (left-padded). Under a policy that may draft a source's chains alone
  (:class:`mdsd.tree.adaptive.SourceFirst`), such a step runs no draft forward and the draft's pending
  tokens pile up, to at most :attr:`CapturedRunner.LAG` blocks: the next step that drafts reads them all (a
  second shape), and a chains-only step that would overflow the buffer reads them instead. Finished rows
  stay in the batch as masked rows (their caches no longer advance). A step's random numbers are one
  buffer of float64 uniforms, refilled by one ``uniform_`` per step and consumed in order
  (:class:`mdsd.sampling.UniformStream`), so nothing inside the step calls a generator.
* **A captured step**, one per (plan, batch size, draft block), built on the plan's first step (which runs
  eagerly and learns how many uniforms a step takes) and reused: ``"cudagraph"`` captures the whole step —
  draft levels, target forward, verification, walk and cache compaction — in one CUDA graph of its eager
  kernels;
  ``"inductor-cudagraph"`` compiles it with inductor first (its elementwise chains over [B, nodes, V]
  fused into fewer passes), runs the compiled step once, then captures that in one CUDA graph (vLLM's
  arrangement: torch.compile, then its own graphs); a ``torch.compile`` backend (``"inductor"``,
  ``"aot_eager"``, ``"eager"``) compiles it with ``fullgraph=True``; ``"none"`` runs the same static step
  uncompiled.
* **One host read per step**: the packed :class:`mdsd.tree.step.Summary`, recorded by
  :class:`mdsd.tree.ledger.Ledger` with whole-array numpy operations; per-row Python work happens once, at
  the end, so a step's host time does not grow with the batch. On an accelerator, from
  :attr:`CapturedRunner.TABLE_ROWS` rows on (:attr:`CapturedRunner.FUSED_TABLE_ROWS` with inductor), a draft
  source that proposes on the device (``propose_table``, e.g. :class:`mdsd.sources.PromptLookup`) runs inside
  the step, over a token buffer of each row's context that the step itself extends; other sources,
  smaller batches and every source on the CPU propose and observe on the host, row by row, as on the
  eager path (``TreeDecoder(propose_inside=...)`` chooses either way).

Every verifier whose kernels read nothing back on the models' vocabulary runs here (``sync_free``,
:meth:`mdsd.verifiers.Verifier.reads_back`); the others need the eager path.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mdsd.sampling import UniformStream
from mdsd.sources.base import has_table
from mdsd.tree.cache import Cache
from mdsd.tree.config import DecodeConfig
from mdsd.tree.draft import Pending
from mdsd.tree.drafter import Drafter
from mdsd.tree.eager import capacity
from mdsd.tree.loop import StepReport, StepRequest
from mdsd.tree.prefill import prefill
from mdsd.tree.static import StaticLM, static_obstacle
from mdsd.tree.step import Summary, decode_step

__all__ = ["BACKENDS", "GRAPHS", "CapturedRunner", "backend_of", "capture", "graph_pool"]

BACKENDS = ("cudagraph", "inductor-cudagraph", "inductor", "aot_eager", "eager", "none")
GRAPHS = ("cudagraph", "inductor-cudagraph")  # the backends that capture CUDA graphs


def backend_of(compile: bool | str, device: torch.device) -> str | None:
    """The step's backend for ``TreeDecoder(compile=...)``: None for the eager path (False); True picks
    "cudagraph" on CUDA and "inductor" elsewhere; a name of :data:`BACKENDS` is taken as is."""
    if compile is False:
        return None
    if compile is True:
        return "cudagraph" if device.type == "cuda" else "inductor"
    if compile not in BACKENDS:
        raise ValueError(f"compile must be True, False or one of {', '.join(BACKENDS)}; got {compile!r}")
    if compile in GRAPHS and device.type != "cuda":
        raise ValueError(f"compile={compile!r} captures CUDA graphs; the models are on {device}")
    return compile


@dataclass
class _State:
    """The step's inputs and outputs that live on the device between steps (fixed addresses)."""

    target: StaticLM
    draft: Cache | None
    target_ids: torch.Tensor  # [B, 1] the token the target reads next (the root)
    draft_ids: torch.Tensor  # [B, P] the tokens the draft reads next, left-padded
    draft_real: torch.Tensor  # [B, P]
    draft_features: torch.Tensor | None  # [B, P, H] their features (a drafter that reads the target's)
    active: torch.Tensor  # [B] rows still decoding (the others keep their caches as they are)
    limit: torch.Tensor  # [B] each row's draft depth (adaptive depths)
    retrieved: torch.Tensor | None  # [B, width, depth] a source's proposals, -1 where none
    context: torch.Tensor | None  # [B, C] each row's prompt and output so far (a source's table), then junk
    context_len: torch.Tensor | None  # [B] its length


@dataclass(frozen=True)
class _Key:
    """What one captured step is specific to."""

    depth: int  # the plan's depth
    limited: bool  # rows draft to their own depths (state.limit)
    block: int  # the width of the draft's block it reads
    catch_up: bool  # it reads the block where the plan draws no children


@dataclass
class _Captured:
    """A captured step: the callable that replays it, its uniforms' buffer and its draft forwards."""

    run: Callable[[], torch.Tensor]
    uniforms: torch.Tensor
    draft_forwards: int


class CapturedRunner:
    """The fast path's step runner (module docstring) for a decode ``config`` of ``target`` and ``drafter``
    with step backend ``backend`` (:data:`BACKENDS`); ``propose_inside``: where the source proposes (see
    :class:`mdsd.TreeDecoder`)."""

    # Pending blocks of depth + 1 the draft's buffer holds: chains-only steps (SourceFirst) leave the draft's
    # tokens to the next drafting step, which reads up to LAG blocks in one forward (launch-bound on a GPU:
    # about the cost of one block) instead of one forward per chains-only step.
    LAG = 4

    # The batch from which a source's device table replaces its per-row host lookup on an accelerator
    # (benchmarks/gpu_fast.py on an H200, 2026-11-28). Captured as eager kernels, the table (about 290 calls
    # at depth 8) added 0.58 ms to a B = 1 lookup step and saved 0.57 ms at B = 64 against the host's rows:
    # they break even near 33 rows. Fused by inductor and captured, the table costs 0.06-0.4 ms at any
    # batch, the host 35-120 µs a row (benchmarks/bench_lookup.py --device cuda): even at 2-4 rows.
    TABLE_ROWS = 32
    FUSED_TABLE_ROWS = 4

    def __init__(
        self,
        config: DecodeConfig,
        target: torch.nn.Module,
        drafter: Drafter | None,
        backend: str,
        propose_inside: bool | None = None,
    ) -> None:
        reasons = (static_obstacle(target), None if drafter is None else drafter.static_obstacle())
        for who, reason in zip(("target", "draft"), reasons, strict=True):
            if reason is not None:
                raise ValueError(f"the {who}: {reason}; decode with compile=False (the eager path)")
        self.target, self.drafter, self.backend = target, drafter, backend
        self.propose_inside_given = propose_inside
        self.device = next(target.parameters()).device
        self._state: _State | None = None
        self._steps: dict[_Key, _Captured] = {}
        self._pool = None
        self.configure(config)

    def configure(self, config: DecodeConfig) -> None:
        """Decode with ``config`` from now on (its verifiers checked; steps captured for another dropped)."""
        _check_verifiers(config)
        if getattr(self, "config", None) is not config:
            self._steps = {}
        self.config = config

    # -- one decode ---------------------------------------------------------------------------------------

    def start(self, prompts: list[list[int]], max_new_tokens: int, generator: torch.Generator) -> None:
        self.generator = generator
        B = len(prompts)
        self._state = state = self._prepare(prompts, max_new_tokens)
        self.proposes_inside = state.context is not None
        self.active = np.ones(B, dtype=bool)
        self.lagging = np.zeros(B, dtype=np.int64)  # real tokens in each row's draft block
        self.widths = self.block_widths()  # (one pending block, the draft's whole buffer)
        first = Pending.from_rows(prompts, self.device)  # the first step reads them whole, as the eager path
        self._first = (first, first)
        self._prefill = self.drafter is not None and self.drafter.reads_features  # mdsd.tree.prefill

    def step(self, request: StepRequest) -> StepReport:
        state, rows = self._state, np.flatnonzero(self.active)
        if self._prefill:  # the target reads the prompts and emits a token; the next step reads the rest
            self._prefill = False
            done = prefill(
                state.target, self._first[0], self.config.temperature, UniformStream(generator=self.generator)
            )
            self._first = (done.root, done.drafter)
            self.lagging = done.summary.draft_pending
            return StepReport(done.summary.rows(rows), 0, drafted=False)
        if request.retrieved is not None:
            state.retrieved.index_copy_(0, torch.as_tensor(rows, device=self.device), request.retrieved)
        limited = request.limits is not None
        if limited:
            limits = np.full(len(self.active), request.depth)
            limits[rows] = request.limits
            state.limit.copy_(torch.from_numpy(limits), non_blocking=True)
        state.active.copy_(torch.from_numpy(self.active), non_blocking=True)
        first = self._first
        key = _Key(
            request.depth,
            limited,
            *self._block(request.depth, int(self.lagging[rows].max()), first is not None),
        )
        self._first = None
        packed, forwards = self._run(state, key, first)
        summary = Summary.read(packed)  # the step's one synchronisation
        self.lagging = summary.draft_pending
        reads = int(request.depth > 0 and key.block > self.widths[0])  # drafting reads the whole buffer
        return StepReport(summary.rows(rows), forwards, reads)

    def retire(self, done: np.ndarray) -> None:
        self.active[np.flatnonzero(self.active)[done]] = False

    def timings(self) -> dict[str, float]:
        return {}

    def _prepare(self, prompts: list[list[int]], max_new_tokens: int) -> _State:
        """The state for this decode, reusing the last one's caches (and so its captured steps) when the
        batch size, the capacity and the temperature match."""
        config, dev = self.config, self.device
        B = len(prompts)
        full = config.plan(config.full_depth)
        width = self.block_widths()[-1]  # the draft's pending buffer
        size = capacity(config, max(len(r) for r in prompts), max_new_tokens, width)
        tables = self.proposes_inside_for(dev, B)
        state = self._state
        if (
            state is None
            or (state.context is not None) != tables
            or state.target.length.shape[0] != B
            or state.target.capacity < size
            or state.target.temperature != config.temperature  # the caches' forwards divide by it
        ):
            # The old steps' graphs die with their state; their pool may outlive them (memory still held)
            # with no graph using it, and CUDA's allocator refuses to capture into such a pool again (an
            # internal assert, seen on an H200): the new state's graphs take a new pool.
            self._steps, self._pool = {}, None
            features = self.drafter is not None and self.drafter.reads_features
            layers = tuple(getattr(self.drafter, "feature_layers", ())) if features else ()
            target = StaticLM(
                self.target, B, size, config.temperature, hidden=features, feature_layers=layers
            )
            draft = None if self.drafter is None else self.drafter.static_cache(B, size, config.temperature)
            retrieved = context = context_len = draft_features = None
            if config.source is not None:
                retrieved = torch.full((B, *config.retrieve), -1, dtype=torch.long, device=dev)
            if tables:
                context = torch.zeros(B, size, dtype=torch.long, device=dev)
                context_len = torch.zeros(B, dtype=torch.long, device=dev)
            if features:  # the target's final hidden state, or the outputs of the drafter's layers
                hidden = self.target.get_output_embeddings().weight
                size_h = hidden.shape[1] * max(1, len(layers))
                draft_features = torch.zeros(B, width, size_h, dtype=hidden.dtype, device=dev)
            state = _State(
                target,
                draft,
                torch.zeros(B, 1, dtype=torch.long, device=dev),
                torch.zeros(B, width, dtype=torch.long, device=dev),
                torch.zeros(B, width, dtype=torch.bool, device=dev),
                draft_features,
                torch.ones(B, dtype=torch.bool, device=dev),
                torch.full((B,), full.max_depth, dtype=torch.long, device=dev),
                retrieved,
                context,
                context_len,
            )
        for cache in (state.target, state.draft):
            if cache is not None:
                cache.reset()
        state.limit.fill_(full.max_depth)
        if state.context is not None:
            table = np.zeros(tuple(state.context.shape), dtype=np.int64)
            for b, row in enumerate(prompts):
                table[b, : len(row)] = row
            state.context.copy_(torch.from_numpy(table))
            state.context_len.copy_(torch.from_numpy(np.array([len(row) for row in prompts])))
        return state

    def proposes_inside_for(self, device: torch.device, rows: int) -> bool:
        """Whether the decoder's source proposes inside the step (its ``propose_table``) for a decode of
        ``rows`` rows on ``device``: ``propose_inside`` if given, else on an accelerator from
        :attr:`TABLE_ROWS` rows on (:attr:`FUSED_TABLE_ROWS` where inductor fuses the table; on the CPU the
        host is the device, and numpy's lookup row by row costs less than the table there)."""
        policy = self.config.policy
        if not has_table(self.config.source) or (policy is not None and policy.reads_proposals):
            return False
        if self.propose_inside_given is not None:
            return self.propose_inside_given
        fused = self.backend.startswith("inductor")
        return device.type != "cpu" and rows >= (self.FUSED_TABLE_ROWS if fused else self.TABLE_ROWS)

    # -- the step -----------------------------------------------------------------------------------------

    def block_widths(self) -> tuple[int, int]:
        """(one pending block, the whole buffer) of the draft: depth + 1 of the decoder's plan, and
        :attr:`LAG` blocks where its depth policy may draft a source's chains alone (else one)."""
        config = self.config
        one = config.plan(config.full_depth).max_depth + 1
        policy = config.policy
        lags = self.drafter is not None and policy is not None and policy.reads_proposals
        return one, one * (self.LAG if lags else 1)

    def _block(self, depth: int, lagging: int, first: bool) -> tuple[int, bool]:
        """(the width of the draft's block the step reads, whether it reads it where its plan draws no
        children) for a step of the plan of ``depth`` whose rows' draft blocks hold up to ``lagging`` real
        tokens: a chains-only step leaves the block to a later step while the buffer has room for its
        tokens; a step that reads reads one block where the tokens fit, the whole buffer otherwise."""
        one, whole = self.widths
        chains_only = self.drafter is not None and depth == 0
        if chains_only and not first and lagging <= whole - one:
            return whole - one, False
        return (one if lagging <= one else whole), chains_only

    def _run(
        self, state: _State, key: _Key, first: tuple[Pending, Pending] | None
    ) -> tuple[torch.Tensor, int]:
        """One step of ``key``: the packed summary and the draft forwards it ran. The first step of a
        decode (``first``: the target's and the drafter's pending blocks, which it reads) and the first step
        of each key run eagerly; the latter learns how many uniforms the step takes, then the step is
        captured for later ones."""
        if first is not None or key not in self._steps:
            stream = UniformStream(generator=self.generator)
            packed, forwards = self._step(state, key, stream, first)
            if key not in self._steps:
                uniforms = torch.zeros(stream.used, dtype=torch.float64, device=packed.device)
                self._steps[key] = _Captured(self._capture(state, key, uniforms), uniforms, forwards)
            return packed, forwards
        step = self._steps[key]
        step.uniforms.uniform_(generator=self.generator)
        return step.run(), step.draft_forwards

    def _step(
        self, state: _State, key: _Key, stream: UniformStream, first: tuple[Pending, Pending] | None = None
    ) -> tuple[torch.Tensor, int]:
        """The step itself (traced by the backends): decode, then commit both caches and write what the
        models read next into the state, in place. Returns the packed summary and the draft forwards.
        ``first``: the first step, which reads these pending blocks instead of the state's tokens."""
        config, width = self.config, key.block
        target_pending = Pending(state.target_ids, torch.ones_like(state.target_ids, dtype=torch.bool))
        features = None if state.draft_features is None else state.draft_features[:, -width:]
        draft_pending = Pending(state.draft_ids[:, -width:], state.draft_real[:, -width:], features)
        if first is not None:
            target_pending, draft_pending = first
        if state.context is not None:  # the source's proposals, made on the device from the rows' contexts
            state.retrieved.copy_(
                config.source.propose_table(state.context, state.context_len, *config.retrieve)
            )
        out = decode_step(
            state.target,
            state.draft,
            target_pending,
            draft_pending,
            config.plan(key.depth),
            config.rule,
            stream,
            state.limit if key.limited else None,
            state.retrieved,
            catch_up=key.catch_up,
        )
        active = state.active.long()
        if state.context is not None:
            _extend(state.context, state.context_len, out.emitted, out.count * active)
        state.target.commit(out.target_keep, out.target_kept * active)
        if state.draft is not None:
            state.draft.commit(out.draft_keep, out.draft_kept * active)
        pad = state.draft_ids.shape[1] - out.draft_next.ids.shape[1]  # left-pad to the full depth
        state.target_ids.copy_(out.target_next.ids)
        state.draft_ids.copy_(torch.nn.functional.pad(out.draft_next.ids, (pad, 0)))
        state.draft_real.copy_(torch.nn.functional.pad(out.draft_next.real, (pad, 0)))
        if state.draft_features is not None:
            state.draft_features.copy_(torch.nn.functional.pad(out.draft_next.features, (0, 0, pad, 0)))
        return out.packed(), out.draft_forwards

    def _capture(self, state: _State, key: _Key, uniforms: torch.Tensor):
        """The step of ``key`` as a callable of no arguments returning the packed summary, reading its
        random numbers from ``uniforms``."""

        def step() -> torch.Tensor:
            return self._step(state, key, UniformStream(uniforms))[0]

        self._pool = self._pool if self._pool is not None else graph_pool(self.backend)
        return capture(step, self.backend, self._pool)


def _check_verifiers(config: DecodeConfig) -> None:
    """Refuse the configuration's node verifiers that read values back on its vocabulary."""
    for k, v in config.rule.verifiers.items():
        if v.reads_back(config.vocab_size):
            raise ValueError(
                f"verifier {config.verifier!r} (k = {k}) reads values back to the host on a "
                f"vocabulary of {config.vocab_size} tokens and cannot run in a captured step; decode with "
                "compile=False (the eager path)"
            )


def _extend(context: torch.Tensor, length: torch.Tensor, tokens: torch.Tensor, count: torch.Tensor) -> None:
    """Append the first ``count`` [B] of ``tokens`` [B, T] to each row of ``context`` [B, C] (in place,
    ``length`` [B] too); the buffer holds every token a decode can emit."""
    T, C = tokens.shape[1], context.shape[1]
    at = (length[:, None] + torch.arange(T, device=tokens.device)).clamp_max(C - 1)  # [B, T]
    new = torch.arange(T, device=tokens.device) < count[:, None]
    context.scatter_(1, at, torch.where(new, tokens, context.gather(1, at)))
    length.add_(count)


def capture(fn, backend: str, pool=None):
    """``fn`` (no arguments, returning a tensor; it must have run once eagerly, so that lazy state exists)
    as a callable that runs it with ``backend`` (:data:`BACKENDS`): replaying one CUDA graph (memory from
    ``pool``, shared by the graphs of one decoder), compiled by ``torch.compile(fullgraph=True)``, both
    (``"inductor-cudagraph"``), or as is ("none"). Capturing records ``fn`` without running it; with
    ``"inductor-cudagraph"`` the first call runs the compiled ``fn`` (compiling it: no kernel is built
    inside a capture) and records it, and later calls replay."""
    if backend == "none":
        return fn
    if backend == "inductor-cudagraph":
        compiled = torch.compile(_own_code(fn), fullgraph=True, dynamic=False, backend="inductor")
        replay = None

        def first_then_replay() -> torch.Tensor:
            nonlocal replay
            if replay is not None:
                return replay()
            out = compiled()
            replay = _graph(compiled, pool)
            return out

        return first_then_replay
    if backend != "cudagraph":
        return torch.compile(_own_code(fn), fullgraph=True, dynamic=False, backend=backend)
    return _graph(fn, pool)


def _graph(fn, pool):
    """``fn`` recorded in one CUDA graph: a callable that replays it and returns the recorded output."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, pool=pool):
        out = fn()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    # The graph reads and writes the tensors fn holds (its closure, its default arguments) at fixed
    # addresses: they must live as long as the graph, or their memory is reused and a replay reads garbage.
    replay.captured = fn
    return replay


def graph_pool(backend: str):
    """A memory pool shared by the CUDA graphs of one owner for ``backend``; None where it captures none."""
    return torch.cuda.graph_pool_handle() if backend in GRAPHS else None


def _own_code(fn):
    """``fn`` with a code object of its own: ``torch.compile`` keeps compiled graphs and their guards per
    code object, so each (plan, batch) step keeps its own instead of all steps sharing one (and its
    recompile limit)."""
    return types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
