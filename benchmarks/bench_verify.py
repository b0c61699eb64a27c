"""Speed of the batched verifiers against the memory pass, and of the exact acceptance routines.

Two measurements, in one run:
1. Verification of one decoding node (batch 1) and of 1024 nodes at once, at vocabulary ``n`` (a Qwen2.5
   vocabulary), float32, for every verifier at k = 2, 4 and 8 where it runs (single: k = 1; SpecHub:
   k = 2): median time per node of ``verify_unchecked`` (the kernel the decoder calls) and of the
   validated ``verify``, each divided by the median time per node of one memory pass
   ``p.sum() + q.sum()`` over the same batch, timed right before it (side by side, so the ratio is
   robust to the machine's load). Times are CPU times of the process (user + system, page faults
   included). A checkout without the kernels (``--legacy``, e.g. the code before issue 12) times
   ``verify`` only. Beside them, per row, the slow float64 reference
   (``mdsd.verifiers.reference``) on ``reference_rows`` rows, and ``draft_unchecked`` per node.
2. ``v.acceptance(p, q)`` at n for every verifier with a closed form (RRSw k = 2 only): median of
   ``acceptance_repeats`` calls in ms, against the baseline of one pass Σ min(p, q) over the same vectors.

Pairs are synthetic but real-size: target logits z ~ scale · N(0, 1), draft logits z + noise · N(0, 1),
both through a softmax (no model downloads).

Run:  python benchmarks/bench_verify.py                       (writes benchmarks/results/verify.json)
      python benchmarks/bench_verify.py --device cuda --no-acceptance --reference-rows 0 --name verify_cuda
      PYTHONPATH=/path/to/old/checkout python benchmarks/bench_verify.py --legacy --name verify_before
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from timing import logit_pair, median_seconds
from tqdm import tqdm

import mdsd
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.verifiers import draw_uniforms
from mdsd.verifiers.reference import reference_verify


@dataclass
class Config:
    device: str = field(default="cpu", metadata={"help": "cpu or cuda"})
    n: int = field(default=151_936, metadata={"help": "vocabulary size (Qwen2.5)"})
    batches: tuple[int, ...] = field(default=(1, 1024), metadata={"help": "nodes verified in one call"})
    ks: tuple[int, ...] = field(default=(2, 4, 8), metadata={"help": "numbers of drafts (where supported)"})
    scale: float = field(default=3.0, metadata={"help": "std of the target logits"})
    noise: float = field(default=1.0, metadata={"help": "std of the draft's logit perturbation"})
    calls: int = field(default=101, metadata={"help": "timed calls x batch per measurement"})
    min_calls: int = field(default=3, metadata={"help": "fewest timed calls per measurement"})
    warmup: int = field(default=1, metadata={"help": "untimed calls before each measurement"})
    acceptance_repeats: int = field(default=7, metadata={"help": "timed acceptance calls (median)"})
    reference_rows: int = field(default=4, metadata={"help": "rows of the float64 reference (0: skip it)"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads (the machine is shared)"})
    seed: int = field(default=0, metadata={"help": "seed of the pairs, drafts and uniforms"})
    legacy: bool = field(default=False, metadata={"help": "time verify() only (a checkout without kernels)"})
    acceptance: bool = field(default=True, metadata={"help": "also run the acceptance section"})
    name: str = field(default="verify", metadata={"help": "results file name (benchmarks/results/NAME.json)"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where the results go"})


def grid(ks: tuple[int, ...]) -> list[tuple[str, int]]:
    """(verifier, k) for every verifier at every k of ``ks`` it runs with, or at its only k."""
    out = []
    for name in mdsd.VERIFIERS:
        runs = []
        for k in (1, *ks):
            try:
                mdsd.verifier(name, k)
            except ValueError:
                continue
            runs.append(k)
        out += [(name, k) for k in runs if k > 1 or runs == [1]]
    return out


def verify_rows(cfg: Config, batch: int, gen: torch.Generator) -> list[dict]:
    device = gen.device
    p, q = logit_pair(gen, batch, cfg.n, cfg.scale, cfg.noise)
    if batch == 1:
        p, q = p[0], q[0]  # one node, as the decoder verifies it
    repeats = max(cfg.min_calls, cfg.calls // batch)

    def seconds(call):
        return median_seconds(call, repeats, cfg.warmup, device)

    rrs = {k: mdsd.verifier("rrs", k) for k in {2, *cfg.ks}}  # the baseline at the same k (or k = 2)
    rrs_drafts = {k: v.draft(q, gen) for k, v in rrs.items()}
    rows = []
    for name, k in tqdm(grid(cfg.ks), desc=f"verify, batch {batch}"):
        v = mdsd.verifier(name, k)
        drafts = v.draft(q, gen)
        base = seconds(lambda: p.sum() + q.sum())
        row = {"section": "verify", "verifier": name, "k": k, "batch": batch, "pass_ms": 1e3 * base / batch}
        checked = seconds(lambda v=v, d=drafts: v.verify(p, q, d, gen))
        row |= {"checked_ms": 1e3 * checked / batch, "checked_ratio": checked / base}
        if not cfg.legacy:
            same = k if k in rrs else 2
            baseline = seconds(lambda s=same: rrs[s].verify_unchecked(p, q, rrs_drafts[s], gen))
            kernel = seconds(lambda v=v, d=drafts: v.verify_unchecked(p, q, d, gen))
            draft = seconds(lambda v=v: v.draft_unchecked(q, gen))
            row |= {"kernel_ms": 1e3 * kernel / batch, "kernel_ratio": kernel / base}
            row |= {"rrs_ms": 1e3 * baseline / batch, "vs_rrs": kernel / baseline}
            row |= {"draft_ms": 1e3 * draft / batch, "draft_ratio": draft / base}
        if batch > 1 and cfg.reference_rows > 0:
            m = cfg.reference_rows
            u = draw_uniforms((m,), v._uniform_columns(), gen, device)
            start = time.process_time()
            reference_verify(name, p[:m].double().cpu(), q[:m].double().cpu(), drafts[:m].cpu(), u)
            row["reference_ms_per_row"] = 1e3 * (time.process_time() - start) / m
        rows.append(row)
    return rows


def acceptance_rows(cfg: Config, p: np.ndarray, q: np.ndarray) -> list[dict]:
    def median_ms(call):
        return 1e3 * median_seconds(call, cfg.acceptance_repeats)

    base = median_ms(lambda: np.minimum(p, q).sum())
    rows = [{"section": "acceptance", "verifier": "sum(min(p, q)) baseline", "k": 0, "ms": base}]
    for name, k in tqdm(grid(cfg.ks), desc="acceptance"):
        v = mdsd.verifier(name, k)
        try:
            value = v.acceptance(p, q)
        except ValueError:
            continue  # exact only by enumeration (RRSw, k >= 3): no closed form at this n
        ms = median_ms(lambda v=v: v.acceptance(p, q))
        rows.append({"section": "acceptance", "verifier": name, "k": k, "ms": ms, "vs_baseline": ms / base})
        rows[-1]["value"] = value
    return rows


def main() -> None:
    cfg = config_from_cli(Config)
    torch.set_num_threads(cfg.threads)
    device = torch.device(cfg.device)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    start = time.perf_counter()
    rows = []
    if cfg.acceptance:
        p, q = logit_pair(gen, 1, cfg.n, cfg.scale, cfg.noise)
        p64, q64 = (
            p[0].double().cpu().numpy(),
            q[0].double().cpu().numpy(),
        )  # a float32 softmax sums to 1 within ~1e-5
        rows += acceptance_rows(cfg, p64 / p64.sum(), q64 / q64.sum())
    for batch in cfg.batches:
        rows += verify_rows(cfg, batch, gen)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()}-core CPU"
    load = os.getloadavg()[0]
    summary = {
        "total_seconds": time.perf_counter() - start,
        "machine": f"{where}, {cfg.threads} torch thread(s), load average {load:.1f} at the end",
    }
    paths = write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed, summary=summary)
    for row in rows:
        print({key: round(val, 4) if isinstance(val, float) else val for key, val in row.items()})
    print(f"\n{'verifier':<10} {'k':>2} {'batch':>5} {'kernel ms/node':>14} {'x pass':>7} {'x RRS':>6}")
    for row in rows:
        if row["section"] == "verify" and "kernel_ms" in row:
            print(
                f"{row['verifier']:<10} {row['k']:>2} {row['batch']:>5} {row['kernel_ms']:14.3f} "
                f"{row['kernel_ratio']:7.1f} {row['vs_rrs']:6.2f}"
            )
    print(summary)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
