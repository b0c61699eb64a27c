"""The two-step verifier (docs/mathematics.md §6): select one draft, then single-draft speculative sampling
against p.

A selection rule picks Z = z ∈ set(x̄) with probability s(z | x̄), or no draft (Z = ⊥). With its exact law
F(z) = Σ_x̄ Q(x̄) s(z | x̄), accept z with probability min(1, p(z)/F(z)); on rejection or ⊥ emit a draw of
norm((p − F)+). The emitted token has law p for ANY rule (Khisti et al., ICLR 2025): P(Y = y) =
min(F(y), p(y)) + (p(y) − F(y))+ = p(y), since the rejected-or-⊥ mass 1 − Σ min(F, p) equals Σ (p − F)+.
Its acceptance is

.. math:: \\alpha = \\sum_z \\min(F(z), p(z))
          + \\sum_{\\bar x} Q(\\bar x) P(\\text{reject or } \\bot \\mid \\bar x)\\, r(\\mathrm{set}(\\bar x)),
          \\qquad r = \\mathrm{norm}((p - F)_+),

the second term counting residual draws that land on a draft. One uniform serves both the accept test
and the residual draw: U < a accepts, else (U − a)/(1 − a) is a fresh uniform for the residual.
"""

from __future__ import annotations

import numpy as np
import torch

from mdsd.sampling import inverse_cdf
from mdsd.verifiers.ops import take

__all__ = ["two_step", "selection_acceptance"]


def two_step(p: torch.Tensor, law: torch.Tensor, selected: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Emitted tokens [*B] for targets p [*Bp, V], selection law F = ``law`` [*Bp, V] (float64),
    selected drafts ``selected`` [*B] (−1 = ⊥) and one uniform per row ``u`` [*B].

    >>> p = torch.tensor([0.5, 0.5]); f = torch.tensor([1.0, 0.0], dtype=torch.float64)
    >>> two_step(p, f, torch.tensor([0, 0]), torch.tensor([0.25, 0.75], dtype=torch.float64)).tolist()
    [0, 1]
    """
    p = p.double()
    z = selected.clamp_min(0).unsqueeze(-1)
    pz, fz = take(p, z)[..., 0], take(law, z)[..., 0]
    a = torch.where(
        selected >= 0, torch.where(pz < fz, pz / fz.clamp_min(torch.finfo(torch.float64).tiny), 1.0), 0.0
    )
    accept = u < a
    fresh = ((u - a) / (1.0 - a).clamp_min(torch.finfo(torch.float64).tiny)).clamp(0.0, 1.0)
    residual = inverse_cdf(
        (p - law).clamp_min(0.0), torch.where(accept, 0.0, fresh).unsqueeze(-1), fallback=p
    )[..., 0]
    return torch.where(accept, selected, residual)


def selection_acceptance(
    p: np.ndarray, table: dict[tuple[int, ...], tuple[float, np.ndarray]]
) -> tuple[float, np.ndarray]:
    """(acceptance, F) of the two-step verifier for a rule given as a table {x̄: (Q(x̄), s(· | x̄) [n])}.

    F is summed exactly from the table; the acceptance includes residual draws that land on a draft.

    >>> acc, f = selection_acceptance(np.array([0.5, 0.5]), {(0,): (0.5, np.array([1.0, 0.0])),
    ...                                                      (1,): (0.5, np.array([0.0, 1.0]))})
    >>> acc, f.tolist()
    (1.0, [0.5, 0.5])
    """
    law = np.zeros(p.size)
    for weight, s in table.values():
        law += weight * s
    gain = np.maximum(p - law, 0.0)
    rest = gain.sum()
    accept_prob = np.where(law > p, np.divide(p, law, out=np.ones_like(p), where=law > 0), 1.0)
    landed = 0.0
    if rest > 0:
        r = gain / rest
        for x, (weight, s) in table.items():
            stay = float(s @ accept_prob)  # selected and accepted
            landed += weight * (1.0 - stay) * r[list(set(x))].sum()
    return float(np.minimum(law, p).sum() + landed), law
