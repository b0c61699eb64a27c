"""Decoding speed per path: the step's time outside its forwards, and tokens/s against Hugging Face generate.

For each decoder path (``eager``: the reference path over transformers caches; a fast-path backend of
``TreeDecoder(compile=...)``: ``none`` on the CPU, ``cudagraph`` on a GPU), each tree and each batch size B:

* ``step_ms``: wall time per decoding step after the first (:func:`mdsd.costs.time_decode`, no EOS; the
  median of ``decodes`` timed decodes);
* ``forwards_ms``: the same step's model forwards timed alone on the same path — their shapes are recorded
  from a decode, then each is timed by :func:`mdsd.measure_profile` with that path (captured where the path
  captures) at the decode's mean cache length;
* ``host_ms = step_ms - forwards_ms`` (sampling, verification, the walk, cache compaction and the host's
  bookkeeping: on a GPU the launch and Python time that graphs remove), and ``step / forwards``;
* on the CPU, ``inner_host_ms`` (paths eager and ``none``): the same with the forwards timed inside the decode
  (:func:`inner_host_seconds`), free of the gap between a profile's forward and the step's own (the
  latter's masks and cache length), the proxy of the step's host work that grows with B.

``none`` as a tree is autoregressive decoding (``TreeDecoder(target, None, None)``). Beside them, at B = 1,
Hugging Face ``generate`` with its default dynamic cache and with ``cache_implementation="static"``
(which compiles the forward; ``--no-hf-static`` skips it). Models: Qwen2-shaped, random weights, built
from a config (``--shape tiny`` on the CPU; ``--shape qwen`` is the real pair's 1.5B / 0.5B architecture).

Run:  python benchmarks/bench_decode.py                       # tiny models on the CPU, a few minutes
      python benchmarks/bench_decode.py --device cuda --dtype bfloat16 --shape qwen --paths eager cudagraph
Writes benchmarks/results/NAME.json (+ .csv; NAME = decode).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import mdsd
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.sources import PromptLookup
from mdsd.tree.cache import ModelCache
from mdsd.tree.spec import compile_option, parse_tree
from mdsd.tree.static import StaticLM

SHAPES = {  # (hidden, intermediate, layers, heads, kv heads, vocabulary)
    "tiny": ((64, 128, 2, 4, 2, 256), (32, 64, 2, 4, 2, 256)),
    "qwen": ((1536, 8960, 28, 12, 2, 151_936), (896, 4864, 24, 14, 2, 151_936)),  # Qwen2.5-1.5B / 0.5B
}

# where prompt lookup alone proposes on the fast path: its default, on the host row by row, inside the step
LOOKUP_TABLES = {"lookup": None, "lookup-host": False, "lookup-device": True}


@dataclass
class Config:
    shape: str = field(default="tiny", metadata={"help": "model shapes: tiny or qwen (1.5B / 0.5B)"})
    device: str = field(default="cpu", metadata={"help": "torch device"})
    dtype: str = field(default="float32", metadata={"help": "model dtype (bfloat16 on a GPU)"})
    paths: tuple[str, ...] = field(default=("eager", "none"), metadata={"help": "eager, or a backend"})
    trees: tuple[str, ...] = field(
        default=("none", "chain:4", "binary:3", "dynamic:4,2,2,8"),
        metadata={
            "help": "none: autoregressive; lookup: prompt lookup alone (-host, -device: where it proposes)"
        },
    )
    verifier: str = field(default="rrsw", metadata={"help": "verifier of multi-draft nodes"})
    batches: tuple[int, ...] = field(default=(1, 64), metadata={"help": "batch sizes B"})
    prompt_tokens: int = field(default=32, metadata={"help": "random prompt length"})
    max_new_tokens: int = field(default=32, metadata={"help": "tokens per row (no EOS)"})
    temperature: float = field(default=0.6, metadata={"help": "sampling temperature"})
    repeats: int = field(default=5, metadata={"help": "timed forwards per shape (median)"})
    decodes: int = field(default=3, metadata={"help": "timed decodes per row (the median's steps)"})
    hf_static: bool = field(default=True, metadata={"help": "also time HF generate with a static cache"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads"})
    seed: int = field(default=0, metadata={"help": "seed of weights, prompts and decoding"})
    name: str = field(default="decode", metadata={"help": "results file name (OUT_DIR/NAME.json)"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where NAME.json goes"})


def build(shape: tuple[int, ...], seed: int, device: str, dtype: str) -> Qwen2ForCausalLM:
    hidden, inter, layers, heads, kv, vocab = shape
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    return model.to(getattr(torch, dtype)).eval()


def _decoder(target, draft, spec: str, cfg: Config, path: str):
    compile = False if path == "eager" else compile_option(path)
    if spec == "none":
        return mdsd.TreeDecoder(
            target, None, None, temperature=cfg.temperature, eos_token_id=[], compile=compile
        )
    if spec.startswith("lookup"):  # prompt lookup alone, one chain of 8 (the draft-sources setting)
        return mdsd.TreeDecoder(
            target,
            None,
            None,
            "topk",
            temperature=cfg.temperature,
            eos_token_id=[],
            source=PromptLookup(),
            retrieve=(1, 8),
            compile=compile,
            propose_inside=None if compile is False else LOOKUP_TABLES[spec],
        )
    tree = parse_tree(spec)
    chain = isinstance(tree, mdsd.Tree) and int(tree.branching.max(initial=0)) == 1
    verifier = "single" if chain else cfg.verifier
    return mdsd.TreeDecoder(
        target, draft, tree, verifier, temperature=cfg.temperature, eos_token_id=[], compile=compile
    )


@contextlib.contextmanager
def watched_forwards(wrap):
    """Inside: every model forward of both decoder paths (``ModelCache.forward``, ``StaticLM.forward``)
    is ``wrap(original)``; restored on exit. Only steps that call the models from Python see it (eager, or
    the fast path's "none": a captured step replays without calling them)."""
    originals = {cls: cls.forward for cls in (ModelCache, StaticLM)}
    for cls, fn in originals.items():
        cls.forward = wrap(fn)
    try:
        yield
    finally:
        for cls, fn in originals.items():
            cls.forward = fn


def step_shapes(decoder, prompts: list[list[int]], new_tokens: int) -> list[tuple[str, int, int]]:
    """(model, rows, tokens) of each forward of one steady step: the forwards between the last two target
    forwards of a decode (each step ends with its target forward; the decode must take two steps). Run it
    on a path whose steps call the models from Python (:func:`watched_forwards`)."""
    calls = []

    def recorder(original):
        def forward(self, ids, *args, **kwargs):
            who = "target" if self.model is decoder.target else "draft"
            calls.append((who, int(ids.shape[0]), int(ids.shape[1])))
            return original(self, ids, *args, **kwargs)

        return forward

    with watched_forwards(recorder):
        decoder.generate_batch(prompts, new_tokens, torch.Generator(device=_device(decoder)).manual_seed(0))
    ends = [i for i, (who, _, _) in enumerate(calls) if who == "target"]
    return calls[ends[-2] + 1 : ends[-1] + 1]


def inner_host_seconds(decoder, prompts: list[list[int]], cfg: Config) -> float:
    """Seconds per step after the first that the step spends outside its model forwards, with the forwards
    timed inside the decode itself: the same step minus the same calls, no profile at another context
    (CPU only, where the forwards run synchronously; on a path whose steps call the models from Python).
    The median over ``cfg.decodes`` pairs of decodes (``max_new_tokens``, then 1 token: the difference
    leaves out the first step, as :func:`mdsd.costs.time_decode` does)."""
    spent = [0.0]

    def timed(original):
        def forward(self, *args, **kwargs):
            start = time.perf_counter()
            out = original(self, *args, **kwargs)
            spent[0] += time.perf_counter() - start
            return out

        return forward

    def run(new_tokens: int) -> tuple[float, int]:  # (seconds outside the forwards, steps)
        spent[0] = 0.0
        outs = decoder.generate_batch(prompts, new_tokens, torch.Generator().manual_seed(cfg.seed))
        return outs[0].timings["total"] - spent[0], max(o.steps for o in outs)

    with watched_forwards(timed):
        run(cfg.max_new_tokens)  # warm-up
        samples = []
        for _ in range(cfg.decodes):
            (outside, steps), (first, _) = run(cfg.max_new_tokens), run(1)
            samples.append((outside - first) / (steps - 1))
    return float(np.median(samples))


def _device(decoder) -> torch.device:
    return next(decoder.target.parameters()).device


def forwards_seconds(decoder, shapes, context: int, cfg: Config, path: str) -> float:
    """The recorded forwards timed alone on ``path`` (eager: transformers caches; else static, captured)."""
    compile = False if path == "eager" else compile_option(path)
    total = 0.0
    for who in ("draft", "target"):
        mine = [(b, t) for w, b, t in shapes if w == who]
        if not mine:
            continue
        model = decoder.target if who == "target" else decoder.draft
        batch, tokens = mine[0][0], sorted({t for _, t in mine})
        profile = mdsd.measure_profile(
            model, [batch], tokens, [context], repeats=cfg.repeats, progress=False, compile=compile
        )
        total += sum(profile.seconds(b, t, context) for b, t in mine)
    return total


def hf_generate(target, prompt: torch.Tensor, cfg: Config, static: bool) -> float:
    """Tokens/s of ``target.generate`` (sampling, B = 1) after one warm-up call."""
    kwargs = dict(max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.max_new_tokens, do_sample=True)
    kwargs.update(temperature=cfg.temperature, top_k=None, top_p=None, pad_token_id=0)
    if static:
        kwargs["cache_implementation"] = "static"
    target.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    _sync(prompt.device)
    start = time.perf_counter()
    target.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    _sync(prompt.device)
    return cfg.max_new_tokens / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_row(
    target, draft, spec: str, path: str, prompts: list[list[int]], cfg: Config, forwards_path: str = ""
) -> dict:
    """One decoding row: the median of ``cfg.decodes`` timed decodes of ``prompts`` (B = their number) with
    tree ``spec`` on ``path``, its model forwards timed alone on ``forwards_path`` (default ``path``), and
    what follows (step, forwards and host ms, step ÷ forwards, tokens/s; ``seconds_with_warm_up``: the
    first timed decode's wall time, warm-up and compilation included)."""
    decoder = _decoder(target, draft, spec, cfg, path)
    start = time.perf_counter()
    runs = [mdsd.costs.time_decode(decoder, prompts, cfg.max_new_tokens, cfg.seed)]
    warm_up = time.perf_counter() - start
    runs += [
        mdsd.costs.time_decode(decoder, prompts, cfg.max_new_tokens, cfg.seed) for _ in range(cfg.decodes - 1)
    ]
    timed = sorted(runs, key=lambda t: t.seconds)[len(runs) // 2]
    context = int(np.mean([c for _, c, _ in timed.schedule]))
    recorder = _decoder(target, draft, spec, cfg, "eager" if path == "eager" else "none")
    shapes = step_shapes(recorder, prompts, cfg.max_new_tokens)
    forwards = forwards_seconds(decoder, shapes, context, cfg, forwards_path or path)
    step, B = timed.seconds / timed.steps, len(prompts)
    return {
        "path": path,
        "tree": spec,
        "batch": B,
        "steps": timed.steps,
        "tokens_per_step": timed.tokens / (timed.steps * B),
        "tokens_per_second": timed.tokens / timed.seconds,
        "step_ms": 1e3 * step,
        "forwards_ms": 1e3 * forwards,
        "host_ms": 1e3 * (step - forwards),
        "step_over_forwards": step / forwards,
        "seconds_with_warm_up": warm_up,
        "forwards": " ".join(f"{w[0]}{b}x{t}" for w, b, t in shapes),
    }


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    torch.set_num_threads(cfg.threads)
    target_shape, draft_shape = SHAPES[cfg.shape]
    target = build(target_shape, cfg.seed, cfg.device, cfg.dtype)
    draft = build(draft_shape, cfg.seed + 1, cfg.device, cfg.dtype)
    vocab = target.config.vocab_size
    gen = torch.Generator().manual_seed(cfg.seed)
    prompts = torch.randint(vocab, (max(cfg.batches), cfg.prompt_tokens), generator=gen).tolist()
    rows, cpu = [], torch.device(cfg.device).type == "cpu"
    for path in cfg.paths:
        inner = cpu and path in ("eager", "none")  # the step calls the forwards from Python
        for spec in cfg.trees:
            for B in cfg.batches:
                row = measure_row(target, draft, spec, path, prompts[:B], cfg)
                decoder = _decoder(target, draft, spec, cfg, path)
                row["inner_host_ms"] = 1e3 * inner_host_seconds(decoder, prompts[:B], cfg) if inner else None
                rows.append(row)
                note = f" (inside the step {row['inner_host_ms']:6.2f} ms)" if inner else ""
                print(
                    f"{path:>9} {spec:>16} B={B:<3} step {row['step_ms']:8.2f} ms, forwards "
                    f"{row['forwards_ms']:8.2f} ms, host {row['host_ms']:8.2f} ms{note}, "
                    f"{row['tokens_per_second']:9.1f} tokens/s"
                )
    prompt = torch.tensor(prompts[:1], device=cfg.device)
    for static in (False, True) if cfg.hf_static else (False,):
        rate = hf_generate(target, prompt, cfg, static)
        name = "hf-generate-static" if static else "hf-generate"
        rows.append({"path": name, "tree": "none", "batch": 1, "tokens_per_second": rate})
        print(f"{name:>20} B=1   {rate:9.1f} tokens/s")
    write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed)


if __name__ == "__main__":
    main()
