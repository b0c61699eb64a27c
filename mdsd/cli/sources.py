"""``mdsd sources``: build and inspect retrieval datastores for the training-free draft sources.

mdsd sources build --corpus a.txt b.txt --tokenizer qwen2.5-coder --out DIR   # one document per file
mdsd sources build --heldout udhr-fra --tokenizer DIR --out DIR               # a prompt set's held-out text
mdsd sources info DIR                                                         # what an index holds
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("sources", help="build and inspect draft-source datastores")
    actions = parser.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="tokenise a corpus and save its suffix-array datastore")
    source = build.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", nargs="+", metavar="FILE", help="UTF-8 text files, one document each")
    source.add_argument(
        "--heldout", metavar="SET", help="the held-out text of a multilingual prompt set, e.g. udhr-fra"
    )
    build.add_argument(
        "--tokenizer", required=True, help="a local HF model directory, or a fetched pair (qwen2.5-coder)"
    )
    build.add_argument("--out", required=True, help="directory to write the datastore into")
    build.add_argument("--sort-depth", type=int, default=32, help="tokens each suffix is sorted on (32)")
    build.add_argument("--cache-dir", default=None, help="mdsd cache (default: $MDSD_CACHE or ~/.cache/mdsd)")
    info = actions.add_parser("info", help="print what a saved datastore holds")
    info.add_argument("directory")
    parser.set_defaults(func=run)


def _tokenizer_dir(spec: str, cache) -> Path:
    """The model directory ``--tokenizer`` names: a directory, or a fetched pair's target."""
    from mdsd.hf.fetch import PAIRS
    from mdsd.hf.load import pair_paths

    if Path(spec).is_dir():
        return Path(spec)
    if spec in PAIRS:
        return pair_paths(spec, cache)[0]
    raise ValueError(f"--tokenizer must be a model directory or one of {', '.join(PAIRS)}, got {spec!r}")


def _check_build(args: argparse.Namespace) -> Path:
    """Every ``build`` argument, before a corpus is read or a tokenizer loaded; the tokenizer's directory."""
    from mdsd.data.prompts import PROMPT_SETS
    from mdsd.outputs import ensure_output_dir

    if args.sort_depth < 2:
        raise ValueError(f"--sort-depth must be an integer >= 2, got {args.sort_depth}")
    if args.heldout is not None:
        with_text = [name for name, spec in PROMPT_SETS.items() if spec.language is not None]
        if args.heldout not in with_text:
            raise ValueError(
                f"--heldout must be a prompt set with held-out text ({', '.join(with_text)}), "
                f"got {args.heldout!r}"
            )
    ensure_output_dir(args.out, "--out")
    for name in args.corpus or ():
        if not Path(name).is_file():
            raise FileNotFoundError(f"--corpus {name}: no such file")
    return _tokenizer_dir(args.tokenizer, args.cache_dir)


def run(args: argparse.Namespace) -> int:
    from mdsd.hf.load import load_tokenizer
    from mdsd.sources import Datastore

    if args.action == "info":
        store = Datastore.load(args.directory)
        meta = json.loads((Path(args.directory) / "datastore.json").read_text())
        print(f"{store!r}")
        print(json.dumps(meta, indent=2, sort_keys=True))
        return 0
    tokenizer_dir = _check_build(args)  # before tokenising the corpus, not after
    if args.heldout is not None:
        from mdsd.data.prompts import load_heldout

        texts, origin = load_heldout(args.heldout, args.cache_dir), {"heldout": args.heldout}
    else:
        texts = [Path(name).read_text(encoding="utf-8") for name in args.corpus]
        origin = {"corpus": [str(Path(name).resolve()) for name in args.corpus]}
    tokenizer = load_tokenizer(tokenizer_dir)
    start = time.perf_counter()
    info = {**origin, "tokenizer": args.tokenizer, "vocabulary": len(tokenizer)}
    store = Datastore.from_texts(texts, tokenizer, sort_depth=args.sort_depth, info=info)
    folder = store.save(args.out)
    seconds = time.perf_counter() - start
    print(f"{len(store):,} tokens from {len(texts)} documents -> {folder} ({seconds:.1f} s)")
    return 0
