"""Speed of the optimal verifier's kernels against RRS, per node, at a real vocabulary (issues 13, 25).

For each batch size B (nodes verified in one call) and k: the median time of ``verify_unchecked`` (the kernel
the decoder calls) for ``mdsd.verifier("optimal", k)`` (i.i.d. drafts) and, in the same run on the same
pairs and drafts, timed right before it, for ``mdsd.verifier("rrs", k)``; the ratio optimal / RRS is the
figure of merit. The without-replacement fallback (``optimal:wor`` with ``wor_rule="fallback"``; the Luce
rule, the default beyond the flow size, takes seconds a node: benchmarks/bench_luce.py) runs at
``wor_ks`` beside the i.i.d. rule at the same k. At B = 1 one extra call of the i.i.d. rule is split into
its phases: the sort and selection law (``iid_layout``), the drafted tokens' window tops
(``window_tops``) and the drafts' depths (``draft_depths``). On a GPU one verify of RRS, of the optimal
verifier and of K-SEQ at B = 1 (k = 2) is also captured in a CUDA graph and replayed; with ``--inductor
1,1024`` each is also compiled by inductor (fused passes) and timed at those batches.

Times: CUDA events on a GPU (after ``warmup`` calls), process CPU time on the CPU (the machine is shared:
time spent waiting for another process's core is not the kernel's). Pairs are synthetic but real-size:
target logits z ~ scale · N(0, 1), draft logits z + noise · N(0, 1), softmax in float32 (no downloads).

Run:  python benchmarks/bench_optimal.py [--device cuda] [--batches 1,1024] [--ks 2,4,8] [--wor-ks 2,4]
Writes benchmarks/results/NAME.json (+ .csv) and prints a table.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field

import torch
from timing import logit_pair, median_seconds

import mdsd
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.verifiers import draw_uniforms
from mdsd.verifiers.optimal import OptimalVerifier
from mdsd.verifiers.optimal.layout import draft_depths, iid_layout, window_tops


@dataclass
class Config:
    device: str = field(default="cpu", metadata={"help": "cpu or cuda"})
    n: int = field(default=151_936, metadata={"help": "vocabulary size (Qwen2.5)"})
    batches: str = field(default="1,1024", metadata={"help": "comma-separated nodes per verify call"})
    ks: str = field(default="2,4,8", metadata={"help": "comma-separated draft counts (i.i.d. rule)"})
    wor_ks: str = field(default="2,4", metadata={"help": "draft counts of the without-replacement fallback"})
    scale: float = field(default=3.0, metadata={"help": "std of the target logits"})
    noise: float = field(default=1.0, metadata={"help": "std of the draft's logit perturbation"})
    repeats: int = field(default=7, metadata={"help": "timed calls at batch 1 (median reported)"})
    big_repeats: int = field(default=3, metadata={"help": "timed calls at batches above 1"})
    warmup: int = field(default=2, metadata={"help": "untimed calls before each measurement"})
    graph: bool = field(default=True, metadata={"help": "on a GPU, also time CUDA-graph replays at B = 1"})
    inductor: str = field(
        default="", metadata={"help": "comma-separated batches to also time each verify compiled by inductor"}
    )
    threads: int = field(default=1, metadata={"help": "torch CPU threads (the machine is shared)"})
    seed: int = field(default=0, metadata={"help": "seed of the pairs, drafts and uniforms"})
    name: str = field(
        default="optimal", metadata={"help": "results file name (benchmarks/results/NAME.json)"}
    )
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where NAME.json goes"})


def phases(p, q, drafts, k, gen, device) -> dict:
    """Seconds of the i.i.d. rule's phases on one call at B = 1: layout (sort + law), windows, depths."""

    def now():
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    start = now()
    lay = iid_layout(p.reshape(1, -1), q.reshape(1, -1), k)
    mid = now()
    rows = torch.zeros(drafts.numel(), dtype=torch.long, device=device)
    pos = lay.rank[0, drafts.reshape(-1)]
    tops = window_tops(lay, rows, pos)
    after = now()
    u = torch.rand(pos.shape, generator=gen, dtype=torch.float64, device=device)
    draft_depths(lay, rows, pos, tops, u)
    end = now()
    return {
        "layout_ms": 1e3 * (mid - start),
        "windows_ms": 1e3 * (after - mid),
        "depths_ms": 1e3 * (end - after),
    }


