"""Headline figures of README.md and BENCHMARKS.md against the results files they are read from.

Each test reads the figure from the document's text and recomputes it from its file, and the two must agree at
the precision the document prints (``5.1`` matches 5.1497; ``5.2`` does not): a change of either, or a figure
rounded twice, fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BENCHMARKS = (ROOT / "BENCHMARKS.md").read_text()
NUMBER = r"(\d+(?:\.\d+)?(?:e-?\d+)?)"


def _load(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def _quoted(text: str, pattern: str) -> tuple[str, ...]:
    """The numbers ``pattern`` captures in ``text`` (its spaces match any run of white space, line breaks
    included); exactly one match."""
    regex = re.escape(pattern).replace(r"\ ", r"\s+").replace(re.escape("{}"), NUMBER)
    found = re.findall(regex, text)
    assert len(found) == 1, f"{pattern!r} found {len(found)} times"
    return found[0] if isinstance(found[0], tuple) else (found[0],)


def _agrees(printed: str, value: float) -> bool:
    """``value`` rounded to ``printed``'s decimals is ``printed`` (``4.6e-6``: in scientific notation)."""
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


def test_the_readme_and_summary_speedups_on_the_forwards_are_the_files():
    """The README's and BENCHMARKS.md's summary: prompt lookup 4.77× on HumanEval (2.94× on 10 prompts),
    source first 2.18–2.41× (4 × 64 and 10 × 64)."""
    for text in (README, BENCHMARKS):
        low, high = _quoted(text, "source first {}–{}×;")
        assert _agrees(low, _speedup("source_first", "chain:4/single/first+lookup"))
        assert _agrees(high, _speedup("source_first_humaneval", "chain:4/single/first+lookup"))
    (lookup,) = _quoted(README, "prompt lookup on HumanEval {}× autoregressive decoding")
    (ten,) = _quoted(README, "({}× on 10 prompts)")
    assert _agrees(lookup, _speedup("draft_sources", "none/topk+lookup"))
    assert _agrees(ten, _speedup("source_first_humaneval", "none/topk+lookup"))


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
    for text in (README, BENCHMARKS):
        (printed,) = _quoted(text, "model-only trees at most {}× (binary:3 RRSw on HumanEval)")
        assert _agrees(printed, best["speedup"])
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


@pytest.mark.parametrize(
    "title, key",
    [
        ("Greedy agreement with the target (T = 0)", "agree"),
        ("Predicted speedup of greedy chain:1", "greedy_chain1_speedup"),
    ],
)
def test_the_language_matrix_tables_are_the_file(title, key):
    """results/specialised_drafters/README.md's matrix tables: every cell is its row's figure in
    matrix/specialised_drafters.json at the printed precision, bold exactly on the drafter's own language."""
    text = (ROOT / "results/specialised_drafters/README.md").read_text()
    rows = _load("results/specialised_drafters/matrix/specialised_drafters.json")["rows"]
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


def test_the_sampled_drafters_table_is_the_file():
    """results/specialised_drafters/README.md's sampled chain:1 table: every cell is its row's tokens per
    target forward and interval in sampled/sampled_drafters.json, bold exactly on the drafter's own language,
    a dash where the file has no row."""
    text = (ROOT / "results/specialised_drafters/README.md").read_text()
    rows = _load("results/specialised_drafters/sampled/sampled_drafters.json")["rows"]
    cell = {(r["drafter"], r["set"]): r for r in rows if r["method"] == "chain:1/single"}
    table = text.split("Tokens per target forward, chain:1, T = 1")[1].split("\n\n")[1].splitlines()
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
    for printed, folder in (
        (corpus, "real_acceptance_optimal"),
        (full, "real_acceptance_full_vocab_optimal"),
    ):
        rows = _load(f"results/{folder}/real_acceptance.json")["rows"]
        gaps = [abs(r["gap_to_own_optimum"]) for r in rows if r["name"] == "optimal"]
        assert len(gaps) == 24 and _agrees(printed, max(gaps)), (folder, printed, max(gaps))
    mean = {
        r["name"]: r["mean"]
        for r in _load("results/real_acceptance_full_vocab_optimal/real_acceptance.json")["rows"]
        if (r["temperature"], r["k"], r["kind"]) == (1.0, 8, "verifier")
    }
    for printed, name in ((rrs, "rrs"), (kseq, "kseq"), (optimal, "optimal")):
        assert _agrees(printed, mean[name]), (name, printed, mean[name])


def test_the_readme_luce_rules_gaps_are_the_files():
    """README's Luce rule against α*_wor: results/optimal_wor_gap_luce/optimal_wor_gap.json (corpus: the
    range of the per-(T, k) mean gaps, the worst pair) and results/optimal_wor_gap_luce_full_vocab (the
    worst of its cases)."""
    low, high, worst, full_worst, cases = _quoted(
        README,
        "the Luce rule sits {}–{} below α*_wor on average on the corpus (worst {}), {} at worst over {} "
        "full-vocabulary cases;",
    )
    rows = _load("results/optimal_wor_gap_luce/optimal_wor_gap.json")["rows"]
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["temperature"], r["k"]), []).append(r["alpha_wor"] - r["luce"])
    means = [sum(g) / len(g) for g in groups.values()]
    assert _agrees(low, min(means)) and _agrees(high, max(means)), (min(means), max(means))
    assert _agrees(worst, max(max(g) for g in groups.values()))
    full = _load("results/optimal_wor_gap_luce_full_vocab/optimal_wor_gap.json")["rows"]
    assert int(cases) == len(full)
    assert _agrees(full_worst, max(r["alpha_wor"] - r["luce"] for r in full))


def test_the_readme_luce_rules_node_times_are_the_file():
    """README's and BENCHMARKS' Luce rule a node, median (and worst) over 8 recorded positions:
    benchmarks/results/luce_recorded.json."""
    median = _load("benchmarks/results/luce_recorded.json")["summary"]["luce_s_per_node"]
    printed = _quoted(
        README, "a median {} s at k = 2 (its law in closed form), {} s at k = 3 and {} s at k = 4"
    )
    for k, figure in zip("234", printed, strict=True):
        assert median[k]["pairs"] == 8 and _agrees(figure, median[k]["median"]), k
    short = _quoted(BENCHMARKS, "**a median {} s at k = 2**")
    short += _quoted(BENCHMARKS, "**{} s at k = 3 and {} s at k = 4** (worst {} / {} / {} s;")
    for k, middle, worst in zip("234", short[:3], short[3:], strict=True):
        assert _agrees(middle, median[k]["median"]) and _agrees(worst, median[k]["max"]), k


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
    for printed, method in (
        (greedy, "dynamic:8,2,3,24/greedy"),
        (rrsw, "dynamic:8,2,3,24/rrsw"),
        (hf, "hf-assisted"),
        (heuristic, "hf-assisted-heuristic"),
    ):
        r = rows[method]
        assert _agrees(printed, r["tokens"] / r["target_forwards"]), (method, printed)
    fastest = rows.pop("hf-autoregressive")["tokens_per_second"]
    assert _agrees(ar, fastest) and all(r["tokens_per_second"] < fastest for r in rows.values())
