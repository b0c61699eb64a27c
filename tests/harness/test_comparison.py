"""The comparison table (mdsd.harness.comparison): every method decoded on the same prompts, seeds and budget
and measured the same way, on tiny random models.

Exact checks: the table against sums over its runs and a hand-computed interval, every method's counts
against its own steps and the same seeds run alone, the fast path's counts against the hook's on the eager
path, bad methods named before any decode, and ``mdsd decode --compare``.
"""

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from tiny_lms import perturbed, tiny_lm, word_pair

from mdsd.harness.comparison import HFAssisted, TreeMethod, compare, paired_ratio, ratio_interval
from mdsd.hf import autoregressive
from mdsd.token_tree import Tree
from mdsd.tree.decoder import TreeDecoder

PROMPTS = [[3, 1, 4], [7], [2, 9, 11, 5, 0]]


@pytest.fixture(scope="module")
def pair():
    """A target over 12 tokens and a close draft."""
    target = tiny_lm(0)
    return target, perturbed(target, 0.3, seed=1)


# ---- the comparison ------------------------------------------------------------------------------------


def _exact_bootstrap(tokens, forwards):
    """The bootstrap law of Σ t / Σ f, exactly: every n^n draw of n prompts with replacement, each 1/n^n."""
    values = sorted(
        sum(tokens[i] for i in draw) / sum(forwards[i] for i in draw)
        for draw in itertools.product(range(len(tokens)), repeat=len(tokens))
    )
    return np.array(values)


def test_ratio_interval_against_the_exact_bootstrap_law():
    for tokens, forwards in (([10, 12, 8], [5, 4, 4]), ([64, 3, 40, 17], [13, 3, 30, 9]), ([5, 5], [1, 5])):
        values = _exact_bootstrap(tokens, forwards)
        got, (low, high) = ratio_interval(tokens, forwards)
        assert got == pytest.approx(sum(tokens) / sum(forwards), rel=1e-15)
        for bound, level in ((low, 0.025), (high, 0.975)):  # a quantile of the exact law, to resampling error
            below, at_or_below = np.mean(values < bound - 1e-12), np.mean(values <= bound + 1e-12)
            assert below <= level + 0.01 and at_or_below >= level - 0.01, (tokens, bound, level)
        ratios = [t / f for t, f in zip(tokens, forwards, strict=True)]
        assert min(ratios) <= low <= got <= high <= max(ratios)  # never outside the prompts' own range
    assert ratio_interval([7], [3]) == (7 / 3, None)
    assert ratio_interval([2, 4, 6], [1, 2, 3]) == (2.0, (2.0, 2.0))  # every prompt at the same ratio
    tokens, forwards = [10, 12, 8, 30, 3], [5, 4, 4, 7, 3]
    low, high = ratio_interval(tokens, forwards)[1]
    assert ratio_interval(tokens, forwards) == ratio_interval(tokens, forwards)  # seeded
    wide = ratio_interval(tokens, forwards, confidence=0.99)[1]
    assert wide[0] <= low and wide[1] >= high
    for bad in (([1, 2], [1]), ([1], [0]), ([1, 2], [1, -1]), ([], []), ([np.nan], [1])):
        with pytest.raises(ValueError, match="ratio_interval"):
            ratio_interval(*bad)
    with pytest.raises(ValueError, match="confidence"):
        ratio_interval([1, 2], [1, 1], confidence=1.0)


def test_regression_an_interval_of_tokens_per_forward_above_what_a_chain_can_accept():
    """``mdsd decode --compare`` printed ``chain:4 3.765 (1.00-12.21)``: a t-interval clipped below, not
    above, though a chain:4 step emits at most 5 tokens. A prompt that ends after 2 tokens in 1 forward beside
    ones that reach 4-5 a forward is the case that did it."""
    tokens, forwards = [2, 64, 61], [1, 13, 17]
    low, high = ratio_interval(tokens, forwards)[1]
    assert 1 <= low and high <= 5


def test_paired_ratio():
    a_tokens, a_forwards = [64, 30, 64, 12], [20, 15, 16, 12]
    b_tokens, b_forwards = [64, 30, 64, 12], [40, 30, 32, 12]
    ratio, (low, high) = paired_ratio(a_tokens, a_forwards, b_tokens, b_forwards)
    assert ratio == pytest.approx((170 / 63) / (170 / 114), rel=1e-15)
    assert 1 < low <= ratio <= high <= 2  # A beats B on every prompt by at most 2x: significant
    assert paired_ratio(a_tokens, a_forwards, a_tokens, a_forwards) == (1.0, (1.0, 1.0))
    ratio, (low, high) = paired_ratio([3 * t for t in a_tokens], a_forwards, a_tokens, a_forwards)
    assert ratio == pytest.approx(3) and (low, high) == pytest.approx((3, 3))
    # against the exact paired bootstrap law on three prompts
    ta, fa, tb, fb = [10, 2, 7], [4, 2, 2], [9, 2, 6], [5, 1, 3]
    values = np.sort(
        [
            (sum(ta[i] for i in d) / sum(fa[i] for i in d)) / (sum(tb[i] for i in d) / sum(fb[i] for i in d))
            for d in itertools.product(range(3), repeat=3)
        ]
    )
    low, high = paired_ratio(ta, fa, tb, fb)[1]
    for bound, level in ((low, 0.025), (high, 0.975)):
        assert np.mean(values < bound - 1e-12) <= level + 0.01
        assert np.mean(values <= bound + 1e-12) >= level - 0.01
    assert paired_ratio([5], [2], [4], [2]) == (1.25, None)
    with pytest.raises(ValueError, match="same prompts"):
        paired_ratio([1, 2], [1, 1], [1], [1])
    with pytest.raises(ValueError, match="method B"):
        paired_ratio([1, 2], [1, 1], [1, 2], [0, 0])


