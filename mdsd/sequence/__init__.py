"""Sequence-level speculative decoding (docs/mathematics.md §4, §7): tiny sequence models, the exact
optimum of tokens per step for a drafted token tree, the exact tokens per step of every verifier, and the
sequence-level verifiers (block verification for chains, Traversal Verification for trees).

``solve_tree_otm`` is the optimum (an LP with its dual certificate); ``*_step_law`` give the exact law of
the string one step emits, ``*_tokens_per_step`` its mean; ``block_verify`` / ``traversal_verify`` are
the batched torch verifiers for the decoder, each with a float64 ``reference_*``.
"""

from mdsd.sequence.block import (
    block_step_law,
    block_tokens_per_step,
    block_verify,
    block_verify_with,
    reference_block_verify,
)
from mdsd.sequence.decode import decode_law, law_distance, target_law
from mdsd.sequence.drafts import enumerate_drafts, node_laws
from mdsd.sequence.models import SequenceModel, toy_sequence_pair
from mdsd.sequence.nodewise import node_output_law, nodewise_step_law, nodewise_tokens_per_step
from mdsd.sequence.optimum import METHODS, TreeOTMResult, optimal_tokens_per_step, solve_tree_otm
from mdsd.sequence.traversal import (
    TRAVERSAL_LAWS,
    reference_traversal_verify,
    traversal_step_law,
    traversal_tokens_per_step,
    traversal_verify,
    traversal_verify_with,
)

__all__ = [
    # models and drafted trees
    "SequenceModel",
    "toy_sequence_pair",
    "node_laws",
    "enumerate_drafts",
    # the optimum
    "solve_tree_otm",
    "optimal_tokens_per_step",
    "TreeOTMResult",
    "METHODS",
    # node-wise verifiers on a tree
    "nodewise_step_law",
    "nodewise_tokens_per_step",
    "node_output_law",
    # block verification (chains)
    "block_verify",
    "block_verify_with",
    "reference_block_verify",
    "block_step_law",
    "block_tokens_per_step",
    # Traversal Verification (trees)
    "traversal_verify",
    "traversal_verify_with",
    "reference_traversal_verify",
    "traversal_step_law",
    "traversal_tokens_per_step",
    "TRAVERSAL_LAWS",
    # whole decodes
    "decode_law",
    "target_law",
    "law_distance",
]
