"""The fast path (``TreeDecoder(compile=...)``): the same answers as the eager reference path.

* Greedy decoding gives the same tokens on both paths for every tree family (chain, k-ary, mixed widths,
  Sequoia, dynamic, retrieved chains beside the model's children, retrieval alone, adaptive depths,
  autoregressive), on ragged batches with EOS tokens.
* The step traces with ``torch.compile(fullgraph=True)`` (the cheap "eager" backend) for every
  verifier with device kernels, the sequence-level rules, a dynamic tree and a source, and the traced step
  gives exactly the tokens of the uncompiled static step under the same generator.
* What the fast path cannot run is refused with a message that names the eager path.
The target's law on the fast path is tested in tests/tree/test_lossless.py, its tree attention in
test_attention.py and its host synchronisations in test_syncs.py.
"""

import numpy as np
import pytest
import torch
from tiny_lms import perturbed, tiny_lm
from transformers import GPT2Config, GPT2LMHeadModel

from mdsd import VERIFIERS, DynamicTree, Tree, TreeDecoder
from mdsd.sources import Priority, PromptLookup
from mdsd.tree.adaptive import GrowShrink, SourceFirst
from mdsd.tree.compiled import CapturedRunner
from mdsd.verifiers import OptimalVerifier, supports, verifier_class

PROMPTS = [[3, 1, 4, 3, 1, 4, 3], [7], [2, 2, 9, 2, 5, 11]]
EOS = [6]  # the target's greedy continuation of the last prompt holds it: that row stops early


@pytest.fixture(scope="module")
def pair():
    target = tiny_lm(0, vocab=16)
    return target, perturbed(target, 0.5, seed=1)


def _decode(dec, new=14, seed=0):
    outs = dec.generate_batch(PROMPTS, new, torch.Generator().manual_seed(seed))
    return [(o.tokens.tolist(), o.tokens_per_step, o.accepted_per_step, o.stopped_by_eos) for o in outs]


