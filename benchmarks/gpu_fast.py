"""The decoder's fast path on a GPU: forwards, decoding steps, profiles, host reads, the target's law.

One script for one short GPU session (never part of CI). Sections, each guarded (a failure is recorded
and the next runs) and written to ``$OUT/gpu_fast.json`` as it finishes:

  env        torch, transformers, the card, copy bandwidth (the memory floor of a forward)
  forwards   one forward of the Qwen2.5-1.5B / 0.5B-shaped pair (random weights, bf16) at B = 1 and 64:
             mdsd's static forward eager and captured in a CUDA graph, beside transformers' StaticCache
             forward captured in one CUDA graph (1 token)
  decode     tokens/s, step time and the step's forwards timed alone (benchmarks/bench_decode.py) for
             autoregressive decoding, prompt lookup alone (by default on the host at B = 1 and inside the
             step at B = 64, and the other way round) and the trees, fast path (CUDA graphs) at B = 1 and
             64, eager at B = 1
  fused      the same for the step compiled by inductor and then captured (``compile="inductor-cudagraph"``):
             AR at B = 1, binary:3 and the dynamic tree at B = 64 (with the warm-up's seconds: it compiles)
  fused_forwards
             both models' forwards at B = 1 (t = 1, 16) compiled by inductor and captured, beside the captured
             ones (experiments/gpu_speedups.py --forwards ... --fused predicts on them)
  profiles   mdsd.measure_profile(compile=True) of both models, saved as CostProfile files for the cost model
  syncs      host synchronisations of the fast path per step and per decode (torch.cuda sync debug mode,
             two decode lengths), tiny models
  law        tiny float32 models on CUDA: greedy tokens equal on both paths; the first two tokens of
             10,000 decodes per prompt on the fast path against the exact law (chi-square, as
             tests/tree/test_lossless.py); prompt lookup inside the captured step against the host's
             proposals (the same sampled tokens)
  lookup     prompt lookup's device table against the per-row lookup (benchmarks/bench_lookup.py; on CUDA
             compiled and captured too)
  hf         Hugging Face generate (default cache, and cache_implementation="static", which compiles)
  heads      a feature head's forward (three shapes: MLP width, draft vocabulary) beside both models': eager,
             captured, and fused at B = 1, t = 1; its time and its multiply-adds and bytes per token against
             the target's
  head_decode
             decoding steps on the fast path with a feature head as the drafter beside the 0.5B-shaped
             draft (autoregressive, chain:4, binary:3 at B = 1 and 64): step ms, tokens/s
  head_fused head_decode's steps at B = 1 fused by inductor, then captured
  head_kernels
             a captured chain:4 step's device kernels with the head and with the draft (torch.profiler)
  fused_heads
             the trained drafters' shapes: the head reading the final state and reading three layers fused
             (EAGLE-3), and the small drafter, forwards as heads
  drafter_decode
             head_decode's steps for those three drafters (chain:4; binary:3 for the fused head and the
             small drafter), B = 1 and 64
  drafter_fused
             chain:4 with the fused head and with the small drafter at B = 1, fused by inductor, captured
  ar_hf      autoregressive decoding like for like in one process: Hugging Face generate (static cache and
             default) and mdsd's (captured, fused), the steady per-token time with prefill left out

    OUT=/tmp/gpu_out PYTHONPATH=$PWD python3 benchmarks/gpu_fast.py [section ...]   # in the order given
    python3 benchmarks/gpu_fast.py --small     # tiny shapes on the CPU: checks the script itself

Each section runs in a process of its own (``--one-process``: all in this one), so that a device-side
assert in one cannot fail the others; the environment, the model pair included, is rebuilt per section.
Every file written carries ``provenance`` (:func:`mdsd.outputs.provenance`): the command, the commit (with
the changed paths of a dirty tree), the time, the versions and the device. ``$OUT`` in the committed results
(benchmarks/results/) is refused from a dirty tree unless ``MDSD_SCRATCH=<why>`` marks the run as scratch.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import bench_decode  # beside this file: the script's folder is on the path
import numpy as np
import torch

import mdsd
import mdsd.outputs

OUT = Path(os.environ.get("OUT") or "/tmp/gpu_out")
RESULT = os.environ.get("GPU_FAST_RESULT", "gpu_fast.json")
SMALL = "--small" in sys.argv
DEV = torch.device("cuda" if torch.cuda.is_available() and not SMALL else "cpu")
FAST = "cudagraph" if DEV.type == "cuda" else "none"
SHAPE = "tiny" if SMALL else "qwen"
DTYPE = "bfloat16" if DEV.type == "cuda" else "float32"
T0 = time.time()
RES: dict = {"_times": {}}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def save() -> None:
    """Write every result so far (a cut run keeps what it finished), with its :func:`provenance`."""
    OUT.mkdir(parents=True, exist_ok=True)
    RES["provenance"] = provenance()
    (OUT / RESULT).write_text(json.dumps(RES, indent=1, default=str))


def keep(section: str, rows: list[dict], row: dict, text: str | None = None) -> None:
    """Append ``row`` to section ``section``'s ``rows``, save everything and log the row (or ``text``)."""
    rows.append(row)
    RES[section] = rows
    save()
    log(f"{section} {json.dumps(row, default=str)}" if text is None else text)


