"""Measured forward times of one model: :class:`CostProfile` and :func:`measure_profile`."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from mdsd.outputs import provenance
from mdsd.tree.cache import ModelCache
from mdsd.tree.compiled import backend_of, capture, graph_pool
from mdsd.tree.draft import causal
from mdsd.tree.static import StaticLM

__all__ = ["CostProfile", "measure_profile"]

_FORMAT = "mdsd.CostProfile/1"


@dataclass(frozen=True)
class CostProfile:
    """Measured forward times of one model on a grid of batch sizes, new tokens and cache lengths.

    ``times[i][j][l]`` is the median time in seconds of one forward of ``tokens[j]`` new tokens for each of
    ``batches[i]`` rows appended to a KV cache of ``contexts[l]`` live entries; ``spread`` the interquartile
    range of its ``repeats`` timings. :meth:`seconds` interpolates the grid.

    Attributes
    ----------
    model : dict
        What was measured: :func:`mdsd.hf.describe_model` (name, path, weights sha256) for a model loaded from
        a local directory, else its class, parameter count and shape.
    device, dtype : str
        Where and in which dtype it ran.
    path : str
        How the forwards ran: "eager" (the decoder's reference path, transformers caches) or
        "static:<backend>" (the fast path: static caches, each forward captured with ``<backend>``; see
        :mod:`mdsd.tree.compiled`).
    threads : int
        ``torch.get_num_threads()`` during the measurement (0 for a synthetic profile).
    repeats : int
        Timed forwards per grid point (after one warm-up forward).
    batches, tokens, contexts : tuple of int
        The grid, each strictly increasing (batches, tokens >= 1; contexts >= 0).
    times, spread : nested tuples of float [len(batches)][len(tokens)][len(contexts)]

    Examples
    --------
    >>> prof = CostProfile.from_function(lambda b, t, c: 0.01 * b * t, [1, 4], [1, 8], [0])
    >>> prof.seconds(batch=2, tokens=8, context=0)  # linear between batch 1 and 4
    0.16
    """

    model: dict
    device: str
    dtype: str
    threads: int
    repeats: int
    batches: tuple[int, ...]
    tokens: tuple[int, ...]
    contexts: tuple[int, ...]
    times: tuple
    spread: tuple
    path: str = "eager"  # how the forwards ran: "eager" (transformers caches) or "static:<backend>"

    def __post_init__(self) -> None:
        for name, low in (("batches", 1), ("tokens", 1), ("contexts", 0)):
            object.__setattr__(self, name, check_grid(getattr(self, name), name, low))
        shape = (len(self.batches), len(self.tokens), len(self.contexts))
        for name, positive in (("times", True), ("spread", False)):
            try:
                array = np.asarray(getattr(self, name), dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a nested list of numbers of shape {shape}") from None
            if array.shape != shape:
                raise ValueError(
                    f"{name} must have shape {shape} (batches, tokens, contexts), got {array.shape}"
                )
            bad = ~np.isfinite(array) | ((array <= 0) if positive else (array < 0))
            if bad.any():
                kind = "finite and > 0" if positive else "finite and >= 0"
                raise ValueError(f"{name} entries must be {kind}, got {array[bad][0]!r}")
            object.__setattr__(self, name, _nested(array))
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats must be a positive int, got {self.repeats!r}")

    @classmethod
    def from_function(
        cls,
        seconds: Callable[[int, int, int], float],
        batches: Sequence[int],
        tokens: Sequence[int],
        contexts: Sequence[int],
        model: dict | None = None,
    ) -> CostProfile:
        """A synthetic profile ``seconds(batch, tokens, context)`` on a grid (what-if studies, tests);
        its device and dtype read "synthetic", its threads 0."""
        b, t, c = (
            check_grid(g, n, lo)
            for g, n, lo in ((batches, "batches", 1), (tokens, "tokens", 1), (contexts, "contexts", 0))
        )
        times = [[[float(seconds(i, j, k)) for k in c] for j in t] for i in b]
        zeros = np.zeros((len(b), len(t), len(c)))
        return cls(model or {"name": "synthetic"}, "synthetic", "synthetic", 0, 1, b, t, c, times, zeros)

    @cached_property
    def table(self) -> np.ndarray:
        """``times`` as an array [batches, tokens, contexts]."""
        return np.asarray(self.times, dtype=np.float64)

    def seconds(self, batch: float, tokens: float, context: float, extrapolate: bool = False) -> float:
        """Interpolated forward time: piecewise-linear along each axis (trilinear inside a grid cell).

        Exact at grid points and linear between neighbours, so functions linear in each of (B, t, c)
        separately (e.g. ``a + b·B·t + c·context``) are reproduced exactly inside the grid. Outside it a
        :class:`ValueError` names the argument, unless ``extrapolate``: then the outermost segment of each
        axis is continued linearly (floored at 0; an axis measured at one value cannot be extrapolated).
        """
        corners = []
        for name, grid, x in (
            ("batch", self.batches, batch),
            ("tokens", self.tokens, tokens),
            ("context", self.contexts, context),
        ):
            corners.append(_bracket(np.asarray(grid, dtype=np.float64), x, name, extrapolate))
        (i, wi), (j, wj), (k, wk) = corners
        value = 0.0
        for di, fi in ((0, 1 - wi), (1, wi)):
            for dj, fj in ((0, 1 - wj), (1, wj)):
                for dk, fk in ((0, 1 - wk), (1, wk)):
                    if fi * fj * fk != 0:
                        value += fi * fj * fk * self.table[i + di, j + dj, k + dk]
        return max(float(value), 0.0)

    def save(self, path: str | Path) -> Path:
        """Write the profile as JSON (``load`` reads it back exactly) with the
        :func:`mdsd.outputs.provenance` of the run that saves it (a dirty tree may not save into the committed
        results folders unless ``$MDSD_SCRATCH`` marks the run as scratch)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": _FORMAT, **dataclasses.asdict(self), "provenance": provenance(path.parent)}
        path.write_text(json.dumps(payload, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> CostProfile:
        """Read a profile written by :meth:`save`; ValueError if the file is not one."""
        payload = json.loads(Path(path).read_text())
        if not isinstance(payload, dict) or payload.pop("format", None) != _FORMAT:
            raise ValueError(f"{path} is not a cost profile written by CostProfile.save ({_FORMAT})")
        payload.pop("provenance", None)  # where the profile comes from, recorded beside its fields
        names = {f.name for f in dataclasses.fields(cls)}
        payload.setdefault("path", "eager")  # written before the fast path existed
        if set(payload) != names:
            raise ValueError(f"{path}: expected the fields {sorted(names)}, got {sorted(payload)}")
        return cls(**payload)


def check_grid(values: object, name: str, low: int) -> tuple[int, ...]:
    try:
        grid = list(values)
    except TypeError:
        raise ValueError(f"{name} must be a list of integers, got {values!r}") from None
    if not grid or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in grid):
        raise ValueError(f"{name} must be a non-empty list of integers, got {values!r}")
    grid = [int(v) for v in grid]
    if grid[0] < low or any(b <= a for a, b in zip(grid, grid[1:], strict=False)):
        raise ValueError(f"{name} must be strictly increasing integers >= {low}, got {grid}")
    return tuple(grid)


def _nested(array: np.ndarray) -> tuple:
    return tuple(tuple(tuple(float(x) for x in row) for row in plane) for plane in array)


def _bracket(grid: np.ndarray, x: float, name: str, extrapolate: bool) -> tuple[int, float]:
    """Lower grid index i and weight w with x = (1 − w)·grid[i] + w·grid[i + 1] (w = 0 on a 1-point axis)."""
    if (
        isinstance(x, bool)
        or not isinstance(x, (int, float, np.integer, np.floating))
        or not math.isfinite(x)
    ):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    if grid[0] <= x <= grid[-1]:
        if grid.size == 1:
            return 0, 0.0
    elif not extrapolate:
        raise ValueError(
            f"{name}={x} is outside the measured grid [{grid[0]:g}, {grid[-1]:g}]; measure a wider grid "
            "or pass extrapolate=True"
        )
    elif grid.size == 1:
        raise ValueError(f"{name}={x}: cannot extrapolate along an axis measured at one value ({grid[0]:g})")
    i = int(np.clip(np.searchsorted(grid, x, side="right") - 1, 0, grid.size - 2))
    return i, float((x - grid[i]) / (grid[i + 1] - grid[i]))


# ---- measuring -----------------------------------------------------------------------------------


@torch.no_grad()
def measure_profile(
    model: torch.nn.Module,
    batches: Sequence[int],
    tokens: Sequence[int],
    contexts: Sequence[int],
    repeats: int = 5,
    device: str | torch.device | None = None,
    generator: torch.Generator | None = None,
    progress: bool = True,
    compile: bool | str = False,
) -> CostProfile:
    """Time ``model``'s forwards on a grid of (batch, new tokens, cache length): a :class:`CostProfile`.

    For each batch size B and cache length c a KV cache of c random tokens per row is filled; then each block
    of t new random tokens per row is run as the decoder runs it (a mask over the cache's live slots and a
    causal block, explicit positions, logits of all t tokens) and the cache is cut back to c. One untimed
    round warms every shape up, then ``repeats`` rounds over the tokens grid are timed
    (``torch.cuda.synchronize`` around each forward on CUDA); the median is kept. On the CPU the forwards
    use the torch threads the caller set (``torch.set_num_threads``).

    ``compile`` picks the path, as :class:`mdsd.TreeDecoder`'s does: False, the eager path
    (:class:`mdsd.tree.cache.ModelCache`); True or a backend name, the fast path's static caches
    (:class:`mdsd.tree.static.StaticLM`) with every forward shape captured once (a CUDA graph on CUDA)
    and replayed.

    Parameters
    ----------
    model : transformers causal LM
        As for :class:`mdsd.TreeDecoder` (dynamic KV cache, 4-D float masks).
    batches, tokens, contexts : sequence of int
        The grid: strictly increasing, batches and tokens >= 1, contexts >= 0.
    repeats : int
        Timed forwards per grid point.
    device : str or torch.device, optional
        The model's device (checked; the model is never moved). None: where its parameters are.
    generator : torch.Generator, optional
        Draws the random token ids (timings do not depend on them); None: seed 0.
    progress : bool
        Show a progress bar.
    compile : bool or str
        The decoder path to time (above).
    """
    b_grid, t_grid, c_grid = (
        check_grid(g, n, lo)
        for g, n, lo in ((batches, "batches", 1), (tokens, "tokens", 1), (contexts, "contexts", 0))
    )
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be a transformers causal LM (a torch Module), got {type(model).__name__}"
        )
    params = next(iter(model.parameters()))
    dev = params.device
    if device is not None:
        want = torch.device(device)
        if want.type != dev.type or want.index not in (None, dev.index):
            raise ValueError(f"device is {device} but the model's parameters are on {dev}")
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)
    backend = backend_of(compile, dev)
    bar = tqdm(
        total=len(b_grid) * len(c_grid) * (repeats + 1) * len(t_grid),
        desc="profile",
        unit="fwd",
        disable=not progress,
        leave=False,
    )
    times = np.zeros((len(b_grid), len(t_grid), len(c_grid)))
    spread = np.zeros_like(times)
    for i, B in enumerate(b_grid):
        for k, c in enumerate(c_grid):
            bar.set_postfix(batch=B, context=c)
            samples = np.zeros((repeats + 1, len(t_grid)))
            if backend is None:
                cache = _filled_cache(model, B, c, vocab, dev, generator)
                for r in range(repeats + 1):  # round 0 warms up
                    for j, t in enumerate(t_grid):
                        samples[r, j] = _timed_block(model, cache, B, t, c, vocab, dev, generator)
                        cache = _cut(cache, B, c, dev)
                        bar.update()
            else:
                runs = _static_forwards(model, B, c, t_grid, vocab, dev, generator, backend)
                for r in range(repeats + 1):
                    for j, run in enumerate(runs):
                        samples[r, j] = _timed(run, dev)
                        bar.update()
            times[i, :, k] = np.median(samples[1:], axis=0)
            q75, q25 = np.percentile(samples[1:], [75, 25], axis=0)
            spread[i, :, k] = q75 - q25
    bar.close()
    return CostProfile(
        model=_describe(model),
        device=str(dev),
        dtype=str(params.dtype).removeprefix("torch."),
        threads=torch.get_num_threads(),
        repeats=repeats,
        batches=b_grid,
        tokens=t_grid,
        contexts=c_grid,
        times=times,
        spread=spread,
        path="eager" if backend is None else f"static:{backend}",
    )


