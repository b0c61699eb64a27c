"""Lossless multi-draft verifiers (docs/mathematics.md §3), each a batched torch sampler with an exact
acceptance, an exact output law and a slow float64 reference.

The verifiers register themselves by name (:mod:`mdsd.verifiers.registry`): ``VERIFIERS`` lists the node
verifiers, ``verifier(name, k)`` builds one, ``supports(name, k)`` says whether it runs with k drafts,
``verifier_class(name)`` gives its class, which declares what it supports (``supported_k``,
``supports_k(k)``, the laws it takes) and the law it drafts with (``verifier(name, k).law``), like
:mod:`mdsd.laws`' registry. The CLI, the report, the experiments and the tree decoder ask the registry
instead of testing names. Importing this package imports every module in it, so a new verifier is its
module (a ``Verifier`` subclass with ``@register``: kernel, exact acceptance, exact output law, reference)
and its tests.

Every verifier has a slow float64 reference that its sampler matches under the same uniforms.

The optimal verifier and its support (the two-step verifier, the priority layout and its reference, the Luce
rule, the fallback for drafts without replacement) live apart, in the subpackage
:mod:`mdsd.verifiers.optimal`; this package imports it like its modules.
"""

from __future__ import annotations

import importlib
import pkgutil

from mdsd.verifiers.base import Verifier
from mdsd.verifiers.estimate import AcceptanceEstimate, estimate_acceptance
from mdsd.verifiers.ops import Uniforms, draw_uniforms
from mdsd.verifiers.registry import node_names, supports, verifier, verifier_class, verifier_names

# The node verifiers register in this order, the order users see; then every other module of the package
# is imported, so that a new verifier module registers itself.
# isort: off
from mdsd.verifiers.single import SingleDraftVerifier
from mdsd.verifiers.rrs import RRSVerifier
from mdsd.verifiers.rrsw import RRSwVerifier
from mdsd.verifiers.kseq import KSeqVerifier
from mdsd.verifiers.spechub import SpecHubVerifier
from mdsd.verifiers.greedy import GreedyVerifier
from mdsd.verifiers.topk import TopKVerifier
from mdsd.verifiers.optimal import OptimalVerifier  # the subpackage mdsd/verifiers/optimal/

# isort: on

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

VERIFIERS: tuple[str, ...] = node_names()

__all__ = [
    "VERIFIERS",
    "verifier",
    "verifier_class",
    "verifier_names",
    "supports",
    "Verifier",
    "SingleDraftVerifier",
    "RRSVerifier",
    "RRSwVerifier",
    "KSeqVerifier",
    "SpecHubVerifier",
    "GreedyVerifier",
    "TopKVerifier",
    "OptimalVerifier",
    "AcceptanceEstimate",
    "estimate_acceptance",
    "Uniforms",
    "draw_uniforms",
]