@functools.cache
def provenance() -> dict:
    """Where the results come from (:func:`mdsd.outputs.provenance`: the command, the commit, or on a device
    machine's copy the one named in ``$MDSD_COMMIT``, the changed paths of a dirty tree, the versions, the
    device) and the start time (UTC). A ``$OUT`` in the committed results is refused from a dirty tree unless
    ``$MDSD_SCRATCH`` marks the run as scratch."""
    device = torch.cuda.get_device_name(DEV) if DEV.type == "cuda" else None
    started = datetime.datetime.fromtimestamp(T0, datetime.timezone.utc)
    return {**mdsd.outputs.provenance(OUT, device), "started_utc": started.isoformat(timespec="seconds")}


def section(name, fn) -> None:
    """Run one section and save what it returned (or its error)."""
    start = time.time()
    try:
        RES[name] = fn()
    except Exception as err:  # one broken section must not hide the others
        RES[name] = {"error": repr(err), "traceback": traceback.format_exc()[-3000:]}
        log(f"{name} FAILED: {err!r}")
    RES["_times"][name] = round(time.time() - start, 2)
    save()
    log(f"{name} done in {time.time() - start:.1f}s")


def isolated(name: str) -> None:
    """Run one section in a process of its own: a device-side assert poisons the CUDA context of its
    process, and every later section of that process would fail with it."""
    part = f".part_{name}.json"
    start = time.time()
    cmd = [sys.executable, __file__, name, *(a for a in sys.argv[1:] if a.startswith("--"))]
    proc = subprocess.run(cmd, env=dict(os.environ, GPU_FAST_RESULT=part, GPU_FAST_CHILD="1"))
    path = OUT / part
    if path.exists():
        child = json.loads(path.read_text())
        path.unlink()
        RES[name] = child.get(name, {"error": "no result"})
        RES["_times"][name] = child["_times"].get(name)
    else:
        RES[name] = {"error": f"the section's process ended with {proc.returncode} and wrote nothing"}
        RES["_times"][name] = round(time.time() - start, 2)
    save()


def sync() -> None:
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def ms(fn, reps: int = 20) -> float:
    """Median milliseconds of fn() after two warm-ups (CUDA events on a GPU)."""
    fn()
    fn()
    sync()
    times = []
    for _ in range(reps):
        if DEV.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            start = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - start))
    return float(np.median(times))


PAIR: dict = {}


def pair():
    if not PAIR:
        shapes = bench_decode.SHAPES[SHAPE]
        PAIR["target"] = bench_decode.build(shapes[0], 0, str(DEV), DTYPE)
        PAIR["draft"] = bench_decode.build(shapes[1], 1, str(DEV), DTYPE)
    return PAIR["target"], PAIR["draft"]


# ---------------------------------------------------------------------------------------------------------
def env() -> dict:
    import transformers

    info = {"torch": torch.__version__, "transformers": transformers.__version__, "device": str(DEV)}
    if DEV.type == "cuda":
        prop = torch.cuda.get_device_properties(0)
        info.update(gpu=prop.name, sms=prop.multi_processor_count)
        x = torch.empty(2**28, dtype=torch.float32, device=DEV)
        y = torch.empty_like(x)
        info["copy_TBps"] = round(2 * x.numel() * 4 / (ms(lambda: y.copy_(x), 10) * 1e-3) / 1e12, 2)
        del x, y
    target, draft = pair()
    for who, m in (("target", target), ("draft", draft)):
        info[f"{who}_parameters"] = sum(p.numel() for p in m.parameters())
    if "copy_TBps" in info:
        for who in ("target", "draft"):
            info[f"{who}_floor_ms"] = info[f"{who}_parameters"] * 2 / (info["copy_TBps"] * 1e12) * 1e3
    return info


CONTEXT = 64 if SMALL else 256  # cache length of the forwards sections


def static_forwards(model, B: int, tokens: tuple[int, ...]):
    """``(t, run)`` for each t in ``tokens``: ``run()`` is one static forward of ``model`` (mdsd's), t new
    tokens for each of B rows after a cache of CONTEXT entries, run once already (so it can be captured).
    One of mdsd's drafters (a feature head, a small drafter) runs over its own static cache; a feature head
    (``reads_features``) reads random features [B, t, H] where the decoder gives it the target's; every t
    keeps all t rows of logits, at T = 1 (a fused head: the fused [B, t, n·H] of the target's n layers, what
    it reads at a step's first depth)."""
    from mdsd.tree.draft import causal
    from mdsd.tree.drafter import Drafter
    from mdsd.tree.static import StaticLM

    own = isinstance(model, Drafter)
    head = getattr(model, "reads_features", False)
    vocab = model.vocab_size() if own else model.config.vocab_size
    lm = model.static_cache(B, CONTEXT + 64, 1.0) if own else StaticLM(model, B, CONTEXT + 64)

    def features(t: int) -> torch.Tensor | None:
        if not head:
            return None
        weight, width = model.fc.weight, model.head_config.layer.hidden_size
        width *= max(1, len(model.feature_layers))
        return torch.randn(B, t, width, dtype=weight.dtype, device=DEV)

    real = torch.ones(B, CONTEXT, dtype=torch.bool, device=DEV)
    ids = torch.randint(vocab, (B, CONTEXT), device=DEV)
    at = torch.arange(CONTEXT, device=DEV).expand(B, -1)
    lm.forward(ids, causal(real), at, 1, real, features=features(CONTEXT))
    lm.commit(at, torch.full((B,), CONTEXT, device=DEV))
    for t in tokens:
        new = torch.randint(vocab, (B, t), device=DEV)
        block = torch.ones(B, t, dtype=torch.bool, device=DEV)
        vis, pos = causal(block), CONTEXT + torch.arange(t, device=DEV).expand(B, -1)
        read = features(t)

        def run(new=new, vis=vis, pos=pos, t=t, block=block, lm=lm, f=read):
            lm.begin()
            return lm.forward(new, vis, pos, t, block, features=f)[0]

        run()
        yield t, run


