"""mdsd: theory and measurement of multi-draft speculative decoding.

Notation throughout: p is the target distribution, q the draft distribution (Leviathan et al.),
k the number of drafts per step, n the vocabulary size. See the README for a tour.
"""

from mdsd import costs, data, drafters, harness, hf, sources
from mdsd.costs import CostProfile, depth_seconds, measure_profile, predict, step_seconds
from mdsd.laws import IID, DraftLaw, Greedy, Hub, Joint, TopK, WithoutReplacement, law_from_name, law_names
from mdsd.otm import (
    METHODS,
    OTMResult,
    optimal_acceptance,
    optimal_acceptance_table,
    optimal_coupling,
    solve_otm,
)
from mdsd.sequence import (
    SequenceModel,
    TreeOTMResult,
    block_tokens_per_step,
    block_verify,
    nodewise_tokens_per_step,
    optimal_tokens_per_step,
    solve_tree_otm,
    toy_sequence_pair,
    traversal_tokens_per_step,
    traversal_verify,
)
from mdsd.toy import dirichlet_pair, toy_pair
from mdsd.tree import DynamicTree, Tree, TreeDecodeOutput, TreeDecoder
from mdsd.verifiers import VERIFIERS, AcceptanceEstimate, Verifier, estimate_acceptance, verifier

# Each block below re-exports one concept's public API; keep `__all__` in step.
__all__ = [
    # laws
    "DraftLaw",
    "IID",
    "WithoutReplacement",
    "Hub",
    "Greedy",
    "TopK",
    "Joint",
    "law_from_name",
    "law_names",
    # optimal acceptance (OTM)
    "solve_otm",
    "optimal_acceptance",
    "optimal_acceptance_table",
    "optimal_coupling",
    "OTMResult",
    "METHODS",
    # toy pairs
    "toy_pair",
    "dirichlet_pair",
    # token trees and tree decoding
    "Tree",
    "DynamicTree",
    "TreeDecoder",
    "TreeDecodeOutput",
    # the cost model: measured forward times, predicted step times and speedups (more in mdsd.costs)
    "CostProfile",
    "measure_profile",
    "step_seconds",
    "predict",
    "depth_seconds",
    "costs",
    # verifiers
    "VERIFIERS",
    "verifier",
    "Verifier",
    "estimate_acceptance",
    "AcceptanceEstimate",
    # sequence level: tiny sequence models, the optimum of tokens per step, block / traversal verification
    "SequenceModel",
    "toy_sequence_pair",
    "solve_tree_otm",
    "optimal_tokens_per_step",
    "TreeOTMResult",
    "nodewise_tokens_per_step",
    "block_verify",
    "block_tokens_per_step",
    "traversal_verify",
    "traversal_tokens_per_step",
    # real data: prompt sets and the bundled corpus of real (p, q) pairs (mdsd.data.prompts, .real_pairs)
    "data",
    # training-free draft sources: PromptLookup, Datastore, Dictionary (mdsd.sources)
    "sources",
    # trained drafters: self-distillation, the feature head, its training (mdsd.drafters)
    "drafters",
    # real models: fetch, load, the tiny random pair, HF baselines (mdsd.hf; transformers imported lazily)
    "hf",
    # the experiment harness: configs, run folders, strict-JSON results, sweeps, the report, the comparison of
    # methods measured alike (mdsd.harness.compare, mdsd.harness.TreeMethod)
    "harness",
]


def _load_plugins() -> None:
    """Import the modules named in ``$MDSD_PLUGINS`` (comma-separated): a draft law, verifier, draft source
    or depth policy defined in a module of one's own registers itself when imported, and the API, ``mdsd``'s
    commands and the experiments' method specs then find it by name."""
    import importlib
    import os

    for name in os.environ.get("MDSD_PLUGINS", "").split(","):
        if name.strip():
            importlib.import_module(name.strip())


_load_plugins()
