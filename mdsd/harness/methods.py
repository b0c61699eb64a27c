"""Decoding methods named by a spec, measured side by side on a model pair: the sweeps of the experiments
``batch_efficiency.py`` and ``draft_sources.py``.

A method is ``hf-autoregressive``, ``hf-assisted`` (HF's defaults), ``hf-assisted-heuristic`` (HF's
grow/shrink draft length), or ``TREE/VERIFIER[/POLICY][+SOURCE]``:

* TREE: ``chain:N``, ``binary:D``, ``kary:b1,b2,..``, ``dynamic:DEPTH,K,EXPAND[,BUDGET]`` (``mdsd decode``'s
  spelling), ``sequoia:N`` (Sequoia's best tree of N nodes for the verifier's measured acceptance vector,
  depth <= ``sequoia_depth``), or ``none`` (no draft model: the source alone);
* VERIFIER: any name :class:`mdsd.TreeDecoder` takes (:func:`mdsd.verifiers.verifier_names`);
* POLICY: ``grow`` (HF's grow/shrink depth schedule, :class:`mdsd.tree.adaptive.GrowShrink`), ``rate`` (the
  depth with the most expected tokens per second, ``ExpectedRate`` on the cost profiles in ``profiles``,
  written by experiments/cost_model.py) or ``first`` (with a SOURCE: the model drafts only in the steps where
  the source proposed nothing, :class:`mdsd.tree.adaptive.SourceFirst`; ``first:N``: fewer than N tokens;
  ``first:N:M``: and in the M steps after a step of the source's chains alone that some row rejected whole);
* SOURCE: ``lookup`` (prompt lookup), ``datastore`` (the suffix-array datastore in ``datastore``),
  ``dictionary`` (SPECTRA-style n-grams learnt online), or several joined by ``,`` (in priority order),
  proposing ``retrieve`` = (WIDTH, DEPTH) chains beside the model's children.

:class:`MethodsConfig` holds what these settings and a sweep need (the experiments' configs extend it);
:func:`run_method` is one sweep task: one method at one temperature over a run of prompts (all of them,
or ``prompts_per_task`` of them so that a long sweep checkpoints as it goes), ``batch_size`` at a time,
measured by :func:`mdsd.harness.comparison.compare` (forwards counted by one hook for every method, a 95%
bootstrap interval over prompts), with Sequoia's prediction from the verifier's exact acceptance vector
beside each fixed tree. :func:`sweep_methods` runs the tasks and merges each method's runs of prompts into
one row (:func:`merge_runs`), computed from the per-prompt counts, so a sweep in one task and the same sweep
in many give the same row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from mdsd.costs.predict import depth_seconds
from mdsd.costs.profile import CostProfile
from mdsd.data.corpus import real_pairs
from mdsd.harness import experiment
from mdsd.harness.comparison import HFAssisted, TreeMethod, compare, summarise
from mdsd.harness.sweep import finished_tasks, per_process, run_tasks
from mdsd.token_tree import Tree
from mdsd.tree.drafter import Drafter
from mdsd.tree.spec import compile_option, parse_method, parse_tree
from mdsd.verifiers.registry import path_rule, supports, verifier

__all__ = [
    "MethodsConfig",
    "HF_METHODS",
    "check_method",
    "acceptance_vector",
    "make_method",
    "real_prompts",
    "run_method",
    "chunked",
    "merge_runs",
    "paired_rows",
    "sweep_methods",
    "plot_methods",
]


@dataclass(frozen=True)
class MethodsConfig:
    """What a sweep over decoding methods needs; experiments extend it with their own defaults."""

    target: str = field(default="", metadata={"help": "target model directory ('' = cached qwen2.5-coder)"})
    draft: str = field(default="", metadata={"help": "draft model directory ('' = cached qwen2.5-coder)"})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    dtype: str = field(default="float32", metadata={"help": "model dtype (bfloat16 on a GPU)"})
    datasets: tuple[str, ...] = field(default=("mt-bench", "humaneval"), metadata={"help": "prompt sets"})
    prompts_per_set: int = field(default=1, metadata={"help": "first n prompts of each set (0: all)"})
    batch_size: int = field(default=1, metadata={"help": "prompts an mdsd method decodes together"})
    prompts_per_task: int = field(
        default=0, metadata={"help": "prompts per checkpointed task (0: all; a multiple of --batch-size)"}
    )
    partial: bool = field(
        default=False,
        metadata={
            "help": "write what an interrupted run's checkpoint holds (the prompts every task finished)",
            "run": True,
        },
    )
    max_prompt_tokens: int = field(default=128, metadata={"help": "templated prompt length cap"})
    max_new_tokens: int = field(default=32, metadata={"help": "tokens generated per prompt"})
    temperatures: tuple[float, ...] = field(default=(0.6,), metadata={"help": "temperatures T"})
    methods: tuple[str, ...] = field(default=(), metadata={"help": "methods (mdsd.harness.methods)"})
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
    output_dir: str = experiment.output_dir_field()
    ray: str = experiment.ray_field()
    resume: bool = experiment.resume_field()

    def __post_init__(self) -> None:
        if self.prompts_per_set < 0:
            raise ValueError(f"--prompts-per-set must be >= 0 (0: all), got {self.prompts_per_set}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.prompts_per_task < 0 or self.prompts_per_task % self.batch_size:
            raise ValueError(
                f"--prompts-per-task must be 0 or a multiple of --batch-size {self.batch_size}, "
                f"got {self.prompts_per_task}"
            )
        for spec in self.methods:  # before a prompt is read or a model loaded, not in the sweep's tasks
            try:
                check_method(spec)
            except ValueError as err:
                raise ValueError(f"--methods: {err}") from None
            if spec.startswith("sequoia:") and 0 in self.temperatures:
                raise ValueError(
                    f"--methods {spec}: a Sequoia tree is built from the verifier's acceptance vector at "
                    "T > 0; --temperatures has 0"
                )


HF_METHODS = ("hf-autoregressive", "hf-assisted", "hf-assisted-heuristic")  # HF's own generate paths


def check_method(spec: str) -> None:
    """Refuse a method spec (module docstring) that cannot run, naming what is wrong, before anything loads.

    >>> check_method("binary:3/block")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: method 'binary:3/block': verifier 'block' verifies a chain (...), not a tree
    """
    if spec not in HF_METHODS:
        parse_method(spec)


def acceptance_vector(name: str, temperature: float, positions: int, corpus: str, width: int) -> list[float]:
    """a_j = mean over corpus positions of α(j) − α(j−1): P(the j-th sibling is the accepted one).

    α(j) is the exact acceptance of ``name`` with j drafts (single-draft for j = 1, as the decoder
    verifies a node with one child); entries the verifier does not support or cannot compute exactly
    on these pairs (SpecHub, j != 2; RRSw, j >= 3) end the vector there.
    """
    pairs = real_pairs(temperature, corpus or None)
    alphas = [0.0]
    for j in range(1, width + 1):
        if j > 1 and not supports(name, j):
            break
        v = verifier("single" if j == 1 else name, j)
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


def make_method(spec: str, temperature: float, config: MethodsConfig):
    """The method object of a spec (module docstring; parsed by :func:`mdsd.tree.spec.parse_method`) and, for
    fixed trees, its predicted tokens/step."""
    if spec in ("hf-autoregressive", "hf-assisted"):
        return spec, None
    if spec == "hf-assisted-heuristic":
        return HFAssisted(num_assistant_tokens_schedule="heuristic"), None
    method = parse_method(spec)
    a = None
    if method.tree.startswith("sequoia:"):
        if temperature == 0:
            raise ValueError(
                f"method {spec!r}: a Sequoia tree is built from the verifier's acceptance vector at T > 0"
            )
        a = acceptance_vector(
            method.verifier, temperature, config.acceptance_positions, config.corpus, width=4
        )
    seconds = _rate_seconds(method.tree, config) if method.policy.partition(":")[0] == "rate" else None
    arguments = method.decoder_arguments(config.datastore, seconds, a, config.sequoia_depth)
    tree, depth, source = arguments["tree"], arguments["depth"], arguments["source"]
    fixed = isinstance(tree, Tree) and depth is None and source is None and path_rule(method.verifier) is None
    if fixed and temperature > 0:  # greedy decoding has no acceptance vector: nothing to predict with
        a = a or acceptance_vector(
            method.verifier, temperature, config.acceptance_positions, config.corpus, width=4
        )
        predicted = tree.expected_tokens(a) if int(tree.branching.max(initial=0)) <= len(a) else None
    else:
        predicted = None
    tree_method = TreeMethod(
        tree,
        method.verifier,
        depth,
        label=spec,
        source=source,
        retrieve=tuple(config.retrieve),
        compile=compile_option(config.compile),
    )
    return tree_method, predicted


def _rate_seconds(tree_spec: str, config: MethodsConfig):
    """The cost model of a /rate method: a step's seconds by depth on the profiles in ``config.profiles``."""
    if not config.profiles:
        raise ValueError(
            "a /rate method needs --profiles (the output directory of experiments/cost_model.py)"
        )
    folder = Path(config.profiles)
    target, draft = (CostProfile.load(folder / f"{who}_profile.json") for who in ("target", "draft"))
    context = config.max_prompt_tokens + config.max_new_tokens // 2
    return depth_seconds(target, draft, parse_tree(tree_spec), batch=1, context=context, extrapolate=True)


