"""``mdsd drafters``: make trained drafters.

mdsd drafters distill --out DIR [--prompts 4096 ...]     # the target's answers to training prompts
mdsd drafters features --distilled DIR --out FEATURES   # the target's features and laws at every position
mdsd drafters features --corpus chat-train code-train --out FEATURES   # ... of reference answers
mdsd drafters train --features FEATURES [MORE ...] --out HEAD [--loss kl|tv|alpha] [--resume]   # a head
mdsd drafters pretrain --out SMALL [--corpus chat-train code-train] [--resume]   # a small drafter, stage P
mdsd drafters finetune --distilled DIR --out SMALL [--init PRETRAINED] [--shards N]   # stage F (P→F: --init)

Every command is resumable: rerun it to continue where a killed run stopped (``train`` with ``--resume``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mdsd.harness.experiment import add_config_arguments, config_from_args


def add_parser(subparsers) -> None:
    from mdsd.drafters.distill import DistillConfig
    from mdsd.drafters.stages import StageConfig
    from mdsd.drafters.train import TrainConfig

    parser = subparsers.add_parser(
        "drafters", help="make trained drafters: distil, features, heads, small drafters"
    )
    actions = parser.add_subparsers(dest="action", required=True)
    distill = actions.add_parser(
        "distill",
        help="the target answers training prompts (resumable shards: rerun the same command to continue)",
    )
    add_config_arguments(distill, DistillConfig)
    distill.add_argument("--out", required=True, help="folder of the shards and their manifest")
    distill.add_argument(
        "--target", default="qwen2.5-coder", help="a local model directory, or a fetched pair's target"
    )
    distill.add_argument(
        "--dtype",
        default="auto",
        help="model dtype; auto: bfloat16 where the CPU computes in it, else float32",
    )
    distill.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    features = actions.add_parser(
        "features", help="the target's features and top-K laws of a distilled run or of a corpus (resumable)"
    )
    source = features.add_mutually_exclusive_group(required=True)
    source.add_argument("--distilled", help="the folder of a mdsd drafters distill run")
    source.add_argument("--corpus", nargs="+", metavar="SET", help="training sets read with their references")
    features.add_argument(
        "--sequences",
        type=int,
        default=1024,
        help="corpus sequences in all (1024; a larger count grows a run)",
    )
    features.add_argument("--seed", type=int, default=0, help="seed of the corpus sample (0)")
    features.add_argument("--max-prompt-tokens", type=int, default=192, help="corpus prompt cap (192)")
    features.add_argument("--max-answer-tokens", type=int, default=256, help="corpus reference cap (256)")
    features.add_argument("--out", required=True, help="folder of the features files (the mdsd cache: large)")
    features.add_argument(
        "--target", default="qwen2.5-coder", help="the run's target (a directory or a pair)"
    )
    features.add_argument("--top-k", type=int, default=64, help="the target's likeliest tokens kept (64)")
    features.add_argument(
        "--feature-layers",
        type=int,
        nargs="+",
        default=(),
        metavar="LAYER",
        help="keep these decoder layers' outputs, concatenated, instead of the final hidden state (EAGLE-3's "
        "features: two or more, e.g. 1 13 24 of Qwen2.5-1.5B's 28)",
    )
    features.add_argument("--dtype", default="auto", help="model dtype (auto: as distill)")
    features.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    train = actions.add_parser("train", help="train a feature head (runs under torchrun too)")
    add_config_arguments(train, TrainConfig)
    train.add_argument(
        "--features",
        required=True,
        nargs="+",
        help="mdsd drafters features folders (their sequences together)",
    )
    train.add_argument("--out", required=True, help="folder of the head, its checkpoint and learning curve")
    train.add_argument(
        "--target", default="qwen2.5-coder", help="the features' target (a directory or a pair)"
    )
    train.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    train.add_argument("--device", default="cpu", help="torch device (cuda: NCCL under torchrun)")
    train.add_argument(
        "--dtype",
        default="auto",
        help="compute dtype: bfloat16 (autocast, CPU or GPU), float32, auto (bfloat16 where the CPU has it)",
    )
    train.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    pretrain = actions.add_parser("pretrain", help="pretrain a small drafter on generic text (stage P)")
    pretrain.add_argument(
        "--corpus",
        nargs="+",
        default=["chat-train", "code-train"],
        metavar="SET",
        help="training sets read with their references (default: chat-train code-train)",
    )
    pretrain.add_argument("--max-prompt-tokens", type=int, default=256, help="prompt cap (256)")
    pretrain.add_argument("--max-answer-tokens", type=int, default=256, help="reference cap (256)")
    finetune = actions.add_parser(
        "finetune", help="finetune a small drafter on a distilled run (stage F; P→F with --init)"
    )
    finetune.add_argument("--distilled", required=True, help="the folder of a mdsd drafters distill run")
    finetune.add_argument(
        "--init", help="a pretrained small drafter to start from (P→F); none: a fresh one (F)"
    )
    finetune.add_argument(
        "--shards", type=int, default=0, help="train on the distilled run's first N shards only (0: all)"
    )
    for stage in (pretrain, finetune):
        add_config_arguments(stage, StageConfig)
        stage.add_argument("--out", required=True, help="folder of the drafter, its checkpoint and curve")
        stage.add_argument("--target", default="qwen2.5-coder", help="the target (a directory or a pair)")
        stage.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
        stage.add_argument(
            "--dtype", default="float32", help="compute dtype: float32, or bfloat16 (autocast)"
        )
        stage.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.set_defaults(func=run)


def model_path(spec: str, role: str = "target") -> Path:
    """A local model directory, or the ``role`` model of a fetched pair named ``spec``."""
    from mdsd.hf import pair_paths
    from mdsd.hf.fetch import PAIRS

    if Path(spec).is_dir():
        return Path(spec)
    if spec in PAIRS:
        return pair_paths(spec)[0 if role == "target" else 1]
    raise ValueError(f"--{role} must be a model directory or one of {', '.join(PAIRS)}, got {spec!r}")


def run(args: argparse.Namespace) -> int:
    import torch

    from mdsd.validation import check_device, cpu_dtype

    dtype = cpu_dtype(args.dtype)
    target = model_path(args.target)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.action == "distill":
        from mdsd.drafters.distill import DistillConfig, distill

        out = distill(config_from_args(DistillConfig, args), target, args.out, dtype=dtype)
        print(f"mdsd drafters distill: shards in {out}")
    elif args.action == "features":
        from mdsd.drafters.features import compute_corpus_features, compute_features

        if args.distilled:
            out = compute_features(
                args.distilled, target, args.out, args.top_k, dtype, feature_layers=tuple(args.feature_layers)
            )
        else:
            sets = tuple(args.corpus)
            out = compute_corpus_features(
                sets,
                args.sequences,
                target,
                args.out,
                args.top_k,
                dtype,
                max_prompt_tokens=args.max_prompt_tokens,
                max_answer_tokens=args.max_answer_tokens,
                seed=args.seed,
                feature_layers=tuple(args.feature_layers),
            )
        print(f"mdsd drafters features: features in {out}")
    elif args.action in ("pretrain", "finetune"):
        from mdsd.drafters import stages
        from mdsd.hf import load_tokenizer

        config = config_from_args(stages.StageConfig, args)
        tokenizer = load_tokenizer(target)
        if args.action == "pretrain":
            data = stages.pretrain_data(
                tuple(args.corpus), tokenizer, args.max_prompt_tokens, args.max_answer_tokens
            )
            init = None
        else:
            data, init = stages.finetune_data(args.distilled, tokenizer, args.shards), args.init
        out = stages.train_stage(args.action, config, data, target, args.out, init, args.resume, dtype)
        print(f"mdsd drafters {args.action}: the drafter in {out}")
    else:
        from mdsd.drafters.train import TrainConfig, train

        config = config_from_args(TrainConfig, args)
        device = str(check_device(args.device, "--device"))
        out = train(config, args.features, target, args.out, args.resume, device, dtype)
        print(f"mdsd drafters train: the head in {out}")
    return 0
