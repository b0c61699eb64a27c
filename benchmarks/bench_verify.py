"""Speed and memory of the batched verifiers, and of the exact acceptance routines (issue 3).

Two measurements, in one run:
1. ``v.verify`` on a batch of ``batch`` nodes at vocabulary ``n`` (a Qwen2.5 vocabulary), float32,
   for every verifier at k = 2 and 4 (single: k = 1; SpecHub: k = 2 only): median wall time per node,
   and peak memory per node. Baselines measured side by side: ``torch.multinomial`` drawing one token
   per row from p over the same batch (the cost of plain sampling), and the slow float64 reference
   (``mdsd.verifiers.reference``) on a sub-batch of ``reference_rows`` rows.
   Memory: torch's CPU allocations are invisible to tracemalloc, so a thread samples the process's
   resident set (/proc/self/statm) every millisecond during the call; the peak minus the resident set
   just before the call, divided by the batch, is reported (tensors this large are mmap-ed and given
   back on free, so the resident set tracks live tensors; spikes shorter than ~1 ms can be missed).
   The same figure is reported for the multinomial baseline.
2. ``v.acceptance(p, q)`` at n for every verifier with a closed form (RRSw k = 2 only): median of
   ``repeats`` calls in ms, against the baseline of one pass Σ min(p, q) over the same vectors.

Pairs are synthetic but real-size: target logits z ~ scale · N(0, 1), draft logits z + noise · N(0, 1),
both through a softmax (no model downloads).

Run:  python benchmarks/bench_verify.py [--batch 1024] [--threads 1]
Writes benchmarks/results/verify.json (+ .csv). Acceptance timings alone (seconds, not 20 minutes):
      python benchmarks/bench_verify.py --no-verify --batch 1 --acceptance-repeats 21 \
          --name verify_acceptance
"""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

import mdsd
from mdsd.experiment import config_from_cli, write_results
from mdsd.verifiers import draw_uniforms
from mdsd.verifiers.reference import reference_verify


