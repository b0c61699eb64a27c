"""Every method on the same prompts, seeds and budget, measured the same way: the comparison table.

A method is HF autoregressive sampling, HF assisted generation (:mod:`mdsd.hf.baselines`) or an mdsd
configuration (:class:`TreeMethod`: tree, verifier, optional depth policy). :func:`compare` decodes prompt i
with seed ``seed + i`` under one :func:`~mdsd.hf.baselines.count_forwards` (target, draft) and one wall clock,
whatever the method, and reports per method

* **tokens per target forward**, the ratio of sums over prompts :math:`R = \\sum_i t_i / \\sum_i f_i`
  (t_i tokens, f_i hooked target forwards of prompt i), with a 95% interval over prompts
  (:func:`ratio_interval`);
* **tokens per step**, Σ tokens / Σ steps by each method's own count (TreeDecoder's steps; for HF the
  batches of tokens ``generate`` hands its streamer): equal to the former exactly when the method's own
  accounting agrees with the hook;
* **tokens/s** (Σ tokens / Σ seconds), and the target and draft forward totals.

An mdsd method on the fast path (``TreeMethod(compile=...)``) replays captured steps, which call no model
from Python, so the hook cannot see its forwards: its counts are the decoder's own (one target forward per
step, ``draft_forwards``), which equal the hook's on the eager path (tested). So are the counts of a method
whose draft is a feature head (:class:`mdsd.drafters.FeatureHead`): the target hands it features through
its inner model, which the hook on the top-level module does not see.

>>> ratio, (low, high) = ratio_interval([6, 9], [3, 3])
>>> ratio, round(low, 3), round(high, 3)
(2.5, -3.853, 8.853)
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mdsd.hf.baselines import (
    ASSISTANT_OPTIONS,
    BaselineOutput,
    _assistant_options,
    _Checked,
    _generate,
    _synchronize,
    count_forwards,
)
from mdsd.token_tree import Tree
from mdsd.tree.adaptive import DepthPolicy
from mdsd.tree.decoder import TreeDecodeOutput, TreeDecoder
from mdsd.tree.plan import DynamicTree

__all__ = [
    "HFAutoregressive",
    "HFAssisted",
    "TreeMethod",
    "BASELINES",
    "PromptRun",
    "ComparisonRow",
    "Comparison",
    "compare",
    "ratio_interval",
    "INTERVAL_METHOD",
]

INTERVAL_METHOD = "ratio-estimator t-interval over prompts (delta method, n - 1 degrees of freedom)"

Decode = Callable[[list[int], int], "BaselineOutput | TreeDecodeOutput"]  # (prompt ids, seed) -> output


@dataclass(frozen=True)
class HFAutoregressive:
    """HF autoregressive sampling (:func:`autoregressive`) as a method of :func:`compare`."""

    @property
    def name(self) -> str:
        return "hf-autoregressive"

    def _prepare(self, check: _Checked, draft: torch.nn.Module) -> Decode:
        return lambda ids, seed: _generate(check, None, ids, seed, {})


@dataclass(frozen=True)
class HFAssisted:
    """HF assisted generation (:func:`assisted`) as a method of :func:`compare`; None keeps HF's default."""

    num_assistant_tokens: int | None = None
    num_assistant_tokens_schedule: str | None = None
    assistant_confidence_threshold: float | None = None

    @property
    def options(self) -> dict:
        return {k: getattr(self, k) for k in ASSISTANT_OPTIONS if getattr(self, k) is not None}

    @property
    def name(self) -> str:
        given = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return "hf-assisted" + (f" ({given})" if given else "")

    def _prepare(self, check: _Checked, draft: torch.nn.Module) -> Decode:
        if getattr(draft, "reads_features", False):
            raise ValueError("HF assisted generation needs a draft model; the draft here is a feature head")
        options = _assistant_options(self.options)
        return lambda ids, seed: _generate(check, draft, ids, seed, options)


@dataclass(frozen=True)
class TreeMethod:
    """An mdsd configuration for :func:`compare`: :class:`~mdsd.tree.decoder.TreeDecoder` with ``tree``,
    ``verifier`` and an optional depth policy, at the comparison's temperature; prompt i gets
    ``torch.Generator(device).manual_seed(seed + i)``.

    >>> TreeMethod(Tree.kary([2, 2]), "rrsw").name
    'mdsd rrsw tree of 6 nodes, depth 2'
    >>> TreeMethod(Tree.chain(4), "single", label="chain:4").name
    'mdsd single chain:4'
    """

    tree: Tree | DynamicTree | None
    verifier: str = "spechub"
    depth: DepthPolicy | None = None
    label: str = ""
    source: object | None = None  # a training-free draft source (mdsd.sources); tree None: the source alone
    retrieve: tuple[int, int] = (1, 4)
    compile: bool | str = False  # the decoder's path (TreeDecoder(compile=...)): False eager, True fast

    @property
    def name(self) -> str:
        label = self.label or _describe(self.tree)
        policy = f" + {type(self.depth).__name__}" if self.depth is not None else ""
        source = f" + {self.source.name}" if self.source is not None and not self.label else ""
        return f"mdsd {self.verifier} {label}{policy}{source}"

    def _prepare(self, check: _Checked, draft: torch.nn.Module) -> Decode:
        decoder = TreeDecoder(
            check.target,
            draft if self.tree is not None else None,
            self.tree,
            verifier=self.verifier,
            temperature=check.temperature,
            eos_token_id=sorted(check.eos),
            depth=self.depth,
            source=self.source,
            retrieve=self.retrieve,
            compile=self.compile,
        )
        device = next(check.target.parameters()).device

        def decode(ids: list[int], seed: int) -> TreeDecodeOutput:
            generator = torch.Generator(device=device).manual_seed(seed)
            return decoder.generate(torch.tensor([ids], device=device), check.max_new_tokens, generator)

        return decode


