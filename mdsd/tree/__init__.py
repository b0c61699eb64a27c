"""The tree decoder (docs/mathematics.md §4): drafting a token tree, verifying it, the KV caches, the eager
and captured paths, depth policies and the memory estimate. The token tree's shape itself (:class:`Tree`,
Sequoia's best tree) lives below the decoder, in :mod:`mdsd.token_tree` and :mod:`mdsd.sequoia`, which the
sequence-level theory (:mod:`mdsd.sequence`) shares; it is re-exported here.
"""

from mdsd.token_tree import Tree
from mdsd.tree.decoder import TreeDecodeOutput, TreeDecoder
from mdsd.tree.plan import DynamicTree

__all__ = ["Tree", "DynamicTree", "TreeDecoder", "TreeDecodeOutput"]
