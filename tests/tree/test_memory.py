"""The memory estimate of a tree decode (mdsd.tree.memory) and the refusals it backs."""

import pytest
import torch

import mdsd.tree.memory as memory
from mdsd import DynamicTree, Tree, TreeDecoder
from mdsd.tree.memory import MemoryEstimate, TreeShape, check_memory, decode_memory
from mdsd.tree.plan import static_plan


@pytest.mark.parametrize("branching", [[1], [2, 2, 2], [3, 1, 2], [1, 1, 1, 1]])
def test_counting_a_tree_without_building_it_agrees_with_the_tree(branching):
    tree = Tree.kary(branching)
    shape = TreeShape.of_branching(branching)
    assert shape == TreeShape.of_tree(tree) == TreeShape.of_plan(static_plan(tree))
    assert (shape.nodes, shape.forward) == (tree.size, tree.size + 1)


def test_a_dynamic_tree_is_counted_from_its_plan():
    plan = DynamicTree(depth=3, k=2, expand=2, budget=5).plan()
    assert TreeShape.of_tree(DynamicTree(3, 2, 2, 5)) == TreeShape(plan.num_nodes - 1, 6, 5)


@pytest.mark.parametrize("tree", [None, Tree.chain(3), Tree.kary([2, 2]), DynamicTree(3, 2, 2, 5)], ids=str)
@pytest.mark.parametrize("width, depth", [(1, 1), (1, 8), (2, 4), (3, 2)])
def test_retrieved_chains_are_counted_as_the_plan_counts_them(tree, width, depth):
    from mdsd.tree.plan import with_retrieval

    plan = None if tree is None else tree.plan() if isinstance(tree, DynamicTree) else static_plan(tree)
    shape = TreeShape.of_plan(None) if tree is None else TreeShape.of_tree(tree)
    assert shape.with_retrieval(width, depth) == TreeShape.of_plan(with_retrieval(plan, width, depth))


def test_the_estimate_follows_its_formula():
    """One row, a binary tree of depth 2 (N = 6, F = 7, E = 3), P = 10, T = 10, float32 (module docstring)."""
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32}
    config["vocab_size"] = 100
    parts = decode_memory([config, config], TreeShape.of_branching([2, 2]), 1, 10, 10).parts
    C, Q = 10 + 10 + 6 + 1, 10 + 7
    assert parts["logits"] == 100 * (7 * 8 + 3 * 12)
    assert parts["masks"] == 7**2 + Q**2 + Q * (C + Q) * 4
    assert parts["attention"] == 4 * Q * (C + Q) * 4
    assert parts["caches"] == 2 * 2 * (2 * 2 * 2 * 8) * C * 4  # two models, head dim 32 / 4
    assert decode_memory([config], TreeShape.of_branching([2] * 30), 1, 10, 10).total > 2**62


def test_check_memory_states_the_estimate_and_the_limit(monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda device: (6 * 10**9, "a test limit"))
    check_memory(MemoryEstimate({"masks": 5 * 10**9}))
    with pytest.raises(
        ValueError, match=r"needs about 7 GB \(masks 7 GB\), more than the 6 GB left \(a test"
    ):
        check_memory(MemoryEstimate({"masks": 7 * 10**9}), "cpu", "this")


def test_available_memory_reads_the_machine():
    limit = memory.available_memory("cpu")
    assert limit is None or limit[0] > 0 and isinstance(limit[1], str)


def test_generate_batch_refuses_a_tree_that_cannot_fit(pair, monkeypatch):
    """Before allocating anything, with the estimate and the limit (here a small one)."""
    target, draft = pair
    dec = TreeDecoder(target, draft, Tree.kary([2] * 8), verifier="rrs", temperature=1.0)
    prompts = [[1, 2, 3], [4, 5]]
    need = decode_memory([target.config, draft.config], TreeShape.of_plan(dec.plan), 2, 3, 4).total
    monkeypatch.setattr(memory, "available_memory", lambda device: (need - 1, "a test limit"))
    with pytest.raises(
        ValueError, match=r"decoding 2 row\(s\) with this tree needs about .* \(a test limit\)"
    ):
        dec.generate_batch(prompts, 4, torch.Generator().manual_seed(0))
    monkeypatch.setattr(memory, "available_memory", lambda device: (need, "a test limit"))
    assert len(dec.generate_batch(prompts, 4, torch.Generator().manual_seed(0))) == 2
