"""Multi-draft token-tree speculative decoding with any verifier (../shared/MATH.md §3-4).

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

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mdsd.tree.adaptive import DepthPolicy
from mdsd.tree.cache import ModelCache
from mdsd.tree.draft import Pending, draft_tree
from mdsd.tree.plan import DynamicTree, Plan, static_plan, with_retrieval
from mdsd.tree.step import target_tree, verify_nodes, verify_paths, walk
from mdsd.tree.tree import Tree

__all__ = ["TreeDecoder", "TreeDecodeOutput"]

PHASES = ("draft", "target", "verify", "cache")
PATH_RULES = ("block", "traversal")  # sequence-level verifiers (mdsd.sequence) the decoder runs


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
    step_seconds : list of float
        Wall time of each step (the whole batch's step), read between the steps' host synchronisations, so
        measuring it costs nothing on an accelerator.
    timings : dict of str to float
        Seconds: ``total``, and per phase (``draft``, ``target``, ``verify``, ``cache``) when the decoder
        profiles (always on the CPU; on an accelerator only with ``profile=True``, which synchronises the
        device at each phase boundary). For a batch decode the times are those of the whole batch.
    stopped_by_eos : bool
        Whether generation ended on an EOS token.
    """

    tokens: torch.Tensor
    steps: int
    tokens_per_step: list[int]
    accepted_per_step: list[int]
    retrieved_per_step: list[int]
    depth_per_step: list[int]
    draft_forwards: int
    step_seconds: list[float]
    timings: dict[str, float]
    stopped_by_eos: bool = False

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens emitted per target forward, ``len(tokens) / steps``."""
        return sum(self.tokens_per_step) / max(self.steps, 1)


@dataclass
class _Row:
    tokens: list[int] = field(default_factory=list)
    tokens_per_step: list[int] = field(default_factory=list)
    accepted_per_step: list[int] = field(default_factory=list)
    retrieved_per_step: list[int] = field(default_factory=list)
    depth_per_step: list[int] = field(default_factory=list)
    draft_forwards: int = 0
    step_seconds: list[float] = field(default_factory=list)
    eos: bool = False


class TreeDecoder:
    """Token-tree speculative decoding of a target model with a draft model.

    Parameters
    ----------
    target, draft : transformers causal LMs
        Models sharing one vocabulary (checked: ``config.vocab_size`` and the output layer sizes).
        They must return a dynamic key/value cache and accept 4-D float attention masks
        (Llama, Qwen2, Mistral, ... with ``attn_implementation`` "eager" or "sdpa"). ``draft`` may be
        None when a ``source`` drafts alone.
    tree : Tree, DynamicTree or None
        The token tree the draft model drafts at every step: a fixed :class:`~mdsd.tree.tree.Tree`, or a
        :class:`~mdsd.tree.plan.DynamicTree` grown each step from the draft's probabilities (None: no model
        tree, with ``draft=None``).
    verifier : str
        A name of ``mdsd.VERIFIERS`` (or ``NAME:LAW``, e.g. "optimal:wor"); a node with k children is
        verified by ``mdsd.verifier(verifier, k)`` (by single-draft verification when the verifier has no
        k = 1 form). Or a sequence-level rule of :mod:`mdsd.sequence` that verifies the whole tree of a
        step at once: "block" (block verification of a ``Tree.chain``) or "traversal" (Traversal
        Verification of a static tree whose children are drawn i.i.d.).
    temperature : float
        Sampling temperature T >= 0 for both models; 0 is greedy decoding (no verifier is used).
    eos_token_id : int, list of int or None
        Tokens that end generation; by default the target's ``generation_config.eos_token_id``.
    depth : DepthPolicy or None
        Adaptive draft depth (:mod:`mdsd.tree.adaptive`): before every step each row drafts ``tree``
        truncated at the depth the policy chooses from its earlier steps. None: always the whole tree.
    source : mdsd.drafters.Source or None
        A training-free draft source (prompt lookup, datastore, dictionary, ...). Every step it proposes, from
        the row's context, up to ``retrieve[0]`` continuations of up to ``retrieve[1]`` tokens; they hang
        below the root as deterministic chains beside the model's children, whose drawn tokens then come
        from q without the proposed ones (a mixed node, verified exactly as in
        :func:`mdsd.tree.step.verify_nodes`). After each step the source observes the row's new context.
    retrieve : (int, int)
        (width, depth) of the retrieved chains.
    profile : bool or None
        Time each phase. None: on the CPU only (on an accelerator that costs a device synchronisation per
        phase).

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
    ) -> None:
        if (
            tree is None
            and draft is not None
            or tree is not None
            and not isinstance(tree, (Tree, DynamicTree))
        ):
            raise TypeError(f"tree must be an mdsd.Tree or mdsd.DynamicTree, got {type(tree).__name__}")
        if draft is None and source is None:
            raise ValueError("give a draft model, a source (mdsd.drafters), or both")
        if source is not None and not (
            callable(getattr(source, "propose", None)) and hasattr(source, "observe")
        ):
            raise TypeError(
                f"source must follow mdsd.drafters.Source (propose, observe), got {type(source).__name__}"
            )
        if depth is not None and not isinstance(depth, DepthPolicy):
            raise TypeError(f"depth must be a DepthPolicy (mdsd.tree.adaptive), got {type(depth).__name__}")
        if source is not None:
            if len(retrieve) != 2 or not all(isinstance(x, int) and x >= 1 for x in retrieve):
                raise ValueError(f"retrieve must be (width, depth), two integers >= 1; got {retrieve!r}")
        self.target, self.draft, self.tree = target, draft, None if draft is None else tree
        self.source, self.retrieve = source, tuple(retrieve)
        self.depth_policy = depth
        self._plans: dict[int, Plan] = {}
        self.plan = self._plan(self._depth_of(self.tree))
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TypeError(f"temperature must be a number, got {temperature!r}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        self.temperature = float(temperature)
        self.vocab_size = _shared_vocab_size(target, draft if draft is not None else target)
        self.verifier_name = verifier
        self.paths = verifier if verifier in PATH_RULES else None  # a sequence-level rule
        if self.paths is not None and (
            not isinstance(self.tree, Tree) or source is not None or depth is not None
        ):
            raise ValueError(
                f"verifier {verifier!r} verifies a whole static mdsd.Tree per step: no DynamicTree, "
                "source or depth policy"
            )
        if verifier == "block" and bool((self.tree.branching > 1).any()):
            raise ValueError("verifier 'block' verifies a chain (Tree.chain(L)); use 'traversal' for a tree")
        self.verifiers = _node_verifiers(verifier, self.plan, self.temperature)
        widest = max(self.plan.widths, default=0)
        if widest > self.vocab_size:
            raise ValueError(
                f"tree has a node with {widest} children but the vocabulary has {self.vocab_size}"
            )
        self.eos_token_ids = _eos_ids(target, eos_token_id)
        self.profile = profile

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
        B = len(rows_in)
        rows = [_Row() for _ in range(B)]
        profile = self.profile if self.profile is not None else dev.type == "cpu"
        timings = dict.fromkeys(("total", *PHASES) if profile else ("total",), 0.0)
        start = time.perf_counter()
        t_cache, d_cache = ModelCache(B, dev), ModelCache(B, dev)
        t_pending = d_pending = Pending.from_rows(rows_in, dev)
        active = np.arange(B)  # original row of each batch row
        policy, full = self.depth_policy, self._depth_of(self.tree)
        fork = getattr(self.source, "fork", None)  # a source with per-sequence state: one per row
        sources = [fork() if fork else self.source for _ in range(B)]
        depths = policy.start(B, full) if policy is not None else None
        while active.size:
            clock = _Clock(dev, timings, profile)
            step_start = time.perf_counter()
            plan, limit = self.plan, None
            if depths is not None:
                plan = self._plan(int(depths.max()))
                if depths.min() < depths.max():  # rows differ: expansions below a row's depth are off
                    limit = torch.as_tensor(depths, device=dev)
            retrieved = None
            if self.source is not None:
                contexts = [rows_in[r] + rows[r].tokens for r in active]
                retrieved = self._retrieve([sources[r] for r in active], contexts, dev)
            d_start = d_cache.length
            drafted, bad = draft_tree(
                self.draft,
                d_cache,
                d_pending,
                plan,
                self.verifiers,
                self.temperature,
                generator,
                limit,
                retrieved,
            )
            clock.lap("draft")
            t_start = t_cache.length
            logits, bad_target = target_tree(self.target, t_cache, t_pending, drafted)
            bad = bad.long() | 2 * bad_target.long()
            clock.lap("target")
            if self.paths is not None and self.temperature > 0:
                next_node, stop = verify_paths(
                    drafted, logits, self.paths, self.tree, self.temperature, generator
                )
            else:
                next_node, stop = verify_nodes(drafted, logits, self.verifiers, self.temperature, generator)
            out = walk(drafted, next_node, stop, t_pending, d_pending)
            summary = out.host(bad)  # the step's one synchronisation
            clock.lap("verify")
            row_depths = depths if depths is not None else np.full(active.size, plan.max_depth)
            done = self._record(summary, rows, active, row_depths, drafted.forwards, max_new_tokens)
            elapsed = time.perf_counter() - step_start  # up to the step's synchronisation
            for r in active:
                rows[r].step_seconds.append(elapsed)
            if depths is not None:
                depths = policy.update(depths, np.array([s[1] for s in summary]), full)
            if self.source is not None:
                for r in active:
                    sources[r].observe(rows_in[r] + rows[r].tokens)
            t_cache.keep_block(t_start, out.target_keep[:, : max(s[2] for s in summary)], out.target_kept)
            if self.draft is not None:
                d_cache.keep_block(d_start, out.draft_keep[:, : max(s[3] for s in summary)], out.draft_kept)
            width = max(s[4] for s in summary)  # the draft's pending block, trimmed to its widest row
            t_pending = out.target_next
            d_pending = Pending(out.draft_next.ids[:, -width:], out.draft_next.real[:, -width:])
            if done.any():
                keep = torch.as_tensor(np.flatnonzero(~done), device=dev)
                for cache in (t_cache, d_cache):
                    cache.select_rows(keep)
                t_pending = Pending(t_pending.ids[keep], t_pending.real[keep])
                d_pending = Pending(d_pending.ids[keep], d_pending.real[keep])
                active = active[~done]
                if depths is not None:
                    depths = depths[~done]
                    policy.keep(np.flatnonzero(~done))
            clock.lap("cache")
        timings["total"] = time.perf_counter() - start
        return [
            TreeDecodeOutput(
                tokens=torch.tensor(row.tokens, dtype=torch.long, device="cpu"),
                steps=len(row.tokens_per_step),
                tokens_per_step=row.tokens_per_step,
                accepted_per_step=row.accepted_per_step,
                retrieved_per_step=row.retrieved_per_step,
                depth_per_step=row.depth_per_step,
                draft_forwards=row.draft_forwards,
                step_seconds=row.step_seconds,
                timings=dict(timings),
                stopped_by_eos=row.eos,
            )
            for row in rows
        ]

    @staticmethod
    def _depth_of(tree: Tree | DynamicTree | None) -> int:
        return 0 if tree is None else tree.max_depth if isinstance(tree, Tree) else tree.depth

    def _plan(self, depth: int) -> Plan:
        """The plan of the tree truncated at ``depth``, with the retrieved chains (made once per depth)."""
        if depth not in self._plans:
            tree = self.tree
            if tree is None:
                plan = None
            elif isinstance(tree, Tree):
                plan = static_plan(tree.truncate(depth))
            else:
                plan = dataclasses.replace(tree, depth=depth).plan()
            if self.source is not None:
                plan = with_retrieval(plan, *self.retrieve)
            self._plans[depth] = plan
        return self._plans[depth]

    def _retrieve(self, sources: list, contexts: list[list[int]], device: torch.device) -> torch.Tensor:
        """Each row's proposals: tokens [B, width, depth], -1 where there is none."""
        width, depth = self.retrieve
        table = np.full((len(contexts), width, depth), -1, dtype=np.int64)
        for b, (source, context) in enumerate(zip(sources, contexts, strict=True)):
            for i, proposal in enumerate(source.propose(context, width, depth)[:width]):
                tokens = proposal.tokens[:depth]
                table[b, i, : len(tokens)] = tokens
        host = torch.from_numpy(table)
        if device.type == "cuda":  # an asynchronous copy: the device does not wait for the host
            return host.pin_memory().to(device, non_blocking=True)
        return host.to(device)

    # ---- host bookkeeping --------------------------------------------------------------------

    def _record(self, summary, rows, active, depths, forwards, max_new_tokens) -> np.ndarray:
        """Append each row's emitted tokens (cut at EOS or the budget); return which rows are done [B]."""
        done = np.zeros(len(summary), dtype=bool)
        for b, (count, accepted, _, _, _, retrieved, bad, *emitted) in enumerate(summary):
            if bad:
                who = "draft" if bad & 1 else "target"
                raise ValueError(f"the {who} model returned NaN or infinite logits")
            row = rows[active[b]]
            before = len(row.tokens)
            for tok in emitted[:count]:
                row.tokens.append(tok)
                row.eos = tok in self.eos_token_ids
                if row.eos or len(row.tokens) == max_new_tokens:
                    done[b] = True
                    break
            row.tokens_per_step.append(len(row.tokens) - before)
            row.accepted_per_step.append(accepted)
            row.retrieved_per_step.append(retrieved)
            row.depth_per_step.append(int(depths[b]))
            row.draft_forwards += forwards
        return done

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


def _shared_vocab_size(target: torch.nn.Module, draft: torch.nn.Module) -> int:
    sizes = {}
    for who, model in (("target", target), ("draft", draft)):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"{who} must be a transformers causal LM (a torch Module), got {type(model).__name__}"
            )
        config_size = getattr(getattr(model, "config", None), "vocab_size", None)
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        head_size = head.weight.shape[0] if head is not None else config_size
        if config_size is None or head_size is None:
            raise TypeError(f"{who} has no config.vocab_size; is it a transformers causal LM?")
        sizes[who] = (int(config_size), int(head_size))
    if len({*sizes["target"], *sizes["draft"]}) != 1:
        raise ValueError(
            "target and draft must share one vocabulary: (config.vocab_size, output size) is "
            f"{sizes['target']} for the target and {sizes['draft']} for the draft"
        )
    return sizes["target"][0]


