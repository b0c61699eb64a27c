"""Specialised drafters (seed 004) on held-out tasks: exact acceptance along the target's answers, per drafter
and prompt set, and the greedy chains it decodes.

For the first ``--prompts-per-set`` prompts of each prompt set (held-out translation sets, and code and chat
out of their domain), the target's greedy answer (at most ``--max-new-tokens``) is generated once and kept
(``answers.json``, reused by a rerun with the same config). Then, for each drafter (the real pair's 0.5B
draft, and any folders: small drafters of ``mdsd drafters pretrain``/``finetune``, feature heads), one
teacher-forced forward over every prompt + answer gives at each answer position
(:mod:`mdsd.drafters.answers`):

* at T = 1: the exact single-draft acceptance Σ min(p, q) and the optimal acceptance α*_k of k i.i.d.
  drafts (depth 1; k in ``--ks``, 2 and 4 by default);
* at T = 0: whether the drafter's greedy token is the target's, and from that the tokens per target forward
  of greedy decoding with a chain of 1 and of 4 drafts, exactly as the decoder emits them
  (:func:`mdsd.drafters.answers.greedy_chain`; a feature head at depth 1 only: deeper it drafts from its own
  features).

Each figure has a 95% bootstrap interval over prompts (positions of one answer are not independent), and for
each set the drafters are compared pairwise on the same prompts (paired bootstrap). The table of drafters
against sets is the language matrix of seed 004 (its Figure 5: a drafter finetuned on one language, read on
the others). ``--gpu`` adds, for each drafter with a measured or predicted captured forward time ratio c to
the target's (``benchmarks/results/drafter_cost.json`` or a gpu_fast heads file, by shape:
:func:`mdsd.costs.cost_ratio`), the speedup of
greedy chain:k at B = 1 over autoregressive decoding, forwards only: tokens per step / (1 + k·c).

    python experiments/specialised_drafters.py \\
        --drafters ~/.cache/mdsd/small/deu-pf ~/.cache/mdsd/small/deu-f \\
        --sets translate-deu translate-fra humaneval mt-bench --prompts-per-set 32 \\
        --output-dir results/specialised_drafters

Writes ``specialised_drafters.json``/``.csv`` (one row per set and drafter; a trained small drafter's row
says what it was trained on: :func:`mdsd.drafters.stages.trained_on`), ``positions.npz`` (every position's
values), ``specialised_drafters.png`` (the matrix), ``summary.md`` (the matrix's tables, written from the
rows: :func:`summary`) and, where finetuned drafters are read on their own task, ``learning_curves.png``
(against their finetuning tokens, F and P→F: seed 004's Figure 4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

import mdsd
import mdsd.drafters.stages
from mdsd.costs.ratios import cost_ratio
from mdsd.drafters.answers import greedy_chain, position_acceptance, teacher_forced_logits
from mdsd.harness.comparison import INTERVAL_METHOD, paired_ratio, ratio_interval
from mdsd.harness.experiment import config_from_cli, output_dir, run_script, write_results
from mdsd.outputs import provenance
from mdsd.validation import cpu_dtype

DEPTHS = (1, 4)  # greedy chains computed at T = 0


@dataclass(frozen=True)
class Config:
    """Drafters read along the target's answers to held-out prompts."""

    drafters: tuple[str, ...] = field(
        default=(), metadata={"help": "drafter folders (the 0.5B draft is added)"}
    )
    sets: tuple[str, ...] = field(
        default=("translate-deu", "translate-fra", "humaneval", "mt-bench"), metadata={"help": "prompt sets"}
    )
    prompts_per_set: int = field(default=32, metadata={"help": "first prompts of each set"})
    ks: tuple[int, ...] = field(
        default=(2, 4), metadata={"help": "k of the optimal acceptance α*_k of k i.i.d. drafts (T = 1)"}
    )
    max_prompt_tokens: int = field(default=256, metadata={"help": "templated prompt cap"})
    max_new_tokens: int = field(default=64, metadata={"help": "the target's answer cap"})
    pair: str = field(default="qwen2.5-coder", metadata={"help": "the real pair (its draft is compared)"})
    gpu: str = field(
        default="benchmarks/results/drafter_cost.json",
        metadata={"help": "forward time ratios by drafter shape ('' for none)"},
    )
    dtype: str = field(default="float32", metadata={"help": "the models' dtype on the CPU"})
    quick: bool = field(default=False, metadata={"help": "tiny random models and token prompts (smoke run)"})
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap"})
    output_dir: str = field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})


