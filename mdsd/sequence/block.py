r"""Block verification of a drafted chain (Sun et al., "Block Verification Accelerates Speculative
Decoding", ICLR 2025): the chain is verified jointly, from its end back to its root.

For drafted tokens X_1..X_L, target p_i = p(· | X^i) and draft q_i = q(· | X^i) after i drafted tokens:

.. math:: w_0 = 1, \quad w_i = \min\Bigl(1, w_{i-1} \frac{p_{i-1}(X_i)}{q_{i-1}(X_i)}\Bigr), \qquad
          h_i = \frac{\sum_x (w_i p_i(x) - q_i(x))_+}{\sum_x (q_i(x) - w_i p_i(x))_+} \;(i < L),
          \quad h_L = w_L,

(the denominator is Σ(w p − q)_+ + 1 − w, computed as the mass that remains; 0/0 only when w_i = 1 and
p_i = q_i, a branch never reached, read as 1). With η_i ~ U(0, 1), τ = max{i >= 1 : η_i < h_i} (0 if
none); emit X_1..X_τ and one token Y drawn from p_L if τ = L, else from norm((w_τ p_τ − q_τ)_+).
Lossless, never worse than token-wise verification, and optimal among verifiers of one drafted chain
(Sun et al., Theorems 1-2; checked here against :func:`mdsd.solve_tree_otm`).

Shapes: B batch, L drafted tokens, V vocabulary. The uniforms of one call come from
:func:`mdsd.verifiers.draw_uniforms` (``accept`` [B, L]: η_1..η_L; ``residual`` [B]).
"""

from __future__ import annotations

import numpy as np
import torch

from mdsd.sampling import inverse_cdf
from mdsd.sequence.drafts import enumerate_drafts, node_laws
from mdsd.sequence.models import SequenceModel, check_pair
from mdsd.token_tree import Tree
from mdsd.validation import as_probability_tensor, check_k
from mdsd.verifiers.ops import Uniforms, draw_uniforms
from mdsd.verifiers.reference import draw_index
from mdsd.verifiers.registry import PathRule, register_path_rule

__all__ = [
    "block_verify",
    "block_verify_with",
    "block_verify_unchecked",
    "reference_block_verify",
    "block_step_law",
    "block_tokens_per_step",
]


def _step(p: torch.Tensor, q: torch.Tensor, tree: Tree, tokens: torch.Tensor, generator):  # noqa: ARG001
    """The decoder's step of block verification on a chain (:attr:`PathRule.kernel`): the accepted node of a
    chain is its depth."""
    B, N = tokens.shape
    return block_verify_unchecked(p, q, tokens[:, 1:], draw_uniforms((B,), N - 1, generator, p.device))


# The tree decoder's verifier="block": a Tree.chain, one draft per node (single-draft's law).
register_path_rule(PathRule("block", drafts_with="single", chains_only=True, kernel=_step))


