"""The OTM problem as a maximum flow (SpecHub, Appendix E), solved with networkx.

Network: source → draft set S = set(x̄) (capacity Q(set(x̄) = S)) → every token y ∈ S (unbounded) → sink
(capacity p(y)); each set's flow is then split over its tuples in proportion to Q(x̄). The maximum flow
is α*; the source side of a minimum cut, restricted to tokens, is the minimising set A of the dual
:math:`\\min_A p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A)`.
Sun et al., "SpecHub", EMNLP 2024; see docs/mathematics.md §1.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from networkx.algorithms.flow import boykov_kolmogorov

from mdsd.otm.network import Network
from mdsd.otm.result import OTMResult

_RESIDUAL_TOL = 1e-12  # residual capacity below this counts as saturated (float rounding)


def solve_maxflow(p: np.ndarray, net: Network) -> OTMResult:
    """α* as the maximum flow of the set-token network, with the flow and a minimum cut.

    >>> from mdsd.laws import IID
    >>> from mdsd.otm.network import build_network
    >>> q = np.array([0.5, 0.5])  # two fair i.i.d. drafts hold token 0 with probability 3/4
    >>> round(solve_maxflow(np.array([1.0, 0.0]), build_network(q, IID(2))).value, 12)
    0.75
    """
    graph = nx.DiGraph()
    for s, w in enumerate(net.set_weight):
        graph.add_edge("source", ("x", s), capacity=float(w))
    for s, y in zip(net.edge_set.tolist(), net.edge_token.tolist(), strict=True):
        graph.add_edge(("x", s), ("y", y))  # no capacity attribute: unbounded
    for y in range(net.n):
        graph.add_edge(("y", y), "sink", capacity=float(p[y]))
    # An augmenting-path algorithm: preflow-push strands float excess when capacities span ~1e-18..1
    # and then fails inside networkx (regression test: test_maxflow_survives_capacities_far_apart).
    residual = boykov_kolmogorov(graph, "source", "sink")
    value = float(residual.graph["flow_value"])
    # Source side of a minimum cut: nodes reachable through unsaturated residual arcs.
    reach, stack = {"source"}, ["source"]
    while stack:
        u = stack.pop()
        for v, arc in residual[u].items():
            if v not in reach and arc["capacity"] - arc["flow"] > _RESIDUAL_TOL:
                reach.add(v)
                stack.append(v)
    inside = np.zeros(net.n, dtype=bool)
    inside[[y for kind, y in (v for v in reach if isinstance(v, tuple)) if kind == "y"]] = True
    edges = zip(net.edge_set.tolist(), net.edge_token.tolist(), strict=True)
    flow = np.array([max(residual[("x", s)][("y", y)]["flow"], 0.0) for s, y in edges])
    return OTMResult(
        value=value,
        method="maxflow",
        status="optimal",
        basis="max-flow min-cut",
        message=f"boykov_kolmogorov: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} arcs",
        cut=tuple(np.flatnonzero(inside).tolist()),
        cut_value=net.cut(p, inside),
        flow=net.tuple_flow(flow),
    )
