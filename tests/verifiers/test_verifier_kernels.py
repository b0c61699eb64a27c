"""The unchecked kernels draft_unchecked / verify_unchecked: no host synchronisation, no tensor off the
inputs' device, and the same tokens as the validated entry points (issue 12 §3).

Two independent proofs of "no synchronisation": the Python methods that read a tensor's value on the
host are patched to count their calls, and every ATen operation is recorded (a TorchDispatchMode), so
a value read inside a C++ operator (``aten._local_scalar_dense``, ``nonzero``, ...) is caught too. The
kernels also run on the ``meta`` device, where any value read raises and every tensor they create is
checked to be on ``meta``.
"""

from __future__ import annotations

from contextlib import ExitStack
from unittest import mock

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from verifier_cases import GRID

import mdsd
from mdsd.verifiers import draw_uniforms

KERNEL_GRID = GRID + [(name, 4) for name, k in GRID if k == 3]
# every verifier is sync-free; the optimal verifier's fallback for drafts without replacement too (V = 300
# and 1000 exceed its flow size for k >= 2; its Luce rule, the default there, is solved on the host)
SYNC_FREE_GRID = [(name, k) for name, k in KERNEL_GRID if mdsd.verifiers.verifier_class(name).sync_free]
SYNC_FREE_GRID += [("optimal:wor", 2), ("optimal:wor", 3)]


def _sync_free(name, k):
    """The verifier ``name`` with k drafts; for optimal:wor its device fallback."""
    if name == "optimal:wor":
        return mdsd.verifiers.OptimalVerifier(k, law="wor", wor_rule="fallback")
    return mdsd.verifier(name, k)


# Python-level reads of a tensor's value on the host, and data-dependent shapes
HOST_READS = {
    torch.Tensor: [
        "item",
        "tolist",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "cpu",
        "numpy",
        "nonzero",
    ],
    torch: ["nonzero", "masked_select", "unique", "argwhere"],
}
HOST_READS[torch.Tensor] += ["masked_select", "unique", "argwhere"]
# the same at the ATen level (what .item(), bool(), .nonzero(), boolean indexing dispatch to)
SYNC_OPS = {
    "_local_scalar_dense",
    "nonzero",
    "nonzero_numpy",
    "masked_select",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "equal",
    "is_nonzero",
    "allclose",
    "repeat_interleave",
}


class Recorder(TorchDispatchMode):
    """Records every ATen op, the devices of its tensor outputs, and boolean-mask indexing."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []
        self.devices: set[str] = set()
        self.bool_index = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops.append(name)
        if name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool
            for i in (args[1] if len(args) > 1 else [])
            if i is not None
        ):
            self.bool_index += 1
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.devices.add(t.device.type)
        return out


def _inputs(name: str, k: int, batch: tuple[int, ...], n: int, dtype: torch.dtype, seed: int):
    """p, q [*batch, n] with some degenerate (one-hot) rows of q when batch is not empty."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(*batch, n, generator=gen, dtype=torch.float64) * 2, -1).to(dtype)
    q = torch.softmax(torch.randn(*batch, n, generator=gen, dtype=torch.float64) * 2, -1).to(dtype)
    if batch and batch[0] > 1:
        q[::3] = torch.eye(n, dtype=dtype)[torch.randint(n, (q[::3].shape[0],), generator=gen)]
    return p, q


def _counted():
    """Patch every host read to count its calls; returns (ExitStack, counts)."""
    counts: dict[str, int] = {}
    stack = ExitStack()
    for owner, names in HOST_READS.items():
        for attr in names:
            original = getattr(owner, attr)

            def spy(*args, _original=original, _key=f"{owner.__name__}.{attr}", **kwargs):
                counts[_key] = counts.get(_key, 0) + 1
                return _original(*args, **kwargs)

            stack.enter_context(mock.patch.object(owner, attr, spy))
    return stack, counts


@pytest.mark.parametrize(("name", "k"), SYNC_FREE_GRID)
@pytest.mark.parametrize("batch", [(), (1,), (64,)])
def test_kernels_make_no_host_synchronisation(name, k, batch):
    v = _sync_free(name, k)
    assert not v.reads_back(300)
    n = 300
    p, q = _inputs(name, k, batch, n, torch.float32, seed=k)
    gen = torch.Generator().manual_seed(1)
    p0, q0 = (p[0], q[0]) if batch else (p, q)  # one pair for many tuples, as simulate() uses it
    v.draft_unchecked(q, gen), v.verify_unchecked(p, q, v.draft_unchecked(q, gen), gen)  # warm caches
    stack, counts = _counted()
    recorder = Recorder()
    with stack, recorder:
        drafts = v.draft_unchecked(q, gen)
        tokens, index = v.verify_unchecked(p, q, drafts, gen)
        shared = v.verify_unchecked(p0, q0, v.draft_unchecked(q0.expand(40, n), gen), gen)
    assert counts == {}, counts
    assert not SYNC_OPS & set(recorder.ops), SYNC_OPS & set(recorder.ops)
    assert recorder.bool_index == 0
    assert tokens.shape == index.shape == batch and shared[0].shape == (40,)
    assert ((tokens >= 0) & (tokens < n)).all()


