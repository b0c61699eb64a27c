"""Trained drafters against the 0.5B draft: held-out acceptance, learning curves and forward cost.

For each feature head (``mdsd drafters train``'s folders) and the real pair's 0.5B draft model, at every
held-out position of the features folder the heads were trained on (the same split: the heads' own
``--held-out`` and ``--seed``), the exact single-draft acceptance Σ min(p, q) and the optimal acceptances
α*_2, α*_4 of 2 and 4 i.i.d. drafts (:func:`mdsd.drafters.evaluate.position_acceptance`; the head reads the
target's features, teacher forcing: what it drafts at depth 1; answer positions only). Each drafter's mean
comes with a 95% bootstrap interval over sequences, and every pair of drafters with the paired difference
and its interval (positions of one sequence are not independent: whole sequences are resampled).

Beside them: each head's learning curve (held-out acceptance against training tokens, from its
``training.json``, on a log axis) and each drafter's forward cost against the target's, from the weights
(:func:`mdsd.costs.forward_cost`: multiply-adds and bytes per token at batch 1) and, where a
``benchmarks/gpu_fast.py`` ``heads`` file is given, measured on a GPU (random weights of the same shapes,
captured in a CUDA graph).

The same measures by training set (``by_set`` in the JSON, ``drafters_by_set.csv``: a corpus's chat and code
sequences apart, each with its interval), where the features' record says which set a sequence came from.

``--features`` may name several folders of the same sequences read with different feature layers (the
final hidden state, or EAGLE-3's several layers: ``mdsd drafters features --feature-layers``): each head is
read on the folder of its own layers, the 0.5B draft on the first, all on the same positions, so heads of
either kind compare paired.

With ``--depths 1 2 3 4``, each head's measures at those depths too (``by_depth``, ``drafters_by_depth.csv``):
at depth d the head reads its own outputs chained d − 1 times (:func:`mdsd.drafters.train.unrolled`, what
training with ``--unroll`` sees). Every position of such a pass reads chained features, where a decoding
step's context holds the target's up to its last accepted token: a harsher test than decoding's depth d,
and the same for every head, so it compares heads and shows the decay with depth, not a decode's rate.

Writes ``drafters.json``/``.csv`` (one row per drafter and measure), ``drafters_pairs.csv`` (paired
differences), ``drafters_by_set.csv``, ``drafters_by_depth.csv`` and ``drafters_curves.png``.

    python experiments/drafters.py --heads ~/.cache/mdsd/heads/corpus-kl ~/.cache/mdsd/heads/corpus-alpha \
        --features ~/.cache/mdsd/features/corpus-qwen2.5-coder-1.5b \
        --gpu benchmarks/results/gpu_fast_h200_1128_heads.json --output-dir results/drafters
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from tqdm import tqdm

import mdsd
from mdsd.drafters.evaluate import ACCEPTANCES, paired_difference, position_acceptance
from mdsd.drafters.train import TRAINING, HeadData
from mdsd.harness.experiment import config_from_cli, output_dir, run_script, write_results
from mdsd.validation import cpu_dtype


@dataclass(frozen=True)
class Config:
    """Trained drafters against the 0.5B draft on held-out positions."""

    heads: tuple[str, ...] = field(default=(), metadata={"help": "feature heads' folders"})
    features: tuple[str, ...] = field(
        default=(),
        metadata={"help": "the features folder(s) the heads were trained on (one per kind of feature layer)"},
    )
    pair: str = field(default="qwen2.5-coder", metadata={"help": "the real pair (its draft is compared)"})
    positions: int = field(default=4096, metadata={"help": "held-out answer positions (whole sequences)"})
    depths: tuple[int, ...] = field(
        default=(1,),
        metadata={"help": "a head's depths measured (d > 1: its own outputs chained d - 1 times, unrolled)"},
    )
    gpu: tuple[str, ...] = field(
        default=(), metadata={"help": "benchmarks/gpu_fast.py heads or fused_heads results (optional)"}
    )
    dtype: str = field(default="auto", metadata={"help": "the models' dtype on the CPU"})
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap"})
    output_dir: str = field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})


def interval(values: np.ndarray, sequences: np.ndarray, seed: int) -> tuple[float, float, float]:
    """The mean of ``values`` and its 95% bootstrap interval over sequences."""
    mean, (low, high) = paired_difference(values, np.zeros_like(values), sequences, seed=seed)
    return mean, low, high


def gpu_row(paths: tuple[str, ...], model: str, shape: tuple[int, int] | None) -> dict:
    """The B = 1, t = 1 row for ``model`` ("draft", "head", or "head-fused": a head reading several layers)
    of the first of the gpu_fast files ``paths`` whose ``heads`` or ``fused_heads`` section has one (each
    row's ratios are against the target's forward in its own call): for a head of ``shape`` (MLP width,
    draft vocabulary), the measured head of the same width and the nearest vocabulary at or above its own (a
    head's time hardly depends on either: 0.060-0.069 of the target's over a threefold range of weights on
    the H200)."""
    rows = []
    for path in paths:
        results = json.loads(Path(path).read_text())
        for section in ("heads", "fused_heads"):
            rows += [r for r in results.get(section, []) if r["B"] == 1 and r["tokens"] == 1]
    rows = [r for r in rows if r["model"] == model]
    if shape is not None:
        rows = sorted(
            (r for r in rows if r["intermediate"] == shape[0] and r["draft_vocab"] >= shape[1]),
            key=lambda r: r["draft_vocab"],
        )
    return rows[0] if rows else {}


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    if not config.heads or not config.features:
        raise ValueError("--heads and --features are required")
    out = output_dir("drafters", config.output_dir)
    trainings = {}
    for folder in config.heads:
        path = Path(folder).expanduser() / TRAINING
        if not path.is_file():
            raise ValueError(f"--heads: {folder} has no {TRAINING} (not a finished head)")
        trainings[Path(folder).name] = json.loads(path.read_text())
    splits = {(t["config"]["held_out"], t["config"]["seed"]) for t in trainings.values()}
    if len(splits) != 1:
        raise ValueError(f"--heads: trained on different held-out splits {sorted(splits)}")
    ((held_out, split_seed),) = splits
    datas: dict[tuple[int, ...], HeadData] = {}
    for folder in config.features:
        data = HeadData(Path(folder).expanduser(), held_out, split_seed)
        if data.feature_layers in datas:
            raise ValueError(f"--features: two folders of feature layers {list(data.feature_layers)}")
        first = next(iter(datas.values()), data)
        if data.sequences != first.sequences or not all(
            bool((a["tokens"] == b["tokens"]).all()) for a, b in zip(data.files, first.files, strict=True)
        ):
            raise ValueError(f"--features: {folder} holds other sequences than {config.features[0]}")
        datas[data.feature_layers] = data
    data = next(iter(datas.values()))

    dtype = cpu_dtype(config.dtype)
    target_dir, draft_dir = mdsd.hf.pair_paths(config.pair)
    target, draft, _ = mdsd.hf.load_pair(target_dir, draft_dir, dtype)
    digest = mdsd.hf.describe_model(target_dir)["weights_sha256"]
    drafters = {name: Path(folder).expanduser() for name, folder in zip(trainings, config.heads, strict=True)}
    target_cost = mdsd.costs.forward_cost(target)

    per_drafter, rows, heads = {}, [], {}
    for name in tqdm([*drafters, "draft-0.5b"], desc="drafters", unit="drafter"):
        if name == "draft-0.5b":
            model, shape = draft, None
        else:
            model = heads[name] = mdsd.drafters.FeatureHead.load(drafters[name], target, digest)
            shape = (model.head_config.layer.intermediate_size, model.head_config.draft_vocab)
        layers = model.feature_layers if shape else ()
        if shape and layers not in datas:
            raise ValueError(f"--features: no folder of feature layers {list(layers)} for {name}")
        values = position_acceptance(datas[layers] if shape else data, model, limit=config.positions)
        per_drafter[name] = values
        cost = mdsd.costs.forward_cost(model)
        gpu = gpu_row(config.gpu, ("head-fused" if layers else "head") if shape else "draft", shape)
        row = {
            "drafter": name,
            "feature_layers": list(layers),
            "loss": trainings[name]["config"]["loss"] if name in trainings else "(pretrained)",
            "intermediate": shape[0] if shape else None,
            "draft_vocab": shape[1] if shape else None,
            "positions": int(values["acceptance"].size),
            "sequences": int(np.unique(values["sequence"]).size),
            "multiply_adds_ratio": cost.multiply_adds / target_cost.multiply_adds,
            "bytes_ratio": cost.bytes / target_cost.bytes,
            "gpu_captured_ratio": gpu.get("ratio_captured"),
            "gpu_fused_ratio": gpu.get("ratio_fused"),
            "gpu_shape": [gpu["intermediate"], gpu["draft_vocab"]] if gpu else None,
            "train_tokens_seen": trainings[name]["curve"][-1]["tokens"] if name in trainings else None,
        }
        for measure in ACCEPTANCES:
            mean, low, high = interval(values[measure], values["sequence"], config.seed)
            row |= {measure: mean, f"{measure}_low": low, f"{measure}_high": high}
        rows.append(row)

    by_depth = []  # the heads' acceptances at each of --depths (the 0.5B draft's are its depth 1's)
    for name, model in heads.items():
        for depth in sorted(set(config.depths)):
            values = per_drafter[name]
            if depth > 1:
                values = position_acceptance(
                    datas[model.feature_layers], model, limit=config.positions, depth=depth
                )
            row = {"drafter": name, "depth": depth, "positions": int(values["acceptance"].size)}
            for measure in ACCEPTANCES:
                mean, low, high = interval(values[measure], values["sequence"], config.seed)
                row |= {measure: mean, f"{measure}_low": low, f"{measure}_high": high}
            by_depth.append(row)

    names = np.array(data.sets("held_out"), dtype=object)
    by_set = []
    for name, values in per_drafter.items():
        where = names[values["sequence"]]
        for which in sorted({w for w in where if w is not None}):
            mine = where == which
            row = {"drafter": name, "set": which, "positions": int(mine.sum())}
            for measure in ACCEPTANCES:
                mean, low, high = interval(values[measure][mine], values["sequence"][mine], config.seed)
                row |= {measure: mean, f"{measure}_low": low, f"{measure}_high": high}
            by_set.append(row)

    pairs = []
    for a, b in itertools.combinations(per_drafter, 2):
        if not np.array_equal(per_drafter[a]["sequence"], per_drafter[b]["sequence"]):
            raise AssertionError(f"{a} and {b} were measured on different positions")
        for measure in ACCEPTANCES:
            mean, (low, high) = paired_difference(
                per_drafter[a][measure], per_drafter[b][measure], per_drafter[a]["sequence"], seed=config.seed
            )
            pairs.append(
                {
                    "a": a,
                    "b": b,
                    "measure": measure,
                    "difference": mean,
                    "low": low,
                    "high": high,
                    "significant": not low <= 0.0 <= high,
                }
            )
    write_results(
        out,
        "drafters",
        rows,
        config,
        config.seed,
        models={"target": mdsd.hf.describe_model(target_dir), "draft": mdsd.hf.describe_model(draft_dir)},
        pairs=pairs,
        by_set=by_set,
        by_depth=by_depth,
        curves={name: t["curve"] for name, t in trainings.items()},
        trainings={
            name: {k: t[k] for k in ("config", "data", "command", "git_revision")}
            for name, t in trainings.items()
        },
        features=list(config.features),
    )
    with open(out / "drafters_pairs.csv", "w") as f:
        f.write("a,b,measure,difference,low,high,significant\n")
        for p in pairs:
            f.write(
                f"{p['a']},{p['b']},{p['measure']},{p['difference']:.6f},{p['low']:.6f},{p['high']:.6f},{p['significant']}\n"
            )
    with open(out / "drafters_by_set.csv", "w") as f:
        f.write("drafter,set,positions," + ",".join(f"{m},{m}_low,{m}_high" for m in ACCEPTANCES) + "\n")
        for r in by_set:
            figures = ",".join(f"{r[k]:.6f}" for m in ACCEPTANCES for k in (m, f"{m}_low", f"{m}_high"))
            f.write(f"{r['drafter']},{r['set']},{r['positions']},{figures}\n")
    with open(out / "drafters_by_depth.csv", "w") as f:
        f.write("drafter,depth,positions," + ",".join(f"{m},{m}_low,{m}_high" for m in ACCEPTANCES) + "\n")
        for r in by_depth:
            figures = ",".join(f"{r[k]:.6f}" for m in ACCEPTANCES for k in (m, f"{m}_low", f"{m}_high"))
            f.write(f"{r['drafter']},{r['depth']},{r['positions']},{figures}\n")
    plot(trainings, rows, out / "drafters_curves.png")
    for row in rows:
        print(
            f"{row['drafter']:>14}: acceptance {row['acceptance']:.3f} [{row['acceptance_low']:.3f}, "
            f"{row['acceptance_high']:.3f}], alpha_2 {row['alpha_2']:.3f}, alpha_4 {row['alpha_4']:.3f} "
            f"[{row['alpha_4_low']:.3f}, {row['alpha_4_high']:.3f}]; cost {row['multiply_adds_ratio']:.3f}"
        )
    for r in by_set:
        print(
            f"{r['drafter']:>14} on {r['set']}: acceptance {r['acceptance']:.3f} [{r['acceptance_low']:.3f}, "
            f"{r['acceptance_high']:.3f}], alpha_4 {r['alpha_4']:.3f} ({r['positions']} positions)"
        )
    for r in by_depth:
        print(
            f"{r['drafter']:>14} at depth {r['depth']}: acceptance {r['acceptance']:.3f} "
            f"[{r['acceptance_low']:.3f}, {r['acceptance_high']:.3f}], alpha_4 {r['alpha_4']:.3f}"
        )
    for p in pairs:
        mark = "*" if p["significant"] else " "
        print(
            f"{p['a']:>14} - {p['b']:<14} {p['measure']:>10}: {p['difference']:+.4f} "
            f"[{p['low']:+.4f}, {p['high']:+.4f}]{mark}"
        )


def plot(trainings: dict, rows: list[dict], path: Path) -> None:
    """Held-out acceptance (single draft, α*_4) against training tokens, one line per head; the 0.5B draft's
    level (on the positions of this run) as a dashed line."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    draft = next(r for r in rows if r["drafter"] == "draft-0.5b")
    for ax, measure, label in zip(
        axes, ("acceptance", "alpha_4"), ("single draft Σ min(p, q)", "α*_4 (4 i.i.d. drafts)"), strict=True
    ):
        for training in trainings.values():
            curve = training["curve"]
            ax.plot(
                [c["tokens"] for c in curve],
                [c[measure] for c in curve],
                marker="o",
                label=f"head, loss {training['config']['loss']}",
            )
        ax.axhline(draft[measure], color="k", ls="--", lw=1, label="0.5B draft")
        ax.set_xscale("log")
        ax.set_xlabel("training tokens seen")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out acceptance (teacher-forced, depth 1)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    run_script(main)
