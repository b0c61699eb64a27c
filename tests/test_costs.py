"""The cost model: measured profiles, interpolation, save/load, step times counted from the decoder's own
forwards, predictions against hand computations, the overhead fit and the experiment's quick path.

No test asserts on wall-clock speed: measured times are only checked to be positive and finite."""

import dataclasses
import json
import math
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.interpolate import RegularGridInterpolator
from tiny_lms import perturbed, tiny_lm

import mdsd
from mdsd import CostProfile, DynamicTree, Tree, TreeDecoder
from mdsd.costs import Overhead
from mdsd.tree.adaptive import ExpectedRate
from mdsd.tree.plan import truncated_plan

torch.set_num_threads(1)  # the test machine is shared; tiny models gain nothing from threads


EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture(scope="module")
def pair():
    target = tiny_lm(0, vocab=24)
    return target, perturbed(target, 0.3, seed=1)


@pytest.fixture(scope="module")
def profile(pair):
    return mdsd.measure_profile(pair[0], [1, 3], [1, 3, 7], [0, 9], repeats=2, progress=False)


def synthetic(f, batches=(1, 8), tokens=(1, 32), contexts=(0, 1000)) -> CostProfile:
    return CostProfile.from_function(f, batches, tokens, contexts)


# ---- measuring ------------------------------------------------------------------------------------


def test_a_measured_profile_records_what_was_measured(pair, profile):
    assert (
        profile.table.shape == (2, 3, 2) and np.all(profile.table > 0) and np.all(np.isfinite(profile.table))
    )
    assert np.all(np.asarray(profile.spread) >= 0)
    assert (profile.batches, profile.tokens, profile.contexts) == ((1, 3), (1, 3, 7), (0, 9))
    assert (profile.device, profile.dtype, profile.threads, profile.repeats) == ("cpu", "float32", 1, 2)
    params = sum(p.numel() for p in pair[0].parameters())
    assert profile.model["class"] == "Qwen2ForCausalLM" and profile.model["parameters"] == params


