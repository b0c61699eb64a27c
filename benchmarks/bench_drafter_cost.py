"""A drafter's captured GPU forward, predicted from its kernels and bytes, calibrated on measured forwards.

Captured in a CUDA graph at batch 1, a forward costs about a fixed time per kernel it launches and the time to
read its weights: t ≈ a · kernels + b · bytes. This script counts both on the CPU for one decode forward (one
new token after a cache of 256, the static caches the decoder captures; random weights of the real shapes on
the ``meta`` device: nothing is computed or allocated):

* kernels: the top-level aten ops that launch one (views, reshapes of contiguous tensors and other
  metadata-only ops left out; an op called by another aten op is not top-level);
* bytes: :func:`mdsd.costs.forward_cost`, the weights its matrix multiplies read, in bfloat16.

It fits a and b by least squares to the forwards an H200 measured captured at the same shapes (the target,
the 0.5B draft and three feature heads: ``--measured``, a ``benchmarks/gpu_fast.py`` heads section), states
the fit's residuals, and predicts each small drafter of ``--small`` (width:layers:draft vocabulary; mdsd's
:class:`~mdsd.drafters.SmallDrafter`) against the target. A prediction, not a measurement: it says which
shapes stay under a cost budget before the GPU measures them. Where the heads section also timed small
drafters (gpu_fast's SMALL_DRAFTERS), their rows carry ``measured_ms`` beside the prediction but stay out of
the fit: they check it. So do the heads of ``--checks`` (gpu_fast files with a ``fused_heads`` section) that
read several of the target's layers (EAGLE-3's fused features: rows ``fusedN:I:M``, N layers), each ratio
taken against its own file's target.

Run:  python benchmarks/bench_drafter_cost.py [--small 512:4:16384 ...]
Writes benchmarks/results/drafter_cost.json (+ .csv).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from mdsd.costs import forward_cost
from mdsd.harness.experiment import config_from_cli, write_results

HERE = Path(__file__).resolve().parent
MODELS = Path.home() / ".cache" / "mdsd" / "models"
CONTEXT = 256
# ops that launch no kernel: metadata only (a reshape of a contiguous tensor is a view)
VIEWS = {
    "aten::view", "aten::reshape", "aten::_unsafe_view", "aten::transpose", "aten::t", "aten::expand",
    "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::as_strided",
    "aten::alias", "aten::detach", "aten::split", "aten::chunk", "aten::unbind", "aten::narrow",
    "aten::lift_fresh", "aten::empty", "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg",
    "aten::contiguous", "aten::to", "aten::_to_copy_noop", "aten::result_type", "aten::is_nonzero",
    "aten::item", "aten::_local_scalar_dense", "aten::lift", "aten::unflatten", "aten::flatten",
}  # fmt: skip


@dataclass
class Config:
    small: tuple[str, ...] = field(
        default=("512:2:16384", "512:4:16384", "512:4:32768", "768:4:32768", "512:6:16384", "1024:4:32768"),
        metadata={"help": "small drafters to predict, width:layers:draft vocabulary"},
    )
    measured: str = field(
        default=str(HERE / "results" / "gpu_fast_h200_1129_heads.json"),
        metadata={"help": "a gpu_fast.py run with a heads section (captured_ms at B = 1, t = 1)"},
    )
    checks: tuple[str, ...] = field(
        default=(str(HERE / "results" / "gpu_fast_drafters_h200_1130.json"),),
        metadata={"help": "gpu_fast runs with a fused_heads section: their fused heads, predicted, checked"},
    )
    target: str = field(default=str(MODELS / "qwen2.5-coder-1.5b-instruct"), metadata={"help": "config dir"})
    draft: str = field(default=str(MODELS / "qwen2.5-coder-0.5b-instruct"), metadata={"help": "config dir"})
    output_dir: str = field(default=str(HERE / "results"), metadata={"help": "where the results go"})
    name: str = field(default="drafter_cost", metadata={"help": "results file name"})


def meta_lm(config_dir: str):
    """A ``transformers`` causal LM of the config in ``config_dir``, on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(config_dir, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.eval()


def kernels(model) -> int:
    """Kernel-launching top-level aten ops of one captured decode forward of ``model`` (a causal LM over
    mdsd's static cache, or one of mdsd's drafters over its own) at B = 1: one token after CONTEXT."""
    from mdsd.tree.draft import causal
    from mdsd.tree.drafter import Drafter
    from mdsd.tree.static import StaticLM

    own = isinstance(model, Drafter)
    cache = model.static_cache(1, CONTEXT + 8, 1.0) if own else StaticLM(model, 1, CONTEXT + 8)
    device = "meta"

    def features(t: int):
        if not getattr(model, "reads_features", False):
            return None
        width = model.head_config.layer.hidden_size * max(1, len(model.head_config.feature_layers))
        return torch.zeros(1, t, width, dtype=torch.bfloat16, device=device)

    real = torch.ones(1, CONTEXT, dtype=torch.bool, device=device)
    at = torch.arange(CONTEXT, device=device)[None]
    ids = torch.zeros(1, CONTEXT, dtype=torch.long, device=device)
    with torch.no_grad():
        cache.forward(ids, causal(real), at, 1, real, features=features(CONTEXT))
        cache.commit(at, torch.full((1,), CONTEXT, device=device))
        block = torch.ones(1, 1, dtype=torch.bool, device=device)
        new, pos = (
            torch.zeros(1, 1, dtype=torch.long, device=device),
            torch.full((1, 1), CONTEXT, device=device),
        )
        cache.begin()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            cache.forward(new, causal(block), pos, 1, block, features=features(1))
    count = 0
    for event in prof.events():
        if not event.name.startswith("aten::") or event.name in VIEWS:
            continue
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        count += parent is None
    return count


def _pick(row: dict) -> tuple[int, int]:
    return row["intermediate"], row["draft_vocab"]


def _name(row: dict) -> str:
    """A measured row's model by shape: ``target``, ``draft``, ``head:I:M``, ``fusedN:I:M`` (a head reading N
    layers) or ``small:H:L:M``."""
    if row.get("feature_layers"):
        return f"fused{len(row['feature_layers'])}:{row['intermediate']}:{row['draft_vocab']}"
    if row["model"] == "head":
        return f"head:{row['intermediate']}:{row['draft_vocab']}"
    if row["model"] == "small":
        return f"small:{row['width']}:{row['layers']}:{row['draft_vocab']}"
    return row["model"]


def head(target, intermediate: int, draft_vocab: int, feature_layers: tuple[int, ...] = ()):
    """A feature head on ``target`` (meta) of that MLP width and draft vocabulary, reading the target's final
    state or the outputs of ``feature_layers``."""
    from mdsd.drafters.head import FeatureHead, HeadConfig
    from mdsd.drafters.layer import LayerShape

    V, _ = target.get_input_embeddings().weight.shape
    shape = LayerShape.of_config(target.config, intermediate)
    config = HeadConfig(shape, V, draft_vocab, "", "", "qwen2", tuple(feature_layers))
    with torch.device("meta"):
        rows = target.get_output_embeddings().weight[:draft_vocab]
        embed = target.get_input_embeddings().weight
        return FeatureHead(config, embed, rows, torch.arange(draft_vocab)).to(torch.bfloat16)


def small(target, width: int, layers: int, draft_vocab: int):
    """A small drafter on ``target`` (meta): ``layers`` layers of ``width`` (heads of 64, two key/value
    heads, an MLP three times as wide) and ``draft_vocab`` output rows."""
    from mdsd.drafters.layer import LayerShape
    from mdsd.drafters.small import SmallConfig, SmallDrafter

    V, E = target.get_input_embeddings().weight.shape
    shape = LayerShape(width, 3 * width, width // 64, 2, 64, rope_theta=1e6)
    config = SmallConfig(shape, layers, V, E, draft_vocab, "", "", "", "qwen2")
    with torch.device("meta"):
        return SmallDrafter(config, target.get_input_embeddings().weight, torch.arange(draft_vocab)).to(
            torch.bfloat16
        )


def measured_rows(path: str, section: str = "heads") -> list[dict]:
    """The B = 1, t = 1 rows of a gpu_fast heads (or fused_heads) section, with their shapes."""
    rows = json.loads(Path(path).read_text())[section]
    return [r for r in rows if r["B"] == 1 and r["tokens"] == 1 and "captured_ms" in r]


def checked_rows(paths: tuple[str, ...]) -> dict[str, tuple[dict, float]]:
    """{name: (row, its file's target captured_ms)} of the fused heads the ``--checks`` files timed."""
    out = {}
    for path in paths:
        rows = measured_rows(path, "fused_heads")
        target_ms = next(r["captured_ms"] for r in rows if r["model"] == "target")
        out |= {_name(r): (r, target_ms) for r in rows if r.get("feature_layers")}
    return out


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    target, draft = meta_lm(cfg.target), meta_lm(cfg.draft)
    base = forward_cost(target)
    built = {"target": target, "draft": draft}
    timed_rows = measured_rows(cfg.measured)
    for row in timed_rows:
        if row["model"] == "head":
            built[_name(row)] = head(target, *_pick(row))
    timed = {_name(r): r["captured_ms"] for r in timed_rows}
    checks = checked_rows(cfg.checks)
    for name, (row, _) in checks.items():
        built[name] = head(target, *_pick(row), tuple(row["feature_layers"]))
    specs = list(cfg.small) + [n.removeprefix("small:") for n in timed if n.startswith("small:")]
    for spec in dict.fromkeys(specs):
        built[f"small:{spec}"] = small(target, *(int(x) for x in spec.split(":")))
    counted = {}
    for name, model in built.items():
        cost = forward_cost(model)
        counted[name] = {
            "kernels": kernels(model),
            "gbytes": 2 * cost.multiply_adds / 1e9,
            "macs_ratio": cost / base,
        }
    fit_rows = [(name, ms) for name, ms in timed.items() if not name.startswith("small:")]
    A = np.array([[counted[n]["kernels"], counted[n]["gbytes"]] for n, _ in fit_rows])
    y = np.array([ms for _, ms in fit_rows])
    (per_kernel, per_gbyte), *_ = np.linalg.lstsq(A, y, rcond=None)
    target_ms = per_kernel * counted["target"]["kernels"] + per_gbyte * counted["target"]["gbytes"]
    rows = []
    for name, c in counted.items():
        predicted = per_kernel * c["kernels"] + per_gbyte * c["gbytes"]
        measured, of = timed.get(name), timed["target"]
        if name in checks:
            measured, of = checks[name][0]["captured_ms"], checks[name][1]
        rows.append(
            {
                "model": name,
                **c,
                "predicted_ms": predicted,
                "measured_ms": measured,
                "predicted_ratio": predicted / target_ms,
                "measured_ratio": None if measured is None else measured / of,
                "in_fit": name in dict(fit_rows),
            }
        )
        shown = "" if measured is None else f" measured {measured:.3f}"
        print(f"{name:22s} kernels {c['kernels']:5d}  GB {c['gbytes']:.3f}  predicted {predicted:.3f} ms"
              f" ({predicted / target_ms:.3f} of the target){shown}")  # fmt: skip
    fit = {
        "ms_per_kernel": per_kernel,
        "ms_per_gbyte": per_gbyte,
        "TBps": 1 / per_gbyte if per_gbyte > 0 else None,
        "calibrated_on": cfg.measured,
        "residuals_ms": {
            n: float(A[i] @ [per_kernel, per_gbyte] - y[i]) for i, (n, _) in enumerate(fit_rows)
        },
    }
    print(f"fit: {per_kernel * 1e3:.2f} µs a kernel, {fit['TBps']:.2f} TB/s; residuals {fit['residuals_ms']}")
    write_results(Path(cfg.output_dir), cfg.name, rows, cfg, 0, fit=fit, context=CONTEXT, dtype="bfloat16")


if __name__ == "__main__":
    main()
