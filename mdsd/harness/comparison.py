"""Every method on the same prompts, seeds and budget, measured the same way: the comparison table.

A method is HF autoregressive sampling, HF assisted generation (:mod:`mdsd.hf.baselines`) or an mdsd
configuration (:class:`TreeMethod`: tree, verifier, optional depth policy). :func:`compare` decodes prompt i
with seed ``seed + i`` under one :func:`~mdsd.hf.baselines.count_forwards` (target, draft) and one wall clock,
whatever the method, and reports per method

* **tokens per target forward**, the ratio of sums over prompts :math:`R = \\sum_i t_i / \\sum_i f_i`
  (t_i tokens, f_i hooked target forwards of prompt i), with a 95% bootstrap interval over prompts
  (:func:`ratio_interval`; it stays inside the range of the prompts' own ratios, so inside [1, depth + 1]);
* **tokens per step**, Σ tokens / Σ steps by each method's own count (TreeDecoder's steps; for HF the
  batches of tokens ``generate`` hands its streamer): equal to the former exactly when the method's own
  accounting agrees with the hook;
* **tokens/s** (Σ tokens / Σ seconds), and the target and draft forward totals.

With ``batch_size`` B > 1 an mdsd method decodes B prompts at a time (:meth:`TreeDecoder.generate_batch`,
one generator per batch seeded with ``seed +`` its first prompt's index): a prompt's forwards are then the
steps it took part in (the decoder's counts), the clock times whole batches, and tokens/s and its interval
are over batches. HF's methods decode one prompt at a time whatever B. Two methods on the same prompts are
compared by :func:`paired_ratio`: the ratio of their tokens per forward with a bootstrap interval over prompts
resampled together.

An mdsd method on the fast path (``TreeMethod(compile=...)``) replays captured steps, which call no model
from Python, so the hook cannot see its forwards: its counts are the decoder's own (one target forward per
step, ``draft_forwards``), which equal the hook's on the eager path (tested). So are the counts of a method
whose draft is one of mdsd's own drafters (:class:`mdsd.drafters.FeatureHead`,
:class:`mdsd.drafters.SmallDrafter`): their caches run their layers, not their top-level module, which is what
the hook sees.

>>> ratio_interval([6, 9], [3, 3])  # two prompts at 2 and 3 tokens a forward
(2.5, (2.0, 3.0))
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
from mdsd.tree.drafter import Drafter
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
    "paired_ratio",
    "summarise",
    "INTERVAL_METHOD",
]

RESAMPLES = 10_000  # bootstrap resamples of every interval here
INTERVAL_METHOD = f"percentile bootstrap over prompts of the ratio of sums ({RESAMPLES:,} resamples, seed 0)"

Decode = Callable[[list[int], int], "BaselineOutput"]  # HF's: (prompt ids, seed) -> output
DecodeBatch = Callable[[list[list[int]], int], "list[TreeDecodeOutput]"]  # mdsd's: (prompts, seed) -> outputs


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
        if isinstance(draft, Drafter):
            raise ValueError(
                "HF assisted generation needs a draft model; the draft here is one of mdsd's own drafters"
            )
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

    def _prepare(self, check: _Checked, draft: torch.nn.Module) -> DecodeBatch:
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

        def decode(ids: list[list[int]], seed: int) -> list[TreeDecodeOutput]:  # a batch of prompts
            generator = torch.Generator(device=device).manual_seed(seed)
            return decoder.generate_batch(ids, check.max_new_tokens, generator)

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
    seed: int  # of the generator that decoded it (its batch's)
    batch: int  # the batch it was decoded in (its own index where batches are of one prompt)
    tokens: int
    steps: int
    target_forwards: int
    draft_forwards: int
    seconds: float  # its batch's wall time
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
    tokens_per_second_ci95: tuple[float, float] | None  # ratio_interval of Σ tokens / Σ seconds over batches


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
    batch_size: int = 1,
) -> Comparison:
    """Run every method on the same prompts, seeds (prompt i: ``seed + i``), budget and EOS; one row each.

    ``methods``: ``"hf-autoregressive"``, ``"hf-assisted"`` (HF's defaults), an :class:`HFAssisted` with
    settings, or a :class:`TreeMethod`. Every decode runs under one :func:`count_forwards` (target, draft) and
    one wall clock, whatever the method. Per row: Σ tokens / Σ target forwards with its 95% interval over
    prompts (:func:`ratio_interval`), Σ tokens / Σ steps, Σ tokens / Σ seconds, and the forward totals.
    ``batch_size``: prompts an mdsd method decodes together (module docstring). ``progress(method, prompt)``
    is called after each decode.
    """
    check = _Checked(target, draft, prompts, max_new_tokens, temperature, seed, eos_token_id)
    if isinstance(methods, str) or not isinstance(methods, Sequence) or not methods:
        raise ValueError(f"methods must be a non-empty list of methods, got {methods!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    resolved = [_method(m) for m in methods]
    names = [m.name for m in resolved]
    if len(set(names)) != len(names):
        raise ValueError(f"methods holds one method twice: {names}")
    decoders = [method._prepare(check, draft) for method in resolved]  # every method checked before any run
    runs, rows = [], []
    device = next(target.parameters()).device
    for method, decode in zip(resolved, decoders, strict=True):
        batched = isinstance(method, TreeMethod)
        width = batch_size if batched else 1
        mine = []
        for start in range(0, len(check.prompts), width):
            chunk = check.prompts[start : start + width]
            with count_forwards(target, draft) as n:
                clock = time.perf_counter()
                outs = (
                    decode(chunk, check.seed + start) if batched else [decode(chunk[0], check.seed + start)]
                )
                _synchronize(device)
                seconds = time.perf_counter() - clock
            for i, out in enumerate(outs, start):
                forwards = (n[0], n[1])
                if width > 1 or getattr(method, "compile", False) or isinstance(draft, Drafter):
                    forwards = (
                        out.steps,
                        out.draft_forwards,
                    )  # no forward the hook can give it: the decoder's
                batch = start // width
                mine.append(
                    PromptRun(
                        method.name,
                        i,
                        check.seed + start,
                        batch,
                        len(out.tokens),
                        out.steps,
                        *forwards,
                        seconds,
                        out,
                    )
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
    return ComparisonRow(
        method=name,
        **summarise(
            [r.tokens for r in runs],
            [r.steps for r in runs],
            [r.target_forwards for r in runs],
            [r.draft_forwards for r in runs],
            [r.batch for r in runs],
            [r.seconds for r in runs],
        ),
    )


def summarise(
    tokens: Sequence[int],
    steps: Sequence[int],
    target_forwards: Sequence[int],
    draft_forwards: Sequence[int],
    batches: Sequence[int],
    seconds: Sequence[float],
) -> dict:
    """The fields of a :class:`ComparisonRow` but its method, from per-prompt counts: tokens, steps,
    target and draft forwards, and each prompt's batch with that batch's wall time (equal within a batch).

    >>> row = summarise([4, 6], [2, 2], [2, 2], [8, 8], [0, 1], [1.0, 1.0])
    >>> row["tokens_per_forward"], row["ci95"], row["tokens_per_second"]
    (2.5, (2.0, 3.0), 5.0)
    """
    per_batch: dict[int, list[float]] = {}
    for b, t, s in zip(batches, tokens, seconds, strict=True):
        per_batch.setdefault(b, [0.0, s])[0] += t
    batch_tokens, batch_seconds = (list(x) for x in zip(*per_batch.values(), strict=True))
    ratio, ci = ratio_interval(tokens, target_forwards)
    total = sum(batch_seconds)
    speed, speed_ci = ratio_interval(batch_tokens, batch_seconds) if total > 0 else (math.inf, None)
    return {
        "prompts": len(tokens),
        "tokens": int(sum(tokens)),
        "steps": int(sum(steps)),
        "target_forwards": int(sum(target_forwards)),
        "draft_forwards": int(sum(draft_forwards)),
        "seconds": total,
        "tokens_per_forward": ratio,
        "ci95": ci,
        "tokens_per_step": sum(tokens) / sum(steps),
        "tokens_per_second": speed,
        "tokens_per_second_ci95": speed_ci,
    }


def _listed(ci: tuple[float, float] | None) -> list[float] | None:
    return list(ci) if ci is not None else None


def interval(ci: Sequence[float] | None) -> str:
    """`` (low-high)`` for a table cell, or ``""`` where there is no interval (one prompt)."""
    return f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci is not None else ""


def intervals_overlap(a: Sequence[float] | None, b: Sequence[float] | None) -> bool:
    """Whether two intervals (low, high) overlap; True when either is missing (nothing is settled)."""
    return not a or not b or (a[0] <= b[1] and b[0] <= a[1])


def _counts(name: str, numerators: Sequence[float], denominators: Sequence[float]) -> tuple:
    t = np.asarray(numerators, dtype=np.float64)
    f = np.asarray(denominators, dtype=np.float64)
    if t.ndim != 1 or t.shape != f.shape or t.size == 0:
        raise ValueError(
            f"{name}: numerators and denominators must be equal-length 1-D, got {t.shape} and {f.shape}"
        )
    if not (np.isfinite(t).all() and np.isfinite(f).all()) or (f < 0).any() or f.sum() <= 0:
        raise ValueError(
            f"{name}: denominators must be finite, >= 0, with a positive sum (numerators finite)"
        )
    return t, f


def _resampled_sums(n: int, arrays: Sequence[np.ndarray], resamples: int, seed: int) -> list[np.ndarray]:
    """Σ_i c_i x_i for each array x, over ``resamples`` bootstrap draws c ~ Multinomial(n, uniform)."""
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)  # [R, n]
    return [counts @ x for x in arrays]


def _quantiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    low, high = np.quantile(values[np.isfinite(values)], [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def ratio_interval(
    numerators: Sequence[float],
    denominators: Sequence[float],
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, tuple[float, float] | None]:
    """The ratio of sums R = Σ t_i / Σ f_i over n units (prompts) and its percentile bootstrap interval.

    .. math::

        R^{(r)} = \\frac{\\sum_i c^{(r)}_i t_i}{\\sum_i c^{(r)}_i f_i}, \\qquad
        c^{(r)} \\sim \\mathrm{Multinomial}(n, 1/n), \\quad r = 1..\\text{resamples},

    and the interval is the (1 ∓ confidence)/2 quantiles of R^{(r)} (Efron & Tibshirani, *An Introduction
    to the Bootstrap*, ch. 13). Each R^{(r)} is an average of the units' own ratios t_i / f_i weighted by
    c_i f_i, so the interval never leaves their range: tokens per forward stays in [1, depth + 1], tokens/s
    ≥ 0. Seeded: the same counts give the same interval. None for n = 1. Resamples whose denominator is 0
    are dropped.

    >>> ratio_interval([4, 6], [2, 3])
    (2.0, (2.0, 2.0))
    >>> ratio_interval([5], [2])
    (2.5, None)
    """
    t, f = _counts("ratio_interval", numerators, denominators)
    ratio = float(t.sum() / f.sum())
    if t.size < 2:
        _quantiles(np.zeros(1), confidence)  # the confidence is checked all the same
        return ratio, None
    top, bottom = _resampled_sums(t.size, (t, f), resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ratio, _quantiles(top / bottom, confidence)


def paired_ratio(
    tokens_a: Sequence[float],
    forwards_a: Sequence[float],
    tokens_b: Sequence[float],
    forwards_b: Sequence[float],
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, tuple[float, float] | None]:
    """Method A's ratio of sums over method B's on the same n prompts, with a paired bootstrap interval.

    .. math::

        \\rho = \\frac{\\sum_i t^A_i / \\sum_i f^A_i}{\\sum_i t^B_i / \\sum_i f^B_i},

    each resample drawing the same prompts for both methods (:func:`ratio_interval`'s counts c^{(r)}), so the
    prompts' difficulty, shared by both, cancels. A difference is significant at the level where the interval
    excludes 1. None for n = 1.

    >>> paired_ratio([4, 6], [2, 2], [2, 3], [2, 2])
    (2.0, (2.0, 2.0))
    """
    ta, fa = _counts("paired_ratio (method A)", tokens_a, forwards_a)
    tb, fb = _counts("paired_ratio (method B)", tokens_b, forwards_b)
    if ta.size != tb.size:
        raise ValueError(
            f"paired_ratio: methods A and B must cover the same prompts, got {ta.size} and {tb.size}"
        )
    if tb.sum() <= 0:
        raise ValueError("paired_ratio: method B's numerators must have a positive sum")
    ratio = float((ta.sum() / fa.sum()) / (tb.sum() / fb.sum()))
    if ta.size < 2:
        _quantiles(np.zeros(1), confidence)
        return ratio, None
    sa, ga, sb, gb = _resampled_sums(ta.size, (ta, fa, tb, fb), resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ratio, _quantiles((sa / ga) / (sb / gb), confidence)
