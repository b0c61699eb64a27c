"""The decoding loop is shaped for an accelerator: few host synchronisations, no tensor made off-device.

Host synchronisations are counted by patching every way a tensor's value reaches the host (``item``,
``tolist``, ``bool``/``int``/``float``/``index`` conversions, ``cpu``, ``nonzero``; ``numpy`` is not one:
it takes only host tensors, so a device tensor reaches it through a counted ``cpu``): a decode at batch 1
may use at most 4 per step on the eager path, and 1 per step on the fast path (``compile``), whatever the
verifier and tree. A second check records every tensor
created by a factory call made from mdsd's own code and requires an explicit device for each (so nothing is
silently created on the CPU when the models live elsewhere).
"""

import contextlib
import os
import sys

import pytest
import torch
from tiny_lms import perturbed, tiny_lm
from torch.overrides import TorchFunctionMode

import mdsd
from mdsd import DynamicTree, Tree, TreeDecoder
from mdsd.verifiers import supports
from mdsd.verifiers.registry import path_rule, verifier_names

# the node verifiers whose kernels never read the device, and the decoder's path rules
SYNC_FREE = [n for n in mdsd.VERIFIERS if mdsd.verifiers.verifier_class(n).sync_free] + [
    n for n in verifier_names() if path_rule(n) is not None
]

MAX_SYNCS_PER_STEP = 4
_SYNCING = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "nonzero")
_MDSD = os.path.dirname(mdsd.__file__)


@contextlib.contextmanager
def count_syncs(counter):
    originals = {name: getattr(torch.Tensor, name) for name in _SYNCING}

    def wrap(name, fn):
        def counted(self, *args, **kwargs):
            counter[name] = counter.get(name, 0) + 1
            return fn(self, *args, **kwargs)

        return counted

    for name, fn in originals.items():
        setattr(torch.Tensor, name, wrap(name, fn))
    nonzero = torch.nonzero
    torch.nonzero = wrap("torch.nonzero", nonzero)
    try:
        yield counter
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
        torch.nonzero = nonzero


def _trees(name):
    """Every tree shape the verifier can verify: a chain, binary, mixed widths, a dynamic tree."""
    if path_rule(name) is not None:  # whole-tree rules: block on chains, traversal on static trees
        return [Tree.chain(3)] if name == "block" else [Tree.kary([2, 2, 2]), Tree((0, 0, 0, 1, 1, 2))]
    wide = [
        Tree.kary([2, 2, 2]),
        Tree((0, 0, 1, 1, 2)),
        Tree((0, 0, 0, 1, 1, 2)),
        DynamicTree(3, 2, 2, budget=5),
    ]
    widths = [{2}, {2}, {2, 3}, {2}]
    return [Tree.chain(3)] * supports(name, 1) + [
        tree for tree, ks in zip(wide, widths, strict=True) if all(supports(name, k) for k in ks)
    ]


@pytest.fixture(scope="module")
def models():
    target = tiny_lm(0, vocab=16)
    return target, perturbed(target, 0.5, seed=1)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", SYNC_FREE)
def test_at_most_four_host_syncs_per_step(models, name, temperature):
    target, draft = models
    for tree in _trees(name):
        dec = TreeDecoder(target, draft, tree, verifier=name, temperature=temperature)
        prompt = torch.tensor([[3, 1, 4, 1, 5]])
        generator = torch.Generator().manual_seed(0)
        dec.generate(prompt, 2, generator)  # warm-up: lazy imports and caches
        counter = {}
        with count_syncs(counter):
            out = dec.generate(prompt, 24, generator)
        # generate() itself checks its input once (a few syncs outside the loop)
        loop = sum(counter.values())
        assert loop <= MAX_SYNCS_PER_STEP * out.steps + 8, (tree, counter, out.steps)


def _fast_reads(dec, prompts) -> tuple[int, int, dict]:
    """Host reads of one fast-path decode of ``prompts`` (after a warm-up that captures each plan's step),
    the input checks of generate_batch left out; its steps; the reads by kind."""
    generator = torch.Generator().manual_seed(0)
    dec.generate_batch(prompts, 4, generator)
    checks, counter = {}, {}
    with count_syncs(checks):
        dec._check_inputs(prompts, 48)
    with count_syncs(counter):
        outs = dec.generate_batch(prompts, 48, generator)
    return sum(counter.values()) - sum(checks.values()), max(out.steps for out in outs), counter


