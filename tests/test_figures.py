"""Headline figures of README.md and BENCHMARKS.md against the results files they are read from.

Each test reads the figure from the document's text and recomputes it from its file, and the two must agree at
the precision the document prints (``5.1`` matches 5.1497; ``5.2`` does not): a change of either, or a figure
rounded twice, fails here.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BENCHMARKS = (ROOT / "BENCHMARKS.md").read_text()
# the rows of BENCHMARKS.md's "## Summary" table
SUMMARY = BENCHMARKS.split("| figure | measured on | section |")[1].split("## Verifiers and the optimum")[0]
# a number: 5.1, 4.6e-6, or grouped by thousands (2,100; not 1,0264)
NUMBER = r"(\d{1,3}(?:,\d{3})+(?![\d.])|\d+(?:\.\d+)?(?:e-?\d+)?)"


def _load(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def _quoted(text: str, pattern: str) -> tuple[str, ...]:
    """The numbers ``pattern`` captures in ``text`` (its spaces match any run of white space, line breaks
    included); exactly one match."""
    regex = re.escape(pattern).replace(r"\ ", r"\s+").replace(re.escape("{}"), NUMBER)
    found = re.findall(regex, text)
    assert len(found) == 1, f"{pattern!r} found {len(found)} times"
    return found[0] if isinstance(found[0], tuple) else (found[0],)


def _section(text: str, marker: str) -> str:
    """The one ``## `` section of a markdown ``text`` whose heading holds ``marker``, to the next one."""
    (start,) = [m.start() for m in re.finditer(r"^## .*$", text, re.M) if marker in m.group()]
    end = text.find("\n## ", start + 1)
    return text[start : None if end < 0 else end]


def _agrees(printed: str, value: float) -> bool:
    """``value`` rounded to ``printed``'s decimals is ``printed`` (``4.6e-6``: in scientific notation;
    ``2,100``, grouped by thousands: rounded at its last non-zero digit, so 2,096.6 matches and 2,046 does
    not)."""
    if "," in printed:
        digits = printed.replace(",", "")
        unit = 10 ** (len(digits) - len(digits.rstrip("0")))
        return round(value / unit) * unit == int(digits)
    mantissa, e, exponent = printed.partition("e")
    decimals = len(mantissa.partition(".")[2])
    if not e:
        return f"{value:.{decimals}f}" == printed
    rounded, _, power = f"{value:.{decimals}e}".partition("e")
    return (rounded, int(power)) == (mantissa, int(exponent))


# results/gpu/speedups_h200-forwards.json: B = 1, the two models' captured forwards alone
FORWARDS = [r for r in _load("results/gpu/speedups_h200-forwards.json")["rows"] if r["batch"] == 1]


def _speedup(source: str, method: str, temperature: float = 0.6) -> float:
    (row,) = [
        r
        for r in FORWARDS
        if (r["source"], r["dataset"], r["method"], r["temperature"])
        == (source, "humaneval", method, temperature)
    ]
    return row["speedup"]


def _model_only(row: dict) -> bool:
    """A tree drafted by the model alone: no draft source, not a source alone."""
    return "+" not in row["method"] and not row["method"].startswith("none/")


def test_in_short_the_predicted_speedups_on_the_forwards_are_the_files():
    """BENCHMARKS.md's "In short" of the predictions on the H200's forwards. Regression: "5.2× on 4 × 64 at
    T = 0" was 5.15 in the .md, 5.1497 in the file: rounded twice."""
    samples = [  # 2 × 48, 4 × 64, 10 × 64 at T = 0.6; 4 × 64 at T = 0
        ("draft_sources", 0.6),
        ("source_first", 0.6),
        ("source_first_humaneval", 0.6),
        ("source_first_greedy", 0.0),
    ]
    lookup = _quoted(
        BENCHMARKS,
        "prompt lookup on HumanEval: {}× on 2 prompts × 48 tokens, {}× on 4 × 64 and {}× on 10 × 64 "
        "(T = 0.6), {}× on 4 × 64 at T = 0;",
    )
    chain = _quoted(BENCHMARKS, "chain:4 + lookup: {}×, {}×, {}× and {}× on the same four samples;")
    first = _quoted(BENCHMARKS, "(`SourceFirst`, see Draft sources): {}×, {}× and {}× on the last three;")
    for printed, (source, t) in zip(lookup, samples, strict=True):
        assert _agrees(printed, _speedup(source, "none/topk+lookup", t)), (source, printed)
    for printed, (source, t) in zip(chain, samples, strict=True):
        assert _agrees(printed, _speedup(source, "chain:4/single+lookup", t)), (source, printed)
    for printed, (source, t) in zip(first, samples[1:], strict=True):
        assert _agrees(printed, _speedup(source, "chain:4/single/first+lookup", t)), (source, printed)


WHOLE_SPEEDUPS = {
    (r["dataset"], r["temperature"], r["method"]): r
    for r in _load("results/whole_sets/qwen2.5-coder-bf16/speedups/speedups_h200-forwards.json")["rows"]
    if r["batch"] == 1
}


def test_the_readme_and_summary_speedups_on_the_forwards_are_the_files():
    """The README's and BENCHMARKS.md's summary, on the whole sets at T = 0.6 (results/whole_sets/
    qwen2.5-coder-bf16/speedups): prompt lookup alone on HumanEval (against captured and fused AR), source
    first, the best model-only tree; beside them the first sample's 4.77× (results/gpu)."""
    lookup = WHOLE_SPEEDUPS[("humaneval", 0.6, "none/topk+lookup")]
    first = WHOLE_SPEEDUPS[("humaneval", 0.6, "chain:4/single/first+lookup")]
    model_only = [r for r in WHOLE_SPEEDUPS.values() if _model_only(r)]
    best = max(model_only, key=lambda r: r["speedup"])
    assert (best["dataset"], best["method"].partition("/")[0]) == ("humaneval", "binary:3")
    printed = _quoted(
        README,
        "prompt lookup alone on HumanEval {}× autoregressive decoding (the first estimate, {}×, rested on "
        "{} prompts), source first {}×; model-only trees at most {}× (binary:3 on HumanEval). Against mdsd's "
        "own fused AR, lookup alone is {}×.",
    )
    sample = _speedup("draft_sources", "none/topk+lookup")
    values = (lookup["speedup"], sample, 2, first["speedup"], best["speedup"], lookup["speedup_vs_fused_ar"])
    for text, value in zip(printed, values, strict=True):
        assert _agrees(text, value), (text, value)
    printed = _quoted(
        SUMMARY,
        "prompt lookup alone on HumanEval **{}×** on the forwards ({}× on the first 2 × 48 sample), source "
        "first {}×; model-only trees at most {}× (binary:3 on HumanEval) | the H200's forwards, the real "
        "pair's tokens per forward on all {} prompts |",
    )
    values = (lookup["speedup"], sample, first["speedup"], best["speedup"], 244)
    for text, value in zip(printed, values, strict=True):
        assert _agrees(text, value), (text, value)


def test_the_whole_set_speedups_table_is_the_file():
    """BENCHMARKS.md's table of the predictions on the whole sets: every cell from results/whole_sets/
    qwen2.5-coder-bf16/speedups/speedups_h200-forwards.json (B = 1; T = 0.6, in brackets T = 0)."""
    methods = {
        "prompt lookup alone": "none/topk+lookup",
        "chain:4 + lookup": "chain:4/single+lookup",
        "chain:4 + lookup, source first": "chain:4/single/first+lookup",
        "binary:3 SpecHub (T = 0: any verifier)": "binary:3/spechub",
        "dynamic:8,2,3,24 RRSw": "dynamic:8,2,3,24/rrsw",
    }
    head = (
        "| method | HumanEval: tokens / forward | speedup | vs fused AR | MT-Bench: tokens / forward | "
        "speedup |"
    )
    table = BENCHMARKS.split(head)[1].split("\n\n")[0].strip().splitlines()[1:]
    assert [line.split(" | ")[0].lstrip("| ") for line in table] == list(methods)
    for line in table:
        label = line.split(" | ")[0].lstrip("| ")
        numbers = re.findall(r"\d+\.\d+", line.replace(label, ""))
        rows = {
            (d, t): WHOLE_SPEEDUPS[(d, t, methods[label])]
            for d in ("humaneval", "mt-bench")
            for t in (0.6, 0.0)
        }
        expected = (
            rows[("humaneval", 0.6)]["tokens_per_forward"],
            rows[("humaneval", 0.0)]["tokens_per_forward"],
            rows[("humaneval", 0.6)]["speedup"],
            rows[("humaneval", 0.0)]["speedup"],
            rows[("humaneval", 0.6)]["speedup_vs_fused_ar"],
            rows[("mt-bench", 0.6)]["tokens_per_forward"],
            rows[("mt-bench", 0.0)]["tokens_per_forward"],
            rows[("mt-bench", 0.6)]["speedup"],
            rows[("mt-bench", 0.0)]["speedup"],
        )
        assert len(numbers) == len(expected), line
        for text, value in zip(numbers, expected, strict=True):
            assert _agrees(text, value), (label, text, value)


def test_model_only_trees_are_quoted_at_their_best_row():
    """Regression: "model-only trees: below 1×" while binary:3 RRSw on HumanEval is 1.04 in the file and
    chain:4 1.00–1.01 on the source-first samples."""
    model_only = [r for r in FORWARDS if _model_only(r)]
    best = max(model_only, key=lambda r: r["speedup"])
    assert (best["source"], best["dataset"], best["method"]) == (
        "draft_sources",
        "humaneval",
        "binary:3/rrsw",
    )
    printed, low, high = _quoted(
        BENCHMARKS,
        "model-only trees: at most {}× (binary:3 RRSw on HumanEval; chain:4 there {}–{}×), below 1× on "
        "MT-Bench and the batch_efficiency prompts.",
    )
    chain = [
        r["speedup"] for r in model_only if r["dataset"] == "humaneval" and r["method"] == "chain:4/single"
    ]
    assert _agrees(printed, best["speedup"]) and _agrees(low, min(chain)) and _agrees(high, max(chain))
    elsewhere = [r for r in model_only if r["dataset"] == "mt-bench" or r["source"] == "batch_efficiency"]
    assert elsewhere and all(r["speedup"] < 1 for r in elsewhere)


def test_the_fitted_overheads_are_the_files():
    """The per-kind overheads BENCHMARKS.md quotes are speedups_static.json's fits. Regression: the text said
    the fit "charges a lookup step 1.70 ms" (one chain of 8) where the samples look up two chains of 8 (1.763
    ms), and AR was charged nothing; each kind of step now has its own fit, AR included."""
    overheads = _load("results/gpu/speedups_static.json")["overheads"]
    for kind, words in (
        ("model", "Model trees"),
        ("source", "prompt lookup alone"),
        ("autoregressive", None),
    ):
        o = overheads[kind]
        if words is None:
            (printed,) = _quoted(BENCHMARKS, "autoregressive steps: {} ms over two steps")
            assert _agrees(printed, 1e3 * o["per_step"]) and o["per_row_node"] == 0
            continue
        ms, us = _quoted(BENCHMARKS, words + ": {} ms + {} µs · B · (F + M)")
        assert _agrees(ms, 1e3 * o["per_step"]) and _agrees(us, 1e6 * o["per_row_node"])


@pytest.mark.parametrize("model", ["target", "draft"])
@pytest.mark.parametrize("batch", [1, 64])
def test_the_h200_forwards_table_is_the_sessions_file(model, batch):
    """The forwards of the H200 session of 2026-11-28 (captured at t = 1 / 5 / 16, eager at t = 1), from
    benchmarks/results/gpu_fast_h200_1128.json. Regression: the draft's eager forward was quoted 23.5 ms,
    23.449 in the file."""
    rows = _load("benchmarks/results/gpu_fast_h200_1128.json")["forwards"]
    mine = {r["tokens"]: r for r in rows if (r["model"], r["B"]) == (model, batch) and "captured_ms" in r}
    regex = (
        rf"\| {model} \| {batch} \| (?:\*\*)?{NUMBER}(?:\*\*)? / {NUMBER} / {NUMBER}(?: ms)? \| {NUMBER} \|"
    )
    (found,) = re.findall(regex, BENCHMARKS)
    *captured, eager = found
    for printed, tokens in zip(captured, (1, 5, 16), strict=True):
        assert _agrees(printed, mine[tokens]["captured_ms"]), (tokens, printed)
    assert _agrees(eager, mine[1]["eager_ms"])


@pytest.mark.parametrize("folder", ["matrix", "matrix-rebuilt", "matrix-s48"])
@pytest.mark.parametrize(
    "title, key",
    [
        ("Greedy agreement with the target (T = 0)", "agree"),
        ("Predicted speedup of greedy chain:1", "greedy_chain1_speedup"),
    ],
)
def test_the_language_matrix_tables_are_the_file(folder, title, key):
    """results/specialised_drafters/README.md's matrix tables, in each matrix's section: every cell is its
    row's figure in <folder>/specialised_drafters.json at the printed precision, bold exactly on the
    drafter's own language."""
    text = _section((ROOT / "results/specialised_drafters/README.md").read_text(), f"(`{folder}/`)")
    rows = _load(f"results/specialised_drafters/{folder}/specialised_drafters.json")["rows"]
    cell = {(r["drafter"], r["set"]): r for r in rows}
    table = text.split(title)[1].split("\n\n")[1].splitlines()
    sets = [s.strip() for s in table[0].strip("|").split("|")[1:]]
    drafters = sorted({r["drafter"] for r in rows})
    assert len(table) == 2 + len(drafters)
    for line in table[2:]:
        name, *cells = (c.strip() for c in line.strip("|").split("|"))
        row_name = name.split("`")[1]
        for s, printed in zip(sets, cells, strict=True):
            r = cell[(row_name, s)]
            assert printed.startswith("**") == (r.get("home") == s), (row_name, s)
            assert _agrees(printed.strip("*"), r[key]), (row_name, s, printed, r[key])


