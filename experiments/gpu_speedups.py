"""Predicted GPU speedups of every measured method: the cost model on a GPU's profiles, B = 1..64.

Inputs, all in the repository:

* two cost profiles (target, draft) measured on a GPU by :func:`mdsd.measure_profile`, of one decoder path:
  the fast path's (``benchmarks/gpu_fast.py``'s ``profiles`` section) or the eager path's; a folder with
  the target's alone predicts only the methods that run no draft model (a draft source alone); a forward
  wider than the profile's widest (a source-first step reading the draft's whole buffer) continues its
  last segment, and the rows that need it say so. Or, with
  ``--forwards``, the two models' captured forwards of ``gpu_fast.py``'s ``forwards`` section (B = 1 and 64,
  t = 1, 5 and 16 new tokens, one cache length) as a coarse pair of profiles: linear between those points,
  and beyond t = 16 the last segment continued (the rows whose widest forward reads more say so); with
  ``--fused``, the forwards of its ``fused_forwards`` section instead (compiled by inductor, then captured;
  B = 1, t = 1 and 16); or, with ``--heads``, the captured forwards of its ``heads`` section at B = 1 (t = 1
  and 16, or of its ``fused_heads`` section): the target's, and as the draft a feature head of
  ``--head-shape`` (MLP width, draft vocabulary; random weights of the trained head's shapes; ``--head-model
  head-fused``: the one reading several of the target's layers) — for the methods a head drafted
  (``results/drafters/decode-*``); with ``--small`` besides, the draft is instead a small drafter of
  ``mdsd drafters pretrain``/``finetune`` whose forwards are not measured: the heads section's target
  forwards times the drafter's ratio to the target in ``--draft-costs`` (``benchmarks/bench_drafter_cost.py``:
  measured where a GPU timed that shape, else predicted from kernels and bytes), at every number of new
  tokens (at B = 1 both are bound by their kernels, not their arithmetic);
* the overhead of a step outside its forwards on that GPU, fitted (non-negative least squares, as
  :func:`mdsd.measure_overhead`) to the decode steps ``benchmarks/gpu_fast.py`` measured: host time =
  o0 + o1 · B · (F + M), **per kind of step** (:data:`KINDS`: a model tree's, a draft source's alone, an
  autoregressive step's), each with its fit's error, and each method charged its own kind's while
  autoregressive decoding, the baseline, is charged the autoregressive steps' (a kind with fewer than two
  measured steps is not fitted, and then nobody is charged it: the summary says so); none for the eager
  profiles (their step overheads were not measured per tree);
* the tokens per target forward each method reached on the real Qwen2.5-Coder pair
  (``results/batch_efficiency``, ``results/draft_sources``).

For every mdsd method and batch size it writes :func:`mdsd.predict`'s speedup over autoregressive decoding on
the same profiles (the baseline: AR's step predicted as a forward of one token, plus AR's own fitted overhead
where ``--overhead`` is given), and with ``--fused-ar`` also over autoregressive decoding as mdsd runs it
fastest, its B = 1 step compiled by inductor and captured, as measured on the GPU (``speedup_vs_fused_ar``;
the method itself is predicted on the profiles' path), and beside them the **bound** of the method's plan: the
speedup if every drafted path were accepted whole (depth + 1 tokens per step; retrieved chains count at their
depth), which only the draft/target cost ratio limits. The forwards' shapes are the path's own
(:func:`mdsd.costs.step_forwards`).
A source-first method (``/first[:N[:M]]``, :class:`mdsd.tree.adaptive.SourceFirst`) is costed as the mixture
it ran: its measured share of steps that drafted with the model at the whole plan, the measured number of
them whose first draft forward read the draft's whole buffer (``CapturedRunner.LAG`` blocks, after chains-only
steps; ``draft_buffer_reads``) rather than one block, the other steps at the source's chains alone (no draft
forward), plus the catch-up forwards it measured (draft forwards beyond its drafting steps': the fast path's,
over the whole buffer; none on the eager path; a first step of chains alone reads the prompt, costed as one
of them).
Approximations, stated: another adaptive-depth method is costed at its full tree; a dynamic tree at its
budget; the cache length is the prompts' mean plus half the budget. HF's methods are not mdsd's decoder and
are left out.

    python experiments/gpu_speedups.py --profiles results/gpu/profiles/h200-static \
        --overhead benchmarks/results/gpu_fast_h200_1128.json --output-dir results/gpu
    python experiments/gpu_speedups.py --profiles results/gpu/profiles/h200-eager --label eager \
        --output-dir results/gpu
    python experiments/gpu_speedups.py --forwards benchmarks/results/gpu_fast_h100.json --context 256 \
        --label h100-forwards --output-dir results/gpu
    python experiments/gpu_speedups.py --forwards gpu_fast.json --fused --context 256 --batches 1 \
        --label fused --output-dir results/gpu     # B = 1, where the fused_forwards section measured
    python experiments/gpu_speedups.py --heads benchmarks/results/gpu_fast_h200_1128_heads.json \
        --context 256 --batches 1 --results results/drafters/decode-kl-head/batch_efficiency.json \
        --label h200-head --output-dir results/drafters/decode-kl-head
    python experiments/gpu_speedups.py --heads benchmarks/results/gpu_fast_h200_1128_heads.json \
        --small small:512:4:16384 --context 256 --batches 1 --label h200-small \
        --results <a small drafter's batch_efficiency.json> --output-dir <its folder>
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import mdsd
from mdsd.costs import Overhead, step_forwards
from mdsd.harness.experiment import config_from_cli, output_dir, run_script, write_results
from mdsd.harness.methods import acceptance_vector, merge_runs
from mdsd.tree.compiled import CapturedRunner
from mdsd.tree.plan import DynamicTree, static_plan, with_retrieval
from mdsd.tree.spec import parse_method, parse_tree

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Config:
    """Predicted GPU speedups of the measured methods against batch size."""

    profiles: str = field(
        default="results/gpu/profiles/h200-static", metadata={"help": "folder with target.json, draft.json"}
    )
    forwards: str = field(
        default="",
        metadata={"help": "gpu_fast.json whose captured forwards are the profiles (not --profiles)"},
    )
    fused: bool = field(
        default=False, metadata={"help": "with --forwards: its inductor-compiled forwards (fused_forwards)"}
    )
    heads: str = field(
        default="", metadata={"help": "gpu_fast.json whose heads section's target and head are the profiles"}
    )
    head_shape: tuple[int, ...] = field(
        default=(4096, 16384), metadata={"help": "with --heads: the head's MLP width and draft vocabulary"}
    )
    head_model: str = field(
        default="head",
        metadata={"help": "with --heads: the head's rows, head or head-fused (reading several layers)"},
    )
    small: str = field(
        default="",
        metadata={"help": "with --heads: the draft is this --draft-costs row's small drafter (small:H:L:M)"},
    )
    draft_costs: str = field(
        default="benchmarks/results/drafter_cost.json",
        metadata={"help": "bench_drafter_cost.py's result: the --small drafter's forward over the target's"},
    )
    overhead: str = field(default="", metadata={"help": "gpu_fast.json whose decode steps fit the overhead"})
    fused_ar: str = field(
        default="",
        metadata={"help": "gpu_fast.json with a measured fused AR step (B = 1): a second baseline column"},
    )
    label: str = field(default="static", metadata={"help": "name of this prediction (file names)"})
    results: tuple[str, ...] = field(
        default=(
            "results/batch_efficiency/batch_efficiency.json",
            "results/draft_sources/draft_sources.json",
            "results/source_first/draft_sources.json",
            "results/source_first_greedy/draft_sources.json",
            "results/source_first_humaneval/draft_sources.json",
            "results/source_first_min_tokens/draft_sources.json",
            "results/source_first_backoff/draft_sources.json",
        ),
        metadata={"help": "measured tokens per target forward"},
    )
    sets: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "NAME:SIZE of the prompt sets a results file without a dataset column ran, in order (its "
            "prompt numbers run through them): each method's row is split by set"
        },
    )
    batches: tuple[int, ...] = field(default=(1, 2, 4, 8, 16, 32, 64), metadata={"help": "batch sizes B"})
    context: int = field(default=160, metadata={"help": "cache length of the prediction"})
    output_dir: str = mdsd.harness.experiment.output_dir_field()
    seed: int = field(default=0, metadata={"help": "unused (no randomness); recorded"})


def plan_of(spec: str, temperature: float, retrieve: tuple[int, int]):
    """The plan a method drafts (None for HF's methods and for unknown specs)."""
    if spec.startswith("hf-"):
        return None
    method = parse_method(spec)  # a depth policy, if any, is costed by the caller
    tree_spec, verifier, source = method.tree, method.verifier, method.source
    if tree_spec == "none":
        plan = None
    elif tree_spec.startswith("sequoia:"):
        a = acceptance_vector(verifier, temperature, 300, "", width=4)
        plan = static_plan(mdsd.Tree.sequoia(a, int(tree_spec.split(":")[1]), 8))
    else:
        tree = parse_tree(tree_spec)
        plan = tree.plan() if isinstance(tree, DynamicTree) else static_plan(tree)
    if source:
        plan = with_retrieval(plan, *retrieve)
    return plan


KINDS = {  # kinds of step whose overhead is fitted apart: gpu_fast's decode rows by tree
    "model": "a draft model's tree (with or without a source's chains)",
    "source": "a draft source's chains alone (no draft model)",
    "autoregressive": "autoregressive decoding (one token, nothing drafted)",
}


def step_kind(tree: str) -> str:
    """The kind (:data:`KINDS`) of a gpu_fast decode row's ``tree``: ``none``, ``lookup*`` or a model's."""
    return "autoregressive" if tree == "none" else "source" if tree.startswith("lookup") else "model"


def fit_overheads(path: Path) -> dict[str, Overhead]:
    """{kind: o0 + o1 · B · (F + M)} fitted to the host time of the GPU's measured fast-path decode steps of
    each kind (:data:`KINDS`) that has at least two; F + M of a step as the gpu_fast run drafted it (model
    trees under RRSw, prompt lookup alone one chain of 8, autoregressive 1)."""
    from scipy.optimize import nnls

    from mdsd.costs.predict import vocabulary_rows

    rows = [r for r in json.loads(path.read_text())["decode"] if "host_ms" in r and r["path"] != "eager"]
    fits = {}
    for kind in KINDS:
        mine = [r for r in rows if step_kind(r["tree"]) == kind]
        if len(mine) < 2:
            continue
        plans = [
            None
            if kind == "autoregressive"
            else with_retrieval(None, 1, 8)
            if kind == "source"
            else plan_of(f"{r['tree']}/rrsw", 0.6, (1, 1))
            for r in mine
        ]
        design = [
            [1.0, r["batch"] * (1 if p is None else vocabulary_rows(p))]
            for r, p in zip(mine, plans, strict=True)
        ]
        A, y = np.array(design), np.array([max(r["host_ms"], 0.0) * 1e-3 for r in mine])
        scale = A.max(axis=0)
        coef, _ = nnls(A / scale, y)
        coef = coef / scale
        error = float(np.sqrt(np.mean(((A @ coef - y) / np.maximum(y, 1e-9)) ** 2)))
        fits[kind] = Overhead(float(coef[0]), float(coef[1]), "rrsw", 0.6, len(mine), error)
    return fits


def fused_ar_seconds(path: Path) -> float:
    """The measured B = 1 autoregressive step compiled by inductor and captured (``inductor-cudagraph``, tree
    ``none``) in any section of a ``benchmarks/gpu_fast.py`` result, in seconds."""
    payload = json.loads(path.read_text())
    steps = [
        r["step_ms"]
        for rows in payload.values()
        if isinstance(rows, list)
        for r in rows
        if isinstance(r, dict)
        and (r.get("path"), r.get("tree"), r.get("batch")) == ("inductor-cudagraph", "none", 1)
        and "step_ms" in r
    ]
    if len(steps) != 1:
        raise ValueError(
            f"--fused-ar {path.name}: {len(steps)} fused autoregressive B = 1 steps, expected one"
        )
    return 1e-3 * steps[0]


def forward_profiles(path: Path, fused: bool = False) -> tuple[mdsd.CostProfile, mdsd.CostProfile]:
    """(target, draft): the captured forwards of a ``benchmarks/gpu_fast.py`` result's ``forwards`` section
    (or, ``fused``, the inductor-compiled and captured ones of its ``fused_forwards`` section) as cost
    profiles on their grid (B × new tokens × its one cache length; medians of 30 replays, no spread
    recorded)."""
    payload = json.loads(path.read_text())
    section, column = ("fused_forwards", "fused_ms") if fused else ("forwards", "captured_ms")
    backend = next((r["backend"] for r in payload[section] if fused and "backend" in r), None)
    return tuple(
        _profile(payload, path, [r for r in payload[section] if r["model"] == who], column, who, backend)
        for who in ("target", "draft")
    )


def head_profiles(
    path: Path, shape: tuple[int, int], model: str = "head"
) -> tuple[mdsd.CostProfile, mdsd.CostProfile]:
    """(target, head): the captured forwards at B = 1 (t = 1, 16) of a ``benchmarks/gpu_fast.py`` result's
    ``heads`` or ``fused_heads`` section, the head being the ``model`` rows ("head", or "head-fused": one
    reading several of the target's layers) of MLP width and draft vocabulary ``shape``."""
    payload = json.loads(path.read_text())
    rows = [r for section in ("heads", "fused_heads") for r in payload.get(section, []) if r["B"] == 1]
    head = [r for r in rows if r["model"] == model and (r["intermediate"], r["draft_vocab"]) == tuple(shape)]
    if not head:
        shapes = sorted(
            {(r["model"], r["intermediate"], r["draft_vocab"]) for r in rows if r["model"] != "target"}
        )
        raise ValueError(
            f"--head-model {model} --head-shape {list(shape)} was not measured in {path.name}: "
            f"it has {shapes}"
        )
    target = [r for r in rows if r["model"] == "target"]
    return _profile(payload, path, target, "captured_ms", "target"), _profile(
        payload, path, head, "captured_ms", "head"
    )


def small_profile(target: mdsd.CostProfile, path: Path, name: str) -> mdsd.CostProfile:
    """A small drafter's profile: ``target``'s forwards times the drafter's forward time over the target's,
    from the row ``name`` of a ``benchmarks/bench_drafter_cost.py`` result (measured where it was, else
    predicted)."""
    rows = {r["model"]: r for r in json.loads(path.read_text())["rows"]}
    if name not in rows or not name.startswith("small:"):
        small = sorted(k for k in rows if k.startswith("small:"))
        raise ValueError(f"--small {name!r} is not a small drafter's row of {path.name}: it has {small}")
    row = rows[name]
    measured = row.get("measured_ratio") is not None
    ratio = row["measured_ratio"] if measured else row["predicted_ratio"]
    model = {"name": f"{name} ({'measured' if measured else 'predicted'} at {ratio:.4f} of the target)"}
    times = (np.asarray(target.times) * ratio).tolist()
    return dataclasses.replace(target, model=model | {"ratio": ratio, "of": path.name}, times=times)


def _profile(payload: dict, path: Path, rows: list[dict], column: str, who: str, backend=None):
    """The cost profile of one model's measured forwards (rows with B, tokens, context and ``column`` ms)."""
    env = payload["env"]
    device = f"{env['device']} ({env['gpu']})" if "gpu" in env else env["device"]
    dtype = "bfloat16" if env["device"] == "cuda" else "float32"  # gpu_fast's dtypes
    ms = {(r["B"], r["tokens"], r["context"]): r[column] for r in rows if column in r}
    b, t, c = (tuple(sorted({key[i] for key in ms})) for i in range(3))
    times = [[[1e-3 * ms[(i, j, k)] for k in c] for j in t] for i in b]
    model = {"name": f"{who} of {path.name}", "parameters": env.get(f"{who}_parameters", 0)}
    zeros = np.zeros((len(b), len(t), len(c))).tolist()
    how = "static:" + (backend or ("cudagraph" if env["device"] == "cuda" else "none"))
    return mdsd.CostProfile(model, device, dtype, 0, 30, b, t, c, times, zeros, how)


def by_set(rows: list[dict], sets: tuple[str, ...]) -> list[dict]:
    """``rows`` as they are, or, with ``sets`` (NAME:SIZE, in the order the run numbered its prompts) and
    rows without a ``dataset``, each row split into one per set: its prompts' counts merged again
    (:func:`mdsd.harness.methods.merge_runs`) under ``dataset`` NAME."""
    if not sets or any(r.get("dataset") for r in rows):
        return rows
    spans, start = [], 0
    for spec in sets:
        name, _, size = spec.rpartition(":")
        if not name or not size.isdigit() or int(size) < 1:
            raise ValueError(f"--sets takes NAME:SIZE with a positive size; got {spec!r}")
        spans.append((name, range(start, start + int(size))))
        start += int(size)
    split = []
    for name, span in spans:
        mine = [r | {"per_prompt": [p for p in r["per_prompt"] if p["prompt"] in span]} for r in rows]
        split += [r | {"dataset": name} for r in merge_runs([r for r in mine if r["per_prompt"]])]
    return split


def predictions(config: Config) -> tuple[list[dict], dict[str, Overhead], dict, mdsd.CostProfile]:
    if config.fused and not config.forwards:
        raise ValueError("--fused reads the fused_forwards section of --forwards: give --forwards too")
    if config.forwards and config.heads:
        raise ValueError("give --forwards or --heads, not both")
    if config.small and not config.heads:
        raise ValueError("--small scales the target forwards of --heads: give --heads too")
    if config.forwards or config.heads:
        if config.forwards:
            target, draft = forward_profiles(ROOT / config.forwards, config.fused)
        elif config.small:
            target, _ = head_profiles(ROOT / config.heads, config.head_shape, config.head_model)
            draft = small_profile(target, ROOT / config.draft_costs, config.small)
        else:
            target, draft = head_profiles(ROOT / config.heads, config.head_shape, config.head_model)
        if config.context not in target.contexts:
            raise ValueError(f"--context must be {target.contexts[0]} with --forwards, got {config.context}")
        lo, hi = target.batches[0], target.batches[-1]
        if not all(lo <= B <= hi for B in config.batches):
            raise ValueError(f"--batches must lie in [{lo}, {hi}], the batches of those forwards")
    else:
        folder = ROOT / config.profiles
        target = mdsd.CostProfile.load(folder / "target.json")
        draft = mdsd.CostProfile.load(folder / "draft.json") if (folder / "draft.json").exists() else None
    overheads = fit_overheads(ROOT / config.overhead) if config.overhead else {}
    fused_ar = fused_ar_seconds(ROOT / config.fused_ar) if config.fused_ar else None
    baseline = overheads.get("autoregressive")
    stand_in = draft or target  # a plan without draft forwards never reads the draft's profile
    rows = []
    for result in config.results:
        payload = json.loads((ROOT / result).read_text())
        retrieve = tuple(payload["metadata"]["config"].get("retrieve", (1, 8)))
        for r in by_set(payload["rows"], config.sets):
            plan = plan_of(r["method"], r["temperature"], retrieve)
            if plan is None or (draft is None and step_forwards(plan)[0]):
                continue  # HF's methods; without a draft profile, the methods that run the draft model
            policy = parse_method(r["method"]).policy
            share = r.get("model_step_share") if policy.partition(":")[0] == "first" else None
            e = min(r["tokens_per_forward"], plan.max_depth + 1)
            static = stand_in.path != "eager"
            draft_tokens, target_tokens = step_forwards(plan, static=static)
            widest = max([*draft_tokens, target_tokens])  # new tokens of the step's widest forward
            if share is not None:  # the draft's buffer, which drafting steps may read after chains alone
                whole = CapturedRunner.LAG * (plan.max_depth + 1) if static else draft_tokens[0]
                caught = max(r["draft_forwards"] - len(draft_tokens) * share * r["target_forwards"], 0)
                caught /= r["target_forwards"]  # catch-up forwards per step (the fast path's; eager: none)
                wide = r["draft_buffer_reads"] / r["target_forwards"]  # drafting steps reading the buffer
                widest = max(widest, whole) if wide or caught else widest
            for B in config.batches:
                pred = mdsd.predict(
                    target,
                    stand_in,
                    plan,
                    None,
                    B,
                    config.context,
                    tokens_per_step=e,
                    overhead=overheads.get("source" if not step_forwards(plan)[0] else "model"),
                    autoregressive_overhead=baseline,
                    extrapolate=True,
                )
                step, ar = pred.step_seconds, pred.autoregressive_seconds
                if share is not None:
                    read = stand_in.seconds(B, whole, config.context, True)  # the buffer, one forward
                    block = stand_in.seconds(B, draft_tokens[0], config.context, True)
                    alone = mdsd.predict(
                        target,
                        stand_in,
                        with_retrieval(None, *retrieve),
                        None,
                        B,
                        config.context,
                        tokens_per_step=1.0,
                        overhead=overheads.get("source"),
                        extrapolate=True,
                    ).step_seconds
                    step = share * step + wide * (read - block) + (1 - share) * alone + caught * read
                rows.append(
                    {
                        "source": Path(result).parent.name,
                        "dataset": r.get("dataset", ""),
                        "method": r["method"],
                        "temperature": r["temperature"],
                        "batch": B,
                        "tokens_per_forward": r["tokens_per_forward"],
                        "model_step_share": share,
                        "step_ms": 1e3 * step,
                        "autoregressive_ms": 1e3 * ar,
                        "speedup": e * ar / step,
                        "speedup_vs_fused_ar": e * fused_ar / step if fused_ar and B == 1 else None,
                        "bound": (plan.max_depth + 1) * ar / step,
                        "extrapolated": widest > target.tokens[-1],
                    }
                )
    ratio = {
        B: draft.seconds(B, 1, config.context) / target.seconds(B, 1, config.context)
        for B in config.batches
        if draft is not None
    }
    return rows, overheads, ratio, target


def summary(
    rows: list[dict], overheads: dict[str, Overhead], ratio: dict, config: Config, target: mdsd.CostProfile
) -> str:
    kind = "inductor-compiled, captured" if config.fused else "captured"
    star = f"* : a forward of the step reads more than {target.tokens[-1]}, extrapolated"
    where = (
        f"the {kind} forwards of {config.forwards or config.heads} on {target.device} (B in "
        f"{list(target.batches)}, new tokens in {list(target.tokens)}; {star})"
        if config.forwards or config.heads
        else f"{config.profiles} ({star})"
    )
    if config.small:
        where += f"; the draft is the small drafter {config.small}: the target's forwards times its ratio "
        where += f"in {Path(config.draft_costs).name}"
    elif config.heads:
        where += f"; the draft is a feature head of MLP width {config.head_shape[0]} and "
        where += f"{config.head_shape[1]:,} draft tokens"
    lines = [
        f"# Predicted GPU speedups over autoregressive decoding ({config.label} profiles)",
        "",
        f"Profiles: {where}; context {config.context}. Step overhead, fitted per kind of step "
        f"(o0 + o1 · B · (F + M)): {overhead_text(overheads, bool(config.overhead))}.",
        "Draft / target one-token forward: " + ", ".join(f"B = {B}: {r:.2f}" for B, r in ratio.items())
        if ratio
        else "No draft profile: only methods that run no draft model (a draft source alone) are predicted.",
        "",
        baseline_text(rows, config),
        "",
        "Each cell: predicted speedup (bound: every drafted path accepted whole).",
        "",
        "| results: set | T | method | tokens/forward | "
        + " | ".join(f"B = {B}" for B in config.batches)
        + (" | B = 1 vs fused AR |" if config.fused_ar else " |"),
        "|---|---|---|---|" + "---|" * (len(config.batches) + bool(config.fused_ar)),
    ]
    keys = sorted({(r["source"], r["dataset"], r["temperature"], r["method"]) for r in rows}, key=str)
    for source, dataset, temperature, method in keys:
        mine = [
            r
            for r in rows
            if (r["source"], r["dataset"], r["temperature"], r["method"])
            == (source, dataset, temperature, method)
        ]
        cells = " | ".join(f"{r['speedup']:.2f} ({r['bound']:.2f})" for r in mine)
        if config.fused_ar:
            vs = next((r["speedup_vs_fused_ar"] for r in mine if r["speedup_vs_fused_ar"] is not None), None)
            cells += f" | {vs:.2f}" if vs is not None else " | "
        name = f"{source}: {dataset}" if dataset else source
        star = "*" if mine[0]["extrapolated"] else ""
        share = mine[0].get("model_step_share")
        steps = "" if share is None else f" (model steps {share:.0%})"
        lines.append(
            f"| {name} | {temperature} | {method}{star}{steps} | {mine[0]['tokens_per_forward']:.2f} | "
            f"{cells} |"
        )
    return "\n".join(lines) + "\n"


def baseline_text(rows: list[dict], config: Config) -> str:
    """What the speedups divide by, in words, with AR's step at B = 1."""
    ar = next((r["autoregressive_ms"] for r in rows if r["batch"] == 1), None)
    kind = (
        "fused, captured" if config.fused else "captured" if config.forwards or config.heads else "profiled"
    )
    text = (
        f"Baseline: autoregressive decoding on the same {kind} forwards"
        + (" plus AR's own fitted overhead" if config.overhead else "")
        + (f" ({ar:.2f} ms a token at B = 1)" if ar is not None else "")
    )
    if config.fused_ar:
        fused = 1e3 * fused_ar_seconds(ROOT / config.fused_ar)
        text += (
            f"; last column: over AR as mdsd runs it fastest, compiled by inductor and captured, measured at "
            f"{fused:.2f} ms a token ({config.fused_ar}), the method still on the profiles' path"
        )
    return text + "."


def overhead_text(overheads: dict[str, Overhead], fitted: bool) -> str:
    """The fitted overheads in words, and who is charged which."""
    if not fitted:
        return "none (forwards only, autoregressive decoding included)"
    parts = [
        f"{kind} {1e3 * o.per_step:.3f} ms + {1e6 * o.per_row_node:.2f} µs · B · (F + M) "
        f"({o.runs} steps, rms {o.rms_relative_error:.0%})"
        for kind, o in overheads.items()
    ]
    missing = [kind for kind in KINDS if kind not in overheads]
    if missing:
        parts.append(f"not measured, so charged to nobody: {', '.join(missing)}")
    return "; ".join(parts) + ". Each method is charged its kind's, autoregressive decoding its own"


def plot(rows: list[dict], path: Path, label: str, sources: list[str]) -> None:
    """One panel per results folder in ``sources``: predicted speedup against B at T = 0.6 (or the folder's
    lowest temperature where it has no 0.6)."""
    columns = min(3, len(sources))  # a grid that reads at laptop size, not a strip
    grid_rows = -(-len(sources) // columns)
    fig, axes = plt.subplots(
        grid_rows, columns, figsize=(4.6 * columns, 3.6 * grid_rows), sharey=True, squeeze=False
    )
    for ax in axes.flat[len(sources) :]:
        ax.set_visible(False)
    for ax, source in zip(axes.flat, sources, strict=False):
        temperatures = sorted({r["temperature"] for r in rows if r["source"] == source})
        t = 0.6 if 0.6 in temperatures or not temperatures else temperatures[0]
        mine = [r for r in rows if r["source"] == source and r["temperature"] == t]
        for key in sorted({(r["dataset"], r["method"]) for r in mine}):
            line = [r for r in mine if (r["dataset"], r["method"]) == key]
            ax.plot(
                [r["batch"] for r in line],
                [r["speedup"] for r in line],
                marker="o",
                ms=3,
                label=f"{key[0]} {key[1]}".strip(),
            )
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size B")
        ax.set_title(f"{source} (T = {t})", fontsize=9)
        ax.grid(alpha=0.3)
        if mine:
            ax.legend(fontsize=5.5, ncol=1 if len(mine) < 40 else 2)
        else:
            ax.text(0.5, 0.5, "no method predicted\n(no draft profile)", ha="center", transform=ax.transAxes)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"speedup over AR ({label})")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    out = output_dir("gpu_speedups", config.output_dir)
    rows, overheads, ratio, target = predictions(config)
    name = f"speedups_{config.label}"
    fitted = {kind: o.__dict__ for kind, o in overheads.items()}
    write_results(out, name, rows, config, config.seed, overheads=fitted)
    (out / f"{name}.md").write_text(summary(rows, overheads, ratio, config, target))
    plot(rows, out / f"{name}.png", config.label, [Path(r).parent.name for r in config.results])
    print(f"results in {out}")


if __name__ == "__main__":
    run_script(main)
