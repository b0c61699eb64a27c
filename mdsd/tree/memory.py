r"""Memory of a tree decode, estimated before anything is allocated, and the memory there is to spend.

A decoding step of a tree with N drafted nodes, F of them (root included) in the target's forward and E
expanded (drafting children), for B rows, a prompt of P tokens and T new tokens, over a vocabulary of V,
holds at its peak (d: the models' bytes per value; the context C = P + T + N + 1):

.. math::

    \text{logits} &= B V \bigl[F (d + 4) + E (d + 8)\bigr]
        && \text{target logits and float32 p; draft logits, float32 q and p at expanded nodes} \\
    \text{masks} &= B \bigl[(N + 1)^2 + (P + F)^2 + (P + F)(C + P + F)\, d\bigr]
        && \text{ancestors, block visibility, the additive 4-D attention mask} \\
    \text{attention} &= B H (P + F)(C + P + F)\, d
        && \text{one layer's scores (H heads), the larger model} \\
    \text{caches} &= 2 \sum_{\text{models}} 2 L H_{kv} D_h B C d
        && \text{keys and values of L layers, and one copy while a block is trimmed}

The first step forwards the whole prompt beside the tree (P + F tokens), which is why P enters the masks
and the scores. The model weights are not counted: they are loaded before a decode starts. This is an
estimate of the allocations that grow with the tree and the batch, meant to refuse a tree that cannot fit
(``--tree binary:30`` holds 2^31 nodes: its masks alone need 2^62 bytes) with a clear message instead of
the kernel's out-of-memory kill.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "TreeShape",
    "MemoryEstimate",
    "decode_memory",
    "available_memory",
    "check_memory",
    "describe_bytes",
]


@dataclass(frozen=True)
class TreeShape:
    """The counts of one step's tree that memory depends on: drafted nodes (root excluded), nodes in the
    target's forward (root included) and expanded nodes (those that draft children)."""

    nodes: int
    forward: int
    expanded: int

    @classmethod
    def of_branching(cls, branching: list[int]) -> TreeShape:
        """The full tree with ``branching[d]`` children under every node of depth d (``Tree.kary``), counted
        without building it.

        >>> TreeShape.of_branching([2] * 30)
        TreeShape(nodes=2147483646, forward=2147483647, expanded=1073741823)
        """
        level, total, inner = 1, 1, 0
        for b in branching:
            inner += level
            level *= b
            total += level
        return cls(nodes=total - 1, forward=total, expanded=inner)

    @classmethod
    def of_plan(cls, plan) -> TreeShape:
        """The counts of a :class:`~mdsd.tree.plan.Plan` (None: no model tree)."""
        if plan is None:
            return cls(nodes=0, forward=1, expanded=0)
        return cls(plan.num_nodes - 1, plan.num_forward, sum(g.size for g in plan.groups))

    @classmethod
    def of_tree(cls, tree) -> TreeShape:
        """The counts of a :class:`~mdsd.token_tree.Tree` or a :class:`~mdsd.tree.plan.DynamicTree`.

        >>> from mdsd import Tree
        >>> TreeShape.of_tree(Tree.kary([2, 2])) == TreeShape.of_branching([2, 2])
        True
        """
        if hasattr(tree, "plan"):  # a DynamicTree: its plan is small whatever its budget
            return cls.of_plan(tree.plan())
        return cls(tree.size, tree.size + 1, int((tree.branching > 0).sum()))

    def with_retrieval(self, width: int, depth: int) -> TreeShape:
        """The counts once ``width`` retrieved chains of ``depth`` tokens hang below the root
        (:func:`mdsd.tree.plan.with_retrieval`), as :meth:`of_plan` counts that plan: every retrieved node is
        drafted and forwarded; the root and every chain node but a chain's last one expand.

        >>> TreeShape.of_plan(None).with_retrieval(1, 8)
        TreeShape(nodes=8, forward=9, expanded=8)
        """
        extra = width * depth
        return TreeShape(
            self.nodes + extra, self.forward + extra, max(self.expanded, 1) + width * (depth - 1)
        )


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of each part of a decode (module docstring) and their total."""

    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {describe_bytes(b)}" for name, b in self.parts.items())
        return f"{describe_bytes(self.total)} ({parts})"


def describe_bytes(count: float) -> str:
    """A byte count for people, in powers of 1000.

    >>> describe_bytes(3 * 2**30), describe_bytes(2**62)
    ('3.22 GB', '4.61e+06 TB')
    """
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{int(count)} B"


def _numbers(config: object) -> tuple[int, int, int, int, int]:
    """(layers, heads, kv heads, head dim, vocabulary) of a transformers config (object or config.json
    dict); a missing entry counts as 0 (that part of the estimate is left out)."""

    def get(*names):
        for name in names:
            value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0

    heads = get("num_attention_heads", "n_head")
    head_dim = get("head_dim") or (get("hidden_size", "n_embd") // heads if heads else 0)
    kv = get("num_key_value_heads") or heads
    return get("num_hidden_layers", "n_layer"), heads, kv, head_dim, get("vocab_size")


def decode_memory(
    configs: list[object],
    shape: TreeShape,
    batch: int,
    prompt_tokens: int,
    new_tokens: int,
    dtype: torch.dtype = torch.float32,
) -> MemoryEstimate:
    """The estimate of the module docstring for models with transformers ``configs`` (target first; objects
    or config.json dicts), a tree of ``shape``, ``batch`` rows of at most ``prompt_tokens`` prompt tokens
    and ``new_tokens`` new ones, weights of ``dtype``.

    >>> cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32, "vocab_size": 100}
    >>> decode_memory([cfg], TreeShape.of_branching([2, 2]), 1, 10, 10).parts["logits"]  # 100 (7 8 + 3 12)
    9200
    """
    d = dtype.itemsize
    numbers = [_numbers(c) for c in configs]
    V = max(n[4] for n in numbers)
    B, P, T = batch, prompt_tokens, new_tokens
    N, F, E = shape.nodes, shape.forward, shape.expanded
    C = P + T + N + 1
    Q = P + F  # the first step's block: the prompt and the tree
    return MemoryEstimate(
        {
            "logits": B * V * (F * (d + 4) + E * (d + 8)),
            "masks": B * ((N + 1) ** 2 + Q**2 + Q * (C + Q) * d),
            "attention": B * max(n[1] for n in numbers) * Q * (C + Q) * d,
            "caches": 2 * sum(2 * n[0] * n[2] * n[3] for n in numbers) * B * C * d,
        }
    )


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def _cgroup_left() -> int | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((root / "memory.current").read_text())
    except (OSError, ValueError):
        return None


def _address_space_left() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return soft - int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return soft


def available_memory(device: torch.device | str = "cpu") -> tuple[int, str] | None:
    """(bytes, where the figure comes from) that a decode on ``device`` may still allocate, or None where
    it cannot be read: free memory of a CUDA device (``torch.cuda.mem_get_info``); on the CPU the least
    of MemAvailable (/proc/meminfo, or psutil if installed), the cgroup's memory.max less its usage, and
    the address-space limit (``ulimit -v``) less the process's size."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0]), f"free memory of {device}"
    limits = [
        (value, source)
        for value, source in (
            (_meminfo_available(), "available memory (MemAvailable)"),
            (_cgroup_left(), "the cgroup's memory.max less its usage"),
            (_address_space_left(), "the address-space limit (ulimit -v) less this process's size"),
        )
        if value is not None
    ]
    return min(limits) if limits else None


