"""The result of an OTM solve: the optimal acceptance and the certificate that proves it."""

from __future__ import annotations

from dataclasses import dataclass

Pair = tuple[tuple[int, ...], int]  # (draft tuple x̄, emitted token y)


@dataclass(frozen=True)
class OTMResult:
    """Optimal acceptance α*(p, Q) with its evidence.

    Attributes
    ----------
    value : float
        α*, the optimal probability that the emitted token is one of the drafts.
    method : str
        The solver that produced it ("coupling", "lp", "maxflow" or "dual").
    status : str
        "optimal" when the solver certified optimality.
    message : str
        Solver details, human readable.
    cut : tuple of int
        The minimising token set A (sorted) of the min-cut dual
        :math:`\\alpha^* = \\min_A p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A)`.
    cut_value : float
        :math:`p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A)` for ``cut``; an upper bound on α*
        that equals ``value`` at the optimum.
    flow : dict or None
        The accepted mass {(x̄, y): π(x̄, y)} over y ∈ set(x̄) (a feasible flow whose total is
        ``value``: Σ_y π(x̄, y) ≤ Q(x̄), Σ_x̄ π(x̄, y) ≤ p(y)); None for the dual method.
    plan : dict or None
        The whole optimal coupling {(x̄, y): π(x̄, y)} with marginals Q and p (coupling method and
        :func:`mdsd.optimal_coupling`); None otherwise.
    """

    value: float
    method: str
    status: str
    message: str
    cut: tuple[int, ...]
    cut_value: float
    flow: dict[Pair, float] | None = None
    plan: dict[Pair, float] | None = None

    @property
    def gap(self) -> float:
        """``cut_value − value``: zero (to rounding) when the certificate proves optimality."""
        return self.cut_value - self.value