def _load(config: MethodsConfig, models: tuple[str, str] | None):
    """(target, draft): the model pair (loaded once per process; the draft may be a feature head's folder),
    or the quick tiny pair."""
    from mdsd.drafters.pair import load_target_and_drafter
    from mdsd.hf.tiny import tiny_pair

    if config.quick:
        target, draft = per_process(tiny_pair, config.seed)
        return target.to(config.device), draft.to(config.device)
    target, draft, _ = per_process(load_target_and_drafter, *models, dtype=config.dtype, device=config.device)
    return target, draft


def run_method(
    task: dict, todo: list[list[int]], models: tuple[str, str] | None, config: MethodsConfig
) -> dict:
    """A sweep task (:func:`mdsd.harness.sweep.run_tasks`): method ``task["method"]`` at
    ``task["temperature"]`` over the prompts ``todo[start:stop]`` (``task["prompts"] = [start, stop]``; all of
    ``todo`` without it; prompt i decoded with seed ``config.seed + i``, ``config.batch_size`` at a time), on
    the pair in ``models`` (or the quick tiny pair). Its row (:func:`merge_runs` of its one run): the
    measures of :func:`mdsd.harness.comparison.compare`, the spec, Sequoia's prediction, and the per-prompt
    counts they are computed from."""
    torch.set_num_threads(config.threads)
    target, draft = _load(config, models)
    t = task["temperature"]
    start, stop = task.get("prompts", (0, len(todo)))
    method, predicted = make_method(task["method"], t, config)
    if isinstance(draft, Drafter):
        predicted = None  # the bundled corpus's acceptance vectors are the 0.5B draft's, not a trained one's
    result = compare(
        [method],
        todo[start:stop],
        target,
        draft,
        config.max_new_tokens,
        t,
        seed=config.seed + start,
        batch_size=config.batch_size,
    )
    per_prompt = []
    for r in result.runs:
        o = r.output
        depths = np.asarray(getattr(o, "depth_per_step", []) if getattr(method, "tree", None) else [])
        per_prompt.append(
            {
                "prompt": start + r.prompt,
                "seed": r.seed,
                # a batch by its first prompt's index (HF's methods: one prompt a batch)
                "batch": start + r.batch * config.batch_size
                if isinstance(method, TreeMethod)
                else start + r.prompt,
                "tokens": r.tokens,
                "steps": r.steps,
                "target_forwards": r.target_forwards,
                "draft_forwards": r.draft_forwards,
                "seconds": r.seconds,
                "stopped_by_eos": bool(o.stopped_by_eos),
                "accepted": int(sum(getattr(o, "accepted_per_step", []))),
                "retrieved": int(sum(getattr(o, "retrieved_per_step", []))),
                "drafted_steps": int(depths.size),
                "model_steps": int((depths > 0).sum()),
                "draft_buffer_reads": int(getattr(o, "draft_buffer_reads", 0)),
            }
        )
    fields = {k: v for k, v in task.items() if k != "prompts"}
    return merge_runs([fields | {"predicted_tokens_per_step": predicted, "per_prompt": per_prompt}])[0]