def test_the_profile_times_forwards_like_the_decoders(pair):
    """Each timed forward appends t tokens per row to a cache of exactly c entries (cut back after each), with
    the decoder's 4-D float mask and explicit positions, and keeps the logits of all t tokens."""
    target = pair[0]
    calls = []

    def hook(module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # the name changed in transformers 5.24
        calls.append(
            (
                tuple(kwargs["input_ids"].shape),
                tuple(kwargs["attention_mask"].shape),
                kwargs["attention_mask"].dtype,
                kwargs["position_ids"][0].tolist(),
                0 if cache is None else cache.get_seq_length(),
                kwargs.get("logits_to_keep"),
            )
        )

    handle = target.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        mdsd.measure_profile(target, [2], [1, 3], [0, 5], repeats=2, progress=False)
    finally:
        handle.remove()
    timed = [(2, t) for t in (1, 3)] * 3  # a warm-up round and two timed rounds, per context
    expected = [((2, t), (2, 1, t, t), torch.float32, list(range(t)), 0, t) for _, t in timed]
    expected.append(((2, 5), (2, 1, 5, 5), torch.float32, list(range(5)), 0, 1))  # the cache's prefill
    expected += [((2, t), (2, 1, t, 5 + t), torch.float32, list(range(5, 5 + t)), 5, t) for _, t in timed]
    assert calls == expected


def test_a_profile_of_the_fast_path_times_the_static_forwards(pair, monkeypatch):
    """compile= times the fast path's forwards (static caches, each shape captured once): every grid
    point is timed, and the profile says which path it measured."""
    from mdsd.tree.static import StaticLM

    shapes = []
    forward = StaticLM.forward

    def record(self, ids, *args, **kwargs):
        shapes.append((tuple(ids.shape), int(self.length[0])))
        return forward(self, ids, *args, **kwargs)

    monkeypatch.setattr(StaticLM, "forward", record)
    profile = mdsd.measure_profile(pair[0], [2], [1, 3], [0, 5], repeats=2, progress=False, compile="none")
    assert profile.path == "static:none" and np.all(profile.table > 0)
    expected = []
    for c in (0, 5):
        expected += [((2, 5), 0)] if c else []  # the prefill of c entries
        expected += [((2, t), c) for t in (1, 3)]  # each shape once eagerly before it is captured
        expected += [((2, t), c) for _ in range(3) for t in (1, 3)]  # a warm-up round, two timed rounds
    assert shapes == expected


def test_measure_profile_rejects_bad_arguments(pair):
    target = pair[0]
    with pytest.raises(ValueError, match="repeats"):
        mdsd.measure_profile(target, [1], [1], [0], repeats=0, progress=False)
    with pytest.raises(ValueError, match="tokens"):
        mdsd.measure_profile(target, [1], [2, 1], [0], progress=False)
    with pytest.raises(ValueError, match="device"):
        mdsd.measure_profile(target, [1], [1], [0], device="cuda", progress=False)
    with pytest.raises(TypeError, match="model"):
        mdsd.measure_profile("gpt", [1], [1], [0], progress=False)


# ---- interpolation --------------------------------------------------------------------------------


def test_interpolation_is_exact_on_grid_points(profile):
    for i, b in enumerate(profile.batches):
        for j, t in enumerate(profile.tokens):
            for k, c in enumerate(profile.contexts):
                assert profile.seconds(b, t, c) == profile.table[i, j, k]


def test_interpolation_is_linear_between_grid_points(profile):
    table = profile.table
    # halfway along one axis: the mean of the two neighbours
    assert profile.seconds(2, 3, 9) == pytest.approx((table[0, 1, 1] + table[1, 1, 1]) / 2, rel=1e-12)
    assert profile.seconds(1, 5, 0) == pytest.approx((table[0, 1, 0] + table[0, 2, 0]) / 2, rel=1e-12)
    # anywhere inside: scipy's independent trilinear interpolation
    reference = RegularGridInterpolator((profile.batches, profile.tokens, profile.contexts), table)
    rng = np.random.default_rng(0)
    points = rng.uniform([1, 1, 0], [3, 7, 9], size=(60, 3))
    for b, t, c in points:
        assert profile.seconds(b, t, c) == pytest.approx(float(reference([b, t, c])[0]), rel=1e-12)


def test_functions_linear_in_each_variable_are_reproduced_exactly():
    def f(b, t, c):
        return 0.5 + 0.1 * b * t + 0.01 * c + 0.001 * b * c * t

    prof = synthetic(f, batches=(1, 4, 16), tokens=(1, 8, 32), contexts=(0, 64, 512))
    for b, t, c in [(2.5, 3, 17), (15, 31, 500), (1, 1, 0), (7, 20, 100.5)]:
        assert prof.seconds(b, t, c) == pytest.approx(f(b, t, c), rel=1e-12)


def test_queries_outside_the_grid_raise_unless_extrapolation_is_asked():
    def f(b, t, c):
        return 1.0 + 2.0 * t + 0.5 * b + 0.1 * c

    prof = synthetic(f, batches=(1, 4), tokens=(1, 8), contexts=(10, 100))
    for kwargs, name in [
        (dict(batch=5, tokens=2, context=20), "batch=5"),
        (dict(batch=2, tokens=9, context=20), "tokens=9"),
        (dict(batch=2, tokens=2, context=5), "context=5"),
        (dict(batch=0.5, tokens=2, context=20), "batch=0.5"),
    ]:
        with pytest.raises(ValueError, match=name):
            prof.seconds(**kwargs)
        # the outermost segments continued: exact for a linear function
        assert prof.seconds(**kwargs, extrapolate=True) == pytest.approx(f(*kwargs.values()), rel=1e-12)
    falling = synthetic(lambda b, t, c: 10.0 - t, batches=(1,), tokens=(1, 2), contexts=(0,))
    assert falling.seconds(1, 20, 0, extrapolate=True) == 0.0  # floored, never negative
    assert falling.seconds(1, 1.5, 0) == 8.5  # a one-point axis answers at its value
    with pytest.raises(ValueError, match="one value"):
        falling.seconds(2, 1, 0, extrapolate=True)
    for bad in (math.nan, math.inf, "3", True, None):
        with pytest.raises(ValueError, match="tokens must be a finite number"):
            prof.seconds(2, bad, 20)


BASE = dict(
    model={"name": "m"},
    device="cpu",
    dtype="float32",
    threads=1,
    repeats=3,
    batches=(1, 2),
    tokens=(1,),
    contexts=(0,),
    times=[[[1.0]], [[2.0]]],
    spread=[[[0.0]], [[0.1]]],
)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(batches=()), "batches"),
        (dict(batches=(0, 1)), "batches"),
        (dict(batches=(2, 1)), "batches"),
        (dict(batches=(1, 1)), "batches"),
        (dict(batches=(1, 2.5)), "batches"),
        (dict(batches=(True, 2)), "batches"),
        (dict(batches=5), "batches"),
        (dict(tokens=(0,)), "tokens"),
        (dict(contexts=(-1,)), "contexts"),
        (dict(times=[[[1.0]]]), "times must have shape"),
        (dict(times=[[[1.0]], [[math.nan]]]), "times entries"),
        (dict(times=[[[1.0]], [[0.0]]]), "times entries"),
        (dict(times=[[[1.0]], [["x"]]]), "times"),
        (dict(spread=[[[0.0]], [[-0.1]]]), "spread entries"),
        (dict(repeats=0), "repeats"),
    ],
)
def test_bad_grids_and_tables_raise(change, match):
    with pytest.raises(ValueError, match=match):
        CostProfile(**{**BASE, **change})