def test_the_rebuilt_matrix_pairs_are_the_file():
    """results/specialised_drafters/README.md's paired greedy chain:1 ratios of the rebuilt matrix: each A ÷ B
    [low, high] is the pair's ratio and interval in matrix-rebuilt/specialised_drafters.json, for the set it
    names, and the agreements the bullets compare are the rows'."""
    text = _section((ROOT / "results/specialised_drafters/README.md").read_text(), "(`matrix-rebuilt/`)")
    data = _load("results/specialised_drafters/matrix-rebuilt/specialised_drafters.json")
    pairs = {(r["set"], r["a"], r["b"]): r for r in data["pairs"]}
    agree = {(r["drafter"], r["set"]): r["agree"] for r in data["rows"]}
    langs = {"German": "deu", "French": "fra", "Russian": "rus"}
    quoted = _quoted(
        text,
        "F ÷ P→F {} [{}, {}] (German), {} [{}, {}] (French), {} [{}, {}] (Russian); P→F ÷ P {} [{}, {}] "
        "(German), {} [{}, {}] (French), P ÷ P→F {} [{}, {}] (Russian)",
    )
    quoted += _quoted(text, "(F ÷ P {} [{}, {}], {} [{}, {}]; P ÷ F {} [{}, {}] on Russian)")
    quoted += _quoted(
        text,
        "head ÷ P→F in greedy chain:1 tokens per forward: {} [{}, {}] (German), {} [{}, {}] (French), "
        "{} [{}, {}] (Russian)",
    )
    wanted = [(lang, f"{lang}-f-s12", f"{lang}-pf-s12") for lang in langs.values()]
    wanted += [(lang, f"{lang}-pf-s12", "pretrained") for lang in ("deu", "fra")]
    wanted += [("rus", "pretrained", "rus-pf-s12")]
    wanted += [(lang, f"{lang}-f-s12", "pretrained") for lang in ("deu", "fra")]
    wanted += [("rus", "pretrained", "rus-f-s12")]
    wanted += [(lang, "corpus-fused-kl-unroll3", f"{lang}-pf-s12") for lang in langs.values()]
    assert len(quoted) == 3 * len(wanted)
    for i, (lang, a, b) in enumerate(wanted):
        pair = pairs[(f"translate-{lang}", a, b)]
        figures = (pair["greedy_chain1_ratio"], *pair["ci95"])
        for printed, value in zip(quoted[3 * i : 3 * i + 3], figures, strict=True):
            assert _agrees(printed, value), (lang, a, b, printed, value)
    for language, lang in langs.items():
        pf, f, p = _quoted(text, f"{language} {{}} / {{}} / {{}}")
        for printed, drafter in ((pf, f"{lang}-pf-s12"), (f, f"{lang}-f-s12"), (p, "pretrained")):
            assert _agrees(printed, agree[(drafter, f"translate-{lang}")]), (language, drafter)


def test_f_and_p_agreement_at_the_answers_end_and_elsewhere_is_the_positions_file():
    """results/specialised_drafters/README.md's split of F's and P's greedy agreement into each answer's last
    position and the others: matrix-rebuilt/positions.npz, per position, by prompt."""
    text = _section((ROOT / "results/specialised_drafters/README.md").read_text(), "(`matrix-rebuilt/`)")
    positions = np.load(ROOT / "results/specialised_drafters/matrix-rebuilt/positions.npz")
    ends = _quoted(text, "F predicts at {} / {} / {} and P at {} / {} / {}")
    rests = _quoted(text, "F agrees at {} / {} / {} against P's {} / {} / {}.")
    f_end, p_end, f_rest, p_rest = ends[:3], ends[3:], rests[:3], rests[3:]
    for i, lang in enumerate(("deu", "fra", "rus")):
        for drafter, end, rest in ((f"{lang}-f-s12", f_end, f_rest), ("pretrained", p_end, p_rest)):
            agree = positions[f"{drafter}__translate-{lang}__agree"].astype(bool)
            prompt = positions[f"{drafter}__translate-{lang}__prompt"]
            last = np.r_[prompt[1:] != prompt[:-1], True]
            assert last.sum() == 32
            assert _agrees(end[i], agree[last].mean()) and _agrees(rest[i], agree[~last].mean()), (drafter, i)


def test_the_f_against_p_extrapolation_is_the_learning_curve():
    """results/specialised_drafters/README.md's extrapolation of F against P: least-squares slopes of greedy
    chain:1 tokens per forward against log2(finetuning tokens) over translation/'s three German sizes, and
    the doublings and tokens F needs to reach 1.05 × P's rate."""
    text = _section((ROOT / "results/specialised_drafters/README.md").read_text(), "(`matrix-rebuilt/`)")
    rows = _load("results/specialised_drafters/translation/specialised_drafters.json")["rows"]
    rate = {r["drafter"]: r["greedy_chain1"] for r in rows if r["set"] == "translate-deu"}
    tokens = {"s2": 1_238, "s4": 2_514, "s12": 6_618}  # each drafter's training record (README, above)
    for name in tokens:
        assert (
            _load(f"results/specialised_drafters/training/deu-f-{name}.json")["data"]["train_tokens"]
            == tokens[name]
        )
    x = np.log2(list(tokens.values()))
    slope_f, slope_pf = (np.polyfit(x, [rate[f"deu-{k}-{s}"] for s in tokens], 1)[0] for k in ("f", "pf"))
    f, pf, target, p, doublings, thousands = _quoted(
        text,
        "F gains {} tokens per forward a doubling of its data (P→F {}); F ÷ P's interval is about ±0.05, "
        "so F would clear P by 5% ({} against P's {}) after about {} more doublings, some {} k finetuning "
        "tokens",
    )
    need = 1.05 * rate["pretrained"]
    more = (need - rate["deu-f-s12"]) / slope_f
    assert _agrees(f, slope_f) and _agrees(pf, slope_pf) and _agrees(target, need)
    assert _agrees(p, rate["pretrained"]) and _agrees(doublings, more)
    assert _agrees(thousands, tokens["s12"] * 2**more / 1e3)


@pytest.mark.parametrize(
    "folder, method",
    [("sampled", "chain:1")]
    + [(f, m) for f in ("sampled-rebuilt", "sampled-s48") for m in ("chain:1", "chain:4")],
)
def test_the_sampled_drafters_table_is_the_file(folder, method):
    """results/specialised_drafters/README.md's sampled tables, in each grid's section: every cell is its
    row's tokens per target forward and interval in <folder>/sampled_drafters.json, bold exactly on the
    drafter's own language, a dash where the file has no row."""
    text = _section((ROOT / "results/specialised_drafters/README.md").read_text(), f"(`{folder}/`")
    rows = _load(f"results/specialised_drafters/{folder}/sampled_drafters.json")["rows"]
    cell = {(r["drafter"], r["set"]): r for r in rows if r["method"] == f"{method}/single"}
    table = text.split(f"Tokens per target forward, {method}, T = 1")[1].split("\n\n")[1].splitlines()
    sets = [s.strip() for s in table[0].strip("|").split("|")[1:]]
    assert len(table) == 2 + len({d for d, _ in cell})
    for line in table[2:]:
        name, *cells = (c.strip() for c in line.strip("|").split("|"))
        for s, printed in zip(sets, cells, strict=True):
            r = cell.get((name.strip("`"), s))
            if r is None:
                assert printed == "—", (name, s)
                continue
            assert printed.startswith("**") == r["home"], (name, s)
            figures = (r["tokens_per_forward"], *r["ci95"])
            for number, value in zip(re.findall(NUMBER, printed), figures, strict=True):
                assert _agrees(number, value), (name, s, printed)


def test_the_german_drafters_on_four_times_the_data_are_their_files():
    """results/specialised_drafters/README.md's two s48 sections: the finetunes' data and top-1 (their
    records), the greedy pairs, gains a doubling and speedups (matrix-s48/, whose P and s12 rows are
    matrix-rebuilt/'s), the sampled pairs and speedups (sampled-s48/)."""
    readme = (ROOT / "results/specialised_drafters/README.md").read_text()
    greedy, sampled = _section(readme, "(`matrix-s48/`)"), _section(readme, "(`sampled-s48/`)")
    folder = "results/specialised_drafters"
    records = [_load(f"{folder}/training-rebuilt/deu-{k}-s48.json") for k in ("f", "pf")]
    s12 = _load(f"{folder}/training-rebuilt/deu-f-s12.json")["data"]["train_tokens"]
    tokens = records[0]["data"]["train_tokens"]
    doublings = np.log2(tokens / s12)
    for r in records:
        assert r["data"]["train_tokens"] == tokens and len(r["source"]["shards"]) == 48
    printed = list(_quoted(greedy, "{} trained answer tokens, {} times s12's {} ({} doublings)"))
    wanted = [tokens, tokens / s12, s12, doublings]
    printed += _quoted(greedy, "last step F {}, P→F {} (on {} validation tokens")
    wanted += [records[0]["curve"][-1]["top1"], records[1]["curve"][-1]["top1"]]
    wanted += [records[0]["data"]["validation_tokens"]]

    data = _load(f"{folder}/matrix-s48/specialised_drafters.json")
    rebuilt = _load(f"{folder}/matrix-rebuilt/specialised_drafters.json")["rows"]
    before = {r["drafter"]: r for r in rebuilt if r["set"] == "translate-deu"}
    rows = {r["drafter"]: r for r in data["rows"]}
    for name in ("pretrained", "deu-f-s12", "deu-pf-s12"):
        assert rows[name] == before[name], name
    pairs = {(r["a"], r["b"]): (r["greedy_chain1_ratio"], *r["ci95"]) for r in data["pairs"]}
    f, pf, p, f12, pf12 = "deu-f-s48", "deu-pf-s48", "pretrained", "deu-f-s12", "deu-pf-s12"
    printed += _quoted(greedy, "F ÷ P {} [{}, {}], P→F ÷ F {} (F ÷ P→F {} [{}, {}]), P→F ÷ P {} [{}, {}]")
    wanted += [*pairs[(f, p)], 1 / pairs[(f, pf)][0], *pairs[(f, pf)], *pairs[(pf, p)]]
    printed += _quoted(greedy, "F ÷ F(s12) {} (s12 ÷ s48 {} [{}, {}]) and P→F ÷ P→F(s12) {} ({} [{}, {}])")
    wanted += [1 / pairs[(f12, f)][0], *pairs[(f12, f)], 1 / pairs[(pf12, pf)][0], *pairs[(pf12, pf)]]
    printed += _quoted(greedy, "(F(s48) ÷ P→F(s12) {} [{}, {}])")
    wanted += pairs[(f, pf12)]
    printed += _quoted(greedy, "it clears P by {}% (lower end {}%)")
    wanted += [100 * (pairs[(f, p)][0] - 1), 100 * (pairs[(f, p)][1] - 1)]
    rate = {name: r["greedy_chain1"] for name, r in rows.items()}
    printed += _quoted(greedy, "F {} and P→F {} a doubling ({} → {}, {} → {})")
    wanted += [(rate[f] - rate[f12]) / doublings, (rate[pf] - rate[pf12]) / doublings]
    wanted += [rate[f12], rate[f], rate[pf12], rate[pf]]
    printed += _quoted(greedy, "P→F {}× and F {}× against the 0.5B draft's {}×")
    wanted += [rows[name]["greedy_chain1_speedup"] for name in (pf, f, "draft-0.5b")]

    grid = _load(f"{folder}/sampled-s48/sampled_drafters.json")
    ratios = {(r["method"][:7], r["a"], r["b"]): (r["ratio"], *r["ci95"]) for r in grid["pairs"]}
    speedup = {(r["method"][:7], r["drafter"]): r["speedup"] for r in grid["rows"]}
    printed += _quoted(
        sampled,
        "chain:1 F ÷ P {} [{}, {}], P→F ÷ F {} [{}, {}], P→F ÷ P {} [{}, {}]; chain:4 F ÷ P {} [{}, {}], "
        "P→F ÷ F {} [{}, {}]",
    )
    for method, a, b in [("chain:1", f, p), ("chain:1", pf, f), ("chain:1", pf, p), ("chain:4", f, p)]:
        wanted += ratios[(method, a, b)]
    wanted += ratios[("chain:4", pf, f)]
    printed += _quoted(sampled, "against P→F on 6.6 k: {} [{}, {}] (chain:1)")
    wanted += ratios[("chain:1", f, pf12)]
    printed += _quoted(sampled, "chain:1 P→F {}×, F {}× against the 0.5B draft's {}×; chain:4 P→F {}×")
    wanted += [speedup[("chain:1", d)] for d in (pf, f, "draft-0.5b")] + [speedup[("chain:4", pf)]]
    benchmarks = (ROOT / "BENCHMARKS.md").read_text().split("Four times the German data")[1].split("\n\n")[0]
    printed += _quoted(benchmarks, "{} answer tokens")
    wanted += [tokens]
    printed += _quoted(benchmarks, "greedy chain:1 F ÷ P {} [{}, {}] and sampled {} [{}, {}]")
    wanted += [*pairs[(f, p)], *ratios[("chain:1", f, p)]]
    printed += _quoted(benchmarks, "ahead of F (sampled {} [{}, {}])")
    wanted += ratios[("chain:1", pf, f)]
    printed += _quoted(benchmarks, "6.6 k (sampled {} [{}, {}])")
    wanted += ratios[("chain:1", f, pf12)]
    printed += _quoted(benchmarks, "predicted at {}× (greedy) and {}× (sampled) autoregressive")
    wanted += [rows[pf]["greedy_chain1_speedup"], speedup[("chain:1", pf)]]
    printed += _quoted(benchmarks, "against the 0.5B draft's {}× and {}×.")
    wanted += [rows["draft-0.5b"]["greedy_chain1_speedup"], speedup[("chain:1", "draft-0.5b")]]
    assert len(printed) == len(wanted)
    for number, value in zip(printed, wanted, strict=True):
        assert _agrees(number, value), (number, value)


def test_the_rebuilt_grid_pairs_and_speedups_are_the_file():
    """results/specialised_drafters/README.md's paired ratios and predicted speedups of the rebuilt sampled
    grid: sampled-rebuilt/sampled_drafters.json's pairs (seeds pooled) and rows, and the range of its
    speedups/ files (gpu_speedups.py, one row per run) for the P→F drafters."""
    text = _section((ROOT / "results/specialised_drafters/README.md").read_text(), "(`sampled-rebuilt/`)")
    data = _load("results/specialised_drafters/sampled-rebuilt/sampled_drafters.json")
    pairs = {(r["set"][-3:], r["method"].split("/")[0], r["a"], r["b"]): r for r in data["pairs"]}
    rows = {(r["set"][-3:], r["method"].split("/")[0], r["drafter"]): r for r in data["rows"]}
    langs = ("deu", "fra", "rus")

    def check(printed, keys, with_interval=True):
        width = 3 if with_interval else 1
        assert len(printed) == width * len(keys)
        for i, key in enumerate(keys):
            pair = pairs[key]
            figures = (pair["ratio"], *pair["ci95"])[:width]
            for number, value in zip(printed[width * i : width * (i + 1)], figures, strict=True):
                assert _agrees(number, value), (key, number, value)

    pf, f = "{}-pf-s12", "{}-f-s12"
    check(
        _quoted(text, "P→F ÷ F {} [{}, {}] (German), {} [{}, {}] (French), {} [{}, {}] (Russian) in chain:1"),
        [(x, "chain:1", pf.format(x), f.format(x)) for x in langs],
    )
    check(
        _quoted(text, "1.124 [1.098, 1.154] (Russian) in chain:1, {}, {}, {} in chain:4"),
        [(x, "chain:4", pf.format(x), f.format(x)) for x in langs],
        with_interval=False,
    )
    check(
        _quoted(text, "P→F ÷ P {}, {}, {} (chain:1)"),
        [(x, "chain:1", pf.format(x), "pretrained") for x in langs],
        with_interval=False,
    )
    check(
        _quoted(text, "F ÷ P {} [{}, {}], {} [{}, {}], {} [{}, {}]:"),
        [(x, "chain:1", f.format(x), "pretrained") for x in langs],
    )
    check(
        _quoted(text, "(paired, chain:1): {} [{}, {}], {} [{}, {}], {} [{}, {}]:"),
        [(x, "chain:1", "corpus-fused-kl-unroll3", pf.format(x)) for x in langs],
    )
    printed = _quoted(
        text, "chain:1 P→F {}×, {}×, {}× on its language against the 0.5B draft's {}×, {}×, {}×"
    )
    wanted = [rows[(x, "chain:1", pf.format(x))] for x in langs] + [
        rows[(x, "chain:1", "draft-0.5b")] for x in langs
    ]
    for number, row in zip(printed, wanted, strict=True):
        assert _agrees(number, row["speedup"]), (row["drafter"], number)
    low1, high1, low4, high4 = _quoted(text, "P→F chain:1 {}-{}×, chain:4 {}-{}× over the seeds")
    for method, low, high in (("chain:1/single", low1, high1), ("chain:4/single", low4, high4)):
        speedups = [
            r["speedup"]
            for x in langs
            for r in _load(
                f"results/specialised_drafters/sampled-rebuilt/speedups/speedups_h200-{x}-pf-s12.json"
            )["rows"]
            if r["method"] == method and r["batch"] == 1
        ]
        assert len(speedups) == 9 and _agrees(low, min(speedups)) and _agrees(high, max(speedups)), method


