"""Token trees and the tree decoder (docs/mathematics.md §4)."""

from mdsd.tree.decoder import TreeDecodeOutput, TreeDecoder
from mdsd.tree.plan import DynamicTree
from mdsd.tree.tree import Tree

__all__ = ["Tree", "DynamicTree", "TreeDecoder", "TreeDecodeOutput"]
