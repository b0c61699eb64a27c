"""Prompt lookup for a batch: one table on the device (``propose_table``) against ``propose`` row by row.

The decoder's fast path makes a source's proposals inside its step on an accelerator
(:meth:`mdsd.sources.PromptLookup.propose_table`: fixed shapes, no host read) and row by row on the host
on the CPU. This times both for B contexts in a [B, L] buffer (the step's context buffer, L its
capacity): ``table_ms`` one call of ``propose_table`` (eager; ``--compiled``: also under
``torch.compile``, on CUDA captured in a CUDA graph as the step is), ``rows_ms`` B calls of ``propose``
on Python lists (what the host path does, given the lists), and their ratio. The contexts are text-like:
spans copied from earlier in the row between fresh tokens, so matches are many and ties real.

Run:  python benchmarks/bench_lookup.py                      # the CPU, a minute
      python benchmarks/bench_lookup.py --device cuda --compiled
Writes benchmarks/results/NAME.json (+ .csv; NAME = lookup).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.sources import PromptLookup


@dataclass
class Config:
    device: str = field(default="cpu", metadata={"help": "torch device of the table"})
    batches: tuple[int, ...] = field(default=(1, 64), metadata={"help": "batch sizes B"})
    capacities: tuple[int, ...] = field(default=(256, 2048), metadata={"help": "buffer lengths L"})
    shapes: tuple[str, ...] = field(default=("1x8", "2x3", "4x4"), metadata={"help": "width x depth"})
    vocab: int = field(default=151_936, metadata={"help": "token ids drawn below this"})
    compiled: bool = field(default=False, metadata={"help": "also time the table compiled (and captured)"})
    repeats: int = field(default=20, metadata={"help": "timed calls (median)"})
    threads: int = field(default=2, metadata={"help": "torch CPU threads"})
    seed: int = field(default=0, metadata={"help": "seed of the contexts"})
    name: str = field(default="lookup", metadata={"help": "results file name (OUT_DIR/NAME.json)"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where NAME.json goes"})


def contexts(B: int, L: int, vocab: int, rng: np.random.Generator) -> list[list[int]]:
    """B text-like rows of 3L/4 tokens: fresh tokens, then spans of 4..32 copied from earlier in the row."""
    rows = []
    for _ in range(B):
        row = rng.integers(vocab, size=16).tolist()
        while len(row) < 3 * L // 4:
            if rng.random() < 0.5:
                start, span = int(rng.integers(len(row))), int(rng.integers(4, 33))
                row += row[start : start + span]
            else:
                row += rng.integers(vocab, size=int(rng.integers(1, 9))).tolist()
        rows.append(row[: 3 * L // 4])
    return rows


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, repeats: int, device: torch.device) -> float:
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    torch.set_num_threads(cfg.threads)
    device, source = torch.device(cfg.device), PromptLookup()
    rng = np.random.default_rng(cfg.seed)
    rows = []
    for L in cfg.capacities:
        for B in cfg.batches:
            lists = contexts(B, L, cfg.vocab, rng)
            tokens = torch.zeros(B, L, dtype=torch.long)
            for b, row in enumerate(lists):
                tokens[b, : len(row)] = torch.tensor(row)
            tokens = tokens.to(device)
            lengths = torch.tensor([len(r) for r in lists], device=device)
            for shape in cfg.shapes:
                width, depth = (int(x) for x in shape.split("x"))
                result = {"device": str(device), "capacity": L, "batch": B, "width": width, "depth": depth}
                result.update(time_shape(source, lists, tokens, lengths, width, depth, cfg))
                rows.append(result)
                print(
                    f"L={L:5d} B={B:3d} {shape:>4}: rows {result['rows_ms']:8.3f} ms, table "
                    f"{result['table_ms']:8.3f} ms"
                    + (f", compiled {result['compiled_table_ms']:8.3f} ms" if cfg.compiled else "")
                )
    write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed)


def time_shape(source, lists, tokens, lengths, width: int, depth: int, cfg: Config) -> dict[str, float]:
    """The timings of one (B, L, width, depth), after checking that both ways give the same proposals."""
    table = source.propose_table(tokens, lengths, width, depth)
    for b, row in enumerate(lists):  # the same proposals: the benchmark times one answer
        got = [[t for t in chain if t >= 0] for chain in table[b].tolist()]
        want = [list(c.tokens) for c in source.propose(row, width, depth)]
        assert got[: len(want)] == want and not any(got[len(want) :]), (b, got, want)
    out = {
        "rows_ms": 1e3
        * median_seconds(
            lambda: [source.propose(r, width, depth) for r in lists], cfg.repeats, tokens.device
        ),
        "table_ms": 1e3
        * median_seconds(
            lambda: source.propose_table(tokens, lengths, width, depth), cfg.repeats, tokens.device
        ),
    }
    if cfg.compiled:
        fast = compiled_table(source, tokens, lengths, width, depth)
        out["compiled_table_ms"] = 1e3 * median_seconds(fast, cfg.repeats, tokens.device)
    out["table_over_rows"] = out["table_ms"] / out["rows_ms"]
    return out


def compiled_table(source: PromptLookup, tokens, lengths, width: int, depth: int):
    """``propose_table`` under ``torch.compile(fullgraph=True)`` (inductor); on CUDA then captured in one
    CUDA graph, as the decoder's "inductor-cudagraph" step is. A callable of no arguments."""
    from mdsd.tree.compiled import capture

    def call() -> torch.Tensor:
        return source.propose_table(tokens, lengths, width, depth)

    call()
    return capture(call, "inductor-cudagraph" if tokens.device.type == "cuda" else "inductor")


if __name__ == "__main__":
    main()
