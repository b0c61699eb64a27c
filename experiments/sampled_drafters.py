"""Specialised drafters decoding at T > 0 over several seeds: tokens per target forward of each drafter on
held-out sets, pooled over the seeds; the sampled counterpart of specialised_drafters.py's exact greedy
figures (seed 004 reports T = 0 and T = 1, three seeds).

Every (method, seed, set, drafter) is one ``experiments/batch_efficiency.py`` run, kept in
``runs/<set>/<drafter>/<method>-s<seed>/`` (``chain:4/single`` is ``chain4-single``) and checkpointed every
``--prompts-per-task`` prompts: a finished run is read back rather than redone (refused if it was run with
another config), an interrupted one resumes, so the grid continues across sessions; they run method by
method, then seed by seed, so an interrupted grid holds whole seeds of the first methods. A small drafter
finetuned on one set (its ``training.json``: :func:`mdsd.drafters.stages.trained_on`) decodes that set only;
the others (the real pair's 0.5B draft, named ``draft-0.5b``, pretrained drafters, feature heads) every set.
Prompt i of a set decodes with seed s + i for every drafter, ``--batch-size`` prompts at a time.

Pooled (:func:`pool`), for each set, method and drafter: prompt i's tokens and target forwards are summed over
the seeds, and tokens per target forward is the ratio of sums over the prompts, with a 95% bootstrap over
prompts (a prompt's seeds are resampled together: the prompts, not the seeds, are the sample); each seed's
own ratio beside it (the spread between seeds); for each pair of drafters on the same set and method the
paired ratio over the prompts they share (the seeds both ran); and, with the drafter's forward time as a
share c of the target's (``--gpu``, :func:`mdsd.costs.cost_ratio`), the predicted speedup of chain:k at
B = 1 over autoregressive decoding, forwards only: tokens per target forward / (1 + k·c).

    python experiments/sampled_drafters.py --drafters ~/.cache/mdsd/small/pretrained \\
        ~/.cache/mdsd/small/{deu,fra,rus}-{f,pf}-s12 --sets translate-deu translate-fra translate-rus \\
        --output-dir results/specialised_drafters/sampled

Writes ``sampled_drafters.json``/``.csv`` (one row per set, method and drafter; ``pairs`` in the JSON),
``sampled_drafters.png`` and ``summary.md`` (the tables, from the rows). ``--no-decode`` pools the runs
finished so far without decoding (the tables say how many seeds each row holds).
"""

from __future__ import annotations

import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from tqdm import tqdm

from mdsd.costs import cost_ratio, drafter_config
from mdsd.data.prompts import PROMPT_SETS
from mdsd.drafters.small import is_small
from mdsd.drafters.stages import TRAINING, check_heldout, trained_on
from mdsd.harness.comparison import INTERVAL_METHOD, interval, paired_ratio, ratio_interval
from mdsd.harness.experiment import config_from_cli, output_dir, run_script, write_results
from mdsd.hf import describe_model
from mdsd.tree.spec import parse_tree

PAIR = "draft-0.5b"  # the real pair's draft model, always decoded
RUN = "batch_efficiency"
# a finished run is read back only if it was run with these of its config
KEPT = (
    "datasets",
    "prompts_per_set",
    "batch_size",
    "max_prompt_tokens",
    "max_new_tokens",
    "temperatures",
    "methods",
    "dtype",
    "seed",
    "quick",
)


