r"""The priority layout: an exact selection rule for i.i.d. drafts that reaches α* at any vocabulary size.

**The rule.** Each of the k drafts draws a random *depth* o ∈ [0, 1] from a distribution that depends only
on its token; the draft of least depth is selected, and the two-step verifier (docs/mathematics.md §6,
:mod:`mdsd.verifiers.optimal.twostep`) accepts it against p. The depth distributions come from one *layout*:
the unit interval is cut into pieces, token y owns pieces of total length q(y), and a draft of y draws its
depth uniformly from y's pieces. A random draft then has a uniform depth (the pieces tile [0, 1]), so the
least of k i.i.d. depths has density k (1 − o)^{k−1}, and

.. math:: F(y) = P(\text{the selected draft is } y) = \int_{\text{pieces of } y} k (1 - o)^{k-1}\,do,

the *value* of y's pieces (a depth interval [a, b] has value (1 − a)^k − (1 − b)^k).

**Every base has a layout.** Let g(A) = 1 − (1 − q(A))^k and G(x) = 1 − (1 − x)^k, the value of the top
x of the depths. F is a base if F(A) ≤ g(A) for every token set A and F(V) = 1. Place the tokens one at a
time, each on the window of the remaining depths that is contiguous once earlier windows are cut out,
holds mass q(y) and has value F(y). Sliding it down moves its value continuously and monotonically from
the top value of the remaining depths to the bottom value, and F(y) lies in between when the rest of F
is a base of what remains; after placing a set J of tokens the value of the top x of what remains is

.. math:: G_J(x) = \min_{J' \subseteq J} G(x + q(J')) - F(J'),

which keeps F on the other tokens a base (induction: each placement gives G_{J∪y}(x) = min(G_J(x),
G_J(x + q(y)) − F(y)), the window lying above or across the top x).

**The target** is the base

.. math:: F(y_i) = p(y_i) - (m_{i-1} - m_i) + (S_i - S_{i-1}), \quad
          h_i = g(P_i) - p(P_i), \ m_i = \min_{j \le i} h_j, \ S_i = \min_{j \ge i} h_j,

with y_1, y_2, … the tokens by p/q descending, P_i = {y_1..y_i} and μ = min_i h_i: p minus the drops of
the running minimum of h from the top, plus its rises from the bottom. Drops happen only up to the
argmin i* (the side B* = P_{i*} of Hu et al.'s min-cut), rises only after it (A*). So F(P_i) = p(P_i) +
m_i + S_i − μ = p(P_i) + max(m_i, S_i) ≤ g(P_i) (every prefix is feasible; all sets are checked by
enumeration in the tests), F ≥ g(P_i) − g(P_{i−1}) ≥ 0 at a drop, F(B*) = g(B*), F ≤ p on B* and F ≥ p on
A*, hence Σ min(F, p) = g(B*) + p(A*) = α*(p, IID(k)) (Hu et al., ICLR 2025): the verifier is optimal.
Rejections only happen on A* tokens while B* owns the top q(B*) of the depths, and the residual (p − F)+
lives on B*: it never lands on a draft, so the acceptance is exactly Σ min(F, p).

**Closed form.** Place the tokens by p/q descending. With Q_j = q(P_j), D_j = F(P_j), T_j = 1 − Q_j, a
remaining depth at remaining-mass x below the top, before token y_l is placed, has exactly the tokens
P_j above it, j = j_l(x) (the set above a remaining depth is a prefix: checked against the sequential
construction in the tests), so G_J is a minimum over prefixes and

.. math:: j_l(x) = \arg\max_{j < l} \; D_j + (T_j - x)^k, \qquad o = x + Q_{j_l(x)},
          \qquad s_l = \inf\{x \ge 0 : D_l + (T_l - x)^k \ge \max_{j < l} D_j + (T_j - x)^k\},

s_l the top of y_l's window. Each curve x ↦ D_j + (T_j − x)^k crosses each later one once, so the windows
form a convex-hull-trick stack (:func:`pair_layout` builds all of it for one pair in one pass, on the
host: :meth:`Verifier.simulate` uses it). At verify time only the k drafted tokens are needed, as device
kernels with fixed shapes (:func:`window_tops`, :func:`draft_depths`): s_l is the root of the concave
increasing min_j (C_l − C_j)(x), C_j the curves, i.e. the largest crossing of the token's curve with an
earlier one: every crossing at once by a fixed number of Newton steps over all prefixes (elementwise
passes a compiler fuses), then one max; then each draft's depth by one arg max. O(V) per draft and
Newton step after the O(V log V) sort.
The selection law of these pieces is checked against F by exact integration over every draft tuple in
the tests, and the kernels against the host reference (:mod:`mdsd.verifiers.reference`) token by token.

**Why not sort-free.** A bucketed layout (tokens grouped by their ratio, only the buckets that hold a window
boundary put in order) cannot return this F without sorting, and here is a row on which it must sort every
token. Where a token is a drop or a rise of h by itself alone, F(y_t) = g(P_{t+1}) − g(P_t) = (1 − Q_t)^k −
(1 − Q_t − q_t)^k, strictly falling in Q_t for k ≥ 2: F and q name the mass Q_t of the tokens before y_t, and
so the token's place. Take q random and p = (1 + c) times that increment of g along a random order up to its
middle and (1 − c') times it after (c' making p sum to 1): p/q falls along the order, h falls strictly and
then rises strictly, every token is such a drop or rise, and F read back through Q_t gives the whole order
(tests/verifiers/optimal/test_layout.py, ``test_the_law_names_every_tokens_place``). Any layout exact to
"same F" has then ranked all V tokens, which is what the sort does. Real rows are close to it: on 8 recorded
Qwen2.5-Coder positions (V = 151,936, k = 2 and 4) F differs from p by more than 1e-6 relative on
11,000-152,000 tokens (over 60% of q's mass in 11 of the 16 cases), and all but at most 4 of them a row are
ranked so by F (results/layout_structure). The drafts' windows read the order far from the drafts too: a
window top is the token's crossing with the envelope of all earlier curves, and over 400 drafts a row the
maximising prefixes were 2-123 distinct ones, a median 1-29,000 places before the draft. So the sort (a
stable radix sort of 64-bit keys) stays, as the floor of the kernel's cost. Not settled: a verdict reads less
than F (F at the selected draft, one draw of the residual, k windows); the residual draw alone is a select
(the first prefix where h falls below a threshold), but the windows' envelope runs over every prefix, and no
way to have them without the order is known here.

All arithmetic is float64 and (a + b)^k − a^k is expanded without cancellation. A window of mass q and
value F moves by ~ΔF / (k q) when F moves by ΔF, so F must keep its *relative* precision: at a drop or a
rise F is formed as g over a block of the sorted order less the p of the block's other tokens (one
token: g(P_i) − g(P_{i−1}) exactly), never as a difference of h values of order 1; the whole stack
differences double-double prefix sums. Depths are absolute numbers in [0, 1], so a token of mass below
~1e-16 has a window of no width: it sits at a point, which moves its selection probability by at most
its own mass times ~1e-16 / (a neighbour's mass).

References: Khisti et al., "Multi-Draft Speculative Sampling: Canonical Architectures and Theoretical
Limits", ICLR 2025 (the two-step form); Hu et al., "Towards Optimal Multi-draft Speculative Decoding",
ICLR 2025 (the min-cut dual); Thomas & Pal, "Global Resolution", ICLR 2026 (bases of g as selection laws).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "IIDLayout",
    "iid_layout",
    "window_tops",
    "prefix_crossings",
    "draft_depths",
    "PairLayout",
    "pair_layout",
    "pair_depths",
]

# elements of one [queries, V + 1] float64 working array: 2 MiB on the CPU (one query at a real vocabulary:
# the crossings' dozen temporaries stay in cache; 64 MiB chunks made a node 2.7x (k = 2) to 8.6x (k = 8)
# slower), 1 GiB on an accelerator (few, large kernels)
CHUNK = {"cpu": 1 << 18}
CHUNK_DEVICE = 1 << 27


def newton_steps(k: int) -> int:
    """Newton steps that take a crossing (below) to float64 resolution from its upper bound, for k
    drafts: measured over roots from 1e-12 to 1e12 times the window's mass (k + 2 suffices, k <= 16)."""
    return k + 2