@dataclass
class Config:
    n: int = field(default=151_936, metadata={"help": "vocabulary size (Qwen2.5)"})
    batch: int = field(default=1024, metadata={"help": "nodes verified in one call"})
    scale: float = field(default=3.0, metadata={"help": "std of the target logits"})
    noise: float = field(default=1.0, metadata={"help": "std of the draft's logit perturbation"})
    repeats: int = field(default=3, metadata={"help": "timed verify calls (median reported)"})
    acceptance_repeats: int = field(default=7, metadata={"help": "timed acceptance calls (median)"})
    reference_rows: int = field(default=4, metadata={"help": "rows of the float64 reference baseline"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads (the machine is shared)"})
    seed: int = field(default=0, metadata={"help": "seed of the pairs, drafts and uniforms"})
    verify: bool = field(default=True, metadata={"help": "run the verify section (else acceptance only)"})
    name: str = field(default="verify", metadata={"help": "results file name (benchmarks/results/NAME.json)"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where verify.json goes"})


PAGE = os.sysconf("SC_PAGE_SIZE")


def resident() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE


def measure(call, repeats: int) -> tuple[float, int]:
    """(median seconds, peak resident-set growth in bytes over the calls) of ``call()``."""
    times, peak = [], 0
    for _ in range(repeats):
        gc.collect()
        base, top, done = resident(), [0], threading.Event()

        def watch(base=base, top=top, done=done):
            while not done.is_set():
                top[0] = max(top[0], resident() - base)
                time.sleep(0.001)

        watcher = threading.Thread(target=watch)
        watcher.start()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
        done.set()
        watcher.join()
        peak = max(peak, top[0], resident() - base)
    return statistics.median(times), peak


def logit_pair(gen: torch.Generator, rows: int, n: int, scale: float, noise: float):
    """Softmax pairs [rows, n] in float32: target logits scale·N(0,1), draft logits target + noise·N(0,1)."""
    z = torch.randn(rows, n, generator=gen).mul_(scale)
    p = torch.softmax(z, -1)
    z.add_(torch.randn(rows, n, generator=gen).mul_(noise))
    return p, torch.softmax(z, -1)


GRID = [("single", 1)] + [
    (name, k) for name in mdsd.VERIFIERS[1:] for k in (2, 4) if name != "spechub" or k == 2
]


def verify_rows(cfg: Config, p: torch.Tensor, q: torch.Tensor, gen: torch.Generator) -> list[dict]:
    rows = []
    base_time, base_mem = measure(lambda: torch.multinomial(p, 1, generator=gen), cfg.repeats)
    rows.append(
        {
            "section": "verify",
            "verifier": "multinomial(p) baseline",
            "k": 0,
            "us_per_node": 1e6 * base_time / cfg.batch,
            "bytes_per_node": base_mem / cfg.batch,
        }
    )
    sub_p, sub_q = p[: cfg.reference_rows].double(), q[: cfg.reference_rows].double()
    for name, k in tqdm(GRID, desc="verify"):
        v = mdsd.verifier(name, k)
        drafts = v.draft(q, gen)
        seconds, peak = measure(lambda v=v, drafts=drafts: v.verify(p, q, drafts, gen), cfg.repeats)
        u = draw_uniforms((cfg.reference_rows,), k, gen)
        start = time.perf_counter()
        reference_verify(name, sub_p, sub_q, drafts[: cfg.reference_rows], u)
        reference = (time.perf_counter() - start) / cfg.reference_rows
        rows.append(
            {
                "section": "verify",
                "verifier": name,
                "k": k,
                "us_per_node": 1e6 * seconds / cfg.batch,
                "bytes_per_node": peak / cfg.batch,
                "bytes_per_node_over_inputs": peak / (cfg.batch * 2 * cfg.n * 4),
                "vs_multinomial": seconds / base_time,
                "reference_us_per_node": 1e6 * reference,
                "speedup_vs_reference": reference * cfg.batch / seconds,
            }
        )
    return rows


def acceptance_rows(cfg: Config, p: np.ndarray, q: np.ndarray) -> list[dict]:
    def median_ms(call):
        call()
        times = []
        for _ in range(cfg.acceptance_repeats):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return 1e3 * statistics.median(times)

    base = median_ms(lambda: np.minimum(p, q).sum())
    rows = [{"section": "acceptance", "verifier": "sum(min(p, q)) baseline", "k": 0, "ms": base}]
    for name, k in tqdm(GRID, desc="acceptance"):
        if name == "rrsw" and k > 2:
            continue  # exact only by enumeration: no closed form at this n
        v = mdsd.verifier(name, k)
        ms = median_ms(lambda v=v: v.acceptance(p, q))
        rows.append(
            {
                "section": "acceptance",
                "verifier": name,
                "k": k,
                "ms": ms,
                "vs_baseline": ms / base,
                "value": v.acceptance(p, q),
            }
        )
    return rows


def main() -> None:
    cfg = config_from_cli(Config)
    torch.set_num_threads(cfg.threads)
    gen = torch.Generator().manual_seed(cfg.seed)
    start = time.perf_counter()
    p, q = logit_pair(gen, cfg.batch, cfg.n, cfg.scale, cfg.noise)
    p64, q64 = p[0].double().numpy(), q[0].double().numpy()  # float32 softmax sums to 1 only within ~1e-5
    rows = acceptance_rows(cfg, p64 / p64.sum(), q64 / q64.sum())
    if cfg.verify:
        rows += verify_rows(cfg, p, q, gen)
    del p, q
    summary = {
        "total_seconds": time.perf_counter() - start,
        "machine": f"{os.cpu_count()}-core CPU, {cfg.threads} torch thread(s), "
        f"load average {os.getloadavg()[0]:.1f}",
        "acceptance_max_ms": max(r["ms"] for r in rows if r["section"] == "acceptance" and r["k"]),
    }
    paths = write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed, summary=summary)
    for row in rows:
        print({key: round(val, 3) if isinstance(val, float) else val for key, val in row.items()})
    print(summary)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
