"""Speed of the optimal verifier (i.i.d. drafts) against RRS, per node, at a real vocabulary (issue 13).

For each batch size and k: median wall time of ``v.verify(p, q, drafts)`` over ``repeats`` calls for
``mdsd.verifier("optimal", k)`` and, in the same run on the same pairs and drafts, for
``mdsd.verifier("rrs", k)``; the ratio optimal / RRS is the figure of merit (goal <= 2). The optimal
verifier's time at batch 1 is split into its phases on one extra call: the sort and selection law
(``iid_layout``), the drafted tokens' windows (``window_tops``) and the drafts' depths
(``draft_depths``). Published figures, for orientation only (other hardware, other settings): Partial
Resolution (Thomas & Pal, NeurIPS 2025) "under 2 ms per token" on a GPU, Global Resolution (ICLR 2026)
40-95 ms per token.

Pairs are synthetic but real-size: target logits z ~ scale · N(0, 1), draft logits z + noise · N(0, 1),
softmax in float32 (no model downloads).

Run:  python benchmarks/bench_optimal.py [--batches 1,1024] [--ks 2,4,8] [--threads 1]
Writes benchmarks/results/optimal.json (+ .csv).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

import torch

import mdsd
from mdsd.experiment import config_from_cli, write_results
from mdsd.verifiers.layout import draft_depths, iid_layout, window_tops


@dataclass
class Config:
    n: int = field(default=151_936, metadata={"help": "vocabulary size (Qwen2.5)"})
    batches: str = field(default="1,1024", metadata={"help": "comma-separated nodes per verify call"})
    ks: str = field(default="2,4,8", metadata={"help": "comma-separated draft counts"})
    scale: float = field(default=3.0, metadata={"help": "std of the target logits"})
    noise: float = field(default=1.0, metadata={"help": "std of the draft's logit perturbation"})
    repeats: int = field(default=5, metadata={"help": "timed calls at batch 1 (median reported)"})
    big_repeats: int = field(default=1, metadata={"help": "timed calls at batches above 1"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads (the machine is shared)"})
    seed: int = field(default=0, metadata={"help": "seed of the pairs, drafts and uniforms"})
    name: str = field(
        default="optimal", metadata={"help": "results file name (benchmarks/results/NAME.json)"}
    )
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where NAME.json goes"})


def logit_pair(gen: torch.Generator, rows: int, n: int, scale: float, noise: float):
    """Softmax pairs [rows, n] in float32: target logits scale·N(0,1), draft logits target + noise·N(0,1)."""
    z = torch.randn(rows, n, generator=gen).mul_(scale)
    p = torch.softmax(z, -1)
    z.add_(torch.randn(rows, n, generator=gen).mul_(noise))
    return p, torch.softmax(z, -1)


def median_time(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def phases(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, k: int, gen: torch.Generator) -> dict:
    """Seconds of the optimal verifier's phases on one call: layout (sort + law), windows, depths."""
    start = time.perf_counter()
    lay = iid_layout(p.double(), q.double(), k)
    mid = time.perf_counter()
    rows = torch.arange(p.shape[0]).unsqueeze(-1).expand(drafts.shape).reshape(-1)
    pos = lay.rank[rows, drafts.reshape(-1)]
    tops = window_tops(lay, rows, pos)
    after = time.perf_counter()
    draft_depths(lay, rows, pos, tops, torch.rand(pos.shape, generator=gen, dtype=torch.float64))
    end = time.perf_counter()
    return {"layout_s": mid - start, "windows_s": after - mid, "depths_s": end - after}


def main() -> None:
    cfg = config_from_cli(Config)
    torch.set_num_threads(cfg.threads)
    gen = torch.Generator().manual_seed(cfg.seed)
    start = time.perf_counter()
    rows = []
    for batch in (int(b) for b in cfg.batches.split(",")):
        p, q = logit_pair(gen, batch, cfg.n, cfg.scale, cfg.noise)
        repeats = cfg.repeats if batch == 1 else cfg.big_repeats
        for k in (int(k) for k in cfg.ks.split(",")):
            optimal, rrs = mdsd.verifier("optimal", k), mdsd.verifier("rrs", k)
            drafts = optimal.draft(q, gen)
            t_rrs = median_time(lambda v=rrs, d=drafts, a=p, b=q: v.verify(a, b, d, gen), repeats)
            t_opt = median_time(lambda v=optimal, d=drafts, a=p, b=q: v.verify(a, b, d, gen), repeats)
            split = phases(p, q, drafts, k, gen) if batch == 1 else {}
            row = {
                "batch": batch,
                "k": k,
                "rrs_ms_per_node": 1e3 * t_rrs / batch,
                "optimal_ms_per_node": 1e3 * t_opt / batch,
                "ratio": t_opt / t_rrs,
            }
            row.update(
                {key.replace("_s", "_ms_per_node"): 1e3 * value / batch for key, value in split.items()}
            )
            rows.append(row)
            print(
                {key: round(val, 3) if isinstance(val, float) else val for key, val in row.items()},
                flush=True,
            )
    summary = {
        "total_seconds": time.perf_counter() - start,
        "machine": f"{os.cpu_count()}-core CPU, {cfg.threads} torch thread(s), "
        f"load average {os.getloadavg()[0]:.1f}",
    }
    print(summary)
    print("wrote", *write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed, summary=summary))


if __name__ == "__main__":
    main()