@torch.no_grad()
def forwards() -> list[dict]:
    from mdsd.tree.compiled import capture

    rows = []
    context = CONTEXT
    for who, model in zip(("target", "draft"), pair(), strict=True):
        for B in (1, 64):
            for t, run in static_forwards(model, B, (1, 5, 16)):
                eager = ms(run, 10)
                graph = ms(capture(run, FAST), 30)
                rows.append(
                    dict(model=who, B=B, tokens=t, context=context, eager_ms=eager, captured_ms=graph)
                )
                log(f"forward {who} B={B} t={t}: eager {eager:.2f} ms, captured {graph:.2f} ms")
    if DEV.type == "cuda":  # transformers' StaticCache forward in one CUDA graph, side by side
        from transformers import StaticCache

        for who, model in zip(("target", "draft"), pair(), strict=True):
            row = dict(model=who, B=1, tokens=1, context=context)
            try:
                try:
                    cache = StaticCache(config=model.config, max_cache_len=context + 64)
                except TypeError:
                    cache = StaticCache(
                        config=model.config,
                        max_batch_size=1,
                        max_cache_len=context + 64,
                        device=DEV,
                        dtype=model.dtype,
                    )
                kw = mdsd.tree.cache.cache_keywords(model, cache)
                prefix = torch.randint(model.config.vocab_size, (1, context), device=DEV)
                model(
                    input_ids=prefix, cache_position=torch.arange(context, device=DEV), use_cache=True, **kw
                )
                ids = torch.randint(model.config.vocab_size, (1, 1), device=DEV)
                position = torch.tensor([context], device=DEV)

                def hf(model=model, ids=ids, position=position, kw=kw):
                    return model(input_ids=ids, cache_position=position, use_cache=True, **kw).logits

                row["hf_static_eager_ms"] = ms(hf, 10)
                row["hf_static_captured_ms"] = ms(mdsd.tree.compiled.capture(hf, "cudagraph"), 30)
                log(f"forward {who} HF StaticCache: {row}")
            except Exception as err:
                row["hf_static_error"] = repr(err)[:300]
            rows.append(row)
    return rows


@torch.no_grad()
def fused_forwards() -> list[dict]:
    """Both models' forwards at B = 1 (t = 1 and 16) compiled by inductor, then captured
    (``inductor-cudagraph``; on the CPU inductor alone), beside the same forwards captured as they are: how
    near its memory floor a fused forward gets. Each shape compiles once (``compile_s``)."""
    from mdsd.tree.compiled import capture

    backend = "inductor-cudagraph" if DEV.type == "cuda" else "inductor"
    rows = []
    for who, model in zip(("target", "draft"), pair(), strict=True):
        for t, run in static_forwards(model, 1, (1, 16)):
            row = dict(model=who, B=1, tokens=t, context=CONTEXT, backend=backend)
            try:
                row["captured_ms"] = ms(capture(run, FAST), 30)
                start = time.time()
                fused = capture(run, backend)
                fused()
                row["compile_s"] = round(time.time() - start, 1)
                row["fused_ms"] = ms(fused, 30)
            except Exception as err:
                row["error"] = repr(err)[:300]
            keep("fused_forwards", rows, row, f"fused forward {who} t={t}: {row}")
    return rows


METHODS = [
    ("none", "none"),
    ("lookup", "topk"),
    ("chain:4", "single"),
    ("binary:3", "rrsw"),
    ("dynamic:8,2,3,24", "rrsw"),
]


@torch.no_grad()
def decode() -> list[dict]:
    runs = [(FAST, spec, B) for spec, _ in METHODS for B in (1, 64)]
    runs += [(FAST, "lookup-device", 1), (FAST, "lookup-host", 64)]  # lookup's default is host, then device
    return decode_rows("decode", runs + [("eager", "none", 1), ("eager", "chain:4", 1)])


@torch.no_grad()
def fused() -> list[dict]:
    """The step compiled by inductor, then captured (``inductor-cudagraph``; on the CPU, inductor alone)."""
    path = "inductor-cudagraph" if DEV.type == "cuda" else "inductor"
    return decode_rows("fused", [(path, "none", 1), (path, "binary:3", 64), (path, "dynamic:8,2,3,24", 64)])


@torch.no_grad()
def verifiers() -> list[dict]:
    """binary:3 decoded on the fast path (FAST) under each multi-draft verifier at B = 1 and 64, in one
    process: what the optimal verifier's step costs beside RRS's, RRSw's, K-SEQ's and SpecHub's (random
    weights: the acceptance means nothing, ``step_ms`` and ``host_ms`` are the figures)."""
    names = ("rrs", "rrsw", "kseq", "spechub", "optimal")
    return decode_rows("verifiers", [(FAST, "binary:3", B, name) for B in (1, 64) for name in names])