def test_compare_runs_every_method_alike_and_sums_the_table(pair):
    target, draft = pair
    tree = TreeMethod(Tree.kary([2, 2]), "rrsw")
    seen = []
    result = compare(
        ["hf-autoregressive", HFAssisted(), tree],
        PROMPTS,
        target,
        draft,
        max_new_tokens=6,
        temperature=0.6,
        seed=5,
        progress=lambda method, i: seen.append((method, i)),
    )
    names = ["hf-autoregressive", "hf-assisted", "mdsd rrsw tree of 6 nodes, depth 2"]
    assert [r.method for r in result.rows] == names and len(seen) == len(result.runs) == 9
    for row in result.rows:
        runs = [r for r in result.runs if r.method == row.method]
        assert [r.seed for r in runs] == [5, 6, 7] and [r.batch for r in runs] == [0, 1, 2]
        assert row.prompts == 3
        for r in runs:  # the hook agrees with each method's own steps and draft forwards
            assert r.target_forwards == r.steps == r.output.steps
            assert r.draft_forwards == r.output.draft_forwards and r.tokens == 6
        tokens, forwards = [r.tokens for r in runs], [r.target_forwards for r in runs]
        assert (row.tokens, row.target_forwards) == (sum(tokens), sum(forwards))
        assert (row.tokens_per_forward, row.ci95) == ratio_interval(tokens, forwards)
        assert row.tokens_per_step == sum(tokens) / sum(r.steps for r in runs)
        assert row.draft_forwards == sum(r.draft_forwards for r in runs)
        seconds = [r.seconds for r in runs]
        assert row.tokens_per_second == pytest.approx(sum(tokens) / sum(seconds))
        assert (row.tokens_per_second, row.tokens_per_second_ci95) == ratio_interval(tokens, seconds)
    assert result.rows[0].tokens_per_forward == 1 and result.rows[0].draft_forwards == 0
    assert result.rows[2].tokens_per_forward > 1
    # the same seeds as each method run alone
    hf = autoregressive(target, PROMPTS, 6, 0.6, seed=5)
    assert [r.output.tokens.tolist() for r in result.runs[:3]] == [o.tokens.tolist() for o in hf]
    decoder = TreeDecoder(target, draft, tree.tree, verifier="rrsw", temperature=0.6)
    for i, prompt in enumerate(PROMPTS):
        alone = decoder.generate(torch.tensor([prompt]), 6, torch.Generator().manual_seed(5 + i))
        assert result.runs[6 + i].output.tokens.tolist() == alone.tokens.tolist()
    row = result.rows[1]
    assert result.records()[1] == dataclasses.asdict(row) | {
        "ci95": list(row.ci95),
        "tokens_per_second_ci95": list(row.tokens_per_second_ci95),
    }
    table = result.markdown().splitlines()
    assert len(table) == 5 and all(table[2 + i].startswith(f"| {name} | ") for i, name in enumerate(names))


def test_compare_in_batches_decodes_each_batch_with_its_first_prompts_seed(pair):
    target, draft = pair
    method = TreeMethod(Tree.kary([2, 1]), "rrsw")
    result = compare([method, "hf-autoregressive"], PROMPTS, target, draft, 6, 0.6, seed=5, batch_size=2)
    mine, hf = result.runs[:3], result.runs[3:]
    assert [(r.prompt, r.seed, r.batch) for r in mine] == [(0, 5, 0), (1, 5, 0), (2, 7, 1)]
    assert [(r.seed, r.batch) for r in hf] == [(5, 0), (6, 1), (7, 2)]  # HF decodes one prompt at a time
    decoder = TreeDecoder(target, draft, method.tree, verifier="rrsw", temperature=0.6)
    alone = decoder.generate_batch(PROMPTS[:2], 6, torch.Generator().manual_seed(5))
    alone += decoder.generate_batch(PROMPTS[2:], 6, torch.Generator().manual_seed(7))
    assert [r.output.tokens.tolist() for r in mine] == [o.tokens.tolist() for o in alone]
    assert all(r.target_forwards == r.steps == r.output.steps for r in mine)
    assert mine[0].seconds == mine[1].seconds  # the batch's clock
    row = result.rows[0]
    assert row.seconds == pytest.approx(mine[0].seconds + mine[2].seconds)
    speed, ci = ratio_interval(
        [mine[0].tokens + mine[1].tokens, mine[2].tokens], [mine[0].seconds, mine[2].seconds]
    )
    assert (row.tokens_per_second, row.tokens_per_second_ci95) == (speed, ci)  # over batches
    greedy = [compare([method], PROMPTS, target, draft, 6, 0.0, batch_size=b).runs for b in (1, 3)]
    assert [r.output.tokens.tolist() for r in greedy[0]] == [r.output.tokens.tolist() for r in greedy[1]]
    with pytest.raises(ValueError, match="batch_size"):
        compare([method], PROMPTS, target, draft, 6, 0.6, batch_size=0)


