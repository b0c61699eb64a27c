"""Speed of the optimal verifier for drafts without replacement (the Luce rule) against RRS, per node, at a
real vocabulary, and its acceptance against the solver's step cap (issue 27).

For each pair and k: median wall time of one ``verify`` of one node (a fresh pair: the rule is solved
inside the call) for ``mdsd.verifier("optimal", k, law="wor")``, and in the same run on the same pair and
drafts for RRS and for the i.i.d.-stream fallback (``wor_rule="fallback"``); the ratio Luce / RRS is the
figure of merit (the issue's goal: <= 10). The Luce time is split into its phases on one extra solve: the
target (``optimal_selection_law``), the solver's steps, the final law, the kernel (selection and
two-step). Then the trade-off: the solver capped at ``caps`` steps, its exact acceptance's gap to α*_wor
and its seconds.

Pairs are synthetic but real-size (as benchmarks/bench_optimal.py): target logits z ~ scale · N(0, 1), draft
logits z + noise · N(0, 1), softmax in float64 (no model downloads); ``--record N`` times N positions
recorded afresh from the cached Qwen2.5-Coder pair (:func:`mdsd.hf.record.record_pairs` at T = 1, evenly
spaced; after ``mdsd models fetch qwen2.5-coder``), ``--pairs FILE.npz`` (arrays p, q [N, V]) given ones.

Run:  python benchmarks/bench_luce.py [--ks 2,3,4] [--scales 3,6] [--threads 1]
      python benchmarks/bench_luce.py --record 2 --repeats 1 --name luce_real
      # the rule's time per node alone (one solve each, no phases or trade-off), median and worst per k:
      python benchmarks/bench_luce.py --record 8 --ks 2,3 --repeats 1 --no-warm-up --no-phases --caps ""
      # before and after k = 2's closed form, side by side: --law-method quadrature, then auto
Writes benchmarks/results/luce.json (+ .csv).
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch

import mdsd
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.otm.selection import optimal_selection_law
from mdsd.verifiers.optimal import OptimalVerifier
from mdsd.verifiers.optimal.luce import luce_law
from mdsd.verifiers.optimal.luce_rule import luce_rule


@dataclass
class Config:
    n: int = field(default=151_936, metadata={"help": "vocabulary size (Qwen2.5)"})
    ks: str = field(default="2,3,4", metadata={"help": "comma-separated draft counts"})
    scales: str = field(default="3,6", metadata={"help": "comma-separated std of the target logits"})
    noise: float = field(default=1.0, metadata={"help": "std of the draft's logit perturbation"})
    pairs: str = field(default="", metadata={"help": "an .npz with p, q [N, V] to time instead of synthetic"})
    record: int = field(default=0, metadata={"help": "time N positions recorded from the cached real pair"})
    repeats: int = field(default=3, metadata={"help": "timed calls per verifier (median reported)"})
    caps: str = field(
        default="0,1,2,4,8,40", metadata={"help": "solver step caps of the trade-off ('': none)"}
    )
    phases: bool = field(default=True, metadata={"help": "time the rule's phases on one more solve"})
    warm_up: bool = field(default=True, metadata={"help": "one untimed call before the timed ones"})
    law_method: str = field(
        default="auto", metadata={"help": "the rule's law: auto (k = 2 in closed form) or quadrature"}
    )
    threads: int = field(default=1, metadata={"help": "torch CPU threads (the machine is shared)"})
    seed: int = field(default=0, metadata={"help": "seed of the pairs, drafts and uniforms"})
    name: str = field(default="luce", metadata={"help": "results file name (benchmarks/results/NAME.json)"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where NAME.json goes"})


def median_time(call, repeats: int, warm_up: bool = True) -> float:
    if warm_up:
        call()  # untimed
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pairs(cfg: Config, gen: torch.Generator):
    """(label, p, q) float64 vectors [V]."""
    if cfg.record:
        from mdsd.hf.record import record_pairs

        p_all, q_all, sets = record_pairs((1.0,), prompts_per_set=1, seed=cfg.seed)[1.0]
        for i in np.linspace(0, len(p_all) - 1, cfg.record).astype(int):
            yield f"recorded {sets[i]} position {i}", torch.as_tensor(p_all[i]), torch.as_tensor(q_all[i])
        return
    if cfg.pairs:
        data = np.load(cfg.pairs)
        for i, (p, q) in enumerate(zip(data["p"], data["q"], strict=True)):
            yield f"{cfg.pairs}[{i}]", torch.as_tensor(p / p.sum()), torch.as_tensor(q / q.sum())
        return
    for scale in (float(s) for s in cfg.scales.split(",")):
        z = torch.randn(cfg.n, generator=gen, dtype=torch.float64) * scale
        p = torch.softmax(z, -1)
        q = torch.softmax(z + cfg.noise * torch.randn(cfg.n, generator=gen, dtype=torch.float64), -1)
        yield f"scale={scale:g}", p, q


def phases(p: np.ndarray, q: np.ndarray, k: int) -> dict:
    """Seconds of the Luce rule's phases on one solve: target, solver steps, final law."""
    start = time.perf_counter()
    optimal_selection_law(p, q, mdsd.WithoutReplacement(k))
    target = time.perf_counter() - start
    start = time.perf_counter()
    rule = luce_rule(p, q, k)
    total = time.perf_counter() - start
    start = time.perf_counter()
    luce_law(q, rule.level, rule.log_weight, k)
    final = time.perf_counter() - start
    return {
        "target_s": target,
        "final_law_s": final,
        "steps_s": max(total - target - final, 0.0),
        "steps": rule.iterations,
    }


