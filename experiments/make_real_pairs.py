"""Regenerate the bundled corpus of real (p, q) pairs, ``mdsd/data/real_pairs.npz``.

Needs the cached models (``mdsd models fetch qwen2.5-coder``) or any local pair (--target/--draft).
For each prompt: sample a continuation from the target (fixed seed), run each model once over
prompt + continuation, keep the union of both top-m supports and the tail log-masses
(:func:`mdsd.data.real_pairs.truncate_logits`). About 2 minutes per prompt on a busy 2-core CPU.

    python experiments/make_real_pairs.py                 # the bundled corpus
    python experiments/make_real_pairs.py --prompts-per-set 2 --out /tmp/small.npz
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from mdsd.data.corpus import TEMPERATURES, concat_records, save_corpus, truncate_logits
from mdsd.data.prompts import PROMPT_SETS, prompts
from mdsd.harness.experiment import config_from_cli, metadata, run_script
from mdsd.hf.fetch import PAIRS
from mdsd.hf.load import load_pair, pair_paths
from mdsd.hf.record import record_prompt


@dataclass
class Config:
    """Regenerate the bundled real (p, q) corpus."""

    target: str = field(default="", metadata={"help": "target model directory ('' = cached qwen2.5-coder)"})
    draft: str = field(default="", metadata={"help": "draft model directory ('' = cached qwen2.5-coder)"})
    datasets: tuple[str, ...] = field(
        default=("mt-bench", "humaneval", "news"), metadata={"help": "prompt sets"}
    )
    prompts_per_set: int = field(default=11, metadata={"help": "first n prompts of each set (33 in all)"})
    max_prompt_tokens: int = field(default=128, metadata={"help": "templated prompt length cap"})
    max_new_tokens: int = field(default=34, metadata={"help": "continuation length (stops early at eos)"})
    sample_temperature: float = field(
        default=0.6, metadata={"help": "target temperature of the continuation"}
    )
    m: int = field(default=256, metadata={"help": "top-m of each model kept per position"})
    seed: int = field(default=0, metadata={"help": "seed of the continuation sampler"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads (the machine is shared)"})
    out: str = field(default="mdsd/data/real_pairs.npz", metadata={"help": "output .npz"})


def main(argv: list[str] | None = None) -> None:
    config = config_from_cli(Config, argv)
    torch.set_num_threads(config.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target_dir, draft_dir = (config.target, config.draft) if config.target else pair_paths("qwen2.5-coder")
    target, draft, tokenizer = load_pair(target_dir, draft_dir, dtype="float32")
    generator = torch.Generator().manual_seed(config.seed)
    names = np.array(config.datasets)
    records = []
    todo = [
        p
        for name in config.datasets
        for p in prompts(name, config.prompts_per_set, tokenizer, config.max_prompt_tokens)
    ]
    for prompt in tqdm(todo, desc="prompts"):
        continuation, p_logits, q_logits = record_prompt(
            target,
            draft,
            torch.tensor(prompt.input_ids),
            config.max_new_tokens,
            config.sample_temperature,
            generator,
            tokenizer.eos_token_id,
        )
        record = truncate_logits(p_logits, q_logits, config.m, TEMPERATURES)
        rows = continuation.numel()
        record["dataset"] = np.full(rows, config.datasets.index(prompt.dataset), dtype=np.int8)
        record["prompt"] = np.full(rows, prompt.index, dtype=np.int32)
        record["position"] = np.arange(rows, dtype=np.int32)
        records.append(record)
    arrays = concat_records(records)
    arrays["temperatures"] = np.array(TEMPERATURES, dtype=np.float64)
    arrays["dataset_names"] = names
    pair = PAIRS["qwen2.5-coder"]
    info = {
        **metadata(config, config.seed),
        "target": str(target_dir),
        "draft": str(draft_dir),
        "gguf_sha256": {"target": pair.target.sha256, "draft": pair.draft.sha256}
        if not config.target
        else None,
        "prompt_sets": {name: PROMPT_SETS[name].requirement for name in config.datasets},
        "vocab_size": int(p_logits.shape[1]),
    }
    path = save_corpus(config.out, arrays, info)
    rows = arrays["offsets"].size - 1
    print(f"{rows} positions from {len(todo)} prompts -> {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    run_script(main)