def answers(config: Config, target, tokenizer, out: Path) -> dict[str, list[tuple[list[int], list[int]]]]:
    """(prompt, greedy answer) token ids per set, generated once and kept in ``out/answers.json``: a rerun
    with the same prompt and answer lengths reuses every set the file holds and adds the others to it, each
    set with the :func:`mdsd.outputs.provenance` of the run that generated it (``provenance`` by set)."""
    path = out / "answers.json"
    key = {k: getattr(config, k) for k in ("prompts_per_set", "max_prompt_tokens", "max_new_tokens")}
    saved = json.loads(path.read_text()) if path.is_file() else {}
    same = {k: v for k, v in saved.get("key", {}).items() if k != "sets"} == key  # "sets": older files' key
    kept = saved["answers"] if same else {}
    made = saved.get("provenance", {}) if same else {}
    missing = [name for name in config.sets if name not in kept]
    decoder = mdsd.TreeDecoder(target, None, None, temperature=0.0)
    for name in tqdm(missing, desc="answers", unit="set"):
        if config.quick:
            gen = np.random.default_rng(config.sets.index(name))
            prompts = [gen.integers(1, 64, size=6).tolist() for _ in range(config.prompts_per_set)]
        else:
            found = mdsd.data.prompts(name, config.prompts_per_set, tokenizer, config.max_prompt_tokens)
            prompts = [list(p.input_ids) for p in found]
        outs = []
        for lo in range(0, len(prompts), 8):
            outs += decoder.generate_batch(prompts[lo : lo + 8], config.max_new_tokens)
        kept[name] = [(p, o.tokens.tolist()) for p, o in zip(prompts, outs, strict=True)]
        made[name] = provenance(path.parent)
    if missing:
        path.write_text(json.dumps({"key": key, "answers": kept, "provenance": made}))
    return {name: [tuple(x) for x in kept[name]] for name in config.sets}