def test_save_and_load_round_trip(profile, tmp_path):
    path = profile.save(tmp_path / "sub" / "target.json")
    loaded = CostProfile.load(path)
    assert loaded == profile
    assert loaded.seconds(2.2, 4.5, 3.3) == profile.seconds(2.2, 4.5, 3.3)
    payload = json.loads(path.read_text())
    assert payload["format"] == "mdsd.CostProfile/1" and payload["model"] == profile.model
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not a cost profile"):
        CostProfile.load(tmp_path / "other.json")
    del payload["spread"]
    (tmp_path / "partial.json").write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="fields"):
        CostProfile.load(tmp_path / "partial.json")


# ---- step times and predictions -------------------------------------------------------------------


def draft_time(b, t, c):
    return 0.004 + 0.0005 * b * t + 2e-6 * c


def target_time(b, t, c):
    return 0.02 + 0.003 * b * t + 1e-5 * c * b


@pytest.fixture(scope="module")
def profiles():
    grid = dict(batches=(1, 4), tokens=(1, 8), contexts=(10, 100))
    return synthetic(target_time, **grid), synthetic(draft_time, **grid)


def test_predict_against_a_hand_computation(profiles):
    """Tree [2, 1]: draft forwards of 2 (the last tokens) and 2 (the depth-1 nodes) tokens, a target forward
    of 5; F = 1 + (0.6 + 0.3) + (0.6 + 0.3)·0.6 = 2.44; overhead rows F + M = 5 + 3."""
    B, c = 3, 50
    overhead = Overhead(per_step=0.001, per_row_node=2e-5)
    pred = mdsd.predict(*profiles, Tree.kary([2, 1]), [0.6, 0.3], B, c, overhead=overhead)
    draft = 2 * draft_time(B, 2, c)
    target = target_time(B, 5, c)
    step = draft + target + 0.001 + 2e-5 * B * 8
    ar = target_time(B, 1, c)
    assert pred.tokens_per_step == pytest.approx(2.44, rel=1e-12)
    assert pred.draft_seconds == pytest.approx(draft, rel=1e-12)
    assert pred.target_seconds == pytest.approx(target, rel=1e-12)
    assert pred.overhead_seconds == pytest.approx(0.001 + 2e-5 * B * 8, rel=1e-12)
    assert pred.step_seconds == pytest.approx(step, rel=1e-12)
    assert pred.tokens_per_second == pytest.approx(B * 2.44 / step, rel=1e-12)
    assert pred.autoregressive_seconds == pytest.approx(ar, rel=1e-12)
    assert pred.autoregressive_tokens_per_second == pytest.approx(B / ar, rel=1e-12)
    assert pred.speedup == pytest.approx(2.44 * ar / step, rel=1e-12)
    assert pred.autoregressive_overhead_seconds == 0
    # the autoregressive step charged its own overhead: one forwarded node a row
    own = Overhead(per_step=4e-4, per_row_node=3e-6)
    both = mdsd.predict(
        *profiles, Tree.kary([2, 1]), [0.6, 0.3], B, c, overhead=overhead, autoregressive_overhead=own
    )
    assert both.autoregressive_overhead_seconds == pytest.approx(4e-4 + 3e-6 * B, rel=1e-12)
    assert both.autoregressive_seconds == pytest.approx(ar + 4e-4 + 3e-6 * B, rel=1e-12)
    assert both.speedup == pytest.approx(2.44 * (ar + 4e-4 + 3e-6 * B) / step, rel=1e-12)
    assert both.step_seconds == pred.step_seconds
    with pytest.raises(TypeError, match="autoregressive_overhead"):
        mdsd.predict(*profiles, Tree.kary([2, 1]), [0.6, 0.3], B, c, autoregressive_overhead=1e-3)
    # a measured tokens/step instead of the acceptance vector; a Plan instead of the tree
    plan = mdsd.tree.plan.static_plan(Tree.kary([2, 1]))
    same = mdsd.predict(*profiles, plan, None, B, c, tokens_per_step=2.44, overhead=overhead)
    assert same.step_seconds == pred.step_seconds and same.speedup == pytest.approx(pred.speedup, rel=1e-12)
    assert mdsd.predict(*profiles, plan, [0.6, 0.3], B, c, overhead=overhead) == pred


