"""Sequence-level claims about verifying drafted chains and trees, checked against the exact optimum.

For random tiny (target, draft) pairs of sequence models (mdsd.toy_sequence_pair: context-free and
context-dependent, several temperatures, similarity drawn uniformly) and every setting (n tokens, tree,
node-level draft law), the exact optimum of tokens per step (mdsd.solve_tree_otm, docs/mathematics.md §7)
beside the exact tokens per step of token-wise verification, block verification (Sun et al., ICLR 2025),
Traversal Verification (Weng et al., NeurIPS 2025) and every node-wise verifier of mdsd.VERIFIERS on the
law it drafts with. Claims checked on every case, counter-examples kept:

1. block verification is optimal for a chain: LP(chain) = block (Sun et al., Theorem 2);
2. token-wise <= block <= LP;
3. Traversal Verification is block verification on a chain, and <= LP on trees (its own law);
4. every node-wise verifier <= LP of its own law;
5. Traversal Verification >= RRSw (drafts without replacement) and >= RRS (i.i.d.) on binary trees;
6. whether any verifier implemented here reaches the tree optimum (SpecTr-GBV claims one does for
   i.i.d. drafts; it is not implemented here): the gap distribution LP − best verifier per law;
7. the idealised coupling (no stopping-time constraint) against the lossless optimum on chains;
and Sun et al.'s worked example (p = (1/3, 2/3), q = (2/3, 1/3), two drafted tokens): token-wise 10/9,
block 11/9, the idealised 12/9 and the law of a 4-token decode that the idealised coupling distorts.

Writes tree_theorems.json/.csv (claims), tree_theorems_settings.csv (mean tokens per step and gaps per
setting), tree_theorems_cases.csv.gz (every case), tree_theorems.md and tree_theorems.png to
--output-dir (default: a fresh directory under /tmp).

    python experiments/tree_theorems.py --output-dir results/tree_theorems   # 1,000 cases per setting
    python experiments/tree_theorems.py --quick                              # a smoke test

With --real the cases are real conditionals instead of toy pairs: the target (Qwen2.5-Coder-1.5B-Instruct,
draft -0.5B; or --target/--draft) samples a continuation of each prompt (--datasets, --prompts-per-set) at
T = 1; the prefix ends after 0, 4, 8, ... of its tokens (--positions); at each prefix
mdsd.hf.read_sequence_pair reads both models' conditionals over the target's max(--ns) likeliest next
tokens for every string up to the deepest tree (one tree-attention forward per model), at T = 1; every n
and temperature of the case is that table restricted to the first n kept tokens and re-tempered
(p_T(t | u) ∝ p_1(t | u)^{1/T} over the kept tokens). A case is (prefix, temperature); the same claims
are checked, and the T = 1 tables are saved (real_tables.npz) so any case can be rebuilt without the models:

    python experiments/tree_theorems.py --real --output-dir results/tree_theorems_real   # ~15 min on 2 CPUs
    python experiments/tree_theorems.py --real --quick                                    # tiny random pair
"""

from __future__ import annotations

import csv
import gzip
import itertools
import math
import multiprocessing
import time
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
from mdsd.sequence import (
    SequenceModel,
    decode_law,
    law_distance,
    nodewise_tokens_per_step,
    solve_tree_otm,
    target_law,
    traversal_tokens_per_step,
)
from mdsd.sequence.models import prefixes

TOL = 1e-7  # two exact values "agree" within this (the LP is certified to 1e-7)
TREES = {"chain2": mdsd.Tree.chain(2), "chain3": mdsd.Tree.chain(3), "binary2": mdsd.Tree.kary([2, 2])}
# node-level laws of the binary tree, with the node-wise verifiers that draft with each
LAW_VERIFIERS = {
    "iid": ("rrs", "kseq"),
    "without_replacement": ("rrsw",),
    "hub": ("spechub",),
    "greedy": ("greedy",),
    "topk": ("topk",),
}
TRAVERSAL = {"iid", "without_replacement"}  # the laws Traversal Verification runs on


