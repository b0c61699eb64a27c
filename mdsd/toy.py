"""Toy (target, draft) pairs: SpecHub's generator of random pairs with a tunable similarity.

See SpecHub (Sun, Zhou, Chen, Sun; EMNLP 2024), Appendix D, and docs/mathematics.md §5.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mdsd.validation import check_k

__all__ = ["toy_pair", "dirichlet_pair"]


def toy_pair(
    n: int,
    temperature: float,
    similarity: float,
    generator: torch.Generator | None = None,
    *,
    batch: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Draw a random target ``p`` and draft ``q`` on a vocabulary of ``n`` tokens.

    Two logit vectors are drawn uniformly and the draft's logits are mixed towards the target's:

    .. math::

        a, b \sim U(0, 1)^n, \qquad p = \operatorname{softmax}(a / T), \qquad
        q = \operatorname{softmax}\big((s\,a + (1 - s)\,b) / T\big),

    with :math:`T` the temperature and :math:`s` the similarity (SpecHub, Appendix D). ``s = 1`` gives
    ``q = p``; lower ``T`` makes both sharper.

    Parameters
    ----------
    n : int
        Vocabulary size, ``>= 1``.
    temperature : float
        ``T > 0``.
    similarity : float
        ``s`` in ``[0, 1]``.
    generator : torch.Generator or None
        Source of the uniform logits (the global RNG is never used when one is given).
    batch : int or None
        If given, draw ``batch`` independent pairs at once: shapes ``[batch, n]``.

    Returns
    -------
    p, q : torch.Tensor
        float64 tensors of shape ``[n]`` (or ``[batch, n]``); ``a`` is drawn before ``b``.

    Examples
    --------
    >>> import torch
    >>> p, q = toy_pair(4, 0.5, 1.0, torch.Generator().manual_seed(0))
    >>> bool(torch.equal(p, q)), p.shape, round(float(p.sum()), 12)
    (True, torch.Size([4]), 1.0)
    """
    n = check_k(n, "n")
    rows = 1 if batch is None else check_k(batch, "batch")
    temperature = _real(temperature, "temperature")
    similarity = _real(similarity, "similarity")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0.0 <= similarity <= 1.0:
        raise ValueError(f"similarity must lie in [0, 1], got {similarity}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    a = torch.rand(rows, n, generator=generator, dtype=torch.float64)  # [B, V]
    b = torch.rand(rows, n, generator=generator, dtype=torch.float64)  # [B, V]
    p = torch.softmax(a / temperature, dim=-1)
    q = torch.softmax((similarity * a + (1.0 - similarity) * b) / temperature, dim=-1)
    if batch is None:
        return p[0], q[0]
    return p, q


def dirichlet_pair(
    n: int,
    concentration: float,
    generator: torch.Generator | None = None,
    *,
    batch: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Draw a target ``p`` and a draft ``q`` independently from the symmetric Dirichlet law.

    .. math::

        p, q \sim \operatorname{Dirichlet}(c, \dots, c) \text{ on } n \text{ tokens, independently.}

    Small ``c`` gives sparse, peaked vectors; ``c = 1`` is uniform on the simplex. Each component is
    drawn in log space, :math:`\log G = \log G' + \log(U) / c` with :math:`G' \sim \Gamma(c + 1)`,
    :math:`U \sim U(0, 1)`, and normalised with a softmax, so tiny ``c`` never gives an all-zero vector.
    The gamma draws come from a numpy generator seeded from ``generator``.

    Returns float64 tensors ``[n]`` (or ``[batch, n]``), ``p`` drawn before ``q``.

    >>> import torch
    >>> p, q = dirichlet_pair(5, 0.5, torch.Generator().manual_seed(0), batch=3)
    >>> p.shape, bool(torch.allclose(q.sum(-1), torch.ones(3, dtype=torch.float64)))
    (torch.Size([3, 5]), True)
    """
    n = check_k(n, "n")
    rows = 1 if batch is None else check_k(batch, "batch")
    concentration = _real(concentration, "concentration")
    if concentration <= 0:
        raise ValueError(f"concentration must be > 0, got {concentration}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)

    def draw() -> torch.Tensor:  # [B, V]
        log_g = (
            np.log(rng.gamma(concentration + 1.0, size=(rows, n)))
            + np.log(rng.random((rows, n))) / concentration
        )
        return torch.softmax(torch.from_numpy(log_g), dim=-1)

    p, q = draw(), draw()
    if batch is None:
        return p[0], q[0]
    return p, q


def _real(x: object, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) and not hasattr(x, "__float__"):
        raise TypeError(f"{name} must be a real number, got {x!r}")
    value = float(x)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value