FAMILIES = {
    "chain": dict(tree=Tree.chain(4), verifier="single"),
    "binary": dict(tree=Tree.kary([2, 2, 2]), verifier="rrsw"),
    "mixed widths": dict(tree=Tree((0, 0, 0, 1, 1, 2)), verifier="rrs"),
    "sequoia": dict(tree=Tree.sequoia([0.6, 0.2, 0.1], 7, 4), verifier="kseq"),
    "dynamic": dict(tree=DynamicTree(depth=3, k=2, expand=2, budget=4), verifier="spechub"),
    "source": dict(tree=Tree.kary([2, 2]), verifier="greedy", source=PromptLookup(), retrieve=(2, 3)),
    "retrieval alone": dict(tree=None, verifier="rrs", source=PromptLookup(), draft=None),
    "adaptive depth": dict(tree=Tree.kary([2, 2, 1]), verifier="rrs", depth=GrowShrink(initial=1)),
    "source first": dict(
        tree=Tree.kary([2, 2]), verifier="rrs", source=PromptLookup(), retrieve=(2, 3), depth=SourceFirst()
    ),
    "autoregressive": dict(tree=None, verifier="rrs", draft=None),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_decoding_gives_the_same_tokens_on_both_paths(pair, family):
    target, draft = pair
    spec = dict(FAMILIES[family])
    tree, model = spec.pop("tree"), spec.pop("draft", draft)
    eager = TreeDecoder(target, model, tree, temperature=0.0, eos_token_id=EOS, **spec)
    fast = TreeDecoder(target, model, tree, temperature=0.0, eos_token_id=EOS, compile="none", **spec)
    expected = _decode(eager)
    assert expected == _decode(fast)
    assert any(stop for *_, stop in expected)  # an EOS ends a row early: masked rows are exercised
    assert expected == _decode(fast)  # a second decode reuses the caches and the captured steps


def _traced_cases():
    cases = []
    for name in VERIFIERS:
        if not verifier_class(name).sync_free:
            continue
        tree = (
            Tree((0, 0, 0, 1, 1, 2))
            if supports(name, 3)
            else Tree.kary([2, 1])
            if supports(name, 2)
            else None
        )
        cases.append((name, tree or Tree.chain(2)))
    cases += [
        ("block", Tree.chain(3)),
        ("traversal", Tree.kary([2, 2])),
        ("rrsw", DynamicTree(depth=3, k=2, expand=2, budget=4)),
    ]
    return cases


@pytest.mark.parametrize(("name", "tree"), _traced_cases(), ids=str)
def test_the_step_traces_with_fullgraph_and_gives_the_static_steps_tokens(pair, name, tree):
    target, draft = pair
    static = TreeDecoder(
        target, draft, tree, verifier=name, temperature=0.8, eos_token_id=EOS, compile="none"
    )
    traced = TreeDecoder(
        target, draft, tree, verifier=name, temperature=0.8, eos_token_id=EOS, compile="eager"
    )
    assert _decode(static, seed=3) == _decode(traced, seed=3)


def test_a_source_and_autoregressive_decoding_trace_too(pair):
    target, draft = pair
    for spec in (FAMILIES["source"], FAMILIES["autoregressive"]):
        spec = dict(spec)
        tree, model = spec.pop("tree"), spec.pop("draft", draft)
        static = TreeDecoder(target, model, tree, temperature=0.8, eos_token_id=EOS, compile="none", **spec)
        traced = TreeDecoder(target, model, tree, temperature=0.8, eos_token_id=EOS, compile="eager", **spec)
        assert _decode(static, seed=5) == _decode(traced, seed=5)


def test_source_first_steps_trace_and_give_the_static_steps_tokens(pair):
    """SourceFirst switches between the plan of the source's chains alone (with the draft's catch-up
    forward) and the whole tree: both steps trace, and give the uncompiled static steps' tokens."""
    target, draft = pair
    prompts = [[3, 1, 4, 3, 1, 4, 3], [2, 5, 2, 5, 2, 5]]
    decodes = []
    for compile in ("none", "eager"):
        dec = TreeDecoder(
            target,
            draft,
            Tree.kary([2, 2]),
            verifier="rrs",
            temperature=0.8,
            source=PromptLookup(),
            retrieve=(2, 3),
            depth=SourceFirst(),
            compile=compile,
        )
        outs = dec.generate_batch(prompts, 20, torch.Generator().manual_seed(2))
        decodes.append([(o.tokens.tolist(), o.depth_per_step, o.accepted_per_step) for o in outs])
    assert decodes[0] == decodes[1]
    assert {d for _, depths, _ in decodes[0] for d in depths} == {0, 2}


SOURCE_FIRST_PROMPTS = [[3, 1, 4, 3, 1, 4, 3, 1, 4], [2, 5, 2, 5, 2, 5, 2, 5]]  # lookup proposes early


def _source_first_decodes(pair, prompts, temperature, policy, seed, **options):
    """{False: the eager path's outputs, "none": the fast path's} of a k-ary [2, 1] tree with prompt lookup's
    chains (1 × 4) under the depth policy ``policy``, 40 new tokens per prompt."""
    target, draft = pair
    outs = {}
    for path in (False, "none"):
        dec = TreeDecoder(
            target,
            draft,
            Tree.kary([2, 1]),
            verifier="rrs",
            temperature=temperature,
            source=PromptLookup(),
            retrieve=(1, 4),
            depth=policy,
            compile=path,
            **options,
        )
        outs[path] = dec.generate_batch(prompts, 40, torch.Generator().manual_seed(seed))
    return outs


@pytest.mark.parametrize(("temperature", "eos"), [(0.0, EOS), (0.8, None)])
def test_source_first_backs_off_alike_on_both_paths(pair, temperature, eos):
    """SourceFirst(backoff=2): the same tokens, depths and acceptances on the eager and the fast path. At
    T = 0 a row stops at EOS after one step (the eager path drops it, the fast path keeps it masked: the
    policy's state must not see it); at T = 0.8 steps of chains alone are rejected whole and the policy
    holds the chains back for the next two steps. (Sampling takes the same uniforms on both paths only while
    they hold the same rows: the sampled case compares the steps before the first row ends.)"""
    prompts = SOURCE_FIRST_PROMPTS + ([PROMPTS[2]] if eos else [])
    outs = _source_first_decodes(pair, prompts, temperature, SourceFirst(backoff=2), seed=8, eos_token_id=eos)
    # the steps while both paths hold every row
    n = min(o.steps for o in outs[False]) if temperature else None

    def head(o):
        return o.tokens[: sum(o.tokens_per_step[:n])].tolist(), o.depth_per_step[:n], o.accepted_per_step[:n]

    assert [head(o) for o in outs[False]] == [head(o) for o in outs["none"]]
    if eos:
        assert outs[False][2].stopped_by_eos and outs[False][2].steps == 1
        return
    held, contexts = 0, [list(p) for p in prompts]  # steps where every row's source proposed, yet drafted
    for i in range(n):
        proposed = all(
            max(map(len, (c.tokens for c in PromptLookup().propose(x, 1, 4))), default=0) for x in contexts
        )
        held += proposed and outs[False][0].depth_per_step[i] > 0
        for x, o in zip(contexts, outs[False], strict=True):
            x += o.tokens[sum(o.tokens_per_step[:i]) : sum(o.tokens_per_step[: i + 1])].tolist()
    assert held >= 2


@pytest.mark.parametrize("lag", [1, 2, 4])
@pytest.mark.parametrize("temperature", [0.0, 1e-3, 0.8])
def test_chains_only_steps_leave_the_draft_behind_until_its_buffer_is_full(
    pair, lag, temperature, monkeypatch
):
    """A SourceFirst step of the source's chains alone runs no draft forward; the fast path's draft reads
    the tokens it missed at its next drafting step (the whole buffer of LAG blocks where they exceed one
    block), or catches up in a chains-only step that would overflow the buffer (LAG = 1: every time). The
    same tokens, depths and acceptances as the eager path, which always leaves the draft behind. Drafting
    steps that read the whole buffer are counted: they come right after chains-only steps (a drafting step
    leaves at most one block)."""
    monkeypatch.setattr(CapturedRunner, "LAG", lag)
    outs = _source_first_decodes(pair, SOURCE_FIRST_PROMPTS, temperature, SourceFirst(), seed=6)
    wide = 0  # drafting steps that read the whole buffer
    for eager, fast in zip(outs[False], outs["none"], strict=True):
        assert (eager.tokens.tolist(), eager.depth_per_step, eager.accepted_per_step) == (
            fast.tokens.tolist(),
            fast.depth_per_step,
            fast.accepted_per_step,
        )
        chains_only = eager.depth_per_step.count(0)
        assert chains_only >= 3 and eager.draft_forwards == 2 * (eager.steps - chains_only)
        assert eager.draft_buffer_reads == 0  # it reads what is pending, whatever its width
        extra = fast.draft_forwards - eager.draft_forwards  # catch-ups, and the prompt's read at step 1
        depths = fast.depth_per_step
        after = sum(a == 0 < b for a, b in zip(depths, depths[1:], strict=False))  # drafting after chains
        assert fast.draft_buffer_reads <= after
        if lag == 1:
            assert extra == chains_only and fast.draft_buffer_reads == 0  # one block is the whole buffer
        else:
            assert extra < chains_only
        wide += fast.draft_buffer_reads
    if (lag, temperature) == (4, 0.8):  # this sample drafts after chains-only steps that left over a block
        assert wide > 0


@pytest.mark.parametrize("family", ["source", "retrieval alone"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_prompt_lookup_inside_the_step_proposes_what_the_host_does(pair, family, temperature, monkeypatch):
    """PromptLookup.propose_table run inside the step, over the context buffer the step extends, drafts
    exactly what propose gives row by row on the host: the same tokens (sampled too, under one generator),
    steps and acceptances, traced or not, with an EOS ending a row early; the host never proposes."""
    target, draft = pair
    spec = dict(FAMILIES[family])
    tree, model = spec.pop("tree"), spec.pop("draft", draft)

    def decoder(compile, inside):  # the CPU's default is the host: proposals row by row
        return TreeDecoder(
            target,
            model,
            tree,
            temperature=temperature,
            eos_token_id=EOS,
            compile=compile,
            propose_inside=inside,
            **spec,
        )

    def decodes(dec):  # two seeds whose sampled decodes accept retrieved tokens in both families
        outs = [dec.generate_batch(PROMPTS, 20, torch.Generator().manual_seed(s)) for s in (1, 4)]
        return [(o.tokens.tolist(), o.accepted_per_step, o.retrieved_per_step) for out in outs for o in out]

    expected = decodes(decoder("none", False))
    assert sum(sum(r) for *_, r in expected) > 0  # retrieved proposals were accepted

    def refuse(*args):
        raise AssertionError("the host proposed")

    monkeypatch.setattr(PromptLookup, "propose", refuse)
    for compile in ("none", "eager"):  # decoding again refills the buffer from the prompts
        assert decodes(decoder(compile, True)) == expected


def test_a_source_proposes_inside_the_step_on_an_accelerator_from_table_rows_on(pair):
    target, draft = pair

    def fast(inside=None, compile="none"):
        return TreeDecoder(
            target, None, None, temperature=0.5, source=PromptLookup(), compile=compile, propose_inside=inside
        )._captured

    gpu, cpu, rows = torch.device("cuda"), torch.device("cpu"), CapturedRunner.TABLE_ROWS
    assert fast().proposes_inside_for(gpu, rows) and not fast().proposes_inside_for(gpu, rows - 1)
    fused = fast(compile="inductor")  # the table fused: it pays from fewer rows on
    assert CapturedRunner.FUSED_TABLE_ROWS < rows and not fast().proposes_inside_for(
        gpu, CapturedRunner.FUSED_TABLE_ROWS
    )
    assert fused.proposes_inside_for(gpu, CapturedRunner.FUSED_TABLE_ROWS)
    assert not fused.proposes_inside_for(gpu, CapturedRunner.FUSED_TABLE_ROWS - 1)
    assert not fused.proposes_inside_for(cpu, 4 * rows)
    assert not fast().proposes_inside_for(cpu, 4 * rows)
    assert fast(True).proposes_inside_for(cpu, 1)
    assert not fast(False).proposes_inside_for(gpu, 4 * rows)
    host = TreeDecoder(  # a source without propose_table proposes on the host
        target,
        draft,
        Tree.kary([2]),
        "rrs",
        temperature=0.5,
        source=Priority([PromptLookup()]),
        compile="none",
    )
    assert not host._captured.proposes_inside_for(gpu, 4 * rows)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"source": PromptLookup(), "propose_inside": 1}, TypeError, "propose_inside must be True, False"),
        ({"source": PromptLookup(), "propose_inside": True, "compile": False}, ValueError, "compile=False"),
        ({"source": Priority([PromptLookup()]), "propose_inside": True}, ValueError, "source Priority"),
    ],
)
def test_proposing_inside_the_step_is_refused_where_it_cannot_run(pair, kwargs, error, words):
    kwargs = {"compile": "none"} | kwargs
    with pytest.raises(error, match=words) as caught:
        TreeDecoder(pair[0], None, None, temperature=0.5, **kwargs)
    assert "propose_inside" in str(caught.value)