def test_the_sync_check_can_fail():
    """The two spies see a host read: a .item() in Python and a nonzero() inside an op."""
    stack, counts = _counted()
    recorder = Recorder()
    x = torch.tensor([0.0, 1.0])
    with stack, recorder:
        x.sum().item()
        x[x > 0]  # boolean indexing: nonzero inside ATen
    assert counts.get("Tensor.item") == 1
    assert "_local_scalar_dense" in recorder.ops and recorder.bool_index == 1


@pytest.mark.parametrize(("name", "k"), SYNC_FREE_GRID)
def test_kernels_run_on_the_meta_device(name, k):
    """On ``meta`` a value read raises and a data-dependent shape cannot be computed; every tensor the
    kernels create is on ``meta`` (a CPU tensor would show up as a 'cpu' output)."""
    v = _sync_free(name, k)
    for batch, dtype in (((), torch.float32), ((7, 3), torch.float64)):
        p = torch.empty(*batch, 1000, dtype=dtype, device="meta")
        q = torch.empty_like(p)
        recorder = Recorder()
        with recorder:
            drafts = v.draft_unchecked(q, torch.Generator())
            tokens, index = v.verify_unchecked(p, q, drafts, torch.Generator())
        assert recorder.devices == {"meta"}, recorder.devices
        assert drafts.device.type == tokens.device.type == index.device.type == "meta"
        assert drafts.shape == (*batch, k) and drafts.dtype == tokens.dtype == torch.int64
        assert tokens.shape == index.shape == batch


@pytest.mark.parametrize(("name", "k"), KERNEL_GRID)
def test_unchecked_and_checked_agree(name, k):
    """Same generator state, same tokens: the public entry points only add validation (and, on the
    CPU, the kernels run in slabs of rows: slab boundaries do not change a token)."""
    v = mdsd.verifier(name, k)
    p, q = _inputs(name, k, (40,), 50, torch.float64, seed=3)
    drafts = v.draft_unchecked(q, torch.Generator().manual_seed(5))
    assert torch.equal(drafts, v.draft(q, torch.Generator().manual_seed(5)))
    a = v.verify_unchecked(p, q, drafts, torch.Generator().manual_seed(6))
    b = v.verify(p, q, drafts, torch.Generator().manual_seed(6))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    u = draw_uniforms((40,), k, torch.Generator().manual_seed(6))
    with mock.patch("mdsd.verifiers.base.CPU_SLAB", 7 * 50):  # slabs of 7 rows
        c = v.verify_with(p, q, drafts, u)
    assert torch.equal(a[0], c[0]) and torch.equal(a[1], c[1])


@pytest.mark.parametrize(("name", "k"), SYNC_FREE_GRID)
def test_kernels_trace_whole_with_torch_compile(name, k):
    """Fixed shapes and no data-dependent control flow: every verifier's kernel (with the base class's
    degenerate rows around it) traces into one graph (fullgraph=True, the cheap "eager" backend) and
    gives the eager tokens. The decoder's step can then be compiled or captured in a CUDA graph."""
    torch._dynamo.reset()
    v = _sync_free(name, k)
    p, q = _inputs(name, k, (6,), 300, torch.float32, seed=k)
    gen = torch.Generator().manual_seed(2)
    drafts = v.draft_unchecked(q, gen)
    u = draw_uniforms((6,), v._uniform_columns(), gen)
    compiled = torch.compile(v._verify_block, fullgraph=True, backend="eager")
    assert torch.equal(compiled(p, q, drafts, u), v._verify_block(p, q, drafts, u))


@pytest.mark.parametrize(("name", "k"), [(n, k) for n, k in KERNEL_GRID if mdsd.verifier(n, k).law.inverts])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_drafting_block_masses_change_no_draft_and_no_token(name, k, dtype):
    """The decoder hands q's block masses, summed once for the drafting, to the drafting and to the
    verification (``masses``, ``q_masses``): the same drafts and the same tokens as when each sums them
    itself, on rows with one-hot q (degenerate: the stand-in's masses), entries of 1e-300 and exact
    zeros, in one block and in CPU slabs."""
    from mdsd.sampling import UniformStream, block_masses

    v = mdsd.verifier(name, k)
    p, q = _inputs(name, k, (40,), 50, torch.float64, seed=k)
    q[1::3, ::2] = 0.0
    q[1::3, 1::4] = 1e-300
    q = (q / q.sum(-1, keepdim=True)).to(dtype)
    p = p.to(dtype)
    masses = block_masses(q)
    values = torch.rand(40 * k, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    for source in (lambda: UniformStream(values), lambda: torch.Generator().manual_seed(5)):
        drafts = v.draft_unchecked(q, source())
        assert torch.equal(drafts, v.draft_unchecked(q, source(), masses))
    for slab in (mdsd.verifiers.base.CPU_SLAB, 7 * 50):
        with mock.patch("mdsd.verifiers.base.CPU_SLAB", slab):
            a = v.verify_unchecked(p, q, drafts, torch.Generator().manual_seed(6))
            b = v.verify_unchecked(p, q, drafts, torch.Generator().manual_seed(6), masses)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
