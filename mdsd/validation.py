"""Input checks at the public boundary: probability vectors, pairs (p, q), and draft counts.

Every public routine of mdsd validates through here, so bad input fails the same way everywhere:
a ``ValueError`` (or ``TypeError``) whose message names the argument and what is wrong with it.
Nothing here mutates the caller's arrays.
"""

from __future__ import annotations

import math

import numpy as np
import torch

SUM_ATOL = 1e-6  # float64 inputs must sum to 1 within this; see `sum_tolerance` for lower precisions


def sum_tolerance(dtype: torch.dtype | np.dtype, n: int) -> float:
    """How far from 1 the sum of ``n`` probabilities stored in ``dtype`` may be.

    ``1e-6`` for float64; for narrower types, rounding of the stored entries alone moves the sum by
    about ``sqrt(n) * eps``, so the tolerance is ``1e-6 + 4 sqrt(n) eps(dtype)``.
    """
    eps = torch.finfo(dtype).eps if isinstance(dtype, torch.dtype) else np.finfo(dtype).eps
    if eps <= np.finfo(np.float64).eps:
        return SUM_ATOL
    return SUM_ATOL + 4.0 * math.sqrt(n) * eps


def as_probabilities(x: object, name: str) -> np.ndarray:
    """Check that ``x`` holds probability vectors along its last axis; return a float64 copy.

    Accepts a numpy array, a (nested) list or a torch tensor of shape ``[..., n]``. Each vector must be
    finite, non-negative and sum to 1 within :func:`sum_tolerance`; it is then renormalised in float64.

    Raises ``ValueError`` naming ``name`` otherwise.

    >>> as_probabilities([0.25, 0.75], "p")
    array([0.25, 0.75])
    """
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must be real, got a complex tensor")
        stored = x.dtype if x.is_floating_point() else torch.float64
        arr = x.detach().to("cpu", torch.float64).numpy()
    else:
        try:
            raw = np.asarray(x)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be an array of numbers: {err}") from None
        if raw.dtype == object or not np.issubdtype(raw.dtype, np.number) or np.iscomplexobj(raw):
            raise TypeError(f"{name} must be an array of real numbers, got dtype {raw.dtype}")
        stored = raw.dtype if np.issubdtype(raw.dtype, np.floating) else np.dtype(np.float64)
        arr = raw.astype(np.float64)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must have shape [..., n] with n >= 1, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries (min {arr.min():.3g})")
    total = arr.sum(axis=-1, keepdims=True)
    tol = sum_tolerance(stored, arr.shape[-1])
    worst = np.max(np.abs(total - 1.0))
    if worst > tol:
        raise ValueError(f"{name} must sum to 1 along its last axis (within {tol:.1e}); off by {worst:.3g}")
    return arr / total


def as_pair(p: object, q: object) -> tuple[np.ndarray, np.ndarray]:
    """Validate target ``p`` and draft ``q`` (same shape ``[..., n]``); return float64 copies."""
    p_arr = as_probabilities(p, "p")
    q_arr = as_probabilities(q, "q")
    if p_arr.shape != q_arr.shape:
        raise ValueError(
            f"p and q must have the same shape (same vocabulary); got {p_arr.shape} and {q_arr.shape}"
        )
    return p_arr, q_arr


def as_probability_tensor(x: object, name: str) -> torch.Tensor:
    """Torch twin of :func:`as_probabilities` for samplers: returns a tensor on ``x``'s device.

    The result is float64 if ``x`` is float64, else float32 (fp16 / bf16 are upcast, so acceptance
    arithmetic never runs narrower than float32). Renormalised along the last axis.
    """
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float64))
    if t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must be a real tensor, got dtype {t.dtype}")
    stored = t.dtype if t.is_floating_point() else torch.float64
    work = torch.float64 if stored == torch.float64 else torch.float32
    t = t.to(work)
    if t.ndim == 0 or t.shape[-1] == 0:
        raise ValueError(f"{name} must have shape [..., n] with n >= 1, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite entries")
    if bool((t < 0).any()):
        raise ValueError(f"{name} has negative entries (min {float(t.min()):.3g})")
    total = t.sum(dim=-1, keepdim=True)
    tol = sum_tolerance(stored, t.shape[-1])
    worst = float((total - 1.0).abs().max())
    if worst > tol:
        raise ValueError(f"{name} must sum to 1 along its last axis (within {tol:.1e}); off by {worst:.3g}")
    return t / total


