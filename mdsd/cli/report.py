"""``mdsd report``: optimal and exact acceptance of every draft law and verifier, for k = 1..4.

With no flags it runs the embedded default (:class:`mdsd.harness.report.ReportConfig`): toy pairs over a
temperature grid, plus the bundled real pairs when available. It prints a table, writes
``results/report.json`` and ``results/report.csv`` (with the resolved config, seed, git revision and
package versions) and three PNG plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mdsd.harness.experiment import config_from_args, ensure_output_dir, write_results
from mdsd.harness.report import ReportConfig, count_units, real_blocks, report, summarise, toy_blocks


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
    config = config_from_args(ReportConfig, args)  # a field's check names its flag (--n, --laws, ...)
    ensure_output_dir(args.output_dir)  # before the work, not after it
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
        low = min(_floor(min(min(r["mean"], r["optimum"]) for r in chosen)), 0.9)
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
            # one scale for every panel of the figure (gaps of 0.01 look alike), from the data's lowest value:
            # on real pairs acceptance lies in 0.8-1, where a 0-1 axis flattens the differences that matter
            ax.set_ylim(low, 1.0 + 0.02 * (1.0 - low))
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
            at_zero = []  # verifiers optimal for their law: lines on top of each other at 0, drawn once
            for i, name in enumerate(dict.fromkeys(r["name"] for r in chosen)):
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
                if kind == "verifier" and max(abs(v) for v in y) < 1e-9:
                    at_zero.append(name)
                    continue
                ax.plot(x, y, marker=MARKERS[i % len(MARKERS)], label=name)
            if at_zero:
                ax.axhline(
                    0.0, color="k", linewidth=1.5, label=f"0 (optimal for its law): {', '.join(at_zero)}"
                )
            ax.set_xticks(ks)
            ax.set_xlabel("k (drafts)")
            ax.set_ylabel(ylabel)
            if kind == "optimum":
                ax.set_ylim(0, 1.02)  # gaps: automatic limits, with a margin that shows the line at 0
            ax.set_title(f"{_describe(source)} (mean over temperatures)", fontsize=9)
            ax.legend(fontsize=7, loc="upper left" if kind == "verifier" else "best")
        fig.tight_layout()
        paths.append(_save(fig, out_dir / stem))
    return paths


MARKERS = "os^vDP*Xhp"  # a marker per line, so that lines that meet stay apart


def _floor(value: float) -> float:
    """The axis floor under ``value``: a multiple of 0.05 below it (0 at most), for acceptance plots.

    >>> _floor(0.83), _floor(0.2), _floor(-0.1)
    (0.8, 0.2, 0.0)
    """
    return max(0.0, math.floor(round(value * 20, 9)) / 20)


def _describe(source: str) -> str:
    if source == "real":  # n there is the lumped support, not the vocabulary
        return "real pairs (top-256 of p ∪ q + tail tokens)"
    return f"{source} pairs"


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