def test_a_context_buffer_that_misses_the_emitted_tokens_is_caught(pair, monkeypatch):
    """The comparison above can fail: a step that forgets to append what it emitted proposes from stale
    contexts."""
    from mdsd.tree import compiled

    target, _ = pair
    spec = dict(FAMILIES["retrieval alone"])
    tree, model = spec.pop("tree"), spec.pop("draft")

    def decoder(inside):
        return TreeDecoder(
            target,
            model,
            tree,
            temperature=0.0,
            eos_token_id=EOS,
            compile="none",
            propose_inside=inside,
            **spec,
        )

    expected = _decode(decoder(False), new=20)
    monkeypatch.setattr(compiled, "_extend", lambda *args: None)
    assert _decode(decoder(True), new=20) != expected


def test_a_broken_trace_is_caught(pair, monkeypatch):
    """The equality above can fail: a traced step that drops the last uniform's use shows."""
    import mdsd.tree.step as step

    target, draft = pair
    real = step.walk

    def off_by_one(*args):
        out = real(*args)
        if torch.compiler.is_compiling():
            out.emitted.add_(1).remainder_(16)
        return out

    static = TreeDecoder(target, draft, Tree.kary([2, 1]), verifier="rrs", temperature=0.8, compile="none")
    traced = TreeDecoder(target, draft, Tree.kary([2, 1]), verifier="rrs", temperature=0.8, compile="eager")
    expected = _decode(static, seed=3)
    monkeypatch.setattr(step, "walk", off_by_one)
    assert _decode(traced, seed=3) != expected


