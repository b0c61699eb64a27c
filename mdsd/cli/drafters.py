"""``mdsd drafters``: make trained drafters.

mdsd drafters distill --out DIR [--prompts 4096 ...]   # the target's answers to training prompts, in shards
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mdsd.experiment import add_config_arguments, config_from_args


def add_parser(subparsers) -> None:
    from mdsd.drafters.distill import DistillConfig

    parser = subparsers.add_parser("drafters", help="self-distil training data for drafters")
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
    parser.set_defaults(func=run)


def model_path(spec: str, role: str = "target") -> Path:
    """A local model directory, or the ``role`` model of a fetched pair named ``spec``."""
    from mdsd.hf import pair_paths
    from mdsd.hf.fetch import PAIRS

    if Path(spec).is_dir():
        return Path(spec)
    if spec in PAIRS:
        return pair_paths(spec)[0 if role == "target" else 1]
    raise ValueError(f"--{role} must be a model directory or one of {sorted(PAIRS)}, got {spec!r}")


def run(args: argparse.Namespace) -> int:
    import torch

    from mdsd.drafters.distill import DistillConfig, distill
    from mdsd.validation import cpu_dtype

    config = config_from_args(DistillConfig, args)
    target = model_path(args.target)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = distill(config, target, args.out, dtype=cpu_dtype(args.dtype))
    print(f"mdsd drafters distill: shards in {out}")
    return 0