def chunked(tasks: list[dict], sizes: list[int], config: MethodsConfig) -> list[dict]:
    """Each task split into runs of at most ``config.prompts_per_task`` prompts (``"prompts": [start,
    stop]``) that never straddle two prompt sets (``sizes``: each set's prompts, in order), so that a
    checkpointed sweep keeps every finished run; ordered by rounds, each round one run of every set for every
    task, so that what a sweep has finished when it is stopped is a paired sample of every method, balanced
    across the sets. The tasks as given where ``prompts_per_task`` is 0.

    >>> config = MethodsConfig(prompts_per_task=2)
    >>> [t["prompts"] for t in chunked([{"method": "m"}], [3, 2], config)]
    [[0, 2], [3, 5], [2, 3]]
    """
    size = config.prompts_per_task
    if not size:
        return list(tasks)
    starts = np.cumsum([0, *sizes])
    runs = [  # per set, its runs of prompts
        [[a, min(a + size, int(stop))] for a in range(int(start), int(stop), size)]
        for start, stop in zip(starts[:-1], starts[1:], strict=True)
    ]
    rounds = max((len(r) for r in runs), default=0)
    return [
        task | {"prompts": mine[k]} for k in range(rounds) for mine in runs if k < len(mine) for task in tasks
    ]


def merge_runs(rows: list[dict]) -> list[dict]:
    """One row per method: the rows of its runs of prompts (same fields but ``per_prompt``, in order of
    first appearance) joined, and every measure computed again from the joined per-prompt counts
    (:func:`mdsd.harness.comparison.summarise`): tokens per target forward with its bootstrap interval, tokens
    per step, tokens/s over batches, the share of accepted tokens a source proposed (``+SOURCE`` methods),
    the share of steps that drafted with the model, the drafting steps that read the draft's whole buffer."""
    groups: dict[str, dict] = {}
    for row in rows:
        fields = {k: v for k, v in row.items() if k not in _MEASURES}
        key = repr(sorted(fields.items()))
        groups.setdefault(key, fields | {"per_prompt": []})["per_prompt"] += row["per_prompt"]
    merged = []
    for group in groups.values():
        runs = sorted(group["per_prompt"], key=lambda r: r["prompt"])
        column = {name: [r[name] for r in runs] for name in runs[0]}
        if len(set(column["prompt"])) != len(runs):
            raise ValueError(f"method {group['method']!r}: a prompt was run twice in its runs")
        measures = summarise(
            column["tokens"],
            column["steps"],
            column["target_forwards"],
            column["draft_forwards"],
            column["batch"],
            column["seconds"],
        )
        accepted, drafted = sum(column["accepted"]), sum(column["drafted_steps"])
        merged.append(
            group
            | measures
            | {
                "ci95": list(measures["ci95"]) if measures["ci95"] else None,
                "tokens_per_second_ci95": (
                    list(measures["tokens_per_second_ci95"]) if measures["tokens_per_second_ci95"] else None
                ),
                "stopped_by_eos": sum(column["stopped_by_eos"]),
                "retrieved_share": (
                    sum(column["retrieved"]) / accepted if "+" in group["method"] and accepted else None
                ),
                "model_step_share": sum(column["model_steps"]) / drafted if drafted else None,
                "draft_buffer_reads": sum(column["draft_buffer_reads"]),
                "per_prompt": runs,
            }
        )
    return merged


