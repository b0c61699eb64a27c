"""The draft phase's path scores on extreme draft laws, against float64 log-probabilities.

A node's score is the log of its path's probability under the draft, Σ log q(child | parent) in float32
(q = softmax(logits / T)); a dynamic tree expands, and sends to the target, the best-scored nodes. The
draft here is a table: its logits at a node depend on the node's token only, and span hundreds of nats,
so q holds exact zeros, subnormals and one-hot rows (and rows with fewer than k positive tokens, whose
top-k drafts tokens of q = 0).
"""

import numpy as np
import pytest
import torch

from mdsd.tree.cache import Forward, tempered
from mdsd.tree.draft import Pending, draft_tree
from mdsd.tree.plan import DynamicTree
from mdsd.verifiers import verifier

V = 12
TINY = float(np.finfo(np.float32).tiny)  # below it float32 q is rounded to a subnormal or to 0


class TableDraft:
    """The draft-cache interface (:class:`mdsd.tree.cache.Cache`) over a table: logits at token t =
    ``table[t]``, returned at ``temperature`` as every cache returns them."""

    reads_features = False

    def __init__(self, table: torch.Tensor, rows: int, temperature: float) -> None:
        self.table, self.rows = tempered(table, temperature), rows

    def begin(self) -> None:
        pass

    def live(self) -> torch.Tensor:
        return torch.zeros(self.rows, dtype=torch.long)

    def forward(self, ids, visible, positions, keep, block_valid, local=None, features=None):  # noqa: ARG002
        return Forward(self.table[ids[:, -keep:]], torch.zeros(self.rows, dtype=torch.bool), None)


def _table(seed: int) -> torch.Tensor:
    """Logits [V, V] whose rows span 0 to −900 nats (e^−900 underflows even float64), with ties and
    one-hot rows."""
    gen = np.random.default_rng(seed)
    table = -gen.choice([0.0, 0.5, 3.0, 40.0, 90.0, 101.0, 300.0, 900.0], size=(V, V))
    table[0] = -900.0
    table[0, 3] = 0.0  # one-hot
    table[1] = 0.0  # uniform: ties everywhere
    return torch.tensor(table, dtype=torch.float32)


@pytest.mark.parametrize("temperature", [1e-3, 0.05, 1.0])
@pytest.mark.parametrize("seed", range(4))
def test_path_scores_are_float64_log_probabilities_and_rank_the_expansions(temperature, seed):
    rows = 16
    table = _table(seed)
    tree = DynamicTree(depth=3, k=2, expand=2, budget=4)
    plan = tree.plan()
    gen = torch.Generator().manual_seed(seed)
    pending = Pending(torch.randint(V, (rows, 1), generator=gen), torch.ones(rows, 1, dtype=torch.bool))
    drafted = draft_tree(
        TableDraft(table, rows, temperature), pending, plan, {2: verifier("rrsw", 2)}, temperature, gen
    )
    assert not drafted.bad.any()
    exact = torch.log_softmax(table.double() / temperature, dim=-1)  # log q(child | parent token), float64
    score, tokens, parent = drafted.score.double(), drafted.tokens, drafted.parent
    assert not score.isnan().any() and (score[:, 0] == 0).all()
    nodes = torch.arange(1, plan.num_nodes)
    step = score[:, nodes] - score.gather(1, parent[:, nodes])  # log q of each drafted child
    want = exact[tokens.gather(1, parent[:, nodes]), tokens[:, nodes]]
    seen = score.gather(1, parent[:, nodes]).isfinite()  # below an underflowed node the step is unknown
    normal = seen & (want > np.log(TINY) + 1)
    assert torch.allclose(step[normal], want[normal], rtol=1e-5, atol=1e-3)
    rounded = seen & (want < np.log(TINY))  # q rounded to a subnormal or 0: ranks below every normal q
    assert (step[rounded] < np.log(TINY) + 1).all()
    for e in drafted.expansions:  # the expanded nodes are the best-scored of their pool
        if e.group.pool is None:
            continue
        lo, hi = e.group.pool
        pool = score[:, lo:hi]
        chosen = score.gather(1, e.node)
        others = pool.masked_fill(
            torch.zeros_like(pool, dtype=torch.bool).scatter_(1, e.node - lo, True), -np.inf
        )
        assert (chosen.min(1).values >= others.max(1).values).all()


def _plans():
    from mdsd import Tree
    from mdsd.tree.plan import static_plan, with_retrieval

    dynamic = DynamicTree(depth=3, k=2, expand=2, budget=4).plan()
    return {
        "chain": static_plan(Tree.chain(3)),
        "mixed widths": static_plan(Tree((0, 0, 0, 1, 1, 2))),
        "dynamic": dynamic,
        "retrieval alone": with_retrieval(None, 2, 3),
        "binary + retrieval": with_retrieval(static_plan(Tree.kary([2, 2])), 2, 3),
        "dynamic + retrieval": with_retrieval(dynamic, 1, 4),
    }


@pytest.mark.parametrize("name", list(_plans()))
def test_drafted_parents_and_ancestors_agree_with_a_walk_up_the_tree(name):
    """Static groups' parents and ancestors come from the plan (Plan.static_ancestors), dynamic groups'
    are written while drafting; on every family each node's ancestors are exactly its walk to the root,
    including rows whose retrieved chains are cut short."""
    plan = _plans()[name]
    rows = 6
    gen = torch.Generator().manual_seed(0)
    pending = Pending(torch.randint(V, (rows, 1), generator=gen), torch.ones(rows, 1, dtype=torch.bool))
    retrieved = None
    if plan.retrieval is not None:
        retrieved = torch.randint(V, (rows, *plan.retrieval.shape), generator=gen)
        retrieved[::2, :, 1:] = -1  # chains that end early
    verifiers = {k: verifier("rrsw", k) for k in plan.widths}
    draft = TableDraft(_table(0), rows, 1.0) if plan.widths else None
    drafted = draft_tree(draft, pending, plan, verifiers, 1.0, gen, None, retrieved)
    parent = drafted.parent.tolist()
    for b in range(rows):
        for i in range(plan.num_nodes):
            walk, node = set(), i
            while node >= 0:
                walk.add(node)
                node = parent[b][node]
            assert set(np.flatnonzero(drafted.ancestors[b, i].numpy()).tolist()) == walk, (name, b, i)
    for g in plan.groups:  # a static group's children have their parents in the plan already
        if g.nodes is not None:
            assert (plan.parent[g.children] == g.nodes[:, None]).all()