def test_the_readme_min_cut_dual_timings_are_the_otm_file():
    """README's min-cut dual at n = 151,936, one call and the batched table: benchmarks/results/otm.json."""
    rows = _load("benchmarks/results/otm.json")["rows"]
    (single,) = [
        r
        for r in rows
        if (r["section"], r["law"], r.get("k"), r["method"], r["n"]) == ("single", "iid", 2, "dual", 151_936)
    ]
    (batched,) = [r for r in rows if r["section"] == "batched"]
    ms, pairs, seconds = _quoted(
        README,
        "computes α* at n = 151,936 in {} ms (IID, k = 2); {} real-size pairs, IID k = 1..8 and "
        "WithoutReplacement k = 2, take {} s in one call.",
    )
    assert _agrees(ms, 1e3 * single["seconds"])
    assert int(pairs) == batched["rows"] and batched["n"] == 151_936
    assert _agrees(seconds, batched["seconds"])


def test_the_readme_optimal_verifiers_exact_acceptance_is_the_files():
    """README's optimal verifier against α*_iid: results/real_acceptance_optimal/real_acceptance.json (corpus)
    and results/real_acceptance_full_vocab_optimal/real_acceptance.json (V = 151,936). The files hold each
    (T, k)'s mean per-position gap, not the per-position gaps: the figure is the largest of those means."""
    corpus, full, rrs, kseq, optimal = _quoted(
        README,
        "on the bundled real corpus (its mean over the positions within {} at every T and k) and at V = "
        "151,936 to {} (T = 1, k = 8: RRS {}, K-SEQ {}, optimal {}).",
    )
    _check_exact_acceptance(corpus, full, rrs, kseq, optimal)


def _check_exact_acceptance(
    corpus: str, full: str, rrs: str, kseq: str, optimal: str, positions: str = ""
) -> None:
    """The optimal verifier's largest mean gap to α*_iid on the corpus and at V = 151,936, and the T = 1,
    k = 8 means of RRS, K-SEQ and optimal there, against the two real_acceptance.json files."""
    for printed, folder in (
        (corpus, "real_acceptance_optimal"),
        (full, "real_acceptance_full_vocab_optimal"),
    ):
        rows = _load(f"results/{folder}/real_acceptance.json")["rows"]
        gaps = [abs(r["gap_to_own_optimum"]) for r in rows if r["name"] == "optimal"]
        assert len(gaps) == 24 and _agrees(printed, max(gaps)), (folder, printed, max(gaps))
        if positions and folder == "real_acceptance_optimal":
            assert {r["positions"] for r in rows} == {int(positions.replace(",", ""))}
    mean = {
        r["name"]: r["mean"]
        for r in _load("results/real_acceptance_full_vocab_optimal/real_acceptance.json")["rows"]
        if (r["temperature"], r["k"], r["kind"]) == (1.0, 8, "verifier")
    }
    for printed, name in ((rrs, "rrs"), (kseq, "kseq"), (optimal, "optimal")):
        assert _agrees(printed, mean[name]), (name, printed, mean[name])


def _luce_corpus_gaps() -> dict[tuple, list[float]]:
    """α*_wor − the Luce rule's acceptance per (T, k): results/optimal_wor_gap_luce/optimal_wor_gap.json."""
    groups: dict[tuple, list[float]] = {}
    for r in _load("results/optimal_wor_gap_luce/optimal_wor_gap.json")["rows"]:
        groups.setdefault((r["temperature"], r["k"]), []).append(r["alpha_wor"] - r["luce"])
    return groups


def test_the_readme_luce_rules_gaps_are_the_files():
    """README's Luce rule against α*_wor: results/optimal_wor_gap_luce/optimal_wor_gap.json (corpus: the
    range of the per-(T, k) mean gaps, the worst pair) and results/optimal_wor_gap_luce_full_vocab (the
    worst of its cases)."""
    low, high, worst, full_worst, cases = _quoted(
        README,
        "the Luce rule sits {}–{} below α*_wor on average on the corpus (worst {}), {} at worst over {} "
        "full-vocabulary cases;",
    )
    groups = _luce_corpus_gaps()
    means = [sum(g) / len(g) for g in groups.values()]
    assert _agrees(low, min(means)) and _agrees(high, max(means)), (min(means), max(means))
    assert _agrees(worst, max(max(g) for g in groups.values()))
    full = _load("results/optimal_wor_gap_luce_full_vocab/optimal_wor_gap.json")["rows"]
    assert int(cases) == len(full)
    assert _agrees(full_worst, max(r["alpha_wor"] - r["luce"] for r in full))


def _luce_gaps(path: str) -> dict[int, float]:
    """The largest gap α*_wor − exact acceptance per k of a ``bench_luce.py --caps 40`` run."""
    gaps: dict[int, float] = {}
    for r in _load(path)["rows"]:
        (row,) = r["tradeoff"]
        gaps[r["k"]] = max(gaps.get(r["k"], 0.0), row["gap"])
    return gaps


def test_the_luce_rules_node_times_and_gaps_are_the_files():
    """README's and BENCHMARKS' Luce rule a node, median and worst over 8 recorded positions and the largest
    gap to α*_wor: benchmarks/results/luce_recorded_gap.json; the stall fix's table against
    luce_recorded_gap_before.json."""
    path = "benchmarks/results/luce_recorded_gap.json"
    median, gaps = _load(path)["summary"]["luce_s_per_node"], _luce_gaps(path)
    *printed, gap = _quoted(
        README,
        "a median {} s at k = 2 (its law in closed form), {} s at k = 3 and {} s at k = 4 on 8 recorded "
        "full-vocabulary positions (2-core AMD EPYC), within {} of α*_wor on every one.",
    )
    for k, figure in zip("234", printed, strict=True):
        assert median[k]["pairs"] == 8 and _agrees(figure, median[k]["median"]), k
    assert _agrees(gap, max(gaps.values()))
    short = _quoted(BENCHMARKS, "**a median {} s at k = 2**")
    short += _quoted(BENCHMARKS, "**{} s at k = 3 and {} s at k = 4** (worst {} / {} / {} s;")
    for k, middle, worst in zip("234", short[:3], short[3:], strict=True):
        assert _agrees(middle, median[k]["median"]) and _agrees(worst, median[k]["max"]), k
    assert _agrees(_quoted(SUMMARY, "**within {} of α*_wor** on all 24 nodes")[0], max(gaps.values()))
    before = "benchmarks/results/luce_recorded_gap_before.json"
    earlier, earlier_gaps = _load(before)["summary"]["luce_s_per_node"], _luce_gaps(before)
    section = BENCHMARKS[BENCHMARKS.index("**A stall of 12 steps") :]
    for k in (2, 3, 4):
        row = _quoted(section[: section.index("## ")], f"| {k} | {{}} | {{}} | {{}} | {{}} / {{}} |")
        figures = (median[str(k)]["median"], median[str(k)]["max"], gaps[k], earlier[str(k)]["median"])
        assert all(_agrees(a, b) for a, b in zip(row, (*figures, earlier_gaps[k]), strict=True)), (k, row)


def test_the_readme_h200_figures_are_the_sessions_files():
    """README's H200 bullet: forwards from benchmarks/results/gpu_fast_h200_1128.json, a head's ratio from
    gpu_fast_h200_1128_heads.json, AR like for like from gpu_fast_h200_1128_ar_hf.json, host reads from
    gpu_fast_h200_1128_checks.json."""
    forwards = _load("benchmarks/results/gpu_fast_h200_1128.json")["forwards"]
    captured = {
        r["model"]: r["captured_ms"]
        for r in forwards
        if (r["B"], r["tokens"]) == (1, 1) and "captured_ms" in r
    }
    target, draft = _quoted(README, "a captured target forward costs {} ms and a draft forward {} ms;")
    assert _agrees(target, captured["target"]) and _agrees(draft, captured["draft"])

    heads = [
        r for r in _load("benchmarks/results/gpu_fast_h200_1128_heads.json")["heads"] if r["model"] == "head"
    ]
    ratios = [r[key] for r in heads for key in ("ratio_captured", "ratio_fused") if key in r]
    low, high = _quoted(README, "a feature head's forward {}–{} of the target's;")
    assert _agrees(low, min(ratios)) and _agrees(high, max(ratios)), (min(ratios), max(ratios))

    ar = {
        r["method"]: r["tokens_per_second"]
        for r in _load("benchmarks/results/gpu_fast_h200_1128_ar_hf.json")["ar_hf"]
        if r["batch"] == 1
    }
    fused, hf, ratio = _quoted(
        README, "runs at {} tokens/s fused against {} for HF's static-cache `generate` ({}×);"
    )
    assert _agrees(fused, ar["mdsd-inductor-cudagraph"]) and _agrees(hf, ar["hf-generate-static"])
    assert _agrees(ratio, ar["mdsd-inductor-cudagraph"] / ar["hf-generate-static"])

    syncs = [
        r for r in _load("benchmarks/results/gpu_fast_h200_1128_checks.json")["syncs"] if "error" not in r
    ]
    _quoted(README, "a decode reads the host once per step plus five times.")
    assert syncs and all((r["per_step"], r["per_decode"]) == (1, 5) for r in syncs)


def test_the_readme_real_pair_against_hf_assisted_is_the_file():
    """README's real pair on the CPU at T = 0.6: results/batch_efficiency/batch_efficiency.json, tokens per
    target forward and tokens/s."""
    rows = {
        r["method"]: r
        for r in _load("results/batch_efficiency/batch_efficiency.json")["rows"]
        if r["temperature"] == 0.6
    }
    greedy, rrsw, hf, heuristic, ar = _quoted(
        README,
        "dynamic trees reach {} (greedy) and {} (RRSw) tokens per target forward against HF assisted "
        "generation's {} and {}, but autoregressive sampling ({} tok/s) is faster there than every "
        "speculative method.",
    )
    _check_cpu_pair(rows, greedy, rrsw, hf, heuristic, ar)


def _ratio_range(values: list[float], low: str, high: str) -> bool:
    """``low``–``high`` is the range of ``values`` at the printed precision."""
    return _agrees(low, min(values)) and _agrees(high, max(values))


def test_summary_min_cut_dual_timings_are_the_otm_file():
    """BENCHMARKS.md's Summary, the dual's timings at n = 151,936: benchmarks/results/otm.json (single calls
    and the batched table)."""
    rows = _load("benchmarks/results/otm.json")["rows"]
    n, iid, wor, pairs, seconds = _quoted(
        SUMMARY,
        "α* by the min-cut dual at n = {}: {} ms (IID, k = 2), {} s (WithoutReplacement, k = 4); {} pairs, "
        "IID k = 1..8 and WithoutReplacement k = 2, **{} s** in one call",
    )
    single = {(r["law"], r["k"]): r for r in rows if r["section"] == "single" and r["method"] == "dual"}
    (batched,) = [r for r in rows if r["section"] == "batched"]
    assert {r["n"] for r in single.values()} == {batched["n"]} == {int(n.replace(",", ""))}
    assert _agrees(iid, 1e3 * single[("iid", 2)]["seconds"])
    assert _agrees(wor, single[("without_replacement", 4)]["seconds"])
    assert int(pairs) == batched["rows"] and _agrees(seconds, batched["seconds"])


def test_summary_dual_against_the_other_solvers_is_the_otm_file():
    """BENCHMARKS.md's Summary, the dual's speedup over each solver at the largest n they share: the sweep of
    benchmarks/results/otm.json, recomputed from its times."""
    sweep = {
        (r["method"], r["n"]): r["seconds"]
        for r in _load("benchmarks/results/otm.json")["rows"]
        if r["section"] == "sweep"
    }
    found = _quoted(
        SUMMARY,
        "the dual against the other solvers: **{}×** the LP (n = {}), **{}×** max-flow (n = {}), **{}×** the "
        "coupling LP (n = {})",
    )
    for printed, n, method in zip(found[::2], found[1::2], ("lp", "maxflow", "coupling"), strict=True):
        largest = max(m for (name, m) in sweep if name == method)
        assert int(n) == largest, (method, n, largest)
        assert _agrees(printed, sweep[(method, largest)] / sweep[("dual", largest)]), (method, printed)


def test_summary_verifier_kernels_are_the_verify_files():
    """BENCHMARKS.md's Summary, the kernels at batch 1024: benchmarks/results/verify.json
    (``verify_unchecked`` in memory passes) against verify_before.json (the first release's validated
    ``verify``). The range of "cheaper" is over every verifier, K-SEQ included (its 3.9× is the low end);
    "~90" is K-SEQ's median at the tens, "1–30" the range of the others but SpecHub's, 30 at the tens."""
    (batch,) = _quoted(SUMMARY, "| verifier kernels at batch {}:")
    fewest, most, spechub, kseq, low, high = _quoted(
        SUMMARY,
        "{}–{} memory passes per node (SpecHub {}, K-SEQ ~{}), {}–{}× cheaper than the validated call of the "
        "first release",
    )
    now = {
        (r["verifier"], r["k"]): r
        for r in _load("benchmarks/results/verify.json")["rows"]
        if r["section"] == "verify" and r["batch"] == int(batch)
    }
    before = {
        (r["verifier"], r["k"]): r
        for r in _load("benchmarks/results/verify_before.json")["rows"]
        if r.get("section") == "verify" and r["batch"] == int(batch)
    }
    passes = sorted(r["kernel_ratio"] for (name, _), r in now.items() if name == "kseq")
    assert len(passes) == 3 and round(passes[1] / 10) * 10 == int(kseq), passes
    others = [r["kernel_ratio"] for (name, _), r in now.items() if name not in ("kseq", "spechub")]
    assert _agrees(fewest, min(others)) and round(max(others) / 10) * 10 == int(most), others
    assert _agrees(spechub, now[("spechub", 2)]["kernel_ratio"])
    assert now.keys() == before.keys()
    cheaper = [before[key]["checked_ratio"] / r["kernel_ratio"] for key, r in now.items()]
    assert _ratio_range(cheaper, low, high), (min(cheaper), max(cheaper))


