"""HF baselines (mdsd.hf.baselines) and the comparison table (mdsd.hf.comparison) on tiny random models.

Exact checks: forward counts (hooked) against the counts each method must take, greedy outputs against an
independent greedy loop, the budget, EOS, the caller's RNG state and generation config, the table against
sums and a hand-computed interval, and the CLI. Statistical check: HF assisted sampling driven by the
wrapper keeps the target's law of the first two tokens (seeded chi-square, α = 1e-3), also when the
model's own generation config sets top-k; the same test rejects HF driven naively on that model.
"""

import copy
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tree"))  # the decoder tests' tiny models
from tiny_lms import perturbed, tiny_lm, word_pair  # noqa: E402

from mdsd import Tree, TreeDecoder  # noqa: E402
from mdsd.hf import (  # noqa: E402
    HFAssisted,
    TreeMethod,
    assisted,
    autoregressive,
    compare,
    count_forwards,
    ratio_interval,
)
from mdsd.hf.record import sample_continuation  # noqa: E402

ALPHA = 1e-3
PROMPTS = [[3, 1, 4], [7], [2, 9, 11, 5, 0]]


@pytest.fixture(scope="module")
def pair():
    """A target over 12 tokens and a close draft."""
    target = tiny_lm(0)
    return target, perturbed(target, 0.3, seed=1)


@pytest.fixture(scope="module")
def twin(pair):
    """The target and an exact copy of it as draft: every draft is accepted."""
    return pair[0], copy.deepcopy(pair[0])


def _greedy(target, prompt, n):
    """The target's greedy continuation by mdsd's own KV-cached loop (not HF generate)."""
    return sample_continuation(target, torch.tensor(prompt), n, 0.0)[0].tolist()


# ---- counting forwards ---------------------------------------------------------------------------------


def test_count_forwards_counts_top_level_calls_and_removes_its_hooks(pair):
    target, draft = pair
    with count_forwards(target, draft) as n:
        target(input_ids=torch.tensor([[1, 2, 3]]))
        target(torch.tensor([[4]]))
        target.model(input_ids=torch.tensor([[5]]))  # an inner module: not a model forward
        draft(input_ids=torch.tensor([[1, 2]]))
    assert n.calls == [2, 1] and n.tokens == [[3, 1], [2]]
    target(torch.tensor([[4]]))  # after the block: no hook left
    assert n.calls == [2, 1] and not target._forward_hooks and not draft._forward_hooks
    with pytest.raises(ValueError, match="twice"):
        with count_forwards(target, target):
            pass
    with pytest.raises(TypeError, match=r"models\[1\]"):
        with count_forwards(target, "draft"):
            pass


# ---- HF autoregressive and assisted generation ---------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7])
def test_autoregressive_takes_one_target_forward_per_token(pair, n):
    for out in autoregressive(pair[0], PROMPTS, n, temperature=0.6, seed=4):
        assert len(out.tokens) == n == out.target_forwards == out.steps  # the first forward is the prefill
        assert out.tokens_per_step == [1] * n and out.depth_per_step == [0] * n
        assert out.draft_forwards == 0 and not out.stopped_by_eos and out.mean_tokens_per_step == 1


@pytest.mark.parametrize("temperature", [0.0, 1.0])  # HF drafts at T², so the twin is exact only here
def test_assisted_with_a_perfect_draft_takes_the_exact_forward_counts(twin, temperature):
    """Every draft accepted: a step emits min(3, left - 1) drafts + 1 token; one draft forward a draft."""
    target, draft = twin
    for n in range(1, 11):
        (out,) = assisted(
            target,
            draft,
            [PROMPTS[0]],
            n,
            temperature,
            num_assistant_tokens=3,
            assistant_confidence_threshold=0,
        )
        depths, left = [], n
        while left:
            depths.append(min(3, left - 1))
            left -= depths[-1] + 1
        assert out.depth_per_step == depths and out.tokens_per_step == [d + 1 for d in depths]
        assert out.steps == out.target_forwards == math.ceil(n / 4) and len(out.tokens) == n
        assert out.draft_forwards == sum(depths) and out.accepted_per_step == depths


def test_assisted_counts_agree_with_its_own_steps(pair):
    target, draft = pair
    for n in (1, 2, 9):
        for out in assisted(target, draft, PROMPTS, n, temperature=0.6, seed=2):
            assert len(out.tokens) == n == sum(out.tokens_per_step)
            assert out.steps == out.target_forwards == len(out.depth_per_step)
            assert out.draft_forwards == sum(out.depth_per_step)  # one draft forward per drafted token
            assert out.tokens_per_step == [a + 1 for a in out.accepted_per_step]


