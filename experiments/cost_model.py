"""The cost model of speculative decoding against measurement: tokens per second and speedup vs batch size.

Target Qwen2.5-Coder-1.5B-Instruct, draft -0.5B (``mdsd models fetch qwen2.5-coder``, or any local pair via
--target/--draft). Four stages:

1. **Profiles**: :func:`mdsd.measure_profile` times each model's forwards on a grid of batch sizes (the
   ``--batches``), new tokens per row (every forward size the trees use, so no interpolation in tokens) and
   cache lengths (the prompts' range); both are saved as ``target_profile.json`` / ``draft_profile.json``.
2. **Overhead**: :func:`mdsd.measure_overhead` fits the per-step and per-node time outside the forwards
   (sampling, verification, cache compaction) to short decodes of random prompts, per verifier.
3. **Decoding**: the first B prompts (MT-Bench and HumanEval, alternating) are decoded as one ragged batch
   with each tree and verifier, at each B, without EOS (every row emits --max-new-tokens), by
   :class:`mdsd.TreeDecoder`, and by a plain autoregressive loop over the same KV-cache machinery. Only the
   steps after the first count (:func:`mdsd.time_decode`: the first step also reads the prompts).
4. **Prediction**: from the profiles, the overhead and the measured tokens per step, :func:`mdsd.predict`
   gives the steady-state tokens/s and speedup at each B (error against the measurement), and
   :func:`mdsd.replay_seconds` the time of the same steps replayed one by one (each at its own number of
   active rows and cache length: the error of the time model alone). The plot shows the measured and
   predicted speedup over autoregressive decoding against batch size, per tree (as in SSSD: Marzollo et al.
   2024, arXiv:2411.05894).

Results go to a fresh directory under runs/ unless --output-dir names one: cost_model.json/.csv (resolved
config, seed, models' provenance, overheads), the two profiles, cost_model.png and summary.md.

    python experiments/cost_model.py --quick        # tiny random models, under a minute
    # the real pair on the CPU (defaults: B = 1, 4, 16, chain:3 and binary:2, SpecHub, T = 0.6, 16 new tokens,
    # prompts <= 64 tokens); estimated 25-30 minutes on 2 otherwise idle cores (most of it at B = 16):
    python experiments/cost_model.py --output-dir results/cost_model
    # the same command on a GPU, wider (never run yet):
    python experiments/cost_model.py --device cuda --dtype bfloat16 --batches 1 2 4 8 16 32 64 \\
        --trees chain:4 binary:2 binary:3 binary:4 --verifiers spechub rrs --max-new-tokens 64 \\
        --max-prompt-tokens 128 --repeats 10 --output-dir results/cost_model_gpu
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

import mdsd
from mdsd.harness.experiment import config_from_cli, output_dir, run_script, write_results
from mdsd.hf.tiny import tiny_pair
from mdsd.tree.spec import compile_option, parse_tree


@dataclass(frozen=True)
class Config:
    """Measured and predicted speed of token-tree speculative decoding against batch size."""

    target: str = field(default="", metadata={"help": "target model directory ('' = cached qwen2.5-coder)"})
    draft: str = field(default="", metadata={"help": "draft model directory ('' = cached qwen2.5-coder)"})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    dtype: str = field(default="float32", metadata={"help": "model dtype (bfloat16 on a GPU)"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads (the machine has 2 cores)"})
    datasets: tuple[str, ...] = field(default=("mt-bench", "humaneval"), metadata={"help": "prompt sets"})
    max_prompt_tokens: int = field(default=64, metadata={"help": "templated prompt length cap"})
    max_new_tokens: int = field(default=16, metadata={"help": "tokens generated per prompt (no EOS), >= 2"})
    batches: tuple[int, ...] = field(default=(1, 4, 16), metadata={"help": "batch sizes B"})
    trees: tuple[str, ...] = field(
        default=("chain:3", "binary:2"), metadata={"help": "trees, as mdsd decode --tree"}
    )
    verifiers: tuple[str, ...] = field(default=("spechub",), metadata={"help": "verifiers"})
    temperature: float = field(default=0.6, metadata={"help": "sampling temperature T"})
    repeats: int = field(default=3, metadata={"help": "timed forwards per profile grid point (median)"})
    profile_contexts: tuple[int, ...] = field(
        default=(), metadata={"help": "profile cache lengths (() = the range the decodes meet)"}
    )
    overhead_batches: tuple[int, ...] = field(
        default=(1, 4), metadata={"help": "batches of the overhead fit"}
    )
    overhead_tokens: int = field(default=8, metadata={"help": "tokens per decode of the overhead fit"})
    compile: str = field(
        default="false",
        metadata={
            "help": "decoder path: false (eager), true (fast path), or a backend (mdsd decode --compile)"
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of profiles, prompts and decoding"})
    quick: bool = field(default=False, metadata={"help": "smoke test: tiny random models and prompts"})
    output_dir: str = mdsd.harness.experiment.output_dir_field()


QUICK = dict(
    threads=1,
    max_new_tokens=8,
    batches=(1, 4, 16),
    trees=("chain:2", "binary:2"),
    verifiers=("rrs",),
    repeats=2,
    overhead_batches=(1, 2),
    overhead_tokens=4,
)


def load(config: Config):
    """(target, draft, prompts as token lists): the real pair and prompt sets, or the quick tiny ones."""
    if config.quick:
        target, draft = tiny_pair(config.seed)
        gen = torch.Generator().manual_seed(config.seed)
        lengths = torch.randint(6, 14, (max(config.batches),), generator=gen).tolist()
        vocab = target.config.vocab_size
        prompts = [torch.randint(vocab, (n,), generator=gen).tolist() for n in lengths]
        return target.to(config.device), draft.to(config.device), prompts
    from mdsd.data.prompts import prompts as prompt_set
    from mdsd.hf.load import load_pair, pair_paths

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target_dir, draft_dir = (config.target, config.draft) if config.target else pair_paths("qwen2.5-coder")
    target, draft, tokenizer = load_pair(target_dir, draft_dir, dtype=config.dtype, device=config.device)
    per_set = math.ceil(max(config.batches) / len(config.datasets))
    sets = [prompt_set(name, per_set, tokenizer, config.max_prompt_tokens) for name in config.datasets]
    prompts = [list(p.input_ids) for group in zip(*sets, strict=True) for p in group]  # alternating sets
    return target, draft, prompts[: max(config.batches)]


def _overhead_context(prompts: list[list[int]]) -> int:
    """Prompt length of the overhead fit's random prompts: the median real prompt length."""
    return int(np.median([len(p) for p in prompts]))


