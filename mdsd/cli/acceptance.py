"""``mdsd acceptance``: every verifier's exact acceptance on one (p, q) pair, beside its law's optimum.

    mdsd acceptance --p p.npy --q q.json --k 2 [--json]

Each FILE holds one probability vector (a ``.npy`` array or a ``.json`` list). Without ``--p`` and
``--q`` it runs on the built-in example of ``mdsd optimal``. A verifier defined for one k only (the
single-draft verifier: 1, SpecHub: 2) runs at that k; ``optimal:wor`` follows ``optimal`` (drafts without
replacement; its Luce rule's acceptance is exact to its quadrature). A verifier whose exact acceptance is
out of reach (RRSw with k ≥ 3 on a large vocabulary) is reported with a Monte Carlo estimate instead
(``--samples``, seeded). Verifiers that cannot run here (k drafts need more distinct tokens than the
vocabulary has) are listed as skipped, with the reason; so is an optimum the OTM solvers refuse (a q with
fewer positive tokens than the law needs, where the verifiers fall back to their top-k rule).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from mdsd.cli.optimal import add_pair_arguments, read_pair
from mdsd.otm import optimal_acceptance
from mdsd.outputs import strict_json
from mdsd.validation import as_pair, check_k
from mdsd.verifiers import estimate_acceptance, supports, verifier, verifier_class, verifier_names


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


def _k_for(name: str, k: int) -> int | None:
    """The k verifier ``name`` runs at for ``--k k``: k itself, or its only k, or None."""
    if supports(name, k):
        return k
    cls = verifier_class(name)
    return next(iter(cls.supported_k)) if cls.supported_k and len(cls.supported_k) == 1 else None


def acceptance_rows(
    p: np.ndarray, q: np.ndarray, k: int, samples: int, seed: int
) -> tuple[list[dict], list[dict]]:
    """(rows, skipped). A row per verifier that runs: its k, law, acceptance (exact or estimated), the
    law's optimum and the gap (None where the OTM solvers refuse q, with ``optimum_note``). A skipped
    entry per verifier that cannot run here: verifier, k and reason."""
    rows, skipped = [], []
    for name in verifier_names(paths=False):  # every node verifier, with each law it takes by name
        kk = _k_for(name, k)
        if kk is None:
            skipped.append({"verifier": name, "k": k, "reason": f"{name} does not run with k = {k}"})
            continue
        v = verifier(name, kk)
        reason = v.vocabulary_obstacle(q.size)
        if reason is not None:
            skipped.append({"verifier": name, "k": kk, "reason": reason})
            continue
        row = {"verifier": name, "k": kk, "law": v.law.name, "exact": True}
        if v.exact_obstacle(q) is None:
            row["acceptance"] = v.acceptance(p, q)
        else:
            est = estimate_acceptance(v, p, q, samples, seed)
            row.update(acceptance=est.value, exact=False, interval=[est.low, est.high])
        try:
            row["optimum"] = float(optimal_acceptance(p, q, v.law))
        except ValueError as err:  # the law cannot draw from q; the verifier uses its top-k rule
            row.update(optimum=None, gap=None, optimum_note=str(err))
        else:
            gap = row["optimum"] - row["acceptance"]
            row["gap"] = gap if abs(gap) > 1e-12 else 0.0  # rounding noise where the verifier is optimal
        rows.append(row)
    return rows, skipped


def run(args: argparse.Namespace) -> int:
    check_k(args.k, "--k")
    check_k(args.samples, "--samples")  # whether or not an estimate turns out to be needed
    p, q, example = read_pair(args)
    p, q = as_pair(p, q)
    if p.ndim != 1:
        raise ValueError(f"--p and --q must each hold one vector; got shape {p.shape}")
    rows, skipped = acceptance_rows(p, q, args.k, args.samples, args.seed)
    if args.json:
        out = {"n": int(p.size), "k": args.k, "example": example, "rows": rows, "skipped": skipped}
        print(json.dumps(strict_json(out), allow_nan=False))
        return 0
    source = "built-in example" if example else f"p={args.p}, q={args.q}"
    print(f"acceptance P(output ∈ drafts), n = {p.size}, k = {args.k} ({source})")
    wide = max(len("verifier"), *(len(r["verifier"]) for r in rows))  # optimal:wor is wider than the rest
    laws = max(len("law"), *(len(r["law"]) for r in rows))
    print(f"{'verifier':<{wide}} {'law':<{laws}} {'k':>2} {'acceptance':>11} {'optimum':>9} {'gap':>9}")
    for r in rows:
        mark = "" if r["exact"] else f"  (estimate, 95% CI {r['interval'][0]:.4f}-{r['interval'][1]:.4f})"
        if r["optimum"] is None:
            optimum, gap, mark = f"{'n/a':>9}", f"{'n/a':>9}", f"{mark}  (optimum: {r['optimum_note']})"
        else:
            optimum, gap = f"{r['optimum']:>9.6f}", f"{r['gap']:>9.6f}"
        line = (
            f"{r['verifier']:<{wide}} {r['law']:<{laws}} {r['k']:>2} {r['acceptance']:>11.6f} {optimum} {gap}"
        )
        print(line + mark)
    for entry in skipped:
        print(f"skipped: {entry['verifier']} (k = {entry['k']}): {entry['reason']}")
    return 0
