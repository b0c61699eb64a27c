"""HF baselines (mdsd.hf.baselines) on tiny random models; the comparison table built on them is tested in
tests/harness/test_comparison.py.

Exact checks: forward counts (hooked) against the counts each method must take, greedy outputs against an
independent greedy loop, the budget, EOS, the caller's RNG state and generation config. Statistical check:
HF assisted sampling driven by the wrapper keeps the target's law of the first two tokens (seeded
chi-square, α = 1e-3), also when the model's own generation config sets top-k; the same test rejects HF
driven naively on that model.
"""

import copy
import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tiny_lms import perturbed, tiny_lm

from mdsd import Tree, TreeDecoder
from mdsd.hf import assisted, autoregressive, count_forwards
from mdsd.hf.record import sample_continuation

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


def test_hf_s_notice_about_its_own_assistant_call_is_not_shown(pair):
    """transformers 5.x logs that passing a generation_config together with min/max_new_tokens is deprecated,
    about the call its assisted generation makes to the assistant, not about mdsd's call (mdsd passes a
    generation_config alone): mdsd's assisted runs do not show it; other messages are untouched."""
    import logging

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("transformers.generation.utils")
    handler = Keep()
    logger.addHandler(handler)
    try:
        logging.Logger.warning_once.cache_clear()  # transformers logs each notice once per process
        assisted(*pair, [PROMPTS[0]], 4, 0.6, seed=0)
        assert not [r for r in records if "generation_config` together" in r]
        logger.warning("another message")  # the filter is gone after the call, and passes everything else
        assert records[-1] == "another message"
    finally:
        logger.removeHandler(handler)
        logging.Logger.warning_once.cache_clear()
