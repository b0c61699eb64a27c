"""The set-token network of the OTM problem, shared by the LP, max-flow and coupling solvers.

A draft law's exact joint Q(x̄) becomes arrays: the draft tuples with positive probability ``tuples``
[T, k] and their weights ``weight`` [T]; the distinct draft sets S = set(x̄) among them, ``sets`` [S, n],
with Q(set(x̄) = S) in ``set_weight``; and the accepting edges (set s, token y ∈ s). Acceptance depends on a
tuple only through its set, so the LP and the max-flow run on the sets (at most 2^n nodes, whatever k) and
split each set's flow over its tuples in proportion to Q(x̄). The cut of a token set A is

.. math:: c(A) = p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A),

which upper-bounds the optimal acceptance for every A and equals it for the best A (max-flow min-cut;
Hu et al., ICLR 2025). See docs/mathematics.md §1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsd.laws import DraftLaw

Pair = tuple[tuple[int, ...], int]  # (draft tuple x̄, emitted token y)


@dataclass(frozen=True)
class Network:
    """Draft tuples, their distinct sets, probabilities and the accepting edges of one (q, law)."""

    n: int
    tuples: np.ndarray  # [T, k] int
    weight: np.ndarray  # [T] Q(x̄) > 0
    group: np.ndarray  # [T] the row of set(x̄) in `sets`
    sets: np.ndarray  # [S, n] bool membership of each distinct draft set
    set_weight: np.ndarray  # [S] Q(set(x̄) = S)
    edge_set: np.ndarray  # [E] index into sets, ascending
    edge_token: np.ndarray  # [E] token y ∈ S

    def keys(self) -> list[tuple[int, ...]]:
        """The draft tuples as Python tuples, in row order."""
        return [tuple(int(t) for t in row) for row in self.tuples]

    def containment(self, inside: np.ndarray) -> float:
        """Q(set(x̄) ⊆ A) for a boolean membership mask ``inside`` [n] of A."""
        return float(self.set_weight[~(self.sets & ~inside).any(axis=1)].sum())

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

    def tuple_flow(self, flow: np.ndarray) -> dict[Pair, float]:
        """Split a flow on the set edges [E] over the tuples: π(x̄, y) = f(set(x̄), y) Q(x̄) / Q(set(x̄)).

        Each tuple then sends at most Q(x̄) and each token receives what it did; zero entries are left out.
        """
        starts = np.searchsorted(self.edge_set, np.arange(self.sets.shape[0] + 1))
        sizes = np.diff(starts)[self.group]  # edges of each tuple's set [T]
        tuple_of_edge = np.repeat(np.arange(self.tuples.shape[0]), sizes)
        edge = (
            np.repeat(starts[self.group], sizes)
            + np.arange(sizes.sum())
            - np.repeat(np.cumsum(sizes) - sizes, sizes)
        )
        share = self.weight / self.set_weight[self.group]  # [T]
        values = flow[edge] * share[tuple_of_edge]
        keys = self.keys()
        tokens = self.edge_token[edge]
        return {
            (keys[t], int(y)): float(v)
            for t, y, v in zip(tuple_of_edge, tokens, values, strict=True)
            if v > 0
        }


def build_network(q: np.ndarray, law: DraftLaw) -> Network:
    """Enumerate ``law``'s joint on ``q`` [n] (small n) into a :class:`Network`.

    >>> from mdsd.laws import IID
    >>> net = build_network(np.array([0.5, 0.5]), IID(2))
    >>> net.set_weight.tolist()  # the sets {0, 1}, {0}, {1}
    [0.5, 0.25, 0.25]
    >>> net.keys(), net.cut(np.array([1.0, 0.0]), np.array([False, True]))
    ([(0, 0), (0, 1), (1, 0), (1, 1)], 0.75)
    """
    joint = law.joint(q)
    keys = list(joint)
    n = int(q.shape[-1])
    tuples = np.array(keys, dtype=np.int64).reshape(len(keys), law.k)
    weight = np.array([joint[x] for x in keys], dtype=np.float64)
    canon = np.sort(tuples, axis=1)  # each tuple's set: its sorted tokens, repeats replaced by n (last)
    canon[:, 1:][canon[:, 1:] == canon[:, :-1]] = n
    canon.sort(axis=1)
    order = np.lexsort(canon.T[::-1])
    first = np.ones(len(keys), dtype=bool)
    first[1:] = (canon[order[1:]] != canon[order[:-1]]).any(axis=1)
    group = np.empty(len(keys), dtype=np.int64)
    group[order] = np.cumsum(first) - 1
    sets = np.zeros((int(first.sum()), n + 1), dtype=bool)
    sets[np.repeat(group, law.k), canon.ravel()] = True
    sets = sets[:, :n]
    edge_set, edge_token = np.nonzero(sets)  # row-major: ascending set index
    return Network(
        n=n,
        tuples=tuples,
        weight=weight,
        group=group,
        sets=sets,
        set_weight=np.bincount(group, weights=weight, minlength=sets.shape[0]),
        edge_set=edge_set,
        edge_token=edge_token,
    )