def load_drafters(config: Config, target, target_dir: Path, draft) -> tuple[dict, dict[str, Path]]:
    """({name: drafter}, {name: folder}): the 0.5B draft and the ``--drafters`` folders, named by folder."""
    drafters, folders = {"draft-0.5b": draft}, {}
    digest = mdsd.hf.describe_model(target_dir)["weights_sha256"] if not config.quick else None
    tokenizer = (
        "" if config.quick else mdsd.drafters.small.tokenizer_digest(mdsd.hf.load_tokenizer(target_dir))
    )
    for folder in config.drafters:
        path = Path(folder).expanduser()
        if path.name in drafters:
            raise ValueError(f"--drafters: two drafters are named {path.name!r} (rows are named by folder)")
        if mdsd.drafters.small.is_small(path):
            if not config.quick:  # a set it was trained on is not held out
                mdsd.drafters.stages.check_heldout(path, config.sets)
            drafters[path.name] = mdsd.drafters.SmallDrafter.load(path, target, digest, tokenizer)
        elif mdsd.drafters.is_head(path):
            drafters[path.name] = mdsd.drafters.FeatureHead.load(path, target, digest)
        else:
            raise ValueError(f"--drafters: {folder} holds neither a small drafter nor a feature head")
        folders[path.name] = path
    return drafters, folders


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    out = output_dir("specialised_drafters", config.output_dir)
    if config.quick:
        from mdsd.hf.tiny import tiny_pair

        target, draft = tiny_pair(0)
        target_dir, tokenizer, models = None, None, {"target": "tiny random", "draft": "tiny random"}
    else:
        target_dir, draft_dir = mdsd.hf.pair_paths(config.pair)
        target, draft, tokenizer = mdsd.hf.load_pair(target_dir, draft_dir, cpu_dtype(config.dtype))
        models = {"target": mdsd.hf.describe_model(target_dir), "draft": mdsd.hf.describe_model(draft_dir)}
    gpu = {}
    if config.gpu and not config.quick:
        gpu = {r["model"]: r for r in json.loads(Path(config.gpu).read_text())["rows"]}
    data = answers(config, target, tokenizer, out)
    drafters, folders = load_drafters(config, target, target_dir, draft)
    rows, positions, steps = [], {}, {}
    names = list(drafters)
    heads = {n for n in names if isinstance(drafters[n], mdsd.drafters.FeatureHead)}
    alphas = [f"alpha_{k}" for k in config.ks]
    for set_name, pairs in tqdm(data.items(), desc="sets", unit="set"):
        values = {n: {k: [] for k in ("acceptance", *alphas, "agree", "prompt")} for n in names}
        per_prompt = {n: {d: [] for d in DEPTHS} for n in names}
        for i, (prompt, answer) in enumerate(tqdm(pairs, desc=set_name, unit="prompt", leave=False)):
            if len(answer) < 2:
                continue
            p, qs = teacher_forced_logits(target, list(drafters.values()), torch.tensor(prompt + answer),
                                          len(prompt))  # fmt: skip
            for name, q in zip(names, qs, strict=True):
                soft = position_acceptance(p, q, 1.0, config.ks)
                hard = position_acceptance(p, q, 0.0)["agree"]
                for k in ("acceptance", *alphas):
                    values[name][k].append(soft[k])
                values[name]["agree"].append(hard)
                values[name]["prompt"].append(np.full(hard.size, i))
                for d in DEPTHS:
                    chain = [1, *greedy_chain(hard[1:], d)] if name in heads else greedy_chain(hard, d)
                    per_prompt[name][d].append((len(answer), len(chain)))
        for name in names:
            ratio, ratio_of = cost_ratio(gpu, drafters[name])
            arrays = {k: np.concatenate(v) for k, v in values[name].items()}
            positions[f"{name}/{set_name}"] = arrays
            steps[(name, set_name)] = per_prompt[name]
            row = {
                "drafter": name,
                "set": set_name,
                "prompts": len(per_prompt[name][1]),
                "positions": arrays["agree"].size,
            }
            for k in ("acceptance", *alphas, "agree"):
                sums = np.bincount(arrays["prompt"], weights=arrays[k].astype(float))
                counts = np.bincount(arrays["prompt"])
                keep = counts > 0
                value, ci = ratio_interval(sums[keep], counts[keep], seed=config.seed)
                row |= {k: value, f"{k}_ci95": ci}
            for d in DEPTHS:
                if name in heads and d > 1:
                    continue
                tokens, forwards = zip(*per_prompt[name][d], strict=True)
                value, ci = ratio_interval(tokens, forwards, seed=config.seed)
                row |= {f"greedy_chain{d}": value, f"greedy_chain{d}_ci95": ci}
                if ratio is not None:
                    row[f"greedy_chain{d}_speedup"] = value / (1 + d * ratio)
            row |= {"gpu_ratio": ratio, "gpu_ratio_of": ratio_of}
            small = isinstance(drafters[name], mdsd.drafters.SmallDrafter)
            if small and name in folders and (folders[name] / mdsd.drafters.stages.TRAINING).is_file():
                row |= mdsd.drafters.stages.trained_on(folders[name])
            rows.append(row)
    pairs = []
    for set_name in config.sets:
        for a in names:
            for b in names:
                if a >= b:
                    continue
                ta, fa = zip(*steps[(a, set_name)][1], strict=True)
                tb, fb = zip(*steps[(b, set_name)][1], strict=True)
                ratio, ci = paired_ratio(ta, fa, tb, fb, seed=config.seed)
                pairs.append({"set": set_name, "a": a, "b": b, "greedy_chain1_ratio": ratio, "ci95": ci})
    np.savez_compressed(
        out / "positions.npz",
        **{k.replace("/", "__") + f"__{m}": v[m] for k, v in positions.items() for m in v},
    )
    write_results(out, "specialised_drafters", rows, config, config.seed, models=models, pairs=pairs,
                  interval_method=INTERVAL_METHOD)  # fmt: skip
    plot(rows, config.sets, names, out / "specialised_drafters.png")
    (out / "summary.md").write_text(summary(rows, config.sets, names, models))
    if any(r.get("home") for r in rows):
        plot_learning_curves(rows, out / "learning_curves.png")
    for row in rows:
        print(
            f"{row['drafter']:>16} {row['set']:>14}: T=1 acceptance {row['acceptance']:.3f}"
            + "".join(f", {a} {row[a]:.3f}" for a in alphas)
            + f"; T=0 agree {row['agree']:.3f}, chain:1 {row['greedy_chain1']:.3f}"
            + (f", chain:4 {row['greedy_chain4']:.3f}" if "greedy_chain4" in row else "")
        )
    print(f"results in {out}")