def test_greedy_outputs_are_the_target_s_greedy_output(pair):
    target, draft = pair
    hf = autoregressive(target, PROMPTS, 16, temperature=0)
    hf_assisted = assisted(target, draft, PROMPTS, 16, temperature=0)
    decoder = TreeDecoder(target, draft, Tree.kary([2, 2]), verifier="rrsw", temperature=0)
    for prompt, a, b in zip(PROMPTS, hf, hf_assisted, strict=True):
        reference = _greedy(target, prompt, 16)
        assert a.tokens.tolist() == b.tokens.tolist() == reference
        assert decoder.generate(torch.tensor([prompt]), 16).tokens.tolist() == reference
    assert len(set(map(tuple, (o.tokens.tolist() for o in hf)))) == len(PROMPTS)  # not one constant run


def test_every_method_stops_at_the_first_eos(pair, twin):
    target, draft = pair
    prompt = PROMPTS[0]
    reference = _greedy(target, prompt, 12)
    eos = reference[5]
    cut = reference[: reference.index(eos) + 1]
    outs = [
        *autoregressive(target, [prompt], 12, 0.0, eos_token_id=eos),
        *assisted(target, draft, [prompt], 12, 0.0, eos_token_id=[eos]),
        *assisted(*twin, [prompt], 12, 0.0, eos_token_id=eos, num_assistant_tokens=4),  # EOS inside a step
        TreeDecoder(target, draft, Tree.kary([2, 2]), temperature=0, eos_token_id=eos).generate(
            torch.tensor([prompt]), 12
        ),
    ]
    for out in outs:
        assert out.tokens.tolist() == cut and out.stopped_by_eos and sum(out.tokens_per_step) == len(cut)
    # sampled: each output ends at its first EOS token, or has the whole budget without one
    stops = {1, 4}
    for method in (autoregressive, lambda *a, **k: assisted(a[0], draft, *a[1:], **k)):
        for out in method(target, PROMPTS * 4, 8, 1.0, seed=9, eos_token_id=sorted(stops)):
            tokens = out.tokens.tolist()
            assert not stops & set(tokens[:-1]) and out.stopped_by_eos == (tokens[-1] in stops)
            assert len(tokens) == 8 or out.stopped_by_eos


def test_eos_defaults_to_the_target_generation_config_which_is_restored(pair):
    target, draft = copy.deepcopy(pair[0]), pair[1]
    reference = _greedy(target, PROMPTS[0], 12)
    eos = reference[5]
    target.generation_config.eos_token_id = eos
    config = target.generation_config
    for out in (
        autoregressive(target, PROMPTS[:1], 12, 0.0)[0],
        assisted(target, draft, PROMPTS[:1], 12, 0.0)[0],
    ):
        assert out.tokens.tolist() == reference[: reference.index(eos) + 1]
    assert target.generation_config is config and config.eos_token_id == eos


def test_the_caller_s_rng_is_restored_and_not_used(pair):
    target, draft = pair
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = [o.tokens.tolist() for o in assisted(target, draft, PROMPTS, 6, 1.0, seed=5)]
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(456)  # another global state: the same outputs
    assert [o.tokens.tolist() for o in assisted(target, draft, PROMPTS, 6, 1.0, seed=5)] == first
    other = [o.tokens.tolist() for o in assisted(target, draft, PROMPTS, 6, 1.0, seed=6)]
    assert other != first  # the seed matters
    state = torch.get_rng_state()
    autoregressive(target, PROMPTS, 3, 1.0)
    assert torch.equal(torch.get_rng_state(), state)


def test_a_model_generation_config_cannot_change_the_law(pair):
    """top_k, top_p, repetition penalty or greedy set on a model are ignored; the configs come back intact."""
    target, draft = pair
    polluted_target, polluted_draft = copy.deepcopy(target), copy.deepcopy(draft)
    for model in (polluted_target, polluted_draft):
        model.generation_config.update(top_k=1, top_p=0.1, repetition_penalty=5.0, do_sample=False)
    clean = [o.tokens.tolist() for o in assisted(target, draft, PROMPTS, 6, 1.0, seed=3)]
    config = polluted_target.generation_config
    got = [o.tokens.tolist() for o in assisted(polluted_target, polluted_draft, PROMPTS, 6, 1.0, seed=3)]
    assert got == clean and polluted_target.generation_config is config and config.top_k == 1
    clean = [o.tokens.tolist() for o in autoregressive(target, PROMPTS, 6, 1.0, seed=3)]
    assert [o.tokens.tolist() for o in autoregressive(polluted_target, PROMPTS, 6, 1.0, seed=3)] == clean


