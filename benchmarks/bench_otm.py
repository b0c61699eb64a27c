"""Speed and accuracy of the OTM solvers (issue 2).

Three measurements, in one run:
1. Single calls of the dual (``mdsd.optimal_acceptance``) at n = 151,936 (a Qwen2.5 vocabulary):
   IID k = 2, 8 and WithoutReplacement k = 2, 4 (median wall time), each with its error against exact
   enumeration (brute force over all 2^n cuts of the enumerated law) on small random instances; for
   WithoutReplacement k = 4 also the quadrature's own error estimate at full n (``OTMResult.error``).
2. The batched table: 256 pairs at n = 151,936, IID k = 1..8 and WithoutReplacement k = 2, from one
   sort per row, against the baseline of separate ``optimal_acceptance`` calls (on a subset, scaled).
3. Each method's time against n for IID k = 2, doubling n from 4 until a call takes more than
   ``limit_s`` (each point in a forked child, killed at the limit), and the speedup of "dual" over LP
   and max-flow at the largest n they share.

Pairs are synthetic but real-size: target logits z ~ scale · N(0, 1), draft logits z + noise · N(0, 1),
both through a softmax (no model downloads).

Run:  python benchmarks/bench_otm.py
Writes benchmarks/results/otm.json (+ .csv).
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue as queue_module
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

import mdsd
from mdsd import race
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.otm.dual import prefix_order


@dataclass
class Config:
    n: int = field(default=151_936, metadata={"help": "vocabulary size (Qwen2.5)"})
    scale: float = field(default=3.0, metadata={"help": "std of the target logits"})
    noise: float = field(default=1.0, metadata={"help": "std of the draft's logit perturbation"})
    repeats: int = field(default=15, metadata={"help": "timed single calls (median reported)"})
    batch: int = field(default=256, metadata={"help": "pairs in the batched table"})
    baseline_rows: int = field(default=8, metadata={"help": "rows timed with separate calls (scaled up)"})
    enum_instances: int = field(default=100, metadata={"help": "small instances for the error check"})
    enum_n: int = field(default=8, metadata={"help": "vocabulary of the error check (less for large k)"})
    limit_s: float = field(default=10.0, metadata={"help": "time limit of one call in the n sweep"})
    max_log2_n: int = field(default=24, metadata={"help": "the n sweep stops at 2^this (memory)"})
    seed: int = field(default=0, metadata={"help": "seed of all pairs"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where otm.json goes"})


def logit_pairs(rng: np.random.Generator, rows: int, n: int, scale: float, noise: float):
    """Softmax pairs [rows, n]: target logits scale·N(0,1), draft logits target + noise·N(0,1)."""
    z = scale * rng.standard_normal((rows, n))
    zq = z + noise * rng.standard_normal((rows, n))
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    q = np.exp(zq - zq.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True), q / q.sum(axis=-1, keepdims=True)


def median_time(call, repeats: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``call``. CPU time is this process's own: on the shared machine
    it is the load-independent figure (wall = CPU on an idle machine; numpy here is single-threaded)."""
    call()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def brute_force(p: np.ndarray, q: np.ndarray, law) -> float:
    """min over all 2^n token sets A of p(A) + 1 − Q(set ⊆ A), from the enumerated joint law."""
    joint = law.joint(q)
    tuples = np.array(list(joint), dtype=np.int64).reshape(len(joint), law.k)
    weight = np.array(list(joint.values()))
    subsets = np.array(list(itertools.product([False, True], repeat=p.size)))
    return float((subsets @ p + 1.0 - subsets[:, tuples].all(axis=2) @ weight).min())


def enumeration_error(law, cfg: Config, rng: np.random.Generator) -> tuple[float, int]:
    """Worst |dual − brute force| on random pairs small enough to enumerate (<= 2e4 draft tuples), and
    how many of them have α* < 1 (the others are easy)."""
    n = min(cfg.enum_n, int(2e4 ** (1.0 / law.k)))
    worst, below_one = 0.0, 0
    for _ in range(cfg.enum_instances):
        scale, noise = float(rng.choice([0.5, 2.0, 4.0])), float(rng.choice([1.0, 3.0, 6.0]))
        p, q = logit_pairs(rng, 1, n, scale, noise)
        exact = brute_force(p[0], q[0], law)
        worst = max(worst, abs(mdsd.optimal_acceptance(p[0], q[0], law) - exact))
        below_one += exact < 1.0 - 1e-9
    return worst, below_one


