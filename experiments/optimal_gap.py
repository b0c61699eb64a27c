"""How far existing verifiers stay below the optimum, from tiny to real-model vocabularies.

For vocabularies from 10 to 151,936 (Qwen2.5's) and k = 2..8 drafts, on toy pairs (mdsd.toy_pair)
and independent symmetric-Dirichlet pairs (mdsd.dirichlet_pair): the optimal acceptance (OTM, via the
min-cut dual, docs/mathematics.md §1) of i.i.d. drafts and of drafts without replacement, against the
exact acceptance of each verifier (docs/mathematics.md §3): RRS and K-SEQ (i.i.d.), RRSw (without
replacement), SpecHub (hub pair, k = 2), Hu et al.'s greedy drafts and deterministic top-k. Hu et al. asked
this at vocabularies in the thousands; every figure here is exact per pair, averaged over random pairs.

RRSw's exact acceptance enumerates the ordered draft tuples for k >= 3; where that exceeds
``enumeration_limit`` tuples the entry is skipped and the reason recorded.

Writes results/optimal_gap/: optimal_gap.json/.csv and optimal_gap.png (acceptance against n, one
panel per source and k) and optimal_gap_vs_k.png (the gap of each verifier to the best optimum).

    python experiments/optimal_gap.py --output-dir results/optimal_gap
    python experiments/optimal_gap.py --quick

The work is one task per (source, n, k), each drawing its pairs from the seed of its (source, n), run
by :func:`mdsd.harness.sweep.run_tasks`: in this process by default, on Ray with --ray (a Ray instance on this
machine) or --ray ADDRESS (a cluster: `ray start --head` on one node, `ray start --address HEAD:6379`
on the others, then --ray auto on the head); pip install -e ".[ray]" first. Finished tasks are kept in
results/optimal_gap/optimal_gap.<hash>.tasks.jsonl until the run completes; after an interruption or a
failed task, --resume continues from them. Either way the files are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

import mdsd
from mdsd.harness.experiment import config_from_cli, output_dir, partial_results, run_script, write_results
from mdsd.harness.sweep import run_tasks


@dataclass(frozen=True)
class Config:
    """Optimal acceptance vs verifiers, across vocabulary sizes and k."""

    vocabularies: tuple[int, ...] = field(
        default=(10, 100, 1000, 10000, 151936), metadata={"help": "vocabulary sizes n"}
    )
    ks: tuple[int, ...] = field(default=(2, 3, 4, 5, 6, 7, 8), metadata={"help": "numbers of drafts k"})
    pairs: int = field(default=10, metadata={"help": "random pairs per (source, n)"})
    temperature: float = field(default=0.1, metadata={"help": "toy temperature T"})
    similarity: float = field(default=0.5, metadata={"help": "toy similarity s"})
    concentrations: tuple[float, ...] = field(
        default=(0.1, 1.0), metadata={"help": "Dirichlet concentrations"}
    )
    verifiers: tuple[str, ...] = field(
        default=("rrs", "rrsw", "kseq", "spechub", "greedy", "topk"), metadata={"help": "verifiers compared"}
    )
    enumeration_limit: int = field(
        default=400_000, metadata={"help": "most entries an exact enumeration (RRSw, k >= 3) may touch"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the pairs"})
    quick: bool = field(default=False, metadata={"help": "smoke test: n in (10, 50), k in (2, 3), 2 pairs"})
    output_dir: str = mdsd.harness.experiment.output_dir_field()
    ray: str = mdsd.harness.experiment.ray_field()
    resume: bool = mdsd.harness.experiment.resume_field()


def skip_reason(name: str, k: int, q: np.ndarray, limit: int) -> str | None:
    """Why the exact acceptance of ``name`` is not computed with k drafts on draft rows q, or None."""
    if not mdsd.verifiers.supports(name, k):
        return f"{name} is defined for k in {sorted(mdsd.verifiers.verifier_class(name).supported_k)} only"
    return mdsd.verifier(name, k).exact_obstacle(q, limit)


def tasks(config: Config) -> list[dict]:
    """One task per (source, n, k), in the order of the rows."""
    sources = [(f"toy T={config.temperature:g} s={config.similarity:g}", None)]
    sources += [(f"dirichlet c={c:g}", c) for c in config.concentrations]
    return [
        {
            "source": label,
            "concentration": concentration,  # None: the toy pair
            "temperature": config.temperature,
            "similarity": config.similarity,
            "n": n,
            "k": k,
            "pairs": config.pairs,
            "verifiers": list(config.verifiers),
            "enumeration_limit": config.enumeration_limit,
            "seed": config.seed + 1000 * index + n,  # one seed per (source, n): every k sees the same pairs
        }
        for index, (label, concentration) in enumerate(sources)
        for n in config.vocabularies
        for k in config.ks
    ]


def run_task(task: dict) -> list[dict]:
    """A sweep task: the rows of one (source, n, k), the two optima first, then each verifier."""
    n, k = task["n"], task["k"]
    generator = torch.Generator().manual_seed(task["seed"])
    if task["concentration"] is None:
        p, q = mdsd.toy_pair(n, task["temperature"], task["similarity"], generator, batch=task["pairs"])
    else:
        p, q = mdsd.dirichlet_pair(n, task["concentration"], generator, batch=task["pairs"])
    p, q = p.numpy(), q.numpy()
    base = {"source": task["source"], "n": n, "k": k, "pairs": task["pairs"]}
    rows, optimum = [], {}
    for law in (mdsd.IID(k), mdsd.WithoutReplacement(k)):
        values = np.asarray(mdsd.optimal_acceptance(p, q, law), dtype=float)  # batched dual
        optimum[law.name] = values
        rows.append(
            {
                **base,
                "method": f"OTM ({law.name})",
                "law": law.name,
                "mean": float(values.mean()),
                "gap_to_own_optimum": 0.0,
                "skipped": "",
            }
        )
    for name in task["verifiers"]:
        reason = skip_reason(name, k, q, task["enumeration_limit"])
        row = {
            **base,
            "method": name,
            "law": "",
            "mean": float("nan"),
            "gap_to_own_optimum": float("nan"),
            "skipped": reason or "",
        }
        if reason is None:
            v = mdsd.verifier(name, k)
            values = np.array([v.acceptance(pi, qi) for pi, qi in zip(p, q, strict=True)])
            own = optimum.get(v.law.name)
            if own is None:
                own = np.asarray(mdsd.optimal_acceptance(p, q, v.law), dtype=float)
            row.update(
                law=v.law.name,
                mean=float(values.mean()),
                gap_to_own_optimum=float((own - values).mean()),
            )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> Path:
    torch.set_num_threads(1)
    config = config_from_cli(Config, argv)
    if config.quick:
        config = replace(config, vocabularies=(10, 50), ks=(2, 3), pairs=2)
    out = output_dir("optimal_gap", config.output_dir)
    with partial_results(out, "optimal_gap", config, config.resume) as checkpoint:
        parts = run_tasks(
            run_task, tasks(config), ray=config.ray or None, checkpoint=checkpoint, desc="optimal gap"
        )
        rows = [row for part in parts for row in part]
        write_results(out, "optimal_gap", rows, config, seed=config.seed)
        plot(rows, config, out)
        (out / "optimal_gap.md").write_text(markdown(rows, config))
    print((out / "optimal_gap.md").read_text())
    print(f"results in {out}")
    return out


def markdown(rows: list[dict], config: Config) -> str:
    """Mean acceptance per (source, n, k) for k in {2, 4, 8} (or the ks run); '-' where skipped."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    shown_k = [k for k in config.ks if k in (2, 4, 8)] or list(config.ks)
    by_key = {(r["source"], r["n"], r["k"], r["method"]): r for r in rows}
    lines = [
        f"# Optimal acceptance vs verifiers ({config.pairs} pairs per source and n, seed {config.seed})",
        "",
        "Mean exact acceptance. 'best i.i.d./w.o.r. verifier gap' = OTM (without_replacement) minus the",
        "best of RRS, RRSw and K-SEQ: what verifiers of i.i.d. or without-replacement drafts leave behind.",
        "",
        "| source | n | k | " + " | ".join(methods) + " | best i.i.d./w.o.r. verifier gap |",
        "|---|---|---|" + "---|" * (len(methods) + 1),
    ]
    for source, n in dict.fromkeys((r["source"], r["n"]) for r in rows):
        for k in shown_k:
            cells = [by_key[(source, n, k, m)] for m in methods]
            means = {m: c["mean"] for m, c in zip(methods, cells, strict=True) if not c["skipped"]}
            verifiers = [means[m] for m in ("rrs", "rrsw", "kseq") if m in means]
            gap = means["OTM (without_replacement)"] - max(verifiers) if verifiers else float("nan")
            shown = [f"{c['mean']:.4f}" if not c["skipped"] else "-" for c in cells]
            lines.append(f"| {source} | {n} | {k} | " + " | ".join(shown) + f" | {gap:.4f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], config: Config, out: Path) -> None:
    sources = list(dict.fromkeys(r["source"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    shown_k = [k for k in config.ks if k in (2, 4, 8)] or list(config.ks[:3])
    fig, axes = plt.subplots(
        len(sources), len(shown_k), figsize=(4.5 * len(shown_k), 3.4 * len(sources)), squeeze=False
    )
    for i, source in enumerate(sources):
        for j, k in enumerate(shown_k):
            ax = axes[i, j]
            for m, method in enumerate(methods):
                pts = [
                    (r["n"], r["mean"])
                    for r in rows
                    if (r["source"], r["k"], r["method"]) == (source, k, method) and not r["skipped"]
                ]
                if pts:
                    style = "--" if method.startswith("OTM") else "o-"
                    ax.plot(*zip(*pts, strict=True), style, color=f"C{m}", label=method, markersize=3)
            ax.set_xscale("log")
            ax.set_title(f"{source}, k = {k}", fontsize=9)
            ax.set_xlabel("vocabulary n")
            ax.set_ylabel("acceptance")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "optimal_gap.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(sources), figsize=(5 * len(sources), 3.6), squeeze=False)
    largest = max(config.vocabularies)
    for ax, source in zip(axes[0], sources, strict=True):
        for m, method in enumerate(methods):
            pts = [
                (r["k"], r["gap_to_own_optimum"])
                for r in rows
                if (r["source"], r["n"], r["method"]) == (source, largest, method)
                and not r["skipped"]
                and not method.startswith("OTM")
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), "o-", color=f"C{m}", label=method)
        ax.set_title(f"{source}, n = {largest}", fontsize=9)
        ax.set_xlabel("k (drafts)")
        ax.set_ylabel("optimum of its law − acceptance")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "optimal_gap_vs_k.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    run_script(main)
