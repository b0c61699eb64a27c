"""The optimal verifier's gap to α* where it is not exact: drafts without replacement at real vocabularies.

For drafts without replacement on more than ``OptimalVerifier.flow_tuples`` draft tuples, the optimal
verifier runs its i.i.d. fallback (mdsd/verifiers/optimal.py): lossless, acceptance at least α*_iid(k)
and at most α*_wor(k). This script measures it on the bundled real corpus (mdsd.data.real_pairs:
Qwen2.5-Coder 1.5B / 0.5B pairs, support exact, tail lumped into one token): exactly for k <= 4
(``OptimalVerifier.acceptance``, mdsd/verifiers/fallback.py) and by simulation for every k
(estimate_acceptance: Wilson 95% interval, a check on the exact value), beside the exact α*_iid (min-cut
dual, proven)
and α*_wor (min-cut dual over sorted prefixes: proven for k = 2, conjectured for k >= 3; see
mdsd/otm/dual.py), and RRSw's acceptance estimated the same way for reference.

Writes results/optimal_wor_gap/: optimal_wor_gap.json/.csv (one row per pair, T and k) and
optimal_wor_gap.md (means over pairs).

    python experiments/optimal_wor_gap.py --output-dir results/optimal_wor_gap
    python experiments/optimal_wor_gap.py --quick
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import mdsd
from mdsd.experiment import config_from_cli, output_dir, write_results


@dataclass(frozen=True)
class Config:
    """The without-replacement fallback of the optimal verifier against α* on real pairs."""

    temperatures: tuple[float, ...] = field(default=(0.6, 1.0), metadata={"help": "stored temperatures"})
    ks: tuple[int, ...] = field(default=(2, 3, 4), metadata={"help": "numbers of drafts k"})
    pairs: int = field(default=40, metadata={"help": "corpus rows per temperature (evenly spaced)"})
    samples: int = field(default=20_000, metadata={"help": "simulated steps per (pair, k, verifier)"})
    seed: int = field(default=0, metadata={"help": "seed of the simulations"})
    quick: bool = field(default=False, metadata={"help": "smoke test: T = 1.0, k = 2, 2 pairs, 2,000 steps"})
    output_dir: str = field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})


def main(argv: list[str] | None = None) -> Path:
    torch.set_num_threads(1)
    config = config_from_cli(Config, argv)
    if config.quick:
        config = replace(config, temperatures=(1.0,), ks=(2,), pairs=2, samples=2_000)
    out = output_dir("optimal_wor_gap", config.output_dir)
    rows = []
    for temperature in config.temperatures:
        corpus = mdsd.data.real_pairs(temperature)
        picks = np.linspace(0, len(corpus) - 1, config.pairs).astype(int)
        for k in config.ks:
            optimal, rrsw = mdsd.verifier("optimal", k, law="wor"), mdsd.verifier("rrsw", k)
            for row in tqdm(picks, desc=f"T={temperature:g} k={k}"):
                p, q = corpus.p[row], corpus.q[row]
                if np.count_nonzero(q) < k:
                    continue
                fallback = mdsd.estimate_acceptance(optimal, p, q, config.samples, config.seed + int(row))
                baseline = mdsd.estimate_acceptance(rrsw, p, q, config.samples, config.seed + int(row))
                rows.append(
                    {
                        "temperature": temperature,
                        "k": k,
                        "row": int(row),
                        "alpha_iid": float(mdsd.optimal_acceptance(p, q, mdsd.IID(k))),
                        "alpha_wor": float(mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k))),
                        "fallback_exact": (
                            float(optimal.acceptance(p, q)) if optimal.exact_obstacle(q) is None else None
                        ),
                        "fallback": fallback.value,
                        "fallback_low": fallback.low,
                        "fallback_high": fallback.high,
                        "rrsw": baseline.value,
                        "samples": config.samples,
                    }
                )
    write_results(out, "optimal_wor_gap", rows, config, config.seed)
    lines = [
        "| T | k | pairs | α*_iid | fallback | α*_wor | gap to α*_wor | RRSw (estimate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for temperature in config.temperatures:
        for k in config.ks:
            group = [r for r in rows if r["temperature"] == temperature and r["k"] == k]
            if not group:
                continue
            exact = all(r["fallback_exact"] is not None for r in group)
            column = "fallback_exact" if exact else "fallback"
            keys = ("alpha_iid", column, "alpha_wor", "rrsw")
            mean = {key: float(np.mean([r[key] for r in group])) for key in keys}
            gap = mean["alpha_wor"] - mean[column]
            lines.append(
                f"| {temperature:g} | {k} | {len(group)} | {mean['alpha_iid']:.4f} | "
                f"{mean[column]:.4f} {'(exact)' if exact else '(estimate)'} | {mean['alpha_wor']:.4f} | "
                f"{gap:.4f} | {mean['rrsw']:.4f} |"
            )
    (out / "optimal_wor_gap.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"results in {out}")
    return out


if __name__ == "__main__":
    main()
