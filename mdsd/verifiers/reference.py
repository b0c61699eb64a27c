"""Slow float64 references, run row by row: :func:`reference_verify`, and the plain helpers they share.

Each verifier's module writes, beside its batched kernel, its reference ``_reference(p, q, drafts, accept,
residual)``: one row (numpy float64 p, q [V], drafts [k], the row's uniforms ``accept`` and ``residual``)
in, the emitted token out, a plain loop that renormalises explicitly and shares no code with the kernel;
and its exact output law ``_output_law(p, q, drafts)``. The batched samplers must emit the same tokens as
the references when given the same :class:`~mdsd.verifiers.ops.Uniforms`. A residual without mass is
replaced by p; a degenerate row (q has fewer positive tokens than the law needs, :mod:`mdsd.verifiers.base`)
emits a draw of p with the residual uniform.
"""

from __future__ import annotations

import numpy as np
import torch

from mdsd.verifiers.ops import Uniforms
from mdsd.verifiers.registry import verifier

__all__ = ["reference_verify", "draw_index", "normalized", "ratio", "onehot"]


def draw_index(w: np.ndarray, u: float) -> int:
    """Reference inverse CDF: the first i with Σ_{j≤i} w_j > u Σ w (never a token of zero weight)."""
    c = np.cumsum(w)
    target = u * c[-1]
    for i in range(w.size):
        if c[i] > target and w[i] > 0:
            return i
    return int(np.flatnonzero(w > 0)[-1])


def normalized(w: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """w / Σ w, or ``fallback`` where w has no mass (a residual reached only by rounding: replaced by p)."""
    total = w.sum()
    return w / total if total > 0 else fallback


def ratio(num: float, den: float) -> float:
    """min(1, num / den); a zero denominator is a branch of probability zero (any value will do)."""
    return 1.0 if num >= den else num / den  # never num / den > 1: no overflow for subnormal den


def onehot(n: int, y: int) -> np.ndarray:
    """The point mass [n] on token y."""
    e = np.zeros(n)
    e[y] = 1.0
    return e


def reference_verify(name: object, p: object, q: object, drafts: object, uniforms: Uniforms) -> torch.Tensor:
    """Emitted tokens [B] of verifier ``name`` (a registered name, or a verifier) for rows p, q [B, V],
    drafts [B, k], row by row in float64.

    >>> from mdsd.verifiers import draw_uniforms
    >>> u = draw_uniforms((1,), 1, torch.Generator().manual_seed(0))
    >>> int(reference_verify("single", [[0.0, 1.0]], [[0.0, 1.0]], [[1]], u)[0])
    1
    """
    p = np.asarray(torch.as_tensor(p, dtype=torch.float64), dtype=np.float64)
    q = np.asarray(torch.as_tensor(q, dtype=torch.float64), dtype=np.float64)
    drafts = np.asarray(torch.as_tensor(drafts)).astype(int)
    accept = uniforms.accept.cpu().numpy()
    residual = uniforms.residual.cpu().numpy()
    v = verifier(name, drafts.shape[-1]) if isinstance(name, str) else name
    need = v.law.min_support()
    out = []
    for b in range(drafts.shape[0]):
        pb, qb = p[b] / p[b].sum(), q[b] / q[b].sum()
        if np.count_nonzero(qb) < need:  # degenerate row: y ~ p, accepted iff y is a draft
            out.append(draw_index(pb, residual[b]))
        else:
            out.append(v._reference(pb, qb, [int(x) for x in drafts[b]], accept[b], residual[b]))
    return torch.tensor(out, dtype=torch.long)
