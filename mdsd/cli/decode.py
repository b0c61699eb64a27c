"""``mdsd decode``: token-tree speculative decoding of prompts with a local target/draft pair.

    mdsd decode --target PATH --draft PATH --tree binary:4 --verifier spechub --temperature 0.6 --prompt "..."
    mdsd decode --pair qwen2.5-coder --tree dynamic:6,2,3,16 --prompts-file prompts.txt --max-new-tokens 128
    mdsd decode --pair qwen2.5-coder --tree chain:16 --adaptive grow --batch-file prompts.txt
    mdsd decode --pair qwen2.5-coder --tree binary:3 --temperature 0.6 --prompts-file prompts.txt --compare
    mdsd decode --pair qwen2.5-coder --tree none --source lookup --retrieve 1 8 --compile --prompt "..."

Trees: ``chain:N``, ``binary:D`` (the full binary tree of depth D), ``kary:b1,b2,...`` (branching per depth),
``dynamic:DEPTH,K,EXPAND[,BUDGET]`` (grown each step from the draft's probabilities, see
:class:`mdsd.DynamicTree`), a JSON file written by ``Tree.to_json`` (e.g. a Sequoia tree), or ``none`` (no
draft model: the --source alone, or without one plain autoregressive decoding; --draft is then not needed).
``--adaptive grow`` truncates the tree each step at a depth set by Hugging Face's grow/shrink schedule;
``--adaptive first`` drafts with the model only in the steps where the ``--source`` proposed nothing (the
source's chains alone in the others); ``first:N`` where it proposed fewer than N tokens, ``first:N:M`` also
in the M steps after a step of chains alone that some prompt rejected whole
(:class:`mdsd.tree.adaptive.SourceFirst`).
``--source`` adds a training-free draft source (``lookup``: prompt lookup; ``dictionary``: n-grams learnt
while decoding; ``datastore``: the suffix-array index in ``--datastore``; several joined by ``,`` in priority
order): each step it proposes ``--retrieve WIDTH DEPTH`` chains below the root, beside the model's tree.
Prompts from ``--prompt``/``--prompts-file`` are decoded one at a time; ``--batch-file`` decodes all its
lines together in one batch (one target forward per step for all of them). Prints each generated text, its
tokens per step, and a summary: tokens per target forward, tokens per second and where the time went.

``--compare`` also runs Hugging Face's autoregressive sampling and assisted generation (HF's default draft
settings) on the same prompts, seeds (prompt i: seed + i) and budget, counts every method's target and draft
forwards with the same hook, and prints a table (:func:`mdsd.harness.comparison.compare`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch


def add_parser(subparsers) -> None:
    from mdsd.tree.compiled import BACKENDS

    parser = subparsers.add_parser(
        "decode",
        help="speculative decoding with a token tree and a verifier",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models = parser.add_argument_group("models (give --target and --draft, or --pair)")
    models.add_argument("--target", help="local Hugging Face directory of the target model")
    models.add_argument(
        "--draft",
        help="local Hugging Face directory of the draft model, or a feature head's (mdsd drafters train)",
    )
    models.add_argument("--pair", help="a known pair fetched with `mdsd models fetch` (e.g. qwen2.5-coder)")
    parser.add_argument("--tree", default="binary:3", help="tree (see above) (default: %(default)s)")
    parser.add_argument(
        "--verifier", default="spechub", help="verifier name; unused with --tree none (default: %(default)s)"
    )
    parser.add_argument(
        "--source",
        help="a draft source beside the tree: lookup, dictionary, datastore or several (see above)",
    )
    parser.add_argument(
        "--retrieve",
        type=int,
        nargs=2,
        default=[1, 8],
        metavar=("WIDTH", "DEPTH"),
        help="chains the --source proposes a step, and their length (default: 1 8)",
    )
    parser.add_argument("--datastore", default="", help="datastore directory for --source datastore")
    parser.add_argument(
        "--adaptive",
        default="none",
        metavar="{none,grow,first[:N[:M]],...}",
        help="adaptive draft depth: none or a depth policy's spec (default: %(default)s)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature; 0 = greedy (default: %(default)s)",
    )
    prompts = parser.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append", help="a prompt (repeat for several)")
    prompts.add_argument("--prompts-file", help="a text file with one prompt per line, decoded one by one")
    prompts.add_argument("--batch-file", help="a text file with one prompt per line, decoded as one batch")
    parser.add_argument(
        "--max-new-tokens", type=int, default=64, help="tokens per prompt (default: %(default)s)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the sampling generator (default: %(default)s)"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run HF autoregressive sampling and HF assisted generation on the same prompts and seeds, "
        "and print a table of tokens per target forward (prompts one at a time)",
    )
    parser.add_argument(
        "--compile",
        nargs="?",
        const="true",
        default="false",
        help="the decoder's fast path (static caches, a captured step; Llama/Qwen2-family models): "
        "--compile alone picks a CUDA graph on CUDA and inductor elsewhere, or name the backend: "
        f"{', '.join(BACKENDS)} (default: the eager path)",
    )
    parser.add_argument("--dtype", default="float32", help="model dtype (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="torch device of both models (default: %(default)s)")
    parser.set_defaults(func=run)


def _prompts(args: argparse.Namespace) -> list[str]:
    source = args.prompts_file or args.batch_file
    if source is None:
        for i, prompt in enumerate(args.prompt):
            if not prompt:
                which = "--prompt" if len(args.prompt) == 1 else f"--prompt number {i + 1}"
                raise ValueError(f"{which} is empty: give the text the models continue")
        return args.prompt
    flag = "--prompts-file" if args.prompts_file else "--batch-file"
    if not Path(source).is_file():
        raise FileNotFoundError(f"{flag} {source}: no such file")
    prompts = [line for line in Path(source).read_text().splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"{flag} {source} holds no prompt")
    return prompts


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from mdsd.cli.models import pair_name
    from mdsd.drafters.pair import is_trained, load_target_and_drafter
    from mdsd.hf.deps import require_hf
    from mdsd.hf.load import load_model, load_tokenizer, pair_paths
    from mdsd.sources import make_source
    from mdsd.token_tree import Tree
    from mdsd.tree.adaptive import make_policy, policy_names
    from mdsd.tree.config import path_rule_obstacle
    from mdsd.tree.spec import compile_option, parse_tree
    from mdsd.validation import check_device, float_dtype
    from mdsd.verifiers.registry import check_name

    try:  # before any model is loaded
        check_name(args.verifier)
    except ValueError as err:
        raise ValueError(f"--verifier: {err}") from None
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens (max_new_tokens) must be >= 1, got {args.max_new_tokens}")
    path = compile_option(args.compile)
    if not math.isfinite(args.temperature) or args.temperature < 0:
        raise ValueError(f"--temperature must be finite and >= 0 (0: greedy), got {args.temperature}")
    if args.compare and args.batch_file:
        raise ValueError(
            "--compare decodes prompts one at a time: give --prompt or --prompts-file, not --batch-file"
        )
    if not all(x >= 1 for x in args.retrieve):
        raise ValueError(f"--retrieve takes WIDTH DEPTH, two integers >= 1; got {args.retrieve}")
    try:
        source = make_source(args.source, args.datastore) if args.source else None
    except ValueError as err:
        raise ValueError(f"--source: {err}") from None
    except OSError as err:  # a --datastore folder that holds no datastore
        raise FileNotFoundError(f"--datastore: {err}") from None
    depth = None
    if args.adaptive != "none":
        if args.adaptive.partition(":")[0] not in policy_names():
            raise ValueError(
                f"--adaptive must be none or one of {', '.join(policy_names())}, got {args.adaptive!r}"
            )
        try:
            depth = make_policy(args.adaptive)
        except ValueError as err:
            raise ValueError(f"--adaptive: {err}") from None
    alone = args.tree == "none"  # no draft model
    if alone and depth is not None:
        raise ValueError("--adaptive truncates the draft model's tree: give a --tree other than none")
    if depth is not None and depth.reads_proposals and source is None:
        raise ValueError(
            f"--adaptive {args.adaptive} drafts with the model where the source proposes nothing: "
            "give --source"
        )
    needs_draft = not alone or args.compare  # --compare runs HF assisted generation with the draft
    if args.compare and args.draft and is_trained(args.draft):
        raise ValueError(
            "--compare runs HF assisted generation, which needs a draft model: --draft is an mdsd drafter"
        )
    if args.pair:
        if args.target or args.draft:
            raise ValueError("give either --pair or --target and --draft, not both")
        target_path, draft_path = pair_paths(pair_name(args.pair, "--pair"))
    elif args.target and (args.draft or not needs_draft):
        target_path, draft_path = args.target, args.draft
    else:
        raise ValueError("give --target and --draft (local model directories), or --pair")
    device = check_device(args.device, "--device")
    dtype = float_dtype(args.dtype, "--dtype")
    prompts = _prompts(args)
    _check_memory(args, prompts, target_path, draft_path, dtype, device)
    tree = None if alone else parse_tree(args.tree)
    if tree is not None:  # the verifier's constraints on the tree, checked before any model loads
        chain = bool((tree.branching <= 1).all()) if isinstance(tree, Tree) else None
        obstacle = path_rule_obstacle(
            args.verifier, isinstance(tree, Tree), chain, source is not None, depth is not None
        )
        if obstacle is not None:
            raise ValueError(f"--verifier {args.verifier} with --tree {args.tree}: {obstacle}")
    require_hf("mdsd decode")
    if needs_draft:
        target, draft, tokenizer = load_target_and_drafter(target_path, draft_path, args.dtype, args.device)
    else:
        target, draft = load_model(target_path, args.dtype, args.device), None
        tokenizer = load_tokenizer(target_path)
    encoded = []
    for i, prompt in enumerate(prompts):
        ids = tokenizer.encode(prompt)
        if not ids:
            raise ValueError(f"prompt {i} encodes to no tokens")
        encoded.append(ids)
    comparison = None
    if args.compare:
        from mdsd.harness.comparison import TreeMethod

        mdsd_method = TreeMethod(
            tree, args.verifier, depth, tree_label(args), source, tuple(args.retrieve), compile=path
        )
        comparison = _compare(args, mdsd_method, encoded, target, draft)
        outs = [run.output for run in comparison.runs if run.method == mdsd_method.name]
    else:
        from mdsd.tree.decoder import TreeDecoder

        decoder = TreeDecoder(
            target,
            draft,  # None with --tree none: only the target was loaded
            tree,
            args.verifier,
            args.temperature,
            depth=depth,
            source=source,
            retrieve=tuple(args.retrieve),
            compile=path,
        )
        generator = torch.Generator(device=args.device).manual_seed(args.seed)
        if args.batch_file:
            outs = decoder.generate_batch(encoded, args.max_new_tokens, generator)
        else:
            bar = tqdm(encoded, desc="prompts", unit="prompt", file=sys.stderr)
            outs = [
                decoder.generate(torch.tensor([ids], device=args.device), args.max_new_tokens, generator)
                for ids in bar
            ]
    tokens = steps = 0
    seconds = 0.0 if not args.batch_file else outs[0].timings["total"]
    phases = {}
    for i, (prompt, out) in enumerate(zip(prompts, outs, strict=True)):
        tokens, steps = tokens + len(out.tokens), steps + out.steps
        if not args.batch_file:
            seconds += out.timings["total"]
            for phase, t in out.timings.items():
                phases[phase] = phases.get(phase, 0.0) + t
        print(f"--- prompt {i}: {prompt}")
        print(tokenizer.decode(out.tokens.tolist()))
        print(
            f"tokens per step: {out.tokens_per_step} ({len(out.tokens)} tokens in {out.steps} steps, "
            f"{out.mean_tokens_per_step:.2f} per step" + (", stopped at EOS)" if out.stopped_by_eos else ")")
        )
    if args.batch_file:
        phases = dict(outs[0].timings)
        steps = max(out.steps for out in outs)  # one target forward per step serves the whole batch
    where = ", ".join(f"{p} {t:.2f} s" for p, t in phases.items() if p != "total")
    # without a model tree no verifier is used: a source's chains alone are verified by the deterministic
    # rule; with one, what verified (the single-draft rule where a node has one child and the verifier has
    # no k = 1)
    verifier = f"{outs[0].verified_by}, " if tree is not None else ""
    print(
        f"{len(prompts)} prompt(s), {verifier}{tree_label(args)}: {tokens} tokens from {steps} target "
        f"forwards = {tokens / steps:.3f} tokens per target forward; {tokens / seconds:.2f} tokens/s"
        + (f" ({where})" if where else "")
    )
    if comparison is not None:
        print(
            f"\nSame prompts, seeds and budget; forwards counted by one hook for every method; "
            f"95% CI: {comparison.interval}."
        )
        print(comparison.markdown(), end="")
    return 0


def _check_memory(args, prompts, target_path, draft_path, dtype, device) -> None:
    """Refuse a tree that cannot fit before building it or loading a model (:mod:`mdsd.tree.memory`): the
    models' config.json, a prompt's UTF-8 bytes + 1 as a bound on its tokens, the decode's rows."""
    from mdsd.drafters.pair import is_trained
    from mdsd.tree.memory import TreeShape, check_memory, decode_memory
    from mdsd.tree.spec import tree_shape

    files = [Path(p) / "config.json" for p in (target_path, draft_path) if p and not is_trained(p)]
    if not all(f.is_file() for f in files):
        return  # loading names the missing model directory
    configs = [json.loads(f.read_text()) for f in files]
    batch = len(prompts) if args.batch_file else 1
    longest = max(len(p.encode()) for p in prompts) + 1
    shape = TreeShape.of_plan(None) if args.tree == "none" else tree_shape(args.tree)
    if args.source:
        shape = shape.with_retrieval(*args.retrieve)
    need = decode_memory(configs, shape, batch, longest, args.max_new_tokens, dtype)
    check_memory(need, device, f"--tree {args.tree}")


def tree_label(args) -> str:
    """The decode's tree, depth policy and source as the summary names them (``binary:3``,
    ``chain:16/grow``, ``none+lookup 1x8``)."""
    policy = "" if args.adaptive == "none" else f"/{args.adaptive}"
    source = f"+{args.source} {args.retrieve[0]}x{args.retrieve[1]}" if args.source else ""
    return args.tree + policy + source


def _compare(args, mdsd_method, encoded, target, draft):
    """HF autoregressive sampling, HF assisted generation and ``mdsd_method`` on the same prompts."""
    from tqdm import tqdm

    from mdsd.harness.comparison import compare

    methods = ["hf-autoregressive", "hf-assisted", mdsd_method]
    with tqdm(total=len(methods) * len(encoded), desc="compare", unit="decode", file=sys.stderr) as bar:
        return compare(
            methods,
            encoded,
            target,
            draft,
            args.max_new_tokens,
            args.temperature,
            seed=args.seed,
            progress=lambda method, prompt: bar.update(1),
        )