def test_speculation_pays_less_as_the_batch_grows(profiles):
    """With a target forward whose cost grows with B·t (compute-bound), the speedup falls with B."""
    speedups = [mdsd.predict(*profiles, Tree.kary([2, 2]), [0.6, 0.2], B, 50).speedup for B in (1, 2, 3, 4)]
    assert all(a > b for a, b in zip(speedups, speedups[1:], strict=False))


def test_predict_rejects_bad_input(profiles):
    tree = Tree.kary([2])
    with pytest.raises(ValueError, match="exactly one"):
        mdsd.predict(*profiles, tree, None, 1, 50)
    with pytest.raises(ValueError, match="exactly one"):
        mdsd.predict(*profiles, tree, [0.5], 1, 50, tokens_per_step=1.5)
    with pytest.raises(ValueError, match="static tree"):
        mdsd.predict(*profiles, DynamicTree(depth=2, k=2, expand=1), [0.5, 0.2], 1, 50)
    for bad in (0.5, 3.5, math.nan, True):
        with pytest.raises(ValueError, match="tokens_per_step"):
            mdsd.predict(*profiles, tree, None, 1, 50, tokens_per_step=bad)
    with pytest.raises(ValueError, match="acceptance"):
        mdsd.predict(*profiles, tree, [0.9, 0.9], 1, 50)
    with pytest.raises(ValueError, match="batch=5"):
        mdsd.predict(*profiles, tree, [0.5, 0.2], 5, 50)
    with pytest.raises(TypeError, match="draft_profile"):
        mdsd.predict(profiles[0], None, tree, [0.5, 0.2], 1, 50)
    with pytest.raises(TypeError, match="overhead"):
        mdsd.predict(*profiles, tree, [0.5, 0.2], 1, 50, overhead=0.01)
    with pytest.raises(ValueError, match="per_step"):
        Overhead(per_step=-1.0, per_row_node=0.0)
    with pytest.raises(ValueError, match="per_row_node"):
        Overhead(per_step=0.0, per_row_node=math.nan)


@pytest.mark.parametrize(
    "tree, draft, target",
    [
        (Tree.chain(0), [2], 1),
        (Tree.chain(3), [2, 1, 1], 4),
        (Tree.kary([2, 2]), [2, 2], 7),
        (Tree.kary([3, 1]), [2, 3], 7),
        (Tree.kary([2, 2, 2]).truncate(1), [2], 3),
        (Tree((0, 0, 1, 1, 3, 2, 5)), [2, 2, 1, 1], 8),
        (DynamicTree(depth=3, k=2, expand=2, budget=5), [2, 2, 2], 6),
        (DynamicTree(depth=2, k=3, expand=2), [2, 2], 10),
        (DynamicTree(depth=4, k=2, expand=1, budget=3), [2, 1, 1, 1], 4),
    ],
    ids=str,
)
def test_step_seconds_counts_the_forwards_of_each_plan(tree, draft, target):
    """Draft profile 1 + t and target profile 100 + 10 t: the step time spells out the forwards."""
    assert mdsd.costs.step_forwards(tree) == (draft, target)
    seconds = mdsd.step_seconds(
        synthetic(lambda b, t, c: 100.0 + 10 * t), synthetic(lambda b, t, c: 1.0 + t), tree, 1, 0
    )
    assert seconds == sum(1 + n for n in draft) + 100 + 10 * target