def test_rows_that_finish_stay_masked_and_do_not_grow_their_caches(pair):
    target, draft = pair
    dec = TreeDecoder(
        target, draft, Tree.chain(3), verifier="single", temperature=0.0, eos_token_id=EOS, compile="none"
    )
    outs = dec.generate_batch(PROMPTS, 30, torch.Generator().manual_seed(0))
    state = dec._captured._state
    lengths = state.target.length.tolist()
    for prompt, out, length in zip(PROMPTS, outs, lengths, strict=True):
        # committed: the prompt and every emitted token but the last (the next step's root), at most one
        # step's tokens more for a row that finished in the batch's last step
        assert len(prompt) + len(out.tokens) - 1 <= length <= len(prompt) + len(out.tokens) + 3
    assert np.ptp([o.steps for o in outs]) > 0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(verifier="rrs", tree=Tree.kary([2]), compile="cudagraph"), "CUDA"),
        (dict(verifier="rrs", tree=Tree.kary([2]), compile="inductor-cudagraph"), "CUDA"),
        (dict(verifier="rrs", tree=Tree.kary([2]), compile="turbo"), "compile must be"),
    ],
)
def test_what_the_fast_path_cannot_run_is_refused(pair, kwargs, words):
    target, draft = pair
    with pytest.raises(ValueError, match=words):
        TreeDecoder(target, draft, temperature=0.7, **kwargs)