def summary(rows: list[dict], sets, names, models: dict) -> str:
    """The language matrix as Markdown tables, drafters (rows) against sets (columns), one table a measure,
    each cell the mean over prompts' positions with its 95% interval; a finetuned drafter's own task in bold.
    Every figure is read from ``rows``."""
    cell = {(r["drafter"], r["set"]): r for r in rows}
    ks = sorted(int(k.removeprefix("alpha_")) for k in rows[0] if k.startswith("alpha_") and "_ci" not in k)
    measures = [
        ("agree", "Greedy agreement with the target (T = 0)"),
        ("acceptance", "Single-draft acceptance Σ min(p, q) at T = 1"),
        *((f"alpha_{k}", f"α*_{k}, the optimum of {k} i.i.d. drafts at T = 1") for k in ks[-1:]),
        *((f"greedy_chain{d}", f"Tokens per target forward, greedy chain:{d}") for d in DEPTHS),
        ("greedy_chain1_speedup", "Predicted chain:1 speedup over autoregressive decoding (B = 1, forwards)"),
    ]

    def label(name: str) -> str:
        r = cell[(name, sets[0])]
        if r.get("stage") == "finetune":
            kind = "P→F" if r.get("init") else "F"
            return f"{name} ({kind} on {r.get('home')}, {r['train_tokens']:,} tokens)"
        return f"{name} (pretrained only)" if r.get("stage") == "pretrain" else name

    target = models.get("target")
    lines = [
        "# Specialised drafters: the language matrix",
        "",
        f"Target {target.get('name') if isinstance(target, dict) else target}; "
        f"{cell[(names[0], sets[0])]['prompts']} prompts a set; means over answer positions with 95% "
        f"{INTERVAL_METHOD}. Bold: a finetuned drafter on its own task. From specialised_drafters.json.",
    ]
    for key, title in measures:
        lines += [
            "",
            f"## {title}",
            "",
            "| drafter | " + " | ".join(sets) + " |",
            "|---" * (len(sets) + 1) + "|",
        ]
        for name in names:
            cells = []
            for s in sets:
                r = cell[(name, s)]
                if r.get(key) is None:
                    cells.append("—")
                    continue
                text = f"{r[key]:.3f}"
                if f"{key}_ci95" in r:
                    lo, hi = r[f"{key}_ci95"]
                    text += f" [{lo:.3f}, {hi:.3f}]"
                cells.append(f"**{text}**" if r.get("home") == s else text)
            lines.append(f"| {label(name)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_learning_curves(rows: list[dict], path: Path) -> None:
    """Seed 004's Figure 4: on each finetuned drafter's own task, greedy agreement (T = 0) and Σ min(p, q)
    (T = 1) against its finetuning tokens on a log axis, F (a fresh drafter) and P→F (from a pretrained one)
    as two lines, with the drafters that were not finetuned there (pretrained only, the 0.5B draft) as
    levels."""
    homes = sorted({r["home"] for r in rows if r.get("home")})
    measures = (("agree", "greedy agreement"), ("acceptance", "Σ min(p, q) at T = 1"))
    stages = (("F", lambda r: r["init"] is None), ("P→F", lambda r: r["init"] is not None))
    fig, axes = plt.subplots(len(homes), 2, figsize=(9, 3.2 * len(homes)), squeeze=False)
    for row_axes, home in zip(axes, homes, strict=True):
        here = [r for r in rows if r["set"] == home]
        for ax, (measure, title) in zip(row_axes, measures, strict=True):
            for label, started in stages:
                points = [r for r in here if r.get("home") == home and started(r)]
                points.sort(key=lambda r: r["train_tokens"])
                if points:
                    y = np.array([r[measure] for r in points])
                    ci = np.array([r[f"{measure}_ci95"] for r in points]).T
                    x = [r["train_tokens"] for r in points]
                    ax.errorbar(x, y, yerr=[y - ci[0], ci[1] - y], marker="o", capsize=3, label=label)
            for r in here:
                if r.get("home") != home:
                    ax.axhline(r[measure], ls=":", color="grey")
                    ax.annotate(
                        r["drafter"], (0.01, r[measure]), xycoords=("axes fraction", "data"), fontsize=7
                    )
            ax.set_xscale("log")
            ax.set_xlabel("finetuning tokens (the target's answers)")
            ax.set_title(f"{home}: {title}")
            if ax.get_legend_handles_labels()[0]:  # a curve was drawn (the smoke run may draw none)
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot(rows: list[dict], sets, names, path: Path) -> None:
    """The matrix: drafters (rows) against sets (columns), single-draft acceptance at T = 1 and greedy
    agreement at T = 0."""
    fig, axes = plt.subplots(1, 2, figsize=(4 + 1.6 * len(sets), 1.5 + 0.5 * len(names)), squeeze=False)
    titles = ("Σ min(p, q) at T = 1", "greedy agreement")
    for ax, measure, title in zip(axes[0], ("acceptance", "agree"), titles, strict=True):
        grid = np.array([[next(r[measure] for r in rows if r["drafter"] == n and r["set"] == s) for s in sets]
                         for n in names])  # fmt: skip
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white" if v < 0.6 else "black")
        ax.set_xticks(range(len(sets)), sets, rotation=30, ha="right")
        ax.set_yticks(range(len(names)), names)
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    run_script(main)
