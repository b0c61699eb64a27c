"""Tree decoding costs on a mid-size model (random weights from a config; no downloads).

Two questions (issue 5):
1. The verify walk's share of a decoding step, for every verifier (target: <= 5%). Each verifier decodes
   the same prompt with a full binary tree of depth 4 (30 drafted nodes; a chain of 4 for "single");
   the step time is the sum of the draft, target, verify and cache phases of ``TreeDecodeOutput.timings``.
2. The cost of one target forward over a 31-node tree (tree attention mask) relative to a one-token
   forward, both after a KV prefix of ``prefix`` tokens (the baseline, measured side by side).

Run:  python benchmarks/bench_tree.py [--threads 2] [--max-new-tokens 48]
Writes benchmarks/results/tree.json (+ .csv).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from mdsd import VERIFIERS, Tree, TreeDecoder, measure_profile
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.verifiers import supports


@dataclass
class Config:
    vocab: int = field(default=32_000, metadata={"help": "vocabulary of both models"})
    hidden: int = field(default=768, metadata={"help": "target hidden size (12 layers: ~135M parameters)"})
    layers: int = field(default=12, metadata={"help": "target layers"})
    draft_hidden: int = field(default=256, metadata={"help": "draft hidden size (2 layers)"})
    prefix: int = field(default=128, metadata={"help": "prompt / KV prefix length"})
    max_new_tokens: int = field(default=48, metadata={"help": "tokens decoded per verifier"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    repeats: int = field(default=15, metadata={"help": "timed forwards per variant (median reported)"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads (the machine is shared)"})
    seed: int = field(default=0, metadata={"help": "seed of weights, prompt and decoding"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where tree.json goes"})


def model(vocab: int, hidden: int, layers: int, seed: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(hidden // 64, 1),
        num_key_value_heads=max(hidden // 64, 1),
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def forward_cost(target, prefix: int, tree: Tree, repeats: int) -> dict:
    """Median seconds of a one-token forward and of a tree forward, each after the same KV prefix
    (:func:`mdsd.costs.measure_profile`, the decoder's own masks and cache)."""
    profile = measure_profile(target, [1], [1, tree.num_nodes], [prefix], repeats=repeats, progress=False)
    one, whole = profile.seconds(1, 1, prefix), profile.seconds(1, tree.num_nodes, prefix)
    return {
        "one_token_forward_s": one,
        "tree_forward_s": whole,
        "tree_nodes": tree.num_nodes,
        "tree_over_one_token": whole / one,
    }


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    torch.set_num_threads(cfg.threads)
    target = model(cfg.vocab, cfg.hidden, cfg.layers, cfg.seed)
    draft = model(cfg.vocab, cfg.draft_hidden, 2, cfg.seed + 1)
    params = sum(p.numel() for p in target.parameters())
    prompt = torch.randint(0, cfg.vocab, (1, cfg.prefix), generator=torch.Generator().manual_seed(cfg.seed))
    binary = Tree.kary([2, 2, 2, 2])
    forward = forward_cost(target, cfg.prefix, binary, cfg.repeats)
    ratio = forward["tree_over_one_token"]
    print(f"target {params / 1e6:.0f}M parameters; tree / one-token forward = {ratio:.2f}x")
    rows = []
    for name in VERIFIERS:
        binary_ok = supports(name, 2)  # else one draft per node: a chain
        tree = binary if binary_ok else Tree.chain(4)
        dec = TreeDecoder(target, draft, tree, verifier=name, temperature=cfg.temperature)
        dec.generate(prompt, 4, torch.Generator().manual_seed(cfg.seed))  # warm-up
        out = dec.generate(prompt, cfg.max_new_tokens, torch.Generator().manual_seed(cfg.seed))
        step = sum(out.timings[phase] for phase in ("draft", "target", "verify", "cache"))
        row = {
            "verifier": name,
            "tree": "binary:4" if binary_ok else "chain:4",
            "steps": out.steps,
            "tokens_per_step": out.mean_tokens_per_step,
            **{f"{phase}_s": t for phase, t in out.timings.items() if phase != "total"},
            "verify_share": out.timings["verify"] / step,
            "step_ms": 1e3 * step / out.steps,
        }
        rows.append(row)
        print(f"{name:>8}: verify share {row['verify_share']:.2%}, {row['tokens_per_step']:.2f} tokens/step")
    write_results(cfg.out_dir, "tree", rows, cfg, cfg.seed, target_parameters=params, forward=forward)


if __name__ == "__main__":
    main()