@dataclass(frozen=True)
class Config:
    """The optimum of tokens per step for tiny drafted trees, beside every verifier."""

    ns: tuple[int, ...] = field(default=(2, 3, 4), metadata={"help": "vocabulary sizes n"})
    trees: tuple[str, ...] = field(default=("chain2", "chain3", "binary2"), metadata={"help": "trees"})
    laws: tuple[str, ...] = field(
        default=("iid", "without_replacement", "hub", "greedy", "topk"),
        metadata={"help": "node-level draft laws of the binary tree (chains draw one token from q)"},
    )
    temperatures: tuple[float, ...] = field(
        default=(0.05, 0.1, 0.25, 0.5, 1.0), metadata={"help": "toy temperatures, cycled over the cases"}
    )
    cases: int = field(default=1000, metadata={"help": "random pairs per setting (n, tree, law)"})
    idealised: bool = field(default=True, metadata={"help": "also solve the idealised coupling on chains"})
    seed: int = field(default=0, metadata={"help": "seed of every pair"})
    workers: int = field(default=1, metadata={"help": "worker processes"})
    real: bool = field(default=False, metadata={"help": "cases from a real pair's conditionals (docstring)"})
    target: str = field(default="", metadata={"help": "--real: target model directory ('' = qwen2.5-coder)"})
    draft: str = field(default="", metadata={"help": "--real: draft model directory ('' = qwen2.5-coder)"})
    datasets: tuple[str, ...] = field(default=("mt-bench", "humaneval"), metadata={"help": "--real: prompts"})
    prompts_per_set: int = field(default=4, metadata={"help": "--real: first prompts of each set"})
    positions: int = field(default=3, metadata={"help": "--real: prefixes per prompt, 4 tokens apart"})
    max_prompt_tokens: int = field(default=128, metadata={"help": "--real: templated prompt length cap"})
    threads: int = field(default=2, metadata={"help": "--real: torch CPU threads"})
    quick: bool = field(default=False, metadata={"help": "smoke test: n in (2, 3), 2 cases per setting"})
    output_dir: str = mdsd.harness.experiment.output_dir_field()


def settings(config: Config) -> list[tuple[int, str, str]]:
    out = []
    for n, tree in itertools.product(config.ns, config.trees):
        laws = ("q",) if tree.startswith("chain") else config.laws
        out += [(n, tree, law) for law in laws]
    return out