def test_compare_greedy_methods_agree_and_bad_methods_are_named(pair):
    target, draft = pair
    result = compare(
        ["hf-autoregressive", "hf-assisted", TreeMethod(Tree.chain(3))], PROMPTS, target, draft, 8, 0
    )
    for i in range(len(PROMPTS)):
        assert len({tuple(r.output.tokens.tolist()) for r in result.runs if r.prompt == i}) == 1
    with pytest.raises(ValueError, match="unknown method"):
        compare(["hf-sampling"], PROMPTS, target, draft, 4, 0.6)
    with pytest.raises(ValueError, match="twice"):
        compare(["hf-assisted", HFAssisted()], PROMPTS, target, draft, 4, 0.6)
    for bad in ([], "hf-assisted"):
        with pytest.raises(ValueError, match="non-empty"):
            compare(bad, PROMPTS, target, draft, 4, 0.6)
    decoded = []
    with pytest.raises(ValueError, match="too wide for verifier 'spechub'"):
        methods = ["hf-autoregressive", TreeMethod(Tree.kary([3]))]
        compare(methods, PROMPTS, target, draft, 4, 0.6, progress=lambda *run: decoded.append(run))
    assert not decoded  # every method is checked before the first decode
    with pytest.raises(TypeError, match="a method must be"):
        compare([Tree.chain(2)], PROMPTS, target, draft, 4, 0.6)
    assert HFAssisted(num_assistant_tokens=5).name == "hf-assisted (num_assistant_tokens=5)"


def test_the_fast_path_counts_the_forwards_the_hook_counts_on_the_eager_path(pair):
    """A fast-path method's forwards are the decoder's own count (captured steps call no model from
    Python); they equal what the hook counts for the same decodes on the eager path."""
    target, draft = pair
    eager = TreeMethod(Tree.kary([2, 1]), "rrs", label="eager")
    fast = TreeMethod(Tree.kary([2, 1]), "rrs", label="fast", compile="none")
    result = compare([eager, fast], PROMPTS, target, draft, 8, 0.0)
    by_method = {name: [r for r in result.runs if r.method == name] for name in (eager.name, fast.name)}
    for a, b in zip(*by_method.values(), strict=True):
        assert a.output.tokens.tolist() == b.output.tokens.tolist()
        assert (a.target_forwards, a.draft_forwards) == (b.target_forwards, b.draft_forwards) != (0, 0)


# ---- mdsd decode --compare ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return word_pair(tmp_path_factory.mktemp("pair"))


def test_cli_decode_compare_prints_the_table(model_dirs, tmp_path, capsys, monkeypatch):
    """... and builds no TreeDecoder of its own beside the compared method's (regression: it built one and
    never used it)."""
    import mdsd.tree.decoder
    from mdsd.cli import main

    built = []

    class Counted(TreeDecoder):
        def __init__(self, *args, **kwargs):
            built.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(mdsd.tree.decoder, "TreeDecoder", Counted)  # where mdsd decode builds its decoder
    target, draft = model_dirs
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat sat\na dog ran\n")
    base = ["decode", "--target", str(target), "--draft", str(draft), "--tree", "binary:2"]
    code = main(
        [*base, "--temperature", "0.6", "--prompts-file", str(prompts), "--max-new-tokens", "5", "--compare"]
    )
    out = capsys.readouterr().out
    assert code == 0 and out.count("tokens per step:") == 2 and not built
    assert "2 prompt(s), spechub, binary:2: 10 tokens from" in out
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| method | tokens / target forward (95% CI) |")
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in table[1:]}
    assert list(rows) == ["hf-autoregressive", "hf-assisted", "mdsd spechub binary:2"]
    assert rows["hf-autoregressive"][1].startswith("1.000") and rows["hf-autoregressive"][4] == "10"
    assert all(row[-1] == "10 |" for row in rows.values())  # the same budget for every method
    code = main([*base, "--batch-file", str(prompts), "--compare"])
    assert code == 2 and "--compare decodes prompts one at a time" in capsys.readouterr().err