def _tokens_grid(trees) -> tuple[int, ...]:
    """Every forward size the trees use (draft levels, target forward) and 1 (autoregressive)."""
    sizes = {1}
    for tree in trees:
        draft, target = mdsd.costs.step_forwards(tree)
        sizes |= {*draft, target}
    return tuple(sorted(sizes))


def _contexts_for(config: Config, prompts, trees, overhead_context: int) -> tuple[int, int]:
    """Cache lengths the decodes and the overhead fit can meet: from the shortest prompt to the longest plus
    every row accepting whole paths at every step (max_new_tokens · (deepest tree + 1))."""
    deepest = max(t.max_depth if isinstance(t, mdsd.Tree) else t.depth for t in trees)
    lengths = [len(p) for p in prompts] + [overhead_context]
    longest = max(lengths) + max(config.max_new_tokens, config.overhead_tokens) * (deepest + 1)
    return (min(lengths), longest)


def autoregressive(config: Config, target, prompts: list[list[int]]):
    """Plain batched sampling by mdsd's decoder without a draft (one token from p per step, on the path of
    ``config.compile``): seconds and tokens of the steps after the first (which reads the prompts), and the
    cache length before each of them."""
    decoder = mdsd.TreeDecoder(
        target,
        None,
        None,
        temperature=config.temperature,
        eos_token_id=[],
        compile=compile_option(config.compile),
    )
    timed = mdsd.costs.time_decode(decoder, prompts, config.max_new_tokens, config.seed)
    return timed.seconds, timed.tokens, [c for _, c, _ in timed.schedule]


def decode_rows(config, target, draft, prompts, profiles, overheads) -> list[dict]:
    """Stages 3 and 4: measure and predict each (tree, verifier, B), and autoregressive decoding at each B."""
    target_profile, draft_profile = profiles
    rows = []
    for B in tqdm(config.batches, desc="batches"):
        batch = prompts[:B]
        seconds, tokens, contexts = autoregressive(config, target, batch)
        mean_context = float(np.mean(contexts))
        replayed = sum(target_profile.seconds(B, 1, c) for c in contexts)
        steady = B / target_profile.seconds(B, 1, mean_context)
        ar_rate = tokens / seconds
        rows.append(
            {
                "kind": "autoregressive",
                "tree": "none",
                "verifier": "none",
                "batch": B,
                "tokens": tokens,
                "seconds": seconds,
                "tokens_per_step": 1.0,
                "tokens_per_second": ar_rate,
                "mean_context": mean_context,
                "predicted_tokens_per_second": steady,
                "error": steady / ar_rate - 1,
                "replay_seconds": replayed,
                "replay_error": seconds / replayed - 1,
            }
        )
        for spec in config.trees:
            tree = parse_tree(spec)
            for name in config.verifiers:
                rows.append(
                    _speculative(config, target, draft, tree, spec, name, batch, profiles, overheads, ar_rate)
                )
    return rows


