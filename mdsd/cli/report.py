"""``mdsd report``: optimal and exact acceptance of every draft law and verifier, for k = 1..4.

With no flags it runs the embedded default (:class:`mdsd.report.ReportConfig`): toy pairs over a
temperature grid, plus the bundled real pairs when available. It prints a table, writes
``results/report.json`` and ``results/report.csv`` (with the resolved config, seed, git revision and
package versions) and three PNG plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mdsd.experiment import write_results
from mdsd.report import ReportConfig, count_units, real_blocks, report, summarise, toy_blocks


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="optimal vs achieved acceptance of every draft law and verifier",
        description=__doc__.split("\n\n")[0],
    )
    hints = typing.get_type_hints(ReportConfig)
    for f in dataclasses.fields(ReportConfig):
        flag = "--" + f.name.replace("_", "-")
        helptext = f"{f.metadata['help']} (default: {f.default})"
        kind = hints[f.name]
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=helptext)
        elif typing.get_origin(kind) is tuple:
            parser.add_argument(
                flag, type=typing.get_args(kind)[0], nargs="+", default=f.default, help=helptext
            )
        else:
            parser.add_argument(flag, type=kind, default=f.default, help=helptext)
    parser.add_argument("--output-dir", type=Path, default=Path("results"), help="where results go")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ReportConfig)}
    config = ReportConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    blocks = toy_blocks(config) + (real_blocks(config) if config.real else [])
    with tqdm(total=count_units(config, blocks), desc="mdsd report", unit="row") as bar:
        rows = report(config, blocks, progress=bar.update)
    print(summarise(rows))
    skipped = sorted({(r["name"], r["k"], r["skipped"]) for r in rows if r["skipped"]})
    for name, k, reason in skipped:
        print(f"skipped {name} at k = {k}: {reason}")
    json_path, csv_path = write_results(args.output_dir, "report", rows, config, seed=config.seed)
    print(f"wrote {json_path} and {csv_path}")
    if not args.no_plots:
        for path in plot(rows, args.output_dir):
            print(f"wrote {path}")
    return 0


def plot(rows: list[dict], out_dir: Path) -> list[Path]:
    """Acceptance vs temperature per verifier, with its law's optimum (one figure per source: toy, and
    ``_real`` for the real pairs); the gap to the optimum vs k; the optimum of each law vs k. The plots
    against k average over temperatures (every temperature has the same number of pairs), one panel
    per source."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = [r for r in rows if not r["skipped"]]
    ks = sorted({r["k"] for r in done})
    paths = []

    verifiers = list(dict.fromkeys(r["name"] for r in done if r["kind"] == "verifier"))
    for source in dict.fromkeys(r["source"] for r in done if r["temperature"] is not None):
        chosen = [r for r in done if r["source"] == source and r["kind"] == "verifier"]
        cols = min(4, len(verifiers))
        rows_n = -(-len(verifiers) // cols)
        fig, axes = plt.subplots(rows_n, cols, figsize=(4 * cols, 3.3 * rows_n), squeeze=False)
        for ax, name in zip(axes.flat, verifiers, strict=False):
            for i, k in enumerate(ks):
                line = sorted(
                    (r["temperature"], r["mean"], r["optimum"])
                    for r in chosen
                    if (r["name"], r["k"]) == (name, k)
                )
                if not line:
                    continue
                t, mean, best = (np.array(c) for c in zip(*line, strict=True))
                color = f"C{i}"
                ax.plot(t, best, "-", color=color, linewidth=4, alpha=0.25, zorder=1)  # under the verifier
                ax.plot(t, mean, "o-", color=color, markersize=3, label=f"k = {k}", zorder=2)
            ax.plot([], [], "-", color="gray", linewidth=4, alpha=0.4, label="optimum of its law")
            ax.set_xscale("log")
            ax.set_ylim(0, 1.02)  # one scale for every panel: gaps of 0.01 look like 0.01
            ax.set_title(f"{_describe(source)}: {name}", fontsize=9)
            ax.set_xlabel("temperature T")
            ax.set_ylabel("acceptance")
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(verifiers) :]:
            ax.axis("off")
        fig.tight_layout()
        suffix = "" if source == "toy" else f"_{source}"
        paths.append(_save(fig, out_dir / f"report_acceptance_vs_temperature{suffix}.png"))

    sources = list(dict.fromkeys(r["source"] for r in done))
    for stem, kind, ylabel in (
        ("report_gap_vs_k.png", "verifier", "optimum of its law − acceptance"),
        ("report_optimum_vs_k.png", "optimum", "optimal acceptance α*"),
    ):
        fig, axes = plt.subplots(1, len(sources), figsize=(5 * len(sources), 3.6), squeeze=False)
        for ax, source in zip(axes[0], sources, strict=True):
            chosen = [r for r in done if r["source"] == source and r["kind"] == kind]
            for name in dict.fromkeys(r["name"] for r in chosen):
                points = []
                for k in ks:
                    values = [
                        r["gap" if kind == "verifier" else "mean"]
                        for r in chosen
                        if (r["name"], r["k"]) == (name, k)
                    ]
                    if values:
                        points.append((k, float(np.mean(values))))
                x, y = zip(*points, strict=True)
                ax.plot(x, y, "o-", label=name)
            ax.set_xticks(ks)
            ax.set_xlabel("k (drafts)")
            ax.set_ylabel(ylabel)
            ax.set_ylim(0, 1.02 if kind == "optimum" else None)
            ax.set_title(f"{_describe(source)} (mean over temperatures)", fontsize=9)
            ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(_save(fig, out_dir / stem))
    return paths


def _describe(source: str) -> str:
    if source == "real":  # n there is the lumped support, not the vocabulary
        return "real pairs (top-256 of p ∪ q + tail tokens)"
    return f"{source} pairs"


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