def test_summary_optimal_verifiers_exact_acceptance_is_the_files():
    """BENCHMARKS.md's Summary, the optimal verifier against α*_iid: results/real_acceptance_optimal (corpus)
    and results/real_acceptance_full_vocab_optimal (V = 151,936), real_acceptance.json; the largest of the
    per-(T, k) mean gaps."""
    positions, corpus, full, rrs, kseq, optimal = _quoted(
        SUMMARY,
        "means over {} corpus positions within {} at every T and k, {} at V = 151,936 (T = 1, k = 8: RRS {}, "
        "K-SEQ {}, optimal {})",
    )
    _check_exact_acceptance(corpus, full, rrs, kseq, optimal, positions)


def _optimal_rows(path: str, batch: int | None = None) -> dict[tuple[int, int], dict]:
    """The i.i.d. optimal verifier's rows of a bench_optimal.py file, by (batch, k)."""
    return {
        (r["batch"], r["k"]): r
        for r in _load(path)["rows"]
        if r["section"] == "verify" and r["verifier"] == "optimal" and batch in (None, r["batch"])
    }


def test_summary_optimal_verifiers_node_is_the_files():
    """BENCHMARKS.md's Summary, the optimal verifier's node: × RRS on the CPU from benchmarks/results/
    optimal.json, the slabs from optimal_slabs_before.json and optimal_slabs.json, the H100 from
    optimal_cuda.json, the H200's inductor row from optimal_cuda_h200.json, the ops from optimal_ops.json and
    optimal_ops_before.json (k = 2, B = 1); after issue 45 on the H200, optimal_cuda_h200_1129.json and the
    binary:3 steps of gpu_fast_h200_1129_verifiers.json."""
    cpu_low, cpu_high, faster_low, faster_high, slab_low, slab_high = _quoted(
        SUMMARY,
        "the optimal verifier's node: {}-{}× RRS on the CPU (since 2026-11-29 one row a slab: {}-{}× faster "
        "than before on the same box, {}-{}× RRS there);",
    )
    cpu = [r["vs_rrs"] for r in _optimal_rows("benchmarks/results/optimal.json").values()]
    assert _ratio_range(cpu, cpu_low, cpu_high), (min(cpu), max(cpu))
    before = _optimal_rows("benchmarks/results/optimal_slabs_before.json")
    after = _optimal_rows("benchmarks/results/optimal_slabs.json")
    assert before.keys() == after.keys()
    faster = [before[key]["ms_per_node"] / r["ms_per_node"] for key, r in after.items()]
    assert _ratio_range(faster, faster_low, faster_high), (min(faster), max(faster))
    slabs = [r["vs_rrs"] for r in after.values()]
    assert _ratio_range(slabs, slab_low, slab_high), (min(slabs), max(slabs))

    low, high, captured = _quoted(SUMMARY, "{}–{}× at B = 1024 and {}× captured at B = 1 on the H100;")
    h100 = _load("benchmarks/results/optimal_cuda.json")["rows"]
    wide = [r["vs_rrs"] for r in _optimal_rows("benchmarks/results/optimal_cuda.json", 1024).values()]
    assert _ratio_range(wide, low, high), (min(wide), max(wide))
    graph = {r["verifier"]: r["graph_ms"] for r in h100 if r["section"] == "graph"}
    assert _agrees(captured, graph["optimal"] / graph["rrs"])

    fused, eager, ratio = _quoted(
        SUMMARY, "fused by inductor, **{} ms, against {} eager ({}×)** on the H200;"
    )
    (inductor,) = [
        r
        for r in _load("benchmarks/results/optimal_cuda_h200.json")["rows"]
        if (r["section"], r["verifier"], r["k"], r["batch"]) == ("inductor", "optimal", 2, 1)
    ]
    assert _agrees(fused, inductor["inductor_ms"]) and _agrees(eager, inductor["eager_ms"])
    assert _agrees(ratio, inductor["eager_ms"] / inductor["inductor_ms"]) and inductor["same_tokens"]

    k, batch, after_ops, before_ops, rrs, kseq = _quoted(
        SUMMARY,
        "since issue 45 a verify at k = {}, B = {} is **{} top-level aten ops, against {}** "
        "(RRS {}, K-SEQ {})",
    )

    def ops(path: str) -> dict[str, int]:
        return {
            r["verifier"]: r["ops"]
            for r in _load(path)["rows"]
            if (r["k"], r["batch"], r["n"]) == (int(k), int(batch), 151_936)
        }

    now, then = ops("benchmarks/results/optimal_ops.json"), ops("benchmarks/results/optimal_ops_before.json")
    assert (now["optimal"], then["optimal"], now["rrs"], now["kseq"]) == tuple(
        map(int, (after_ops, before_ops, rrs, kseq))
    )

    fused, fused_rrs, fused_ratio, graph_ms, graph_rrs, graph_ratio, wide_ratio = _quoted(
        SUMMARY,
        "on the H200 (2026-11-29) **{} ms fused against RRS's {} ({}×)**, {} ms captured against {} ({}×), "
        "{}× RRS per node at B = 1024;",
    )
    h200 = _load("benchmarks/results/optimal_cuda_h200_1129.json")["rows"]
    one = {
        (r["section"], r["verifier"]): r
        for r in h200
        if r["section"] in ("inductor", "graph") and (r["k"], r["batch"]) == (2, 1)
    }
    optimal, base = one[("inductor", "optimal")], one[("inductor", "rrs")]
    assert _agrees(fused, optimal["inductor_ms"]) and _agrees(fused_rrs, base["inductor_ms"])
    assert _agrees(fused_ratio, optimal["inductor_ms"] / base["inductor_ms"]) and optimal["same_tokens"]
    optimal, base = one[("graph", "optimal")], one[("graph", "rrs")]
    assert _agrees(graph_ms, optimal["graph_ms"]) and _agrees(graph_rrs, base["graph_ms"])
    assert _agrees(graph_ratio, optimal["graph_ms"] / base["graph_ms"])
    (wide,) = [
        r["vs_rrs"]
        for r in h200
        if (r["section"], r["verifier"], r["k"], r["batch"]) == ("verify", "optimal", 2, 1024)
    ]
    assert _agrees(wide_ratio, wide)

    step, step_rrs = _quoted(
        SUMMARY, "a captured binary:3 step at B = 64 costs **{} ms under it against {} under RRS**"
    )
    steps = {
        r["verifier"]: r["step_ms"]
        for r in _load("benchmarks/results/gpu_fast_h200_1129_verifiers.json")["verifiers"]
        if r["batch"] == 64
    }
    assert _agrees(step, steps["optimal"]) and _agrees(step_rrs, steps["rrs"])


def test_summary_luce_rule_is_the_files():
    """BENCHMARKS.md's Summary, the Luce rule: its gaps from results/optimal_wor_gap_luce and
    results/optimal_wor_gap_luce_full_vocab (optimal_wor_gap.json), k = 2's closed form against the
    quadrature from benchmarks/results/luce_k2_closed.json and luce_k2_quadrature.json, the previous code's
    medians from luce_recorded_before.json (the medians, worst and gaps of luce_recorded_gap.json: the test
    above)."""
    low, high, worst, full_worst, cases, pairs = _quoted(
        SUMMARY,
        "the Luce rule (drafts without replacement): {}–{} below α*_wor on average (worst {}) on the corpus, "
        "worst {} over {} full-vocabulary cases; a node on {} recorded positions",
    )
    groups = _luce_corpus_gaps()
    means = [sum(g) / len(g) for g in groups.values()]
    assert _ratio_range(means, low, high), (min(means), max(means))
    assert _agrees(worst, max(max(g) for g in groups.values()))
    full = _load("results/optimal_wor_gap_luce_full_vocab/optimal_wor_gap.json")["rows"]
    assert int(cases) == len(full)
    assert _agrees(full_worst, max(r["alpha_wor"] - r["luce"] for r in full))
    summary = _load("benchmarks/results/luce_recorded_gap.json")["summary"]["luce_s_per_node"]
    assert all(s["pairs"] == int(pairs) for s in summary.values())

    low, high = _quoted(
        SUMMARY, "(its law in closed form since 2026-11-29, {}-{}× faster than the quadrature)"
    )

    def per_node(path: str) -> dict[str, float]:
        return {r["pair"]: r["luce_ms_per_node"] for r in _load(path)["rows"] if r["k"] == 2}

    closed = per_node("benchmarks/results/luce_k2_closed.json")
    quadrature = per_node("benchmarks/results/luce_k2_quadrature.json")
    assert closed.keys() == quadrature.keys()
    faster = [quadrature[pair] / ms for pair, ms in closed.items()]
    assert _ratio_range(faster, low, high), faster

    k3, k4 = _quoted(SUMMARY, "{} / {} s before torch's prefix sums on that box;")
    previous = _load("benchmarks/results/luce_recorded_before.json")["summary"]["luce_s_per_node"]
    assert _agrees(k3, previous["3"]["median"]) and _agrees(k4, previous["4"]["median"])
    assert previous["3"]["pairs"] == previous["4"]["pairs"] == int(pairs)


def _cases(folder: str) -> list[dict]:
    """The per-case rows of a tree_theorems run: results/FOLDER/tree_theorems_cases.csv.gz."""
    with gzip.open(ROOT / "results" / folder / "tree_theorems_cases.csv.gz", "rt") as f:
        return list(csv.DictReader(f))


def test_summary_whole_trees_are_the_tree_theorems_files():
    """BENCHMARKS.md's Summary, whole trees: the claims and cases of results/tree_theorems (toy) and
    results/tree_theorems_real (tree_theorems.json, tree_theorems_cases.csv.gz); the i.i.d. verifiers' gaps at
    T = 1 are the mean gaps of RRS, K-SEQ and Traversal to the optimum on the real depth-2 binary trees."""
    toy, real, temperature, low, high = _quoted(
        SUMMARY,
        "no counter-example to LP(chain) = block, token-wise ≤ block, Traversal ≤ LP on {} toy and {} real "
        "cases; at T = {} the i.i.d. verifiers leave {}–{} tokens per step on the table",
    )
    for printed, folder in ((toy, "tree_theorems"), (real, "tree_theorems_real")):
        claims = {r["claim"]: r for r in _load(f"results/{folder}/tree_theorems.json")["rows"]}
        for claim in ("lp_chain_equals_block", "tokenwise_le_block", "traversal_le_lp"):
            assert claims[claim]["checks"] > 0 and claims[claim]["counterexamples"] == 0, (folder, claim)
        assert len(_cases(folder)) == int(printed.replace(",", "")), folder
    gaps: dict[str, list[float]] = {"rrs": [], "kseq": [], "traversal": []}
    for r in _cases("tree_theorems_real"):
        if (r["tree"], r["law"], float(r["temperature"])) == ("binary2", "iid", float(temperature)):
            assert not r["error"]
            for method, values in gaps.items():
                values.append(float(r["optimum"]) - float(r[method]))
    means = [sum(v) / len(v) for v in gaps.values()]
    assert all(gaps.values()) and _ratio_range(means, low, high), means


def test_summary_inductor_fast_path_is_the_decode_file():
    """BENCHMARKS.md's Summary, the fast path compiled by inductor on the CPU: benchmarks/results/
    decode_inductor.json (B = 1; HF `generate` of the same run), the eager step from decode.json."""
    ratio, mdsd, hf, step, eager = _quoted(
        SUMMARY,
        "autoregressive decoding at {}× HF `generate` ({} against {} tokens/s), a chain:4 step in {} ms "
        "against {} ms eager",
    )
    rows = {
        (r["path"], r["tree"], r["batch"]): r
        for r in _load("benchmarks/results/decode_inductor.json")["rows"]
    }
    ar = rows[("inductor", "none", 1)]["tokens_per_second"]
    generate = rows[("hf-generate", "none", 1)]["tokens_per_second"]
    assert _agrees(mdsd, ar) and _agrees(hf, generate) and _agrees(ratio, ar / generate)
    assert _agrees(step, rows[("inductor", "chain:4", 1)]["step_ms"])
    (slow,) = [
        r["step_ms"]
        for r in _load("benchmarks/results/decode.json")["rows"]
        if (r["path"], r["tree"], r["batch"]) == ("eager", "chain:4", 1)
    ]
    assert _agrees(eager, slow)


def test_summary_real_pair_against_hf_assisted_is_the_file():
    """BENCHMARKS.md's Summary, the real pair on the CPU at T = 0.6: results/batch_efficiency/
    batch_efficiency.json, tokens per target forward and tokens/s."""
    data = _load("results/batch_efficiency/batch_efficiency.json")
    temperature, greedy, rrsw, hf, heuristic, ar = _quoted(
        SUMMARY,
        "the real pair, T = {}: dynamic trees {} (greedy) and {} (RRSw) tokens per target forward against HF "
        "assisted generation's {} and {}; autoregressive sampling ({} tok/s) faster than every speculative "
        "method",
    )
    rows = {r["method"]: r for r in data["rows"] if r["temperature"] == float(temperature)}
    _check_cpu_pair(rows, greedy, rrsw, hf, heuristic, ar)
    prompts, tokens = _quoted(SUMMARY, "| {} prompts × {} tokens, 2-core CPU box, float32 |")
    assert {r["prompts"] for r in data["rows"]} == {int(prompts)}
    assert data["metadata"]["config"]["max_new_tokens"] == int(tokens)


def test_summary_h200_decoder_is_the_sessions_files():
    """BENCHMARKS.md's Summary, the decoder on the H200: captured forwards from benchmarks/results/
    gpu_fast_h200_1128.json, fused from gpu_fast_h200_1128_fused.json, AR like for like from
    gpu_fast_h200_1128_ar_hf.json, host reads from gpu_fast_h200_1128_checks.json."""
    target, draft, fused_target, fused_draft, fused, hf, ratio, captured, per_decode = _quoted(
        SUMMARY,
        "captured forwards **{}** ms (target) and **{}** ms (draft), fused {} and {} ms; autoregressive "
        "decoding like for like (steady state, one process) **{}** tokens/s fused against {} for HF's "
        "static-cache `generate` ({}×; captured {}×); one host synchronisation per step plus {} per decode",
    )
    forwards = {
        r["model"]: r["captured_ms"]
        for r in _load("benchmarks/results/gpu_fast_h200_1128.json")["forwards"]
        if (r["B"], r["tokens"]) == (1, 1) and "captured_ms" in r
    }
    assert _agrees(target, forwards["target"]) and _agrees(draft, forwards["draft"])
    fused_forwards = {
        r["model"]: r["fused_ms"]
        for r in _load("benchmarks/results/gpu_fast_h200_1128_fused.json")["fused_forwards"]
        if (r["B"], r["tokens"]) == (1, 1)
    }
    assert _agrees(fused_target, fused_forwards["target"]) and _agrees(fused_draft, fused_forwards["draft"])
    ar = {
        r["method"]: r["tokens_per_second"]
        for r in _load("benchmarks/results/gpu_fast_h200_1128_ar_hf.json")["ar_hf"]
        if r["batch"] == 1
    }
    static = ar["hf-generate-static"]
    assert _agrees(fused, ar["mdsd-inductor-cudagraph"]) and _agrees(hf, static)
    assert _agrees(ratio, ar["mdsd-inductor-cudagraph"] / static)
    assert _agrees(captured, ar["mdsd-cudagraph"] / static)
    syncs = [
        r for r in _load("benchmarks/results/gpu_fast_h200_1128_checks.json")["syncs"] if "error" not in r
    ]
    assert syncs and all((r["per_step"], r["per_decode"]) == (1, int(per_decode)) for r in syncs)