def _speculative(config, target, draft, tree, spec, name, batch, profiles, overheads, ar_rate) -> dict:
    target_profile, draft_profile = profiles
    B = len(batch)
    decoder = mdsd.TreeDecoder(
        target, draft, tree, name, config.temperature, eos_token_id=[], compile=compile_option(config.compile)
    )
    timed = mdsd.costs.time_decode(decoder, batch, config.max_new_tokens, config.seed)
    row_steps = sum(o.steps - 1 for o in timed.outputs)
    per_step = timed.tokens / row_steps  # tokens per step per row, after the first step
    mean_context = float(np.mean([c for _, c, _ in timed.schedule]))
    overhead = overheads[name]
    pred = mdsd.predict(
        target_profile,
        draft_profile,
        tree,
        None,
        B,
        mean_context,
        tokens_per_step=per_step,
        overhead=overhead,
    )
    replayed = mdsd.costs.replay_seconds(target_profile, draft_profile, tree, timed, overhead)
    rate = timed.tokens / timed.seconds
    return {
        "kind": "speculative",
        "tree": spec,
        "verifier": name,
        "batch": B,
        "tokens": timed.tokens,
        "seconds": timed.seconds,
        "tokens_per_step": per_step,
        "tokens_per_second": rate,
        "mean_context": mean_context,
        "predicted_tokens_per_second": pred.tokens_per_second,
        "error": pred.tokens_per_second / rate - 1,
        "replay_seconds": replayed,
        "replay_error": timed.seconds / replayed - 1,
        "steps": timed.steps,
        "speedup": rate / ar_rate,
        "predicted_speedup": pred.speedup,
        "predicted_draft_seconds": pred.draft_seconds,
        "predicted_target_seconds": pred.target_seconds,
        "predicted_overhead_seconds": pred.overhead_seconds,
    }


