"""Check SpecHub's and Hu et al.'s claims on many random (p, q) pairs; nothing is assumed true.

Claims (docs/mathematics.md §1-§3), each checked on every pair of its part, counter-examples kept:

A. on small vocabularies (n = 2..5; exact LPs and enumeration):
   1. "LP = OTM": the simplified LP, max-flow and the min-cut dual give the same optimum, and so does
      the full coupling LP (slow: on every ``coupling_every``-th pair), for the i.i.d.,
      without-replacement, hub-pair and greedy laws (k = 2, 3; hub k = 2).
   2. losslessness: the exact output law of SpecHub, RRS and RRSw (written here from docs/mathematics.md §3,
      independently of mdsd.verifiers, and enumerated over every draft tuple) equals p; and the
      acceptance it implies equals mdsd's exact ``acceptance``.
   3. the hub is emitted with probability p(hub), and SpecHub's enumerated acceptance equals its closed
      form, mdsd's exact acceptance, and the optimum of the hub-pair law.
B. on larger vocabularies (n = 10, 50; exact closed forms and duals):
   4. how often, and when, SpecHub beats RRS, RRSw and the optimum of i.i.d. drafts (k = 2);
   5. K-SEQ reaches at least (1 - 1/e) of the i.i.d. optimum (k = 2, 3, 4);
   6. the optimum without replacement is at least the i.i.d. optimum (k = 2, 3, 4);
   7. the optimal verifier's exact acceptance equals its law's optimum and is at least every verifier of
      that law: i.i.d. (RRS, K-SEQ; k = 2, 3, 4), and without replacement (RRSw; k = 2, n = 10, where
      its rule is an exact flow).
Pairs: toy pairs (mdsd.toy_pair) over a grid of temperatures and similarities, and independent
symmetric-Dirichlet pairs (mdsd.dirichlet_pair) of several concentrations.

Writes results/theorems/: theorems.json/.csv (one row per claim and source), theorems.md, and plots.

    python experiments/theorems.py --output-dir results/theorems   # 4,000 pairs in part A, 10,000 in B
    python experiments/theorems.py --quick    # a handful of pairs, for a smoke test

The work is one task per (part, source, n), each drawing its pairs from its own seed (derived from
--seed), run by :func:`mdsd.harness.sweep.run_tasks`: in this process by default, on Ray with --ray (a Ray
instance on this machine) or --ray ADDRESS (a cluster: `ray start --head` on one node, `ray start
--address HEAD:6379` on the others, then --ray auto on the head); pip install -e ".[ray]" first.
Finished tasks are kept in results/theorems/theorems.<hash>.tasks.jsonl until the run completes; after
an interruption or a failed task, --resume continues from them. Either way the files are the same.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

import mdsd
from mdsd.harness.experiment import config_from_cli, output_dir, partial_results, run_script, write_results
from mdsd.harness.sweep import run_tasks

TOL = 1e-8  # two exact computations "agree" when they differ by at most this


@dataclass(frozen=True)
class Config:
    """SpecHub's theorems, checked on random pairs."""

    small_n: tuple[int, ...] = field(default=(2, 3, 4, 5), metadata={"help": "vocabularies of part A"})
    large_n: tuple[int, ...] = field(default=(10, 50), metadata={"help": "vocabularies of part B"})
    temperatures: tuple[float, ...] = field(default=(0.1, 0.25, 0.5, 1.0), metadata={"help": "toy T"})
    similarities: tuple[float, ...] = field(default=(0.3, 0.5, 0.7, 0.9), metadata={"help": "toy s"})
    concentrations: tuple[float, ...] = field(
        default=(0.1, 0.5, 1.0, 5.0), metadata={"help": "Dirichlet concentrations c"}
    )
    pairs_a: int = field(default=50, metadata={"help": "pairs per (source, n) in part A"})
    coupling_every: int = field(default=10, metadata={"help": "part A: full coupling LP on every m-th pair"})
    pairs_b: int = field(default=250, metadata={"help": "pairs per (source, n) in part B"})
    seed: int = field(default=0, metadata={"help": "seed of all pairs"})
    quick: bool = field(
        default=False, metadata={"help": "smoke test: 1 pair per n, one toy and one Dirichlet source"}
    )
    output_dir: str = mdsd.harness.experiment.output_dir_field()
    ray: str = mdsd.harness.experiment.ray_field()
    resume: bool = mdsd.harness.experiment.resume_field()