def test_depth_seconds_is_the_step_time_of_each_truncated_tree(profiles):
    overhead = Overhead(per_step=0.01, per_row_node=1e-4)
    for tree in (Tree.kary([2, 1, 1]), DynamicTree(depth=3, k=2, expand=2, budget=6)):
        seconds = mdsd.depth_seconds(*profiles, tree, 2, 40, overhead)
        for d in (1, 2, 3):
            plan = truncated_plan(tree, d)
            assert seconds(d) == mdsd.step_seconds(*profiles, plan, 2, 40, overhead)
        for bad in (0, 4):
            with pytest.raises(ValueError, match="depth"):
                seconds(bad)
    assert mdsd.depth_seconds(*profiles, Tree.chain(2), 1, 40)(2) < mdsd.depth_seconds(
        *profiles, Tree.chain(3), 1, 40
    )(3)


# ---- the decoder's own forwards, replayed ---------------------------------------------------------


def _record(models):
    """Hooks appending (who, rows, new tokens, cache slots) for every forward; returns the handles."""
    calls = []

    def hook(who):
        def record(module, args, kwargs):
            ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
            calls.append((who, ids.shape[0], ids.shape[1], mask.shape[-1] - ids.shape[1]))

        return record

    handles = [m.register_forward_pre_hook(hook(who), with_kwargs=True) for who, m in models.items()]
    return calls, handles


def _steps(calls):
    """Per step: the draft forwards' (rows, tokens) and the target forward's (rows, tokens, cache slots)."""
    steps, draft = [], []
    for who, rows, tokens, slots in calls:
        if who == "draft":
            draft.append((rows, tokens))
        else:
            steps.append((draft, (rows, tokens, slots)))
            draft = []
    return steps


@pytest.mark.parametrize(
    "tree, adaptive",
    [
        (Tree.kary([2, 2]), None),
        (Tree((0, 0, 1, 1, 3, 2, 5)), None),
        (DynamicTree(depth=3, k=2, expand=2, budget=4), None),
        (Tree.chain(4), 10.0),  # rows of one step draft different depths
        (Tree.kary([2, 1, 1]), 20.0),
    ],
    ids=str,
)
def test_step_forwards_and_the_replay_are_the_decoders(pair, tree, adaptive):
    """Every step after the first runs exactly the forwards step_forwards names (of the tree truncated at the
    batch's deepest row under an adaptive depth), at the rows and, for static trees, the cache length of the
    schedule; so the replay of a profile B·(1 + t) is the sum over the forwards that ran. ``adaptive``: the
    target forward's base cost in draft forwards for ExpectedRate's step times (None: the whole tree)."""
    target, draft = pair
    prof = synthetic(lambda b, t, c: b * (1.0 + t), batches=(1, 8), tokens=(1, 32), contexts=(0, 10_000))
    depth = None
    if adaptive:  # a target forward worth `adaptive` draft forwards: the best depth follows the acceptance
        costly, cheap = synthetic(lambda b, t, c: adaptive + t), synthetic(lambda b, t, c: 1.0 + t)
        depth = ExpectedRate(seconds=mdsd.depth_seconds(costly, cheap, tree, 3, 10), prior=(2.0, 1.0))
    decoder = TreeDecoder(target, draft, tree, "rrs", 1.0, eos_token_id=[], depth=depth)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3], [5, 8, 9, 7, 9]]
    calls, handles = _record({"target": target, "draft": draft})
    try:
        timed = mdsd.costs.time_decode(decoder, prompts, 12, seed=7)
    finally:
        for h in handles:
            h.remove()
    n = max(o.steps for o in timed.outputs)  # the warm-up decodes as long, from the same seed
    steps = _steps(calls)
    assert len(steps) == 2 * n + 1  # the warm-up, the timed run and the one-token run
    ran = steps[n : 2 * n][1:]  # the timed run, after its first step
    schedule = timed.schedule
    assert len(ran) == len(schedule) == timed.steps
    replayed = 0.0
    for (draft_calls, (rows, tokens, slots)), (rows_s, context, depth_s) in zip(ran, schedule, strict=True):
        expected_draft, expected_target = mdsd.costs.step_forwards(truncated_plan(tree, depth_s))
        # the draft's first forward reads its pending block: the final token, plus the last accepted node in
        # a row where the draft never forwarded it (step_forwards counts 2, the wider case)
        assert draft_calls[0][0] == rows_s and draft_calls[0][1] in (1, expected_draft[0])
        assert draft_calls[1:] == [(rows_s, n) for n in expected_draft[1:]]
        assert (rows, tokens) == (rows_s, expected_target)
        if isinstance(tree, Tree):
            assert slots == context
        modelled = [(rows_s, n) for n in expected_draft]  # the replay's draft forwards (first one 2 wide)
        replayed += sum(r * (1 + n) for r, n in modelled) + rows * (1 + tokens)
    assert mdsd.costs.replay_seconds(prof, prof, tree, timed) == pytest.approx(replayed, rel=1e-12)
    if adaptive:
        assert len({d for o in timed.outputs for d in o.depth_per_step}) > 1  # the depth did change
    if adaptive == 10.0:  # and rows of one step drafted different depths (the deepest row's plan ran)
        assert any(len({o.depth_per_step[s] for o in timed.outputs if o.steps > s}) > 1 for s in range(12))