def decode_rows(name: str, runs: list[tuple]) -> list[dict]:
    """One row per (path, tree, B[, verifier at multi-draft nodes: RRSw unless named]): bench_decode's
    figures, saved as section ``name`` after each row (a run cut by its time limit keeps its rows). The
    forwards are timed captured as the ``decode`` section times them (``inductor-cudagraph``'s own forwards
    would compile per shape)."""
    target, draft = pair()
    vocab = target.config.vocab_size
    new = 16 if SMALL else 64
    cfg = bench_decode.Config(device=str(DEV), dtype=DTYPE, max_new_tokens=new, prompt_tokens=64, repeats=10)
    cfg.decodes = 1  # one timed decode a row: device time is scarce
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(vocab, (64, cfg.prompt_tokens), generator=gen).tolist()
    rows = []
    for path, spec, B, *verifier in runs:
        cfg.verifier = verifier[0] if verifier else "rrsw"
        row = {"path": path, "tree": spec, "batch": B, "verifier": cfg.verifier}
        try:
            forwards = "eager" if path == "eager" else FAST
            row = {**bench_decode.measure_row(target, draft, spec, path, prompts[:B], cfg, forwards), **row}
        except Exception as err:
            row["error"] = repr(err)[:300]
        shown = {k: row.get(k) for k in ("tokens_per_second", "step_ms", "forwards_ms", "error")}
        keep(name, rows, row, f"decode {path} {spec} {cfg.verifier} B={B}: " + json.dumps(shown, default=str))
    return rows


@torch.no_grad()
def profiles() -> dict:
    target, draft = pair()
    tokens = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 25, 32] if not SMALL else [1, 5, 16]
    grid = dict(batches=[1, 4, 16, 64], tokens=tokens, contexts=[128, 512] if not SMALL else [32], repeats=5)
    out = {}
    for who, model in (("target", target), ("draft", draft)):
        prof = mdsd.measure_profile(model, progress=False, compile=FAST, **grid)
        path = prof.save(OUT / f"profile_{who}_static.json")
        out[who] = {
            "path": str(path),
            "B1_ms": {t: round(1e3 * prof.seconds(1, t, grid["contexts"][0]), 3) for t in tokens},
        }
        log(f"profile {who}: {out[who]['B1_ms']}")
    return out


@torch.no_grad()
def syncs() -> list[dict]:
    if DEV.type != "cuda":
        return [{"skipped": "no CUDA"}]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_lms import perturbed, tiny_lm

    from mdsd.tree.spec import parse_tree

    target = tiny_lm(0, vocab=1000)
    draft = perturbed(target, 0.5, seed=1).to(DEV)  # the noise is drawn on the CPU, then both move
    target = target.to(DEV)
    rows = []
    prompt = torch.randint(1000, (1, 16), device=DEV)
    for spec, name in [
        ("chain:4", "single"),
        ("binary:3", "rrsw"),
        ("binary:3", "kseq"),
        ("binary:3", "spechub"),
        ("binary:3", "optimal"),
        ("dynamic:4,2,2,8", "rrs"),
        ("chain:4", "block"),
        ("binary:2", "traversal"),
    ]:
        row = {"tree": spec, "verifier": name}
        try:
            dec = mdsd.TreeDecoder(target, draft, parse_tree(spec), name, 0.8, eos_token_id=[], compile=True)
            dec.generate(prompt, 32, torch.Generator(device=DEV).manual_seed(0))  # captures
            counts = []
            for new in (32, 96):  # two lengths: syncs = per decode + per step · steps
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode("warn")
                    try:
                        out = dec.generate(prompt, new, torch.Generator(device=DEV).manual_seed(1))
                    finally:
                        torch.cuda.set_sync_debug_mode("default")
                found = [str(w.message)[:90] for w in caught if "synchroniz" in str(w.message)]
                counts.append((out.steps, len(found)))
            (s1, n1), (s2, n2) = counts
            per_step = (n2 - n1) / max(s2 - s1, 1)
            row.update(steps=[s1, s2], syncs=[n1, n2], per_step=per_step, per_decode=n1 - per_step * s1)
        except Exception as err:
            row["error"] = repr(err)[:300]
        rows.append(row)
        log(f"syncs {spec} {name}: {row.get('per_step', row.get('error'))}")
    return rows


@torch.no_grad()
def law() -> list[dict]:
    from scipy.stats import chisquare

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_lms import perturbed, tiny_lm

    from mdsd import Tree

    target = tiny_lm(0)
    draft = perturbed(target, 0.3, seed=1).to(DEV)
    target = target.to(DEV)
    prompts = ([3, 1, 4], [7])
    rows = []
    for name, tree in (
        ("rrsw", Tree((0, 0, 0, 1, 1, 2))),
        ("kseq", Tree((0, 0, 0, 1, 1, 2))),
        ("spechub", Tree((0, 0, 1, 1, 2))),
        ("optimal", Tree((0, 0, 0, 1, 1, 2))),
    ):
        row = {"verifier": name}
        try:
            greedy = [
                mdsd.TreeDecoder(target, draft, tree, name, 0.0, eos_token_id=[], compile=c).generate_batch(
                    [[3, 1, 4], [7, 2]], 24
                )
                for c in (False, True)
            ]
            row["greedy_equal"] = [o.tokens.tolist() for o in greedy[0]] == [
                o.tokens.tolist() for o in greedy[1]
            ]
            dec = mdsd.TreeDecoder(target, draft, tree, name, 1.0, eos_token_id=[], compile=True)
            n = 10_000
            outs = dec.generate_batch(
                [prompts[i % 2] for i in range(2 * n)], 2, torch.Generator(device=DEV).manual_seed(17)
            )
            pvalues = []
            for i, prompt in enumerate(prompts):
                with torch.no_grad():
                    first = target(torch.tensor([prompt], device=DEV)).logits[0, -1].double().cpu()
                    V = first.shape[-1]
                    second = (
                        target(torch.tensor([[*prompt, t] for t in range(V)], device=DEV))
                        .logits[:, -1]
                        .double()
                        .cpu()
                    )
                exact = (torch.softmax(first, -1)[:, None] * torch.softmax(second, -1)).numpy().ravel() * n
                got = np.array([o.tokens.tolist() for o in outs[i::2]])
                counts = np.bincount(got[:, 0] * V + got[:, 1], minlength=V * V).astype(float)
                small = exact < 5  # pooled into one cell, as tests/tree/test_lossless.py does
                obs, exp = counts[~small], exact[~small]
                if small.any():
                    obs, exp = np.append(obs, counts[small].sum()), np.append(exp, exact[small].sum())
                pvalues.append(float(chisquare(obs, exp).pvalue))
            row["chi2_p"] = pvalues
        except Exception as err:
            row["error"] = repr(err)[:300]
        rows.append(row)
        log(f"law {name}: {row}")
    rows.append(lookup_tables(target, draft))
    return rows


