"""Batch efficiency (tokens per target forward) and speed of every decoding method on a real model pair.

Target Qwen2.5-Coder-1.5B-Instruct, draft -0.5B (``mdsd models fetch qwen2.5-coder``, or any local pair via
--target/--draft). Every method decodes the same prompts (the first --prompts-per-set of each --datasets set,
chat-templated) with the same seeds (prompt i: seed + i) and token budget, measured the same way by
:func:`mdsd.hf.compare`: target and draft forwards counted by one forward hook for every method, tokens per
target forward as a ratio of sums with a 95% interval over prompts, tokens per step, tokens/s. Beside each
fixed tree, the tokens per step Sequoia's model predicts from the verifier's acceptance vector measured
exactly on the bundled real corpus (a_j = α(j) − α(j−1), mean over positions of mdsd.data.real_pairs).

A method is ``hf-autoregressive``, ``hf-assisted`` (HF's defaults), ``hf-assisted-heuristic`` (HF's
grow/shrink draft length), or ``TREE/VERIFIER[/POLICY][+SOURCE]``:

* TREE: ``chain:N``, ``binary:D``, ``kary:b1,b2,..``, ``dynamic:DEPTH,K,EXPAND[,BUDGET]`` (mdsd decode's
  spelling), ``sequoia:N`` (Sequoia's best tree of N nodes for the verifier's measured acceptance vector,
  depth <= --sequoia-depth), or ``none`` (no draft model: the source alone);
* VERIFIER: any name TreeDecoder takes: ``mdsd.VERIFIERS``, ``optimal:wor``, or the sequence-level rules
  ``block`` (chains) and ``traversal`` (static trees, i.i.d. children), which have no acceptance vector;
* POLICY: ``grow`` (HF's grow/shrink depth schedule, mdsd.tree.adaptive.GrowShrink) or ``rate`` (the depth
  with the most expected tokens per second, ExpectedRate on the cost profiles of --profiles, from
  experiments/cost_model.py);
* SOURCE: ``lookup`` (prompt lookup), ``datastore`` (the suffix-array datastore in --datastore, built with
  ``mdsd drafters build``), ``dictionary`` (SPECTRA-style n-grams learnt online), or several joined by
  ``,`` (in priority order); --retrieve WIDTH DEPTH chains beside the model's children.

Each (temperature, method) is one task of :func:`mdsd.sweep.run_tasks`: in this process by default, or on
Ray with --ray (this machine) or --ray ADDRESS (a cluster; every node needs the models cached). Timings
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

with METHODS="hf-autoregressive hf-assisted hf-assisted-heuristic chain:4/single chain:16/single/grow
sequoia:16/rrsw binary:3/rrsw dynamic:8,2,3,24/rrsw binary:3/spechub dynamic:8,2,3,24/spechub binary:3/kseq
dynamic:8,2,3,24/kseq binary:3/greedy dynamic:8,2,3,24/greedy binary:3/rrs dynamic:8,2,3,24/rrs".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

import mdsd
from mdsd.experiment import config_from_cli, output_dir, partial_results, write_results
from mdsd.hf.comparison import interval, intervals_overlap
from mdsd.sweep import per_process, run_tasks
from mdsd.verifiers.registry import path_rule

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


@dataclass(frozen=True)
class Config:
    """Tokens per target forward and tokens/s of every method on a real model pair."""

    target: str = field(default="", metadata={"help": "target model directory ('' = cached qwen2.5-coder)"})
    draft: str = field(default="", metadata={"help": "draft model directory ('' = cached qwen2.5-coder)"})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    dtype: str = field(default="float32", metadata={"help": "model dtype (bfloat16 on a GPU)"})
    datasets: tuple[str, ...] = field(default=("mt-bench", "humaneval"), metadata={"help": "prompt sets"})
    prompts_per_set: int = field(default=1, metadata={"help": "first n prompts of each set"})
    max_prompt_tokens: int = field(default=128, metadata={"help": "templated prompt length cap"})
    max_new_tokens: int = field(default=32, metadata={"help": "tokens generated per prompt"})
    temperatures: tuple[float, ...] = field(default=(0.6,), metadata={"help": "temperatures T"})
    methods: tuple[str, ...] = field(default=DEFAULT_METHODS, metadata={"help": "methods (module docstring)"})
    sequoia_depth: int = field(default=8, metadata={"help": "deepest node of sequoia:N trees"})
    acceptance_positions: int = field(
        default=300, metadata={"help": "corpus positions per acceptance vector"}
    )
    corpus: str = field(default="", metadata={"help": "corpus .npz for acceptance vectors ('' = bundled)"})
    retrieve: tuple[int, ...] = field(default=(1, 8), metadata={"help": "retrieved chains: WIDTH DEPTH"})
    datastore: str = field(default="", metadata={"help": "datastore directory for +datastore methods"})
    profiles: str = field(default="", metadata={"help": "cost_model output directory for /rate methods"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads"})
    compile: str = field(
        default="false",
        metadata={
            "help": "mdsd's path: false (eager), true (fast path), or a backend (mdsd decode --compile)"
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of prompt i's decode: seed + i"})
    quick: bool = field(default=False, metadata={"help": "smoke test: tiny random models and prompts"})
    output_dir: str = field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})
    ray: str = field(
        default="",
        metadata={"help": "run on Ray: --ray (here), --ray auto or HOST:PORT", "const": "local", "run": True},
    )
    resume: bool = field(default=False, metadata={"help": "continue an interrupted run", "run": True})


def acceptance_vector(name: str, temperature: float, positions: int, corpus: str, width: int) -> list[float]:
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
            try:
                values.append(v.acceptance(pairs.p[r][keep], pairs.q[r][keep]))
            except ValueError:  # no exact routine at this size (e.g. RRSw, k >= 3 on a wide row)
                values = None
                break
        if values is None:
            break
        alphas.append(float(np.mean(values)))
    return np.clip(np.diff(alphas), 0.0, 1.0).tolist()


def make_method(spec: str, temperature: float, config: Config, tokenizer=None):
    """The method object of a spec (module docstring) and, for fixed trees, its predicted tokens/step."""
    from mdsd.cli.decode import compile_option, parse_tree
    from mdsd.hf import HFAssisted, TreeMethod
    from mdsd.tree.adaptive import ExpectedRate, GrowShrink

    if spec in ("hf-autoregressive", "hf-assisted"):
        return spec, None
    if spec == "hf-assisted-heuristic":
        return HFAssisted(num_assistant_tokens_schedule="heuristic"), None
    head, _, source_spec = spec.partition("+")
    parts = head.split("/")
    if len(parts) not in (2, 3):
        raise ValueError(f"method {spec!r} must be TREE/VERIFIER[/POLICY][+SOURCE] or an hf-* baseline")
    tree_spec, verifier = parts[:2]
    a = None
    if tree_spec == "none":
        tree = None
    elif tree_spec.startswith("sequoia:"):
        a = acceptance_vector(verifier, temperature, config.acceptance_positions, config.corpus, width=4)
        tree = mdsd.Tree.sequoia(a, int(tree_spec.split(":")[1]), config.sequoia_depth)
    else:
        tree = parse_tree(tree_spec)
    depth = None
    if len(parts) == 3:
        if parts[2] == "grow":
            depth = GrowShrink()
        elif parts[2] == "rate":
            depth = _rate_policy(tree, config, ExpectedRate)
        else:
            raise ValueError(f"method {spec!r}: the policy must be grow or rate")
    source = _source(source_spec, config, tokenizer) if source_spec else None
    if isinstance(tree, mdsd.Tree) and depth is None and source is None and path_rule(verifier) is None:
        a = a or acceptance_vector(verifier, temperature, config.acceptance_positions, config.corpus, width=4)
        predicted = tree.expected_tokens(a) if int(tree.branching.max(initial=0)) <= len(a) else None
    else:
        predicted = None
    method = TreeMethod(
        tree,
        verifier,
        depth,
        label=spec,
        source=source,
        retrieve=tuple(config.retrieve),
        compile=compile_option(config.compile),
    )
    return method, predicted


def _rate_policy(tree, config: Config, policy):
    if not config.profiles:
        raise ValueError(
            "a /rate method needs --profiles (the output directory of experiments/cost_model.py)"
        )
    folder = Path(config.profiles)
    target, draft = (mdsd.CostProfile.load(folder / f"{who}_profile.json") for who in ("target", "draft"))
    context = config.max_prompt_tokens + config.max_new_tokens // 2
    seconds = mdsd.depth_seconds(target, draft, tree, batch=1, context=context, extrapolate=True)
    return policy(seconds=seconds)


def _source(spec: str, config: Config, tokenizer):
    from mdsd.drafters import Datastore, Dictionary, Priority, PromptLookup

    made = []
    for name in spec.split(","):
        if name == "lookup":
            made.append(PromptLookup())
        elif name == "dictionary":
            made.append(Dictionary())
        elif name == "datastore":
            if not config.datastore:
                raise ValueError("a +datastore method needs --datastore (mdsd drafters build ... --out DIR)")
            made.append(Datastore.load(config.datastore))
        else:
            raise ValueError(f"source {name!r} must be lookup, datastore or dictionary")
    return made[0] if len(made) == 1 else Priority(made)


def tiny_pair(seed: int, vocab: int = 64):
    """A random-weight Qwen2 target (2 layers) and a smaller draft (1 layer) for --quick."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    models = []
    for offset, (hidden, layers) in enumerate(((64, 2), (32, 1))):
        config = Qwen2Config(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=False,
            eos_token_id=None,
        )
        config._attn_implementation = "sdpa"
        with torch.random.fork_rng():  # transformers initialises weights from the global RNG
            torch.manual_seed(seed + offset)
            models.append(Qwen2ForCausalLM(config).eval())
    return models


