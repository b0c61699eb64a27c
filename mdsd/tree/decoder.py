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

from collections.abc import Sequence

import numpy as np
import torch

from mdsd.sources.base import has_table
from mdsd.token_tree import Tree
from mdsd.tree.adaptive import DepthPolicy
from mdsd.tree.compiled import CapturedRunner, backend_of
from mdsd.tree.config import DecodeConfig
from mdsd.tree.drafter import as_drafter
from mdsd.tree.eager import EagerRunner
from mdsd.tree.ledger import TreeDecodeOutput
from mdsd.tree.loop import decode
from mdsd.tree.memory import check_decode_memory
from mdsd.tree.plan import DynamicTree, Plan
from mdsd.tree.spec import parse_method

__all__ = ["TreeDecoder", "TreeDecodeOutput"]


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
        The token tree the draft model drafts at every step: a fixed :class:`~mdsd.token_tree.Tree`, or a
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
        :attr:`mdsd.tree.compiled.CapturedRunner.TABLE_ROWS` rows on (``FUSED_TABLE_ROWS`` with an inductor
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
        self.target, self.draft = target, draft
        self.drafter = as_drafter(draft)
        self.config = DecodeConfig.build(
            target, self.drafter, tree, verifier, temperature, eos_token_id, depth, source, retrieve
        )
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
        self._captured = None
        if self.compile is not None:  # refuses what the fast path cannot run
            self._captured = CapturedRunner(self.config, target, self.drafter, self.compile, propose_inside)

    @classmethod
    def from_method(
        cls,
        target: torch.nn.Module,
        draft: object,
        method: str,
        temperature: float = 1.0,
        *,
        datastore: str = "",
        seconds=None,
        **options,
    ) -> TreeDecoder:
        """The decoder of a method spec ``TREE/VERIFIER[/POLICY][+SOURCE]`` (:mod:`mdsd.tree.spec`, as the
        experiments and ``mdsd decode`` spell methods); ``datastore``, ``seconds``: what a ``datastore``
        source and the ``rate`` policy need; ``options``: the other arguments of the decoder. ``draft`` is
        not used where the method has no model tree (``none``).

        >>> dec = TreeDecoder.from_method(target, draft, "chain:4/single/first+lookup", 0.6)  # doctest: +SKIP
        """
        arguments = parse_method(method).decoder_arguments(datastore, seconds)
        drafter = None if arguments["tree"] is None else draft
        return cls(target, drafter, temperature=temperature, **arguments, **options)

    # ---- what it decodes with --------------------------------------------------------------------

    tree = property(lambda self: self.config.tree, doc="The drafter's tree (None: no model tree).")
    temperature = property(lambda self: self.config.temperature, doc="Sampling temperature T.")
    source = property(lambda self: self.config.source, doc="The draft source, or None.")
    retrieve = property(lambda self: self.config.retrieve, doc="(width, depth) of the source's chains.")
    depth_policy = property(lambda self: self.config.policy, doc="The adaptive depth policy, or None.")
    eos_token_ids = property(lambda self: self.config.eos_token_ids, doc="Tokens that end generation.")
    vocab_size = property(lambda self: self.config.vocab_size, doc="The shared vocabulary's size V.")
    verifier_name = property(lambda self: self.config.verifier, doc="The verifier's name, as given.")
    verified_by = property(
        lambda self: self.config.verified_by,
        doc="What verifies the drafts: the name, and the single-draft fallback where one is used.",
    )
    rule = property(lambda self: self.config.rule, doc="How a step verifies (mdsd.tree.step.Rule).")

    @property
    def plan(self) -> Plan:
        """The step plan of the whole tree."""
        return self.config.plan(self.config.full_depth)

    @property
    def verifiers(self) -> dict:
        """{k: the node verifier of a node with k children}; assigning swaps them (e.g. a verifier with
        other options) for the following decodes."""
        return self.config.rule.verifiers

    @verifiers.setter
    def verifiers(self, verifiers: dict) -> None:
        self.config = self.config.with_verifiers(verifiers)

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
        rows = self._check_inputs(prompts, max_new_tokens)
        dev = _device(self.target)
        generator = self._check_generator(generator, dev)
        check_decode_memory(self.target, self.drafter, self.plan, rows, max_new_tokens, dev)
        if self._captured is not None:
            self._captured.configure(self.config)  # the verifiers may have been swapped since
            runner = self._captured
        else:
            runner = EagerRunner(self.config, self.target, self.drafter, self.profile)
        return decode(self.config, runner, rows, max_new_tokens, generator, dev)

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


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