def test_time_decode_counts_the_steps_after_the_first(pair):
    target, draft = pair
    decoder = TreeDecoder(target, draft, Tree.kary([2, 1]), "spechub", 0.8, eos_token_id=[])
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
    timed = mdsd.costs.time_decode(decoder, prompts, 10, seed=3)
    assert (
        timed.tokens
        == sum(sum(o.tokens_per_step[1:]) for o in timed.outputs)
        == 3 * 10 - sum(o.tokens_per_step[0] for o in timed.outputs)
    )
    assert timed.steps == max(o.steps for o in timed.outputs) - 1
    assert timed.seconds > 0 and timed.prompt_lengths == [3, 6, 1]
    # the premise: from one seed, the one-token decode makes the same first step as the long one
    one = decoder.generate_batch(prompts, 1, torch.Generator().manual_seed(3))
    assert [o.tokens[0].item() for o in one] == [o.tokens[0].item() for o in timed.outputs]


# ---- the overhead fit -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def overhead_profiles():
    grid = dict(batches=(1, 2), tokens=(1, 4), contexts=(0, 100))
    return synthetic(lambda b, t, c: 0.01 * b * t, **grid), synthetic(lambda b, t, c: 0.002 * b * t, **grid)


def test_measure_overhead_recovers_a_known_overhead(pair, overhead_profiles, monkeypatch):
    """With decode times made of the profiles' forwards plus a known overhead, the fit returns it."""
    truth = Overhead(per_step=0.003, per_row_node=4e-4)
    real = mdsd.costs.runs.time_decode

    def synthetic_time(decoder, prompts, max_new_tokens, seed):
        timed = real(decoder, prompts, max_new_tokens, seed)
        seconds = mdsd.costs.replay_seconds(*overhead_profiles, decoder.tree, timed, truth)
        return dataclasses.replace(timed, seconds=seconds)

    monkeypatch.setattr(mdsd.costs.runs, "time_decode", synthetic_time)
    trees = [Tree.chain(2), Tree.kary([2])]
    fit = mdsd.costs.measure_overhead(
        *pair, *overhead_profiles, trees, [1, 2], "rrs", 0.7, context=6, max_new_tokens=5, progress=False
    )
    assert fit.per_step == pytest.approx(truth.per_step, rel=1e-9)
    assert fit.per_row_node == pytest.approx(truth.per_row_node, rel=1e-9)
    assert fit.rms_relative_error == pytest.approx(0.0, abs=1e-9)
    assert (fit.verifier, fit.temperature, fit.runs) == ("rrs", 0.7, 4)