def graph_rows(cfg: Config, gen: torch.Generator, device: torch.device) -> list[dict]:
    """RRS, optimal and K-SEQ (k = 2) at B = 1 captured in one CUDA graph each, replay vs eager."""
    p, q = logit_pair(gen, 1, cfg.n, cfg.scale, cfg.noise)
    p, q = p[0], q[0]
    rows = []
    for name in ("rrs", "optimal", "kseq"):
        v = mdsd.verifier(name, 2)
        drafts = v.draft_unchecked(q, gen)
        row = {"section": "graph", "verifier": name, "k": 2, "batch": 1}
        try:
            v.verify_unchecked(p, q, drafts, gen)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            if hasattr(graph, "register_generator_state"):
                graph.register_generator_state(gen)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                v.verify_unchecked(p, q, drafts, gen)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                v.verify_unchecked(p, q, drafts, gen)
            row["graph_ms"] = 1e3 * median_seconds(graph.replay, 50, 3, device)
            row["eager_ms"] = 1e3 * median_seconds(
                lambda v=v, d=drafts: v.verify_unchecked(p, q, d, gen), 50, 3, device
            )
        except Exception as err:  # report what does not capture instead of stopping the run
            row["error"] = repr(err)[:300]
        rows.append(row)
        print(row, flush=True)
    return rows


def inductor_rows(cfg: Config, batch: int, gen: torch.Generator, device: torch.device) -> list[dict]:
    """RRS, optimal and K-SEQ (k = 2) at ``batch`` nodes: the kernel (uniforms given) compiled by
    ``torch.compile(fullgraph=True)`` with inductor (fused passes: Triton kernels on a GPU) against eager,
    with the compile time. Uniforms are inputs, so the compiled function reads no generator."""
    p, q = logit_pair(gen, batch, cfg.n, cfg.scale, cfg.noise)
    if batch == 1:
        p, q = p[0], q[0]
    rows = []
    for name in ("rrs", "optimal", "kseq"):
        v = mdsd.verifier(name, 2)
        drafts = v.draft_unchecked(q, gen)
        u = draw_uniforms(tuple(drafts.shape[:-1]), v._uniform_columns(), gen, device)
        row = {"section": "inductor", "verifier": name, "k": 2, "batch": batch}
        try:
            start = time.perf_counter()
            fn = torch.compile(v._tokens, fullgraph=True, dynamic=False, backend="inductor")
            same = bool((fn(p, q, drafts, u) == v._tokens(p, q, drafts, u)).all())
            row |= {"compile_s": time.perf_counter() - start, "same_tokens": same}
            repeats = cfg.repeats if batch == 1 else cfg.big_repeats
            row["inductor_ms"] = 1e3 * median_seconds(
                lambda f=fn, d=drafts, u=u: f(p, q, d, u), repeats, cfg.warmup, device
            )
            row["eager_ms"] = 1e3 * median_seconds(
                lambda v=v, d=drafts, u=u: v._tokens(p, q, d, u), repeats, cfg.warmup, device
            )
        except Exception as err:  # report what does not compile instead of stopping the run
            row["error"] = repr(err)[:300]
        rows.append(row)
        print(row, flush=True)
    return rows


