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

from mdsd.tree.adaptive import DepthPolicy
from mdsd.tree.drafter import Drafter, check_drafter
from mdsd.tree.models import eos_ids
from mdsd.tree.plan import DynamicTree, Plan, truncated_plan, with_retrieval
from mdsd.tree.step import Rule
from mdsd.tree.tree import Tree
from mdsd.verifiers.registry import check_name, path_rule, verifier

__all__ = ["DecodeConfig", "node_verifiers"]


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
        if path is not None and (not isinstance(tree, Tree) or source is not None or depth is not None):
            raise ValueError(
                f"verifier {verifier!r} verifies a whole static mdsd.Tree per step: no DynamicTree, "
                "source or depth policy"
            )
        if path is not None and path.chains_only and bool((tree.branching > 1).any()):
            raise ValueError(f"verifier {verifier!r} verifies a chain (Tree.chain(L)), not a tree")
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
