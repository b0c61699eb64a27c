"""A decode's configuration, validated once: what both step runners and the host loop read.

:meth:`DecodeConfig.build` checks the arguments of :class:`mdsd.TreeDecoder` (the tree, the verifier, the
temperature, the draft source and its chains, the depth policy, the end-of-sequence tokens) against the
models, and returns a frozen :class:`DecodeConfig`: the verification :class:`~mdsd.tree.step.Rule` (node
verifiers by width, or a path rule's kernel), the step plans by depth (made once each), and the rest as
given. Nothing in the loop or the runners checks arguments again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from mdsd.token_tree import Tree
from mdsd.tree.adaptive import DepthPolicy
from mdsd.tree.drafter import Drafter, check_drafter
from mdsd.tree.models import eos_ids
from mdsd.tree.plan import DynamicTree, Plan, truncated_plan, with_retrieval
from mdsd.tree.step import Rule
from mdsd.verifiers.registry import check_name, path_rule, supports, verifier

__all__ = ["DecodeConfig", "node_verifiers", "path_rule_obstacle"]


@dataclass(frozen=True)
class DecodeConfig:
    """What a decode runs: everything a runner and the host loop need, checked (see :meth:`build`)."""

    tree: Tree | DynamicTree | None  # the drafter's tree (None: no model tree)
    verifier: str  # the name it was given
    rule: Rule  # how a step verifies (node verifiers by width, or a path rule)
    temperature: float
    eos_token_ids: frozenset[int]
    vocab_size: int
    source: object | None = None  # a draft source (mdsd.sources.Source)
    retrieve: tuple[int, int] = (1, 4)  # (width, depth) of its chains
    policy: DepthPolicy | None = None
    _plans: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        target: torch.nn.Module,
        drafter: Drafter | None,
        tree: Tree | DynamicTree | None,
        verifier: str = "spechub",
        temperature: float = 1.0,
        eos_token_id: int | list[int] | None = None,
        depth: DepthPolicy | None = None,
        source: object | None = None,
        retrieve: tuple[int, int] = (1, 4),
    ) -> DecodeConfig:
        """The checked configuration of :class:`mdsd.TreeDecoder`'s arguments (its docstring says what each
        is); ``TypeError`` / ``ValueError`` naming the argument otherwise."""
        if (
            tree is None
            and drafter is not None
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
        tree = None if drafter is None else tree
        if depth is not None and depth.reads_proposals and (source is None or tree is None):
            raise ValueError(
                f"depth={type(depth).__name__}() chooses between a source's chains and the draft model's "
                "tree: give both a source and a tree"
            )
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TypeError(f"temperature must be a number, got {temperature!r}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        vocab_size = check_drafter(target, drafter)
        check_name(verifier)
        path = path_rule(verifier)  # a sequence-level rule (mdsd.sequence), or None: node-wise verification
        static = isinstance(tree, Tree)
        chain = bool((tree.branching <= 1).all()) if static else None
        obstacle = path_rule_obstacle(verifier, static, chain, source is not None, depth is not None)
        if obstacle is not None:
            raise ValueError(obstacle)
        config = cls(
            tree,
            verifier,
            Rule({}, float(temperature), path, tree),
            float(temperature),
            eos_ids(target, eos_token_id),
            vocab_size,
            source,
            tuple(retrieve),
            depth,
        )
        plan = config.plan(config.full_depth)
        widest = max(plan.widths, default=0)
        verifiers = node_verifiers(verifier if path is None else path.drafts_with, plan, float(temperature))
        if widest > vocab_size:
            raise ValueError(f"tree has a node with {widest} children but the vocabulary has {vocab_size}")
        return config.with_verifiers(verifiers)

    def with_verifiers(self, verifiers: dict) -> DecodeConfig:
        """The same configuration verifying a node with k children by ``verifiers[k]`` (its plans kept)."""
        rule = Rule(dict(verifiers), self.rule.temperature, self.rule.path, self.rule.tree)
        return DecodeConfig(
            self.tree,
            self.verifier,
            rule,
            self.temperature,
            self.eos_token_ids,
            self.vocab_size,
            self.source,
            self.retrieve,
            self.policy,
            self._plans,
        )

    @property
    def verified_by(self) -> str:
        """What verifies the drafts, as a summary names it: the verifier's name, and where a node has one
        child but the verifier has no one-draft form (SpecHub: k = 2 only), the single-draft rule that
        verifies it instead (:func:`node_verifiers`): ``"spechub (single-draft where a node has one
        child)"``, or ``"single (spechub has no one-draft form; every node has one child)"`` on a chain.

        Falling back is what multi-draft decoding does (a node with one draft has one optimal rule, the
        single-draft one, which every node verifier reduces to where it has k = 1), so mixed trees (Sequoia's,
        ``kary:2,1``, a source's chains beside a tree) run with SpecHub; the summary says so instead of
        crediting the verifier with nodes it never verified."""
        if self.rule.path is not None or 1 not in self.rule.verifiers or supports(self.verifier, 1):
            return self.verifier  # a path rule, greedy decoding (no node verifier), or no fallback
        if set(self.rule.verifiers) == {1}:
            return f"single ({self.verifier} has no one-draft form; every node has one child)"
        return f"{self.verifier} (single-draft where a node has one child)"

    @property
    def full_depth(self) -> int:
        """The depth of the whole tree (0: none)."""
        tree = self.tree
        return 0 if tree is None else tree.max_depth if isinstance(tree, Tree) else tree.depth

    def plan(self, depth: int) -> Plan:
        """The plan of the tree truncated at ``depth``, with the source's chains (made once per depth)."""
        if depth not in self._plans:
            if self.tree is None or depth == 0:  # depth 0: a source's chains alone
                plan = None if self.source is not None else Plan.root()
            else:
                plan = truncated_plan(self.tree, depth)
            if self.source is not None:
                plan = with_retrieval(plan, *self.retrieve)
            self._plans[depth] = plan
        return self._plans[depth]


def path_rule_obstacle(
    verifier: str, static: bool, chain: bool | None, source: bool = False, depth: bool = False
) -> str | None:
    """Why the path rule ``verifier`` (:func:`mdsd.verifiers.registry.path_rule`) cannot verify a decode, or
    None (also when ``verifier`` is a node verifier): it verifies a whole static tree (``static``) per step,
    with no draft ``source`` and no ``depth`` policy, and a chains-only rule a chain (``chain``; None: not
    known yet, e.g. a Sequoia tree still to build). :meth:`DecodeConfig.build` asks on the decoder's
    arguments; ``mdsd decode`` and the experiments' method specs on their spellings, before loading a model.

    >>> path_rule_obstacle("block", static=True, chain=False)
    "verifier 'block' verifies a chain (Tree.chain(L), --tree chain:N), not a tree"
    >>> path_rule_obstacle("traversal", static=True, chain=False) is None
    True
    """
    path = path_rule(verifier)
    if path is None:
        return None
    if not static or source or depth:
        return (
            f"verifier {verifier!r} verifies a whole static mdsd.Tree per step: no DynamicTree, source or "
            "depth policy"
        )
    if path.chains_only and chain is False:
        return f"verifier {verifier!r} verifies a chain (Tree.chain(L), --tree chain:N), not a tree"
    return None


def node_verifiers(name: str, plan: Plan, temperature: float) -> dict:
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