def test_summary_feature_heads_on_the_h200_are_the_files():
    """BENCHMARKS.md's Summary, feature heads on the H200: forwards' ratios from benchmarks/results/
    gpu_fast_h200_1128_heads.json, the break-even from gpu_fast_h200_1128_head_decode.json (chain:4 step ÷
    AR step, B = 1), the head's and the 0.5B draft's; the small drafter's ratios from
    gpu_fast_h200_1129_heads.json and its prediction from drafter_cost.json."""
    low, high, draft_captured, draft_fused, even, draft_even = _quoted(
        SUMMARY,
        "a feature head's forward **{}–{}** of the target's captured or fused (the 0.5B draft {} / {}); a "
        "chain:4 step with a head breaks even with AR at {} tokens per step (with the 0.5B draft: {})",
    )
    heads = _load("benchmarks/results/gpu_fast_h200_1128_heads.json")["heads"]
    ratios = [
        r[key] for r in heads if r["model"] == "head" for key in ("ratio_captured", "ratio_fused") if key in r
    ]
    assert _ratio_range(ratios, low, high), (min(ratios), max(ratios))
    (draft,) = [r for r in heads if r["model"] == "draft" and (r["B"], r["tokens"]) == (1, 1)]
    assert _agrees(draft_captured, draft["ratio_captured"]) and _agrees(draft_fused, draft["ratio_fused"])
    step = {
        (r["tree"], r["drafter"]): r["step_ms"]
        for r in _load("benchmarks/results/gpu_fast_h200_1128_head_decode.json")["head_decode"]
        if r["batch"] == 1
    }
    assert _agrees(even, step[("chain:4", "head")] / step[("none", "none")])
    assert _agrees(draft_even, step[("chain:4", "draft")] / step[("none", "none")])

    layers, width, captured, fused, predicted = _quoted(
        SUMMARY,
        "a small drafter of {} layers of width {} **{}** of the target captured, {} fused (predicted {} from "
        "its kernels and bytes)",
    )
    (small,) = [
        r
        for r in _load("benchmarks/results/gpu_fast_h200_1129_heads.json")["heads"]
        if r["model"] == "small"
        and (r["layers"], r["width"], r["draft_vocab"], r["B"], r["tokens"])
        == (int(layers), int(width), 16384, 1, 1)
    ]
    assert _agrees(captured, small["ratio_captured"]) and _agrees(fused, small["ratio_fused"])
    (row,) = [
        r
        for r in _load("benchmarks/results/drafter_cost.json")["rows"]
        if r["model"] == f"small:{width}:{layers}:16384"
    ]
    assert _agrees(predicted, row["predicted_ratio"]) and row["measured_ms"] == small["captured_ms"]
    in_readme = _quoted(
        README, "draft vocabulary; {} of the target's captured forward measured on an H200, {} predicted by"
    )
    assert in_readme == (captured, predicted)


def test_summary_prompt_lookup_on_the_forwards_is_the_file():
    """BENCHMARKS.md's Summary, prompt lookup on HumanEval predicted on the H200's forwards: the whole sets'
    batch (results/whole_sets/qwen2.5-coder-bf16/speedups) and the first sample's size, 2 × 48
    (results/draft_sources/draft_sources.json; the figures themselves: the tests above)."""
    (batch,) = _quoted(SUMMARY, "predicted speedup over autoregressive decoding at B = {} on the whole sets")
    assert {r["batch"] for r in FORWARDS} == {int(batch)} and {
        r["batch"] for r in WHOLE_SPEEDUPS.values()
    } == {1}
    prompts, tokens = _quoted(SUMMARY, "on the first {} × {} sample)")
    config = _load("results/draft_sources/draft_sources.json")["metadata"]["config"]
    assert (config["prompts_per_set"], config["max_new_tokens"]) == (int(prompts), int(tokens))


def test_summary_cost_model_on_the_cpu_is_the_file():
    """BENCHMARKS.md's Summary, the cost model on the CPU: results/cost_model/cost_model.json, the mean and
    worst |predicted ÷ measured tokens/s − 1| over its rows (steady state)."""
    mean, worst = _quoted(
        SUMMARY, "predicted tokens/s within {}% of the measured ones on average (worst {}%)"
    )
    errors = [abs(r["error"]) for r in _load("results/cost_model/cost_model.json")["rows"]]
    assert _agrees(mean, 100 * sum(errors) / len(errors)) and _agrees(worst, 100 * max(errors))


def test_summary_datastore_is_the_files():
    """BENCHMARKS.md's Summary, the datastore: benchmarks/results/drafters.json (its build and the datastore's
    lookups); prompt lookup alone on HumanEval and every source alone on MT-Bench (no tree:
    ``none/topk+...``) from results/draft_sources/draft_sources.json."""
    size, p50, top1, lookup, low, high = _quoted(
        SUMMARY,
        "a datastore of {} M tokens: lookup **{} µs** CPU p50, top-1 {}%; prompt lookup alone {} tokens per "
        "target forward on HumanEval, every source alone {}–{} on MT-Bench",
    )
    bench = _load("benchmarks/results/drafters.json")
    (datastore,) = [r for r in bench["rows"] if r["source"] == "datastore"]
    assert _agrees(size, bench["build"]["datastore_tokens"] / 1e6)
    assert _agrees(p50, datastore["cpu_p50_us"]) and _agrees(top1, 100 * datastore["top1"])
    (row,) = [
        r
        for r in _load("results/draft_sources/draft_sources.json")["rows"]
        if (r["method"], r["dataset"]) == ("none/topk+lookup", "humaneval")
    ]
    assert _agrees(lookup, row["tokens"] / row["target_forwards"])
    alone = [
        r["tokens"] / r["target_forwards"]
        for r in _load("results/draft_sources/draft_sources.json")["rows"]
        if r["dataset"] == "mt-bench" and r["method"].startswith("none/topk+")
    ]
    assert len(alone) == 4 and _ratio_range(alone, low, high), alone


def test_summary_drafters_cost_is_the_file():
    """BENCHMARKS.md's Summary, a drafter's multiply-adds per token ÷ the target's: benchmarks/results/
    drafter_cost.json (the 0.5B draft; a head of the target's MLP width, 8,960, and 32,000 draft tokens; the
    smaller head named in the text)."""
    draft, head, small, mlp, vocab = _quoted(
        SUMMARY,
        "from the weights: the 0.5B draft {}, a feature head {} ({} with a {}-unit MLP and {} tokens)",
    )
    ratio = {r["model"]: r["macs_ratio"] for r in _load("benchmarks/results/drafter_cost.json")["rows"]}
    shape = f"head:{mlp.replace(',', '')}:{vocab.replace(',', '')}"
    assert _agrees(draft, ratio["draft"]) and _agrees(head, ratio["head:8960:32000"])
    assert _agrees(small, ratio[shape]), (shape, small)


def test_summary_trained_heads_are_the_files():
    """BENCHMARKS.md's Summary, the three trained heads: results/drafters/drafters.json (held-out α*_4, the
    paired differences, the trainings), chain:4 with the `kl` head from results/drafters/decode-kl-head/
    batch_efficiency.json."""
    steps, thousands, kl, alpha, tv, draft, loses, loses_low, loses_high, beats, chain = _quoted(
        SUMMARY,
        "feature heads trained {} steps on {}k positions: held-out α*_4 **{}** (`kl`), {} (`alpha`), "
        "{} (`tv`) against the 0.5B draft's {}; the α* loss loses to KL by {} [{}, {}] and beats TV by {}; "
        "chain:4 with the `kl` head {} tokens per target forward",
    )
    data = _load("results/drafters/drafters.json")
    for training in data["trainings"].values():
        assert training["config"]["steps"] == int(steps)
        assert _agrees(thousands, training["data"]["train_tokens"] / 1e3)
    alpha_4 = {r["drafter"]: r["alpha_4"] for r in data["rows"]}
    for printed, drafter in (
        (kl, "corpus-kl"),
        (alpha, "corpus-alpha"),
        (tv, "corpus-tv"),
        (draft, "draft-0.5b"),
    ):
        assert _agrees(printed, alpha_4[drafter]), (drafter, printed)
    pairs = {(p["a"], p["b"]): p for p in data["pairs"] if p["measure"] == "alpha_4"}
    kl_alpha = pairs[("corpus-kl", "corpus-alpha")]
    assert _agrees(loses, kl_alpha["difference"]) and _agrees(loses_low, kl_alpha["low"])
    assert _agrees(loses_high, kl_alpha["high"])
    assert _agrees(beats, pairs[("corpus-alpha", "corpus-tv")]["difference"])
    decode = _load("results/drafters/decode-kl-head/batch_efficiency.json")
    assert decode["metadata"]["config"]["draft"].endswith("/corpus-kl")
    (row,) = [r for r in decode["rows"] if r["method"] == "chain:4/single"]
    assert _agrees(chain, row["tokens"] / row["target_forwards"])


def test_the_heads_held_out_acceptance_by_set_is_the_file():
    """results/drafters/README.md's table by training set: results/drafters/heldout-bf16-kl/drafters.json
    (rows and by_set)."""
    text = (ROOT / "results/drafters/README.md").read_text()
    data = _load("results/drafters/heldout-bf16-kl/drafters.json")
    by_set = {(r["drafter"], r["set"]): r for r in data["by_set"]}
    whole = {r["drafter"]: r for r in data["rows"]}
    for label, drafter, measure in (
        ("this head, Σ min(p, q)", "corpus-bf16-kl", "acceptance"),
        ("this head, α*_4", "corpus-bf16-kl", "alpha_4"),
        ("0.5B draft, Σ min(p, q)", "draft-0.5b", "acceptance"),
    ):
        (line,) = [x for x in text.splitlines() if x.startswith(f"  | {label} |")]
        cells = [c.strip() for c in line.strip().strip("|").split("|")[1:]]
        for cell, r in zip(
            cells,
            (by_set[(drafter, "chat-train")], by_set[(drafter, "code-train")], whole[drafter]),
            strict=True,
        ):
            figures = (r[measure], r[f"{measure}_low"], r[f"{measure}_high"])
            for number, value in zip(re.findall(NUMBER, cell), figures, strict=False):
                assert _agrees(number, value), (label, cell)


def _drafters_section(section: str, following: str, folder: str) -> tuple:
    """(text, data, rows by drafter, by_set rows by (drafter, set)) of results/drafters/README.md's section
    ``section`` (up to section ``following``) and the experiments/drafters.py run in ``folder`` it quotes,
    whose positions and sequences it states."""
    text = (ROOT / "results/drafters/README.md").read_text()
    text = text[text.index(f"## `{section}/`") : text.index(f"## `{following}/`")]
    data = _load(f"results/drafters/{folder}/drafters.json")
    rows = {r["drafter"]: r for r in data["rows"]}
    by_set = {(r["drafter"], r["set"]): r for r in data["by_set"]}
    positions, sequences = _quoted(text, "{} positions in {} sequences")
    assert {(r["positions"], r["sequences"]) for r in rows.values()} == {
        (int(positions.replace(",", "")), int(sequences))
    }
    return text, data, rows, by_set


def test_the_fused_features_comparison_is_the_file():
    """results/drafters/README.md's fused-features section: every cell of its table and its paired
    differences from results/drafters/fused-features/drafters.json, the training curves' last points from
    the two heads' training.json."""
    text, data, rows, by_set = _drafters_section("fused-features", "distilled/chat", "fused-features")
    for label, drafter in (
        ("final hidden state", "corpus512-final-kl"),
        ("layers 1, 13, 24 fused", "corpus512-fused-kl"),
        ("0.5B draft", "draft-0.5b"),
    ):
        (line,) = [x for x in text.splitlines() if x.startswith(f"| {label} |")]
        numbers = re.findall(NUMBER, line.replace(label, ""))
        r = rows[drafter]
        expected = [r["acceptance"]]
        expected += [r["acceptance_low"], r["acceptance_high"]] if drafter != "draft-0.5b" else []
        expected += [r["alpha_4"]]
        expected += [r["alpha_4_low"], r["alpha_4_high"]] if drafter != "draft-0.5b" else []
        expected += [
            by_set[(drafter, "chat-train")]["acceptance"],
            by_set[(drafter, "code-train")]["acceptance"],
        ]
        expected += [r["multiply_adds_ratio"]]
        assert len(numbers) == len(expected), line
        for number, value in zip(numbers, expected, strict=True):
            assert _agrees(number, value), (label, number, value)
    pairs = {
        r["measure"]: r
        for r in data["pairs"]
        if (r["a"], r["b"]) == ("corpus512-final-kl", "corpus512-fused-kl")
    }
    quoted = _quoted(text, "final − fused −{} [−{}, −{}] in single-draft acceptance, −{} [−{}, −{}] in α*_4")
    for printed, value in zip(
        quoted,
        [-pairs[m][k] for m in ("acceptance", "alpha_4") for k in ("difference", "low", "high")],
        strict=True,
    ):
        assert _agrees(printed, value), (printed, value)
    final_a, fused_a, difference, low, high, final_4, fused_4, extra = _quoted(
        BENCHMARKS,
        "accept {} and **{}** at depth 1 on the same 4,686 held-out answer positions (paired difference {} "
        "[{}, {}]; α*_4 {} and {}), for {} of the target's multiply-adds more",
    )
    a, b = rows["corpus512-final-kl"], rows["corpus512-fused-kl"]
    pair = pairs["acceptance"]
    for printed, value in (
        (final_a, a["acceptance"]),
        (fused_a, b["acceptance"]),
        (difference, -pair["difference"]),
        (low, -pair["high"]),
        (high, -pair["low"]),
        (final_4, a["alpha_4"]),
        (fused_4, b["alpha_4"]),
        (extra, b["multiply_adds_ratio"] - a["multiply_adds_ratio"]),
    ):
        assert _agrees(printed, value), (printed, value)
    fused, final = _quoted(text, "agree: {} against {} after 400 steps")
    for printed, kind in ((fused, "fused"), (final, "final")):
        curve = _load(f"results/drafters/fused-features/corpus512-{kind}-kl/training.json")["curve"]
        assert curve[-1]["step"] == 400 and _agrees(printed, curve[-1]["acceptance"])


def _whole_set_runs(path: str, temperature: float) -> dict[str, dict[int, dict]]:
    """{method: {prompt: its per-prompt counts}} of a batch_efficiency run at ``temperature``."""
    return {
        r["method"]: {p["prompt"]: p for p in r["per_prompt"]}
        for r in _load(path)["rows"]
        if r["temperature"] == temperature
    }


