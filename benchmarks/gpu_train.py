"""Training a feature head on a GPU: ``mdsd.drafters.train`` with ``device="cuda"`` (issue 42).

Two sections, written to ``$OUT/gpu_train.json`` (with :func:`mdsd.outputs.provenance`) as they finish:

  check  a tiny float32 target (tests/tiny_lms.py) on the card: features read there, a head trained there
         (bf16 autocast; kl, and alpha on EAGLE-3's fused features, unrolled), loaded back and decoding
         losslessly (greedy tokens equal the target's on the eager and the fast path)
  rate   the real head's training step at the Qwen2.5-1.5B shape (random weights and random tokens: a step's
         time does not depend on their values): ``mdsd drafters train``'s recipe (one decoder layer with an
         MLP of 4,096, 16,384 draft tokens, 2,048 positions a step in chunks of 256, bf16), on the final
         state and on three layers fused, the alpha loss (k = 4), and 16,384 positions a step.
         ``seconds_per_step`` and ``tokens_per_second`` come from the run's own ``train_seconds`` between
         its first and last evaluations (evaluations and checkpoints left out)

    OUT=/tmp/gpu_out PYTHONPATH=$PWD python3 benchmarks/gpu_train.py [check] [rate]
    python3 benchmarks/gpu_train.py --small     # tiny shapes on the CPU: checks the script itself
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import bench_decode  # noqa: E402
from tiny_lms import tiny_lm  # noqa: E402

import mdsd  # noqa: E402
from mdsd.drafters.features import FEATURES, features_path, write_features  # noqa: E402
from mdsd.drafters.head import FeatureHead  # noqa: E402
from mdsd.drafters.train import TRAINING, TrainConfig, train  # noqa: E402
from mdsd.hf import describe_model  # noqa: E402

SMALL = "--small" in sys.argv
DEV = "cuda" if torch.cuda.is_available() and not SMALL else "cpu"
OUT = Path(os.environ.get("OUT", "/tmp/gpu_out"))
RESULT = {"_times": {}}
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def save() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if DEV == "cuda" else None
    RESULT["provenance"] = mdsd.outputs.provenance(OUT, device)
    (OUT / "gpu_train.json").write_text(json.dumps(RESULT, indent=1, default=str))


def features(root: Path, target, sequences: list[list[int]], layers: tuple[int, ...], name: str) -> Path:
    """A features folder of ``sequences`` read by ``target`` (saved in ``root / "target"``), top-8 laws,
    the final state or ``layers``' outputs, answers from the second token."""
    folder = root / name
    folder.mkdir()
    half = len(sequences) // 2
    for shard, part in enumerate((sequences[:half], sequences[half:])):
        write_features(features_path(folder, shard), target, part, [1] * len(part), 8, feature_layers=layers)
    record = {"source": {"random": True}, "target": describe_model(root / "target"), "top_k": 8}
    (folder / FEATURES).write_text(json.dumps(record | {"feature_layers": list(layers)}))
    return folder