def test_a_verifier_that_reads_values_back_is_refused_with_the_eager_path_named(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(verifier_class("rrsw"), "sync_free", False)
    with pytest.raises(ValueError, match="compile=False"):
        TreeDecoder(target, draft, Tree.kary([2]), verifier="rrsw", temperature=0.7, compile=True)


def test_the_without_replacement_flow_and_luce_rule_are_refused_and_the_fallback_runs(pair):
    """optimal:wor solves a flow within the flow size and the Luce rule beyond it, both on the host: the
    fast path refuses them (at construction, and at decoding when the verifiers were swapped), and runs
    the fallback's kernels."""
    target, draft = pair
    with pytest.raises(ValueError, match="reads values back.*compile=False"):
        TreeDecoder(target, draft, Tree.kary([2]), verifier="optimal:wor", temperature=0.7, compile="none")
    dec = TreeDecoder(target, draft, Tree.kary([2]), verifier="optimal", temperature=0.7, compile="none")
    dec.verifiers = {2: OptimalVerifier(2, law="wor", flow_tuples=0)}  # the Luce rule
    with pytest.raises(ValueError, match="reads values back"):
        dec.generate(torch.tensor([[1, 2]]), max_new_tokens=2, generator=torch.Generator().manual_seed(0))
    dec.verifiers = {2: OptimalVerifier(2, law="wor", flow_tuples=0, wor_rule="fallback")}
    out = dec.generate(torch.tensor([[1, 2]]), max_new_tokens=4, generator=torch.Generator().manual_seed(0))
    assert out.tokens.numel() == 4 or out.stopped_by_eos


def test_a_model_outside_the_supported_families_is_refused_with_the_eager_path_named():
    config = GPT2Config(vocab_size=16, n_embd=32, n_layer=1, n_head=2, bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(config).eval()
    with pytest.raises(ValueError, match="compile=False"):
        TreeDecoder(model, model, Tree.chain(2), verifier="single", compile="none")


def test_a_captured_graph_keeps_the_tensors_it_reads_alive(monkeypatch):
    """A CUDA graph reads its inputs at the addresses it recorded, so ``capture`` must keep the captured
    function (its default arguments and closure) alive: measure_profile rebinds its per-shape function each
    loop, and on an H200 the freed token ids were reused and a replay embedded garbage ids. The CPU has no
    graphs; a stand-in records the function and counts on nothing else holding it."""
    import contextlib
    import gc
    import weakref

    from mdsd.tree import compiled

    class Graph:
        def replay(self):
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, pool=None: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    refs, runs = [], []
    for t in (1, 2, 3):
        ids = torch.full((t,), t)

        def forward(ids=ids):
            return ids * 2

        refs.append(weakref.ref(ids))
        runs.append(compiled.capture(forward, "cudagraph"))
    del ids, forward
    gc.collect()
    assert all(r() is not None for r in refs)
    assert [run().tolist() for run in runs] == [[2], [4, 4], [6, 6, 6]]
    runs.clear()
    gc.collect()
    assert all(r() is None for r in refs)  # and the graph does not hold them longer than itself


def test_inductor_cudagraph_runs_the_compiled_step_once_then_records_it_and_replays(monkeypatch):
    """With "inductor-cudagraph" no kernel is compiled inside a capture: the first call runs the compiled
    step for real (a decoding step like any other) and records it; later calls only replay, returning the
    recorded output. The CPU has no graphs (a stand-in records and replays) and no inductor here (the
    "eager" backend stands in)."""
    import contextlib

    from mdsd.tree import compiled

    events = []

    class Graph:
        def replay(self):
            events.append("replay")

    @contextlib.contextmanager
    def recording(graph, pool=None):
        events.append("capture")
        yield

    compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile(fn, **{**kw, "backend": "eager"}))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", recording)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    counter = torch.zeros(1)

    def step():
        events.append("run")
        counter.add_(1)
        return counter * 10

    run = compiled.capture(step, "inductor-cudagraph")
    assert events == []  # capturing records nothing before the first call
    assert run().tolist() == [10.0]  # the first call is a real step
    assert events == ["run", "capture", "run"]  # (the stand-in graph runs what it records)
    recorded = run()
    assert events[3:] == ["replay"] and run() is recorded  # replays return the recorded output


def test_the_static_caches_tensors_share_no_memory(pair):
    """torch.compile writes a cache in place only when no other tensor the step holds aliases it (else it
    copies the whole buffer back at every write: measured on inductor's code, 16 such copies a step when
    keys and values were kept as views of one buffer). No tensor attribute of a StaticLM is a view of
    another."""
    from mdsd.tree.static import StaticLM

    target, _ = pair
    lm = StaticLM(target, 3, 64)
    tensors = [t for t in vars(lm).values() if isinstance(t, torch.Tensor)]
    assert len(tensors) >= 3
    storages = [t.untyped_storage().data_ptr() for t in tensors]
    assert len(set(storages)) == len(storages)


def test_a_new_state_captures_its_steps_into_a_new_pool(pair, monkeypatch):
    """The steps of one state share one memory pool; a decode that needs a new state (here a larger
    capacity) drops the old steps and takes a new pool. CUDA's allocator refuses to capture into a pool
    whose graphs are all gone while its memory is still held (an internal assert on an H200, when the pool
    was kept). The CPU has no graphs: stand-ins record the pool each capture is given and run the step."""
    from mdsd.tree import compiled

    target, draft = pair
    pools, made = [], []

    def new_pool(backend):
        made.append(object())
        return made[-1]

    def record(fn, pool):
        pools.append(pool)
        return fn

    def decoder():
        return TreeDecoder(target, draft, Tree.kary([2, 2]), "rrsw", temperature=0.8, compile="none")

    reference = _decode(decoder())
    monkeypatch.setattr(compiled, "graph_pool", new_pool)
    monkeypatch.setattr(compiled, "_graph", record)
    dec = decoder()
    dec._captured.backend = "cudagraph"
    assert _decode(dec) == reference  # the stand-in graphs run the same steps
    first = len(pools)
    assert first > 0 and set(pools) == {made[0]}  # one pool for the steps of one state
    assert _decode(dec) == reference and len(pools) == first  # the same state: its steps are reused
    dec.generate_batch(PROMPTS, 200)  # a larger capacity: a new state
    assert len(made) == 2 and set(pools[first:]) == {made[1]}