def plot(rows: list[dict], profiles, overheads, path: Path) -> None:
    """Speedup over autoregressive decoding against B, measured (markers) and predicted (lines), per tree;
    below, the prediction errors."""
    target_profile, draft_profile = profiles
    names = sorted({r["verifier"] for r in rows if r["kind"] == "speculative"})
    fig, axes = plt.subplots(2, len(names), figsize=(5.2 * len(names), 7), squeeze=False, sharex=True)
    for col, name in enumerate(names):
        top, bottom = axes[0][col], axes[1][col]
        mine = [r for r in rows if r["verifier"] == name]
        trees = list(dict.fromkeys(r["tree"] for r in mine))
        batches = sorted({r["batch"] for r in mine})
        dense = np.geomspace(batches[0], batches[-1], 40)
        for j, spec in enumerate(trees):
            own = [r for r in mine if r["tree"] == spec]
            per_step = sum(r["tokens"] for r in own) / sum(r["tokens"] / r["tokens_per_step"] for r in own)
            context = float(np.mean([r["mean_context"] for r in own]))
            curve = [
                mdsd.predict(
                    target_profile,
                    draft_profile,
                    parse_tree(spec),
                    None,
                    float(b),
                    context,
                    tokens_per_step=per_step,
                    overhead=overheads[name],
                ).speedup
                for b in dense
            ]
            color = f"C{j}"
            top.plot(dense, curve, "-", color=color, label=f"{spec} predicted")
            top.plot([r["batch"] for r in own], [r["speedup"] for r in own], "o", color=color, label=spec)
            top.plot([r["batch"] for r in own], [r["predicted_speedup"] for r in own], "x", color=color)
            bottom.plot([r["batch"] for r in own], [100 * r["error"] for r in own], "o-", color=color)
            bottom.plot([r["batch"] for r in own], [100 * r["replay_error"] for r in own], "x--", color=color)
        top.plot([], [], "x", color="gray", label="predicted at the measured tokens/step")
        top.axhline(1.0, color="gray", lw=0.8)
        top.set(title=f"{name}: speedup over autoregressive", ylabel="speedup (tokens/s ratio)")
        top.legend(fontsize=7)
        bottom.axhline(0.0, color="gray", lw=0.8)
        bottom.plot([], [], "o-", color="gray", label="steady state (predict)")
        bottom.plot([], [], "x--", color="gray", label="step by step (replay)")
        bottom.set(xscale="log", xlabel="batch size B", ylabel="predicted / measured tokens/s − 1 (%)")
        bottom.set_xticks(batches, [str(b) for b in batches])
        bottom.minorticks_off()
        bottom.legend(fontsize=7)
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary(rows: list[dict], config: Config, overheads) -> str:
    lines = [
        "# Cost model of speculative decoding: measured and predicted tokens/s against batch size",
        "",
        f"Device {config.device}, dtype {config.dtype}, {config.threads} torch threads, "
        f"T = {config.temperature}, {config.max_new_tokens} new tokens per row (no EOS), steps after the "
        f"first; seed {config.seed}" + (" (quick: tiny random models)" if config.quick else "") + ".",
        "",
        "| tree | verifier | B | tokens/step | tokens/s | predicted | error | replay error | speedup | "
        "predicted speedup |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speedups = (
            f"{r['speedup']:.2f} | {r['predicted_speedup']:.2f}" if r["kind"] == "speculative" else "1 | 1"
        )
        lines.append(
            f"| {r['tree']} | {r['verifier']} | {r['batch']} | {r['tokens_per_step']:.2f} | "
            f"{r['tokens_per_second']:.1f} | {r['predicted_tokens_per_second']:.1f} | "
            f"{100 * r['error']:+.1f}% | {100 * r['replay_error']:+.1f}% | {speedups} |"
        )
    errors = np.abs([r["error"] for r in rows])
    replay = np.abs([r["replay_error"] for r in rows])
    lines += [
        "",
        "Error: predicted / measured tokens/s − 1, in the steady state at the mean cache length (predict)",
        "and with the steps' predicted times summed one by one at their own rows and cache length (replay).",
        f"Mean absolute error: steady state {100 * errors.mean():.1f}% (worst {100 * errors.max():.1f}%), "
        f"step by step {100 * replay.mean():.1f}% (worst {100 * replay.max():.1f}%).",
        "",
        "Overhead (seconds per step, per vocabulary row; fit error over its runs):",
        "",
    ]
    for name, o in overheads.items():
        lines.append(
            f"- {name}: {o.per_step:.3g} + {o.per_row_node:.3g} · B · (F + M) s, "
            f"fit error (rms) {100 * o.rms_relative_error:.1f}%"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    if config.quick:
        config = replace(config, **QUICK)
    if config.max_new_tokens < 2 or config.overhead_tokens < 2:
        raise ValueError(
            "--max-new-tokens and --overhead-tokens must be >= 2 (only steps after the first count)"
        )
    path = compile_option(config.compile)  # checked before any work
    torch.set_num_threads(config.threads)
    out = output_dir("cost_model", config.output_dir)
    target, draft, prompts = load(config)
    trees = [parse_tree(spec) for spec in config.trees]
    overhead_context = _overhead_context(prompts)
    contexts = config.profile_contexts or _contexts_for(config, prompts, trees, overhead_context)
    grid = dict(
        batches=sorted(set(config.batches) | set(config.overhead_batches)), tokens=_tokens_grid(trees)
    )
    profiles = []
    for label, model, offset in (("target", target, 0), ("draft", draft, 1)):
        gen = torch.Generator().manual_seed(config.seed + offset)
        profile = mdsd.measure_profile(
            model, contexts=contexts, repeats=config.repeats, generator=gen, compile=path, **grid
        )
        profile.save(out / f"{label}_profile.json")
        profiles.append(profile)
    overheads = {
        name: mdsd.costs.measure_overhead(
            target,
            draft,
            *profiles,
            trees,
            config.overhead_batches,
            name,
            config.temperature,
            overhead_context,
            config.overhead_tokens,
            torch.Generator().manual_seed(config.seed + 2),
            compile=path,
        )
        for name in config.verifiers
    }
    rows = decode_rows(config, target, draft, prompts, profiles, overheads)
    write_results(
        out,
        "cost_model",
        rows,
        config,
        config.seed,
        models={"target": profiles[0].model, "draft": profiles[1].model},
        profiles={"target": "target_profile.json", "draft": "draft_profile.json"},
        profile_grid={**grid, "contexts": list(contexts)},
        overheads={name: dataclasses.asdict(o) for name, o in overheads.items()},
    )
    plot(rows, profiles, overheads, out / "cost_model.png")
    (out / "summary.md").write_text(summary(rows, config, overheads))
    print((out / "summary.md").read_text())
    print(f"results in {out}")


if __name__ == "__main__":
    run_script(main)
