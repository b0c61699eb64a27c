"""``mdsd acceptance``: every verifier's exact acceptance on one (p, q) pair, beside its law's optimum.

    mdsd acceptance --p p.npy --q q.json --k 2 [--json]

Each FILE holds one probability vector (a ``.npy`` array or a ``.json`` list). Without ``--p`` and
``--q`` it runs on the built-in example of ``mdsd optimal``. The single-draft verifier always uses
k = 1 and SpecHub k = 2; a verifier whose exact acceptance is out of reach (RRSw with k ≥ 3 on a large
vocabulary) is reported with a Monte Carlo estimate instead (``--samples``, seeded).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from mdsd.cli.optimal import add_pair_arguments, read_pair
from mdsd.otm import optimal_acceptance
from mdsd.validation import as_pair
from mdsd.verifiers import VERIFIERS, estimate_acceptance, verifier


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "acceptance",
        help="each verifier's exact acceptance beside the optimum of its draft law",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pair_arguments(parser)
    parser.add_argument("--k", type=int, default=2, help="number of drafts (default 2)")
    parser.add_argument(
        "--samples", type=int, default=100_000, help="Monte Carlo samples where no exact form applies"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of those Monte Carlo estimates")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def acceptance_rows(p: np.ndarray, q: np.ndarray, k: int, samples: int, seed: int) -> list[dict]:
    """One row per verifier: its k, law, acceptance (exact or estimated), the law's optimum and the gap."""
    rows = []
    for name in VERIFIERS:
        kk = {"single": 1, "spechub": 2}.get(name, k)
        v = verifier(name, kk)
        row = {"verifier": name, "k": kk, "law": v.law.name, "exact": True}
        try:
            row["acceptance"] = v.acceptance(p, q)
        except ValueError as err:
            if "estimate_acceptance" not in str(err):
                raise
            est = estimate_acceptance(v, p, q, samples, seed)
            row.update(acceptance=est.value, exact=False, interval=[est.low, est.high])
        row["optimum"] = float(optimal_acceptance(p, q, v.law))
        gap = row["optimum"] - row["acceptance"]
        row["gap"] = gap if abs(gap) > 1e-12 else 0.0  # rounding noise where the verifier is optimal
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    p, q, example = read_pair(args)
    p, q = as_pair(p, q)
    if p.ndim != 1:
        raise ValueError(f"--p and --q must each hold one vector; got shape {p.shape}")
    rows = acceptance_rows(p, q, args.k, args.samples, args.seed)
    if args.json:
        print(json.dumps({"n": int(p.size), "k": args.k, "example": example, "rows": rows}))
        return 0
    source = "built-in example" if example else f"p={args.p}, q={args.q}"
    print(f"acceptance P(output ∈ drafts), n = {p.size}, k = {args.k} ({source})")
    print(f"{'verifier':<9} {'law':<20} {'k':>2} {'acceptance':>11} {'optimum':>9} {'gap':>9}")
    for r in rows:
        mark = "" if r["exact"] else f"  (estimate, 95% CI {r['interval'][0]:.4f}-{r['interval'][1]:.4f})"
        print(
            f"{r['verifier']:<9} {r['law']:<20} {r['k']:>2} {r['acceptance']:>11.6f} {r['optimum']:>9.6f}"
            f" {r['gap']:>9.6f}{mark}"
        )
    return 0
