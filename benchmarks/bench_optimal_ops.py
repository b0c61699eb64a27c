"""Where the optimal verifier's node goes, kernel by kernel: aten ops and passes over the vocabulary by phase
(issue 45), beside RRS's and K-SEQ's.

A captured verify on a GPU replays one launch of a few µs per aten op, so at B = 1 the count of top-level
aten ops (those not called by another aten op: what eager mode dispatches, what a CUDA graph replays) is the
node's cost; at large B the passes over [B, V] and [B, k, V] are (bandwidth). For one ``verify_unchecked``
(drafts given, uniforms drawn inside, as the decoder calls it) this counts, on the CPU but blocked as on a
device (one chunk of drafts, no slabs of rows: :func:`device_blocking`):

* the top-level aten ops under ``torch.profiler``, each charged to the innermost phase it runs in;
* the passes, in units of one pass over [B, V]: a torch call touching a tensor whose size is a multiple of V
  or V + 1 (the layout's prefix sums) counts as its largest such tensor's size over B · V (a gather or search
  as its output; views do not count); chunks of rows count as fractions (``bench_passes.Passes``).

The optimal verifier's phases (each a function of ``mdsd.verifiers.optimal``, wrapped for the call):
``sort`` (the stable sort of the ratios), ``law`` (the rest of the layout: prefix sums, running minima, F at
drops and rises), ``window tops`` (the drafted tokens' window tops, less their crossings), ``crossings``
(Newton's method on the curves' crossings), ``depths`` (each draft's depth), ``emit`` (the two-step accept
and residual draw) and ``rest`` (uniforms, ranks, the least depth). RRS and K-SEQ: ``rest`` alone.

Run:  python benchmarks/bench_optimal_ops.py [--sizes 1:151936,1024:16384] [--ks 2]
Writes benchmarks/results/NAME.json (+ .csv; NAME = optimal_ops).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass, field
from unittest import mock

import torch
from bench_passes import Passes
from timing import logit_pair
from torch.profiler import ProfilerActivity, profile, record_function

import mdsd
import mdsd.verifiers.base as base
import mdsd.verifiers.optimal.layout as layout
import mdsd.verifiers.optimal.verifier as optimal
from mdsd.harness.experiment import config_from_cli, write_results

# phase: (module, function); the innermost phase running is charged
PHASES = {
    "sort": (layout, "_descending"),
    "law": (optimal, "iid_layout"),
    "window tops": (optimal, "window_tops"),
    "crossings": (layout, "_crossings"),
    "depths": (optimal, "draft_depths"),
    "emit": (optimal, "two_step"),
}


@dataclass
class Config:
    sizes: tuple[str, ...] = field(
        default=("1:151936", "1024:16384"),
        metadata={"help": "B:V pairs; B = 1024 at V = 151,936 needs ~40 GB and minutes a call on a CPU"},
    )
    ks: tuple[int, ...] = field(default=(2, 4, 8), metadata={"help": "drafts per node"})
    verifiers: tuple[str, ...] = field(default=("rrs", "kseq", "optimal"), metadata={"help": "by name"})
    scale: float = field(default=3.0, metadata={"help": "std of the target logits"})
    noise: float = field(default=1.0, metadata={"help": "std of the draft's logit perturbation"})
    seed: int = field(default=0, metadata={"help": "seed of the pairs, drafts and uniforms"})
    name: str = field(default="optimal_ops", metadata={"help": "results file name (OUT_DIR/NAME.json)"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where NAME.json goes"})


@contextlib.contextmanager
def phases(passes: Passes | None = None):
    """Each phase's function wrapped in a profiler range of its name (and, given ``passes``, labelling the
    passes it makes), restored on exit."""

    def wrap(name, fn):
        @functools.wraps(fn)
        def ranged(*args, **kwargs):
            outer = passes.phase if passes is not None else ""
            if passes is not None:
                passes.phase = name
            try:
                with record_function(name):
                    return fn(*args, **kwargs)
            finally:
                if passes is not None:
                    passes.phase = outer

        return ranged

    saved = [(module, attr, getattr(module, attr)) for module, attr in PHASES.values()]
    try:
        for name, (module, attr) in PHASES.items():
            setattr(module, attr, wrap(name, getattr(module, attr)))
        yield
    finally:
        for module, attr, fn in saved:
            setattr(module, attr, fn)


@contextlib.contextmanager
def device_blocking():
    """Count as an accelerator runs the kernels: one chunk of drafts and no CPU slabs of rows. On the CPU the
    optimal verifier works one row and one draft at a time (its temporaries then stay in cache), repeating the
    same ops per row and per draft; a captured step on a device launches each once."""
    with (
        mock.patch.dict(layout.CHUNK, {"cpu": layout.CHUNK_DEVICE}),
        mock.patch.object(base, "CPU_SLAB", 1 << 62),
    ):
        yield


def op_counts(call) -> dict[str, int]:
    """Top-level aten ops of ``call()`` by innermost phase (``rest`` outside every phase)."""
    with phases(), profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    counts = dict.fromkeys([*PHASES, "rest"], 0)
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        phase, parent = "rest", event.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                break  # called by another aten op: not top-level
            if parent.name in PHASES and phase == "rest":
                phase = parent.name
            parent = parent.cpu_parent
        else:
            counts[phase] += 1
    return counts


def pass_counts(call, batch: int, n: int) -> dict[str, float]:
    """Passes over [B, V] of ``call()`` by phase (``rest`` outside every phase)."""
    mode = Passes(n, batch * n, widths=(n, n + 1), least=n)
    mode.phase = "rest"
    with phases(mode), mode:
        call()
    return {name: mode.by_phase.get(name, 0.0) for name in [*PHASES, "rest"]}


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(cfg.seed)
    rows = []
    for size in cfg.sizes:
        batch, n = (int(s) for s in size.split(":"))
        p, q = logit_pair(gen, batch, n, cfg.scale, cfg.noise)
        if batch == 1:
            p, q = p[0], q[0]  # one node, as the decoder verifies it
        for k in cfg.ks:
            for name in cfg.verifiers:
                v = mdsd.verifier(name, k)
                drafts = v.draft_unchecked(q, gen)

                def call(v=v, p=p, q=q, drafts=drafts):
                    return v.verify_unchecked(p, q, drafts, gen)

                with device_blocking():
                    call()  # warm up (lazy initialisations are not the node's)
                    ops, passes = op_counts(call), pass_counts(call, batch, n)
                row = {"verifier": name, "k": k, "batch": batch, "n": n}
                row |= {"ops": sum(ops.values()), "passes": sum(passes.values())}
                row |= {f"ops {ph}": c for ph, c in ops.items() if c}
                row |= {f"passes {ph}": c for ph, c in passes.items() if c}
                rows.append(row)
                print({key: round(val, 2) if isinstance(val, float) else val for key, val in row.items()})
    machine = f"{os.cpu_count()}-core CPU, 1 torch thread, load average {os.getloadavg()[0]:.1f} at the end"
    write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed, machine=machine)


if __name__ == "__main__":
    main()