def test_assisted_options_and_hf_defaults(twin):
    target, draft = twin
    (out,) = assisted(
        target, draft, PROMPTS[:1], 12, 0.0, num_assistant_tokens=2, assistant_confidence_threshold=0
    )
    assert out.depth_per_step == [2, 2, 2, 2] and out.settings["num_assistant_tokens"] == 2
    (out,) = assisted(target, draft, PROMPTS[:1], 4, 0.6)
    # transformers 5.x defaults, quoted in the module docstring and the report: update both if this fails
    assert {k: out.settings[k] for k in ("num_assistant_tokens", "num_assistant_tokens_schedule")} == {
        "num_assistant_tokens": 20,
        "num_assistant_tokens_schedule": "constant",
    }
    assert out.settings["assistant_confidence_threshold"] == 0.4 and out.settings["top_k"] == 0
    # the gotcha the wrapper avoids: given to target.generate, HF ignores the draft settings
    ids = torch.tensor([PROMPTS[0]])
    ignored = {"num_assistant_tokens": 2, "assistant_confidence_threshold": 0.0}
    with count_forwards(target) as n:
        target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft, max_new_tokens=12,
                        do_sample=False, **ignored)  # fmt: skip
    assert n.tokens[0][0] - len(PROMPTS[0]) != 2
    for bad in ({"top_k": 5}, {"num_assistant_tokens": 0}, {"num_assistant_tokens_schedule": "fast"}):
        with pytest.raises(ValueError, match=next(iter(bad)) if "top_k" not in bad else "unknown hf_options"):
            assisted(target, draft, PROMPTS[:1], 4, 0.6, **bad)
    with pytest.raises(ValueError, match="assistant_confidence_threshold"):
        assisted(target, draft, PROMPTS[:1], 4, 0.6, assistant_confidence_threshold=1.5)


def test_bad_arguments_name_themselves(pair):
    target, draft = pair
    cases = [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"seed": -1}, "seed"),
        ({"prompts": [[1, 12]]}, r"prompts\[0\]"),
        ({"prompts": [[]]}, r"prompts\[0\] is empty"),
        ({"prompts": []}, "prompts is empty"),
    ]
    for change, message in cases:
        args = {"prompts": PROMPTS, "max_new_tokens": 3, "temperature": 0.6, "seed": 0} | change
        with pytest.raises(ValueError, match=message):
            assisted(target, draft, **args)
    with pytest.raises(ValueError, match="draft is the target"):
        assisted(target, target, PROMPTS, 3, 0.6)
    with pytest.raises(ValueError, match="share one vocabulary"):
        assisted(target, tiny_lm(2, vocab=13), PROMPTS, 3, 0.6)


# ---- the law of HF assisted sampling -------------------------------------------------------------------


def test_hf_drafts_at_the_squared_temperature(twin, monkeypatch):
    """transformers 5.x: the assistant applies the temperature twice, q = softmax(z / T²) (see the module);
    4.54 (the oldest supported) applied it once."""
    import transformers
    import transformers.generation.utils as hf_utils

    target, draft = twin
    temperature, seen = 0.5, []
    original = hf_utils._speculative_sampling

    def spy(candidate_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs):
        seen.append((candidate_ids.clone(), candidate_logits.clone(), candidate_length))
        return original(candidate_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs)

    monkeypatch.setattr(hf_utils, "_speculative_sampling", spy)
    assisted(
        target, draft, PROMPTS[:1], 6, temperature, num_assistant_tokens=3, assistant_confidence_threshold=0
    )
    assert seen
    for ids, candidate_logits, m in seen:
        with torch.no_grad():
            z = draft(ids).logits[0, -m - 1 : -1].double()  # the draft's logits at the drafted positions
        q = candidate_logits[0].double().softmax(-1)
        powers = (2, 1) if int(transformers.__version__.split(".")[0]) >= 5 else (1, 2)  # (HF's, not HF's)
        expected, other = (torch.softmax(z / temperature**e, -1) for e in powers)
        assert torch.allclose(q, expected, atol=1e-5)
        assert not torch.allclose(q, other, atol=1e-2)


@torch.no_grad()
def _exact_law(target, prompt, temperature):
    """P(t1, t2) [V, V] in float64 by enumeration."""
    first = target(torch.tensor([prompt])).logits[0, -1].double()
    V = first.shape[-1]
    seconds = target(torch.tensor([[*prompt, t] for t in range(V)])).logits[:, -1].double()
    return torch.softmax(first / temperature, -1)[:, None] * torch.softmax(seconds / temperature, -1)