def single_calls(cfg: Config, rng: np.random.Generator) -> list[dict]:
    p, q = logit_pairs(rng, 1, cfg.n, cfg.scale, cfg.noise)
    p, q = p[0], q[0]
    rows = []
    laws = [mdsd.IID(2), mdsd.IID(8), mdsd.WithoutReplacement(2), mdsd.WithoutReplacement(4)]
    for law in tqdm(laws, desc="single calls"):
        repeats = cfg.repeats if law.k <= 2 or law.name == "iid" else max(3, cfg.repeats // 3)
        seconds, cpu = median_time(lambda law=law: mdsd.optimal_acceptance(p, q, law), repeats)
        row = {
            "section": "single",
            "law": law.name,
            "k": law.k,
            "n": cfg.n,
            "method": "dual",
            "seconds": seconds,
            "cpu_seconds": cpu,
            "value": mdsd.optimal_acceptance(p, q, law),
            "max_error_vs_enumeration": None,
            "instances_with_optimum_below_1": None,
            "enumeration_n": min(cfg.enum_n, int(2e4 ** (1.0 / law.k))),
        }
        row["max_error_vs_enumeration"], row["instances_with_optimum_below_1"] = enumeration_error(
            law, cfg, rng
        )
        if law.name == "without_replacement" and law.k > 2:
            row["quadrature_error_estimate"] = mdsd.solve_otm(p, q, law).error
        rows.append(row)
    qs = q[prefix_order(p, q)]
    integral, _ = race.race_containment(qs, 2)
    weights, q_top = race.pair_weights(qs)
    sums = np.concatenate([np.zeros((4, 1)), np.cumsum(weights, axis=-1)], axis=-1)
    rows.append(
        {
            "section": "single",
            "law": "without_replacement",
            "k": 2,
            "n": cfg.n,
            "method": "race integral vs closed form, every prefix",
            "max_error_vs_closed_form": float(
                np.abs(integral - race.pair_containment(sums, race.suffix_mass(qs), q_top)).max()
            ),
        }
    )
    return rows


def batched(cfg: Config, rng: np.random.Generator) -> list[dict]:
    p, q = logit_pairs(rng, cfg.batch, cfg.n, cfg.scale, cfg.noise)
    ks = list(range(1, 9))
    start, start_cpu = time.perf_counter(), time.process_time()
    table = mdsd.optimal_acceptance_table(p, q, laws={"iid": ks, "without_replacement": [2]})
    table_s, table_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    laws = [mdsd.IID(k) for k in ks] + [mdsd.WithoutReplacement(2)]
    sub = slice(0, cfg.baseline_rows)
    start, start_cpu = time.perf_counter(), time.process_time()
    separate = {(law.name, law.k): mdsd.optimal_acceptance(p[sub], q[sub], law) for law in laws}
    scale = cfg.batch / cfg.baseline_rows
    separate_s, separate_cpu = (
        (time.perf_counter() - start) * scale,
        (time.process_time() - start_cpu) * scale,
    )
    diff = max(float(np.abs(table[key][sub] - values).max()) for key, values in separate.items())
    return [
        {
            "section": "batched",
            "law": "iid k=1..8 + without_replacement k=2",
            "n": cfg.n,
            "rows": cfg.batch,
            "method": "optimal_acceptance_table",
            "seconds": table_s,
            "cpu_seconds": table_cpu,
            "baseline_seconds": separate_s,
            "baseline_cpu_seconds": separate_cpu,
            "speedup": separate_s / table_s,
            "cpu_speedup": separate_cpu / table_cpu,
            "max_diff_vs_separate_calls": diff,
        }
    ]


def _timed_call(method: str, n: int, seed: int, queue) -> None:
    p, q = logit_pairs(np.random.default_rng(seed), 1, n, 3.0, 1.0)
    wall, cpu = [], []
    while not wall or (len(wall) < 5 and sum(wall) < 1.0):  # repeat quick calls, report medians
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            value = mdsd.solve_otm(p[0], q[0], mdsd.IID(2), method=method).value
        except ValueError:  # too many draft tuples to enumerate
            queue.put((None, None, None))
            return
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    queue.put((statistics.median(wall), statistics.median(cpu), value))


def sweep(cfg: Config) -> list[dict]:
    context = multiprocessing.get_context("fork")
    rows = []
    for method in ("dual", "maxflow", "lp", "coupling"):
        for log2 in tqdm(range(2, cfg.max_log2_n + 1), desc=f"n sweep: {method}"):
            queue = context.Queue()
            child = context.Process(target=_timed_call, args=(method, 2**log2, cfg.seed, queue))
            child.start()
            try:
                seconds, cpu, value = queue.get(timeout=cfg.limit_s + 30.0)  # 30 s to build the input
            except queue_module.Empty:  # the call did not finish
                seconds, cpu, value = None, None, None
            if child.is_alive():
                child.kill()
            child.join()
            if seconds is None or seconds > cfg.limit_s:
                break
            rows.append(
                {
                    "section": "sweep",
                    "law": "iid",
                    "k": 2,
                    "n": 2**log2,
                    "method": method,
                    "seconds": seconds,
                    "cpu_seconds": cpu,
                    "value": value,
                }
            )
    return rows


def speedups(rows: list[dict]) -> dict:
    times = {(r["method"], r["n"]): r["seconds"] for r in rows if r["section"] == "sweep"}
    out = {}
    for other in ("lp", "maxflow", "coupling"):
        shared = [n for (m, n) in times if m == other and ("dual", n) in times]
        if shared:
            n = max(shared)
            out[other] = {
                "n": n,
                "dual_seconds": times[("dual", n)],
                "other_seconds": times[(other, n)],
                "speedup": times[(other, n)] / times[("dual", n)],
            }
    for method in ("dual", "lp", "maxflow", "coupling"):
        ns = [n for (m, n) in times if m == method]
        if ns:
            out.setdefault("largest_n_within_limit", {})[method] = max(ns)
    return out


def main() -> None:
    cfg = config_from_cli(Config)
    rng = np.random.default_rng(cfg.seed)
    start = time.perf_counter()
    rows = single_calls(cfg, rng) + batched(cfg, rng)
    rows += sweep(cfg)
    summary = speedups(rows)
    summary["total_seconds"] = time.perf_counter() - start
    paths = write_results(cfg.out_dir, "otm", rows, cfg, cfg.seed, summary=summary)
    for row in rows:
        if row["section"] != "sweep":
            print(row)
    print(summary)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