def test_measure_overhead_on_real_timings_and_bad_arguments(pair, overhead_profiles):
    fit = mdsd.costs.measure_overhead(
        *pair,
        *overhead_profiles,
        [Tree.chain(1)],
        [1, 2],
        "rrs",
        1.0,
        context=4,
        max_new_tokens=3,
        progress=False,
    )
    assert 0 <= fit.per_step < math.inf and 0 <= fit.per_row_node < math.inf and fit.runs == 2
    assert math.isfinite(fit.rms_relative_error)
    with pytest.raises(ValueError, match="two"):
        mdsd.costs.measure_overhead(
            *pair, *overhead_profiles, [Tree.chain(1)], [1], "rrs", 1.0, context=4, progress=False
        )
    with pytest.raises(ValueError, match="max_new_tokens"):
        mdsd.costs.measure_overhead(
            *pair, *overhead_profiles, [Tree.chain(1)], [1, 2], "rrs", 1.0, context=4, max_new_tokens=1
        )
    with pytest.raises(ValueError, match="context=200"):  # checked before any decoding
        mdsd.costs.measure_overhead(
            *pair, *overhead_profiles, [Tree.chain(1)], [1, 2], "rrs", 1.0, context=200
        )
    with pytest.raises(ValueError, match="batch=3"):
        mdsd.costs.measure_overhead(*pair, *overhead_profiles, [Tree.chain(1)], [1, 3], "rrs", 1.0, context=4)


# ---- the experiment -------------------------------------------------------------------------------


def test_cost_model_quick_end_to_end(tmp_path):
    argv = sys.argv
    sys.argv = ["cost_model", "--quick", "--output-dir", str(tmp_path)]
    try:
        runpy.run_path(str(EXPERIMENTS / "cost_model.py"), run_name="__main__")
    finally:
        sys.argv = argv
    payload = json.loads((tmp_path / "cost_model.json").read_text())
    meta, rows = payload["metadata"], payload["rows"]
    assert meta["config"]["quick"] is True and meta["seed"] == meta["config"]["seed"] == 0
    assert meta["config"]["batches"] == [1, 4, 16] and meta["versions"]["torch"]
    assert (tmp_path / "cost_model.csv").read_text().count("\n") == len(rows) + 1
    assert len(rows) == 3 * (1 + 2)  # per B: autoregressive, two trees with one verifier
    assert meta["models"]["target"]["class"] == "Qwen2ForCausalLM"
    profiles = [CostProfile.load(tmp_path / payload["profiles"][who]) for who in ("target", "draft")]
    assert profiles[0].model == meta["models"]["target"]
    assert profiles[0].batches == (1, 2, 4, 16)  # the runs' batches and the overhead fit's (1, 2)
    # the numbers are the API's: one row's prediction recomputed from the saved profiles and overhead
    row = next(r for r in rows if (r["tree"], r["batch"]) == ("binary:2", 4))
    overhead = Overhead(**payload["overheads"]["rrs"])
    pred = mdsd.predict(
        *profiles,
        Tree.kary([2, 2]),
        None,
        4,
        row["mean_context"],
        tokens_per_step=row["tokens_per_step"],
        overhead=overhead,
    )
    assert row["predicted_tokens_per_second"] == pytest.approx(pred.tokens_per_second, rel=1e-12)
    assert row["predicted_speedup"] == pytest.approx(pred.speedup, rel=1e-12)
    for r in rows:
        assert r["seconds"] > 0 and r["replay_seconds"] > 0 and 1 <= r["tokens_per_step"] <= 3
    assert (tmp_path / "cost_model.png").stat().st_size > 1000
    assert "Mean absolute error" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize(
    "tree",
    [Tree.kary([2, 2]), Tree((0, 0, 1, 1, 3, 2, 5)), DynamicTree(depth=3, k=2, expand=2, budget=4)],
    ids=str,
)
def test_static_step_forwards_are_the_fast_paths(pair, tree, monkeypatch):
    """On the fast path every step runs the forwards step_forwards(static=True) names: the draft reads its
    whole pending block (depth + 1 tokens), then the expanded nodes; the target the root and its nodes."""
    from mdsd.tree.static import StaticLM

    target, draft = pair
    calls, forward = [], StaticLM.forward

    def record(self, ids, *args, **kwargs):
        calls.append(("target" if self.model is target else "draft", ids.shape[0], ids.shape[1], 0))
        return forward(self, ids, *args, **kwargs)

    monkeypatch.setattr(StaticLM, "forward", record)
    decoder = TreeDecoder(target, draft, tree, "rrs", 1.0, eos_token_id=[], compile="none")
    decoder.generate_batch([[3, 1, 4, 1, 5], [9, 2]], 24, torch.Generator().manual_seed(0))
    steps = _steps(calls)[1:]  # after the first step, which reads the prompts
    expected_draft, expected_target = mdsd.costs.step_forwards(tree, static=True)
    assert len(steps) >= 3
    for draft_calls, (rows, tokens, _) in steps:
        assert draft_calls == [(2, n) for n in expected_draft] and (rows, tokens) == (2, expected_target)