def _describe(tree: Tree | DynamicTree | None) -> str:
    if tree is None:
        return "no model tree"
    if isinstance(tree, DynamicTree):
        return f"dynamic:{tree.depth},{tree.k},{tree.expand}" + (f",{tree.budget}" if tree.budget else "")
    return f"tree of {tree.size} nodes, depth {tree.max_depth}"


BASELINES = {"hf-autoregressive": HFAutoregressive(), "hf-assisted": HFAssisted()}


@dataclass(frozen=True)
class PromptRun:
    """One method on one prompt: counts measured by :func:`compare` and the method's own output."""

    method: str
    prompt: int
    seed: int
    tokens: int
    steps: int
    target_forwards: int
    draft_forwards: int
    seconds: float
    output: BaselineOutput | TreeDecodeOutput


@dataclass(frozen=True)
class ComparisonRow:
    """One method over all prompts; ratios are ratios of sums over prompts."""

    method: str
    prompts: int
    tokens: int
    steps: int
    target_forwards: int
    draft_forwards: int
    seconds: float
    tokens_per_forward: float
    ci95: tuple[float, float] | None  # of tokens_per_forward, ratio_interval over prompts (None: 1 prompt)
    tokens_per_step: float
    tokens_per_second: float
    tokens_per_second_ci95: tuple[float, float] | None  # ratio_interval of Σ tokens / Σ seconds, >= 0


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` measured: one row per method and every (method, prompt) run."""

    rows: list[ComparisonRow]
    runs: list[PromptRun]
    temperature: float
    max_new_tokens: int
    seed: int
    interval: str = INTERVAL_METHOD

    def records(self) -> list[dict]:
        """The rows as plain dicts (JSON-ready), e.g. for :func:`mdsd.harness.experiment.write_results`."""
        return [
            dataclasses.asdict(row)
            | {"ci95": _listed(row.ci95), "tokens_per_second_ci95": _listed(row.tokens_per_second_ci95)}
            for row in self.rows
        ]

    def markdown(self) -> str:
        """The table, one line per method."""
        lines = [
            "| method | tokens / target forward (95% CI) | tokens / step | tokens/s (95% CI) | "
            "target forwards | draft forwards | tokens |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            lines.append(
                f"| {r.method} | {r.tokens_per_forward:.3f}{interval(r.ci95)} | {r.tokens_per_step:.3f} | "
                f"{r.tokens_per_second:.2f}{interval(r.tokens_per_second_ci95)} | {r.target_forwards} | "
                f"{r.draft_forwards} | {r.tokens} |"
            )
        return "\n".join(lines) + "\n"


def compare(
    methods: Sequence[str | HFAutoregressive | HFAssisted | TreeMethod],
    prompts: Sequence[Sequence[int] | torch.Tensor],
    target: torch.nn.Module,
    draft: torch.nn.Module,
    max_new_tokens: int,
    temperature: float,
    seed: int = 0,
    eos_token_id: int | list[int] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> Comparison:
    """Run every method on the same prompts, seeds (prompt i: ``seed + i``), budget and EOS; one row each.

    ``methods``: ``"hf-autoregressive"``, ``"hf-assisted"`` (HF's defaults), an :class:`HFAssisted` with
    settings, or a :class:`TreeMethod`. Every decode runs under one :func:`count_forwards` (target, draft) and
    one wall clock, whatever the method. Per row: Σ tokens / Σ target forwards with its 95% interval over
    prompts (:func:`ratio_interval`), Σ tokens / Σ steps, Σ tokens / Σ seconds, and the forward totals.
    ``progress(method, prompt)`` is called after each decode.
    """
    check = _Checked(target, draft, prompts, max_new_tokens, temperature, seed, eos_token_id)
    if isinstance(methods, str) or not isinstance(methods, Sequence) or not methods:
        raise ValueError(f"methods must be a non-empty list of methods, got {methods!r}")
    resolved = [_method(m) for m in methods]
    names = [m.name for m in resolved]
    if len(set(names)) != len(names):
        raise ValueError(f"methods holds one method twice: {names}")
    decoders = [method._prepare(check, draft) for method in resolved]  # every method checked before any run
    runs, rows = [], []
    device = next(target.parameters()).device
    for method, decode in zip(resolved, decoders, strict=True):
        mine = []
        for i, ids in enumerate(check.prompts):
            with count_forwards(target, draft) as n:
                start = time.perf_counter()
                out = decode(ids, check.seed + i)
                _synchronize(device)
                seconds = time.perf_counter() - start
            forwards = (n[0], n[1])
            if getattr(method, "compile", False) or getattr(draft, "reads_features", False):
                forwards = (out.steps, out.draft_forwards)  # no forward the hook sees: the decoder counts
            mine.append(
                PromptRun(method.name, i, check.seed + i, len(out.tokens), out.steps, *forwards, seconds, out)
            )
            if progress is not None:
                progress(method.name, i)
        runs += mine
        rows.append(_row(method.name, mine))
    return Comparison(rows, runs, check.temperature, check.max_new_tokens, check.seed)


def _method(method: object):
    if isinstance(method, str):
        if method not in BASELINES:
            raise ValueError(
                f"unknown method {method!r}: give {', '.join(BASELINES)}, an HFAssisted or a TreeMethod"
            )
        return BASELINES[method]
    if not isinstance(method, (HFAutoregressive, HFAssisted, TreeMethod)):
        raise TypeError(
            f"a method must be a name, an HFAssisted or a TreeMethod, got {type(method).__name__}"
        )
    return method


def _row(name: str, runs: list[PromptRun]) -> ComparisonRow:
    tokens = [r.tokens for r in runs]
    forwards = [r.target_forwards for r in runs]
    ratio, ci = ratio_interval(tokens, forwards)
    if ci is not None:  # every target forward emits at least one token: the interval stops at 1
        ci = (max(ci[0], 1.0), ci[1])
    steps, seconds = sum(r.steps for r in runs), sum(r.seconds for r in runs)
    speed, speed_ci = ratio_interval(tokens, [r.seconds for r in runs]) if seconds > 0 else (math.inf, None)
    if speed_ci is not None:
        speed_ci = (max(speed_ci[0], 0.0), speed_ci[1])
    return ComparisonRow(
        method=name,
        prompts=len(runs),
        tokens=sum(tokens),
        steps=steps,
        target_forwards=sum(forwards),
        draft_forwards=sum(r.draft_forwards for r in runs),
        seconds=seconds,
        tokens_per_forward=ratio,
        ci95=ci,
        tokens_per_step=sum(tokens) / steps,
        tokens_per_second=speed,
        tokens_per_second_ci95=speed_ci,
    )


def _listed(ci: tuple[float, float] | None) -> list[float] | None:
    return list(ci) if ci is not None else None


def interval(ci: Sequence[float] | None) -> str:
    """`` (low-high)`` for a table cell, or ``""`` where there is no interval (one prompt)."""
    return f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci is not None else ""


def intervals_overlap(a: Sequence[float] | None, b: Sequence[float] | None) -> bool:
    """Whether two intervals (low, high) overlap; True when either is missing (nothing is settled)."""
    return not a or not b or (a[0] <= b[1] and b[0] <= a[1])


def ratio_interval(
    numerators: Sequence[float],
    denominators: Sequence[float],
    confidence: float = 0.95,
) -> tuple[float, tuple[float, float] | None]:
    """The ratio of sums R = Σ t_i / Σ f_i over n units (prompts) and its t-interval, ``(R, (low, high))``.

    The ratio estimator's linearised (delta-method) standard error, with d_i = t_i − R f_i:

    .. math::

        \\mathrm{SE}(R) = \\frac{1}{\\bar f} \\sqrt{\\frac{\\sum_i d_i^2}{n (n - 1)}}, \\qquad
        R \\pm t_{(1 + c)/2,\\, n - 1} \\, \\mathrm{SE}(R)

    (Cochran, *Sampling Techniques*, 3rd ed., §6.4). The interval is None for n = 1.

    >>> ratio_interval([4, 6], [2, 3])
    (2.0, (2.0, 2.0))
    >>> ratio_interval([5], [2])
    (2.5, None)
    """
    t = np.asarray(numerators, dtype=np.float64)
    f = np.asarray(denominators, dtype=np.float64)
    if t.ndim != 1 or t.shape != f.shape or t.size == 0:
        raise ValueError(f"numerators and denominators must be equal-length 1-D, got {t.shape} and {f.shape}")
    if not (np.isfinite(t).all() and np.isfinite(f).all()) or (f < 0).any() or f.sum() <= 0:
        raise ValueError("denominators must be finite, >= 0, with a positive sum (and numerators finite)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    ratio = float(t.sum() / f.sum())
    n = t.size
    if n < 2:
        return ratio, None
    import scipy.stats

    d = t - ratio * f
    se = math.sqrt(float((d**2).sum()) / (n * (n - 1))) / float(f.mean())
    half = float(scipy.stats.t.ppf((1 + confidence) / 2, n - 1)) * se
    return ratio, (ratio - half, ratio + half)
