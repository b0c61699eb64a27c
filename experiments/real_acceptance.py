"""Exact acceptance of every verifier, and the optimum of every draft law, on real LLM distributions.

Pairs (p, q) are next-token distributions of Qwen2.5-Coder-1.5B (target) and -0.5B (draft) along
target-sampled continuations of MT-Bench, HumanEval and news prompts. By default they come from the
bundled corpus (:func:`mdsd.data.real_pairs`), which keeps the union of both models' top-256 tokens
and lumps the rest of the vocabulary into one tail token: every figure is then exact for that
lumped pair, and differs from the full-vocabulary one by at most min(p_tail, q_tail) (reported).
With ``--record`` the pairs are recorded afresh from the cached models at full vocabulary (151,936).

For every position, T and k: the exact acceptance ``mdsd.verifier(name, k).acceptance(p, q)`` of
each verifier and the optimum ``mdsd.optimal_acceptance(p, q, law)`` of the IID, WithoutReplacement,
Greedy (and, for k = 2, Hub) laws (docs/mathematics.md §1, §3). RRSw for k >= 3 is exact only by enumeration;
where that is too large the entry is left out and counted.

Writes results/real_acceptance/: real_acceptance.json/.csv (means with 95% intervals, gaps to each
verifier's own law optimum), per_position.npz, real_acceptance.png and summary.md.

    python experiments/real_acceptance.py --output-dir results/real_acceptance
    python experiments/real_acceptance.py --quick      # 16 positions, k 1 and 2: a smoke test
    python experiments/real_acceptance.py --record --ray --output-dir results/real_acceptance_full_vocab

The second (2 prompts per set, 16 new tokens: 82 positions per T, k = 1..8) took 11 minutes on 2 CPU cores
(with two worker processes, before the sweep runner).

The pairs are recorded (or read) here; the work on them is one task per (T, k, law or verifier), run by
:func:`mdsd.harness.sweep.run_tasks`: in this process by default, on Ray with --ray (a Ray instance on this
machine's cores) or --ray ADDRESS (a cluster: `ray start --head` on one node, `ray start --address
HEAD:6379` on the others, then --ray auto on the head); pip install -e ".[ray]" first. The pairs go to
Ray's object store once. Finished tasks are kept in <output dir>/real_acceptance.<hash>.tasks.jsonl until
the run completes; after an interruption or a failed task, --resume continues from them (with --record
the pairs are recorded again first: the same ones, from the same seed). Either way the files are the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import mdsd
import mdsd.data
from mdsd.harness.experiment import config_from_cli, output_dir, partial_results, run_script, write_results
from mdsd.harness.sweep import run_tasks


@dataclass(frozen=True)
class Config:
    """Exact verifier acceptance and law optima on real (p, q) pairs."""

    temperatures: tuple[float, ...] = field(default=(0.3, 0.6, 1.0), metadata={"help": "temperatures T"})
    ks: tuple[int, ...] = field(default=(1, 2, 3, 4, 5, 6, 7, 8), metadata={"help": "numbers of drafts k"})
    verifiers: tuple[str, ...] = field(
        default=("single", "rrs", "rrsw", "kseq", "spechub", "greedy", "topk", "optimal"),
        metadata={"help": "verifiers"},
    )
    laws: tuple[str, ...] = field(
        default=("iid", "without_replacement", "greedy"),
        metadata={"help": "draft laws whose optimum is computed"},
    )
    corpus: str = field(default="", metadata={"help": "corpus .npz ('' = the bundled one)"})
    max_positions: int = field(default=0, metadata={"help": "use only the first N positions (0 = all)"})
    quick: bool = field(default=False, metadata={"help": "smoke test: 16 positions, k 1 and 2"})
    record: bool = field(
        default=False, metadata={"help": "record fresh full-vocabulary pairs from cached models"}
    )
    prompts_per_set: int = field(default=2, metadata={"help": "--record: prompts per set"})
    max_new_tokens: int = field(default=16, metadata={"help": "--record: continuation length"})
    sample_temperature: float = field(default=0.6, metadata={"help": "--record: continuation temperature"})
    threads: int = field(default=2, metadata={"help": "--record: torch CPU threads"})
    seed: int = field(default=0, metadata={"help": "--record: continuation seed"})
    output_dir: str = mdsd.harness.experiment.output_dir_field()
    ray: str = mdsd.harness.experiment.ray_field()
    resume: bool = mdsd.harness.experiment.resume_field()


def _record_pairs(config: Config) -> dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    # Full-vocabulary (p, q) per temperature from the cached models: {T: (p [N, V], q [N, V], dataset [N])}.
    import torch

    from mdsd.hf.record import record_pairs

    torch.set_num_threads(config.threads)
    return record_pairs(
        config.temperatures,
        config.prompts_per_set,
        config.max_new_tokens,
        config.sample_temperature,
        config.seed,
    )


def _bundled_pairs(
    config: Config,
) -> dict[float, tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray]]:
    out = {}
    for t in config.temperatures:
        pairs = mdsd.data.real_pairs(t, config.corpus or None)
        keep = np.concatenate(
            [pairs.support >= 0, np.ones((len(pairs), 1), dtype=bool)], axis=1
        )  # drop padding
        out[t] = (pairs.p, pairs.q, pairs.dataset, keep)
    return out


def tasks(config: Config, positions: dict[float, int]) -> list[dict]:
    """One task per (T, k, law optimum or verifier), in the order of the rows; ``positions`` per T."""
    out = []
    for t in config.temperatures:
        for k in config.ks:
            base = {"temperature": t, "k": k, "positions": positions[t]}
            laws = list(config.laws) + (["hub"] if mdsd.laws.supports("hub", k) else [])
            out += [{**base, "kind": "optimal", "name": law} for law in laws]
            for name in config.verifiers:
                if mdsd.verifiers.supports(name, k):
                    out.append({**base, "kind": "verifier", "name": name})
    return out


def run_task(task: dict, pairs: dict) -> dict:
    """A sweep task: per-position values of one law's optimum or one verifier's exact acceptance.

    ``pairs[T] = (p [N, V], q [N, V], dataset [N], keep [N, V])``. A verifier's value is NaN (and
    counted in ``skipped``) where it is not computable exactly (RRSw, k >= 3: too many draft tuples).
    """
    p_all, q_all, _, keep = pairs[task["temperature"]]
    n, k, name = task["positions"], task["k"], task["name"]
    if task["kind"] == "optimal":
        law = mdsd.law_from_name(name, k)
        # Padding columns (p = q = 0) change no optimum, so the padded batch goes in whole.
        values = np.asarray(mdsd.optimal_acceptance(p_all[:n], q_all[:n], law), dtype=np.float64)
        return {"values": values.tolist(), "skipped": 0}
    v = mdsd.verifier(name, k)
    values, skipped = [], 0
    for r in range(n):
        try:
            values.append(float(v.acceptance(p_all[r][keep[r]], q_all[r][keep[r]])))
        except ValueError:  # RRSw k >= 3: exact enumeration too large for this pair
            values.append(float("nan"))
            skipped += 1
    return {"values": values, "skipped": skipped}


def _rows(t: float, results: dict[tuple[str, str, int], np.ndarray], dataset: np.ndarray, tail: np.ndarray):
    """Rows (means per method and k) at one temperature, from the per-position values of its tasks."""
    rows = []
    for (kind, name, k), values in results.items():
        done = values[np.isfinite(values)]
        row = {"temperature": t, "k": k, "kind": kind, "name": name, "positions": int(done.size)}
        if done.size:
            row |= {
                "mean": float(done.mean()),
                "ci95": float(1.96 * done.std(ddof=1) / np.sqrt(done.size)),
            }
            for ds in np.unique(dataset):
                sel = values[dataset == ds]
                row[f"mean_{ds}"] = float(np.nanmean(sel)) if np.isfinite(sel).any() else None
            # measured against the optimum of its own draft law (top-k's is p(T) by construction: none)
            own_law = mdsd.verifier(name, k).law.name if kind == "verifier" else None
            if own_law is not None and ("optimal", own_law, k) in results:
                optimum = results[("optimal", own_law, k)]
                ok = np.isfinite(values)
                row["own_law"] = own_law
                row["gap_to_own_optimum"] = float((optimum[ok] - values[ok]).mean())
            row["mean_tail_bound"] = float(tail.mean())
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    if config.quick:
        config = dataclasses.replace(config, max_positions=16, ks=(1, 2), record=False)
    out_dir = output_dir("real_acceptance", config.output_dir)
    if config.record:
        sources = {
            t: (p, q, d, np.ones(p.shape, dtype=bool)) for t, (p, q, d) in _record_pairs(config).items()
        }
        source = "recorded from the cached models, full vocabulary"
    else:
        sources = _bundled_pairs(config)
        source = "bundled corpus (top-256 union + one tail token per model)"
    positions = {
        t: len(p) if not config.max_positions else min(config.max_positions, len(p))
        for t, (p, *_) in sources.items()
    }
    todo = tasks(config, positions)
    with partial_results(out_dir, "real_acceptance", config, config.resume) as checkpoint:
        done = run_tasks(
            run_task,
            todo,
            shared={"pairs": sources},
            ray=config.ray or None,
            checkpoint=checkpoint,
            desc="real acceptance",
        )
        rows, per_position, skipped = [], {}, {}
        for t in config.temperatures:
            results = {}
            for task, result in zip(todo, done, strict=True):
                if task["temperature"] == t:
                    key = (task["kind"], task["name"], task["k"])
                    results[key] = np.array(result["values"], dtype=np.float64)
                    per_position[f"T{t}_{key[0]}_{key[1]}_k{key[2]}"] = results[key].astype(np.float32)
                    if result["skipped"]:
                        skipped[(t, task["name"], task["k"])] = result["skipped"]
            p_all, q_all, dataset, _ = sources[t]
            n = positions[t]
            tail = np.zeros(n) if config.record else np.minimum(p_all[:n, -1], q_all[:n, -1])
            rows += _rows(t, results, dataset[:n], tail)
        meta = {"source": source, "skipped": {f"T={t} {v} k={k}": c for (t, v, k), c in skipped.items()}}
        if config.record:  # the models and prompt sets the pairs were recorded from
            from mdsd.hf.record import recording_provenance

            meta.update(recording_provenance())
        write_results(out_dir, "real_acceptance", rows, config, config.seed, **meta)
        np.savez_compressed(out_dir / "per_position.npz", **per_position)
        _plot(rows, config, out_dir / "real_acceptance.png")
        (out_dir / "summary.md").write_text(_summary(rows, config, source, skipped))
    print((out_dir / "summary.md").read_text())
    print(f"results in {out_dir}")


def _plot(rows: list[dict], config: Config, path: Path) -> None:
    fig, axes = plt.subplots(
        1, len(config.temperatures), figsize=(5 * len(config.temperatures), 4), squeeze=False
    )
    for ax, t in zip(axes[0], config.temperatures, strict=True):
        series: dict[str, list[tuple[int, float]]] = {}
        for row in rows:
            if row["temperature"] == t and "mean" in row:
                series.setdefault(f"{row['kind'][:3]} {row['name']}", []).append((row["k"], row["mean"]))
        for label, points in sorted(series.items()):
            ks, means = zip(*sorted(points), strict=True)
            ax.plot(ks, means, "--o" if label.startswith("opt") else "-s", label=label, markersize=3)
        ax.set(title=f"T = {t}", xlabel="k drafts", ylabel="mean acceptance")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("Qwen2.5-Coder 1.5B/0.5B: exact acceptance (verifiers) and optimum (laws)")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def _summary(rows: list[dict], config: Config, source: str, skipped: dict) -> str:
    lines = ["# Exact acceptance on real Qwen2.5-Coder distributions", "", f"Pairs: {source}."]
    means = {(r["temperature"], r["kind"], r["name"], r["k"]): r["mean"] for r in rows if "mean" in r}
    positions = max((row["positions"] for row in rows), default=0)
    lines += [f"Positions: {positions} per temperature (MT-Bench, HumanEval, news continuations).", ""]
    for t in config.temperatures:
        lines += [f"## T = {t}", "", "| | " + " | ".join(f"k={k}" for k in config.ks) + " |"]
        lines.append("|---" * (len(config.ks) + 1) + "|")
        names = dict.fromkeys((row["kind"], row["name"]) for row in rows if row["temperature"] == t)
        for kind, name in sorted(names, key=lambda key: key[0] != "optimal"):  # optima first
            cells = []
            for k in config.ks:
                match = [
                    r for r in rows if (r["temperature"], r["kind"], r["name"], r["k"]) == (t, kind, name, k)
                ]
                if match and "mean" in match[0]:
                    gap = match[0].get("gap_to_own_optimum")
                    cells.append(f"{match[0]['mean']:.4f}" + (f" ({-gap:+.4f})" if gap is not None else ""))
                else:
                    cells.append("")
            label = f"optimum, {name} law" if kind == "optimal" else f"{name}"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        optimum = means.get((t, "optimal", "without_replacement", 2))
        gaps = {
            n: optimum - v
            for (tt, kind, n, k), v in means.items()
            if optimum is not None and (tt, kind, k) == (t, "verifier", 2)
        }
        if gaps:
            lines.append(
                f"\nGap to the optimum of drafts without replacement at k = 2 ({optimum:.4f}): "
                + ", ".join(f"{n} {g:.4f}" for n, g in sorted(gaps.items(), key=lambda item: item[1]))
                + " (negative: the verifier's own draft law does better than drawing without replacement)."
            )
        tails = [r["mean_tail_bound"] for r in rows if r["temperature"] == t and "mean_tail_bound" in r]
        if tails and tails[0] > 0:
            lines.append(
                f"\nMean lumping bound min(p_tail, q_tail): {tails[0]:.2e} (bundled corpus is truncated)."
            )
        lines.append("")
    lines.append(
        "Verifier cells: mean exact acceptance and, in brackets, its difference to the optimum of the "
        "verifier's own draft law (RRS, K-SEQ: iid; RRSw: without replacement; SpecHub: hub; greedy: greedy)."
    )
    if skipped:
        names = sorted({name for _, name, _ in skipped})
        which = "; ".join(f"{name}: k in {sorted({k for _, n, k in skipped if n == name})}" for name in names)
        lines.append(
            f"Not computed ({sum(skipped.values())} (T, k, position) cases): {which}. No exact acceptance "
            "is known there at these vocabulary sizes (RRSw: enumeration of the draft tuples)."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