def check_memory(
    estimate: MemoryEstimate, device: torch.device | str = "cpu", what: str = "this decode"
) -> None:
    """Raise ``ValueError`` stating the estimate and the limit when ``estimate`` exceeds
    :func:`available_memory` of ``device`` (no check where that cannot be read)."""
    limit = available_memory(device)
    if limit is None or estimate.total <= limit[0]:
        return
    raise ValueError(
        f"{what} needs about {estimate}, more than the {describe_bytes(max(limit[0], 0))} left ({limit[1]}): "
        "use a smaller tree, fewer rows or shorter prompts"
    )


def check_decode_memory(
    target: torch.nn.Module,
    draft: torch.nn.Module | None,
    plan,
    prompts: list[list[int]],
    new_tokens: int,
    device: torch.device | str,
) -> None:
    """:func:`check_memory` of :func:`decode_memory` for a decode of ``prompts`` (token lists) with these
    models (configs and weights' dtype read off them) and a step :class:`~mdsd.tree.plan.Plan` (None: no
    model tree): what :meth:`mdsd.TreeDecoder.generate_batch` runs before it allocates anything."""
    configs = [getattr(m, "config", {}) for m in (target, draft) if m is not None]
    dtype = next(p.dtype for p in target.parameters() if p.is_floating_point())
    longest = max(map(len, prompts))
    need = decode_memory(configs, TreeShape.of_plan(plan), len(prompts), longest, new_tokens, dtype)
    check_memory(need, device, f"decoding {len(prompts)} row(s) with this tree")