def lookup_tables(target, draft) -> dict:
    """Prompt lookup proposing inside the captured step (``propose_table``, the default on CUDA) against
    the same source proposing on the host row by row: the same sampled tokens under one generator."""
    from mdsd import Tree
    from mdsd.sources import PromptLookup

    row = {"verifier": "rrs", "source": "prompt-lookup, inside the step vs on the host"}
    try:
        decodes = []
        for inside in (True, False):
            dec = mdsd.TreeDecoder(
                target,
                draft,
                Tree.kary([2, 2]),
                "rrs",
                0.8,
                eos_token_id=[],
                source=PromptLookup(),
                compile=True,
                propose_inside=inside,
            )
            outs = dec.generate_batch(
                [[3, 1, 4, 3, 1, 4, 3], [7, 7, 7, 2]] * 32, 48, torch.Generator(device=DEV).manual_seed(5)
            )
            decodes.append([(o.tokens.tolist(), o.accepted_per_step) for o in outs])
        row["tables_equal"] = decodes[0] == decodes[1]
        row["accepted"] = int(sum(sum(a) for _, a in decodes[0]))
    except Exception as err:
        row["error"] = repr(err)[:300]
    log(f"law lookup: {row}")
    return row


@torch.no_grad()
def hf() -> list[dict]:
    target, _ = pair()
    cfg = bench_decode.Config(device=str(DEV), max_new_tokens=16 if SMALL else 64, temperature=0.6)
    prompt = torch.randint(target.config.vocab_size, (1, 64), device=DEV)
    rows = []
    for static in (False, True):
        row = {"method": "hf-generate-static" if static else "hf-generate"}
        try:
            row["tokens_per_second"] = bench_decode.hf_generate(target, prompt, cfg, static)
        except Exception as err:
            row["error"] = repr(err)[:300]
        rows.append(row)
        log(f"hf {row}")
    return rows


def lookup() -> list[dict]:
    """Prompt lookup's device table against the per-row lookup (benchmarks/bench_lookup.py), compiled and
    captured as the step runs it; also written to ``$OUT/lookup.json``."""
    import bench_lookup

    args = ["--device", str(DEV), "--out-dir", str(OUT), "--repeats", "5" if SMALL else "20"]
    if DEV.type == "cuda":
        args.append("--compiled")
    bench_lookup.main(args)
    return json.loads((OUT / "lookup.json").read_text())["rows"]


# (MLP width, draft vocabulary) of the feature heads on the 1.5B target: its own MLP and a 32,000-token draft
# vocabulary, then narrower and smaller (FR-Spec's and EAGLE-3's draft vocabularies are 16-32k)
HEADS = ((8960, 32000), (4096, 16384), (2048, 8192))
# (width, layers, draft vocabulary) of small drafters (mdsd.drafters.SmallDrafter; issue 43): the trained one
# (4 x 512) and its neighbours; benchmarks/bench_drafter_cost.py predicts them at 0.10-0.16 of the target
SMALL_DRAFTERS = ((512, 4, 16384), (512, 2, 16384), (1024, 4, 32768))
FUSED = "inductor-cudagraph" if DEV.type == "cuda" else "inductor"  # a forward or step fused, then captured
# the target's layers a fused head reads (EAGLE-3's low, middle and high layers: 1, L/2 - 1, L - 4 of 28; the
# trained fused head's); both of the tiny target's two
FEATURE_LAYERS = (0, 1) if SMALL else (1, 13, 24)


def feature_head(intermediate: int, draft_vocab: int, fused: bool = False):
    """A fresh feature head on the target (its draft vocabulary the first tokens: random weights make any
    choice as good), of HEADS' shape at the qwen shapes, scaled with the target's MLP and vocabulary on
    --small's tiny ones; ``fused``: reading FEATURE_LAYERS' outputs (EAGLE-3) instead of the final state."""
    shape, qwen = bench_decode.SHAPES[SHAPE][0], bench_decode.SHAPES["qwen"][0]
    width = max(1, round(intermediate * shape[1] / qwen[1]))
    rows = max(1, round(draft_vocab * shape[-1] / qwen[-1]))
    target, _ = pair()
    layers = FEATURE_LAYERS if fused else ()
    return mdsd.drafters.FeatureHead.from_target(
        target, torch.arange(rows), intermediate_size=width, feature_layers=layers
    )


