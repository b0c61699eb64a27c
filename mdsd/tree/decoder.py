"""Multi-draft token-tree speculative decoding with any verifier (docs/mathematics.md §3-4).

One step is a ladder of phase functions, for every row of a batch at once:

1. **draft** (:func:`mdsd.tree.draft.draft_tree`): one draft forward per depth over the nodes expanded at
   that depth; each expanded node draws its children with its verifier's law from ``q = softmax(logits / T)``.
2. **target** (:func:`mdsd.tree.step.target_tree`): one target forward over the root and the drafted nodes
   (tree attention), reusing the target's KV cache; ``p = softmax(logits / T)``.
3. **verify** (:func:`mdsd.tree.step.verify_nodes` and :func:`~mdsd.tree.step.walk`): every expanded node is
   verified by ``mdsd.verifier(name, k)`` in parallel; the walk from the root follows the accepted children (a
   residual equal to a drafted child continues into it) and ends with the residual, or a bonus token from p at
   a leaf. So a step emits (accepted nodes + 1) tokens from one target forward.
4. **cache**: both KV caches keep only the accepted path's entries of the step's block.

The host reads one small tensor per step (tokens emitted, cache counts, a NaN flag): nothing else in the loop
waits for the device. Temperature 0 is greedy decoding on its own path (children are the draft's top-k
tokens, a child is accepted iff it is the target's argmax), so the output is the target's greedy output.
Rows of a batch may have prompts of different lengths; each keeps its own cache entries inside one batched
cache, advances by its own accepted count, and leaves the batch when it is done.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import torch

from mdsd.sampling import UniformStream
from mdsd.sources.base import has_table
from mdsd.tree.adaptive import DepthPolicy
from mdsd.tree.cache import ModelCache
from mdsd.tree.compiled import FastPath, backend_of
from mdsd.tree.draft import Pending
from mdsd.tree.ledger import Ledger, TreeDecodeOutput
from mdsd.tree.memory import check_decode_memory
from mdsd.tree.models import eos_ids, shared_vocab_size
from mdsd.tree.plan import DynamicTree, Plan, truncated_plan, with_retrieval
from mdsd.tree.step import Rule, Summary, decode_step
from mdsd.tree.tree import Tree
from mdsd.verifiers.registry import check_name, path_rule, verifier

__all__ = ["TreeDecoder", "TreeDecodeOutput"]

PHASES = ("draft", "target", "verify", "cache")


class TreeDecoder:
    """Token-tree speculative decoding of a target model with a draft model.

    Parameters
    ----------
    target, draft : transformers causal LMs
        Models sharing one vocabulary (checked: ``config.vocab_size`` and the output layer sizes).
        They must return a dynamic key/value cache and accept 4-D float attention masks
        (Llama, Qwen2, Mistral, ... with ``attn_implementation`` "eager" or "sdpa"). ``draft`` may be
        None when a ``source`` drafts alone; with neither, the decoder is plain autoregressive sampling
        of the target (each step emits one token from p), the baseline every tree is compared with.
    tree : Tree, DynamicTree or None
        The token tree the draft model drafts at every step: a fixed :class:`~mdsd.tree.tree.Tree`, or a
        :class:`~mdsd.tree.plan.DynamicTree` grown each step from the draft's probabilities (None: no model
        tree, with ``draft=None``).
    verifier : str
        One of :func:`mdsd.verifiers.verifier_names`: a name of ``mdsd.VERIFIERS`` (or ``NAME:LAW``, e.g.
        "optimal:wor"), whose ``mdsd.verifier(verifier, k)`` verifies a node with k children (single-draft
        verification when the verifier has no k = 1 form); or a sequence-level rule of
        :mod:`mdsd.sequence` that verifies the whole tree of a step at once ("block": block verification of
        a ``Tree.chain``; "traversal": Traversal Verification of a static tree whose children are drawn
        i.i.d.), drafting with the law of its registered node verifier.
    temperature : float
        Sampling temperature T >= 0 for both models; 0 is greedy decoding (no verifier is used).
    eos_token_id : int, list of int or None
        Tokens that end generation; by default the target's ``generation_config.eos_token_id``.
    depth : DepthPolicy or None
        Adaptive draft depth (:mod:`mdsd.tree.adaptive`): before every step each row drafts ``tree``
        truncated at the depth the policy chooses from its earlier steps. None: always the whole tree.
    source : mdsd.sources.Source or None
        A training-free draft source (prompt lookup, datastore, dictionary, ...). Every step it proposes, from
        the row's context, up to ``retrieve[0]`` continuations of up to ``retrieve[1]`` tokens; they hang
        below the root as deterministic chains beside the model's children, whose drawn tokens then come
        from q without the proposed ones (a mixed node, verified exactly as in
        :func:`mdsd.tree.step.verify_nodes`). After each step the source observes the row's new context.
    retrieve : (int, int)
        (width, depth) of the retrieved chains.
    profile : bool or None
        Time each phase. None: on the CPU only (on an accelerator that costs a device synchronisation per
        phase). The fast path (``compile``) does not time phases.
    compile : bool or str
        False (default): the eager reference path (the models' own ``transformers`` caches). True: the fast
        path of :mod:`mdsd.tree.compiled` — static caches, fixed shapes, each step captured in one CUDA
        graph (on CUDA) or compiled by ``torch.compile(fullgraph=True)`` with inductor (elsewhere); or the
        name of the step's backend: "cudagraph", "inductor-cudagraph" (compiled by inductor, then captured),
        "inductor", "aot_eager", "eager" or "none" (the static step uncompiled). Llama / Qwen2-family
        models and verifiers with device kernels (``sync_free``) only. Both paths keep the target's law;
        greedy decoding gives the same tokens.
    propose_inside : bool or None
        Where the fast path's ``source`` proposes, when it has a ``propose_table`` (e.g.
        :class:`mdsd.sources.PromptLookup`): True, inside the step, for the whole batch on the device (no
        host work per row, no read); False, on the host, row by row, between steps (as the eager path
        always does). None (default): inside on an accelerator from
        :attr:`mdsd.tree.compiled.FastPath.TABLE_ROWS` rows on (``FUSED_TABLE_ROWS`` with an inductor
        backend), on the host otherwise. Both give the same proposals.

    Examples
    --------
    >>> dec = TreeDecoder(target, draft, Tree.kary([2, 2]), verifier="spechub", temperature=0.6)
    ... # doctest: +SKIP
    >>> out = dec.generate(input_ids, max_new_tokens=64, generator=torch.Generator().manual_seed(0))
    ... # doctest: +SKIP
    """

    def __init__(
        self,
        target: torch.nn.Module,
        draft: torch.nn.Module | None,
        tree: Tree | DynamicTree | None,
        verifier: str = "spechub",
        temperature: float = 1.0,
        eos_token_id: int | list[int] | None = None,
        depth: DepthPolicy | None = None,
        profile: bool | None = None,
        source: object | None = None,
        retrieve: tuple[int, int] = (1, 4),
        compile: bool | str = False,
        propose_inside: bool | None = None,
    ) -> None:
        if (
            tree is None
            and draft is not None
            or tree is not None
            and not isinstance(tree, (Tree, DynamicTree))
        ):
            raise TypeError(f"tree must be an mdsd.Tree or mdsd.DynamicTree, got {type(tree).__name__}")
        if source is not None and not (
            callable(getattr(source, "propose", None)) and hasattr(source, "observe")
        ):
            raise TypeError(
                f"source must follow mdsd.sources.Source (propose, observe), got {type(source).__name__}"
            )
        if depth is not None and not isinstance(depth, DepthPolicy):
            raise TypeError(f"depth must be a DepthPolicy (mdsd.tree.adaptive), got {type(depth).__name__}")
        if source is not None:
            if len(retrieve) != 2 or not all(isinstance(x, int) and x >= 1 for x in retrieve):
                raise ValueError(f"retrieve must be (width, depth), two integers >= 1; got {retrieve!r}")
        self.target, self.draft, self.tree = target, draft, None if draft is None else tree
        if depth is not None and depth.reads_proposals and (source is None or tree is None):
            raise ValueError(
                f"depth={type(depth).__name__}() chooses between a source's chains and the draft model's "
                "tree: give both a source and a tree"
            )
        self.source, self.retrieve = source, tuple(retrieve)
        self.depth_policy = depth
        self._plans: dict[int, Plan] = {}
        self.plan = self._plan(self._depth_of(self.tree))
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TypeError(f"temperature must be a number, got {temperature!r}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        self.temperature = float(temperature)
        self.vocab_size = shared_vocab_size(target, draft if draft is not None else target)
        self.verifier_name = verifier
        check_name(verifier)
        rule = path_rule(verifier)  # a sequence-level rule (mdsd.sequence), or None: node-wise verification
        self.paths = None if rule is None else rule.name
        if rule is not None and (not isinstance(self.tree, Tree) or source is not None or depth is not None):
            raise ValueError(
                f"verifier {verifier!r} verifies a whole static mdsd.Tree per step: no DynamicTree, "
                "source or depth policy"
            )
        if rule is not None and rule.chains_only and bool((self.tree.branching > 1).any()):
            raise ValueError(f"verifier {verifier!r} verifies a chain (Tree.chain(L)), not a tree")
        self.verifiers = _node_verifiers(
            verifier if rule is None else rule.drafts_with, self.plan, self.temperature
        )
        widest = max(self.plan.widths, default=0)
        if widest > self.vocab_size:
            raise ValueError(
                f"tree has a node with {widest} children but the vocabulary has {self.vocab_size}"
            )
        self.eos_token_ids = eos_ids(target, eos_token_id)
        self.profile = profile
        self.compile = backend_of(compile, _device(target))
        if propose_inside is not None and not isinstance(propose_inside, bool):
            raise TypeError(f"propose_inside must be True, False or None, got {propose_inside!r}")
        if propose_inside and (self.compile is None or not has_table(source)):
            raise ValueError(
                "propose_inside=True needs the fast path (compile) and a source with propose_table (e.g. "
                f"PromptLookup); got compile={compile!r}, source {type(source).__name__}"
            )
        if propose_inside and depth is not None and depth.reads_proposals:
            raise ValueError(
                f"propose_inside=True: depth={type(depth).__name__}() reads the proposals on the host before "
                "each step; leave propose_inside unset"
            )
        self.propose_inside = propose_inside
        self._fast_path = None
        if self.compile is not None:
            self._fast_path = FastPath(self, self.compile)  # refuses what the fast path cannot run

    # ---- public API --------------------------------------------------------------------------

    def generate(
        self, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None = None
    ) -> TreeDecodeOutput:
        """Decode one prompt ``input_ids`` [1, L]; see :class:`TreeDecodeOutput`."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.shape[0] != 1:
            shape = (
                tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            )
            raise ValueError(f"input_ids must be a LongTensor of shape [1, L], got {shape}")
        return self.generate_batch(input_ids, max_new_tokens, generator)[0]

    @torch.no_grad()
    def generate_batch(
        self,
        prompts: torch.Tensor | Sequence[Sequence[int] | torch.Tensor],
        max_new_tokens: int,
        generator: torch.Generator | None = None,
    ) -> list[TreeDecodeOutput]:
        """Decode B prompts together: a LongTensor [B, L], or a list of token sequences of any lengths.

        Each row advances by its own accepted count and leaves the batch when it is done; the result of each
        row is what :meth:`generate` would produce for it alone under the same randomness law.
        """
        rows_in = self._check_inputs(prompts, max_new_tokens)
        dev = _device(self.target)
        generator = self._check_generator(generator, dev)
        check_decode_memory(self.target, self.draft, self.plan, rows_in, max_new_tokens, dev)
        if self._fast_path is not None:
            return self._fast_path.generate(rows_in, max_new_tokens, generator)
        B = len(rows_in)
        profile = self.profile if self.profile is not None else dev.type == "cpu"
        timings = dict.fromkeys(("total", *PHASES) if profile else ("total",), 0.0)
        start = time.perf_counter()
        ledger = Ledger(B, max_new_tokens, self.eos_token_ids)
        t_cache = ModelCache(self.target, B, dev, self.temperature)
        d_cache = ModelCache(self.draft, B, dev, self.temperature) if self.draft is not None else None
        t_pending = d_pending = Pending.from_rows(rows_in, dev)
        active = np.arange(B)  # original row of each batch row
        policy, full = self.depth_policy, self._depth_of(self.tree)
        fork = getattr(self.source, "fork", None)  # a source with per-sequence state: one per row
        sources = [fork() if fork else self.source for _ in range(B)]
        depths = policy.start(B, full) if policy is not None else None
        while active.size:
            clock = _Clock(dev, timings, profile)
            step_start = time.perf_counter()
            retrieved = None
            if self.source is not None:
                contexts = [rows_in[r] + ledger.emitted(r) for r in active]
                retrieved, proposed = self._retrieve([sources[r] for r in active], contexts, dev)
                if depths is not None:
                    depths = policy.given_proposals(depths, proposed)
            plan, limit = self.plan, None
            if depths is not None:
                plan = self._plan(int(depths.max()))
                if depths.min() < depths.max():  # rows differ: expansions below a row's depth are off
                    limit = torch.as_tensor(depths, device=dev)
            stream = UniformStream(generator=generator)  # the step's one source of random numbers
            out, bad, forwards = decode_step(
                t_cache, d_cache, t_pending, d_pending, plan, self.rule, stream, limit, retrieved, clock.lap
            )
            summary = Summary.read(out.packed(bad))  # the step's one synchronisation
            clock.lap("verify")
            row_depths = depths if depths is not None else np.full(active.size, plan.max_depth)
            elapsed = time.perf_counter() - step_start  # up to the step's synchronisation
            done = ledger.record(active, summary, row_depths, forwards, elapsed)
            if depths is not None:
                depths = policy.update(depths, summary.accepted, full)
            if self.source is not None:
                for r in active:
                    sources[r].observe(rows_in[r] + ledger.emitted(r))
            t_cache.commit(out.target_keep[:, : summary.target_kept.max()], out.target_kept)
            if d_cache is not None and summary.draft_kept.max() > 0:  # 0: it read nothing (a lag step)
                d_cache.commit(out.draft_keep[:, : summary.draft_kept.max()], out.draft_kept)
            width = int(summary.draft_pending.max())  # the draft's pending block, trimmed to its widest row
            t_pending = out.target_next
            d_pending = Pending(out.draft_next.ids[:, -width:], out.draft_next.real[:, -width:])
            if done.any():
                keep = torch.as_tensor(np.flatnonzero(~done), device=dev)
                for cache in (t_cache, d_cache):
                    if cache is not None:
                        cache.select_rows(keep)
                t_pending = Pending(t_pending.ids[keep], t_pending.real[keep])
                d_pending = Pending(d_pending.ids[keep], d_pending.real[keep])
                active = active[~done]
                if depths is not None:
                    depths = depths[~done]
                    policy.keep(np.flatnonzero(~done))
            clock.lap("cache")
        timings["total"] = time.perf_counter() - start
        return ledger.outputs(timings)

    @property
    def rule(self) -> Rule:
        """How a step verifies (the current ``verifiers``, temperature and sequence-level rule)."""
        return Rule(self.verifiers, self.temperature, self.paths, self.tree)

    @staticmethod
    def _depth_of(tree: Tree | DynamicTree | None) -> int:
        return 0 if tree is None else tree.max_depth if isinstance(tree, Tree) else tree.depth

    def _plan(self, depth: int) -> Plan:
        """The plan of the tree truncated at ``depth``, with the retrieved chains (made once per depth)."""
        if depth not in self._plans:
            if self.tree is None or depth == 0:  # depth 0: a source's chains alone
                plan = None if self.source is not None else Plan.root()
            else:
                plan = truncated_plan(self.tree, depth)
            if self.source is not None:
                plan = with_retrieval(plan, *self.retrieve)
            self._plans[depth] = plan
        return self._plans[depth]

    def _retrieve(
        self, sources: list, contexts: list[list[int]], device: torch.device
    ) -> tuple[torch.Tensor, np.ndarray]:
        """Each row's proposals on ``device``, tokens [B, width, depth] (-1 where there is none), and the
        length of each row's longest proposal [B] on the host."""
        width, depth = self.retrieve
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

    # ---- input checks --------------------------------------------------------------------------

    def _check_inputs(self, prompts: object, max_new_tokens: object) -> list[list[int]]:
        if isinstance(prompts, torch.Tensor):
            if prompts.ndim != 2:
                raise ValueError(
                    f"prompts must be a LongTensor [B, L] or a list of sequences, got {tuple(prompts.shape)}"
                )
            rows = list(prompts)
        elif isinstance(prompts, Sequence) and not isinstance(prompts, (str, bytes)):
            rows = [torch.as_tensor(r, device="cpu") for r in prompts]
        else:
            raise TypeError(
                "prompts must be a LongTensor [B, L] or a list of token sequences, "
                f"got {type(prompts).__name__}"
            )
        if not rows:
            raise ValueError("prompts is empty: give at least one prompt")
        out = []
        for i, r in enumerate(rows):
            if r.dtype not in (torch.int64, torch.int32) or r.ndim != 1:
                raise TypeError(
                    f"prompt {i} must be a 1-D sequence of integer token ids, got dtype {r.dtype}"
                )
            if r.numel() == 0:
                raise ValueError(f"prompt {i} is empty; a prompt needs >= 1 token")
            if bool((r < 0).any()) or bool((r >= self.vocab_size).any()):
                raise ValueError(f"prompt {i} holds token ids outside the vocabulary [0, {self.vocab_size})")
            out.append(r.tolist())
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
            raise TypeError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        return out

    @staticmethod
    def _check_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator:
        if generator is None:  # fresh entropy, never the global RNG
            generator = torch.Generator(device=device)
            generator.seed()
            return generator
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if torch.device(generator.device).type != device.type:
            raise ValueError(
                f"generator is on {generator.device} but the models are on {device}; "
                f"pass torch.Generator(device={str(device)!r})"
            )
        return generator


class _Clock:
    def __init__(self, device: torch.device, timings: dict[str, float], profile: bool) -> None:
        self.device, self.timings, self.profile = device, timings, profile
        self.start = time.perf_counter()

    def lap(self, phase: str) -> None:
        if not self.profile:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.timings[phase] += now - self.start
        self.start = now


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _node_verifiers(name: str, plan: Plan, temperature: float) -> dict:
    """{k: the verifier of a node with k children} for the node verifier ``name`` (none at T = 0)."""
    if temperature == 0:
        return {}
    out = {}
    for k in plan.widths:
        try:
            out[k] = verifier(name, k)
        except ValueError as err:
            if k != 1:
                raise ValueError(
                    f"tree has a node with {k} children, too wide for verifier {name!r}: {err}"
                ) from None
            out[k] = verifier("single", 1)
    return out