@dataclass(frozen=True)
class Config:
    """Drafters decoding held-out sets at T > 0, several seeds, pooled."""

    drafters: tuple[str, ...] = field(
        default=(), metadata={"help": "drafter folders (the real pair's 0.5B draft is added)"}
    )
    sets: tuple[str, ...] = field(
        default=("translate-deu", "translate-fra", "translate-rus"), metadata={"help": "prompt sets"}
    )
    seeds: tuple[int, ...] = field(
        default=(0, 1000, 2000), metadata={"help": "prompt i decodes with seed + i"}
    )
    methods: tuple[str, ...] = field(
        default=("chain:1/single", "chain:4/single"), metadata={"help": "methods (batch_efficiency's)"}
    )
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature T"})
    prompts_per_set: int = field(default=32, metadata={"help": "first prompts of each set"})
    max_prompt_tokens: int = field(default=128, metadata={"help": "templated prompt cap"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens generated per prompt"})
    batch_size: int = field(default=8, metadata={"help": "prompts decoded together"})
    prompts_per_task: int = field(default=8, metadata={"help": "prompts per checkpointed task of a run"})
    dtype: str = field(default="bfloat16", metadata={"help": "the models' dtype"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads"})
    gpu: str = field(
        default="benchmarks/results/drafter_cost.json",
        metadata={"help": "forward time ratios by drafter shape ('' for none)"},
    )
    decode: bool = field(default=True, metadata={"help": "decode the missing runs (else pool the finished)"})
    quick: bool = field(default=False, metadata={"help": "tiny random pair and token prompts (smoke run)"})
    seed: int = field(default=0, metadata={"help": "seed of the bootstrap"})
    output_dir: str = field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})


def method_tag(method: str) -> str:
    """A method's folder name: ``chain:4/single`` is ``chain4-single``."""
    return method.replace(":", "").replace("/", "-").replace(",", "_")


def draft_depth(method: str) -> int:
    """Draft forwards a step of ``method`` runs: its tree's depth (a dynamic tree's deepest)."""
    tree = parse_tree(method.split("/")[0])
    return int(tree.max_depth) if hasattr(tree, "max_depth") else int(tree.depth)


def grid(config: Config) -> list[dict]:
    """The runs, in the order they are decoded: method, then seed, then set, then drafter (a drafter
    finetuned on one set: that set only)."""
    if not config.quick:
        unknown = [name for name in config.sets if name not in PROMPT_SETS]
        if unknown:
            raise ValueError(f"--sets: unknown prompt sets {unknown}; known: {sorted(PROMPT_SETS)}")
    if not config.seeds or not config.methods:
        raise ValueError("--seeds and --methods must each name at least one")
    for method in config.methods:  # refused here, before any decoding
        try:
            draft_depth(method)
        except ValueError as err:
            raise ValueError(f"--methods: {method!r} drafts no tree with the drafter ({err})") from None
    homes = {}
    for folder in config.drafters:
        path = Path(folder).expanduser()
        if path.name == PAIR or path.name in homes:
            raise ValueError(f"--drafters: two drafters are named {path.name!r} (runs are named by folder)")
        home = trained_on(path)["home"] if is_small(path) and (path / TRAINING).is_file() else None
        if home is not None and home not in config.sets:
            raise ValueError(f"--drafters: {folder} was finetuned for {home}, which is not in --sets")
        if is_small(path) and not config.quick:  # a set it was trained on is not held out
            check_heldout(path, config.sets if home is None else (home,))
        homes[path.name] = (str(path), home)
    if config.quick and homes:
        raise ValueError("--drafters: --quick decodes the tiny random pair only")
    drafters = {PAIR: ("", None)} | homes
    return [
        {"method": m, "seed": s, "set": name, "drafter": d, "folder": folder, "home": home}
        for m in config.methods
        for s in config.seeds
        for name in config.sets
        for d, (folder, home) in drafters.items()
        if home in (None, name)
    ]


def run_dir(out: Path, run: dict) -> Path:
    return out / "runs" / run["set"] / run["drafter"] / f"{method_tag(run['method'])}-s{run['seed']}"


def decode(run: dict, where: Path, config: Config) -> None:
    """One batch_efficiency run of the grid, resumed if it was interrupted."""
    argv = [
        "--draft",
        run["folder"],
        "--datasets",
        run["set"],
        "--methods",
        run["method"],
        "--temperatures",
        str(config.temperature),
        "--seed",
        str(run["seed"]),
        "--output-dir",
        str(where),
        "--resume",
    ]
    for name in (
        "prompts_per_set",
        "max_prompt_tokens",
        "max_new_tokens",
        "batch_size",
        "prompts_per_task",
        "dtype",
        "threads",
    ):
        argv += [f"--{name.replace('_', '-')}", str(getattr(config, name))]
    if config.quick:
        argv.append("--quick")
    runpy.run_path(str(Path(__file__).with_name(f"{RUN}.py")))["main"](argv)


def read_run(run: dict, where: Path, config: Config) -> dict | None:
    """The per-prompt counts of a finished run (None if it has not finished); ValueError if it ran with
    another config than the grid's, or with other weights of its drafter than the folder holds now (a
    drafter trained again: its finished runs are not this one's)."""
    path = where / f"{RUN}.json"
    if not path.is_file():
        return None
    payload = json.loads(path.read_text())
    held = payload["metadata"]["config"]
    want = {
        "datasets": [run["set"]],
        "methods": [run["method"]],
        "temperatures": [config.temperature],
        "seed": run["seed"],
    } | {k: getattr(config, k) for k in KEPT if k not in ("datasets", "methods", "temperatures", "seed")}
    differ = [k for k in want if held.get(k) != want[k]]
    if differ:
        raise ValueError(
            f"{where} holds a run of another config ({', '.join(f'{k}: {held.get(k)}' for k in differ)}): "
            "choose another --output-dir"
        )
    if run["folder"]:  # one of --drafters (the pair's draft comes with the pair)
        held = ((payload["metadata"].get("models") or {}).get("draft") or {}).get("weights_sha256")
        now = describe_model(run["folder"])["weights_sha256"]
        if held != now:
            raise ValueError(
                f"{where} was decoded with other weights of {run['drafter']} ({str(held)[:12]}, "
                f"{now[:12]} now): a drafter trained again needs another --output-dir"
            )
    (row,) = payload["rows"]
    return run | {"per_prompt": row["per_prompt"], "models": payload["metadata"].get("models")}


def pool(runs: list[dict], costs: dict[str, float | None], seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(rows, pairs) of finished runs ({set, drafter, method, seed, per_prompt: [{prompt, tokens,
    target_forwards, stopped_by_eos}]}): per (set, method, drafter), prompt i's tokens and forwards summed
    over its seeds, the ratio of sums over prompts with its bootstrap interval, each seed's ratio, and with
    the drafter's cost share c (``costs``; None: no prediction) the speedup tokens per forward / (1 + k·c),
    k the method's draft depth; per pair of drafters on a set and method, the paired ratio A ÷ B (A the one
    that comes later in ``runs``) over the prompts of the seeds both ran."""
    groups: dict[tuple, dict[int, dict[int, dict]]] = {}
    for r in runs:
        per_seed = groups.setdefault((r["set"], r["method"], r["drafter"]), {})
        per_seed[r["seed"]] = {p["prompt"]: p for p in r["per_prompt"]}
    rows, sums = [], {}
    for (set_name, method, drafter), per_seed in groups.items():
        seeds = sorted(per_seed)
        prompts = sorted(per_seed[seeds[0]])
        if any(sorted(per_seed[s]) != prompts for s in seeds):
            raise ValueError(f"{set_name}/{drafter}/{method}: the seeds' runs hold different prompts")
        tokens = np.array([[per_seed[s][i]["tokens"] for i in prompts] for s in seeds], dtype=float)
        forwards = np.array(
            [[per_seed[s][i]["target_forwards"] for i in prompts] for s in seeds], dtype=float
        )
        sums[(set_name, method, drafter)] = (seeds, tokens, forwards)
        value, ci = ratio_interval(tokens.sum(0), forwards.sum(0), seed=seed)
        depth = draft_depth(method)
        c = costs.get(drafter)
        rows.append(
            {
                "set": set_name,
                "method": method,
                "drafter": drafter,
                "seeds": seeds,
                "prompts": len(prompts),
                "tokens": int(tokens.sum()),
                "target_forwards": int(forwards.sum()),
                "tokens_per_forward": value,
                "ci95": ci,
                "per_seed": {str(s): float(tokens[j].sum() / forwards[j].sum()) for j, s in enumerate(seeds)},
                "eos": int(sum(per_seed[s][i]["stopped_by_eos"] for s in seeds for i in prompts)),
                "draft_depth": depth,
                "gpu_ratio": c,
                "speedup": None if c is None else value / (1 + depth * c),
            }
        )
    pairs, keys = [], list(sums)
    for j, (set_name, method, a) in enumerate(keys):  # A after B in the runs' order: A ÷ B
        seeds_a, ta, fa = sums[keys[j]]
        for set_b, method_b, b in keys[:j]:
            if (set_b, method_b) != (set_name, method):
                continue
            seeds_b, tb, fb = sums[(set_b, method_b, b)]
            shared = sorted(set(seeds_a) & set(seeds_b))
            if not shared:
                continue
            ia, ib = [seeds_a.index(s) for s in shared], [seeds_b.index(s) for s in shared]
            ratio, ci = paired_ratio(ta[ia].sum(0), fa[ia].sum(0), tb[ib].sum(0), fb[ib].sum(0), seed=seed)
            pairs.append(
                {
                    "set": set_name,
                    "method": method,
                    "a": a,
                    "b": b,
                    "seeds": shared,
                    "ratio": ratio,
                    "ci95": ci,
                }
            )
    return rows, pairs


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    out = output_dir("sampled_drafters", config.output_dir)
    todo = grid(config)
    runs, missing = [], 0
    for run in tqdm(todo, desc="runs", unit="run"):
        where = run_dir(out, run)
        done = read_run(run, where, config)
        if done is None and config.decode:
            decode(run, where, config)
            done = read_run(run, where, config)
        if done is None:
            missing += 1
        else:
            runs.append(done)
    if not runs:
        raise ValueError(f"{out}: no finished run to pool (--decode runs them)")
    table = {}
    if config.gpu and not config.quick:
        table = {r["model"]: r for r in json.loads(Path(config.gpu).read_text())["rows"]}
    folders = {r["drafter"]: r["folder"] for r in todo}  # each drafter's config read once, not once a run
    costs = (
        {d: cost_ratio(table, drafter_config(f) if f else None)[0] for d, f in folders.items()}
        if table
        else {}
    )
    rows, pairs = pool(runs, costs, config.seed)
    homes = {r["drafter"]: r["home"] for r in todo}
    for row in rows:
        row["home"] = homes[row["drafter"]] == row["set"]
    described = {r["drafter"]: r["models"] for r in runs if r.get("models")}  # None with --quick
    models = {"target": next(iter(described.values()))["target"]} if described else None
    drafts = {name: m["draft"] for name, m in described.items()}
    write_results(
        out,
        "sampled_drafters",
        rows,
        config,
        config.seed,
        models=models,
        drafts=drafts,
        pairs=pairs,
        runs={"finished": len(runs), "missing": missing},
        interval_method=INTERVAL_METHOD,
    )
    plot(rows, out / "sampled_drafters.png")
    (out / "summary.md").write_text(summary(rows, pairs, config, missing))
    print((out / "summary.md").read_text())
    print(f"results in {out}")


def summary(rows: list[dict], pairs: list[dict], config: Config, missing: int) -> str:
    """Per method: drafters against sets (pooled, each seed, predicted speedup), then the paired ratios."""
    sets = list(dict.fromkeys(r["set"] for r in rows))
    drafters = list(dict.fromkeys(r["drafter"] for r in rows))
    lines = [
        "# Drafters decoding at T > 0, seeds pooled",
        "",
        f"T = {config.temperature}, dtype {config.dtype}; the first {config.prompts_per_set} prompts of each "
        f"set, at most {config.max_new_tokens} new tokens, {config.batch_size} prompts a batch; prompt i "
        f"decoded with seed s + i, s in {list(config.seeds)}. Tokens per target forward: the ratio of sums "
        f"over prompts and seeds, 95% {INTERVAL_METHOD} (a prompt's seeds resampled together); then each "
        "seed's own ratio, in the order of the seeds; bold: a drafter finetuned on that set. Speedup: "
        "predicted at B = 1 on the GPU the cost ratios c were read for, forwards only: tokens per forward "
        "/ (1 + k·c)."
        + (
            f" {missing} runs of the grid have not finished: a row short of seeds says how many it holds."
            if missing
            else ""
        ),
    ]
    for method in dict.fromkeys(r["method"] for r in rows):
        at = {(r["set"], r["drafter"]): r for r in rows if r["method"] == method}
        lines += _header(f"{method}: tokens per target forward", ["drafter", *sets])
        for d in drafters:
            cells = []
            for s in sets:
                r = at.get((s, d))
                if r is None:
                    cells.append("—")
                    continue
                text = f"{r['tokens_per_forward']:.3f}{interval(r['ci95'])}"
                text = f"**{text}**" if r["home"] else text
                seeds = " / ".join(f"{v:.2f}" for v in r["per_seed"].values())
                short = len(r["seeds"]) < len(config.seeds)
                cells.append(
                    f"{text}; {seeds}"
                    + (f" ({len(r['seeds'])} of {len(config.seeds)} seeds)" if short else "")
                )
            lines.append(f"| {d} | " + " | ".join(cells) + " |")
        if any(r["speedup"] is not None for r in at.values()):
            title = f"{method}: predicted speedup over autoregressive decoding (B = 1)"
            lines += _header(title, ["drafter", "c", *sets])
            for d in drafters:
                found = [r for r in at.values() if r["drafter"] == d]
                if not found or found[0]["gpu_ratio"] is None:
                    continue
                cells = []
                for s in sets:
                    r = at.get((s, d))
                    text = "—" if r is None else f"{r['speedup']:.2f}×"
                    cells.append(f"**{text}**" if r is not None and r["home"] else text)
                lines.append(f"| {d} | {found[0]['gpu_ratio']:.3f} | " + " | ".join(cells) + " |")
    if pairs:
        title = "Paired ratios of tokens per target forward (A ÷ B, same prompts and seeds)"
        lines += _header(title, ["set", "method", "A", "B", "A ÷ B (95% CI)", "separated"])
        for p in pairs:
            ci = p["ci95"]
            apart = "" if ci is None else ("yes" if ci[0] > 1 or ci[1] < 1 else "no")
            lines.append(
                f"| {p['set']} | {p['method']} | {p['a']} | {p['b']} | {p['ratio']:.3f}{interval(ci)} | "
                f"{apart} |"
            )
    return "\n".join(lines) + "\n"


def _header(title: str, columns: list[str]) -> list[str]:
    """A section's title and its table's header lines."""
    return ["", f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def plot(rows: list[dict], path: Path) -> None:
    """Tokens per target forward with intervals: one panel per method, drafters grouped by set."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    sets = list(dict.fromkeys(r["set"] for r in rows))
    drafters = list(dict.fromkeys(r["drafter"] for r in rows))
    fig, axes = plt.subplots(1, len(methods), figsize=(6 * len(methods), 4), squeeze=False)
    width = 0.8 / len(drafters)
    for ax, method in zip(axes[0], methods, strict=True):
        for j, d in enumerate(drafters):
            xs, ys, errs = [], [], []
            for i, s in enumerate(sets):
                r = next((r for r in rows if (r["method"], r["set"], r["drafter"]) == (method, s, d)), None)
                if r is None:
                    continue
                xs.append(i + (j - (len(drafters) - 1) / 2) * width)
                ys.append(r["tokens_per_forward"])
                lo, hi = r["ci95"] or (ys[-1], ys[-1])
                errs.append((ys[-1] - lo, hi - ys[-1]))
            if xs:
                ax.bar(xs, ys, width, yerr=np.array(errs).T, label=d, capsize=2)
        ax.set_xticks(range(len(sets)), sets)
        ax.set_ylabel("tokens per target forward")
        ax.set_title(method)
        ax.set_ylim(bottom=1)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    run_script(main)
