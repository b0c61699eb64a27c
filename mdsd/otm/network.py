"""The tuple-token network of the OTM problem, shared by the LP, max-flow and coupling solvers.

A draft law's exact joint Q(x̄) becomes arrays: the draft tuples with positive probability
``tuples`` [T, k], their weights ``weight`` [T], and the accepting edges (tuple t, token y) for every
distinct y ∈ set(x̄_t). The cut of a token set A is

.. math:: c(A) = p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A),

which upper-bounds the optimal acceptance for every A and equals it for the best A (max-flow min-cut;
Hu et al., ICLR 2025). See ../shared/MATH.md §1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsd.laws import DraftLaw


@dataclass(frozen=True)
class Network:
    """Draft tuples, their probabilities and the accepting edges of one (q, law)."""

    n: int
    tuples: np.ndarray  # [T, k] int
    weight: np.ndarray  # [T] Q(x̄) > 0
    edge_tuple: np.ndarray  # [E] index into tuples
    edge_token: np.ndarray  # [E] token y ∈ set(x̄)

    def keys(self) -> list[tuple[int, ...]]:
        """The draft tuples as Python tuples, in row order."""
        return [tuple(int(t) for t in row) for row in self.tuples]

    def containment(self, inside: np.ndarray) -> float:
        """Q(set(x̄) ⊆ A) for a boolean membership mask ``inside`` [n] of A."""
        return float(self.weight[inside[self.tuples].all(axis=1)].sum())

    def cut(self, p: np.ndarray, inside: np.ndarray) -> float:
        """The cut value p(A) + 1 − Q(set(x̄) ⊆ A)."""
        return float(p[inside].sum()) + 1.0 - self.containment(inside)

    def best_level_cut(self, p: np.ndarray, potential: np.ndarray) -> tuple[tuple[int, ...], float]:
        """The best cut among the level sets {y : potential_y ≥ θ} (and of −potential).

        LP duals of the OTM problem are potentials whose level sets contain a minimum cut.
        """
        best: tuple[tuple[int, ...], float] = ((), 1.0)
        for pot in (potential, -potential):
            for theta in np.unique(pot):
                inside = pot >= theta
                value = self.cut(p, inside)
                if value < best[1]:
                    best = (tuple(np.flatnonzero(inside).tolist()), value)
        return best


def build_network(q: np.ndarray, law: DraftLaw) -> Network:
    """Enumerate ``law``'s joint on ``q`` [n] (small n) into a :class:`Network`.

    >>> from mdsd.laws import IID
    >>> net = build_network(np.array([0.5, 0.5]), IID(2))
    >>> net.keys(), net.cut(np.array([1.0, 0.0]), np.array([False, True]))  # A = {1}: 0 + 1 − 1/4
    ([(0, 0), (0, 1), (1, 0), (1, 1)], 0.75)
    """
    joint = law.joint(q)
    keys = list(joint)
    tuples = np.array(keys, dtype=np.int64).reshape(len(keys), law.k)
    weight = np.array([joint[x] for x in keys], dtype=np.float64)
    edge_tuple, edge_token = [], []
    for t, x in enumerate(keys):
        for y in sorted(set(x)):
            edge_tuple.append(t)
            edge_token.append(y)
    return Network(
        n=int(q.shape[-1]),
        tuples=tuples,
        weight=weight,
        edge_tuple=np.array(edge_tuple, dtype=np.int64),
        edge_token=np.array(edge_token, dtype=np.int64),
    )