def _random_ids(B: int, n: int, vocab: int, dev: torch.device, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(vocab, (B, n), generator=generator, device=generator.device).to(dev)


def _filled_cache(model, B: int, c: int, vocab: int, dev, generator) -> ModelCache:
    """A cache with c live entries per row (none: an empty cache)."""
    cache = ModelCache(model, B, dev)
    if c:
        real = torch.ones(B, c, dtype=torch.bool, device=dev)
        positions = torch.arange(c, device=dev).expand(B, -1)
        cache.begin()
        cache.forward(_random_ids(B, c, vocab, dev, generator), causal(real), positions, 1, real)
        cache.begin()
    return cache


def _timed_block(model, cache: ModelCache, B: int, t: int, c: int, vocab: int, dev, generator) -> float:
    """Seconds of one forward of t new tokens per row after the cache's c entries."""
    ids = _random_ids(B, t, vocab, dev, generator)
    real = torch.ones(B, t, dtype=torch.bool, device=dev)
    visible, positions = causal(real), c + torch.arange(t, device=dev).expand(B, -1)
    _sync(dev)
    start = time.perf_counter()
    cache.forward(ids, visible, positions, t, real)
    _sync(dev)
    return time.perf_counter() - start


def _static_forwards(model, B: int, c: int, tokens, vocab: int, dev, generator, backend: str) -> list:
    """One captured forward per t in ``tokens``: t new random tokens per row after c committed entries of
    a :class:`~mdsd.tree.static.StaticLM` (each replay writes the same step slots)."""
    lm = StaticLM(model, B, c + max(tokens))
    if c:
        real = torch.ones(B, c, dtype=torch.bool, device=dev)
        lm.forward(
            _random_ids(B, c, vocab, dev, generator),
            causal(real),
            torch.arange(c, device=dev).expand(B, -1),
            1,
            real,
        )
        lm.commit(torch.arange(c, device=dev).expand(B, -1), torch.full((B,), c, device=dev))
    runs, pool = [], graph_pool(backend)
    for t in tokens:
        ids, real = _random_ids(B, t, vocab, dev, generator), torch.ones(B, t, dtype=torch.bool, device=dev)
        visible, positions = causal(real), c + torch.arange(t, device=dev).expand(B, -1)

        def forward(ids=ids, real=real, visible=visible, positions=positions, t=t) -> torch.Tensor:
            lm.begin()
            return lm.forward(ids, visible, positions, t, real)[0]

        forward()  # eager once: lazy state (kernels, handles) before the capture
        runs.append(capture(forward, backend, pool))
    return runs


def _timed(run, dev: torch.device) -> float:
    _sync(dev)
    start = time.perf_counter()
    run()
    _sync(dev)
    return time.perf_counter() - start


def _cut(cache: ModelCache, B: int, c: int, dev: torch.device) -> ModelCache:
    """The cache back at its c entries (an empty cache is made afresh)."""
    if c == 0:
        return ModelCache(cache.model, B, dev)
    cache.commit(
        torch.zeros(B, 0, dtype=torch.long, device=dev), torch.zeros(B, dtype=torch.long, device=dev)
    )
    return cache


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _describe(model: torch.nn.Module) -> dict:
    """Provenance of a model: describe_model for a local directory, else its class and size."""
    path = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
    if path and (Path(path) / "config.json").is_file():
        from mdsd.hf import describe_model

        return {"class": type(model).__name__, **describe_model(path)}
    config = getattr(model, "config", None)
    shape = {
        k: getattr(config, k)
        for k in ("vocab_size", "hidden_size", "num_hidden_layers")
        if hasattr(config, k)
    }
    return {
        "name": type(model).__name__,
        "class": type(model).__name__,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        **shape,
    }
