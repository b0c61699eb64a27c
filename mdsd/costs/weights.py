"""What one forward reads and computes per token, from a model's weights alone (no device needed).

At batch 1 a decoding forward is bound by reading its weights: each weight of a matrix multiply is read
once and used in one multiply-add per token. So a model's cost per token is, to first order,

.. math:: \\text{multiply-adds} = \\sum_{W \\in \\text{matmuls}} |W|, \\qquad
          \\text{bytes} = d \\sum_{W \\in \\text{matmuls}} |W|

(d bytes per weight), where the matmuls are the model's linear layers (the output layer included; an
embedding lookup reads one row and is left out) and, for a drafter that declares them
(``matmul_weights()``: a feature head's output rows), its other multiplied matrices. Attention over the
cache adds B·c·H per layer and token, small beside the weights at short contexts; it is left out. The
ratio of two models' costs is what a drafter's cost against its target's comes to where forwards are
memory-bound (a GPU at small batches, once launches are captured).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ForwardCost", "forward_cost"]


@dataclass(frozen=True)
class ForwardCost:
    """Per token at batch 1: multiply-adds and bytes of weights read (module docstring)."""

    multiply_adds: int
    bytes: int

    def __truediv__(self, other: ForwardCost) -> float:
        """The ratio of multiply-adds (equal to that of bytes where both models store one dtype)."""
        return self.multiply_adds / other.multiply_adds


def forward_cost(model: torch.nn.Module) -> ForwardCost:
    """The :class:`ForwardCost` of ``model``: its ``nn.Linear`` weights, and what ``model.matmul_weights()``
    adds where it defines it.

    >>> forward_cost(torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3)))
    ForwardCost(multiply_adds=12, bytes=48)
    """
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    extra = getattr(model, "matmul_weights", None)
    if callable(extra):
        weights += list(extra())
    unique = {id(w): w for w in weights}.values()  # a tied matrix is read once
    return ForwardCost(sum(w.numel() for w in unique), sum(w.numel() * w.element_size() for w in unique))