def test_step_forwards_do_not_draft_retrieved_chains():
    """Regression: a retrieved chain's nodes were counted as draft forwards of one token per depth, and a
    source alone (no draft model) as a draft forward of two tokens."""
    from mdsd.tree.plan import static_plan, with_retrieval

    mixed = with_retrieval(static_plan(Tree.kary([2, 2])), 2, 8)  # the model's tree, 2 chains of 8
    assert mdsd.costs.step_forwards(mixed) == ([2, 2], 7 + 16)
    assert mdsd.costs.step_forwards(with_retrieval(None, 1, 8)) == ([], 9)


def test_a_drafters_cost_ratio_is_read_by_its_shape(tmp_path):
    """The cost of a small drafter (a feature head) comes from the row of its width and depth (of its MLP
    width) with the smallest draft vocabulary that holds its own, the measured ratio before the predicted
    one; none where no such row exists; the same from the drafter, its config or its saved folder."""
    from mdsd.costs import cost_ratio, drafter_config
    from mdsd.drafters.head import FeatureHead
    from mdsd.drafters.small import SmallDrafter
    from mdsd.hf.tiny import tiny_pair

    target, draft = tiny_pair(0)
    drafter = SmallDrafter.fresh(target, torch.arange(40), 16, 2, 4, 2, 24, seed=1)  # M = 40
    table = {
        f"small:16:2:{m}": {"measured_ratio": None, "predicted_ratio": r}
        for m, r in ((32, 0.1), (64, 0.2), (128, 0.3))
    } | {"small:16:3:64": {"predicted_ratio": 0.9}, "draft": {"measured_ratio": 0.8, "predicted_ratio": 0.7}}
    drafter.save(tmp_path / "small")
    for form in (drafter, drafter.small_config, drafter_config(tmp_path / "small")):
        assert cost_ratio(table, form) == (0.2, "small:16:2:64")
    assert cost_ratio(table, draft) == (0.8, "draft")
    assert drafter_config(tmp_path) is None and cost_ratio(table, None) == (0.8, "draft")
    assert cost_ratio({"small:16:2:32": table["small:16:2:32"]}, drafter) == (None, None)
    head = FeatureHead.from_target(target, torch.arange(24))  # M = 24
    width = head.head_config.layer.intermediate_size
    table = {
        f"head:{width}:{m}": {"measured_ratio": r, "predicted_ratio": 1.0}
        for m, r in ((16, 0.05), (32, 0.06))
    }
    head.save(tmp_path / "head")
    for form in (head, drafter_config(tmp_path / "head")):
        assert cost_ratio(table, form) == (0.06, f"head:{width}:32")
    wider = table | {f"head:{width + 1}:24": {"measured_ratio": 0.5}}
    assert cost_ratio(wider, head) == (0.06, f"head:{width}:32")
    fused = FeatureHead.from_target(target, torch.arange(24), feature_layers=(0, 1))  # reads two layers
    assert cost_ratio(table, fused) == (None, None)  # not the final-state head's row
    table |= {f"fused2:{width}:32": {"measured_ratio": None, "predicted_ratio": 0.07}}
    fused.save(tmp_path / "fused")
    for form in (fused, drafter_config(tmp_path / "fused")):
        assert cost_ratio(table, form) == (0.07, f"fused2:{width}:32")
    assert cost_ratio(table, head) == (0.06, f"head:{width}:32")
