"""``mdsd optimal``: the optimal multi-draft acceptance α*(p, Q) of one (p, q) pair, with its certificate.

    mdsd optimal --p p.npy --q q.json --law iid --k 2 [--method auto] [--json]

Each FILE holds one probability vector: a ``.npy`` array or a ``.json`` list. Without ``--p`` and
``--q`` it runs on a built-in example: an 8-token target and a draft that ranks the tokens differently,

    p = [0.30, 0.25, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02]
    q = [0.10, 0.20, 0.30, 0.05, 0.15, 0.05, 0.10, 0.05]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from mdsd.laws import law_class, law_from_name, law_names
from mdsd.otm import METHODS, solve_otm
from mdsd.otm.solve import check_enumerable
from mdsd.outputs import strict_json
from mdsd.validation import as_probabilities, check_k

# The built-in example (quoted in the module docstring, which is the command's help).
EXAMPLE_P = [0.30, 0.25, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02]
EXAMPLE_Q = [0.10, 0.20, 0.30, 0.05, 0.15, 0.05, 0.10, 0.05]


def load_vector(path: str, name: str) -> np.ndarray:
    """One probability vector from a ``.npy`` file or a ``.json`` list (checked by :func:`read_pair`)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--{name} {path}: no such file")
    if file.suffix == ".npy":
        return np.load(file, allow_pickle=False)
    if file.suffix == ".json":
        with file.open() as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as err:
                raise ValueError(f"--{name} {path}: not valid JSON ({err.msg}, line {err.lineno})") from None
        if not isinstance(data, list):
            raise ValueError(f"--{name} {path}: expected a JSON list of probabilities")
        return np.asarray(data, dtype=np.float64)
    raise ValueError(f"--{name} {path}: expected a .npy or .json file")


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--p FILE --q FILE`` pair that ``optimal`` and ``acceptance`` share."""
    parser.add_argument("--p", metavar="FILE", help="target distribution (.npy or .json list)")
    parser.add_argument("--q", metavar="FILE", help="draft distribution (.npy or .json list)")


def read_pair(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, bool]:
    """(p, q, example): the vectors named by --p/--q (checked, a message naming the flag and file), or the
    built-in example when both are absent."""
    if (args.p is None) != (args.q is None):
        raise ValueError("give both --p and --q, or neither to use the built-in example")
    if args.p is None:
        return np.array(EXAMPLE_P), np.array(EXAMPLE_Q), True
    p, q = (
        as_probabilities(load_vector(path, name), f"--{name} {path}")
        for name, path in (("p", args.p), ("q", args.q))
    )
    if p.ndim != 1:
        raise ValueError(f"--p {args.p} must hold one vector (a list of probabilities), got shape {p.shape}")
    if p.shape != q.shape:
        raise ValueError(
            f"--p and --q must hold vectors over one vocabulary; got shapes {p.shape} and {q.shape}"
        )
    return p, q, False


def law_argument(name: str, k: int):
    """The draft law ``--law name`` with ``--k k`` drafts (every name and alias of :mod:`mdsd.laws`), or a
    ``ValueError`` naming the flags."""
    check_k(k, "--k")
    try:
        law_class(name)
    except ValueError as err:
        raise ValueError(f"--law: {err}") from None
    try:
        return law_from_name(name, k)
    except ValueError as err:
        raise ValueError(f"--law {name} --k {k}: {err}") from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "optimal",
        help="exact optimal multi-draft acceptance of a (p, q) pair",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pair_arguments(parser)
    parser.add_argument("--law", default="iid", help=f"draft law: {', '.join(law_names())} (default iid)")
    parser.add_argument("--k", type=int, default=2, help="number of drafts (default 2)")
    parser.add_argument("--method", default="auto", help=f"solver: {', '.join(METHODS)} (default auto)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    law = law_argument(args.law, args.k)
    if args.method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}; got {args.method!r}")
    p, q, example = read_pair(args)
    law.check(q, "--q" if example else f"--q {args.q}")  # a q the law cannot draw its drafts from
    if not (args.method in ("auto", "dual") and law.dual_form() is not None):  # a method that enumerates
        check_enumerable(q, law, "lp" if args.method == "auto" else args.method, "--method")
    result = solve_otm(p, q, law, method=args.method)
    if args.json:
        record = {
            "value": result.value,
            "law": law.name,
            "k": law.k,
            "n": int(np.size(p)),
            "method": result.method,
            "status": result.status,
            "basis": result.basis,
            "error": result.error,
            "message": result.message,
            "cut": list(result.cut),
            "cut_value": result.cut_value,
            "example": example,
        }
        print(json.dumps(strict_json(record), allow_nan=False))
        return 0
    source = "built-in example" if example else f"p={args.p}, q={args.q}"
    print(f"optimal acceptance α* = {result.value:.12g}   ({law!r}, n = {np.size(p)}, {source})")
    print(f"method: {result.method} ({result.message}); status: {result.status} ({result.basis})")
    shown = ", ".join(map(str, result.cut[:20])) + (", ..." if len(result.cut) > 20 else "")
    print(f"certificate: A = {{{shown}}} ({len(result.cut)} tokens)", end=", ")
    print(f"p(A) + 1 − Q(set ⊆ A) = {result.cut_value:.12g}")
    return 0
