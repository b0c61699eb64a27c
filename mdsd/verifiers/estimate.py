"""Monte Carlo acceptance estimates, for verifiers or sizes without an exact routine."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mdsd.verifiers.base import Verifier

__all__ = ["AcceptanceEstimate", "estimate_acceptance"]

Z95 = 1.959963984540054  # two-sided 95% normal quantile


@dataclass(frozen=True)
class AcceptanceEstimate:
    """A Monte Carlo acceptance rate: ``value`` with its Wilson 95% interval [``low``, ``high``]."""

    value: float
    low: float
    high: float
    stderr: float
    num_samples: int


def estimate_acceptance(v: Verifier, p: object, q: object, num_samples: int, seed: int) -> AcceptanceEstimate:
    r"""Estimate P(Y ∈ set(x̄)) by running ``v`` ``num_samples`` times (seeded) on one pair p, q [V].

    The interval is Wilson's score interval at 95%:

    .. math:: \frac{\hat\alpha + z^2/2N \pm z\sqrt{\hat\alpha(1-\hat\alpha)/N + z^2/4N^2}}{1 + z^2/N}

    >>> from mdsd.verifiers import verifier
    >>> est = estimate_acceptance(verifier("rrs", 2), [0.5, 0.5], [0.5, 0.5], 1000, seed=0)
    >>> est.value, est.low < 1.0 <= est.high
    (1.0, True)
    """
    if not isinstance(v, Verifier):
        raise TypeError(f"v must be a Verifier (mdsd.verifier(name, k)), got {type(v).__name__}")
    _, accepted = v.simulate(p, q, num_samples, seed)
    n = accepted.numel()
    a = float((accepted >= 0).double().mean())
    z2 = Z95 * Z95
    centre = (a + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(a * (1 - a) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return AcceptanceEstimate(
        value=a,
        low=max(0.0, centre - half),
        high=min(1.0, centre + half),
        stderr=math.sqrt(a * (1 - a) / n),
        num_samples=n,
    )