def check() -> list[dict]:
    """Heads trained on the card decode losslessly (module docstring)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = tiny_lm(0, vocab=24, sharpness=4.0, layers=3).to(DEV)
        target.save_pretrained(root / "target")
        prompts = [[i % 24, (3 * i) % 24] for i in range(48)]
        outs = mdsd.TreeDecoder(target, None, None, temperature=1.0).generate_batch(
            prompts, 30, torch.Generator(DEV).manual_seed(0)
        )
        sequences = [p + o.tokens.tolist() for p, o in zip(prompts, outs, strict=True)]
        small = dict(steps=30, batch_tokens=96, chunk=16, eval_every=10, draft_vocab=20, held_out=0.2)
        for loss, layers, unroll in (("kl", (), 1), ("alpha", (0, 2), 2)):
            row = dict(loss=loss, feature_layers=list(layers), unroll=unroll)
            try:
                folder = features(root, target, sequences, layers, f"f-{loss}")
                config = TrainConfig(loss=loss, unroll=unroll, **small)
                train(config, folder, root / "target", root / f"h-{loss}", False, DEV, "bfloat16", False)
                curve = json.loads((root / f"h-{loss}" / TRAINING).read_text())["curve"]
                head = FeatureHead.load(root / f"h-{loss}", target)
                prompts = [[1, 2, 3], [5]]
                want = mdsd.TreeDecoder(target, None, None, temperature=0.0).generate_batch(prompts, 12)
                equal = []
                for compile in (False, True):
                    tree = mdsd.Tree.kary([2, 1])
                    got = mdsd.TreeDecoder(target, head, tree, "rrs", 0.0, compile=compile).generate_batch(
                        prompts, 12
                    )
                    equal.append([o.tokens.tolist() for o in got] == [o.tokens.tolist() for o in want])
                row.update(
                    head_device=str(head.fc.weight.device),
                    held_out_acceptance=[round(p["acceptance"], 4) for p in curve],
                    greedy_equal_eager_fast=equal,
                )
            except Exception as err:
                row.update(error=repr(err)[:300], traceback=traceback.format_exc()[-1500:])
            rows.append(row)
            log(f"check {row}")
    return rows


def rate() -> list[dict]:
    """The real head's training step (module docstring); each run 40 steps, evaluated every 10."""
    shape = bench_decode.SHAPES["tiny" if SMALL else "qwen"][0]
    H, layers = shape[0], (0, 1) if SMALL else (1, 13, 24)
    rows = []
    root = Path(tempfile.mkdtemp(dir=os.environ.get("TMPDIR")))
    try:
        target = bench_decode.build(shape, 0, DEV, "bfloat16")
        target.save_pretrained(root / "target")
        count, length = (16, 64) if SMALL else (96, 512)
        gen = torch.Generator().manual_seed(0)
        sequences = torch.randint(shape[-1], (count, length), generator=gen).tolist()
        folders = {
            kind: features(root, target, sequences, kept, kind)
            for kind, kept in (("final", ()), ("fused", layers))
        }
        del target
        vocab, mlp = (64, shape[1] // 2) if SMALL else (16384, 4096)
        recipe = dict(draft_vocab=vocab, intermediate_size=mlp, chunk=256, lr=5e-4, warmup=5, steps=40)
        recipe |= dict(eval_every=10, eval_positions=1024, checkpoint_every=1000, held_out=0.05)
        runs = [
            ("final", "kl", 2048),
            ("fused", "kl", 2048),
            ("fused", "alpha", 2048),
            ("fused", "kl", 16384),
        ]
        for kind, loss, tokens in runs:
            row = dict(features=kind, loss=loss, batch_tokens=tokens, hidden=H, draft_vocab=vocab, mlp=mlp)
            try:
                config = TrainConfig(loss=loss, batch_tokens=tokens, **recipe)
                out = root / f"h-{kind}-{loss}-{tokens}"
                start = time.perf_counter()
                train(config, folders[kind], root / "target", out, False, DEV, "bfloat16", False)
                curve = json.loads((out / TRAINING).read_text())["curve"]
                steps = curve[-1]["step"] - curve[0]["step"]
                per_step = (curve[-1]["train_seconds"] - curve[0]["train_seconds"]) / steps
                row.update(
                    seconds_per_step=per_step,
                    tokens_per_second=tokens / per_step,
                    first_step_seconds=curve[0]["train_seconds"] / curve[0]["step"],
                    run_seconds=round(time.perf_counter() - start, 1),
                )
                if DEV == "cuda":
                    row["max_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
                    torch.cuda.reset_peak_memory_stats()
            except Exception as err:
                row.update(error=repr(err)[:300], traceback=traceback.format_exc()[-1500:])
            rows.append(row)
            log(f"rate {row}")
            RESULT["rate"] = rows
            save()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


if __name__ == "__main__":
    sections = {"check": check, "rate": rate}
    named = [a for a in sys.argv[1:] if not a.startswith("--")] or list(sections)
    if unknown := [n for n in named if n not in sections]:
        sys.exit(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(sections)}")
    try:
        mdsd.outputs.check_results_destination(OUT, "$OUT")
    except ValueError as err:
        sys.exit(f"gpu_train.py: error: {err}")
    for name in named:
        start = time.time()
        try:
            RESULT[name] = sections[name]()
        except Exception as err:
            RESULT[name] = {"error": repr(err), "traceback": traceback.format_exc()[-3000:]}
            log(f"{name} FAILED: {err!r}")
        RESULT["_times"][name] = round(time.time() - start, 1)
        save()
    log("all done")