def draw_case(
    config: Config, setting: tuple[int, str, str], index: int
) -> tuple[dict, SequenceModel, SequenceModel]:
    """Case ``index`` of a setting: context-free on odd cases, temperatures cycled, similarity uniform."""
    n, tree, law = setting
    seed = (config.seed * 1_000_003 + n * 10_007 + index) * 97 + sum(
        map(ord, tree + law)
    )  # not hash(): salted
    gen = torch.Generator().manual_seed(seed)
    temperature = config.temperatures[(index // 2) % len(config.temperatures)]
    similarity = float(torch.rand((), generator=gen, dtype=torch.float64))
    context_free = index % 2 == 1
    depth = TREES[tree].max_depth
    target, draft = mdsd.toy_sequence_pair(n, depth, temperature, similarity, gen, context_free=context_free)
    meta = {"n": n, "tree": tree, "law": law, "case": index, "seed": seed, "temperature": temperature}
    return meta | {"similarity": similarity, "context_free": context_free}, target, draft


class RealCases:
    """Cases read off a real pair: (prefix, temperature) for every prefix and --temperatures value.

    Each prefix's tables are read once (mdsd.hf.read_sequence_pair at T = 1, max(--ns) tokens, the
    deepest tree) and every case restricts and re-tempers them (module docstring).
    """

    GAP = 4  # continuation tokens between two prefixes of one prompt

    def __init__(self, config: Config) -> None:
        from mdsd.hf import read_sequence_pair
        from mdsd.hf.record import sample_continuation

        torch.set_num_threads(config.threads)
        target, draft, prompts = self._load(config)
        generator = torch.Generator().manual_seed(config.seed)
        self.config, self.prefixes, self.tables = config, [], []
        n, depth = max(config.ns), max(TREES[t].max_depth for t in config.trees)
        steps = self.GAP * (config.positions - 1)
        for name, index, ids in tqdm(prompts, desc="real prefixes", unit="prompt"):
            prompt = torch.tensor(ids, dtype=torch.long)
            continuation = (  # --positions 1: the prompt alone, no continuation to sample
                sample_continuation(target, prompt, steps, 1.0, generator, None)[0] if steps else prompt[:0]
            )
            for cut in range(0, continuation.numel() + 1, self.GAP):
                prefix = torch.cat([prompt, continuation[:cut]])
                tables = read_sequence_pair(target, draft, prefix, n, depth, temperature=1.0)
                self.prefixes.append({"dataset": name, "prompt": index, "position": cut, "kept": tables[2]})
                self.tables.append(tables[:2])

    def save(self, path: Path) -> None:
        """The T = 1 tables as arrays [prefix, string, n] beside the strings (in mdsd.sequence.models
        .prefixes order): SequenceModel.from_table(dict(zip(strings, target[i]))) rebuilds prefix i."""
        strings = list(prefixes(max(self.config.ns), self.tables[0][0].depth))
        rows = {
            who: np.array([[pair[j](u) for u in strings] for pair in self.tables])
            for j, who in enumerate(("target", "draft"))
        }
        lengths = np.array([len(u) for u in strings])
        padded = np.array([list(u) + [-1] * (lengths.max() - len(u)) for u in strings])
        np.savez_compressed(path, strings=padded, lengths=lengths, **rows)

    @staticmethod
    def _load(config: Config):
        """(target, draft, [(dataset, index, prompt ids)])."""
        if config.quick:
            from mdsd.hf import tiny_pair

            target, draft = tiny_pair(config.seed)
            gen = torch.Generator().manual_seed(config.seed)
            prompts = [("random", i, torch.randint(64, (8,), generator=gen).tolist()) for i in range(2)]
            return target, draft, prompts
        from mdsd.data.prompts import prompts as prompt_set
        from mdsd.hf import load_pair, pair_paths

        paths = (config.target, config.draft) if config.target else pair_paths("qwen2.5-coder")
        target, draft, tokenizer = load_pair(*paths, dtype="float32")
        out = []
        for name in config.datasets:
            for p in prompt_set(name, config.prompts_per_set, tokenizer, config.max_prompt_tokens):
                out.append((name, p.index, list(p.input_ids)))
        return target, draft, out

    def __len__(self) -> int:
        return len(self.prefixes) * len(self.config.temperatures)

    def case(self, setting: tuple[int, str, str], index: int) -> tuple[dict, SequenceModel, SequenceModel]:
        n, tree, law = setting
        where, temperature = divmod(index, len(self.config.temperatures))
        temperature = self.config.temperatures[temperature]
        pair = [_retempered(m, n, temperature) for m in self.tables[where]]
        meta = {"n": n, "tree": tree, "law": law, "case": index, "seed": self.config.seed}
        meta |= {"temperature": temperature, "similarity": float("nan"), "context_free": False}
        return meta | self.prefixes[where], *pair


def _retempered(model: SequenceModel, n: int, temperature: float) -> SequenceModel:
    """``model`` restricted to its first n tokens and re-tempered: p_T(t | u) ∝ p(t | u)^{1/T}."""
    table = {}
    for u in prefixes(n, model.depth):
        logits = np.log(model(u)[:n]) / temperature
        table[u] = np.exp(logits - np.logaddexp.reduce(logits))
    return SequenceModel.from_table(table)


def evaluate(
    config: Config, setting: tuple[int, str, str], index: int, real: RealCases | None = None
) -> dict:
    """Every exact value of one case (tokens per step E[accepted + 1])."""
    meta, target, draft = draw_case(config, setting, index) if real is None else real.case(setting, index)
    n, name, law = setting
    tree = TREES[name]
    start = time.perf_counter()
    if law == "q":
        best = solve_tree_otm(target, draft, tree, "iid")
        out = {
            "optimum": best.value,
            "token_wise": nodewise_tokens_per_step(target, draft, tree, "single"),
            "block": mdsd.block_tokens_per_step(target, draft, tree.max_depth),
            "traversal": traversal_tokens_per_step(target, draft, tree, "without_replacement"),
        }
        if config.idealised:
            out["idealised"] = solve_tree_otm(target, draft, tree, "iid", lossless=False).value
    else:
        if law == "without_replacement" and n < 2:
            raise ValueError("without replacement needs n >= 2")
        best = solve_tree_otm(target, draft, tree, law)
        out = {"optimum": best.value}
        for v in LAW_VERIFIERS[law]:
            out[v] = nodewise_tokens_per_step(target, draft, tree, v)
        if law in TRAVERSAL:
            out["traversal"] = traversal_tokens_per_step(target, draft, tree, law)
    out["lp_gap"] = best.gap
    out["lp_status"] = best.status
    out["lp_variables"] = best.sizes["variables"]
    out["lp_seconds"] = best.seconds
    out["seconds"] = time.perf_counter() - start
    return meta | out


def _evaluate(args, real: RealCases | None = None):
    if real is None:
        torch.set_num_threads(1)
    try:
        return evaluate(*args, real=real)
    except Exception as err:  # a failing computation is a finding: recorded, not fatal
        meta, *_ = draw_case(*args) if real is None else real.case(*args[1:])
        return meta | {"error": repr(err)}


# ---- claims -----------------------------------------------------------------------------------------------


class Claim:
    """Counts the cases a claim was checked on and keeps its counter-examples (the worst first)."""

    def __init__(self, name: str, statement: str) -> None:
        self.name, self.statement = name, statement
        self.checked, self.failures, self.worst = 0, [], 0.0

    def check(self, excess: float, record: dict, detail: str) -> None:
        """``excess`` > TOL is a counter-example (how far the claim is violated)."""
        self.checked += 1
        self.worst = max(self.worst, excess)
        if excess > TOL:
            self.failures.append({"excess": excess, "detail": detail, **_case_id(record)})

    def row(self) -> dict:
        worst = sorted(self.failures, key=lambda f: -f["excess"])
        return {
            "claim": self.name,
            "statement": self.statement,
            "checks": self.checked,
            "counterexamples": len(self.failures),
            "worst_violation": self.worst,
            "counterexamples_list": worst[:10],
        }


def _case_id(record: dict) -> dict:
    keys = ("n", "tree", "law", "case", "seed", "temperature", "similarity", "context_free")
    keys += ("dataset", "prompt", "position")  # real cases
    return {k: record[k] for k in keys if k in record}


CLAIMS = {
    "lp_certified": "every LP ends with a dual bound within 1e-7 of its value",
    "lp_chain_equals_block": "LP(chain) = block verification (Sun et al.: block verification is optimal)",
    "tokenwise_le_block": "token-wise <= block verification",
    "block_le_lp": "block verification <= LP(chain)",
    "traversal_chain_equals_block": "Traversal Verification on a chain = block verification",
    "traversal_le_lp": "Traversal Verification <= LP of its law (binary trees)",
    "nodewise_le_lp": "every node-wise verifier <= LP of its law",
    "traversal_ge_rrsw": "Traversal Verification >= RRSw (without replacement, binary trees)",
    "traversal_ge_rrs": "Traversal Verification (i.i.d. variant) >= RRS (i.i.d., binary trees)",
    "lp_reached": "some implemented verifier reaches LP of its law (binary trees)",
    "idealised_ge_lp": "idealised coupling >= LP (chains)",
}


def check_claims(records: list[dict]) -> dict[str, Claim]:
    claims = {name: Claim(name, text) for name, text in CLAIMS.items()}
    for r in records:
        if "error" in r:
            continue
        claims["lp_certified"].check(
            0.0 if r["lp_status"] == "optimal" else abs(r["lp_gap"]), r, r["lp_status"]
        )
        opt = r["optimum"]
        if r["law"] == "q":
            claims["lp_chain_equals_block"].check(
                abs(opt - r["block"]), r, f"LP {opt:.9f}, block {r['block']:.9f}"
            )
            claims["tokenwise_le_block"].check(
                r["token_wise"] - r["block"], r, f"token-wise {r['token_wise']:.9f}"
            )
            claims["block_le_lp"].check(r["block"] - opt, r, f"block {r['block']:.9f} > LP {opt:.9f}")
            claims["traversal_chain_equals_block"].check(abs(r["traversal"] - r["block"]), r, "")
            if "idealised" in r:
                claims["idealised_ge_lp"].check(opt - r["idealised"], r, f"idealised {r['idealised']:.9f}")
            continue
        verifiers = [v for v in (*LAW_VERIFIERS[r["law"]], "traversal") if v in r]
        for v in LAW_VERIFIERS[r["law"]]:
            claims["nodewise_le_lp"].check(r[v] - opt, r, f"{v} {r[v]:.9f} > LP {opt:.9f}")
        if "traversal" in r:
            claims["traversal_le_lp"].check(
                r["traversal"] - opt, r, f"traversal {r['traversal']:.9f} > LP {opt:.9f}"
            )
            rival = "rrsw" if r["law"] == "without_replacement" else "rrs"
            claims[f"traversal_ge_{rival}"].check(
                r[rival] - r["traversal"], r, f"{rival} {r[rival]:.9f} > traversal {r['traversal']:.9f}"
            )
        best = max(r[v] for v in verifiers)
        claims["lp_reached"].check(opt - best, r, f"LP {opt:.9f}, best verifier {best:.9f}")
    return claims


# ---- summaries ------------------------------------------------------------------------------------------


def setting_rows(records: list[dict]) -> list[dict]:
    """Per (n, tree, law) and method: mean tokens per step, mean and worst gap to LP, share within TOL."""
    out = []
    groups: dict = {}
    for r in records:
        if "error" not in r:
            groups.setdefault((r["n"], r["tree"], r["law"]), []).append(r)
    methods = ("optimum", "idealised", "token_wise", "block", "traversal", "rrs", "kseq", "rrsw", "spechub")
    methods += ("greedy", "topk")
    for (n, tree, law), rs in sorted(groups.items()):
        for m in methods:
            if m not in rs[0]:
                continue
            values = np.array([r[m] for r in rs])
            gaps = np.array([r["optimum"] - r[m] for r in rs])
            out.append(
                {
                    "n": n,
                    "tree": tree,
                    "law": law,
                    "method": m,
                    "cases": len(rs),
                    "mean_tokens_per_step": float(values.mean()),
                    "mean_gap_to_lp": float(gaps.mean()),
                    "median_gap_to_lp": float(np.median(gaps)),
                    "p90_gap_to_lp": float(np.quantile(gaps, 0.9)),
                    "max_gap_to_lp": float(gaps.max()),
                    "share_reaching_lp": float(np.mean(np.abs(gaps) <= TOL)),
                }
            )
    return out


def pooled(summary: list[dict]) -> list[dict]:
    """The per-setting rows pooled over n (case-weighted means; p90 and share as case-weighted means of
    the per-setting figures, max as the max)."""
    groups: dict = {}
    for s in summary:
        groups.setdefault((s["tree"], s["law"], s["method"]), []).append(s)
    out = []
    for (tree, law, method), rows in groups.items():
        cases = sum(r["cases"] for r in rows)

        def mean(key, rows=rows, cases=cases):
            return sum(r[key] * r["cases"] for r in rows) / cases

        out.append(
            {
                "tree": tree,
                "law": law,
                "method": method,
                "cases": cases,
                "mean_tokens_per_step": mean("mean_tokens_per_step"),
                "mean_gap_to_lp": mean("mean_gap_to_lp"),
                "p90_gap_to_lp": mean("p90_gap_to_lp"),
                "max_gap_to_lp": max(r["max_gap_to_lp"] for r in rows),
                "share_reaching_lp": mean("share_reaching_lp"),
            }
        )
    return sorted(out, key=lambda s: (s["tree"], s["law"], -s["mean_tokens_per_step"]))


def worked_example() -> dict:
    """Sun et al.'s example: exact values and the law of a 4-token decode under each step rule."""
    p, q = SequenceModel.context_free([1 / 3, 2 / 3]), SequenceModel.context_free([2 / 3, 1 / 3])
    chain = mdsd.Tree.chain(2)
    best = solve_tree_otm(p, q, chain, "iid")
    ideal = solve_tree_otm(p, q, chain, "iid", lossless=False)
    truth = target_law(p, 4)
    return {
        "token_wise_accepted": nodewise_tokens_per_step(p, q, chain, "single") - 1,
        "block_accepted": mdsd.block_tokens_per_step(p, q, 2) - 1,
        "optimum_accepted": best.value - 1,
        "idealised_accepted": ideal.value - 1,
        "paper": {"token_wise": 10 / 9, "block": 11 / 9, "idealised": 12 / 9},
        "decode4_distance_block": law_distance(
            decode_law(lambda u: mdsd.sequence.block_step_law(p, q, 2, u), 4), truth
        ),
        "decode4_distance_optimal_plan": law_distance(decode_law(lambda u: best.emitted, 4), truth),
        "decode4_distance_idealised_plan": law_distance(decode_law(lambda u: ideal.emitted, 4), truth),
        "idealised_emitted": {"".join("ab"[t] for t in s): w for s, w in sorted(ideal.emitted.items())},
    }


def markdown(
    claims: list[dict],
    summary: list[dict],
    example: dict,
    config: Config,
    errors: int,
    hours: float,
    cases: int,
    real_prefixes: list[dict],
) -> str:
    if real_prefixes:
        sets = sorted({p["dataset"] for p in real_prefixes})
        pairs = (
            f"{cases} real cases per setting (n in {list(config.ns)}, trees {list(config.trees)}, "
            f"binary-tree laws {list(config.laws)}), from {len(real_prefixes)} prefixes × T in "
            f"{list(config.temperatures)} (prefix-major): prompts of {sets}, each cut after "
            f"{', '.join(str(RealCases.GAP * i) for i in range(config.positions))} tokens of the target's "
            f"continuation at T = 1; "
            f"{'tiny random pair (--quick)' if config.quick else 'Qwen2.5-Coder-1.5B / 0.5B'}; both models "
            "restricted to the target's n likeliest next tokens after the prefix"
        )
    else:
        pairs = (
            f"{config.cases} random pairs per setting (n in {list(config.ns)}, trees {list(config.trees)}, "
            f"binary-tree laws {list(config.laws)}; toy pairs, half context-free, T cycled over "
            f"{list(config.temperatures)}, similarity uniform)"
        )
    lines = [
        "# The sequence-level optimum of tokens per step, against every verifier",
        "",
        f"{pairs}; seed {config.seed}; tolerance {TOL:g}; {errors} computations raised; "
        f"{hours:.2f} h of compute.",
        "",
        "## Sun et al.'s worked example (p = (1/3, 2/3), q = (2/3, 1/3), two drafted tokens)",
        "",
        "| | accepted tokens per step | paper |",
        "|---|---|---|",
        f"| token-wise | {example['token_wise_accepted']:.12f} | 10/9 = {10 / 9:.12f} |",
        f"| block verification | {example['block_accepted']:.12f} | 11/9 = {11 / 9:.12f} |",
        f"| LP optimum (lossless) | {example['optimum_accepted']:.12f} | |",
        f"| idealised coupling (not lossless) | {example['idealised_accepted']:.12f} "
        f"| 12/9 = {12 / 9:.12f} |",
        "",
        "Largest error in the law of the first 4 tokens of a whole decode, against the target's: block "
        f"verification {example['decode4_distance_block']:.1e}, the LP's optimal plan "
        f"{example['decode4_distance_optimal_plan']:.1e}, the idealised plan "
        f"{example['decode4_distance_idealised_plan']:.3f}.",
        "",
        "## Claims",
        "",
        "| claim | checks | counter-examples | worst violation |",
        "|---|---|---|---|",
    ]
    for c in claims:
        lines.append(
            f"| {c['statement']} | {c['checks']} | {c['counterexamples']} | {c['worst_violation']:.3g} |"
        )
    for c in claims:
        if c["counterexamples_list"] and c["claim"] != "lp_reached":
            f = c["counterexamples_list"][0]
            lines.append(f"\nWorst counter-example to '{c['claim']}': {f}")
    lines += [
        "",
        "## Gap to the optimum (tokens per step), all n pooled",
        "",
        "| tree | law | method | cases | mean tokens/step | mean gap | p90 gap | max gap | reaches LP |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in pooled(summary):
        lines.append(
            f"| {s['tree']} | {s['law']} | {s['method']} | {s['cases']} | {s['mean_tokens_per_step']:.4f} | "
            f"{s['mean_gap_to_lp']:.4f} | {s['p90_gap_to_lp']:.4f} | {s['max_gap_to_lp']:.4f} | "
            f"{s['share_reaching_lp']:.1%} |"
        )
    lines += [
        "",
        "## Gap to the optimum (tokens per step), per setting",
        "",
        "| n | tree | law | method | mean tokens/step | mean gap | median gap | p90 gap | max gap "
        "| reaches LP |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        lines.append(
            f"| {s['n']} | {s['tree']} | {s['law']} | {s['method']} | {s['mean_tokens_per_step']:.4f} | "
            f"{s['mean_gap_to_lp']:.4f} | {s['median_gap_to_lp']:.4f} | {s['p90_gap_to_lp']:.4f} | "
            f"{s['max_gap_to_lp']:.4f} | {s['share_reaching_lp']:.1%} |"
        )
    return "\n".join(lines) + "\n"


def plot(records: list[dict], path: Path) -> None:
    """Left: gap to LP of each method on the binary tree, per law. Right: chains, token-wise / block /
    idealised against LP."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
    ok = [r for r in records if "error" not in r]
    labels, data = [], []
    for law, verifiers in LAW_VERIFIERS.items():
        for m in (*verifiers, "traversal"):
            gaps = [r["optimum"] - r[m] for r in ok if r["tree"] == "binary2" and r["law"] == law and m in r]
            if gaps:
                labels.append(f"{m}\n({law.replace('without_replacement', 'w/o repl.')})")
                data.append(gaps)
    if data:
        axes[0].boxplot(data, showfliers=True, flierprops={"markersize": 2})
        axes[0].set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    axes[0].set_ylabel("LP − verifier (tokens per step)")
    axes[0].set_title("binary tree of depth 2: gap to the sequence-level optimum", fontsize=9)
    chains = [r for r in ok if r["law"] == "q"]
    for m, marker in (("token_wise", "o"), ("block", "x"), ("idealised", "^")):
        xs = [r["optimum"] for r in chains if m in r]
        ys = [r[m] - r["optimum"] for r in chains if m in r]
        axes[1].scatter(xs, ys, s=4, alpha=0.4, marker=marker, label=m.replace("_", "-"))
    axes[1].axhline(0, color="k", lw=0.7)
    axes[1].set_xlabel("LP optimum (tokens per step)")
    axes[1].set_ylabel("method − LP")
    axes[1].set_title("chains of depth 2 and 3", fontsize=9)
    axes[1].legend(fontsize=7, markerscale=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> Path:
    torch.set_num_threads(1)
    config = config_from_cli(Config, argv)
    if config.quick:
        config = replace(config, ns=(2, 3), cases=2, prompts_per_set=1, positions=2)
    if config.real and config.workers > 1:
        raise ValueError("--real runs in one process (the models are loaded once): use --workers 1")
    out = output_dir("tree_theorems_real" if config.real else "tree_theorems", config.output_dir)
    start = time.perf_counter()
    real = RealCases(config) if config.real else None
    cases = config.cases if real is None else min(config.cases, len(real))
    jobs = [(config, s, i) for s in settings(config) for i in range(cases)]
    records = []
    with tqdm(total=len(jobs), desc="tree theorems", unit="case") as bar:
        if real is not None:
            for job in jobs:
                records.append(_evaluate(job, real))
                bar.update()
        elif config.workers > 1:
            with multiprocessing.get_context("spawn").Pool(config.workers) as pool:
                for r in pool.imap_unordered(_evaluate, jobs, chunksize=8):
                    records.append(r)
                    bar.update()
        else:
            for job in jobs:
                records.append(_evaluate(job))
                bar.update()
    records.sort(key=lambda r: (r["n"], r["tree"], r["law"], r["case"]))
    hours = (time.perf_counter() - start) / 3600
    claims = [c.row() for c in check_claims(records).values()]
    summary = setting_rows(records)
    example = worked_example()
    errors = sum("error" in r for r in records)
    real_prefixes = [] if real is None else real.prefixes
    models, prompt_sets = {}, []
    if real is not None:
        out.mkdir(parents=True, exist_ok=True)
        real.save(out / "real_tables.npz")
        if not config.quick:  # where the real tables came from: the weights' sha256, the pinned prompt sets
            from mdsd.hf import describe_model, pair_paths

            paths = (config.target, config.draft) if config.target else pair_paths("qwen2.5-coder")
            models = {"target": describe_model(paths[0]), "draft": describe_model(paths[1])}
            prompt_sets = list(config.datasets)
    write_results(
        out,
        "tree_theorems",
        claims,
        config,
        seed=config.seed,
        models=models,
        prompt_sets=prompt_sets,
        worked_example=example,
        settings=summary,
        errors=[r for r in records if "error" in r][:50],
        compute_hours=hours,
        prefixes=real_prefixes,
    )
    _write_csv(out / "tree_theorems_settings.csv", summary)
    _write_csv(out / "tree_theorems_cases.csv.gz", records)
    (out / "tree_theorems.md").write_text(
        markdown(claims, summary, example, config, errors, hours, cases, real_prefixes)
    )
    plot(records, out / "tree_theorems.png")
    print((out / "tree_theorems.md").read_text())
    print(f"results in {out}")
    return out


def _write_csv(path: Path, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow(
                {k: (f"{v:.10g}" if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()}
            )


if __name__ == "__main__":
    run_script(main)