def _paired(runs: dict, a: str, b: str, prompts) -> tuple[float, tuple[float, float]]:
    """Tokens per target forward of method a over b on ``prompts``, with its paired bootstrap interval
    (mdsd.harness.comparison.paired_ratio, seed 0, as the run's summary)."""
    from mdsd.harness.comparison import paired_ratio

    counts = [[runs[m][i][key] for i in prompts] for m in (a, b) for key in ("tokens", "target_forwards")]
    return paired_ratio(*counts, seed=0)


def _check_paired(printed, runs: dict, a: str, b: str, prompts) -> tuple[float, float]:
    """Assert that ``printed`` (ratio, low, high) is :func:`_paired`'s A ÷ B and interval; the interval."""
    ratio, low, high = printed
    value, (lo, hi) = _paired(runs, a, b, prompts)
    assert _agrees(ratio, value) and _agrees(low, lo) and _agrees(high, hi), (a, b, value, lo, hi)
    return lo, hi


WHOLE_SETS = "results/whole_sets/qwen2.5-coder-bf16/batch_efficiency.json"
MT_BENCH, HUMANEVAL = range(80), range(80, 244)  # the whole-set run's numbering of its prompts


def _rate(runs: dict, method: str, prompts) -> float:
    rows = [runs[method][i] for i in prompts]
    return sum(r["tokens"] for r in rows) / sum(r["target_forwards"] for r in rows)


def test_the_whole_set_figures_are_the_file():
    """results/whole_sets/README.md's figures of the 0.5B draft's run: tokens per target forward at T = 0.6
    on MT-Bench's 80 prompts and HumanEval's 164, and the paired ratios over all 244 prompts and by set, at
    T = 0.6 and 0: results/whole_sets/qwen2.5-coder-bf16/batch_efficiency.json."""
    text = (ROOT / "results/whole_sets/README.md").read_text()
    text = text[text.index("## `qwen2.5-coder-bf16/`") : text.index("## `qwen2.5-coder-bf16-unroll-head/`")]
    runs = _whole_set_runs(WHOLE_SETS, 0.6)
    everyone = sorted(set.intersection(*(set(r) for r in runs.values())))
    assert everyone == list(range(244))

    quoted = _quoted(
        text,
        "On all 80 MT-Bench first turns (T = 0.6, tokens per target forward): chain:4 {}, binary:3 RRS {}, "
        "RRSw {}, SpecHub {}, optimal {}, the dynamic tree (RRSw) {}, HF assisted {}, "
        "prompt lookup alone {}.",
    )
    methods = (
        "chain:4/single",
        "binary:3/rrs",
        "binary:3/rrsw",
        "binary:3/spechub",
        "binary:3/optimal",
        "dynamic:8,2,3,24/rrsw",
        "hf-assisted",
        "none/topk+lookup",
    )
    for printed, method in zip(quoted, methods, strict=True):
        assert _agrees(printed, _rate(runs, method, MT_BENCH)), (method, printed)
    quoted = _quoted(
        text,
        "On all 164 HumanEval prompts: chain:4 {}, RRS {}, RRSw {}, SpecHub {}, optimal {}, the dynamic "
        "tree {}, HF assisted {}, prompt lookup alone {}, chain:4 + lookup {}.",
    )
    for printed, method in zip(quoted, (*methods, "chain:4/single+lookup"), strict=True):
        assert _agrees(printed, _rate(runs, method, HUMANEVAL)), (method, printed)

    (count,) = _quoted(text, "Paired over all {} prompts (T = 0.6):")
    assert int(count) == len(everyone)
    dynamic, hf = "dynamic:8,2,3,24/rrsw", "hf-assisted"
    quotes = (
        ("RRS ÷ RRSw {} [{}, {}]", "binary:3/rrs", "binary:3/rrsw", everyone, runs),
        ("RRS ÷ SpecHub {} [{}, {}]", "binary:3/rrs", "binary:3/spechub", everyone, runs),
        ("RRS ÷ optimal {} [{}, {}]", "binary:3/rrs", "binary:3/optimal", everyone, runs),
        ("SpecHub ÷ optimal {} [{}, {}]", "binary:3/spechub", "binary:3/optimal", everyone, runs),
        ("RRSw ÷ SpecHub {} [{}, {}]", "binary:3/rrsw", "binary:3/spechub", everyone, runs),
        (
            "(chain:4 ÷ chain:4 + lookup {} [{}, {}])",
            "chain:4/single",
            "chain:4/single+lookup",
            HUMANEVAL,
            runs,
        ),
        ("not on MT-Bench ({} [{}, {}])", "chain:4/single", "chain:4/single+lookup", MT_BENCH, runs),
        ("over both, {} [{}, {}]", "chain:4/single", "chain:4/single+lookup", everyone, runs),
        ("(dynamic ÷ HF {} [{}, {}])", dynamic, hf, everyone, runs),
        ("ahead on MT-Bench ({} [{}, {}])", dynamic, hf, MT_BENCH, runs),
        ("ahead on HumanEval ({} [{}, {}]:", dynamic, hf, HUMANEVAL, runs),
    )
    greedy = _whole_set_runs(WHOLE_SETS, 0.0)
    quotes += (
        ("(dynamic ÷ HF {} [{}, {}] on MT-Bench,", dynamic, hf, MT_BENCH, greedy),
        ("{} [{}, {}] on HumanEval)", dynamic, hf, HUMANEVAL, greedy),
    )
    for pattern, a, b, prompts, rows in quotes:
        _check_paired(_quoted(text, pattern), rows, a, b, prompts)
    low, high, early_low, early_high = _quoted(
        text, "{}-{} of the 244 per method at T = 0.6, {}-{} of them within 8 tokens"
    )
    ended = [[p for p in r.values() if p["stopped_by_eos"]] for r in runs.values()]
    assert _ratio_range([len(e) for e in ended], low, high)
    assert _ratio_range([sum(p["tokens"] <= 8 for p in e) for e in ended], early_low, early_high)


UNROLL_HEAD = "results/whole_sets/qwen2.5-coder-bf16-unroll-head"


def _fused_head_break_even() -> tuple[float, float, float]:
    """Tokens a step at which a decoding step with the fused head's shape breaks even with autoregressive
    decoding on the H200: chain:4 and binary:3 captured, chain:4 fused by inductor (the card's measured
    steps over its AR step)."""
    decode = {
        (r["drafter"], r["tree"]): r["step_ms"]
        for r in _load("benchmarks/results/gpu_fast_drafter_decode_h200_1130.json")["drafter_decode"][:6]
    }
    fused = {
        (r["drafter"], r["tree"]): r["step_ms"]
        for r in _load("benchmarks/results/gpu_fast_drafter_fused_h200_1130.json")["drafter_fused"]
    }
    return (
        decode[("head-fused", "chain:4")] / decode[("none", "none")],
        decode[("head-fused", "binary:3")] / decode[("none", "none")],
        fused[("head-fused", "chain:4")] / fused[("none", "none")],
    )


def _at_measured_steps(head: dict, tree: str) -> tuple[float, ...]:
    """A head run's speedups at the card's measured steps: chain:4 on MT-Bench captured and fused, the same
    on HumanEval, then binary:3 ``tree`` on MT-Bench and HumanEval captured."""
    chain, binary, chain_fused = _fused_head_break_even()
    c4 = "chain:4/single"
    return (
        _rate(head, c4, MT_BENCH) / chain,
        _rate(head, c4, MT_BENCH) / chain_fused,
        _rate(head, c4, HUMANEVAL) / chain,
        _rate(head, c4, HUMANEVAL) / chain_fused,
        _rate(head, tree, MT_BENCH) / binary,
        _rate(head, tree, HUMANEVAL) / binary,
    )


def _predicted_b1(path: str, label: str, temperature: float) -> dict[tuple[str, str], float]:
    """{(set, method): predicted speedup at B = 1} of a whole-set run's speedups/ at ``temperature``."""
    rows = _load(f"{path}/speedups/speedups_{label}.json")["rows"]
    return {
        (r["dataset"], r["method"]): r["speedup"]
        for r in rows
        if r["temperature"] == temperature and r["batch"] == 1
    }


def test_the_unrolled_heads_whole_set_figures_are_its_files():
    """results/whole_sets/README.md's figures of the unrolled head's run at T = 0.6: tokens per target forward
    by set, the paired ratios against the 0.5B draft's run (same prompts and seeds) and within the run, and
    the predicted speedups on the H200's captured forwards (its speedups/ and the 0.5B draft's), and at the
    card's measured steps (gpu_fast_drafter_decode/_fused_h200_1130.json)."""
    text = _section((ROOT / "results/whole_sets/README.md").read_text(), "`qwen2.5-coder-bf16-unroll-head/`")
    head = _whole_set_runs(f"{UNROLL_HEAD}/batch_efficiency.json", 0.6)
    base = _whole_set_runs(WHOLE_SETS, 0.6)
    both = {f"head {m}": r for m, r in head.items()} | {f"0.5b {m}": r for m, r in base.items()}
    assert all(sorted(r) == list(range(244)) for r in head.values())
    names = {
        "chain:4": "chain:4/single",
        "RRS": "binary:3/rrs",
        "RRSw": "binary:3/rrsw",
        "SpecHub": "binary:3/spechub",
        "optimal": "binary:3/optimal",
        "dynamic": "dynamic:8,2,3,24/rrsw",
        "lookup": "chain:4/single+lookup",
    }
    mt = _quoted(
        text,
        "MT-Bench, all 80: chain:4 **{}**, binary:3 RRS {}, RRSw {}, SpecHub **{}**, optimal {}, the dynamic "
        "tree (RRSw) {}, chain:4 + lookup {}; prompt lookup alone {} (the 0.5B draft's run: head chain:4 ÷ "
        "lookup {} [{}, {}]). Head ÷ 0.5B draft, same method: chain:4 {} [{}, {}], SpecHub {} [{}, {}].",
    )
    for printed, method in zip(mt[:7], names.values(), strict=True):
        assert _agrees(printed, _rate(head, method, MT_BENCH)), (method, printed)
    assert _agrees(mt[7], _rate(base, "none/topk+lookup", MT_BENCH))
    he = _quoted(
        text,
        "HumanEval, all 164: chain:4 {}, RRS {}, RRSw {}, SpecHub {}, optimal {}, the dynamic tree {}; "
        "**chain:4 + lookup {} against prompt lookup alone {}: {} [{}, {}]**",
    )
    for printed, method in zip(he[:7], names.values(), strict=True):
        assert _agrees(printed, _rate(head, method, HUMANEVAL)), (method, printed)
    assert _agrees(he[7], _rate(base, "none/topk+lookup", HUMANEVAL))
    everyone = range(244)
    pairs = (
        (mt[8:11], "head chain:4/single", "0.5b none/topk+lookup", MT_BENCH),
        (mt[11:14], "head chain:4/single", "0.5b chain:4/single", MT_BENCH),
        (mt[14:17], "head binary:3/spechub", "0.5b binary:3/spechub", MT_BENCH),
        (he[8:11], "head chain:4/single+lookup", "0.5b none/topk+lookup", HUMANEVAL),
    )
    within = (
        ("RRS ÷ RRSw {} [{}, {}]", "rrs", "rrsw"),
        ("RRS ÷ SpecHub {} [{}, {}]", "rrs", "spechub"),
        ("RRSw ÷ SpecHub {} [{}, {}]", "rrsw", "spechub"),
        ("SpecHub ÷ optimal {} [{}, {}]", "spechub", "optimal"),
        ("(RRS ÷ optimal {} [{}, {}];", "rrs", "optimal"),
    )
    for pattern, a, b in within:
        quoted = _quoted(text, pattern)
        pairs += ((quoted, f"head binary:3/{a}", f"head binary:3/{b}", everyone),)
    quoted = _quoted(text, "(dynamic ÷ RRSw {} [{}, {}];")
    pairs += ((quoted, "head dynamic:8,2,3,24/rrsw", "head binary:3/rrsw", everyone),)
    for printed, a, b, prompts in pairs:
        _check_paired(printed, both, a, b, prompts)

    mine = _predicted_b1(UNROLL_HEAD, "h200-fused-head", 0.6)
    theirs = _predicted_b1("results/whole_sets/qwen2.5-coder-bf16", "h200-forwards", 0.6)
    printed = _quoted(
        text,
        "MT-Bench chain:4 **{}×**, RRS {}×, SpecHub **{}×**; HumanEval chain:4 {}×, RRS {}×, SpecHub {}×, "
        "chain:4 + lookup {}× autoregressive decoding, where the 0.5B draft's tokens per forward on the same "
        "captured target forwards (`qwen2.5-coder-bf16/speedups`) give MT-Bench chain:4 {}×, SpecHub {}× and "
        "HumanEval {}×, {}×.",
    )
    cells = [(mine, s, m) for s in ("mt-bench",) for m in ("chain:4", "RRS", "SpecHub")]
    cells += [(mine, "humaneval", m) for m in ("chain:4", "RRS", "SpecHub", "lookup")]
    cells += [(theirs, s, m) for s in ("mt-bench", "humaneval") for m in ("chain:4", "SpecHub")]
    for value, (rows, name, method) in zip(printed, cells, strict=True):
        assert _agrees(value, rows[(name, names[method])]), (name, method, value)
    chain, binary, chain_fused = _fused_head_break_even()
    printed = _quoted(
        text,
        "break even with autoregressive decoding at {} tokens a step captured for chain:4 and {} for "
        "binary:3, and at {} for chain:4 fused by inductor; at those, MT-Bench chain:4 runs at {}× captured "
        "and {}× fused, HumanEval chain:4 at {}× and {}×, SpecHub binary:3 at {}× and {}× captured.",
    )
    wanted = (chain, binary, chain_fused, *_at_measured_steps(head, "binary:3/spechub"))
    for value, want in zip(printed, wanted, strict=True):
        assert _agrees(value, want), (value, want)


