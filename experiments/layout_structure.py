"""How much of the sorted order the optimal i.i.d. verifier's priority layout reads, on real pairs.

The layout (mdsd/verifiers/optimal/layout.py) sorts every row by p/q. A sort-free layout would pay only where
little of the order matters, so this measures, per pair and k, where it does:

- ``changed``: tokens where the optimal selection law F differs from p by more than 1e-6 relative (a drop or
  a rise of the running minima of h: F there needs the token's exact prefix), and ``changed_q``, their mass
  under q (the chance that a draft lands on one);
- ``ranked``: those of them whose F is the increment of g over the token alone, g(P_{t+1}) − g(P_t) =
  (1 − Q_t)^k − (1 − Q_t − q_t)^k (a drop or rise of one token): F and q name the mass Q_t before the token,
  so the law itself ranks these tokens, and a layout that returns it has sorted them;
- for ``drafts`` tokens drawn from q: ``prefixes``, the number of distinct prefixes whose curve sets a draft's
  window top (the arg max of :func:`~mdsd.verifiers.optimal.layout.window_tops`' crossings), and
  ``distance``, the median number of places between a draft and that prefix (1: its own predecessor).

Pairs: recorded afresh at full vocabulary from the cached Qwen2.5-Coder pair
(:func:`mdsd.hf.record.record_pairs` at T = 1, ``--pairs`` positions evenly spaced; ``--quick``: synthetic
pairs at V = 2,000). Writes
results/<name>/layout_structure.json/.csv and layout_structure.md (the ranges quoted in the layout's
docstring).

    python experiments/layout_structure.py --pairs 8 --output-dir results/layout_structure
    python experiments/layout_structure.py --quick
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

import mdsd
from mdsd.harness.experiment import config_from_cli, output_dir, run_script, write_results
from mdsd.verifiers.optimal.layout import _rise, iid_layout, prefix_crossings


@dataclass(frozen=True)
class Config:
    """Where the optimal verifier's layout reads the sorted order, on real pairs."""

    ks: tuple[int, ...] = field(default=(2, 4), metadata={"help": "numbers of drafts k"})
    pairs: int = field(default=8, metadata={"help": "recorded positions, evenly spaced"})
    drafts: int = field(default=400, metadata={"help": "drafts drawn from q per pair"})
    seed: int = field(default=0, metadata={"help": "seed of the recording and of the drafts"})
    quick: bool = field(default=False, metadata={"help": "smoke test: 2 synthetic pairs at V = 2,000"})
    output_dir: str = mdsd.harness.experiment.output_dir_field()


def _pairs(config: Config) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, p [V], q [V]) float64, normalised."""
    if config.quick:
        gen = np.random.default_rng(config.seed)
        z = [gen.normal(size=2000) * 3.0 for _ in range(config.pairs)]
        pairs = [(np.exp(x), np.exp(x + gen.normal(size=x.size))) for x in z]
        return [(f"synthetic {i}", p / p.sum(), q / q.sum()) for i, (p, q) in enumerate(pairs)]
    from mdsd.hf.record import record_pairs

    p_all, q_all, sets = record_pairs((1.0,), prompts_per_set=1, seed=config.seed)[1.0]
    at = np.linspace(0, len(p_all) - 1, config.pairs).astype(int)
    return [(f"{sets[i]} position {i}", p_all[i] / p_all[i].sum(), q_all[i] / q_all[i].sum()) for i in at]


def measure(p: np.ndarray, q: np.ndarray, k: int, drafts: int, seed: int) -> dict:
    """The figures of one pair (module docstring)."""
    lay = iid_layout(torch.as_tensor(p)[None], torch.as_tensor(q)[None], k)
    f, ps, qs = lay.f_sorted[0], torch.as_tensor(p)[lay.order[0]], lay.q_sorted[0]
    changed = (f - ps).abs() > 1e-6 * ps
    alone = _rise(lay.tail_q[0, 1:], qs, k)[0]  # g(P_{t+1}) − g(P_t), as the layout forms it for one token
    ranked = changed & (qs > 0) & ((f - alone).abs() <= 1e-12 * alone)
    tokens = torch.multinomial(
        torch.as_tensor(q), drafts, replacement=True, generator=torch.Generator().manual_seed(seed)
    )
    pos = lay.rank[0][tokens]
    prefix = prefix_crossings(lay, torch.zeros_like(pos), pos).argmax(-1)
    return {
        "changed": int(changed.sum()),
        "changed_q": float(qs[changed].sum()),
        "ranked": int(ranked.sum()),
        "prefixes": int(prefix.unique().numel()),
        "distance": float((pos + 1 - prefix).double().median()),
    }


def summary(rows: list[dict]) -> str:
    lines = [
        "| k | pairs | tokens with F ≠ p | their q mass | ranked by F | prefixes setting window tops "
        "| median distance |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in sorted({r["k"] for r in rows}):
        mine = [r for r in rows if r["k"] == k]

        def span(key, fmt, rows=mine):
            values = [r[key] for r in rows]
            return f"{fmt(min(values))}-{fmt(max(values))}"

        lines.append(
            f"| {k} | {len(mine)} | {span('changed', '{:,}'.format)} | {span('changed_q', '{:.3f}'.format)} "
            f"| {span('ranked', '{:,}'.format)} | {span('prefixes', str)} "
            f"| {span('distance', '{:,.0f}'.format)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None):
    config = config_from_cli(Config, argv)
    if config.quick:
        config = replace(config, pairs=2, drafts=50)
    out = output_dir("layout_structure", config.output_dir)
    rows = []
    for label, p, q in _pairs(config):
        for k in config.ks:
            rows.append({"pair": label, "k": k, **measure(p, q, k, config.drafts, config.seed)})
            print(rows[-1], flush=True)
    provenance = {}
    if not config.quick:
        from mdsd.hf.record import recording_provenance

        provenance = recording_provenance()
    write_results(out, "layout_structure", rows, config, config.seed, **provenance)
    text = summary(rows)
    (out / "layout_structure.md").write_text(text)
    print(text)
    print(f"results in {out}")
    return out


if __name__ == "__main__":
    run_script(main)
