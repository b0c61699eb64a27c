"""What the verifier benchmarks share: one timer and one family of synthetic (p, q) pairs.

Imported by the scripts next to it (``python benchmarks/NAME.py`` puts this folder on the path).
"""

from __future__ import annotations

import statistics
import time

import torch


def median_seconds(call, repeats: int, warmup: int = 1, device: torch.device | None = None) -> float:
    """Median time of ``call()`` over ``repeats`` calls, after ``warmup`` calls.

    On the CPU, CPU time of this process (user + system, so page faults count) rather than wall time:
    the machine is shared, and time spent waiting for another process's core is not the kernel's. On a
    GPU, CUDA events around each call.
    """
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        if device is not None and device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            start = time.process_time()
            call()
            times.append(time.process_time() - start)
    return statistics.median(times)


def logit_pair(gen: torch.Generator, rows: int, n: int, scale: float, noise: float):
    """Softmax pairs [rows, n] in float32 on the generator's device: target logits scale·N(0,1), draft
    logits target + noise·N(0,1)."""
    z = torch.randn(rows, n, generator=gen, device=gen.device).mul_(scale)
    p = torch.softmax(z, -1)
    z.add_(torch.randn(rows, n, generator=gen, device=gen.device).mul_(noise))
    return p, torch.softmax(z, -1)
