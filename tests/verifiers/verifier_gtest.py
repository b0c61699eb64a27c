"""The G-test of emitted tokens against p, shared by the verifiers' seeded statistical tests."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import chi2

ALPHA = 1e-3


def g_test(tokens: torch.Tensor, p: np.ndarray) -> float:
    """p-value of the G-test that ``tokens`` are draws from p (bins with expected < 5 pooled)."""
    counts = np.bincount(tokens.numpy(), minlength=p.size).astype(float)
    expected = p * tokens.numel()
    if np.any(counts[expected == 0] > 0):
        return 0.0
    big = expected >= 5
    obs = np.r_[counts[big], counts[~big].sum()]
    exp = np.r_[expected[big], expected[~big].sum()]
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    g = 2.0 * np.sum(np.where(obs > 0, obs * np.log(np.where(obs > 0, obs, 1) / exp), 0.0))
    return float(chi2.sf(g, obs.size - 1)) if obs.size > 1 else 1.0
