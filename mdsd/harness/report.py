"""The report: the optimal acceptance of every draft law and the exact acceptance of every verifier.

For each source of (p, q) pairs (toy pairs from :func:`mdsd.toy_pair` at each temperature of a grid,
and the bundled real next-token pairs when :mod:`mdsd.data` provides them) and each number of drafts
k, the report averages over the pairs

- the optimum :math:`\\alpha^*(p, Q)` (OTM, docs/mathematics.md §1) of each draft law Q, and
- the exact acceptance :math:`P(Y \\in \\operatorname{set}(\\bar x))` of each verifier
  (docs/mathematics.md §3), with its gap to the optimum of its own law.

Rows are plain dicts, ready for :func:`mdsd.harness.experiment.write_results`; ``mdsd report`` prints and
plots them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import scipy.stats
import torch

from mdsd import laws
from mdsd.data import REAL_TEMPERATURES, real_pairs
from mdsd.laws import DraftLaw, law_class, law_from_name, law_names
from mdsd.otm import optimal_acceptance
from mdsd.toy import toy_pair
from mdsd.validation import as_pair
from mdsd.verifiers import VERIFIERS, supports, verifier, verifier_class

__all__ = ["LAWS", "ReportConfig", "Block", "make_law", "toy_blocks", "real_blocks", "report", "summarise"]

LAWS = law_names()  # every registered draft law (mdsd.laws)


@dataclass(frozen=True)
class ReportConfig:
    """What ``mdsd report`` computes; every field is a command-line flag."""

    laws: tuple[str, ...] = field(default=LAWS, metadata={"help": "draft laws whose optimum is computed"})
    verifiers: tuple[str, ...] = field(default=VERIFIERS, metadata={"help": "verifiers to measure exactly"})
    k: tuple[int, ...] = field(default=(1, 2, 3, 4), metadata={"help": "numbers of drafts"})
    temperatures: tuple[float, ...] = field(
        default=(0.1, 0.25, 0.6, 1.0), metadata={"help": "temperatures T (toy; real where stored)"}
    )
    similarity: float = field(default=0.5, metadata={"help": "toy similarity s of q to p"})
    n: int = field(default=30, metadata={"help": "toy vocabulary size"})
    pairs: int = field(default=100, metadata={"help": "toy pairs per temperature"})
    real: bool = field(default=True, metadata={"help": "include the bundled real pairs when available"})
    real_rows: int = field(default=200, metadata={"help": "real pairs per temperature (evenly spaced)"})
    seed: int = field(default=0, metadata={"help": "seed of the toy pairs (the same logits at every T)"})

    def __post_init__(self) -> None:
        """Check every field (a message starts with its name, which ``mdsd report`` turns into its flag).
        Laws and verifiers are read by their registries, so every name and alias ``mdsd optimal --law``
        takes (``wor``) and every ``NAME:LAW`` / ``NAME-LAW`` form ``mdsd acceptance`` lists
        (``optimal:wor``) is taken here too."""
        for name in self.laws:
            try:
                law_class(name)
            except ValueError as err:
                raise ValueError(f"laws: {err}") from None
        for name in self.verifiers:
            try:
                verifier_class(name)  # a node verifier, with its law; a path rule is refused, with why
            except ValueError as err:
                raise ValueError(f"verifiers: {err}") from None
        for k in self.k:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ValueError(f"k: every number of drafts must be an integer >= 1, got {k!r}")
        for t in self.temperatures:
            if not math.isfinite(t) or t <= 0:
                raise ValueError(f"temperatures: every temperature must be finite and > 0, got {t}")
        if not 0.0 <= self.similarity <= 1.0:
            raise ValueError(f"similarity must lie in [0, 1], got {self.similarity}")
        for name, value in (("pairs", self.pairs), ("real_rows", self.real_rows)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.n < 1:
            raise ValueError(f"n must be >= 2 (the toy vocabulary's size: two tokens at least), got {self.n}")
        if self.n == 1:
            raise ValueError(
                "n must be >= 2, got 1: on a vocabulary of one token p = q and every acceptance is 1"
            )


@dataclass(frozen=True)
class Block:
    """A set of pairs reported together: ``p``, ``q`` float64 [M, n]."""

    source: str  # "toy" or "real"
    temperature: float | None
    p: np.ndarray
    q: np.ndarray


def make_law(name: str, k: int) -> DraftLaw | None:
    """The draft law ``name`` with ``k`` drafts, or None where it has no such k (the hub pair needs 2).

    >>> make_law("without_replacement", 3), make_law("hub", 3)
    (WithoutReplacement(k=3), None)
    """
    return law_from_name(name, k) if laws.supports(name, k) else None


def toy_blocks(config: ReportConfig) -> list[Block]:
    """Toy pairs at each temperature; every temperature reuses the same uniform logits (seeded)."""
    blocks = []
    for t in config.temperatures:
        generator = torch.Generator().manual_seed(config.seed)
        p, q = toy_pair(config.n, t, config.similarity, generator, batch=config.pairs)
        blocks.append(Block("toy", float(t), p.numpy(), q.numpy()))
    return blocks


def real_blocks(config: ReportConfig) -> list[Block]:
    """The bundled real pairs (:func:`mdsd.data.real_pairs`) at each of ``config.temperatures`` it stores.

    ``config.real_rows`` rows evenly spaced over the corpus (so every prompt set is represented); the
    padding columns of a row have p = q = 0.
    """
    blocks = []
    for t in config.temperatures:
        if not any(math.isclose(t, stored) for stored in REAL_TEMPERATURES):
            continue
        pairs = real_pairs(t)
        rows = np.unique(np.linspace(0, len(pairs) - 1, config.real_rows).round().astype(int))
        p, q = as_pair(pairs.p[rows], pairs.q[rows])
        blocks.append(Block("real", float(t), p, q))
    return blocks


def _units(config: ReportConfig, q: np.ndarray) -> Iterator[tuple[int, str, str, object]]:
    """(k, kind, name, law or verifier or skip reason) for every quantity of a block."""
    n = q.shape[-1]
    for k in config.k:
        for name in config.laws:
            law = make_law(name, k)
            if law is None:
                yield k, "optimum", name, f"the {name} law has no k = {k}"
                continue
            try:
                law.check(np.full(n, 1.0 / n))  # k distinct drafts need k tokens
            except ValueError:
                yield k, "optimum", name, f"{law!r} draws more distinct tokens than n = {n}"
                continue
            yield k, "optimum", name, law
        for name in config.verifiers:
            if not supports(name, k):
                yield (
                    k,
                    "verifier",
                    name,
                    f"the {name} verifier needs k in {sorted(verifier_class(name).supported_k)}",
                )
                continue
            v = verifier(name, k)
            if v.vocabulary_obstacle(n) is not None:
                yield k, "verifier", name, f"{v!r} drafts more distinct tokens than n = {n}"
                continue
            reason = v.exact_obstacle(q)  # e.g. RRSw's k >= 3 enumeration on a large vocabulary
            yield k, "verifier", name, v if reason is None else reason


def _ci95(values: np.ndarray) -> float | None:
    if values.size < 2:
        return None
    return float(scipy.stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size))


def _optimum(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> np.ndarray:  # [M, n] -> [M]
    return np.asarray(optimal_acceptance(p, q, law), dtype=float)  # batched min-cut dual


def report(
    config: ReportConfig, blocks: list[Block] | None = None, progress: Callable[[int], None] | None = None
) -> list[dict]:
    """Compute the report's rows (one per block, k and quantity).

    Each row: ``source``, ``temperature``, ``n`` (vocabulary), ``pairs``, ``k``, ``kind``
    ("optimum" of a law or exact acceptance of a "verifier"), ``name``, ``law``, ``mean``, ``ci95``
    (half-width of the 95% t-interval over the pairs), ``optimum`` (mean optimum of the verifier's law),
    ``gap`` (optimum − mean) and ``skipped`` (why the quantity is not computed, else empty).
    ``blocks`` defaults to :func:`toy_blocks` plus, when ``config.real``, :func:`real_blocks`.
    ``progress(units)`` is called as units of work complete.
    """
    if blocks is None:
        blocks = toy_blocks(config) + (real_blocks(config) if config.real else [])
    rows = []
    for block in blocks:
        pairs, n = block.p.shape
        optimum_of: dict[tuple[int, str], np.ndarray] = {}
        for k, kind, name, what in _units(config, block.q):
            row = {
                "source": block.source,
                "temperature": block.temperature,
                "n": n,
                "pairs": pairs,
                "k": k,
                "kind": kind,
                "name": name,
                "law": law_class(name).name  # an alias (wor) recorded by its law's name
                if kind == "optimum"
                else getattr(getattr(what, "law", None), "name", ""),
                "mean": None,  # None (JSON null) where the quantity is skipped
                "ci95": None,
                "optimum": None,
                "gap": None,
                "skipped": what if isinstance(what, str) else "",
            }
            if isinstance(what, DraftLaw):
                values = _optimum(block.p, block.q, what)
                optimum_of[(k, what.name)] = values
                row.update(
                    mean=float(values.mean()), ci95=_ci95(values), optimum=float(values.mean()), gap=0.0
                )
            elif not isinstance(what, str):
                values = np.array([what.acceptance(pi, qi) for pi, qi in zip(block.p, block.q, strict=True)])
                best = optimum_of.get((k, what.law.name))
                if best is None:
                    best = _optimum(block.p, block.q, what.law)
                row.update(mean=float(values.mean()), ci95=_ci95(values), optimum=float(best.mean()))
                row["gap"] = row["optimum"] - row["mean"]
            rows.append(row)
            if progress is not None:
                progress(1)
    return rows


def count_units(config: ReportConfig, blocks: list[Block]) -> int:
    """How many rows :func:`report` will produce for these blocks (for a progress bar)."""
    return sum(1 for block in blocks for _ in _units(config, block.q))


def summarise(rows: list[dict]) -> str:
    """A readable text table: one block per (source, temperature), methods down, k across."""
    out = []
    keys = list(dict.fromkeys((r["source"], r["temperature"], r["n"], r["pairs"]) for r in rows))
    ks = sorted({r["k"] for r in rows})
    for source, temperature, n, pairs in keys:
        title = f"{source} pairs" + (f", T = {temperature:g}" if temperature is not None else "")
        size = (
            f"n = {n}: the union of p's and q's top-256 tokens plus one lumped tail token per model"
            if source == "real"
            else f"n = {n}"
        )
        out.append(f"{title} ({size}; {pairs} pairs): mean acceptance [verifier's gap to its law's optimum]")
        header = f"  {'':28s}" + "".join(f"{'k = ' + str(k):>18s}" for k in ks)
        out.append(header)
        block = [
            r
            for r in rows
            if (r["source"], r["temperature"], r["n"], r["pairs"]) == (source, temperature, n, pairs)
        ]
        for kind, name in dict.fromkeys((r["kind"], r["name"]) for r in block):
            label = f"OTM {name}" if kind == "optimum" else name
            cells = []
            for k in ks:
                match = [r for r in block if (r["kind"], r["name"], r["k"]) == (kind, name, k)]
                cells.append(_cell(match[0]) if match else "")
            out.append(f"  {label:28s}" + "".join(f"{c:>18s}" for c in cells))
        out.append("")
    return "\n".join(out)


def _cell(row: dict) -> str:
    if row["skipped"]:
        return "-"
    if row["kind"] == "optimum":
        return f"{row['mean']:.4f}"
    return f"{row['mean']:.4f} [{round(row['gap'], 3) + 0.0:.3f}]"  # + 0.0 turns -0.0 into 0.0
