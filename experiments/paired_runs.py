"""Two batch-efficiency runs compared prompt by prompt: e.g. the same methods with two drafters.

``experiments/batch_efficiency.py`` pairs the methods of one run. Two runs over the same prompts and seeds
(same prompt sets, prompt count, caps, batch size and seed: prompt i is decoded from the same seed in both)
are paired the same way here: for each temperature both ran and each method a of run A and b of run B, the
ratio of A's tokens per target forward to B's over the prompts both finished,

.. math:: \\rho = \\frac{\\sum_i t^a_i / \\sum_i f^a_i}{\\sum_i t^b_i / \\sum_i f^b_i},

with a paired bootstrap interval over those prompts (:func:`mdsd.harness.comparison.paired_ratio`: each
resample draws the same prompts for both, so a prompt's difficulty cancels), over all prompts and within each
prompt set. A difference is significant where the interval excludes 1. A run's ``--partial`` file works: only
the prompts both have are paired, and the tables say how many. Two methods that decoded a prompt from other
seeds (HF's methods decode one prompt at a time, mdsd's a batch from its first prompt's seed) are not paired.

Writes ``paired_runs.json``/``.csv`` (every pair) and ``summary.md`` (each method against the same method of
the other run, and against the methods named by ``--against``).

    python experiments/paired_runs.py \\
        --runs results/whole_sets/qwen2.5-coder-bf16-head/batch_efficiency.json \\
        results/whole_sets/qwen2.5-coder-bf16/batch_efficiency.json --labels head 0.5b \\
        --against none/topk+lookup --output-dir results/whole_sets/qwen2.5-coder-bf16-head/paired
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mdsd.harness.comparison import INTERVAL_METHOD, interval, paired_ratio
from mdsd.harness.experiment import config_from_cli, output_dir, run_script, write_results

SAME = ("datasets", "prompts_per_set", "max_prompt_tokens", "max_new_tokens", "batch_size", "seed", "quick")


@dataclass(frozen=True)
class Config:
    """Two batch_efficiency runs paired over the prompts both finished."""

    runs: tuple[str, ...] = field(default=(), metadata={"help": "two batch_efficiency.json files: A then B"})
    labels: tuple[str, ...] = field(default=("A", "B"), metadata={"help": "names of runs A and B"})
    against: tuple[str, ...] = field(
        default=(), metadata={"help": "methods of run B every method of run A is also compared with"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap"})
    output_dir: str = field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})


def load_run(path: str) -> dict:
    """A batch_efficiency results file (``ValueError`` naming what is missing)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"--runs: {path} is not a readable results file ({err})") from None
    if "rows" not in data or "config" not in data.get("metadata", {}):
        raise ValueError(f"--runs: {path} is not a batch_efficiency results file (no rows or config)")
    if any(row.get("per_prompt") is None for row in data["rows"]):
        raise ValueError(f"--runs: {path} has rows without per-prompt counts: they cannot be paired")
    return data


def set_sizes(config: dict) -> list[tuple[str, int]]:
    """Each prompt set of a run with its number of prompts, in the run's order (prompt i's set)."""
    if config.get("quick"):
        return [("random tokens (--quick)", 1 << 30)]
    from mdsd.data.prompts import load_texts

    sizes = []
    for name in config["datasets"]:
        n = len(load_texts(name))
        sizes.append((name, min(config["prompts_per_set"], n) if config["prompts_per_set"] else n))
    return sizes