def tradeoff(p: np.ndarray, q: np.ndarray, k: int, caps: list[int]) -> list[dict]:
    """Gap to α*_wor of the exact acceptance, and seconds, with the solver capped at each step count."""
    best = float(mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k)))
    out = []
    for cap in caps:
        v = OptimalVerifier(k, law="wor")
        start = time.perf_counter()
        rule = luce_rule(p, q, k, iterations=cap)
        seconds = time.perf_counter() - start
        v._luce = lambda a, b, rule=rule: rule  # this pair's capped rule, whatever the verifier's cache key
        gap = best - v.acceptance(p, q)
        out.append({"cap": cap, "gap": gap, "steps": rule.iterations, "solve_s": seconds})
    return out


def use_law_method(method: str) -> None:
    """Every law and hit count the rule computes, in the verifier too, by ``method`` (an A/B switch: with
    ``"quadrature"`` k = 2 runs as it did before its closed form)."""
    if method not in ("auto", "quadrature"):
        raise ValueError(f"--law-method must be auto or quadrature, got {method!r}")
    if method == "quadrature":
        import mdsd.verifiers.optimal.luce_rule as rule_module

        def forced(fn):
            return functools.wraps(fn)(lambda *args, **kwargs: fn(*args, **(kwargs | {"method": method})))

        rule_module.luce_law = forced(luce_law)
        rule_module.luce_hits = forced(rule_module.luce_hits)


def main() -> None:
    cfg = config_from_cli(Config)
    use_law_method(cfg.law_method)
    torch.set_num_threads(cfg.threads)
    gen = torch.Generator().manual_seed(cfg.seed)
    caps = [int(c) for c in cfg.caps.split(",") if c]
    start, rows = time.perf_counter(), []
    for label, p, q in pairs(cfg, gen):
        for k in (int(k) for k in cfg.ks.split(",")):
            luce, rrs = mdsd.verifier("optimal", k, law="wor"), mdsd.verifier("rrs", k)
            fallback = OptimalVerifier(k, law="wor", wor_rule="fallback")
            a, b = p[None], q[None]  # one node
            d = luce.draft(b, gen)
            t_rrs = median_time(lambda v=rrs, a=a, b=b, d=d: v.verify(a, b, d, gen), cfg.repeats)
            t_fallback = median_time(lambda v=fallback, a=a, b=b, d=d: v.verify(a, b, d, gen), cfg.repeats)
            # a new verifier per call, so that the rule is solved inside verify
            t_luce = median_time(
                lambda k=k, a=a, b=b, d=d: OptimalVerifier(k, law="wor").verify(a, b, d, gen),
                cfg.repeats,
                cfg.warm_up,
            )
            pn, qn = p.numpy(), q.numpy()
            row = {
                "pair": label,
                "k": k,
                "rrs_ms_per_node": 1e3 * t_rrs,
                "fallback_ms_per_node": 1e3 * t_fallback,
                "luce_ms_per_node": 1e3 * t_luce,
                "luce_over_rrs": t_luce / t_rrs,
                **(phases(pn, qn, k) if cfg.phases else {}),
                "tradeoff": tradeoff(pn, qn, k, caps),
            }
            rows.append(row)
            print(
                {key: round(val, 4) if isinstance(val, float) else val for key, val in row.items()},
                flush=True,
            )
    per_k = {
        k: [r["luce_ms_per_node"] / 1e3 for r in rows if r["k"] == k]
        for k in dict.fromkeys(r["k"] for r in rows)
    }
    summary = {
        "luce_s_per_node": {
            str(k): {"pairs": len(v), "median": statistics.median(v), "max": max(v)} for k, v in per_k.items()
        },
        "total_seconds": time.perf_counter() - start,
        "machine": f"{os.cpu_count()}-core CPU, {cfg.threads} torch thread(s), "
        f"load average {os.getloadavg()[0]:.1f}",
    }
    print(summary)
    provenance = {}
    if cfg.record:
        from mdsd.hf.record import recording_provenance

        provenance = recording_provenance()
    print("wrote", *write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed, summary=summary, **provenance))


if __name__ == "__main__":
    main()