_MEASURES = {  # a row's fields that merge_runs computes from per_prompt
    "per_prompt",
    "prompts",
    "tokens",
    "steps",
    "target_forwards",
    "draft_forwards",
    "seconds",
    "tokens_per_forward",
    "ci95",
    "tokens_per_step",
    "tokens_per_second",
    "tokens_per_second_ci95",
    "stopped_by_eos",
    "retrieved_share",
    "model_step_share",
    "draft_buffer_reads",
}


def pair_directories(config: MethodsConfig) -> tuple[str, str]:
    """(target, draft) directories of a sweep: ``config.target`` and ``config.draft``, each the cached
    qwen2.5-coder pair's where not given (``--draft HEAD`` alone decodes the cached target with a head)."""
    from mdsd.hf.load import pair_paths

    if config.target and config.draft:
        return config.target, config.draft
    target, draft = map(str, pair_paths("qwen2.5-coder"))
    return config.target or target, config.draft or draft


def real_prompts(config: MethodsConfig) -> tuple[tuple[str, str], dict[str, list[list[int]]], dict]:
    """``(models, prompts, described)`` of a sweep on a real pair: the pair's directories
    (:func:`pair_directories`), the first ``config.prompts_per_set`` (0: all)
    chat-templated prompts of each set in ``config.datasets`` as token lists (at most
    ``config.max_prompt_tokens`` each), and the pair described for the results' metadata."""
    from mdsd.data.prompts import load_texts, prompts
    from mdsd.hf.fetch import describe_model
    from mdsd.hf.load import load_tokenizer

    models = pair_directories(config)
    tokenizer = load_tokenizer(models[0])
    todo = {
        name: [
            list(p.input_ids)
            for p in prompts(
                name, config.prompts_per_set or len(load_texts(name)), tokenizer, config.max_prompt_tokens
            )
        ]
        for name in config.datasets
    }
    return models, todo, {"target": describe_model(models[0]), "draft": describe_model(models[1])}