def load(config: Config, models: tuple[str, str] | None):
    """(target, draft, tokenizer): the real pair (loaded once per process), or the quick tiny pair."""
    if config.quick:
        target, draft = per_process(tiny_pair, config.seed)
        return target.to(config.device), draft.to(config.device), None
    from mdsd.hf import load_pair

    return per_process(load_pair, *models, dtype=config.dtype, device=config.device)


def run_configuration(task: dict, todo: list[list[int]], models, config: Config) -> dict:
    """A sweep task: one method at one temperature over every prompt, measured by mdsd.hf.compare."""
    from mdsd.hf import compare

    torch.set_num_threads(config.threads)
    target, draft, tokenizer = load(config, models)
    t = task["temperature"]
    method, predicted = make_method(task["method"], t, config, tokenizer)
    result = compare([method], todo, target, draft, config.max_new_tokens, t, seed=config.seed)
    row = result.records()[0]
    outputs = [run.output for run in result.runs]
    accepted = sum(sum(getattr(o, "accepted_per_step", [])) for o in outputs)
    retrieved = sum(sum(getattr(o, "retrieved_per_step", [])) for o in outputs)
    return row | {
        "method": task["method"],
        "temperature": t,
        "predicted_tokens_per_step": predicted,
        "retrieved_share": retrieved / accepted if "+" in task["method"] and accepted else None,
        "per_prompt": [
            {
                "tokens": r.tokens,
                "target_forwards": r.target_forwards,
                "draft_forwards": r.draft_forwards,
                "seconds": r.seconds,
            }
            for r in result.runs
        ],
    }


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    torch.set_num_threads(config.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models, prompt_sets, described = None, [], {}
    if config.quick:
        gen = torch.Generator().manual_seed(config.seed)
        todo = [torch.randint(64, (int(n),), generator=gen).tolist() for n in (5, 9, 13, 7)]
    else:
        from mdsd.data.prompts import prompts
        from mdsd.hf import describe_model, load_tokenizer, pair_paths

        models = (
            (config.target, config.draft) if config.target else tuple(map(str, pair_paths("qwen2.5-coder")))
        )
        tokenizer = load_tokenizer(models[0])
        todo = [
            list(p.input_ids)
            for name in config.datasets
            for p in prompts(name, config.prompts_per_set, tokenizer, config.max_prompt_tokens)
        ]
        prompt_sets = list(config.datasets)
        described = {"target": describe_model(models[0]), "draft": describe_model(models[1])}
    tasks = [{"temperature": t, "method": m} for t in config.temperatures for m in config.methods]
    out = output_dir("batch_efficiency", config.output_dir)
    with partial_results(out, "batch_efficiency", config, config.resume) as checkpoint:
        rows = run_tasks(
            run_configuration,
            tasks,
            shared={"todo": todo, "models": models, "config": config},
            ray=config.ray or None,
            num_cpus=config.threads,
            num_gpus=1 if config.device.startswith("cuda") else 0,
            checkpoint=checkpoint,
            desc="batch efficiency",
        )
        write_results(
            out, "batch_efficiency", rows, config, config.seed, models=described, prompt_sets=prompt_sets
        )
        plot(rows, out / "batch_efficiency.png")
        (out / "summary.md").write_text(summary(rows, config, len(todo)))
    print((out / "summary.md").read_text())


def plot(rows: list[dict], path: Path) -> None:
    """One row of panels per temperature: tokens per target forward (± 95%) and tokens/s, per method."""
    temps = sorted({r["temperature"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(
        len(temps), 2, figsize=(11, 0.35 * len(methods) * len(temps) + 1.5), squeeze=False
    )
    for (left, right), t in zip(axes, temps, strict=True):
        mine = {r["method"]: r for r in rows if r["temperature"] == t}
        y = np.arange(len(methods))
        tpf = [mine[m]["tokens_per_forward"] if m in mine else np.nan for m in methods]
        err = np.array(
            [
                [
                    mine[m]["tokens_per_forward"] - mine[m]["ci95"][0],
                    mine[m]["ci95"][1] - mine[m]["tokens_per_forward"],
                ]
                if m in mine and mine[m]["ci95"]
                else [0.0, 0.0]
                for m in methods
            ]
        ).T
        left.barh(y, tpf, xerr=err, color="C0", capsize=2)
        for i, m in enumerate(methods):
            pred = mine.get(m, {}).get("predicted_tokens_per_step")
            if pred is not None:
                left.plot(pred, i, "kx")
        left.set_yticks(y, methods, fontsize=7)
        left.set(xlabel="tokens per target forward (x: Sequoia prediction)", title=f"T = {t}")
        right.barh(y, [mine[m]["tokens_per_second"] if m in mine else np.nan for m in methods], color="C1")
        right.set_yticks(y, [""] * len(methods))
        right.set(xlabel="tokens/s", title=f"T = {t}")
        for ax in (left, right):
            ax.invert_yaxis()
            ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary(rows: list[dict], config: Config, prompts: int) -> str:
    source = "tiny random models (--quick)" if config.quick else "Qwen2.5-Coder-1.5B target, 0.5B draft"
    lines = [
        f"# Batch efficiency and speed ({source})",
        "",
        f"Device {config.device}, dtype {config.dtype}, {config.threads} threads; {prompts} prompts "
        f"({', '.join(config.datasets)}), {config.max_new_tokens} new tokens each; prompt i decoded with "
        f"seed {config.seed} + i by every method. Tokens per target forward and tokens/s: ratios of sums, "
        "95% t-intervals over prompts; forwards counted by one forward hook for every method.",
        "",
        "| T | method | tokens / target forward (95% CI) | predicted | tokens / step | tokens/s (95% CI) | "
        "target fwd | draft fwd | from source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pred = "" if r.get("predicted_tokens_per_step") is None else f"{r['predicted_tokens_per_step']:.2f}"
        share = "" if r.get("retrieved_share") is None else f"{r['retrieved_share']:.0%}"
        lines.append(
            f"| {r['temperature']} | {r['method']} | {r['tokens_per_forward']:.3f}{interval(r['ci95'])} | "
            f"{pred} | {r['tokens_per_step']:.3f} | "
            f"{r['tokens_per_second']:.2f}{interval(r['tokens_per_second_ci95'])} | "
            f"{r['target_forwards']} | {r['draft_forwards']} | {share} |"
        )
    for t in dict.fromkeys(r["temperature"] for r in rows):
        lines += verdicts([r for r in rows if r["temperature"] == t], t)
    return "\n".join(lines) + "\n"


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
    main()