def pair_rows(a: dict, b: dict, sets: list[tuple[str, int]], seed: int = 0) -> list[dict]:
    """Every (temperature, prompt set or "all", method of A, method of B) pair with its paired ratio."""
    starts = np.cumsum([0] + [n for _, n in sets])
    rows = []
    for ra in a["rows"]:
        for rb in b["rows"]:
            if ra["temperature"] != rb["temperature"]:
                continue
            pa = {p["prompt"]: p for p in ra["per_prompt"]}
            pb = {p["prompt"]: p for p in rb["per_prompt"]}
            common = sorted(set(pa) & set(pb))
            if any(pa[i]["seed"] != pb[i]["seed"] for i in common):
                continue  # other seeds (a batched method against one decoding a prompt at a time): no pair
            groups = [("all", common)] + [
                (name, [i for i in common if lo <= i < hi])
                for (name, _), lo, hi in zip(sets, starts[:-1], starts[1:], strict=True)
            ]
            for name, prompts in groups:
                if len(prompts) < 2 or (name != "all" and len(groups) == 2):
                    continue
                ta = [pa[i]["tokens"] for i in prompts]
                fa = [pa[i]["target_forwards"] for i in prompts]
                tb = [pb[i]["tokens"] for i in prompts]
                fb = [pb[i]["target_forwards"] for i in prompts]
                ratio, ci = paired_ratio(ta, fa, tb, fb, seed=seed)
                rows.append(
                    {
                        "temperature": ra["temperature"],
                        "prompt_set": name,
                        "method_a": ra["method"],
                        "method_b": rb["method"],
                        "prompts": len(prompts),
                        "tokens_per_forward_a": sum(ta) / sum(fa),
                        "tokens_per_forward_b": sum(tb) / sum(fb),
                        "ratio": ratio,
                        "ci95": list(ci) if ci else None,
                        "significant": bool(ci and (ci[0] > 1 or ci[1] < 1)),
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    if len(config.runs) != 2 or len(config.labels) != 2:
        raise ValueError(f"--runs and --labels take two values each, got {config.runs} and {config.labels}")
    a, b = (load_run(path) for path in config.runs)
    ca, cb = a["metadata"]["config"], b["metadata"]["config"]
    for key in SAME:
        if ca.get(key) != cb.get(key):
            raise ValueError(
                f"--runs: the runs differ in {key} ({ca.get(key)!r} against {cb.get(key)!r}): their prompts "
                "and seeds do not pair"
            )
    sets = set_sizes(ca)
    rows = pair_rows(a, b, sets, config.seed)
    out = output_dir("paired_runs", config.output_dir)
    sets_named = list(ca.get("datasets", []))
    write_results(out, "paired_runs", rows, config, seed=config.seed, prompt_sets=sets_named)
    (out / "summary.md").write_text(summary(rows, config, a, b))
    print((out / "summary.md").read_text())
    print(f"results in {out}")


def summary(rows: list[dict], config: Config, a: dict, b: dict) -> str:
    la, lb = config.labels
    lines = [
        f"# {la} against {lb}, paired prompt by prompt",
        "",
        f"Run A ({la}): {config.runs[0]}, draft {_draft(a)}; "
        f"run B ({lb}): {config.runs[1]}, draft {_draft(b)}. "
        f"Tokens per target forward over the prompts both finished with the same seed; ratio A ÷ B with its "
        f"95% paired {INTERVAL_METHOD}; * where the interval excludes 1.",
    ]
    shown = [r for r in rows if r["method_a"] == r["method_b"] or r["method_b"] in config.against]
    for t in sorted({r["temperature"] for r in shown}, reverse=True):
        lines += [
            "",
            f"## T = {t}",
            "",
            f"| prompts | {la} method | {lb} method | n | {la} | {lb} | ratio (95% CI) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in shown:
            if r["temperature"] == t:
                mark = " *" if r["significant"] else ""
                lines.append(
                    f"| {r['prompt_set']} | {r['method_a']} | {r['method_b']} | {r['prompts']} | "
                    f"{r['tokens_per_forward_a']:.3f} | {r['tokens_per_forward_b']:.3f} | "
                    f"{r['ratio']:.3f}{interval(r['ci95'])}{mark} |"
                )
    return "\n".join(lines) + "\n"


def _draft(run: dict) -> str:
    draft = (run["metadata"].get("models") or {}).get("draft") or {}
    return str(draft.get("name") or "(none: --quick)")


if __name__ == "__main__":
    run_script(main)