def check_k(k: object, name: str = "k", *, minimum: int = 1) -> int:
    """Return ``k`` as an int after checking it is an integer ``>= minimum``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {k!r}")
    if k < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {k}")
    return int(k)


def check_positive_ints(values: dict[str, object]) -> None:
    """Refuse the first of ``values`` (name → value) that is not a positive int (a bool is not one).

    >>> check_positive_ints({"width": 2, "depth": 0})
    Traceback (most recent call last):
    ...
    ValueError: depth must be a positive int, got 0
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_acceptance_vector(acceptance: object, name: str = "acceptance") -> np.ndarray:
    """A per-position acceptance vector (Sequoia): finite entries in [0, 1] summing to at most 1.

    Entry j is the probability that a node's (j+1)-th child is the one accepted: exclusive events.

    >>> check_acceptance_vector([0.5, 0.25]).tolist()
    [0.5, 0.25]
    """
    try:
        a = np.asarray(acceptance, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a list of numbers, got {acceptance!r}") from None
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty vector, got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise ValueError(f"{name} entries must be finite and in [0, 1], got {a.tolist()}")
    if a.sum() > 1 + 1e-9:
        raise ValueError(f"{name} entries are exclusive events and must sum to <= 1, got {a.sum():.6g}")
    return a


def check_device(device: object, name: str = "device") -> torch.device:
    """``device`` as a :class:`torch.device` this torch build can use, or a ``ValueError`` saying why not.

    >>> check_device("cpu")
    device(type='cpu')
    >>> check_device("gpu")
    Traceback (most recent call last):
    ...
    ValueError: device must be a torch device such as 'cpu', 'cuda' or 'cuda:1', got 'gpu'
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"{name} must be a torch device such as 'cpu', 'cuda' or 'cuda:1', got {device!r}"
        ) from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            build = (
                "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            )
            raise ValueError(
                f"{name} {str(resolved)!r}: this torch ({torch.__version__}, {build}) sees no CUDA device; "
                "run on the CPU, or install a CUDA build of torch on a machine with an NVIDIA GPU"
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"{name} {str(resolved)!r}: only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name} 'mps': this torch sees no Apple GPU (mps)")
    return resolved


def float_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """``dtype`` (a torch floating dtype or its name) as a :class:`torch.dtype`, or a ``ValueError`` naming
    ``name``: checked before anything is downloaded, converted or loaded in it.

    >>> float_dtype("bfloat16")
    torch.bfloat16
    >>> float_dtype("int7", "--dtype")
    Traceback (most recent call last):
    ...
    ValueError: --dtype must name a torch floating dtype (float32, bfloat16, float16, ...), got 'int7'
    """
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ValueError(
            f"{name} must name a torch floating dtype (float32, bfloat16, float16, ...), got {dtype!r}"
        )
    return resolved


def cpu_dtype(dtype: str, name: str = "--dtype") -> str:
    """``dtype`` as a torch floating dtype's name; ``"auto"`` is bfloat16 on a CPU that computes in it
    (the avx512_bf16 or amx_bf16 flags: there a bf16 matmul runs several times faster than float32) and
    float32 elsewhere (without them bf16 is emulated, several times slower)."""
    if dtype == "auto":
        try:
            with open("/proc/cpuinfo") as handle:
                flags = handle.read()
        except OSError:
            flags = ""
        return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else None
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ValueError(
            f"{name} must be auto or a torch floating dtype's name (float32, bfloat16), got {dtype!r}"
        )
    return dtype