def test_the_unrolled_heads_greedy_whole_set_figures_are_its_files():
    """results/whole_sets/README.md's figures of the unrolled head's run at T = 0: tokens per target forward
    by set, the paired ratios against the 0.5B draft's run and the head's own T = 0.6 run (same prompts and
    seeds), the predicted speedups on the H200's captured forwards and at the card's measured steps."""
    text = (ROOT / "results/whole_sets/README.md").read_text()
    text = text[text.index("The same head at T = 0 (") : text.index("## `qwen2.5-coder-bf16-fused")]
    greedy = f"{UNROLL_HEAD}-t0"
    head = _whole_set_runs(f"{greedy}/batch_efficiency.json", 0.0)
    base = _whole_set_runs(WHOLE_SETS, 0.0)
    sampled = _whole_set_runs(f"{UNROLL_HEAD}/batch_efficiency.json", 0.6)
    runs = {f"head {m}": r for m, r in head.items()} | {f"0.5b {m}": r for m, r in base.items()}
    runs |= {f"T=0.6 {m}": r for m, r in sampled.items()}
    assert all(sorted(r) == list(range(244)) for r in head.values())
    c4, b3, dyn, lookup = "chain:4/single", "binary:3/rrsw", "dynamic:8,2,3,24/rrsw", "chain:4/single+lookup"
    mt = _quoted(
        text,
        "MT-Bench, all 80: chain:4 **{}**, binary:3 **{}**, the dynamic tree {}, chain:4 + lookup {}; "
        "prompt lookup alone {} (head chain:4 ÷ lookup {} [{}, {}]). Head ÷ 0.5B draft, same method: "
        "chain:4 {} [{}, {}], binary:3 {} [{}, {}].",
    )
    he = _quoted(
        text,
        "HumanEval, all 164: chain:4 {}, binary:3 {}, the dynamic tree {}; **chain:4 + lookup {} against "
        "prompt lookup alone {}: {} [{}, {}]**",
    )
    for printed, prompts in ((mt, MT_BENCH), (he, HUMANEVAL)):
        for value, method in zip(printed[:4], (c4, b3, dyn, lookup), strict=True):
            assert _agrees(value, _rate(head, method, prompts)), (method, value)
    assert _agrees(mt[4], _rate(base, "none/topk+lookup", MT_BENCH))
    assert _agrees(he[4], _rate(base, "none/topk+lookup", HUMANEVAL))
    everyone = range(244)
    pairs = (
        (mt[5:8], f"head {c4}", "0.5b none/topk+lookup", MT_BENCH),
        (mt[8:11], f"head {c4}", f"0.5b {c4}", MT_BENCH),
        (mt[11:14], f"head {b3}", f"0.5b {b3}", MT_BENCH),
        (he[5:8], f"head {lookup}", "0.5b none/topk+lookup", HUMANEVAL),
    )
    vs_sampled = _quoted(text, "244 prompts, chain:4 {} [{}, {}], binary:3 RRSw {} [{}, {}].")
    pairs += (
        (vs_sampled[:3], f"head {c4}", f"T=0.6 {c4}", everyone),
        (vs_sampled[3:], f"head {b3}", f"T=0.6 {b3}", everyone),
        (_quoted(text, "binary:3 again ({} [{}, {}]);"), f"head {dyn}", f"head {b3}", everyone),
        (_quoted(text, "chain:4 ÷ binary:3 {} [{}, {}]."), f"head {c4}", f"head {b3}", everyone),
    )
    for printed, a, b, prompts in pairs:
        _check_paired(printed, runs, a, b, prompts)

    mine = _predicted_b1(greedy, "h200-fused-head", 0)
    theirs = _predicted_b1("results/whole_sets/qwen2.5-coder-bf16", "h200-forwards", 0)
    printed = _quoted(
        text,
        "MT-Bench chain:4 **{}×**, binary:3 **{}×**, the dynamic tree {}×; HumanEval chain:4 {}×, "
        "binary:3 {}×, chain:4 + lookup {}×, where the 0.5B draft's run gives MT-Bench chain:4 {}×, "
        "binary:3 {}× and HumanEval {}×, {}×, and prompt lookup alone on HumanEval {}×",
    )
    cells = [(mine, "mt-bench", m) for m in (c4, b3, dyn)] + [
        (mine, "humaneval", m) for m in (c4, b3, lookup)
    ]
    cells += [(theirs, s, m) for s in ("mt-bench", "humaneval") for m in (c4, b3)]
    cells += [(theirs, "humaneval", "none/topk+lookup")]
    for value, (rows, name, method) in zip(printed, cells, strict=True):
        assert _agrees(value, rows[(name, method)]), (name, method, value)
    chain, binary, chain_fused = _fused_head_break_even()
    printed = _quoted(
        text,
        "MT-Bench chain:4 runs at {}× captured and {}× fused, HumanEval chain:4 at {}× and {}×, "
        "binary:3 at {}× and {}× captured.",
    )
    wanted = _at_measured_steps(head, b3)
    for value, want in zip(printed, wanted, strict=True):
        assert _agrees(value, want), (value, want)


def test_the_readme_unrolled_head_bullet_is_the_files():
    """README's bullet on the trained head over the whole sets: tokens per target forward from the unrolled
    head's run, the head's captured cost from gpu_fast_drafters_h200_1130.json, and the predicted speedups
    from its speedups/ at B = 1."""
    head = _whole_set_runs(f"{UNROLL_HEAD}/batch_efficiency.json", 0.6)
    base = _whole_set_runs(WHOLE_SETS, 0.6)
    cost, mt_c4, mt_sh, he_c4, he_sh, he_lookup, lookup, *speedups = _quoted(
        README,
        "its forward {} of the target's on the H200), on the same whole sets at T = 0.6: MT-Bench chain:4 "
        "{} and binary:3 SpecHub {} tokens per target forward, HumanEval {} and {}, about half the 0.5B "
        "draft's, and with prompt lookup on HumanEval {} against lookup alone's {}. Yet on the H200's "
        "captured forwards at B = 1 they predict MT-Bench {}× and {}× autoregressive decoding, HumanEval "
        "{}× and {}×,",
    )
    fused = next(
        r
        for r in _load("benchmarks/results/gpu_fast_drafters_h200_1130.json")["fused_heads"]
        if r["model"] == "head-fused" and r["B"] == 1 and r["tokens"] == 1
    )
    assert _agrees(cost, fused["ratio_captured"])
    c4, sh = "chain:4/single", "binary:3/spechub"
    for printed, method, prompts in (
        (mt_c4, c4, MT_BENCH),
        (mt_sh, sh, MT_BENCH),
        (he_c4, c4, HUMANEVAL),
        (he_sh, sh, HUMANEVAL),
        (he_lookup, "chain:4/single+lookup", HUMANEVAL),
    ):
        assert _agrees(printed, _rate(head, method, prompts)), (method, printed)
        if method != "chain:4/single+lookup":
            assert 0.4 < _rate(head, method, prompts) / _rate(base, method, prompts) < 0.6  # about half
    assert _agrees(lookup, _rate(base, "none/topk+lookup", HUMANEVAL))
    rows = _predicted_b1(UNROLL_HEAD, "h200-fused-head", 0.6)
    cells = [(d, m) for d in ("mt-bench", "humaneval") for m in (c4, sh)]
    for printed, cell in zip(speedups, cells, strict=True):
        assert _agrees(printed, rows[cell]), (cell, printed)


def test_benchmarks_unrolled_head_bullet_is_the_files():
    """BENCHMARKS.md's Drafters bullet on the unrolled head over the whole sets: its run, paired with the
    0.5B draft's lookup, and its predicted speedups at B = 1."""
    head = _whole_set_runs(f"{UNROLL_HEAD}/batch_efficiency.json", 0.6)
    base = _whole_set_runs(WHOLE_SETS, 0.6)
    both = {f"head {m}": r for m, r in head.items()} | {f"0.5b {m}": r for m, r in base.items()}
    printed = _quoted(
        BENCHMARKS,
        "chain:4 + lookup {} tokens per target forward on HumanEval against lookup alone's {}, paired {} "
        "[{}, {}]. Alone it gives MT-Bench chain:4 {} and binary:3 SpecHub {}, HumanEval {} and {}: about "
        "half the 0.5B draft's. Predicted on the H200's captured forwards at B = 1 (forwards only) MT-Bench "
        "{}× and {}×, HumanEval {}× and {}×",
    )
    c4, sh, lookup = "chain:4/single", "binary:3/spechub", "chain:4/single+lookup"
    assert _agrees(printed[0], _rate(head, lookup, HUMANEVAL))
    assert _agrees(printed[1], _rate(base, "none/topk+lookup", HUMANEVAL))
    lo, _ = _check_paired(printed[2:5], both, f"head {lookup}", "0.5b none/topk+lookup", HUMANEVAL)
    assert lo > 1
    cells = [(m, prompts) for prompts in (MT_BENCH, HUMANEVAL) for m in (c4, sh)]
    for p, (method, prompts) in zip(printed[5:9], cells, strict=True):
        assert _agrees(p, _rate(head, method, prompts)), (method, p)
    rows = _predicted_b1(UNROLL_HEAD, "h200-fused-head", 0.6)
    cells = [(d, m) for d in ("mt-bench", "humaneval") for m in (c4, sh)]
    for p, cell in zip(printed[9:], cells, strict=True):
        assert _agrees(p, rows[cell]), (cell, p)


def test_the_readme_and_summary_whole_set_conclusions_are_the_file():
    """README's and BENCHMARKS.md Summary's whole-set conclusions, T = 0.6: HF assisted generation against
    the dynamic tree over all 244 prompts (paired) and by set, and the binary:3 verifiers, from
    results/whole_sets/qwen2.5-coder-bf16/batch_efficiency.json."""
    runs = _whole_set_runs(WHOLE_SETS, 0.6)
    everyone, dynamic, hf = range(244), "dynamic:8,2,3,24/rrsw", "hf-assisted"
    ratio, low, high, mt_dynamic, mt_hf, he_hf, he_dynamic = _quoted(
        README,
        "not separated (dynamic ÷ HF {} [{}, {}], paired, T = 0.6): the dynamic tree leads on MT-Bench ({} "
        "against {}), HF assisted on HumanEval ({} against {}).",
    )
    lo, hi = _check_paired((ratio, low, high), runs, dynamic, hf, everyone)
    assert lo < 1 < hi
    assert _agrees(mt_dynamic, _rate(runs, dynamic, MT_BENCH)) and _agrees(mt_hf, _rate(runs, hf, MT_BENCH))
    assert _agrees(he_hf, _rate(runs, hf, HUMANEVAL)) and _agrees(he_dynamic, _rate(runs, dynamic, HUMANEVAL))
    printed = _quoted(
        README,
        "tokens per target forward): SpecHub {}, RRSw {}, the i.i.d. optimum {}, RRS {}; paired over the {} "
        "prompts RRS ÷ optimal {} [{}, {}] and SpecHub ÷ optimal {} [{}, {}]",
    )
    for value, method in zip(printed[:4], ("spechub", "rrsw", "optimal", "rrs"), strict=True):
        assert _agrees(value, _rate(runs, f"binary:3/{method}", everyone)), method
    assert int(printed[4]) == len(everyone)
    for quoted, a in ((printed[5:8], "rrs"), (printed[8:11], "spechub")):
        _check_paired(quoted, runs, f"binary:3/{a}", "binary:3/optimal", everyone)

    count, hf_all, dynamic_all, ratio, low, high, he_hf, he_dynamic, mt_hf, mt_dynamic = _quoted(
        SUMMARY,
        "on the whole sets ({} prompts, bfloat16, `results/whole_sets`) HF assisted generation {} against "
        "the dynamic tree's {} at T = 0.6, not separated (paired {} [{}, {}]), {} against {} on HumanEval, "
        "{} against {} on MT-Bench",
    )
    assert int(count) == len(everyone)
    assert _agrees(hf_all, _rate(runs, hf, everyone)) and _agrees(dynamic_all, _rate(runs, dynamic, everyone))
    _check_paired((ratio, low, high), runs, dynamic, hf, everyone)
    assert _agrees(he_hf, _rate(runs, hf, HUMANEVAL)) and _agrees(he_dynamic, _rate(runs, dynamic, HUMANEVAL))
    assert _agrees(mt_hf, _rate(runs, hf, MT_BENCH)) and _agrees(mt_dynamic, _rate(runs, dynamic, MT_BENCH))


def _check_cpu_pair(rows: dict, greedy: str, rrsw: str, hf: str, heuristic: str, ar: str) -> None:
    """The dynamic trees and HF assisted generation in tokens per target forward, and autoregressive
    sampling the fastest in tokens/s, against batch_efficiency.json's rows {method: row} at one T."""
    for printed, method in (
        (greedy, "dynamic:8,2,3,24/greedy"),
        (rrsw, "dynamic:8,2,3,24/rrsw"),
        (hf, "hf-assisted"),
        (heuristic, "hf-assisted-heuristic"),
    ):
        r = rows[method]
        assert _agrees(printed, r["tokens"] / r["target_forwards"]), (method, printed)
    rows = dict(rows)
    fastest = rows.pop("hf-autoregressive")["tokens_per_second"]
    assert _agrees(ar, fastest) and all(r["tokens_per_second"] < fastest for r in rows.values())


# BENCHMARKS.md's section on the H200 session of 2026-11-30
TRAINED = BENCHMARKS.split("### The trained drafters' shapes, and a head trained on the card")[1].split(
    "### "
)[0]


@pytest.mark.parametrize(
    ("label", "model"),
    [
        ("head, final state", "head"),
        ("**head, layers 1, 13, 24 fused**", "head-fused"),
        ("small drafter, 4 × 512", "small"),
    ],
)
def test_the_trained_drafters_forwards_are_the_sessions_file(label, model):
    """The forwards table: multiply-adds ratio, then captured (ms and ratio) and fused at B = 1, t = 1, and
    captured ratios at B = 1, t = 16 and B = 64, t = 1, from gpu_fast_drafters_h200_1130.json."""
    rows = {
        (r["B"], r["tokens"]): r
        for r in _load("benchmarks/results/gpu_fast_drafters_h200_1130.json")["fused_heads"]
        if r["model"] == model
    }
    line = next(line for line in TRAINED.splitlines() if line.startswith(f"| {label} |"))
    macs, ms, captured, fused_ms, fused, *rest = re.findall(r"\d+\.\d+", line)
    one = rows[(1, 1)]
    assert _agrees(macs, one["macs_ratio"]) and _agrees(ms, one["captured_ms"])
    assert _agrees(captured, one["ratio_captured"]) and _agrees(fused_ms, one["fused_ms"])
    assert _agrees(fused, one["ratio_fused"])
    for (ms_, ratio), shape in zip(zip(rest[::2], rest[1::2], strict=True), ((1, 16), (64, 1)), strict=True):
        assert _agrees(ms_, rows[shape]["captured_ms"]) and _agrees(ratio, rows[shape]["ratio_captured"])


def test_the_fused_heads_cost_row_is_the_file():
    """The fused head's row of drafter_cost.json as the forwards table's bullet states it."""
    kernels, gbytes, predicted, measured = _quoted(
        TRAINED,
        "(`fused3:4096:16384`, git bfb7f52: {} kernels, {} GB read, predicted {} by the kernels-and-"
        "bytes fit, measured {})",
    )
    row = next(
        r for r in _load("benchmarks/results/drafter_cost.json")["rows"] if r["model"] == "fused3:4096:16384"
    )
    assert int(kernels) == row["kernels"] and _agrees(gbytes, row["gbytes"])
    assert _agrees(predicted, row["predicted_ratio"]) and _agrees(measured, row["measured_ratio"])