def verifier_names() -> tuple[str, ...]:
    """The verifier names the decoder takes, as listed to users: the registry, "optimal:wor" (any
    ``NAME:LAW`` / ``NAME-LAW`` of :func:`mdsd.verifier` is taken too) and the path rules."""
    from mdsd.verifiers import VERIFIERS

    return (*VERIFIERS, "optimal:wor", *PATH_RULES)


def decodable(name: str) -> bool:
    """Whether the decoder runs verifier ``name`` (a path rule, or a name :func:`mdsd.verifier` takes)."""
    from mdsd.verifiers import verifier_class

    if name in PATH_RULES:
        return True
    try:
        verifier_class(name)
    except ValueError:
        return False
    return True


def _node_verifiers(name: str, plan: Plan, temperature: float) -> dict:
    """{k: the verifier of a node with k children}; the name is checked whatever the tree (none at T = 0).

    The path rules draft with the law they verify: "block" one draft per node, "traversal" i.i.d. children
    (the drafting kernels of "single" and "rrs")."""
    from mdsd.verifiers import verifier

    if not decodable(name):
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(verifier_names())}")
    if name in PATH_RULES:
        name = "single" if name == "block" else "rrs"
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


def _eos_ids(target: torch.nn.Module, eos_token_id: int | list[int] | None) -> frozenset[int]:
    if eos_token_id is None:
        config = getattr(target, "generation_config", None) or getattr(target, "config", None)
        eos_token_id = getattr(config, "eos_token_id", None)
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else list(eos_token_id)
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError(f"eos_token_id must be a token id or a list of them, got {eos_token_id!r}")
    return frozenset(int(t) for t in ids)
