"""Where drafts come from: the draft model against training-free sources, and mixed trees, on a real pair.

Per prompt set (HumanEval: code; MT-Bench: chat), the methods of mdsd.harness.methods measured as in
experiments/batch_efficiency.py (same prompts, seeds, budget, forward hooks; tokens per target forward with a
95% interval over prompts, tokens/s) for every source of draft tokens:

* ``model``: the draft model's trees (chain:4, binary:3 = 14 nodes, a Sequoia tree of 16 nodes);
* ``lookup`` (prompt + output so far), ``datastore`` (a suffix array over the CPython standard library's
  .py files and a transformers wheel's, 19.8 M Qwen tokens: ``python benchmarks/bench_sources.py`` builds it
  into the mdsd cache), ``dictionary`` (SPECTRA-style n-grams of the target's own accepted tokens): each
  alone, as ``--retrieve`` WIDTH chains of DEPTH deterministic tokens, verified exactly (a child is accepted
  iff the target's token is it);
* mixed trees: the model's tree with retrieved chains beside its root children (mdsd.sources.mixed), and the
  share of accepted tokens that came from the source;
* source first (``/first``): the source's chains alone in the steps where it proposed, the mixed tree in the
  others (mdsd.tree.adaptive.SourceFirst), and the share of steps that drafted with the model.

The summary says, per set and temperature, which source beats the draft model on tokens per target forward
and on tokens/s, and which loses.

    python experiments/draft_sources.py --quick                      # tiny models, prompt lookup only
    # results/draft_sources (2-core CPU; 20 minutes; the datastore built first):
    python experiments/draft_sources.py --prompts-per-set 2 --max-new-tokens 48 \\
        --output-dir results/draft_sources
    # results/source_first (chain:4 with and without lookup, lookup alone, source first; the fast path,
    # whose catch-up forwards and buffer reads the GPU predictions count; 2-core CPU, 21 minutes):
    python experiments/draft_sources.py --methods chain:4/single none/topk+lookup chain:4/single+lookup \\
        chain:4/single/first+lookup --prompts-per-set 4 --max-new-tokens 64 --compile none \\
        --output-dir results/source_first
    # results/source_first_greedy: the same at T = 0 (--temperatures 0.0): every method emits the same text;
    # results/source_first_humaneval: the same on 10 HumanEval prompts (--datasets humaneval
    # --prompts-per-set 10); results/source_first_min_tokens: source first requiring chains of 2 and 4
    # tokens (--methods chain:4/single/first:2+lookup chain:4/single/first:4+lookup), 11 minutes;
    # results/source_first_backoff: backing off 1 and 4 steps after a rejected chain (--methods
    # chain:4/single/first:1:1+lookup chain:4/single/first:1:4+lookup), 11 minutes
    # on a GPU:
    python experiments/draft_sources.py --device cuda --dtype bfloat16 --threads 8 --prompts-per-set 20 \\
        --max-new-tokens 128 --temperatures 0.6 1.0 --output-dir results/draft_sources_gpu
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import torch

from mdsd.data import cache_dir
from mdsd.harness.comparison import INTERVAL_METHOD, intervals_overlap
from mdsd.harness.experiment import config_from_cli, run_script
from mdsd.harness.methods import MethodsConfig, plot_methods, real_prompts, run_method, sweep_methods

METHODS = (
    "chain:4/single",
    "binary:3/rrsw",
    "sequoia:16/rrsw",
    "none/topk+lookup",
    "none/topk+datastore",
    "none/topk+dictionary",
    "none/topk+lookup,datastore",
    "chain:4/single+lookup",
    "chain:4/single/first+lookup",
    "binary:3/rrsw+datastore",
    "binary:3/rrsw+lookup,datastore",
)
DATASTORE = "datastores/cpython-stdlib-qwen2.5-coder"  # under the mdsd cache (benchmarks/bench_sources.py)


@dataclass(frozen=True)
class Config(MethodsConfig):
    """Tokens per target forward by source of drafts, per prompt set."""

    datasets: tuple[str, ...] = field(default=("humaneval", "mt-bench"), metadata={"help": "prompt sets"})
    methods: tuple[str, ...] = field(
        default=METHODS, metadata={"help": "methods (mdsd.harness.methods' specs)"}
    )
    retrieve: tuple[int, ...] = field(default=(2, 8), metadata={"help": "retrieved chains: WIDTH DEPTH"})
    datastore: str = field(default="", metadata={"help": "datastore directory ('' = the cached stdlib one)"})


def run_configuration(task: dict, todo: dict, models, config: Config) -> dict:
    """A sweep task: one method on one prompt set at one temperature."""
    row = run_method(task, todo[task["dataset"]], models, config)
    return row | {"dataset": task["dataset"]}


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    if config.quick:
        config = replace(config, methods=tuple(m for m in config.methods if "datastore" not in m))
    elif not config.datastore:
        config = replace(config, datastore=str(cache_dir() / DATASTORE))
    torch.set_num_threads(config.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models, described = None, {}
    if config.quick:
        gen = torch.Generator().manual_seed(config.seed)
        todo = {
            d: [torch.randint(8, (int(n),), generator=gen).tolist() * 3 for n in (4, 6)]
            for d in config.datasets
        }
    else:
        models, todo, described = real_prompts(config)
    tasks = [
        {"dataset": d, "temperature": t, "method": m}
        for d in config.datasets
        for t in config.temperatures
        for m in config.methods
    ]
    out, rows = sweep_methods(
        "draft_sources",
        run_configuration,
        tasks,
        todo,
        models,
        config,
        models=described,
        prompt_sets=list(config.datasets),
    )
    (out / "summary.md").write_text(summary(rows, config))
    for d in config.datasets:
        plot_methods([r for r in rows if r["dataset"] == d], out / f"draft_sources_{d}.png")
    print((out / "summary.md").read_text())
    print(f"results in {out}")


def _source(method: str) -> str:
    tree, _, source = method.partition("+")
    if not source:
        return "model"
    return source if tree.startswith("none/") else f"model+{source}"


def summary(rows: list[dict], config: Config) -> str:
    lines = [
        "# Draft sources: the draft model, training-free sources, and mixed trees",
        "",
        f"{config.max_new_tokens} new tokens per prompt, first {config.prompts_per_set} prompts per set, "
        f"retrieved chains {config.retrieve[0]} x {config.retrieve[1]}; tokens per target forward with a 95% "
        f"{INTERVAL_METHOD} (per set); 'from source': share of accepted drafted tokens that the source "
        "proposed; 'model steps': share of steps that drafted with the draft model.",
    ]
    for d in config.datasets:
        for t in config.temperatures:
            mine = [r for r in rows if (r["dataset"], r["temperature"]) == (d, t)]
            lines += [
                "",
                f"## {d}, T = {t}",
                "",
                "| method | source | tokens / target forward (95% CI) | tokens/s | draft fwd | from source "
                "| model steps |",
                "|---|---|---|---|---|---|---|",
            ]
            for r in mine:
                ci = f" ({max(r['ci95'][0], 1.0):.2f}-{r['ci95'][1]:.2f})" if r.get("ci95") else ""
                share = "" if r.get("retrieved_share") is None else f"{r['retrieved_share']:.0%}"
                steps = "" if r.get("model_step_share") is None else f"{r['model_step_share']:.0%}"
                lines.append(
                    f"| {r['method']} | {_source(r['method'])} | {r['tokens_per_forward']:.3f}{ci} | "
                    f"{r['tokens_per_second']:.2f} | {r['draft_forwards']} | {share} | {steps} |"
                )
            best = {}
            for r in mine:
                kind = _source(r["method"])
                if kind not in best or r["tokens_per_forward"] > best[kind]["tokens_per_forward"]:
                    best[kind] = r
            if "model" in best:
                model = best["model"]
                for kind, r in best.items():
                    if kind == "model":
                        continue
                    gain = r["tokens_per_forward"] - model["tokens_per_forward"]
                    forward = "beats" if gain > 0 else "ties with" if gain == 0 else "loses to"
                    speed = "faster" if r["tokens_per_second"] > model["tokens_per_second"] else "slower"
                    overlap = (
                        intervals_overlap(r.get("ci95"), model.get("ci95")) * "; the 95% intervals overlap"
                    )
                    lines.append(
                        f"\n- {kind} (best: {r['method']}) {forward} the draft model's best "
                        f"({model['method']}) in tokens per target forward ({r['tokens_per_forward']:.2f} vs "
                        f"{model['tokens_per_forward']:.2f}{overlap}) "
                        f"and is {speed} ({r['tokens_per_second']:.2f} vs {model['tokens_per_second']:.2f} "
                        "tokens/s)."
                    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
