"""Batch efficiency (tokens per target forward) and speed of every decoding method on a real model pair.

Target Qwen2.5-Coder-1.5B-Instruct, draft -0.5B (``mdsd models fetch qwen2.5-coder``, or any local pair via
--target/--draft). Every method decodes the same prompts (the first --prompts-per-set of each --datasets set,
chat-templated) with the same seeds (prompt i: seed + i) and token budget, measured the same way by
:func:`mdsd.harness.compare`: target and draft forwards counted by one forward hook for every method, tokens
per target forward as a ratio of sums with a 95% interval over prompts, tokens per step, tokens/s. Beside each
fixed tree, the tokens per step Sequoia's model predicts from the verifier's acceptance vector measured
exactly on the bundled real corpus (a_j = α(j) − α(j−1), mean over positions of mdsd.data.real_pairs).

A method is ``hf-autoregressive``, ``hf-assisted`` (HF's defaults), ``hf-assisted-heuristic`` (HF's
grow/shrink draft length), or ``TREE/VERIFIER[/POLICY][+SOURCE]`` (spelled in :mod:`mdsd.harness.methods`:
mdsd decode's trees or ``sequoia:N``, any verifier TreeDecoder takes, the ``grow`` or ``rate`` depth policy,
training-free sources ``lookup``, ``datastore``, ``dictionary``).

Each (temperature, method) is one task of :func:`mdsd.harness.sweep.run_tasks`: in this process by default,
or on Ray with --ray (this machine) or --ray ADDRESS (a cluster; every node needs the models cached). Timings
compare methods only when they ran alone on the same machine (the default, not --ray with parallel tasks).

    python experiments/batch_efficiency.py --quick                   # tiny random models, a smoke run
    python experiments/batch_efficiency.py                           # the CPU subset of the Config defaults
    # results/batch_efficiency (8 prompts, 64 tokens, T 0.6 and 1.0, 2-core CPU, about 2 hours):
    python experiments/batch_efficiency.py --prompts-per-set 4 --max-new-tokens 64 --temperatures 0.6 1.0 \\
        --output-dir results/batch_efficiency --methods $METHODS
    # the same on a GPU:
    python experiments/batch_efficiency.py --device cuda --dtype bfloat16 --threads 8 --prompts-per-set 10 \\
        --max-new-tokens 128 --temperatures 0.6 1.0 --output-dir results/batch_efficiency_gpu \\
        --methods $METHODS

    # whole prompt sets, 8 prompts a batch, checkpointed every 16 prompts of a set (rounds of every method,
    # so a stopped run is a paired sample); --resume continues, --partial writes what is done so far:
    python experiments/batch_efficiency.py --prompts-per-set 0 --max-new-tokens 64 --temperatures 0.6 0 \\
        --batch-size 8 --prompts-per-task 16 --dtype float32 --output-dir results/whole_sets/qwen2.5-coder \\
        --resume --methods $WHOLE

with METHODS="hf-autoregressive hf-assisted hf-assisted-heuristic chain:4/single chain:16/single/grow
sequoia:16/rrsw binary:3/rrsw dynamic:8,2,3,24/rrsw binary:3/spechub dynamic:8,2,3,24/spechub binary:3/kseq
dynamic:8,2,3,24/kseq binary:3/greedy dynamic:8,2,3,24/greedy binary:3/rrs dynamic:8,2,3,24/rrs" and
WHOLE="none/topk+lookup chain:4/single chain:4/single+lookup chain:4/single/first+lookup binary:3/rrs
binary:3/rrsw binary:3/spechub binary:3/optimal dynamic:8,2,3,24/rrsw hf-assisted" (autoregressive decoding
is 1 token per target forward by definition; its speed on this CPU is not what the sets measure).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from mdsd.harness.comparison import INTERVAL_METHOD, interval, intervals_overlap, paired_ratio
from mdsd.harness.experiment import config_from_cli, run_script
from mdsd.harness.methods import (
    MethodsConfig,
    chunked,
    merge_runs,
    plot_methods,
    real_prompts,
    run_method,
    sweep_methods,
)

DEFAULT_METHODS = (
    "hf-autoregressive",
    "hf-assisted",
    "chain:4/single",
    "chain:16/single/grow",
    "binary:3/spechub",
    "sequoia:16/rrsw",
    "dynamic:8,2,3,24/rrsw",
    "dynamic:8,2,3,24/greedy",
)


FEW = 8  # a prompt that ends within this many tokens is counted apart in the summary


@dataclass(frozen=True)
class Config(MethodsConfig):
    """Tokens per target forward and tokens/s of every method on a real model pair."""

    methods: tuple[str, ...] = field(default=DEFAULT_METHODS, metadata={"help": "methods (module docstring)"})


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    torch.set_num_threads(config.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models, prompt_sets, described = None, [], {}
    if config.quick:
        gen = torch.Generator().manual_seed(config.seed)
        todo = [torch.randint(64, (int(n),), generator=gen).tolist() for n in (5, 9, 13, 7)]
        sets = [("random tokens (--quick)", len(todo))]
    else:
        models, per_set, described = real_prompts(config)
        todo = [p for name in config.datasets for p in per_set[name]]
        prompt_sets = list(config.datasets)
        sets = [(name, len(per_set[name])) for name in config.datasets]
    tasks = [{"temperature": t, "method": m} for t in config.temperatures for m in config.methods]
    tasks = chunked(tasks, [size for _, size in sets], config)
    out, rows = sweep_methods(
        "batch_efficiency", run_method, tasks, todo, models, config, models=described, prompt_sets=prompt_sets
    )
    plot_methods(rows, out / "batch_efficiency.png")
    (out / "summary.md").write_text(summary(rows, config, sets, described))
    print((out / "summary.md").read_text())
    print(f"results in {out}")


def summary(rows: list[dict], config: Config, sets: list[tuple[str, int]], described: dict) -> str:
    """The tables: every method over all prompts, by prompt set, and every pair of methods."""
    prompts = len({p["prompt"] for r in rows for p in r["per_prompt"]})
    drawn = ", ".join(name for name, _ in sets)
    if config.quick:
        source = "tiny random models (--quick)"
    else:
        source = f"target {described['target']['name']}, draft {described['draft']['name']}"
    if config.partial:
        drawn += " (partial: the prompts every method finished so far)"
    lines = [
        f"# Batch efficiency and speed ({source})",
        "",
        f"Device {config.device}, dtype {config.dtype}, {config.threads} threads; {prompts} prompts "
        f"({drawn}), {config.max_new_tokens} new tokens each; prompt i decoded with "
        f"seed {config.seed} + i by every method ({config.batch_size} prompts at a time for mdsd's "
        "methods, a batch seeded by its first prompt). Tokens per target forward and tokens/s: ratios of "
        f"sums, 95% {INTERVAL_METHOD}; forwards counted by one forward hook for every method (the decoder's "
        "own counts in batches); 'EOS': prompts that ended on an end-of-sequence token, in brackets "
        f"those that ended within {FEW} tokens (kept and counted).",
        "",
        "| T | method | tokens / target forward (95% CI) | predicted | tokens / step | tokens/s (95% CI) | "
        "target fwd | draft fwd | from source | EOS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pred = "" if r.get("predicted_tokens_per_step") is None else f"{r['predicted_tokens_per_step']:.2f}"
        share = "" if r.get("retrieved_share") is None else f"{r['retrieved_share']:.0%}"
        lines.append(
            f"| {r['temperature']} | {r['method']} | {r['tokens_per_forward']:.3f}{interval(r['ci95'])} | "
            f"{pred} | {r['tokens_per_step']:.3f} | "
            f"{r['tokens_per_second']:.2f}{interval(r['tokens_per_second_ci95'])} | "
            f"{r['target_forwards']} | {r['draft_forwards']} | {share} | {r['stopped_by_eos']} "
            f"({sum(p['tokens'] < FEW for p in r['per_prompt'])}) |"
        )
    if len(sets) > 1:
        lines += by_set(rows, sets)
    for t in dict.fromkeys(r["temperature"] for r in rows):
        lines += verdicts([r for r in rows if r["temperature"] == t], t)
        lines += paired_table([r for r in rows if r["temperature"] == t], t)
    return "\n".join(lines) + "\n"


def by_set(rows: list[dict], sets: list[tuple[str, int]]) -> list[str]:
    """Tokens per target forward of every method on each prompt set's own prompts (prompt indices run
    through the sets in order)."""
    lines = [
        "",
        "By prompt set (95% bootstrap intervals over the set's prompts):",
        "",
        "| set | T | method | prompts | tokens / target forward (95% CI) | EOS |",
        "|---|---|---|---|---|---|",
    ]
    start = 0
    for name, size in sets:
        mine = [
            r | {"per_prompt": [p for p in r["per_prompt"] if start <= p["prompt"] < start + size]}
            for r in rows
        ]
        for r in merge_runs([r for r in mine if r["per_prompt"]]):
            lines.append(
                f"| {name} | {r['temperature']} | {r['method']} | {r['prompts']} | "
                f"{r['tokens_per_forward']:.3f}{interval(r['ci95'])} | {r['stopped_by_eos']} "
                f"({sum(p['tokens'] < FEW for p in r['per_prompt'])}) |"
            )
        start += size
    return lines


def paired_table(rows: list[dict], temperature: float) -> list[str]:
    """At one temperature, every pair of mdsd methods run on the same prompts: the ratio of their tokens per
    target forward with a paired bootstrap interval over prompts, marked significant where it excludes 1."""
    ours = [r for r in rows if not r["method"].startswith("hf-")]
    lines = []
    for i, a in enumerate(ours):
        for b in ours[i + 1 :]:
            if [p["prompt"] for p in a["per_prompt"]] != [p["prompt"] for p in b["per_prompt"]]:
                continue
            ratio, ci = paired_ratio(*_counts(a), *_counts(b))
            mark = " (significant)" if ci is not None and (ci[0] > 1 or ci[1] < 1) else ""
            lines.append(f"| {a['method']} | {b['method']} | {ratio:.3f}{interval(ci)}{mark} |")
    if not lines:
        return []
    head = [
        "",
        f"Paired, T = {temperature}: tokens per target forward of A over B on the same prompts (95% paired "
        "bootstrap over prompts; significant where the interval excludes 1).",
        "",
        "| A | B | A / B (95% CI) |",
        "|---|---|---|",
    ]
    return head + lines


def _counts(row: dict) -> tuple[list[int], list[int]]:
    return [p["tokens"] for p in row["per_prompt"]], [p["target_forwards"] for p in row["per_prompt"]]


def verdicts(rows: list[dict], temperature: float) -> list[str]:
    """At one temperature: mdsd's best methods against HF assisted generation, and each verifier's dynamic
    tree against its best fixed tree, saying where the 95% intervals overlap."""
    ours = [r for r in rows if not r["method"].startswith("hf-")]
    lines = ["", f"## T = {temperature}", ""]
    for hf in (r for r in rows if r["method"].startswith("hf-assisted")):
        for key, label, ci in (
            ("tokens_per_forward", "tokens per target forward", "ci95"),
            ("tokens_per_second", "tokens/s", "tokens_per_second_ci95"),
        ):
            if ours:
                best = max(ours, key=lambda r: r[key])
                lines.append(f"- {label}: {compared(best, hf, key, ci)}")
    by_verifier: dict[str, list[dict]] = {}
    for r in ours:
        tree, verifier = r["method"].split("+")[0].split("/")[:2]
        by_verifier.setdefault(verifier, []).append(r)
    for verifier, mine in by_verifier.items():
        dynamic = [r for r in mine if r["method"].startswith("dynamic:")]
        fixed = [r for r in mine if not r["method"].startswith("dynamic:")]
        if dynamic and fixed:
            best_fixed = max(fixed, key=lambda r: r["tokens_per_forward"])
            for r in dynamic:
                versus = compared(r, best_fixed, "tokens_per_forward", "ci95")
                lines.append(f"- {verifier}, tokens per target forward: {versus}")
    return lines if len(lines) > 3 else []  # no heading over nothing


def compared(a: dict, b: dict, key: str, ci: str) -> str:
    """'A beats B (x vs y; the 95% intervals overlap)' for one measure of two result rows."""
    verb = "beats" if a[key] > b[key] else "ties with" if a[key] == b[key] else "loses to"
    overlap = "; the 95% intervals overlap" if intervals_overlap(a.get(ci), b.get(ci)) else ""
    return f"{a['method']} {verb} {b['method']} ({a[key]:.2f} vs {b[key]:.2f}{overlap})"


if __name__ == "__main__":
    run_script(main)
