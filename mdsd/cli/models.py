"""``mdsd models``: fetch, list and locate the real draft/target pairs in the mdsd cache.

mdsd models fetch qwen2.5-coder        # download 28 wheels, join, check sha256, convert (once)
mdsd models list                       # what is known and what is cached
mdsd models path qwen2.5-coder target  # print a converted model directory
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("models", help="fetch, list and locate real model pairs (mdsd cache)")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", default=None, help="cache (default: $MDSD_CACHE or ~/.cache/mdsd)")
    actions = parser.add_subparsers(dest="action", required=True)
    fetch = actions.add_parser("fetch", parents=[common], help="download, join, verify and convert a pair")
    fetch.add_argument("pair", metavar="PAIR", help="a known pair, e.g. qwen2.5-coder")
    fetch.add_argument(
        "--dtype", default="bfloat16", help="dtype of the saved safetensors (default: bfloat16)"
    )
    fetch.add_argument("--keep-gguf", action="store_true", help="keep the joined GGUF files after conversion")
    fetch.add_argument("--force", action="store_true", help="redo every step even if cached")
    actions.add_parser("list", parents=[common], help="list the known pairs and their cache state")
    path = actions.add_parser("path", parents=[common], help="print the directory of a converted model")
    path.add_argument("pair", metavar="PAIR", help="a known pair, e.g. qwen2.5-coder")
    path.add_argument("role", choices=("target", "draft"))
    parser.set_defaults(func=run)


def pair_name(name: str, what: str = "--pair") -> str:
    """``name`` if it is a known pair (:data:`mdsd.hf.fetch.PAIRS`), else a ``ValueError`` naming the flag or
    argument ``what`` and the pairs (the commands' wording, not the API's)."""
    from mdsd.hf.fetch import PAIRS

    if name not in PAIRS:
        raise ValueError(f"{what} must be one of {', '.join(PAIRS)}, got {name!r}")
    return name


def run(args: argparse.Namespace) -> int:
    from mdsd.data.wheels import cache_dir
    from mdsd.hf.deps import HF_PACKAGES, require_hf
    from mdsd.hf.fetch import PAIRS, fetch, model_dir, wheels_present
    from mdsd.validation import float_dtype

    if args.action == "fetch":  # every argument checked before any download
        pair_name(args.pair, "PAIR")
        float_dtype(args.dtype, "--dtype")
        require_hf("mdsd models fetch", tuple(HF_PACKAGES))
        fetch(args.pair, cache=args.cache_dir, dtype=args.dtype, keep_gguf=args.keep_gguf, force=args.force)
        return 0
    if args.action == "path":
        print(model_dir(pair_name(args.pair, "PAIR"), args.role, args.cache_dir))
        return 0
    print(f"cache: {cache_dir(args.cache_dir)}")
    for name, pair in PAIRS.items():
        wheels = wheels_present(name, args.cache_dir)
        for role in ("target", "draft"):
            spec = getattr(pair, role)
            try:
                state = f"converted at {model_dir(name, role, args.cache_dir)}"
            except FileNotFoundError:
                state = f"not converted; {wheels[role]}/{spec.parts} wheels cached"
            print(f"{name} {role}: {spec.name} ({spec.size:,} bytes GGUF) - {state}")
    return 0
