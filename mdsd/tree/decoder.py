"""Multi-draft token-tree speculative decoding with any verifier (../shared/MATH.md §3-4).

One step, for every decoded row:

1. **Draft**, level by level: one draft forward per depth over all nodes of that depth (tree attention,
   draft KV cache kept across steps). Each node's children are drawn with its verifier's law from
   ``q = softmax(draft_logits / T)`` (float32).
2. **Target**: one forward over the root and all drafted nodes (a 4-D mask: a node sees the prefix and
   its ancestors; position = root position + depth), reusing the target KV cache; ``p = softmax(logits / T)``.
3. **Verify**: walk from the root. At a node with k children, ``mdsd.verifier(name, k).verify(p, q, drafts)``
   either accepts a child (emit its token, move there) or emits a residual token and stops; a residual
   equal to a child's token is reported as that child and the walk continues into it. At a leaf, a bonus
   token is drawn from p. So each step emits (accepted nodes + 1) tokens from one target forward.
4. **Cache**: only the accepted path's entries are kept in both caches.

Temperature 0 is greedy decoding on its own code path: the children are the draft's top-k tokens and a
child is accepted iff it is the target's argmax, so the output is the target's greedy output.
Rows of a batch decode independently (``generate_batch``); each keeps its own cache entries inside
one batched cache (see :mod:`mdsd.tree.attention`).
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from mdsd.tree.attention import block_mask, select_cache, select_rows
from mdsd.tree.tree import Tree

__all__ = ["TreeDecoder", "TreeDecodeOutput"]

PHASES = ("draft", "target", "verify", "cache")


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
        Tokens each step produced (accepted drafts + 1). The last step may have produced more than
        were kept (cut at ``max_new_tokens`` or EOS); batch efficiency is ``sum(tokens_per_step) / steps``.
    accepted_per_step : list of int
        Draft tokens accepted at each step.
    timings : dict of str to float
        Seconds spent per phase: ``draft`` (draft forwards and drawing the children), ``target``
        (the tree forward), ``verify`` (the walk), ``cache`` (keeping the accepted entries). For a batch
        decode the phases are timed for the whole batch and every row reports the totals.
    stopped_by_eos : bool
        Whether generation ended on an EOS token.
    """

    tokens: torch.Tensor
    steps: int
    tokens_per_step: list[int]
    accepted_per_step: list[int]
    timings: dict[str, float]
    stopped_by_eos: bool = False

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens produced per target forward, ``sum(tokens_per_step) / steps``."""
        return sum(self.tokens_per_step) / max(self.steps, 1)


@dataclass
class _Row:
    tokens: list[int] = field(default_factory=list)
    tokens_per_step: list[int] = field(default_factory=list)
    accepted_per_step: list[int] = field(default_factory=list)
    eos: bool = False


class TreeDecoder:
    """Token-tree speculative decoding of a target model with a draft model.

    Parameters
    ----------
    target, draft : transformers causal LMs
        Models sharing one vocabulary (checked: ``config.vocab_size`` and the output layer sizes).
        They must return a dynamic key/value cache and accept 4-D float attention masks
        (Llama, Qwen2, Mistral, ... with ``attn_implementation`` "eager" or "sdpa").
    tree : Tree
        The token tree drafted at every step.
    verifier : str
        A name of ``mdsd.VERIFIERS``; a node with k children is verified by ``mdsd.verifier(verifier, k)``,
        a node with one child by ``mdsd.verifier("single", 1)``.
    temperature : float
        Sampling temperature T >= 0 for both models; 0 is greedy decoding.
    eos_token_id : int, list of int or None
        Tokens that end generation; by default the target's ``generation_config.eos_token_id``.

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
        draft: torch.nn.Module,
        tree: Tree,
        verifier: str = "spechub",
        temperature: float = 1.0,
        eos_token_id: int | list[int] | None = None,
    ) -> None:
        if not isinstance(tree, Tree):
            raise TypeError(f"tree must be an mdsd.Tree, got {type(tree).__name__}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TypeError(f"temperature must be a number, got {temperature!r}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        self.target, self.draft, self.tree = target, draft, tree
        self.temperature = float(temperature)
        self.vocab_size = _shared_vocab_size(target, draft)
        self.verifier_name = verifier
        self.verifiers = {k: _node_verifier(verifier, k) for k in sorted(set(tree.branching.tolist())) if k}
        widest = max(self.verifiers, default=0)
        if widest > self.vocab_size:
            raise ValueError(
                f"tree has a node with {widest} children but the vocabulary has {self.vocab_size}"
            )
        self.eos_token_ids = _eos_ids(target, eos_token_id)
        # tree tables: children padded with -1 [N, K]; internal nodes and their row in the q table
        kmax = max(widest, 1)
        self._child_table = np.full((tree.num_nodes, kmax), -1, dtype=np.int64)
        for u, kids in enumerate(tree.children):
            self._child_table[u, : len(kids)] = kids
        self._internal = np.flatnonzero(tree.branching > 0)
        self._q_row = np.full(tree.num_nodes, -1, dtype=np.int64)
        self._q_row[self._internal] = np.arange(self._internal.size)

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
        self, input_ids: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None = None
    ) -> list[TreeDecodeOutput]:
        """Decode B prompts of equal length ``input_ids`` [B, L] independently, in one batch."""
        ids = self._check_inputs(input_ids, max_new_tokens)
        B = ids.shape[0]
        rows = [_Row() for _ in range(B)]
        timings = dict.fromkeys(PHASES, 0.0)
        dev = _device(self.target)
        if generator is None:  # fresh entropy, never the global RNG
            generator = torch.Generator(device=dev)
            generator.seed()
        state = _State(ids.to(dev))
        active = np.arange(B)  # original row of each batch row
        while active.size:
            clock = _Clock(dev, timings)
            node_tok, q = self._draft_tree(state, generator)
            clock.lap("draft")
            logits = self._target_tree(state, node_tok)
            clock.lap("target")
            paths, emitted = self._walk(logits, node_tok, q, generator)
            clock.lap("verify")
            done = np.zeros(active.size, dtype=bool)
            for b, r in enumerate(active):
                row, step = rows[r], emitted[b]
                row.accepted_per_step.append(len(paths[b]))
                row.tokens_per_step.append(len(step))
                for tok in step:
                    row.tokens.append(tok)
                    row.eos = tok in self.eos_token_ids
                    if row.eos or len(row.tokens) == max_new_tokens:
                        done[b] = True
                        break
            keep = np.flatnonzero(~done)
            if keep.size:
                self._keep(state, keep, [paths[b] for b in keep], [emitted[b][-1] for b in keep], node_tok)
            clock.lap("cache")
            active = active[keep]
        return [
            TreeDecodeOutput(
                tokens=torch.tensor(row.tokens, dtype=torch.long),
                steps=len(row.tokens_per_step),
                tokens_per_step=row.tokens_per_step,
                accepted_per_step=row.accepted_per_step,
                timings=dict(timings),
                stopped_by_eos=row.eos,
            )
            for row in rows
        ]

    # ---- one step ------------------------------------------------------------------------------

    def _draft_tree(self, s: _State, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft every level; return node tokens [B, N] and q at internal nodes [B, N_internal, V]."""
        tree, b = self.tree, s.t_pending.shape[0]
        dev = s.t_pending.device
        node_tok = torch.zeros(b, tree.num_nodes, dtype=torch.long, device=dev)
        node_tok[:, 0] = s.t_pending[:, -1]  # the root: the last token, not yet in the target cache
        q = torch.empty(b, self._internal.size, self.vocab_size, device=dev)
        # level 0: the draft's pending tokens (causal, left-padded), the root last
        real = s.d_real
        logits, s.d_cache = _forward(
            self.draft,
            s.d_pending,
            block_mask(s.d_valid, _causal(real), _dtype(self.draft)),
            _positions(s.d_valid, real),
            s.d_cache,
            keep=1,
            vocab=self.vocab_size,
        )
        s.d_root_pos = s.d_valid.sum(1) + real.sum(1) - 1
        s.d_valid = torch.cat([s.d_valid, real], dim=1)
        s.d_forwarded = []
        self._expand(np.array([0]), logits.to(dev), node_tok, q, generator)
        for d in range(1, tree.max_depth):
            level = tree.levels[d][tree.branching[tree.levels[d]] > 0]
            if level.size == 0:
                break
            fwd = np.asarray(s.d_forwarded, dtype=np.int64)
            anc = torch.as_tensor(tree.ancestors[np.ix_(level, fwd)], device=s.d_valid.device)
            past = torch.cat(
                [s.d_valid[:, None, :].expand(b, level.size, -1), anc.expand(b, -1, -1)], dim=2
            )  # [B, M, C + F]: the prefix and the forwarded ancestors
            eye = torch.eye(level.size, dtype=torch.bool, device=past.device).expand(b, -1, -1)
            depth = torch.as_tensor(tree.depth[level], device=past.device)
            logits, s.d_cache = _forward(
                self.draft,
                node_tok[:, level].to(past.device),
                block_mask(past, eye, _dtype(self.draft)),
                s.d_root_pos[:, None] + depth,
                s.d_cache,
                keep=level.size,
                vocab=self.vocab_size,
            )
            s.d_forwarded.extend(level.tolist())
            self._expand(level, logits.to(dev), node_tok, q, generator)
        return node_tok, q

    def _expand(self, nodes: np.ndarray, logits: torch.Tensor, node_tok, q, generator) -> None:
        """Draw the children of ``nodes`` from their draft logits [B, M, V] into ``node_tok``."""
        branching = self.tree.branching[nodes]
        has = branching > 0
        nodes, logits, branching = nodes[has], logits[:, has], branching[has]
        if self.temperature == 0:
            for k in np.unique(branching):
                sel = np.flatnonzero(branching == k)
                top = torch.topk(logits[:, sel], int(k), dim=-1).indices  # [B, M_k, k]
                node_tok[:, self._child_table[nodes[sel], :k]] = top
            return
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)  # [B, M, V]
        q[:, self._q_row[nodes]] = probs
        for k in np.unique(branching):
            sel = np.flatnonzero(branching == k)
            drafts = self.verifiers[int(k)].draft(probs[:, sel], generator)  # [B, M_k, k]
            node_tok[:, self._child_table[nodes[sel], :k]] = drafts.to(node_tok.device)

    def _target_tree(self, s: _State, node_tok: torch.Tensor) -> torch.Tensor:
        """One target forward over pending tokens + the drafted nodes; logits at every node [B, N, V]."""
        tree, b = self.tree, node_tok.shape[0]
        P, n = s.t_pending.shape[1], tree.size
        real = s.t_real
        visible = torch.zeros(b, P + n, P + n, dtype=torch.bool, device=real.device)
        visible[:, :P, :P] = _causal(real)
        visible[:, P:, :P] = real[:, None, :]  # every node sees all real pending tokens (the root last)
        visible[:, P:, P:] = torch.as_tensor(tree.ancestors[1:, 1:], device=real.device)
        root_pos = s.t_valid.sum(1) + real.sum(1) - 1
        positions = torch.cat(
            [
                _positions(s.t_valid, real),
                root_pos[:, None] + torch.as_tensor(tree.depth[1:], device=real.device),
            ],
            dim=1,
        )
        logits, s.t_cache = _forward(
            self.target,
            torch.cat([s.t_pending, node_tok[:, 1:]], dim=1),
            block_mask(s.t_valid, visible, _dtype(self.target)),
            positions,
            s.t_cache,
            keep=tree.num_nodes,
            vocab=self.vocab_size,
            who="target",
        )
        s.t_block = P
        return logits

    def _walk(self, logits, node_tok, q, generator) -> tuple[list[list[int]], list[list[int]]]:
        """Verify from the root; per row the accepted nodes and the emitted tokens."""
        b = logits.shape[0]
        cur = np.zeros(b, dtype=np.int64)
        alive = np.ones(b, dtype=bool)
        paths: list[list[int]] = [[] for _ in range(b)]
        emitted: list[list[int]] = [[] for _ in range(b)]
        branching, table = self.tree.branching, self._child_table
        while alive.any():
            for k in np.unique(branching[cur[alive]]):
                r = np.flatnonzero(alive & (branching[cur] == k))
                u = cur[r]
                rt, ut = torch.as_tensor(r), torch.as_tensor(u)
                kids = torch.as_tensor(table[u, :k])  # [R, k]
                row_logits = logits[rt, ut]  # [R, V]
                if self.temperature == 0:
                    tok = row_logits.argmax(dim=-1)
                    if k == 0:
                        idx = torch.full_like(tok, -1)
                    else:
                        match = node_tok[rt[:, None], kids] == tok[:, None]  # [R, k]
                        idx = torch.where(match.any(1), match.int().argmax(1), -1)
                else:
                    p = torch.softmax(row_logits.float() / self.temperature, dim=-1)  # [R, V]
                    if k == 0:  # leaf: bonus token from p
                        tok = torch.multinomial(p, 1, generator=generator).squeeze(1)
                        idx = torch.full_like(tok, -1)
                    else:
                        drafts = node_tok[rt[:, None], kids]  # [R, k]
                        qr = q[rt, torch.as_tensor(self._q_row[u])]  # [R, V]
                        tok, idx = self.verifiers[int(k)].verify(p, qr, drafts, generator)
                tok, idx = tok.tolist(), idx.tolist()
                for i, row in enumerate(r.tolist()):
                    emitted[row].append(tok[i])
                    if idx[i] >= 0:
                        cur[row] = table[u[i], idx[i]]
                        paths[row].append(int(cur[row]))
                    else:
                        alive[row] = False
        return paths, emitted

    def _keep(self, s: _State, rows: np.ndarray, paths, last, node_tok) -> None:
        """Keep the unfinished ``rows``; in both caches keep only the accepted path's entries."""
        sel = torch.as_tensor(rows, device=s.t_valid.device)
        for cache in (s.t_cache, s.d_cache):
            select_rows(cache, sel)
        b = rows.size
        node_tok = node_tok[sel]
        # target: the old live entries, the real pending tokens, the accepted nodes
        n = self.tree.size
        t_keep = torch.cat(
            [s.t_valid[sel], s.t_real[sel], torch.zeros(b, n, dtype=torch.bool, device=sel.device)], 1
        )
        base = s.t_valid.shape[1] + s.t_block - 1  # slot of node u is base + u
        d_keep = torch.cat(
            [s.d_valid[sel], torch.zeros(b, len(s.d_forwarded), dtype=torch.bool, device=sel.device)], 1
        )
        d_slot = {u: s.d_valid.shape[1] + i for i, u in enumerate(s.d_forwarded)}
        pending = []
        for i, path in enumerate(paths):
            if path:
                t_keep[i, [base + u for u in path]] = True
            fwd = [d_slot[u] for u in path if u in d_slot]
            if fwd:
                d_keep[i, fwd] = True
            pending.append([int(node_tok[i, u]) for u in path if u not in d_slot] + [last[i]])
        s.t_valid = _compact(s.t_cache, t_keep)
        s.d_valid = _compact(s.d_cache, d_keep)
        s.t_pending = torch.tensor([[tok] for tok in last], dtype=torch.long, device=sel.device)
        s.t_real = torch.ones(b, 1, dtype=torch.bool, device=sel.device)
        width = max(len(p) for p in pending)  # left-pad the draft's pending tokens
        s.d_pending = torch.tensor([[0] * (width - len(p)) + p for p in pending], device=sel.device)
        s.d_real = torch.tensor(
            [[False] * (width - len(p)) + [True] * len(p) for p in pending], device=sel.device
        )

    # ---- input checks --------------------------------------------------------------------------

    def _check_inputs(self, input_ids: object, max_new_tokens: object) -> torch.Tensor:
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            raise ValueError("input_ids must be a LongTensor of shape [B, L]")
        if input_ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
            raise ValueError(
                f"input_ids is empty (shape {tuple(input_ids.shape)}); the prompt needs >= 1 token"
            )
        if bool((input_ids < 0).any()) or bool((input_ids >= self.vocab_size).any()):
            raise ValueError(f"input_ids holds token ids outside the vocabulary [0, {self.vocab_size})")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
            raise TypeError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        return input_ids.long()


@dataclass
class _State:
    """Per-batch decoding state: each cache, its live-entry mask, and the tokens not yet in it."""

    t_pending: torch.Tensor  # [B, P] tokens not in the target cache; the root is the last one
    t_cache: object = None
    d_cache: object = None

    def __post_init__(self) -> None:
        B, _ = self.t_pending.shape
        dev = self.t_pending.device
        self.t_real = torch.ones_like(self.t_pending, dtype=torch.bool)
        self.t_valid = torch.zeros(B, 0, dtype=torch.bool, device=dev)  # [B, C_target]
        self.d_pending = self.t_pending.clone()  # [B, P'] left-padded; d_real marks the real ones
        self.d_real = self.t_real.clone()
        self.d_valid = torch.zeros(B, 0, dtype=torch.bool, device=dev)  # [B, C_draft]
        self.d_forwarded: list[int] = []  # tree nodes in the draft cache, in cache order
        self.d_root_pos = torch.zeros(B, dtype=torch.long, device=dev)  # position of the root [B]
        self.t_block = 0  # pending tokens of the last target forward (node u is at slot C + t_block - 1 + u)


class _Clock:
    def __init__(self, device: torch.device, timings: dict[str, float]) -> None:
        self.device, self.timings = device, timings
        self.start = time.perf_counter()

    def lap(self, phase: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.timings[phase] += now - self.start
        self.start = now


def _causal(real: torch.Tensor) -> torch.Tensor:
    """Visibility inside a left-padded pending block [B, P] -> [B, P, P]: causal over real tokens."""
    P = real.shape[1]
    tri = torch.ones(P, P, dtype=torch.bool, device=real.device).tril()
    eye = torch.eye(P, dtype=torch.bool, device=real.device)
    return (tri & real[:, None, :] & real[:, :, None]) | eye


def _positions(valid: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Positions of a pending block: after the row's live cache entries, counting real tokens only."""
    return valid.sum(1, keepdim=True) + (real.cumsum(1) - 1).clamp(min=0)


def _compact(cache: object, keep: torch.Tensor) -> torch.Tensor:
    """Move each row's kept slots to the front (in order); return the new live mask [B, C']."""
    counts = keep.sum(1)
    width = int(counts.max())
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :width]
    select_cache(cache, order)
    return torch.arange(width, device=keep.device)[None, :] < counts[:, None]


def _forward(model, ids, mask, positions, cache, *, keep, vocab, who="draft"):
    """Run ``model`` on a block; return the logits of its last ``keep`` tokens [B, keep, V] and the cache."""
    dev = _device(model)
    kwargs = {
        "input_ids": ids.to(dev),
        "attention_mask": mask.to(dev),
        "position_ids": positions.to(dev),
        "past_key_values": cache,
        "use_cache": True,
    }
    if _takes_logits_to_keep(type(model)):
        kwargs["logits_to_keep"] = keep
    out = model(**kwargs)
    logits = out.logits[:, -keep:]
    if logits.shape[-1] != vocab:
        raise ValueError(f"the {who} model returned logits over {logits.shape[-1]} tokens, expected {vocab}")
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(f"the {who} model returned NaN or infinite logits")
    return logits, out.past_key_values


@functools.cache
def _takes_logits_to_keep(model_type: type) -> bool:
    """Whether the model can compute only the last logits (most transformers causal LMs can)."""
    return "logits_to_keep" in inspect.signature(model_type.forward).parameters


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _dtype(model: torch.nn.Module) -> torch.dtype:
    return next(p.dtype for p in model.parameters() if p.is_floating_point())


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


def _node_verifier(name: str, k: int):
    """``mdsd.verifier(name, k)`` for a node with k children (single-draft verification when k = 1)."""
    from mdsd.verifiers import verifier

    if k == 1:
        return verifier("single", 1)
    try:
        return verifier(name, k)
    except ValueError as err:
        raise ValueError(
            f"tree has a node with {k} children, too wide for verifier {name!r}: {err}"
        ) from None


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