@dataclass(frozen=True)
class IIDLayout:
    """The sorted quantities of the priority layout for rows p, q [R, V] (flattened rows), float64.

    Per row: tokens by p/q descending (``order``), each token's place in that order (``rank``), sorted q
    and F (``q_sorted``, ``f_sorted``), prefix sums Q_j = ``prefix_q[:, j]`` and D_j = ``prefix_f[:, j]``
    (j = 0..V), tails T_j = ``tail_q[:, j]`` (mass after the first j, summed from the end) and the
    selection law F in token order (``target``).
    """

    k: int
    order: torch.Tensor  # [R, V]
    rank: torch.Tensor  # [R, V]
    q_sorted: torch.Tensor  # [R, V]
    f_sorted: torch.Tensor  # [R, V]
    prefix_q: torch.Tensor  # [R, V + 1]
    prefix_f: torch.Tensor  # [R, V + 1]
    tail_q: torch.Tensor  # [R, V + 1]
    target: torch.Tensor  # [R, V]


def _tail(x: torch.Tensor) -> torch.Tensor:  # [R, V] -> [R, V + 1]: Σ_{i >= j} x_i, summed from the end
    return torch.nn.functional.pad(x.flip(-1).cumsum(-1).flip(-1), (0, 1))


def _prefix(x: torch.Tensor) -> torch.Tensor:  # [R, V] -> [R, V + 1]: Σ_{i < j} x_i
    return torch.nn.functional.pad(x.cumsum(-1), (1, 0))