def sources(config: Config) -> list[tuple[str, list]]:
    """(label, spec): spec is ["toy", T, s] or ["dirichlet", c], drawn by :func:`draw`."""
    out = [
        (f"toy T={t:g} s={s:g}", ["toy", t, s])
        for t, s in itertools.product(config.temperatures, config.similarities)
    ]
    return out + [(f"dirichlet c={c:g}", ["dirichlet", c]) for c in config.concentrations]


def draw(spec: list, n: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` pairs (p, q) of the source ``spec`` over n tokens, as float64 numpy [count, n]."""
    generator = torch.Generator().manual_seed(seed)
    if spec[0] == "toy":
        p, q = mdsd.toy_pair(n, spec[1], spec[2], generator, batch=count)
    else:
        p, q = mdsd.dirichlet_pair(n, spec[1], generator, batch=count)
    return p.numpy(), q.numpy()


def task_seed(seed: int, part: str, source: int, n: int) -> int:
    """The seed of one task's pairs: independent streams per (part, source, n), all from ``seed``."""
    return int(np.random.SeedSequence([seed, ord(part), source, n]).generate_state(1)[0])


# ---- exact output laws, from docs/mathematics.md §3 (independent of mdsd.verifiers) ------------------------


def _ratio(num: float, den: float) -> float:
    """min(1, num / den), with 0/0 = 0 (the branch is then never reached)."""
    return min(1.0, num / den) if den > 0 else (1.0 if num > 0 else 0.0)


def _norm(v: np.ndarray) -> np.ndarray:
    total = v.sum()
    return v / total if total > 0 else np.zeros_like(v)  # an empty residual shows up as lost mass


def spechub_law(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
    """SpecHub's exact output law and acceptance, summed over every hub pair."""
    n = p.size
    a = int(mdsd.laws.ranked(q)[0])
    others = np.arange(n) != a
    rest = q[others].sum()  # 1 − q_a, summed so that it does not cancel to 0 for near-one-hot q
    qa_pair = np.where(others, q[a] * q / rest, 0.0)  # Q(a, j)
    s_ia = np.sum(np.maximum(q - p, 0)[others])
    s_ai = np.sum(np.maximum(qa_pair - np.maximum(p - q, 0), 0)[others])
    residual = np.where(others, np.maximum(np.maximum(p - q, 0) - qa_pair, 0), 0.0)
    residual[a] = max(max(p[a] - s_ai, 0) - s_ia, 0)
    residual = _norm(residual)
    law, accepted = np.zeros(n), 0.0
    for (x1, x2), w in mdsd.Hub().joint(q).items():
        out = np.zeros(n)
        if x2 == a:  # pair (i, a)
            i = x1
            first = _ratio(p[i], q[i])
            second = (1 - first) * _ratio(max(p[a] - s_ai, 0), s_ia)
        else:  # pair (a, i)
            i = x2
            first = _ratio(max(p[i] - q[i], 0), qa_pair[i])
            second = (1 - first) * _ratio(p[a], s_ai)
        out[i] += first
        out[a] += second
        out += (1 - first - second) * residual
        law += w * out
        accepted += w * (out[i] + out[a])
    return law, accepted


def rrs_law(p: np.ndarray, q: np.ndarray, k: int, without_replacement: bool) -> tuple[np.ndarray, float]:
    """RRS (i.i.d. drafts) or RRSw (drafts without replacement): exact output law and acceptance."""
    law_of_drafts = mdsd.WithoutReplacement(k) if without_replacement else mdsd.IID(k)
    n = p.size
    law, accepted = np.zeros(n), 0.0
    for drafts, w in law_of_drafts.joint(q).items():
        out, stay = np.zeros(n), 1.0  # stay = P(all drafts so far rejected)
        pi, qi = p.copy(), q.copy()
        for x in drafts:
            take = _ratio(pi[x], qi[x])
            out[x] += stay * take
            stay *= 1 - take
            pi = _norm(np.maximum(pi - qi, 0))
            if without_replacement:
                qi = qi.copy()
                qi[x] = 0
                qi = _norm(qi)
        out += stay * pi
        law += w * out
        accepted += w * out[list(set(drafts))].sum()
    return law, accepted


# ---- the checks -------------------------------------------------------------------------------------------


class Claim:
    """Counts the pairs a claim was checked on and keeps its counter-examples (the smallest first)."""

    def __init__(self, name: str) -> None:
        self.name, self.checked, self.failures, self.worst, self.errors = name, 0, [], 0.0, 0

    def check(self, ok: bool, excess: float, source: str, p: np.ndarray, q: np.ndarray, detail: str) -> None:
        self.checked += 1
        self.worst = max(self.worst, excess)
        if not ok:
            self.failures.append(
                {
                    "source": source,
                    "n": p.size,
                    "excess": excess,
                    "detail": detail,
                    "p": p.tolist(),
                    "q": q.tolist(),
                }
            )

    def absorb(self, part: dict) -> None:
        """Add the checks of one task (``vars`` of the task's own Claim, as it came back)."""
        self.checked += part["checked"]
        self.worst = max(self.worst, part["worst"])
        self.errors += part["errors"]
        self.failures += part["failures"]

    def error(self, source: str, p: np.ndarray, q: np.ndarray, detail: str) -> None:
        """A computation the claim needs raised: recorded as a counter-example of excess 0."""
        self.errors += 1
        self.check(False, 0.0, source, p, q, detail)

    def row(self) -> dict:
        smallest = min(self.failures, key=lambda f: (f["n"], -f["excess"]), default=None)
        return {
            "claim": self.name,
            "checks": self.checked,
            "counterexamples": len(self.failures),
            "solver_errors": self.errors,
            "worst_violation": self.worst,
            "smallest_counterexample": smallest,
            "counterexamples_list": sorted(self.failures, key=lambda f: (f["n"], -f["excess"]))[:25],
        }


def part_a(task: dict, claims: dict) -> None:
    """Claims 1-3 on the pairs of one (source, n)."""
    label, n = task["source"], task["n"]
    p_all, q_all = draw(task["spec"], n, task["pairs"], task["seed"])
    for index, (p, q) in enumerate(zip(p_all, q_all, strict=True)):
        methods = ("lp", "maxflow", "dual") + (("coupling",) if index % task["coupling_every"] == 0 else ())
        laws = [mdsd.IID(2), mdsd.IID(3), mdsd.WithoutReplacement(2), mdsd.Greedy(2), mdsd.Hub()]
        if n >= 3:
            laws += [mdsd.WithoutReplacement(3), mdsd.Greedy(3)]
        for law in laws:
            values = {}
            for m in methods:
                try:  # a solver that fails is a finding to report, not a reason to stop
                    values[m] = mdsd.optimal_acceptance(p, q, law, method=m)
                except Exception as err:
                    claims["lp_equals_otm"].error(label, p, q, f"{law!r} method {m!r}: {err!r}")
            if values:
                spread = max(values.values()) - min(values.values())
                claims["lp_equals_otm"].check(spread <= TOL, spread, label, p, q, f"{law!r}: {values}")
        hub_law, hub_accepted = spechub_law(p, q)
        output = {"spechub": (hub_law, hub_accepted, mdsd.verifier("spechub", 2))}
        for k, wr in itertools.product((2, 3), (False, True)):
            if k < n or not wr:
                name = ("rrsw" if wr else "rrs") + f" k={k}"
                output[name] = (*rrs_law(p, q, k, wr), mdsd.verifier("rrsw" if wr else "rrs", k))
        for name, (law, accepted, v) in output.items():
            gap = float(np.abs(law - p).sum())
            claims["lossless"].check(gap <= TOL, gap, label, p, q, f"{name}: |law - p|_1 = {gap:.3g}")
            api = v.acceptance(p, q)
            gap = abs(api - accepted)
            claims["acceptance_matches_enumeration"].check(
                gap <= TOL, gap, label, p, q, f"{name}: mdsd {api:.9f} vs enumerated {accepted:.9f}"
            )
        a = int(mdsd.laws.ranked(q)[0])
        gap = abs(hub_law[a] - p[a])
        claims["hub_emitted_p_hub"].check(gap <= TOL, gap, label, p, q, f"P(Y = hub) - p(hub) = {gap:.3g}")
        others = np.arange(n) != a
        closed = p[a] + np.sum(np.minimum(p, q / q[others].sum())[others])
        api = mdsd.verifier("spechub", 2).acceptance(p, q)
        best = mdsd.optimal_acceptance(p, q, mdsd.Hub())
        values = {"enumerated": hub_accepted, "closed form": closed, "mdsd": api, "OTM(hub)": best}
        spread = max(values.values()) - min(values.values())
        claims["spechub_optimal_for_hub"].check(spread <= TOL, spread, label, p, q, str(values))


def part_b(task: dict, claims: dict) -> list[dict]:
    """Claims 4-6 on the pairs of one (source, n); returns per-pair records for 'when does SpecHub win'."""
    label, n = task["source"], task["n"]
    p_all, q_all = draw(task["spec"], n, task["pairs"], task["seed"])
    records = []
    for p, q in zip(p_all, q_all, strict=True):
        acc = {name: mdsd.verifier(name, 2).acceptance(p, q) for name in ("spechub", "rrs", "rrsw")}
        acc["otm_iid"] = mdsd.optimal_acceptance(p, q, mdsd.IID(2))
        acc["otm_wr"] = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(2))
        records.append(
            {
                "source": label,
                "n": n,
                "q_max": float(q.max()),
                "tv": 0.5 * float(np.abs(p - q).sum()),
                **acc,
            }
        )
        for k in (2, 3, 4):
            iid = mdsd.optimal_acceptance(p, q, mdsd.IID(k))
            wr = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k))
            kseq = mdsd.verifier("kseq", k).acceptance(p, q)
            bound = (1 - 1 / math.e) * iid
            claims["kseq_bound"].check(
                kseq >= bound - TOL,
                max(0.0, bound - kseq),
                label,
                p,
                q,
                f"k={k}: K-SEQ {kseq:.6f} < (1-1/e) * {iid:.6f}",
            )
            claims["wr_beats_iid"].check(
                wr >= iid - TOL,
                max(0.0, iid - wr),
                label,
                p,
                q,
                f"k={k}: OTM(WR) {wr:.6f} < OTM(IID) {iid:.6f}",
            )
            # the optimal verifier reaches its law's optimum and beats every verifier of that law
            best = mdsd.verifier("optimal", k).acceptance(p, q)
            rivals = {"rrs": mdsd.verifier("rrs", k).acceptance(p, q), "kseq": kseq, "OTM(IID)": iid}
            if k == 2 and n <= 10:  # without replacement: an exact flow per pair (RRSw's exact form: k = 2)
                wor_best = mdsd.verifier("optimal:wor", k).acceptance(p, q)
                rivals_wor = {"rrsw": acc["rrsw"], "OTM(WR)": wr}
                excess = max(max(v - wor_best for v in rivals_wor.values()), abs(wor_best - wr))
                claims["optimal_verifier_best_of_its_law"].check(
                    excess <= TOL, excess, label, p, q, f"k={k} wor: optimal {wor_best:.9f} vs {rivals_wor}"
                )
            excess = max(max(v - best for v in rivals.values()), abs(best - iid))
            claims["optimal_verifier_best_of_its_law"].check(
                excess <= TOL, excess, label, p, q, f"k={k} iid: optimal {best:.9f} vs {rivals}"
            )
    return records


CLAIMS = (
    "lp_equals_otm",
    "lossless",
    "acceptance_matches_enumeration",
    "hub_emitted_p_hub",
    "spechub_optimal_for_hub",
    "kseq_bound",
    "wr_beats_iid",
    "optimal_verifier_best_of_its_law",
)


def tasks(config: Config) -> list[dict]:
    """One task per (part, source, n), parts A then B, in the order the results are merged."""
    out = []
    for part, vocabularies, pairs in (
        ("A", config.small_n, config.pairs_a),
        ("B", config.large_n, config.pairs_b),
    ):
        for (index, (label, spec)), n in itertools.product(enumerate(sources(config)), vocabularies):
            seed = task_seed(config.seed, part, index, n)
            task = {"part": part, "source": label, "spec": spec, "n": n, "pairs": pairs, "seed": seed}
            if part == "A":
                task["coupling_every"] = config.coupling_every
            out.append(task)
    return out


def run_task(task: dict) -> dict:
    """A sweep task: its claims' checks (``vars`` of each Claim) and, in part B, per-pair records."""
    claims = {name: Claim(name) for name in CLAIMS}
    records = part_b(task, claims) if task["part"] == "B" else part_a(task, claims)
    return {"claims": {name: vars(claim) for name, claim in claims.items()}, "records": records or []}


def main(argv: list[str] | None = None) -> Path:
    torch.set_num_threads(1)
    config = config_from_cli(Config, argv)
    if config.quick:
        config = replace(
            config, pairs_a=1, pairs_b=1, temperatures=(0.5,), similarities=(0.5,), concentrations=(0.5,)
        )
    out = output_dir("theorems", config.output_dir)
    claims, records = {name: Claim(name) for name in CLAIMS}, []
    with partial_results(out, "theorems", config, config.resume) as checkpoint:
        for result in run_tasks(
            run_task, tasks(config), ray=config.ray or None, checkpoint=checkpoint, desc="theorems"
        ):
            for name, part in result["claims"].items():
                claims[name].absorb(part)
            records += result["records"]
        rows = [claims[name].row() for name in CLAIMS]
        wins = win_table(records, lambda r: r["source"])
        by_hub = win_table(sorted(records, key=lambda r: r["q_max"]), hub_bin)
        write_results(
            out, "theorems", rows, config, seed=config.seed, spechub_wins=wins, spechub_wins_by_hub=by_hub
        )
        plot_wins(records, out / "theorems_spechub_vs_others.png")
        (out / "theorems.md").write_text(markdown(rows, wins, by_hub, config))
        print((out / "theorems.md").read_text())
    print(f"results in {out}")
    return out


HUB_BINS = (0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0)  # bins of q(hub) = max q for the "when" table


def hub_bin(record: dict) -> str:
    """The q(hub) bin of a part-B record, e.g. "[0.2, 0.4)"."""
    i = int(np.searchsorted(HUB_BINS, record["q_max"], side="right")) - 1
    i = min(i, len(HUB_BINS) - 2)
    return f"[{HUB_BINS[i]:g}, {HUB_BINS[i + 1]:g}" + ("]" if i == len(HUB_BINS) - 2 else ")")


def win_table(records: list[dict], key) -> list[dict]:
    """Per group (``key(record)``): the share of pairs on which SpecHub's acceptance exceeds each rival's."""
    out = []
    for group in dict.fromkeys(key(r) for r in records):  # in order of first appearance
        chosen = [r for r in records if key(r) == group]
        row = {"group": group, "pairs": len(chosen)}
        for rival in ("rrs", "rrsw", "otm_iid", "otm_wr"):
            row[f"beats_{rival}"] = float(np.mean([r["spechub"] > r[rival] + TOL for r in chosen]))
        out.append(row)
    return out


def markdown(rows: list[dict], wins: list[dict], by_hub: list[dict], config: Config) -> str:
    lines = [
        "# SpecHub's and Hu et al.'s claims, checked on random pairs",
        "",
        f"Tolerance {TOL:g}; seed {config.seed}. Part A: n in {list(config.small_n)}, "
        f"{config.pairs_a} pairs per (source, n); part B: n in {list(config.large_n)}, "
        f"{config.pairs_b} pairs per (source, n); {len(sources(config))} sources "
        f"({len(sources(config)) * len(config.small_n) * config.pairs_a} pairs in part A, "
        f"{len(sources(config)) * len(config.large_n) * config.pairs_b} in part B).",
        "",
        "| claim | checks (pair x law, verifier or k) | counter-examples | of which a solver raised "
        "| worst violation |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['claim']} | {r['checks']} | {r['counterexamples']} | {r['solver_errors']} "
            f"| {r['worst_violation']:.3g} |"
        )
    for r in rows:
        if r["smallest_counterexample"]:
            c = r["smallest_counterexample"]
            lines += [
                "",
                f"Smallest counter-example to {r['claim']} ({c['source']}, n = {c['n']}): {c['detail']}",
                f"p = {c['p']}, q = {c['q']}",
            ]
    lines += [
        "",
        "## How often SpecHub (k = 2) has the higher acceptance",
    ]
    for title, table in (("source", wins), ("q(hub) = max q, all sources (when SpecHub wins)", by_hub)):
        lines += [
            "",
            f"| {title} | pairs | beats RRS | beats RRSw | beats OTM (IID) | beats OTM (w.o.r.) |",
            "|---|---|---|---|---|---|",
        ]
        for w in table:
            lines.append(
                f"| {w['group']} | {w['pairs']} | {w['beats_rrs']:.1%} | {w['beats_rrsw']:.1%} | "
                f"{w['beats_otm_iid']:.1%} | {w['beats_otm_wr']:.1%} |"
            )
    return "\n".join(lines) + "\n"


def plot_wins(records: list[dict], path: Path) -> None:
    """SpecHub's acceptance minus each rival's, against the hub's draft mass q_max."""
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6), sharey=True)
    q_max = np.array([r["q_max"] for r in records])
    for ax, rival in zip(axes, ("rrs", "rrsw", "otm_iid", "otm_wr"), strict=True):
        diff = np.array([r["spechub"] - r[rival] for r in records])
        ax.scatter(q_max, diff, s=3, alpha=0.3)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("q(hub) = max q")
        ax.set_title(f"SpecHub − {rival}", fontsize=9)
    axes[0].set_ylabel("difference in acceptance, k = 2")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    run_script(main)