def test_the_trained_drafters_steps_and_training_rates_are_the_sessions_files():
    """The steps table (ms and break-even: step ÷ the AR step of the same path and B) from
    gpu_fast_drafter_decode_h200_1130.json and gpu_fast_drafter_fused_h200_1130.json; the training table
    from gpu_train_h200_1130.json, whose check decoded losslessly on both paths."""
    captured = {
        (r["tree"], r["drafter"], r["batch"]): r["step_ms"]
        for r in _load("benchmarks/results/gpu_fast_drafter_decode_h200_1130.json")["drafter_decode"]
    }
    fused = {
        (r["tree"], r["drafter"]): r["step_ms"]
        for r in _load("benchmarks/results/gpu_fast_drafter_fused_h200_1130.json")["drafter_fused"]
    }
    labels = {
        "autoregressive": ("none", "none"),
        "chain:4, head (final state)": ("chain:4", "head"),
        "chain:4, head (fused features)": ("chain:4", "head-fused"),
        "chain:4, small drafter": ("chain:4", "small"),
        "binary:3, head (fused features)": ("binary:3", "head-fused"),
        "binary:3, small drafter": ("binary:3", "small"),
    }
    for label, key in labels.items():
        line = next(line for line in TRAINED.splitlines() if line.startswith(f"| {label} |"))
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")[1:]]
        columns = [(captured, (*key, 1), captured[("none", "none", 1)])]
        columns += [(fused, key, fused[("none", "none")])]
        columns += [(captured, (*key, 64), captured[("none", "none", 64)])]
        for (table, at, ar), ms, even in zip(columns, cells[::2], cells[1::2], strict=True):
            assert (ms == "") == (at not in table), (label, at)
            if ms:
                assert _agrees(ms, table[at]) and _agrees(even, table[at] / ar), (label, at, ms, even)
    train = _load("benchmarks/results/gpu_train_h200_1130.json")
    assert all(
        r["greedy_equal_eager_fast"] == [True, True] and r["head_device"] == "cuda:0" for r in train["check"]
    )
    names = {
        "final state, `kl`": ("final", "kl", 2048),
        "layers 1, 13, 24 fused, `kl`": ("fused", "kl", 2048),
    }
    names |= {"fused, `alpha` (k = 4)": ("fused", "alpha", 2048)}
    names |= {"fused, `kl`, 16,384 positions a step": ("fused", "kl", 16384)}
    rates = {(r["features"], r["loss"], r["batch_tokens"]): r for r in train["rate"]}
    for label, key in names.items():
        seconds, per_second = _quoted(TRAINED, f"| {label} | {{}} | {{}} |")
        assert _agrees(seconds, rates[key]["seconds_per_step"]) and _agrees(
            per_second, rates[key]["tokens_per_second"]
        )
    low, high = _quoted(SUMMARY, "a head trains on the card at {}–{} positions a second")
    per_second = [r["tokens_per_second"] for r in rates.values()]
    assert _agrees(low, min(per_second)) and _agrees(high, max(per_second))
    fused_head, fused_ratio = _quoted(SUMMARY, "a head reading three layers fused (EAGLE-3) {} / {};")
    (one,) = [
        r
        for r in _load("benchmarks/results/gpu_fast_drafters_h200_1130.json")["fused_heads"]
        if r["model"] == "head-fused" and (r["B"], r["tokens"]) == (1, 1)
    ]
    assert _agrees(fused_head, one["ratio_captured"]) and _agrees(fused_ratio, one["ratio_fused"])
    evens = sorted(fused[("chain:4", d)] / fused[("none", "none")] for d in ("head-fused", "small"))
    for text, bold in ((SUMMARY, "**"), (TRAINED, "")):
        low, high = _quoted(text, f"breaks even at {bold}{{}}–{{}} tokens per step")
        assert _agrees(low, evens[0]) and _agrees(high, evens[1])


def test_the_fused_corpus_head_is_the_files():
    """results/drafters/README.md's corpus-fused-kl section: the table's cells and the paired differences
    from heldout-fused-kl/drafters.json, the learning curves' points from both heads' training.json, and
    the README's sentence on it."""
    text, data, rows, by_set = _drafters_section("corpus-fused-kl", "corpus-bf16-kl", "heldout-fused-kl")
    for label, drafter in (
        ("head, final state (`corpus-bf16-kl`)", "corpus-bf16-kl"),
        ("**head, layers 1, 13, 24 fused**", "corpus-fused-kl"),
        ("0.5B draft", "draft-0.5b"),
    ):
        (line,) = [x for x in text.splitlines() if x.startswith(f"  | {label} |")]
        r = rows[drafter]
        expected = [r["acceptance"], r["acceptance_low"], r["acceptance_high"]]
        expected += [r["alpha_4"], r["alpha_4_low"], r["alpha_4_high"]]
        expected += [by_set[(drafter, s)]["acceptance"] for s in ("chat-train", "code-train")]
        expected += [r["gpu_captured_ratio"]]
        numbers = re.findall(NUMBER, line.replace(label, ""))
        assert len(numbers) == len(expected), line
        for number, value in zip(numbers, expected, strict=True):
            assert _agrees(number, value), (label, number, value)
    pairs = {
        r["measure"]: r for r in data["pairs"] if (r["a"], r["b"]) == ("corpus-bf16-kl", "corpus-fused-kl")
    }
    quoted = _quoted(
        text, "Fused minus final: **+{} [{}, {}]** in single-draft acceptance, +{} [{}, {}] in α*_4"
    )
    expected = [-pairs[m][k] for m in ("acceptance", "alpha_4") for k in ("difference", "high", "low")]
    assert all(_agrees(p, v) for p, v in zip(quoted, expected, strict=True)), (quoted, expected)
    code, chat = _quoted(text, "most of it on code (+{}) and +{} on chat")
    for printed, s in ((code, "code-train"), (chat, "chat-train")):
        gain = by_set[("corpus-fused-kl", s)]["acceptance"] - by_set[("corpus-bf16-kl", s)]["acceptance"]
        assert _agrees(printed, gain)
    before, after = _quoted(text, "The gap to the 0.5B draft narrows from {} to {}.")
    for printed, head in ((before, "corpus-bf16-kl"), (after, "corpus-fused-kl")):
        assert _agrees(printed, rows["draft-0.5b"]["acceptance"] - rows[head]["acceptance"])
    curves = {k: _load(f"results/drafters/corpus-{k}-kl/training.json")["curve"] for k in ("fused", "bf16")}
    fused = _quoted(text, "acceptance {} after 205k positions seen, {} (819k), {} (1.64 M), **{}** (2.46 M)")
    final = _quoted(text, "against the final-state head's {}, {}, {}, **{}**;")
    for printed, kind in ((fused, "fused"), (final, "bf16")):
        at = {p["step"]: p["acceptance"] for p in curves[kind]}
        assert all(_agrees(p, at[s]) for p, s in zip(printed, (100, 400, 800, 1200), strict=True))
    a4, b4 = _quoted(text, "α*_4\n  {} against {};")
    assert _agrees(a4, curves["fused"][-1]["alpha_4"]) and _agrees(b4, curves["bf16"][-1]["alpha_4"])
    less, low, high, final_a, fused_a = _quoted(
        README,
        "it accepts 0.046 less\n[{}, {}] at the corpus's held-out answer positions ({} against {})".replace(
            "0.046", "{}"
        ),
    )
    pair = pairs["acceptance"]
    for printed, value in (
        (less, -pair["difference"]),
        (low, -pair["high"]),
        (high, -pair["low"]),
        (final_a, rows["corpus-bf16-kl"]["acceptance"]),
        (fused_a, rows["corpus-fused-kl"]["acceptance"]),
    ):
        assert _agrees(printed, value), (printed, value)
    (rate,) = _quoted(README, "an H200 trains this head at about {} positions a second")
    (row,) = [
        r
        for r in _load("benchmarks/results/gpu_train_h200_1130.json")["rate"]
        if (r["features"], r["loss"], r["batch_tokens"]) == ("fused", "kl", 2048)
    ]
    assert _agrees(rate, row["tokens_per_second"])


def test_the_fused_heads_answers_table_is_the_file():
    """results/drafters/README.md's table along the target's answers: results/drafters/answers-fused-kl/
    specialised_drafters.json (the fused head's cells with intervals, the others' means), and the paired
    chain:1 ratios."""
    text = (ROOT / "results/drafters/README.md").read_text()
    text = text[text.index("## `corpus-fused-kl/`") : text.index("## `corpus-bf16-kl/`")]
    data = _load("results/drafters/answers-fused-kl/specialised_drafters.json")
    rows = {(r["drafter"], r["set"]): r for r in data["rows"]}
    for label, key in (
        ("Σ min(p, q), T = 1", "acceptance"),
        ("α*_4, T = 1", "alpha_4"),
        ("greedy agreement", "agree"),
        ("greedy chain:1, tokens per forward", "greedy_chain1"),
    ):
        (line,) = [x for x in text.splitlines() if x.startswith(f"  | {label} |")]
        numbers = re.findall(r"\d+\.\d+", line.replace(label, ""))
        expected = []
        for s in ("humaneval", "mt-bench"):
            fused = rows[("corpus-fused-kl", s)]
            expected += [fused[key], *fused[f"{key}_ci95"]]
            expected += [rows[(d, s)][key] for d in ("corpus-bf16-kl", "draft-0.5b")]
        assert len(numbers) == len(expected), line
        for number, value in zip(numbers, expected, strict=True):
            assert _agrees(number, value), (label, number, value)
    pairs = {p["set"]: p for p in data["pairs"] if (p["a"], p["b"]) == ("corpus-bf16-kl", "corpus-fused-kl")}
    quoted = _quoted(text, "is {} [{}, {}] on HumanEval and {} [{}, {}] on MT-Bench")
    expected = [
        v for s in ("humaneval", "mt-bench") for v in (pairs[s]["greedy_chain1_ratio"], *pairs[s]["ci95"])
    ]
    assert all(_agrees(p, v) for p, v in zip(quoted, expected, strict=True)), (quoted, expected)
    (mt,) = _quoted(text, "against this head's {} on MT-Bench")
    assert _agrees(mt, rows[("corpus-fused-kl", "mt-bench")]["acceptance"])


def test_benchmarks_fused_corpus_head_is_the_files():
    """BENCHMARKS.md's Drafters paragraph on the fused corpus head: heldout-fused-kl/drafters.json and
    answers-fused-kl/specialised_drafters.json."""
    fused, final, diff, low, high, he_fused, he_final, mt_fused, mt_final, ratio, ratio_final = _quoted(
        BENCHMARKS,
        "give {} against {} at all 19,690 held-out answer positions (paired +{} [{}, {}]), and along the "
        "target's own answers {} against {} on HumanEval and {} against {} on MT-Bench (32 prompts each). "
        "Its forward costs {} of the target's captured, against {}",
    )
    data = _load("results/drafters/heldout-fused-kl/drafters.json")
    rows = {r["drafter"]: r for r in data["rows"]}
    (pair,) = [
        p
        for p in data["pairs"]
        if (p["a"], p["b"], p["measure"]) == ("corpus-bf16-kl", "corpus-fused-kl", "acceptance")
    ]
    answers = {
        (r["drafter"], r["set"]): r["acceptance"]
        for r in _load("results/drafters/answers-fused-kl/specialised_drafters.json")["rows"]
    }
    for printed, value in (
        (fused, rows["corpus-fused-kl"]["acceptance"]),
        (final, rows["corpus-bf16-kl"]["acceptance"]),
        (diff, -pair["difference"]),
        (low, -pair["high"]),
        (high, -pair["low"]),
        (he_fused, answers[("corpus-fused-kl", "humaneval")]),
        (he_final, answers[("corpus-bf16-kl", "humaneval")]),
        (mt_fused, answers[("corpus-fused-kl", "mt-bench")]),
        (mt_final, answers[("corpus-bf16-kl", "mt-bench")]),
        (ratio, rows["corpus-fused-kl"]["gpu_captured_ratio"]),
        (ratio_final, rows["corpus-bf16-kl"]["gpu_captured_ratio"]),
    ):
        assert _agrees(printed, value), (printed, value)


def test_the_unrolled_heads_depths_and_decoding_are_the_files():
    """results/drafters/README.md's unroll-fused-kl section: the depth table and the depth-2 sentence from
    the runs' by_depth rows, the depth-1 cost from the pairs, chain:4 from the paired runs."""
    text = (ROOT / "results/drafters/README.md").read_text()
    text = text[text.index("## `unroll-fused-kl/`") : text.index("## `corpus-bf16-kl/`")]
    data = _load("results/drafters/unroll-fused-kl/drafters.json")
    depth = {(r["drafter"], r["depth"]): r for r in data["by_depth"]}
    for d in (1, 2, 3, 4):
        (line,) = [x for x in text.splitlines() if x.startswith(f"| {d} |")]
        numbers = re.findall(r"\d+\.\d+", line)
        expected = [
            v
            for head in ("corpus-fused-kl", "corpus-fused-kl-unroll3")
            for r in [depth[(head, d)]]
            for v in (r["acceptance"], r["acceptance_low"], r["acceptance_high"])
        ]
        assert len(numbers) == 6 and all(_agrees(n, v) for n, v in zip(numbers, expected, strict=True)), line
    before = {
        (r["drafter"], r["depth"]): r
        for r in _load("results/drafters/heldout-fused-kl/drafters.json")["by_depth"]
    }
    one_final, one_fused, two_final, two_fused = _quoted(
        text, "falls from {} / {} at depth 1 to **{} / {} at depth 2**"
    )
    for printed, key in (
        (one_final, ("corpus-bf16-kl", 1)),
        (one_fused, ("corpus-fused-kl", 1)),
        (two_final, ("corpus-bf16-kl", 2)),
        (two_fused, ("corpus-fused-kl", 2)),
    ):
        assert _agrees(printed, before[key]["acceptance"]), (printed, key)
    (pair,) = [
        p
        for p in data["pairs"]
        if (p["a"], p["b"], p["measure"]) == ("corpus-fused-kl", "corpus-fused-kl-unroll3", "acceptance")
    ]
    cost = _quoted(text, "Depth 1 costs {} [{}, {}] (paired)")
    assert all(_agrees(c, pair[k]) for c, k in zip(cost, ("difference", "low", "high"), strict=True))
    runs = {
        r["prompt_set"]: r for r in _load("results/drafters/unroll-fused-kl/paired/paired_runs.json")["rows"]
    }
    quoted = _quoted(text, "chain:4 **{} against {}**\ntokens per target forward, paired {} [{}, {}]")
    quoted += _quoted(
        text, "on HumanEval {} against {} ({} [{},\n{}]), on MT-Bench {} against {} ({} [{}, {}])"
    )
    expected = [
        v
        for name in ("all", "humaneval", "mt-bench")
        for v in (
            runs[name]["tokens_per_forward_a"],
            runs[name]["tokens_per_forward_b"],
            runs[name]["ratio"],
            *runs[name]["ci95"],
        )
    ]
    assert all(_agrees(q, v) for q, v in zip(quoted, expected, strict=True)), (quoted, expected)
    two, three, cost_1, ratio, low, high, humaneval = _quoted(
        BENCHMARKS,
        "keeps {} at depth 2 and {} at depth 3 ({} less at depth 1), and decodes chain:4 at {}× [{}, {}] "
        "the fused head's tokens per target forward on 32 prompts, {}× on HumanEval",
    )
    for printed, value in (
        (two, depth[("corpus-fused-kl-unroll3", 2)]["acceptance"]),
        (three, depth[("corpus-fused-kl-unroll3", 3)]["acceptance"]),
        (cost_1, pair["difference"]),
        (ratio, runs["all"]["ratio"]),
        (low, runs["all"]["ci95"][0]),
        (high, runs["all"]["ci95"][1]),
        (humaneval, runs["humaneval"]["ratio"]),
    ):
        assert _agrees(printed, value), (printed, value)