def _p_value(pairs: np.ndarray, law: torch.Tensor) -> float:
    """Pearson's chi-square of the (t1, t2) counts, cells with expected count < 5 pooled."""
    V = law.shape[0]
    counts = np.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V).astype(float)
    expected = law.numpy().ravel() * len(pairs)
    small = expected < 5
    obs, exp = counts[~small], expected[~small]
    if small.any():
        obs, exp = np.append(obs, counts[small].sum()), np.append(exp, expected[small].sum())
    return chisquare(obs, exp).pvalue


def test_hf_assisted_sampling_keeps_the_target_law():
    """300 seeded 3-token runs; the first two tokens against the exact law; a naive HF call must fail."""
    temperature, prompt, runs = 0.6, [2, 0, 1], 300
    target = tiny_lm(3, vocab=4)
    draft = perturbed(target, 0.5, seed=4)
    for model in (target, draft):
        model.generation_config.top_k = 3  # what a checkpoint may set: drops a token at each position
    law = _exact_law(target, prompt, temperature)
    outs = assisted(target, draft, [prompt] * runs, 3, temperature, seed=11)
    assert np.mean([o.accepted_per_step[0] for o in outs]) > 0.5  # the first step usually accepts a draft
    assert _p_value(np.array([o.tokens[:2].tolist() for o in outs]), law) > ALPHA
    # broken: HF called as a user would, keeping the model's top_k (and HF's global RNG)
    naive = []
    ids = torch.tensor([prompt])
    for seed in range(150):
        torch.manual_seed(seed)
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=2, do_sample=True,
                              temperature=temperature)  # fmt: skip
        naive.append(out[0, len(prompt) :].tolist())
    assert _p_value(np.array(naive), law) < ALPHA


# ---- the comparison ------------------------------------------------------------------------------------


def test_ratio_interval_by_hand():
    tokens, forwards = [10, 12, 8], [5, 4, 4]
    ratio = 30 / 13
    d = [10 - ratio * 5, 12 - ratio * 4, 8 - ratio * 4]
    se = math.sqrt(sum(x * x for x in d) / (3 * 2)) / (13 / 3)
    t = 4.302652729749464  # Student's t quantile, 97.5%, 2 degrees of freedom
    got, (low, high) = ratio_interval(tokens, forwards)
    assert got == pytest.approx(ratio, rel=1e-15)
    assert (low, high) == pytest.approx((ratio - t * se, ratio + t * se), rel=1e-12)
    assert ratio_interval([7], [3]) == (7 / 3, None)
    assert ratio_interval([2, 4, 6], [1, 2, 3]) == (2.0, (2.0, 2.0))  # every prompt at the same ratio
    wide = ratio_interval(tokens, forwards, confidence=0.99)[1]
    assert wide[0] < low and wide[1] > high
    for bad in (([1, 2], [1]), ([1], [0]), ([1, 2], [1, -1]), ([], []), ([np.nan], [1])):
        with pytest.raises(ValueError):
            ratio_interval(*bad)


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
        assert [r.seed for r in runs] == [5, 6, 7] and row.prompts == 3
        for r in runs:  # the hook agrees with each method's own steps and draft forwards
            assert r.target_forwards == r.steps == r.output.steps
            assert r.draft_forwards == r.output.draft_forwards and r.tokens == 6
        tokens, forwards = [r.tokens for r in runs], [r.target_forwards for r in runs]
        assert (row.tokens, row.target_forwards) == (sum(tokens), sum(forwards))
        ratio, (low, high) = ratio_interval(tokens, forwards)
        assert (row.tokens_per_forward, row.ci95) == (ratio, (max(low, 1.0), high))  # >= 1 token a forward
        assert row.tokens_per_step == sum(tokens) / sum(r.steps for r in runs)
        assert row.draft_forwards == sum(r.draft_forwards for r in runs)
        seconds = [r.seconds for r in runs]
        assert row.tokens_per_second == pytest.approx(sum(tokens) / sum(seconds))
        speed, (low, high) = ratio_interval(tokens, seconds)
        assert (row.tokens_per_second, row.tokens_per_second_ci95) == (speed, (max(low, 0.0), high))
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
    import mdsd
    from mdsd.cli import main

    built = []

    class Counted(mdsd.TreeDecoder):
        def __init__(self, *args, **kwargs):
            built.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(mdsd, "TreeDecoder", Counted)
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