def sweep_methods(
    name: str, fn, tasks: list[dict], todo, pair: tuple[str, str] | None, config: MethodsConfig, **metadata
) -> tuple[Path, list[dict]]:
    """Run ``fn(task, todo, models=pair, config)`` for every task (:func:`mdsd.harness.sweep.run_tasks`: here,
    or on Ray with ``config.ray``; checkpointed, so ``config.resume`` continues an interrupted run), join each
    method's runs of prompts (:func:`merge_runs`) and write the rows to ``out/name.{json,csv}`` with
    ``metadata`` (:func:`mdsd.harness.experiment.write_results`). With ``config.partial`` nothing is run: the
    rows are those of the finished tasks in the checkpoint, cut to the prompts every method that has run
    (at each temperature) finished (a paired sample), and the metadata says how much was done and which
    methods have not run yet; the checkpoint stays for ``--resume``. Returns ``(out, rows)``, ``out`` being
    :func:`mdsd.harness.experiment.output_dir` of ``config.output_dir``."""
    out = experiment.output_dir(name, config.output_dir)
    if config.partial:
        with experiment.partial_results(out, name, config, resume=True) as checkpoint:
            done = finished_tasks(checkpoint, tasks) if checkpoint.exists() else {}
            if not done:
                raise ValueError(f"--partial: {checkpoint} holds no finished task of this config")
            merged = merge_runs(list(done.values()))
            rows, prompts = paired_rows(merged, len(merged))
            started = {(r["temperature"], r["method"]) for r in merged}
            missing = sorted({(t["temperature"], t["method"]) for t in tasks} - started)
            partial = {
                "tasks_finished": len(done),
                "tasks": len(tasks),
                "prompts": prompts,
                "methods_not_started": [{"temperature": t, "method": m} for t, m in missing],
            }
            experiment.write_results(out, name, rows, config, config.seed, partial=partial, **metadata)
            checkpoint_kept = checkpoint.read_bytes()
        checkpoint.write_bytes(checkpoint_kept)  # partial_results deletes it on leaving; it is not finished
        return out, rows
    with experiment.partial_results(out, name, config, config.resume) as checkpoint:
        rows = run_tasks(
            fn,
            tasks,
            shared={"todo": todo, "models": pair, "config": config},
            ray=config.ray or None,
            num_cpus=config.threads,
            num_gpus=1 if config.device.startswith("cuda") else 0,
            checkpoint=checkpoint,
            desc=name.replace("_", " "),
        )
        rows = merge_runs(rows)
        experiment.write_results(out, name, rows, config, config.seed, **metadata)
    return out, rows


def paired_rows(rows: list[dict], methods: int) -> tuple[list[dict], list[int]]:
    """``rows`` (merged, one per method) cut to the prompts all ``methods`` of them finished, measures
    recomputed (:func:`merge_runs`); and those prompts. Rows of methods with no such prompt are dropped."""
    if len(rows) < methods:
        return [], []
    common = set.intersection(*({p["prompt"] for p in r["per_prompt"]} for r in rows))
    cut = [r | {"per_prompt": [p for p in r["per_prompt"] if p["prompt"] in common]} for r in rows]
    return (merge_runs(cut) if common else []), sorted(common)


def plot_methods(rows: list[dict], path: Path) -> None:
    """One row of panels per temperature: tokens per target forward (± 95%, x: Sequoia's prediction) and
    tokens/s, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