def _inputs(p: object, q: object, tokens: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    pt, qt = as_probability_tensor(p, "p"), as_probability_tensor(q, "q")
    if pt.dtype != qt.dtype:
        pt, qt = pt.double(), qt.double()
    tt = tokens if isinstance(tokens, torch.Tensor) else torch.as_tensor(np.asarray(tokens))
    if tt.is_floating_point() or tt.dtype == torch.bool:
        raise TypeError(f"tokens must be an integer tensor, got dtype {tt.dtype}")
    if tt.ndim != 2 or tt.shape[1] < 1:
        raise ValueError(f"tokens must have shape [B, L] with L >= 1, got {tuple(tt.shape)}")
    B, L = tt.shape
    if pt.ndim != 3 or tuple(pt.shape[:2]) != (B, L + 1):
        raise ValueError(f"p must have shape [B, L + 1, V] = [{B}, {L + 1}, V], got {tuple(pt.shape)}")
    if qt.ndim != 3 or tuple(qt.shape) != (B, L, pt.shape[2]):
        raise ValueError(f"q must have shape [B, L, V] = [{B}, {L}, {pt.shape[2]}], got {tuple(qt.shape)}")
    if pt.device != qt.device:
        raise ValueError(f"p and q must be on one device; got {pt.device} and {qt.device}")
    tt = tt.to(device=pt.device, dtype=torch.long)
    V = pt.shape[2]
    if tt.numel() and (int(tt.min()) < 0 or int(tt.max()) >= V):
        raise ValueError(f"tokens must lie in [0, {V}); got values in [{int(tt.min())}, {int(tt.max())}]")
    if not bool((qt.gather(-1, tt.unsqueeze(-1)) > 0).all()):
        raise ValueError("tokens hold a drafted token with q = 0, which the draft never draws")
    return pt, qt, tt


def block_verify(
    p: object, q: object, tokens: object, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-verify drafted chains: returns (accepted [B] in 0..L, next_token [B]).

    Parameters
    ----------
    p : [B, L + 1, V]
        The target at the root and after each drafted token.
    q : [B, L, V]
        The draft at the root and after each drafted token but the last.
    tokens : LongTensor [B, L]
        The drafted chains (each X_i drawn from q[:, i − 1]).
    generator : torch.Generator or None
        Source of the L + 1 uniforms per row.

    The step emits ``tokens[b, :accepted[b]]`` followed by ``next_token[b]``.

    >>> p = torch.tensor([[[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]]], dtype=torch.float64)
    >>> acc, nxt = block_verify(p, p[:, :2], torch.tensor([[1, 0]]), torch.Generator().manual_seed(0))
    >>> int(acc[0]), int(nxt[0])  # q = p: the whole chain is accepted, the bonus token is 0
    (2, 0)
    """
    pt, qt, tt = _inputs(p, q, tokens)
    u = draw_uniforms((tt.shape[0],), tt.shape[1], generator, pt.device)
    return block_verify_unchecked(pt, qt, tt, u)


def block_verify_with(
    p: object, q: object, tokens: object, uniforms: Uniforms
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`block_verify` with given uniforms (``accept`` [B, L], ``residual`` [B])."""
    pt, qt, tt = _inputs(p, q, tokens)
    return block_verify_unchecked(pt, qt, tt, uniforms)


def block_verify_unchecked(
    p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, u: Uniforms
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel of :func:`block_verify`: p [B, L + 1, V], q [B, L, V] of one dtype and device, tokens
    [B, L] int64 drawn from q, uniforms ``u`` (``accept`` [B, L], ``residual`` [B]). No validation, no
    host synchronisation (what the tree decoder calls inside its loop)."""
    B, L = tokens.shape
    index = tokens.unsqueeze(-1)
    px = p[:, :L].gather(-1, index)[..., 0].double()  # p_{i-1}(X_i) [B, L]
    qx = q.gather(-1, index)[..., 0].double()  # q_{i-1}(X_i) [B, L]
    w = [torch.ones(B, dtype=torch.float64, device=p.device)]
    for i in range(L):  # w_i = min(1, w_{i-1} p/q), without overflowing for tiny q
        num = w[-1] * px[:, i]
        w.append(torch.where(num >= qx[:, i], 1.0, num / qx[:, i]))
    weights = torch.stack(w, dim=-1)  # w_0..w_L [B, L + 1]
    diff = weights[:, 1:L, None].to(p.dtype) * p[:, 1:L] - q[:, 1:L]  # [B, L - 1, V]
    num = diff.clamp_min(0).sum(-1, dtype=torch.float64)
    den = num + (1.0 - weights[:, 1:L])  # Σ(q − w p)+ = Σ(w p − q)+ + 1 − w: no cancellation, h <= 1
    accept = torch.cat(
        [(u.accept[:, : L - 1] * den < num) | (den == 0), (u.accept[:, -1] < weights[:, L])[:, None]], 1
    )
    steps = torch.arange(1, L + 1, device=p.device)
    tau = torch.where(accept, steps, 0).amax(-1)  # [B]
    rows = torch.arange(B, device=p.device)
    p_tau = p[rows, tau]  # [B, V]
    q_tau = q[rows, tau.clamp_max(L - 1)]
    w_tau = weights[rows, tau].to(p.dtype)[:, None]
    residual = torch.where((tau == L)[:, None], p_tau, (w_tau * p_tau - q_tau).clamp_min(0))
    return tau, inverse_cdf(residual, u.residual.unsqueeze(-1), fallback=p_tau)[..., 0]


# ---- float64 core, reference and exact law ------------------------------------------------------------


def chain_decisions(
    p_rows: np.ndarray, q_rows: np.ndarray, tokens: tuple[int, ...]
) -> tuple[list, np.ndarray]:
    """For one chain (p_rows [L + 1, n], q_rows [L, n], tokens [L]) in float64: the test at each depth,
    tests[i] = (numerator, denominator) of h_i for 1 <= i < L and (w_L, 1) at L, and the law of the last
    token at each τ, residual [L + 1, n]."""
    L = len(tokens)
    w = [1.0]
    for i, x in enumerate(tokens):
        num = w[-1] * p_rows[i, x]
        w.append(1.0 if num >= q_rows[i, x] else num / q_rows[i, x])
    tests, residual = [None] * (L + 1), np.empty((L + 1, p_rows.shape[1]))
    for i in range(L):
        diff = w[i] * p_rows[i] - q_rows[i]
        num = np.maximum(diff, 0.0).sum()
        tests[i] = (num, num + (1.0 - w[i]))  # Σ(q − w p)+ by Σ p = Σ q = 1, not by cancellation
        residual[i] = np.maximum(diff, 0.0) / num if num > 0 else p_rows[i]
    tests[L], residual[L] = (w[L], 1.0), p_rows[L]
    return tests, residual


def _passes(test: tuple[float, float], u: float) -> bool:
    num, den = test
    return u * den < num or den == 0


def reference_block_verify(
    p: np.ndarray, q: np.ndarray, tokens: list[int], accept: np.ndarray, residual: float
) -> tuple[int, int]:
    """One row in float64 (p [L + 1, V], q [L, V], tokens [L], the row's uniforms): (τ, next token).

    Walks back from the end of the chain: τ is the first depth i (from L down to 1) with η_i < h_i.
    """
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    tests, res = chain_decisions(p, q, tuple(int(t) for t in tokens))
    tau = next((i for i in range(len(tokens), 0, -1) if _passes(tests[i], accept[i - 1])), 0)
    return tau, draw_index(res[tau], residual)


def block_step_law(
    target: SequenceModel, draft: SequenceModel, depth: int, context: tuple[int, ...] = ()
) -> dict[tuple[int, ...], float]:
    """The exact law {emitted string: probability} of one block-verification step on a chain of
    ``depth`` drafted tokens: every chain X (probability Π q), every τ (probability h_τ Π_{j>τ}(1 − h_j))
    and every last token.

    >>> from mdsd.sequence.models import SequenceModel
    >>> p, q = SequenceModel.context_free([1 / 3, 2 / 3]), SequenceModel.context_free([2 / 3, 1 / 3])
    >>> law = block_step_law(p, q, 2)
    >>> round(sum(len(s) * w for s, w in law.items()) * 9, 9)  # 1 + 11/9: Sun et al.'s block figure
    20.0
    """
    depth = check_k(depth, "depth")
    context = tuple(int(t) for t in context)
    check_pair(target, draft, depth, context)
    chain = Tree.chain(depth)
    out: dict[tuple[int, ...], float] = {}
    for tokens, weight in enumerate_drafts(draft, chain, node_laws(chain, "iid"), context):
        prefixes_ = [context + tokens[:i] for i in range(depth + 1)]
        p_rows = np.stack([target(u) for u in prefixes_])
        q_rows = np.stack([draft(u) for u in prefixes_[:-1]])
        tests, residual = chain_decisions(p_rows, q_rows, tokens)
        reach = float(weight)  # P(chain, and no test above the current depth passed)
        for i in range(depth, -1, -1):
            num, den = tests[i] if i > 0 else (1.0, 1.0)
            h = float(num / den) if den > 0 else 1.0
            for y in np.flatnonzero(residual[i] > 0).tolist():
                s = (*tokens[:i], y)
                out[s] = out.get(s, 0.0) + reach * h * float(residual[i][y])
            reach *= 1.0 - h
    return out


def block_tokens_per_step(
    target: SequenceModel, draft: SequenceModel, depth: int, context: tuple[int, ...] = ()
) -> float:
    """Exact expected tokens per step E[τ + 1] of block verification on a chain of ``depth`` tokens."""
    return sum(len(s) * w for s, w in block_step_law(target, draft, depth, context).items())