def small_drafter(width: int, layers: int, draft_vocab: int):
    """A fresh small drafter on the target of SMALL_DRAFTERS' shape (heads of 64 dimensions, two key/value
    heads, an MLP three times as wide; its draft vocabulary the first tokens) at the qwen shapes, scaled with
    the target's width and vocabulary on --small's tiny ones."""
    shape, qwen = bench_decode.SHAPES[SHAPE][0], bench_decode.SHAPES["qwen"][0]
    width = max(8, round(width * shape[0] / qwen[0]) // 8 * 8)
    rows = max(width, round(draft_vocab * shape[-1] / qwen[-1]))
    target, _ = pair()
    return mdsd.drafters.SmallDrafter.fresh(
        target, torch.arange(rows), width, layers, max(1, width // 64), 1 if width < 128 else 2, 3 * width
    )


def fused_ms(run) -> dict:
    """``run`` compiled by inductor and captured (FUSED): its ``compile_s`` (the first call) and ``fused_ms``,
    or ``fused_error``."""
    from mdsd.tree.compiled import capture

    try:
        start = time.time()
        fused = capture(run, FUSED)
        fused()
        compile_s = round(time.time() - start, 1)
        return {"compile_s": compile_s, "fused_ms": ms(fused, 30)}
    except Exception as err:
        return {"fused_error": repr(err)[:300]}


@torch.no_grad()
def heads() -> list[dict]:
    """Feature heads' and small drafters' forwards beside the target's and the draft's
    (:func:`static_forwards`: after a cache of CONTEXT entries, all t rows of logits kept) at B = 1 (t = 1,
    16) and B = 64 (t = 1): ``eager_ms``, ``captured_ms`` (one CUDA graph) and at B = 1, t = 1 ``fused_ms``
    (:func:`fused_ms`). ``ratio_captured`` (``ratio_fused``): the time over the target's at the same B and
    t; ``macs_ratio`` and ``bytes_ratio``:
    :func:`mdsd.costs.forward_cost` per token over the target's, what the time ratio comes to where both
    forwards are bound by reading their weights. The target first (the ratios' reference), the draft last."""
    _, draft = pair()
    models = [
        *(("head", functools.partial(feature_head, *shape)) for shape in HEADS),
        *(("small", functools.partial(small_drafter, *shape)) for shape in SMALL_DRAFTERS),
        ("draft", lambda: draft),
    ]
    return forward_rows("heads", models)


@torch.no_grad()
def fused_heads() -> list[dict]:
    """:func:`heads`' forwards for the trained drafters' shapes: the feature head (HEADS[1]) reading the
    target's final state and reading FEATURE_LAYERS fused (EAGLE-3; its fuse map reads [B, t, 3·H]), and the
    small drafter (SMALL_DRAFTERS[0]), beside the target's."""
    models = [
        ("head", functools.partial(feature_head, *HEADS[1])),
        ("head-fused", functools.partial(feature_head, *HEADS[1], fused=True)),
        ("small", functools.partial(small_drafter, *SMALL_DRAFTERS[0])),
    ]
    return forward_rows("fused_heads", models)


def forward_rows(name: str, models: list) -> list[dict]:
    """Section ``name``: the target's static forwards, then each of ``models`` ((who, make) pairs), as
    :func:`heads` describes."""
    from mdsd.tree.compiled import capture

    target, _ = pair()
    base = mdsd.costs.forward_cost(target)
    rows, reference = [], {}
    for who, make in [("target", lambda: target), *models]:
        model = make()
        if who.startswith("head"):
            config = model.head_config
            shape = dict(intermediate=config.layer.intermediate_size, draft_vocab=config.draft_vocab)
            shape.update(feature_layers=list(config.feature_layers))
        elif who == "small":
            config = model.small_config
            shape = dict(
                width=config.layer.hidden_size,
                layers=config.layers,
                intermediate=config.layer.intermediate_size,
                draft_vocab=config.draft_vocab,
            )
        else:
            shape = dict(intermediate=model.config.intermediate_size, draft_vocab=model.config.vocab_size)
        cost = mdsd.costs.forward_cost(model)
        shape.update(macs_ratio=cost / base, bytes_ratio=cost.bytes / base.bytes)
        for B, tokens in ((1, (1, 16)), (64, (1,))):
            for t, run in static_forwards(model, B, tokens):
                row = dict(model=who, **shape, B=B, tokens=t, context=CONTEXT)
                try:
                    row.update(eager_ms=ms(run, 10), captured_ms=ms(capture(run, FAST), 30))
                    if B == 1 and t == 1:
                        row.update(fused_ms(run))
                except Exception as err:
                    row["error"] = repr(err)[:300]
                ref = reference.setdefault((B, t), row)  # the target's row
                for kind in ("captured", "fused"):
                    if f"{kind}_ms" in row and f"{kind}_ms" in ref:
                        row[f"ratio_{kind}"] = row[f"{kind}_ms"] / ref[f"{kind}_ms"]
                keep(name, rows, row)
    return rows


@torch.no_grad()
def head_decode() -> list[dict]:
    """Decoding on the fast path (the step captured: FAST) with a feature head (HEADS[1]) as the drafter
    beside the 0.5B-shaped draft: autoregressive, chain:4 (verifier single) and binary:3 (rrsw) at B = 1
    and 64, 64 new tokens (16 with --small) from prompts of 64 random tokens, T = 0.6. ``steps``,
    ``tokens_per_step``, ``step_ms`` and ``tokens_per_second`` over the steps after the first
    (:func:`mdsd.costs.time_decode`; ``seconds_with_warm_up``: all of it, captures included). Random
    weights: the acceptance means nothing; ``step_ms`` (what a step with each drafter costs) is the
    figure."""
    trees = [("none", "none"), *((s, d) for s in ("chain:4", "binary:3") for d in ("draft", "head"))]
    return drafter_rows("head_decode", FAST, [(spec, who, B) for B in (1, 64) for spec, who in trees])


@torch.no_grad()
def head_fused() -> list[dict]:
    """:func:`head_decode`'s steps fused by inductor, then captured (FUSED) at B = 1: autoregressive,
    chain:4 with the head and with the draft, binary:3 with the head (each step shape compiles once:
    ``seconds_with_warm_up``)."""
    runs = [("none", "none", 1), ("chain:4", "head", 1), ("binary:3", "head", 1), ("chain:4", "draft", 1)]
    return drafter_rows("head_fused", FUSED, runs)


@torch.no_grad()
def drafter_decode() -> list[dict]:
    """:func:`head_decode` for the trained drafters' shapes, on the fast path (FAST) at B = 1 and 64:
    autoregressive; chain:4 with the head, the fused head (the target's step then keeps FEATURE_LAYERS'
    outputs for it) and the small drafter; binary:3 with the fused head and the small drafter."""
    trees = [("none", "none"), *(("chain:4", d) for d in ("head", "head-fused", "small"))]
    trees += [("binary:3", d) for d in ("head-fused", "small")]
    return drafter_rows("drafter_decode", FAST, [(spec, who, B) for B in (1, 64) for spec, who in trees])


@torch.no_grad()
def drafter_fused() -> list[dict]:
    """chain:4 with the fused head and with the small drafter at B = 1, the step fused by inductor, then
    captured (FUSED), beside autoregressive decoding fused (each step shape compiles once)."""
    runs = [("none", "none", 1), ("chain:4", "head-fused", 1), ("chain:4", "small", 1)]
    return drafter_rows("drafter_fused", FUSED, runs)


@torch.no_grad()
def head_kernels() -> list[dict]:
    """Where a captured chain:4 step's time goes, with the head and with the draft at B = 1: one decode of
    16 new tokens under torch.profiler (CUDA activity; CUPTI reports the kernels a CUDA graph replays), the
    device kernels per step, their summed time per step, and the ten costliest kernel names."""
    from torch.profiler import ProfilerActivity, profile

    target, drafters, cfg, prompts = drafter_setup(16)
    prompts = torch.tensor(prompts[:1])
    activity = ProfilerActivity.CUDA if DEV.type == "cuda" else ProfilerActivity.CPU
    rows = []
    for who in ("head", "draft"):
        row = dict(path=FAST, tree="chain:4", drafter=who, batch=1)
        try:
            decoder = bench_decode._decoder(target, drafters[who], "chain:4", cfg, FAST)
            mdsd.costs.time_decode(decoder, prompts.tolist(), cfg.max_new_tokens, cfg.seed)  # captures
            with profile(activities=[activity]) as prof:
                out = decoder.generate(
                    prompts.to(DEV), cfg.max_new_tokens, torch.Generator(DEV).manual_seed(1)
                )
                sync()
            steps = len(out.tokens_per_step)
            key = "self_device_time_total" if DEV.type == "cuda" else "self_cpu_time_total"
            events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
            events.sort(key=lambda e: -getattr(e, key))
            row.update(
                steps=steps,
                kernels_per_step=sum(e.count for e in events) / steps,
                kernel_ms_per_step=sum(getattr(e, key) for e in events) / 1e3 / steps,
                top=[(e.key[:80], e.count, round(getattr(e, key) / 1e3, 3)) for e in events[:10]],
            )
        except Exception as err:
            row["error"] = repr(err)[:300]
        keep("head_kernels", rows, row, f"head_kernels {json.dumps(row, default=str)[:600]}")
    return rows


def drafter_setup(new_tokens: int) -> tuple:
    """What the drafter sections decode with: the target, the drafters by name ("none", the 0.5B-shaped
    "draft", the HEADS[1] "head", the same reading FEATURE_LAYERS "head-fused", the SMALL_DRAFTERS[0]
    "small"), bench_decode's config (T = 0.6, RRSw at multi-draft nodes, ``new_tokens`` new tokens) and 64
    prompts of 64 random tokens (token lists)."""
    target, draft = pair()
    drafters = {
        "none": None,
        "draft": draft,
        "head": feature_head(*HEADS[1]),
        "head-fused": feature_head(*HEADS[1], fused=True),
        "small": small_drafter(*SMALL_DRAFTERS[0]),
    }
    cfg = bench_decode.Config(device=str(DEV), dtype=DTYPE, max_new_tokens=new_tokens, prompt_tokens=64)
    cfg.temperature, cfg.verifier = 0.6, "rrsw"
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(target.config.vocab_size, (64, cfg.prompt_tokens), generator=gen).tolist()
    return target, drafters, cfg, prompts


def drafter_rows(name: str, path: str, runs: list[tuple[str, str, int]]) -> list[dict]:
    """One row per (tree, drafter, B) on ``path``, saved as section ``name`` after each row."""
    target, drafters, cfg, prompts = drafter_setup(16 if SMALL else 64)
    rows = []
    for spec, who, B in runs:
        row = dict(path=path, tree=spec, drafter=who, batch=B)
        try:
            decoder = bench_decode._decoder(target, drafters[who], spec, cfg, path)
            start = time.perf_counter()
            timed = mdsd.costs.time_decode(decoder, prompts[:B], cfg.max_new_tokens, cfg.seed)
            row.update(
                steps=timed.steps,
                tokens_per_step=timed.tokens / (timed.steps * B),
                step_ms=1e3 * timed.seconds / timed.steps,
                tokens_per_second=timed.tokens / timed.seconds,
                seconds_with_warm_up=round(time.perf_counter() - start, 2),
            )
        except Exception as err:
            row["error"] = repr(err)[:300]
        keep(name, rows, row)
    return rows


# new tokens of ar_hf's two decodes (56 steady decoding steps apart; 6 with --small) and the rounds timed
AR_NEW, AR_REPEATS = ((1 + 2, 1 + 8), 3) if SMALL else ((1 + 8, 1 + 64), 5)


@torch.no_grad()
def ar_hf() -> list[dict]:
    """Autoregressive decoding like for like, in one process and timed one way: Hugging Face ``generate``
    with ``cache_implementation="static"`` (which compiles its decoding forward) and with its default
    cache, and mdsd's (tree "none") captured (FAST) and fused (FUSED), at B = 1; then mdsd captured and
    HF static (a second compile: last) at B = 64. See :func:`ar_rate`."""
    target, _ = pair()
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(target.config.vocab_size, (64, 64), generator=gen)
    cfg = bench_decode.Config(device=str(DEV), dtype=DTYPE, temperature=0.6)

    def hf(static: bool, B: int):
        prompt = prompts[:B].to(DEV)
        kwargs = dict(do_sample=True, temperature=cfg.temperature, top_k=None, top_p=None, pad_token_id=0)
        if static:
            kwargs["cache_implementation"] = "static"
        mask = torch.ones_like(prompt)
        return lambda n: target.generate(
            prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, **kwargs
        )

    def mine(path: str, B: int):
        decoder = bench_decode._decoder(target, None, "none", cfg, path)
        rows = prompts[:B].tolist()
        return lambda n: decoder.generate_batch(rows, n, torch.Generator(device=DEV).manual_seed(0))

    runs = [
        ("hf-generate-static", 1, lambda: hf(True, 1)),
        ("hf-generate", 1, lambda: hf(False, 1)),
        (f"mdsd-{FAST}", 1, lambda: mine(FAST, 1)),
        (f"mdsd-{FUSED}", 1, lambda: mine(FUSED, 1)),
        (f"mdsd-{FAST}", 64, lambda: mine(FAST, 64)),
        ("hf-generate-static", 64, lambda: hf(True, 64)),
    ]
    rows = []
    for method, B, make in runs:
        row = dict(method=method, batch=B, new_tokens=list(AR_NEW), repeats=AR_REPEATS)
        try:
            row.update(ar_rate(make(), B))
        except Exception as err:
            row["error"] = repr(err)[:300]
        keep("ar_hf", rows, row)
    return rows


def ar_rate(decode, B: int) -> dict:
    """The steady per-token time of ``decode(n)`` (a decode of n new tokens for B rows): after two warm-up
    rounds (``warm_up_s``: compiles and captures included), AR_REPEATS rounds each time (wall clock, the
    device synchronised) a decode of N2 = AR_NEW[1] tokens, then of N1 = AR_NEW[0] (N2 first: a static cache
    sized for it serves both), and take (t(N2) - t(N1)) / (N2 - N1): the prefill and the first token leave
    out. ``ms_per_token``: the rounds' median (``_min``, ``_max``: their spread); ``tokens_per_second``:
    B / ms_per_token, with its spread; ``decode_ms``: the median wall time per length."""
    n1, n2 = AR_NEW
    start = time.perf_counter()
    for _ in range(2):
        decode(n2)
        decode(n1)
    sync()
    warm_up = time.perf_counter() - start
    per_token, walls = [], {n1: [], n2: []}
    for _ in range(AR_REPEATS):
        for n in (n2, n1):
            sync()
            start = time.perf_counter()
            decode(n)
            sync()
            walls[n].append(1e3 * (time.perf_counter() - start))
        per_token.append((walls[n2][-1] - walls[n1][-1]) / (n2 - n1))
    mid, low, high = float(np.median(per_token)), min(per_token), max(per_token)
    return {
        "ms_per_token": mid,
        "ms_per_token_min": low,
        "ms_per_token_max": high,
        "tokens_per_second": 1e3 * B / mid,
        "tokens_per_second_min": 1e3 * B / high,
        "tokens_per_second_max": 1e3 * B / low,
        "decode_ms": {n: float(np.median(w)) for n, w in walls.items()},
        "warm_up_s": round(warm_up, 1),
    }


PLAN = [
    ("env", env),
    ("forwards", forwards),
    ("decode", decode),
    ("fused", fused),
    ("verifiers", verifiers),
    ("fused_forwards", fused_forwards),
    ("profiles", profiles),
    ("syncs", syncs),
    ("law", law),
    ("lookup", lookup),
    ("hf", hf),
    ("heads", heads),
    ("head_decode", head_decode),
    ("head_fused", head_fused),
    ("head_kernels", head_kernels),
    ("fused_heads", fused_heads),
    ("drafter_decode", drafter_decode),
    ("drafter_fused", drafter_fused),
    ("ar_hf", ar_hf),
]

if __name__ == "__main__":
    sections = dict(PLAN)
    named = [a for a in sys.argv[1:] if not a.startswith("--")]  # run in the order given (default: PLAN's)
    unknown = [name for name in named if name not in sections]
    if unknown:
        sys.exit(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(sections)}")
    child = os.environ.get("GPU_FAST_CHILD") == "1" or "--one-process" in sys.argv
    try:  # before any section: a $OUT that may not take this tree's files is refused now
        mdsd.outputs.check_results_destination(OUT, "$OUT")
    except ValueError as err:
        sys.exit(f"gpu_fast.py: error: {err}")
    for name in named or list(sections):
        if child:
            section(name, sections[name])
        else:
            isolated(name)
    log("all done")
    print(json.dumps(RES["_times"]))