def _descending(ratio: torch.Tensor) -> torch.Tensor:
    """Indices sorting rows of ``ratio`` [R, V] (float64, no NaN) descending, ties in index order: a
    stable ascending sort of the integer keys −bits(ratio) (the bits of a non-negative float order like
    its value; −∞, whose sign bit makes them negative, comes last). On the CPU torch sorts a 1-D int64
    tensor ascending by radix, several times faster than the rows of a 2-D one or a descending sort, so
    the rows are sorted one at a time there (a loop fixed by the shape)."""
    key = ratio.view(torch.int64).neg()
    if key.device.type == "cpu" and key.shape[0] > 0:
        return torch.stack([torch.sort(row, stable=True).indices for row in key])
    return torch.sort(key, dim=-1, stable=True).indices


def iid_layout(p: torch.Tensor, q: torch.Tensor, k: int) -> IIDLayout:
    """Sort rows p, q [R, V] by p/q descending and compute the optimal selection law F (module docstring).

    Tokens with q = 0 and p > 0 come first (ratio ∞, F = 0: never drafted); ties keep token order.
    Fixed shapes, no host synchronisation, float64 throughout.

    >>> lay = iid_layout(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.5]]), 2)
    >>> lay.target.tolist()  # token 0 is selected whenever drafted: 1 − (1/2)²
    [[0.75, 0.25]]
    """
    p, q = p.double(), q.double()
    order = _descending((p / q).nan_to_num_(nan=-math.inf))  # q = 0: ∞ where p > 0, −∞ where p = 0
    ps, qs = p.gather(-1, order), q.gather(-1, order)
    tail_q, tail_p = _tail(qs), _tail(ps)
    h = tail_p - _power(tail_q.clone(), k)  # g(P_j) − p(P_j) = (1 − p(P_j)) − (1 − q(P_j))^k, as tails
    top, top_at = torch.cummin(h, dim=-1)  # m_j, and the last j' <= j where h is that low
    low, low_at = torch.cummin(h.flip(-1), dim=-1)
    bottom, bottom_at = low.flip(-1), h.shape[-1] - 1 - low_at.flip(-1)  # S_j, the first j' >= j there
    # F = p but at a drop (token t takes m down from m_t to h_{t+1}) or a rise (S goes up from h_t): there
    # F is g over the block from the last minimum j* to t + 1 (from t to the next minimum j**) less the p
    # of the block's other tokens; formed so (never as a difference of h values of order 1), a small F
    # keeps its relative precision. Most blocks are the token alone: g(P_{t+1}) − g(P_t), from q_t itself.
    drop, rise = top[:, 1:] < top[:, :-1], bottom[:, :-1] < bottom[:, 1:]
    token = torch.arange(ps.shape[-1], device=p.device)
    after = token + 1
    wide_drop, wide_rise = drop & (top_at[:, :-1] < token), rise & (bottom_at[:, 1:] > after)
    first = torch.where(wide_drop & ~wide_rise, top_at[:, :-1], token)  # the block [first, last)
    last = torch.where(wide_rise, bottom_at[:, 1:], after)
    wide = wide_drop | wide_rise
    below = tail_q.gather(-1, last)  # q after the block
    block_q = torch.where(wide, tail_q.gather(-1, first) - below, qs)
    others = torch.where(wide, (tail_p.gather(-1, first) - tail_p.gather(-1, last)) - ps, 0.0)
    f_sorted = torch.where(drop | rise, _rise(below, block_q, k)[0] - others, ps).clamp_min_(0.0)
    places = token.expand_as(order)
    return IIDLayout(
        k=k,
        order=order,
        rank=torch.empty_like(order).scatter_(-1, order, places),
        q_sorted=qs,
        f_sorted=f_sorted,
        prefix_q=_prefix(qs),
        prefix_f=_prefix(f_sorted),
        tail_q=tail_q,
        target=torch.empty_like(f_sorted).scatter_(-1, order, f_sorted),
    )