@pytest.mark.parametrize("name", SYNC_FREE)
def test_the_fast_path_reads_the_host_once_per_step(models, name):
    """One read per step (the packed summary) on the fast path, for every tree the verifier runs on,
    besides the input checks of generate_batch (counted apart)."""
    target, draft = models
    for tree in _trees(name):
        dec = TreeDecoder(target, draft, tree, verifier=name, temperature=0.8, compile="none")
        reads, steps, counter = _fast_reads(dec, [[3, 1, 4, 1, 5], [9, 2]])
        assert reads <= steps, (tree, counter, steps)


def test_prompt_lookup_inside_the_fast_step_reads_nothing_more(models, monkeypatch):
    """With the source's proposals made inside the step (``propose_table``), a step still reads the host
    once, and nothing is proposed or observed on the host."""
    from mdsd.sources import PromptLookup

    def refuse(*args):
        raise AssertionError("the host proposed or observed")

    monkeypatch.setattr(PromptLookup, "propose", refuse)
    monkeypatch.setattr(PromptLookup, "observe", refuse)
    target, draft = models
    for tree, model in ((Tree.kary([2, 2]), draft), (None, None)):
        dec = TreeDecoder(
            target,
            model,
            tree,
            "rrs",
            temperature=0.8,
            source=PromptLookup(),
            retrieve=(2, 3),
            compile="none",
            propose_inside=True,  # the CPU's default proposes on the host
        )
        reads, steps, counter = _fast_reads(dec, [[3, 1, 4, 1, 3, 1], [9, 2, 9, 2]])
        assert reads <= steps, (tree, counter, steps)


def test_source_first_reads_the_host_once_per_step(models):
    """SourceFirst chooses each step's plan from the host's proposals: still one read per step, with the
    chains-only steps that leave the draft behind and the drafting steps that read its whole buffer."""
    from mdsd.sources import PromptLookup
    from mdsd.tree.adaptive import SourceFirst

    target, draft = models
    dec = TreeDecoder(
        target,
        draft,
        Tree.kary([2, 1]),
        "rrs",
        temperature=0.8,
        source=PromptLookup(),
        retrieve=(1, 3),
        depth=SourceFirst(),
        compile="none",
    )
    reads, steps, counter = _fast_reads(dec, [[3, 1, 4, 3, 1, 4, 3], [2, 5, 2, 5, 2]])
    assert reads <= steps, (counter, steps)
    assert {key.depth for key in dec._captured._steps} == {0, 2}  # both kinds of step ran


class _DeviceAudit(TorchFunctionMode):
    """Records factory calls from mdsd's own files that leave the device to the default."""

    FACTORIES = {
        torch.zeros,
        torch.ones,
        torch.empty,
        torch.full,
        torch.arange,
        torch.eye,
        torch.rand,
        torch.randn,
        torch.tensor,
        torch.as_tensor,
        torch.linspace,
    }

    def __init__(self):
        super().__init__()
        self.missing = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FACTORIES and kwargs.get("device") is None:
            caller = sys._getframe(1)
            while caller is not None and caller.f_code.co_filename.startswith(
                os.path.dirname(torch.__file__)
            ):
                caller = caller.f_back
            if caller is not None and caller.f_code.co_filename.startswith(_MDSD):
                self.missing.append(f"{func.__name__} at {caller.f_code.co_filename}:{caller.f_lineno}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", ["rrs", "spechub", "kseq", "greedy", "optimal", "block", "traversal"])
def test_every_tensor_made_in_the_loop_names_its_device(models, name):
    target, draft = models
    trees = {"spechub": Tree.kary([2, 2]), "block": Tree.chain(3), "traversal": Tree((0, 0, 0, 1, 1, 2))}
    tree = trees.get(name, DynamicTree(3, 3, 2, budget=6))
    dec = TreeDecoder(target, draft, tree, verifier=name, temperature=0.7)
    generator = torch.Generator().manual_seed(0)
    audit = _DeviceAudit()
    with audit:
        dec.generate_batch([[3, 1, 4], [1, 5]], 12, generator)
    assert not audit.missing, audit.missing[:10]


def test_the_fast_step_with_prompt_lookup_names_its_devices(models):
    from mdsd.sources import PromptLookup

    target, draft = models
    dec = TreeDecoder(
        target,
        draft,
        Tree.kary([2]),
        "rrs",
        temperature=0.7,
        source=PromptLookup(),
        compile="none",
        propose_inside=True,
    )
    audit = _DeviceAudit()
    with audit:
        dec.generate_batch([[3, 1, 4, 3, 1], [1, 5]], 12, torch.Generator().manual_seed(0))
    assert not audit.missing, audit.missing[:10]
