"""Batch efficiency (tokens per target forward) of token-tree decoding with each verifier, real models.

Target Qwen2.5-Coder-1.5B-Instruct, draft -0.5B (``mdsd models fetch qwen2.5-coder``, or any local
pair via --target/--draft). For each temperature, tree and verifier, every prompt is decoded with
:class:`mdsd.TreeDecoder`; batch efficiency is the ratio of sums Σ tokens / Σ target forwards over
all steps of all prompts (MATH.md §4), with a 95% interval over steps. Beside it: the tokens/step
that Sequoia's model predicts from the acceptance vector measured exactly on the real corpus
(a_j = α(j) − α(j−1), mean over positions of :func:`mdsd.data.real_pairs`), and the SpecHub paper's
figures for its 31-node binary tree at T = 0.6 (Llama-2-7B / llama-68m, CNN/DailyMail; MATH.md §5).

Trees: ``binaryN`` (full binary, N in 2, 6, 14, 30 drafted nodes), ``ternaryN`` (3, 12, 39) and
``sequoiaN`` (N in 4, 8, 16, 32; built per verifier from its measured acceptance vector). SpecHub
runs only on trees whose nodes have at most 2 children; a node with one child uses single-draft
verification. The full grid is for a GPU (``--device cuda``), where plain autoregressive decoding is
timed too, for tokens/s. On a 2-core CPU run a stated subset, e.g. the default.

    python experiments/batch_efficiency.py                         # CPU subset (see Config defaults)
    # results/batch_efficiency (2-core CPU, about 10 minutes):
    python experiments/batch_efficiency.py --temperatures 0.6 1.0 --verifiers rrs rrsw spechub kseq greedy \\
        --autoregressive
    # results/batch_efficiency_binary30 (the paper's 31-node tree):
    python experiments/batch_efficiency.py --prompts-per-set 4 --max-new-tokens 48 --trees binary30 \\
        --verifiers rrs rrsw spechub --output-dir results/batch_efficiency_binary30
    # results/batch_efficiency_grid (every tree family, both T; about 32 minutes):
    python experiments/batch_efficiency.py --temperatures 0.6 1.0 --trees binary2 binary14 ternary3 \\
        ternary12 sequoia8 sequoia16 --verifiers rrs rrsw spechub kseq greedy --max-new-tokens 32 \\
        --output-dir results/batch_efficiency_grid
    # the full grid, on a GPU (never run yet):
    python experiments/batch_efficiency.py --device cuda --dtype bfloat16 --prompts-per-set 10 \\
        --max-new-tokens 128 --temperatures 0.6 1.0 --trees binary2 binary6 binary14 binary30 \\
        ternary3 ternary12 sequoia4 sequoia8 sequoia16 sequoia32 --verifiers rrs rrsw spechub kseq greedy
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

import mdsd
import mdsd.data
from mdsd.experiment import config_from_cli, write_results

# SpecHub (Sun et al., EMNLP 2024), 31-node binary tree (30 drafted), T = 0.6: tokens per step.
PAPER_BINARY30_T06 = {"rrs": 2.139, "rrsw": 2.315, "spechub": 2.403}


@dataclass(frozen=True)
class Config:
    """Tokens per target forward of tree decoding with each verifier on a real model pair."""

    target: str = field(default="", metadata={"help": "target model directory ('' = cached qwen2.5-coder)"})
    draft: str = field(default="", metadata={"help": "draft model directory ('' = cached qwen2.5-coder)"})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    dtype: str = field(default="float32", metadata={"help": "model dtype (bfloat16 on a GPU)"})
    datasets: tuple[str, ...] = field(default=("mt-bench", "humaneval"), metadata={"help": "prompt sets"})
    prompts_per_set: int = field(default=1, metadata={"help": "first n prompts of each set"})
    max_prompt_tokens: int = field(default=128, metadata={"help": "templated prompt length cap"})
    max_new_tokens: int = field(default=32, metadata={"help": "tokens generated per prompt (issue: 128)"})
    temperatures: tuple[float, ...] = field(
        default=(0.6,), metadata={"help": "temperatures T (issue: 0.6 1.0)"}
    )
    trees: tuple[str, ...] = field(default=("binary6",), metadata={"help": "binaryN, ternaryN, sequoiaN"})
    verifiers: tuple[str, ...] = field(default=("rrs", "spechub", "greedy"), metadata={"help": "verifiers"})
    acceptance_positions: int = field(
        default=300, metadata={"help": "corpus positions for acceptance vectors"}
    )
    corpus: str = field(default="", metadata={"help": "corpus .npz for acceptance vectors ('' = bundled)"})
    autoregressive: bool = field(default=False, metadata={"help": "also time plain autoregressive decoding"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads (the machine is shared)"})
    seed: int = field(default=0, metadata={"help": "seed of every decode (one generator per prompt)"})
    output_dir: str = field(default="results/batch_efficiency", metadata={"help": "where results go"})


def acceptance_vector(name: str, temperature: float, positions: int, corpus: str, width: int) -> np.ndarray:
    """a_j = mean over corpus positions of α(j) − α(j−1): P(the j-th sibling is the accepted one).

    α(j) is the exact acceptance of ``name`` with j drafts (single-draft for j = 1, as the decoder
    verifies a node with one child); entries the verifier does not support or cannot compute exactly
    on these pairs (SpecHub, j != 2; RRSw, j >= 3) end the vector there.
    """
    pairs = mdsd.data.real_pairs(temperature, corpus or None)
    alphas = [0.0]
    for j in range(1, width + 1):
        if j > 1 and not mdsd.verifiers.supports(name, j):
            break
        v = mdsd.verifier("single" if j == 1 else name, j)
        if v.exact_obstacle(pairs.q[:positions]) is not None:
            break
        values = []
        for r in range(min(positions, len(pairs))):
            keep = np.append(pairs.support[r] >= 0, True)
            values.append(v.acceptance(pairs.p[r][keep], pairs.q[r][keep]))
        alphas.append(float(np.mean(values)))
    return np.clip(np.diff(alphas), 0.0, 1.0)


def make_tree(spec: str, acceptance: np.ndarray) -> mdsd.Tree:
    """``binaryN``/``ternaryN`` full trees with N drafted nodes, or ``sequoiaN`` from ``acceptance``."""
    for prefix, b in (("binary", 2), ("ternary", 3)):
        if spec.startswith(prefix):
            n = int(spec[len(prefix) :])
            depth = round(math.log(n * (b - 1) / b + 1, b))
            if sum(b**d for d in range(1, depth + 1)) != n:
                raise ValueError(f"no full {prefix} tree has {n} drafted nodes (spec {spec!r})")
            return mdsd.Tree.kary([b] * depth)
    if spec.startswith("sequoia"):
        return mdsd.Tree.sequoia(acceptance.tolist(), int(spec[len("sequoia") :]), max_depth=8)
    raise ValueError(f"tree must be binaryN, ternaryN or sequoiaN, got {spec!r}")


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    from mdsd.data.prompts import prompts
    from mdsd.hf.load import load_pair, pair_paths
    from mdsd.hf.record import sample_continuation

    torch.set_num_threads(config.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target_dir, draft_dir = (config.target, config.draft) if config.target else pair_paths("qwen2.5-coder")
    target, draft, tokenizer = load_pair(target_dir, draft_dir, dtype=config.dtype, device=config.device)
    todo = [
        p
        for name in config.datasets
        for p in prompts(name, config.prompts_per_set, tokenizer, config.max_prompt_tokens)
    ]
    rows = []
    for t in config.temperatures:
        if config.autoregressive:
            rows.append(_autoregressive(target, todo, t, config, tokenizer.eos_token_id, sample_continuation))
        for name in config.verifiers:
            a = acceptance_vector(name, t, config.acceptance_positions, config.corpus, width=3)
            for spec in config.trees:
                tree = make_tree(spec, a)
                widest = int(tree.branching.max())
                unsupported = any(
                    not mdsd.verifiers.supports(name, int(b)) for b in set(tree.branching) if b > 1
                )
                if unsupported or (widest > max(a.size, 1) and spec.startswith("sequoia")):
                    continue
                rows.append(_decode(target, draft, tree, spec, name, t, a, todo, config))
    out = Path(config.output_dir)
    write_results(out, "batch_efficiency", rows, config, config.seed, paper_binary30_t06=PAPER_BINARY30_T06)
    _plot(rows, out / "batch_efficiency.png")
    (out / "summary.md").write_text(_summary(rows, config))
    print((out / "summary.md").read_text())


def _decode(target, draft, tree, spec, name, t, a, todo, config) -> dict:
    decoder = mdsd.TreeDecoder(target, draft, tree, verifier=name, temperature=t)
    per_step: list[int] = []
    produced, seconds, accepted = 0, 0.0, []
    for prompt in tqdm(todo, desc=f"T={t} {spec} {name}", leave=False):
        generator = torch.Generator(device=config.device).manual_seed(config.seed + prompt.index)
        ids = torch.tensor([prompt.input_ids], device=config.device)
        start = time.perf_counter()
        out = decoder.generate(ids, config.max_new_tokens, generator=generator)
        seconds += time.perf_counter() - start
        per_step += out.tokens_per_step
        accepted += out.accepted_per_step
        produced += out.tokens.numel()
    steps = np.array(per_step, dtype=np.float64)
    predicted = tree.expected_tokens(a.tolist()) if int(tree.branching.max()) <= a.size else None
    return {
        "temperature": t,
        "tree": spec,
        "drafted_nodes": tree.size,
        "verifier": name,
        "prompts": len(todo),
        "steps": int(steps.size),
        "tokens_per_step": float(steps.mean()),
        "ci95": float(1.96 * steps.std(ddof=1) / math.sqrt(steps.size)) if steps.size > 1 else None,
        "predicted_tokens_per_step": predicted,
        "acceptance_vector": [round(float(x), 4) for x in a],
        "tokens_per_second": produced / seconds,
        "mean_accepted": float(np.mean(accepted)),
    }


def _autoregressive(target, todo, t, config, eos, sample_continuation) -> dict:
    produced, seconds = 0, 0.0
    for prompt in tqdm(todo, desc=f"T={t} autoregressive", leave=False):
        generator = torch.Generator().manual_seed(config.seed + prompt.index)
        start = time.perf_counter()
        tokens, _ = sample_continuation(
            target, torch.tensor(prompt.input_ids), config.max_new_tokens, t, generator, eos
        )
        seconds += time.perf_counter() - start
        produced += tokens.numel()
    return {
        "temperature": t,
        "tree": "none",
        "drafted_nodes": 0,
        "verifier": "autoregressive",
        "prompts": len(todo),
        "steps": produced,
        "tokens_per_step": 1.0,
        "tokens_per_second": produced / seconds,
    }


def _plot(rows: list[dict], path: Path) -> None:
    """One panel per temperature: measured tokens/step (± 95%) and the prediction, per tree and verifier."""
    rows = [r for r in rows if r["verifier"] != "autoregressive"]
    temps = sorted({r["temperature"] for r in rows})
    trees = list(dict.fromkeys(r["tree"] for r in rows))  # in the order given
    names = sorted({r["verifier"] for r in rows})
    fig, axes = plt.subplots(
        1, len(temps), figsize=(1.2 + max(4.0, 0.9 * len(trees)) * len(temps), 4), squeeze=False, sharey=True
    )
    width = 0.8 / len(names)
    for ax, t in zip(axes[0], temps, strict=True):
        for j, name in enumerate(names):
            color = f"C{j}"
            for r in rows:
                if (r["temperature"], r["verifier"]) != (t, name):
                    continue
                x = trees.index(r["tree"]) + (j - (len(names) - 1) / 2) * width
                ax.errorbar(
                    x,
                    r["tokens_per_step"],
                    yerr=r["ci95"] or 0,
                    fmt="o",
                    color=color,
                    markersize=4,
                    capsize=2,
                )
                if r.get("predicted_tokens_per_step") is not None:
                    ax.plot(x, r["predicted_tokens_per_step"], "x", color=color, markersize=6)
                if (r["tree"], t) == ("binary30", 0.6) and name in PAPER_BINARY30_T06:
                    ax.plot(x, PAPER_BINARY30_T06[name], "*", color=color, markersize=8)
            ax.plot([], [], "o", color=color, label=name)
        ax.plot([], [], "x", color="gray", label="predicted")
        if "binary30" in trees and t == 0.6:
            ax.plot([], [], "*", color="gray", label="SpecHub paper (Llama-2)")
        ax.set_xticks(range(len(trees)), trees, rotation=30)
        ax.set(title=f"T = {t}", xlabel="tree (drafted nodes)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("tokens per target forward")
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle("Tokens per target forward, measured (± 95%) and predicted")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _summary(rows: list[dict], config: Config) -> str:
    lines = [
        "# Batch efficiency with tree decoding (Qwen2.5-Coder-1.5B target, 0.5B draft)",
        "",
        f"Device {config.device}, dtype {config.dtype}; prompts: the first {config.prompts_per_set} of "
        f"{', '.join(config.datasets)} (<= {config.max_prompt_tokens} tokens), "
        f"{config.max_new_tokens} new tokens each, seed {config.seed}.",
        "",
        "| T | tree | verifier | tokens/step ± 95% | predicted (Sequoia model) | SpecHub paper | tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = f" ± {r['ci95']:.3f}" if r.get("ci95") is not None else ""
        pred = r.get("predicted_tokens_per_step")
        paper = (
            PAPER_BINARY30_T06.get(r["verifier"])
            if (r["tree"], r["temperature"]) == ("binary30", 0.6)
            else None
        )
        pred_cell = "" if pred is None else f"{pred:.3f}"
        paper_cell = "" if paper is None else f"{paper}"
        lines.append(
            f"| {r['temperature']} | {r['tree']} | {r['verifier']} | {r['tokens_per_step']:.3f}{ci} | "
            f"{pred_cell} | {paper_cell} | {r['tokens_per_second']:.2f} |"
        )
    lines += [
        "",
        "Predicted: Sequoia's expected tokens per step for the tree, from the acceptance vector",
        "a_j = α(j) − α(j−1) measured exactly on the bundled real corpus (first positions) at the same T.",
        "SpecHub paper: Llama-2-7B-chat / llama-68m on CNN/DailyMail, 31-node binary tree, T = 0.6",
        "(a different model pair: for scale, not a target).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