def _sums(a: torch.Tensor, b: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """s_{k−1} and s_{k−2} for s_n = Σ_{m<=n} (a + b)^m a^{n−m} (all terms positive), k >= 2; None stands
    for s_0 = 1. Then (a + b)^k − a^k = b s_{k−1} and its derivative in a is k b s_{k−2}."""
    c = a + b
    s_prev, s, a_pow = None, c + a, a  # s_n = c s_{n−1} + a^n from s_0 = 1; s_prev ends as s_{k−2}
    for _ in range(k - 2):  # n = 2..k−1 (a kernel call fewer per term than from tensors of ones)
        a_pow = a_pow * a
        s_prev, s = s, c * s + a_pow
    return s, s_prev


def _rise(a: torch.Tensor, b: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(a + b)^k − a^k and its derivative in a, k[(a + b)^{k−1} − a^{k−1}], for a, b ≥ 0 without
    cancellation: b Σ_{m<k} (a + b)^m a^{k−1−m} (all terms positive, :func:`_sums`)."""
    if k == 1:
        return b * 1.0, (k * b) * 0.0
    s, s_prev = _sums(a, b, k)
    return b * s, k * b if s_prev is None else k * b * s_prev


def _power(x: torch.Tensor, k: int) -> torch.Tensor:
    """x^k for an integer k >= 1 by repeated squaring, consuming ``x`` (its storage holds the squares;
    fewer passes than pow)."""
    result = None
    while True:
        if k & 1:
            result = (x if k == 1 else x.clone()) if result is None else result.mul_(x)
        k >>= 1
        if not k:
            return result
        x = x.mul_(x)


def _of_rows(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Rows ``rows`` [N] of ``t`` [R, M]: [N, M], or [1, M] (broadcast, no copy) for a single row."""
    return t[:1] if t.shape[0] == 1 else t[rows]


def _chunks(n: int, *queries: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    """The queries ([N] each) in chunks whose [queries, n + 1] working arrays hold at most :data:`CHUNK`
    elements; one chunk (the tensors themselves, no slicing) when they fit."""
    count, device = queries[0].numel(), queries[0].device
    step = max(1, CHUNK.get(device.type, CHUNK_DEVICE) // (n + 1))
    if count <= step:
        return [queries]
    return [tuple(t[start : start + step] for t in queries) for start in range(0, count, step)]


def _joined(out: list[torch.Tensor]) -> torch.Tensor:
    """The chunks' results as one tensor (no copy for a single chunk)."""
    return out[0] if len(out) == 1 else torch.cat(out)


def _crossings(dq: torch.Tensor, df: torch.Tensor, below: torch.Tensor, k: int) -> torch.Tensor:
    """Remaining depths where a token's curve overtakes that of a prefix j, for tensors of
    dq = Q_l − Q_j, df = D_l − D_j and the tail below = T_l: the x with (below − x + dq)^k −
    (below − x)^k = df. Newton on a = below − x from the upper bound (df / (k dq))^(1/(k−1)) − dq/2
    (Jensen: k dq (a + dq/2)^{k−1} <= the left side) decreases monotonically (the left side is convex
    increasing in a), :func:`newton_steps` steps; −inf where dq <= 0 in float64. Elementwise: one fused
    pass under a compiler."""
    tiny = torch.finfo(torch.float64).tiny
    mass = dq > 0
    dq = torch.where(mass, dq, 1.0)
    k_dq = k * dq
    a = df / k_dq if k == 2 else (df / k_dq).pow(1.0 / (k - 1))
    a = (a - 0.5 * dq).clamp_min(0.0)
    slope = k_dq.clamp_min(tiny)  # k = 2: the slope 2 dq does not depend on a
    for _ in range(newton_steps(k)):
        s, s_prev = _sums(a, dq, k)
        rise = dq * s  # (a + dq)^k − a^k
        if s_prev is not None:
            slope = (k_dq * s_prev).clamp_min(tiny)  # k dq s_{k−2}: its derivative in a
        a = torch.where(rise > df, (a - (rise - df) / slope).clamp_min(0.0), a)
    return torch.where(mass, torch.where(df <= dq.pow(k), below, below - a), -math.inf)


def window_tops(lay: IIDLayout, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    r"""s_l for the tokens at sorted positions ``pos`` [N] of rows ``rows`` [N]: [N] float64.

    .. math:: s_l = \min\Bigl(\max\bigl(0, \max_{j < l} x_{lj}\bigr), T_l\Bigr), \qquad
              D_l + (T_l - x_{lj})^k = D_j + (T_j - x_{lj})^k,

    the largest crossing x_{lj} of token l's curve x ↦ D_l + (T_l − x)^k with an earlier one, clamped to
    [0, T_l]: the root of the concave increasing min_j (C_l − C_j). All crossings at once, by
    :func:`_crossings` over [N, V + 1] (dq = Q_l − Q_j, df = D_l − D_j; for j = l − 1 the token's own q
    and F, so a light token keeps its relative precision; −∞ for j >= l, where dq <= 0), then one max:
    a fixed number of elementwise passes, no host synchronisation, no loop over the data.
    """
    out = []
    for r, p in _chunks(lay.q_sorted.shape[-1], rows, pos):
        below = lay.tail_q[r, p + 1]
        top = prefix_crossings(lay, r, p).amax(-1)
        out.append(torch.minimum(top.clamp_min(0.0), below))
    return _joined(out)


def prefix_crossings(lay: IIDLayout, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x_{lj} [N, V + 1]: the crossings of the curves of the tokens at sorted positions ``pos`` [N] of rows
    ``rows`` [N] with every prefix j's (−∞ for j >= l), as :func:`window_tops` reads them (one chunk)."""
    end, at = pos + 1, pos.unsqueeze(-1)
    dq = lay.prefix_q[rows, end].unsqueeze(-1) - _of_rows(lay.prefix_q, rows)  # [N, V + 1]
    df = lay.prefix_f[rows, end].unsqueeze(-1) - _of_rows(lay.prefix_f, rows)
    dq.scatter_(-1, at, lay.q_sorted[rows, pos].unsqueeze(-1))  # j = l − 1: Q_l − Q_{l−1} = q_l
    df.scatter_(-1, at, lay.f_sorted[rows, pos].unsqueeze(-1))
    return _crossings(dq, df, lay.tail_q[rows, end].unsqueeze(-1), lay.k)


def draft_depths(
    lay: IIDLayout, rows: torch.Tensor, pos: torch.Tensor, tops: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    r"""Depth o = t + Q_{j_l(t)} of drafts at sorted positions ``pos`` [N] with window tops ``tops`` [N]
    and uniforms ``u`` [N]:

    .. math:: t = s_l + u\, q(y_l), \qquad j_l(t) = \arg\max_{j < l} D_j - D_l + (T_j - t)^k - (T_l - t)^k,

    the last maximiser (the layout is right-continuous in t); T_j − t = (T_l − t) + Q_l − Q_j, clamped at
    0. Plain powers (absolute error ~1e-16): for arg max only. One pass of elementwise kernels over
    [N, V + 1] and one arg max."""
    out = []
    prefixes = torch.arange(lay.prefix_q.shape[-1], device=pos.device)
    for r, p, top, v in _chunks(lay.q_sorted.shape[-1], rows, pos, tops, u):
        end = p + 1
        t = top + v * lay.q_sorted[r, p]
        a = lay.tail_q[r, end] - t  # T_l − t
        heights = (a + lay.prefix_q[r, end]).unsqueeze(-1).sub(_of_rows(lay.prefix_q, r)).clamp_min_(0.0)
        rise = _of_rows(lay.prefix_f, r) - lay.prefix_f[r, end].unsqueeze(-1)  # D_j − D_l
        curves = _power(heights, lay.k).add_(rise).sub_(_power(a, lay.k).unsqueeze(-1))
        curves.masked_fill_(prefixes > p.unsqueeze(-1), -math.inf)  # j >= l: not before the token
        j = (curves.shape[-1] - 1) - curves.flip(-1).argmax(-1)  # the last maximiser
        out.append(t + lay.prefix_q[r, j])
    return _joined(out)


@dataclass(frozen=True)
class PairLayout:
    """The whole layout of one pair (all tokens), for drawing many drafts of one (p, q).

    The token at sorted position i owns remaining depths [s_i, s_i + q_i) (``tops[i]`` = s_i);
    ``piece_t[ptr[i]:ptr[i+1]]`` are the remaining depths where its pieces start (the first is s_i) and
    ``piece_j`` the prefix lengths j above them, so a draft at remaining depth t lies at depth t + Q_j.
    """

    tops: torch.Tensor  # [V]
    ptr: torch.Tensor  # [V + 1]
    piece_t: torch.Tensor  # [P]
    piece_j: torch.Tensor  # [P]


def _crossing(dq: float, df: float, below: float, k: int) -> float:
    """Remaining depth x where the curve of a token (tail ``below`` under it) overtakes that of the
    prefix j: (below − x + dq)^k − (below − x)^k = df with dq = Q_l − Q_j, df = D_l − D_j. Newton on
    a = below − x from an upper bound (the left side is convex increasing in a)."""
    if dq <= 0.0:  # the prefixes differ by no mass (in float64): the later curve is never below
        return -math.inf
    if df <= dq**k:  # even a = 0 gives at least df: the later curve wins from x = below on
        return below
    a = (df / (k * dq)) ** (1.0 / (k - 1))  # k a^{k−1} dq <= left side: an upper bound on the root
    for _ in range(100):
        c, s, s_prev, a_pow = a + dq, 1.0, 0.0, 1.0
        for _ in range(k - 1):
            a_pow *= a
            s_prev, s = s, c * s + a_pow
        f = dq * s - df
        step = f / (k * dq * s_prev) if f > 0.0 and s_prev > 0.0 else 0.0
        if step <= a * 1e-16:
            break
        a = max(a - step, 0.0)
    return below - a


def _double_prefix(x: list[float]) -> tuple[list[float], list[float]]:
    """Prefix sums of ``x`` as (high, low) float pairs (TwoSum): Σ_{i<j} x_i = high[j] + low[j] exactly
    up to ~1e-32 relative."""
    high, low, h, lo = [0.0], [0.0], 0.0, 0.0
    for v in x:
        s = h + v
        b = s - h
        lo += (h - (s - b)) + (v - b)
        h = s
        high.append(h)
        low.append(lo)
    return high, low


def _between(sums: tuple[list[float], list[float]], j: int, end: int) -> float:
    """Σ_{j <= i < end} x_i from double-double prefix sums."""
    return (sums[0][end] - sums[0][j]) + (sums[1][end] - sums[1][j])


def pair_layout(lay: IIDLayout, row: int = 0) -> PairLayout:
    """All windows and pieces of row ``row`` by the convex-hull-trick stack: O(V) crossings, one pass.

    The stack holds curves j (prefix lengths) with the remaining depth where each becomes the maximum;
    pushing token i's curve pops those it overtakes before their start. The envelope just before the push
    gives token i's pieces: they begin at s_i and at every popped start inside its window. The masses and
    values between two prefixes are differences of double-double prefix sums, so a block of small tokens
    after heavy ones keeps its relative precision (its windows then tile the depths exactly).
    """
    k = lay.k
    qs = lay.q_sorted[row].tolist()
    tails = lay.tail_q[row].tolist()
    sum_q, sum_f = _double_prefix(qs), _double_prefix(lay.f_sorted[row].tolist())
    stack_j, stack_x = [0], [-math.inf]
    tops, ptr, piece_t, piece_j = [0.0] * len(qs), [0], [], []
    for i, qi in enumerate(qs):
        if qi <= 0.0:  # never drafted: no window, no curve
            ptr.append(len(piece_t))
            continue
        popped = []
        while True:
            j = stack_j[-1]
            x = _crossing(_between(sum_q, j, i + 1), _between(sum_f, j, i + 1), tails[i + 1], k)
            if len(stack_j) > 1 and stack_x[-1] >= x:
                popped.append((stack_x.pop(), stack_j.pop()))
                continue
            break
        s = min(max(x, 0.0), tails[i + 1])
        tops[i] = s
        cover, inside = stack_j[-1], []
        for start, jj in reversed(popped):  # increasing starts
            if start <= s:
                cover = jj
            elif start < s + qi:
                inside.append((start, jj))
        piece_t += [s] + [start for start, _ in inside]
        piece_j += [cover] + [jj for _, jj in inside]
        ptr.append(len(piece_t))
        stack_j.append(i + 1)
        stack_x.append(s)
    dev = lay.q_sorted.device
    return PairLayout(
        tops=torch.tensor(tops, dtype=torch.float64, device=dev),
        ptr=torch.tensor(ptr, dtype=torch.long, device=dev),
        piece_t=torch.tensor(piece_t, dtype=torch.float64, device=dev),
        piece_j=torch.tensor(piece_j, dtype=torch.long, device=dev),
    )


def pair_depths(lay: IIDLayout, pair: PairLayout, pos: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Depths of drafts at sorted positions ``pos`` [N] with uniforms ``u`` [N], from a :class:`PairLayout`
    (row 0): t = s_l + u q(y_l), the piece holding t by binary search, o = t + Q_j."""
    t = pair.tops[pos] + u * lay.q_sorted[0, pos]
    lo, hi = pair.ptr[pos].clone(), pair.ptr[pos + 1] - 1  # the pieces of each draft's token
    while bool((lo < hi).any()):  # the last piece starting at or before t
        live = lo < hi
        mid = (lo + hi + 1) // 2
        up = pair.piece_t[mid.clamp_max(pair.piece_t.numel() - 1)] <= t
        lo = torch.where(live & up, mid, lo)
        hi = torch.where(live & ~up, mid - 1, hi)
    return t + lay.prefix_q[0, pair.piece_j[lo]]
