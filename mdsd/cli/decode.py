"""``mdsd decode``: token-tree speculative decoding of prompts with a local target/draft pair.

mdsd decode --target PATH --draft PATH --tree binary:4 --verifier spechub --temperature 0.6 --prompt "..."
mdsd decode --pair qwen2.5-coder --tree kary:3,2,1 --prompts-file prompts.txt --max-new-tokens 128

Trees: ``chain:N``, ``binary:D`` (the full binary tree of depth D), ``kary:b1,b2,...`` (branching per
depth), or a JSON file written by ``Tree.to_json`` (e.g. a Sequoia tree). Prints, per prompt, the
generated text and the tokens produced at each step; a progress bar runs over the prompts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def parse_tree(spec: str):
    """A :class:`mdsd.Tree` from ``chain:N``, ``binary:D``, ``kary:b1,b2,...`` or a JSON file path.

    >>> parse_tree("binary:2").size, parse_tree("kary:3,1").size, parse_tree("chain:4").size
    (6, 6, 4)
    """
    from mdsd import Tree

    kind, _, arg = spec.partition(":")
    try:
        if kind == "chain" and arg:
            return Tree.chain(int(arg))
        if kind == "binary" and arg:
            return Tree.kary([2] * int(arg))
        if kind == "kary" and arg:
            return Tree.kary([int(b) for b in arg.split(",")])
    except ValueError as err:
        raise ValueError(f"--tree {spec!r}: {err}") from None
    path = Path(spec)
    if path.suffix == ".json":
        return Tree.from_json(path.read_text())  # OSError if missing: reported by the dispatcher
    raise ValueError(f"--tree must be chain:N, binary:D, kary:b1,b2,... or a tree .json file; got {spec!r}")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("decode", help="speculative decoding with a token tree and a verifier")
    models = parser.add_argument_group("models (give --target and --draft, or --pair)")
    models.add_argument("--target", help="local Hugging Face directory of the target model")
    models.add_argument("--draft", help="local Hugging Face directory of the draft model")
    models.add_argument("--pair", help="a known pair fetched with `mdsd models fetch` (e.g. qwen2.5-coder)")
    parser.add_argument(
        "--tree", default="binary:3", help="chain:N, binary:D, kary:b1,b2,... or a .json file"
    )
    parser.add_argument("--verifier", default="spechub", help="verifier name (see mdsd.VERIFIERS)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 = greedy")
    prompts = parser.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append", help="a prompt (repeat for several)")
    prompts.add_argument("--prompts-file", help="a text file with one prompt per line")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling generator")
    parser.add_argument("--dtype", default="float32", help="model dtype (float32, bfloat16, float16)")
    parser.add_argument("--device", default="cpu", help="torch device of both models")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from mdsd import TreeDecoder
    from mdsd.hf import load_pair, pair_paths

    if args.pair:
        if args.target or args.draft:
            raise ValueError("give either --pair or --target and --draft, not both")
        target_path, draft_path = pair_paths(args.pair)
    elif args.target and args.draft:
        target_path, draft_path = args.target, args.draft
    else:
        raise ValueError("give --target and --draft (local model directories), or --pair")
    tree = parse_tree(args.tree)
    if args.prompts_file:
        prompts = [line for line in Path(args.prompts_file).read_text().splitlines() if line.strip()]
        if not prompts:
            raise ValueError(f"--prompts-file {args.prompts_file} holds no prompt")
    else:
        prompts = args.prompt
    target, draft, tokenizer = load_pair(target_path, draft_path, args.dtype, args.device)
    decoder = TreeDecoder(target, draft, tree, verifier=args.verifier, temperature=args.temperature)
    generator = torch.Generator(device=args.device).manual_seed(args.seed)
    steps = produced = 0
    for i, prompt in enumerate(tqdm(prompts, desc="prompts", unit="prompt", file=sys.stderr)):
        ids = torch.tensor([tokenizer.encode(prompt)], device=args.device)
        if ids.shape[1] == 0:
            raise ValueError(f"prompt {i} encodes to no tokens")
        out = decoder.generate(ids, args.max_new_tokens, generator)
        steps, produced = steps + out.steps, produced + sum(out.tokens_per_step)
        tqdm.write(f"--- prompt {i}: {prompt}")
        tqdm.write(tokenizer.decode(out.tokens.tolist()))
        tqdm.write(
            f"tokens per step: {out.tokens_per_step} (mean {out.mean_tokens_per_step:.2f}; "
            f"{len(out.tokens)} tokens in {out.steps} steps"
            + (", stopped at EOS)" if out.stopped_by_eos else ")")
        )
    rate = produced / steps
    print(f"{len(prompts)} prompts: {rate:.3f} tokens per target forward ({args.verifier}, {args.tree})")
    return 0
