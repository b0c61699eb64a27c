"""Passes over the vocabulary per decoding step: the step's memory traffic, counted on any device.

On a GPU the work of a wide tree's step outside its forwards is passes over [B, nodes, V] tensors
(softmaxes, the drafting's laws, the verifiers' residuals), and at V = 151,936 and B = 64 each pass over one
node's rows moves ~39 MB. This benchmark counts them where no GPU is: it decodes with tiny models whose
vocabulary V = 961 = 31² differs from every other size, on the fast path uncompiled (the step's Python runs),
and watches every torch call (a ``TorchFunctionMode``). A call that reads or writes a tensor of at least
B · V elements, a multiple of V, counts as numel / (B · V) passes (a gather or search as its output's size;
views and calls that return their input unchanged do not count). Calls made inside a model forward
(``StaticLM.forward``: embedding, head, the non-finite guard) are counted apart. Beside them, *calls*: the
torch calls that compute something (not views, not conversions to the tensor's own dtype), about the kernels
an eagerly captured step (``compile="cudagraph"``) replays, whatever their size. ``lookup`` (prompt lookup
alone) proposes inside the step, over its context buffer, as on a GPU (``PromptLookup.propose_table``).

Run:  python benchmarks/bench_passes.py [--trees none chain:4 binary:3 dynamic:4,2,2,8]
Writes benchmarks/results/NAME.json (+ .csv; NAME = passes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from bench_decode import SHAPES, _decoder, build, watched_forwards
from bench_decode import Config as DecodeConfig
from torch.overrides import TorchFunctionMode

import mdsd.tree.compiled as compiled
from mdsd.harness.experiment import config_from_cli, write_results

INDEXED = {"gather", "take_along_dim", "searchsorted", "index_select", "__getitem__"}  # cost: the output


@dataclass
class Config:
    trees: tuple[str, ...] = field(
        default=("none", "lookup", "chain:4", "binary:3", "dynamic:4,2,2,8"),
        metadata={"help": "none: autoregressive; lookup: prompt lookup alone"},
    )
    verifier: str = field(default="rrsw", metadata={"help": "verifier of multi-draft nodes"})
    vocabulary: int = field(
        default=961, metadata={"help": "V: 31², so the samplers' √V blocks tile it; no other size divides it"}
    )
    batch: int = field(default=4, metadata={"help": "rows B"})
    max_new_tokens: int = field(default=32, metadata={"help": "tokens per row"})
    temperature: float = field(default=0.6, metadata={"help": "sampling temperature"})
    seed: int = field(default=0, metadata={"help": "seed of weights, prompts and decoding"})
    name: str = field(default="passes", metadata={"help": "results file name (OUT_DIR/NAME.json)"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where NAME.json goes"})


class Passes(TorchFunctionMode):
    """Counts passes over tensors of ``unit`` = B · V elements (multiples of V) and calls that compute, in and
    out of forwards. ``widths``: the row lengths counted (default V alone; V + 1 for prefix sums); ``least``:
    the smallest tensor counted (default ``unit``; less for work split in chunks of rows), its passes as a
    fraction. Passes outside forwards are also summed by ``phase`` (set by the caller) in ``by_phase``."""

    def __init__(
        self, vocabulary: int, unit: int, widths: tuple[int, ...] = (), least: int | None = None
    ) -> None:
        super().__init__()
        self.vocabulary, self.unit = vocabulary, unit
        self.widths, self.least = widths or (vocabulary,), unit if least is None else least
        self.inside = self.outside = 0.0
        self.calls_inside = self.calls_outside = 0
        self.in_forward = False
        self.phase, self.by_phase = "", {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        in_place = name.endswith("_") and not name.endswith("__")
        tensors = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        tensors = [t for t in tensors if not isinstance(t, torch.nn.Parameter)]  # weights: not the step's
        if (
            isinstance(out, tuple | list)
            and out
            and all(isinstance(t, torch.Tensor) and t._base is None for t in out)
        ):
            # new values and indices (topk, sort, max): the inputs' passes
            sizes = [t.numel() for t in tensors]
        elif not isinstance(out, torch.Tensor) or (not in_place and any(out is a for a in tensors)):
            return out  # not a tensor, or the input itself (a conversion to its own dtype)
        elif out._base is not None and not in_place:
            return out  # a view
        else:
            sizes = [out.numel()] if name in INDEXED else [t.numel() for t in (*tensors, out)]
        if self.in_forward:
            self.calls_inside += 1
        else:
            self.calls_outside += 1
        big = [n for n in sizes if n >= self.least and any(n % w == 0 for w in self.widths)]
        if big:
            if self.in_forward:
                self.inside += max(big) / self.unit
            else:
                self.outside += max(big) / self.unit
                self.by_phase[self.phase] = self.by_phase.get(self.phase, 0.0) + max(big) / self.unit
        return out


def count(decoder, prompts: list[list[int]], cfg: Config) -> dict:
    """Steps and passes per step (outside and inside the forwards) of one decode."""
    mode = Passes(cfg.vocabulary, cfg.batch * cfg.vocabulary)
    steps = [0]
    step = compiled.decode_step

    def in_forward(original):
        def forward(self, *args, **kwargs):
            mode.in_forward = True
            try:
                return original(self, *args, **kwargs)
            finally:
                mode.in_forward = False

        return forward

    def counted_step(*args, **kwargs):
        steps[0] += 1
        return step(*args, **kwargs)

    compiled.decode_step = counted_step
    try:
        with watched_forwards(in_forward), mode:
            decoder.generate_batch(prompts, cfg.max_new_tokens, torch.Generator().manual_seed(cfg.seed))
    finally:
        compiled.decode_step = step
    n = steps[0]
    return {
        "steps": n,
        "passes_per_step": mode.outside / n,
        "forward_passes_per_step": mode.inside / n,
        "calls_per_step": mode.calls_outside / n,
        "forward_calls_per_step": mode.calls_inside / n,
    }


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    torch.set_num_threads(1)
    decode = DecodeConfig(verifier=cfg.verifier, temperature=cfg.temperature)
    target_shape, draft_shape = ((*s[:-1], cfg.vocabulary) for s in SHAPES["tiny"])
    target, draft = (
        build(target_shape, cfg.seed, "cpu", "float32"),
        build(draft_shape, cfg.seed + 1, "cpu", "float32"),
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    prompts = torch.randint(cfg.vocabulary, (cfg.batch, 32), generator=gen).tolist()
    rows = []
    for spec in cfg.trees:
        # a source proposes inside the step, as on a GPU
        decoder = _decoder(target, draft, "lookup-device" if spec == "lookup" else spec, decode, "none")
        row = {"tree": spec, "batch": cfg.batch} | count(decoder, prompts, cfg)
        rows.append(row)
        print(
            f"{spec:>16}: {row['passes_per_step']:6.1f} passes over [B, V] a step outside the forwards, "
            f"{row['forward_passes_per_step']:6.1f} inside; {row['calls_per_step']:6.1f} calls outside, "
            f"{row['forward_calls_per_step']:6.1f} inside ({row['steps']} steps)"
        )
    write_results(cfg.out_dir, cfg.name, rows, cfg, cfg.seed)


if __name__ == "__main__":
    main()