def verify_rows(cfg: Config, batch: int, gen: torch.Generator, device: torch.device) -> list:
    """The i.i.d. rule at every k and the fallback at ``wor_ks``, each beside RRS on the same batch."""
    p, q = logit_pair(gen, batch, cfg.n, cfg.scale, cfg.noise)
    if batch == 1:
        p, q = p[0], q[0]  # one node, as the decoder verifies it
    repeats = cfg.repeats if batch == 1 else cfg.big_repeats

    def seconds(v, drafts):
        return median_seconds(lambda: v.verify_unchecked(p, q, drafts, gen), repeats, cfg.warmup, device)

    ks, wor_ks = [int(k) for k in cfg.ks.split(",")], [int(k) for k in cfg.wor_ks.split(",") if k]
    rows, iid = [], {}
    for k in sorted(set(ks) | set(wor_ks)):
        rrs, optimal = mdsd.verifier("rrs", k), mdsd.verifier("optimal", k)
        drafts = optimal.draft_unchecked(q, gen)
        runs = [("optimal", optimal, drafts)]
        if k in wor_ks:
            wor = OptimalVerifier(k, law="wor", wor_rule="fallback")  # not the Luce rule (seconds)
            runs.append(("optimal:wor", wor, wor.draft_unchecked(q, gen)))
        for name, v, d in runs:
            base, spent = seconds(rrs, drafts), seconds(v, d)
            row = {"section": "verify", "verifier": name, "k": k, "batch": batch}
            row |= {"rrs_ms_per_node": 1e3 * base / batch, "ms_per_node": 1e3 * spent / batch}
            row["vs_rrs"] = spent / base
            if name == "optimal":
                iid[k] = spent
                if batch == 1:
                    row |= phases(p, q, drafts, k, gen, device)
            else:
                row["vs_iid"] = spent / iid[k]
            rows.append(row)
            print(
                {key: round(val, 4) if isinstance(val, float) else val for key, val in row.items()},
                flush=True,
            )
    return rows


def table(rows: list[dict]) -> None:
    head = ("verifier", "k", "batch", "ms/node", "RRS ms/node", "x RRS", "x iid")
    print("\n{:<12} {:>2} {:>5} {:>9} {:>11} {:>6} {:>6}".format(*head))
    for row in rows:
        if row["section"] == "verify":
            iid = f"{row['vs_iid']:6.2f}" if "vs_iid" in row else ""
            print(
                f"{row['verifier']:<12} {row['k']:>2} {row['batch']:>5} {row['ms_per_node']:9.3f} "
                f"{row['rrs_ms_per_node']:11.3f} {row['vs_rrs']:6.2f} {iid:>6}"
            )
        elif row["section"] == "graph":
            got = (
                f"{row['graph_ms']:.3f} ms, eager {row['eager_ms']:.3f} ms"
                if "graph_ms" in row
                else row["error"]
            )
            print(f"CUDA graph, {row['verifier']} k = 2, B = 1: {got}")
        else:
            got = (
                f"{row['inductor_ms']:.3f} ms, eager {row['eager_ms']:.3f} ms, "
                f"compiled in {row['compile_s']:.0f} s"
                if "inductor_ms" in row
                else row["error"]
            )
            print(f"inductor, {row['verifier']} k = 2, B = {row['batch']}: {got}")


def main() -> None:
    cfg = config_from_cli(Config)
    torch.set_num_threads(cfg.threads)
    device = torch.device(cfg.device)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    start = time.perf_counter()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()}-core CPU"

    def write(rows: list[dict], complete: bool) -> list:
        """The rows so far (after each block: a run cut by a time limit keeps what it finished)."""
        load = os.getloadavg()[0]
        summary = {
            "total_seconds": time.perf_counter() - start,
            "machine": f"{where}, {cfg.threads} torch thread(s), load average {load:.1f} at the end",
            "complete": complete,
        }
        return write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed, summary=summary)

    blocks = [functools.partial(verify_rows, cfg, int(b), gen, device) for b in cfg.batches.split(",")]
    if cfg.graph and device.type == "cuda":
        blocks.append(functools.partial(graph_rows, cfg, gen, device))
    batches = [int(b) for b in cfg.inductor.split(",") if b]
    blocks += [functools.partial(inductor_rows, cfg, b, gen, device) for b in batches]
    rows = []
    for block in blocks:
        rows += block()
        paths = write(rows, complete=False)
    paths = write(rows, complete=True)
    table(rows)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
