"""The optimal verifier: the two-step verifier (docs/mathematics.md §6) with a selection rule that reaches α*.

* i.i.d. drafts, any vocabulary and k: the priority layout of :mod:`mdsd.verifiers.optimal.layout` (each draft
  draws a depth from its token's pieces, the least depth is selected). Its law F is known in closed form
  and Σ min(F, p) = α*; no residual ever lands on a draft, so the acceptance is exactly α*.
* any other law (without replacement, Joint, hub, ...) on a small network (at most :data:`FLOW_TUPLES`
  draft tuples, counted from the vocabulary size and k, never from the values of q; without replacement
  also at most :data:`FLOW_ENTRIES` tuples × vocabulary, the size of the flow's table): the rule read off
  an optimal flow of the max-flow / LP (s(z | x̄) = f(x̄, z)/Q(x̄)), with F summed back from the rule, so
  the verifier is lossless whatever the solver's tolerance and optimal up to it. A host path: the flow is
  solved on the CPU.
* drafts without replacement beyond that size (``wor_rule="luce"``, the default): a Luce rule with
  priority levels (:mod:`mdsd.verifiers.optimal.luce_rule`): levels from the tight prefixes of the closed-form
  optimal law F*, weights fitted to F* within each level; the law F̂ used for verification is computed
  for exactly those levels and weights (:mod:`mdsd.verifiers.optimal.luce`, ε = Σ|F̂ − F| below 1e-13 by the
  quadrature's bound), so the verifier is lossless to that figure whatever the solver reached: the
  emitted law is F a + (1 − Σ F a) r̂ with a = min(1, p/F̂), r̂ = norm((p − F̂)+), while p = F̂ a +
  (1 − Σ F̂ a) r̂ exactly, so it is within 2ε of p in L1. Its acceptance (Σ min(F̂, p) plus residual
  draws landing on drafts) is exact to 2ε: α*_wor less the solver's shortfall. A host path: the rule is
  solved on the CPU per pair (seconds at V = 151,936: see BENCHMARKS.md).
* ``wor_rule="fallback"``: the drafts are turned into k i.i.d. drafts (the i.i.d. stream whose first k
  distinct tokens are the drafts: before each new draft, a repeat of an earlier one with probability
  q(drafts so far)), and the i.i.d. rule runs on those. Lossless; the acceptance is at least α*_iid(k)
  (plus residual draws landing on unused drafts) and at most α*_wor(k); :meth:`OptimalVerifier.acceptance`
  gives it exactly for k <= 4 (:mod:`mdsd.verifiers.optimal.fallback`) and refuses to guess it for k >= 5 (use
  :func:`mdsd.estimate_acceptance`).

**On the device.** The i.i.d. rule and the fallback are kernels like every other verifier's: the layout of
all rows at once (a stable sort of the ratios by integer keys, prefix sums, running minima, F), each
draft's window top by Newton steps on all its crossings at once and one max, its depth by one arg max,
the least depth selected, the two-step accept/residual (:mod:`mdsd.verifiers.optimal.layout`); fixed
shapes per (rows, V, k), no branch on the data, no host synchronisation, every random number from the
call's :class:`Uniforms`. The flow and the Luce rule read values back (:meth:`OptimalVerifier.reads_back`):
eager path only.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from mdsd.laws import IID, DraftLaw, WithoutReplacement
from mdsd.otm.solve import solve_otm
from mdsd.validation import as_pair, check_k
from mdsd.verifiers.base import Rows, Verifier
from mdsd.verifiers.ops import Uniforms, take
from mdsd.verifiers.optimal.fallback import fallback_acceptance
from mdsd.verifiers.optimal.layout import draft_depths, iid_layout, pair_depths, pair_layout, window_tops
from mdsd.verifiers.optimal.layout_reference import least_depth_odds, reference_select, stack_pieces
from mdsd.verifiers.optimal.luce_rule import LuceRule, luce_acceptance, luce_rule, luce_select
from mdsd.verifiers.optimal.twostep import selection_acceptance, two_step
from mdsd.verifiers.reference import draw_index, normalized, onehot
from mdsd.verifiers.registry import register

__all__ = ["OptimalVerifier", "FLOW_TUPLES", "FLOW_ENTRIES", "flow_rule"]

FLOW_TUPLES = 20_000  # largest network (draft tuples) solved for an exact flow; without replacement only
FLOW_ENTRIES = 1 << 26  # ... and, without replacement, at most this many tuple × vocabulary entries
_MAXFLOW_TUPLES = 2_000  # max-flow (networkx) up to this many tuples, the LP (HiGHS) above
SAME_PAIR_RTOL = 1e-14  # relative difference within which two normalised vectors share a Luce rule (below
# the law's quadrature error, 1e-13; normalising by two different sums moves entries by a few ulps)
_LAWS = {"iid": IID, "wor": WithoutReplacement, "without_replacement": WithoutReplacement}  # law names


def flow_rule(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> dict[tuple[int, ...], tuple[float, np.ndarray]]:
    """The selection rule of an optimal flow: {x̄: (Q(x̄), s(· | x̄) [n])}, rows summing to at most 1.

    >>> rule = flow_rule(np.array([1.0, 0.0]), np.array([0.5, 0.5]), IID(2))
    >>> {x: s.tolist() for x, (w, s) in rule.items()}[(0, 1)]  # a pair holding token 0 selects it
    [1.0, 0.0]
    """
    joint = law.joint(q)
    method = "maxflow" if len(joint) <= _MAXFLOW_TUPLES else "lp"
    flow = solve_otm(p, q, law, method=method).flow or {}
    table = {x: (w, np.zeros(p.size)) for x, w in joint.items()}
    for (x, y), f in flow.items():
        table[x][1][y] += f / joint[x]
    for _, s in table.values():
        np.clip(s, 0.0, None, out=s)
        total = s.sum()
        if total > 1.0:
            s /= total
    return table


@functools.lru_cache(maxsize=256)
def _pieces(p: bytes, q: bytes, k: int) -> tuple[np.ndarray, dict[int, list[tuple[float, float]]]]:
    """F [n] and every token's pieces of the i.i.d. layout of one pair (float64 bytes), built once for
    all the draft tuples whose output law is asked."""
    lay = iid_layout(*(torch.from_numpy(np.frombuffer(b, dtype=np.float64).copy())[None] for b in (p, q)), k)
    return lay.target[0].numpy(), stack_pieces(lay, pair_layout(lay)) if k > 1 else {}


def _same_vector(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a and b differ by at most :data:`SAME_PAIR_RTOL` relatively in every entry (so share zeros)."""
    return a.shape == b.shape and np.allclose(a, b, rtol=SAME_PAIR_RTOL, atol=0.0)


def _tuple_count(n: int, law: DraftLaw) -> float:
    """Draft tuples of ``law`` on a vocabulary of n tokens (an upper bound where q has zeros)."""
    if isinstance(law, WithoutReplacement):
        return float(math.prod(range(n - law.k + 1, n + 1)))
    if hasattr(law, "table"):
        return float(len(law.table))
    return float(n) ** law.k


@register
class OptimalVerifier(Verifier):
    r"""Two-step verifier whose selection rule attains the optimal acceptance α*(p, Q).

    Select one draft with the rule of the module docstring, accept it with probability
    min(1, p(z)/F(z)), else emit a draw of norm((p − F)+). For i.i.d. drafts, with h_i = g(P_i) − p(P_i)
    over the tokens by p/q descending,

    .. math:: \alpha = \sum_y \min(F(y), p(y)) = 1 - \max_i \bigl[(1 - q(P_i))^k - (1 - p(P_i))\bigr]
              = \alpha^*(p, \mathrm{IID}(k)).

    Parameters
    ----------
    k : int
        Drafts per step.
    law : str or DraftLaw
        ``"iid"`` (default), ``"wor"`` / ``"without_replacement"``, or any :class:`mdsd.DraftLaw` with
        ``k`` drafts (exact on networks of at most ``flow_tuples`` tuples).
    flow_tuples : int
        Largest network (draft tuples) solved for an optimal flow (laws other than i.i.d.).
    wor_rule : str
        Drafts without replacement beyond ``flow_tuples``: ``"luce"`` (default, the Luce rule with levels)
        or ``"fallback"`` (the i.i.d. stream; see the module docstring).
    warm_start : bool
        The Luce rule of a new pair starts from the last pair's weights (``init`` of
        :func:`~mdsd.verifiers.optimal.luce_rule.luce_rule`) instead of log(F*/q): fewer steps where
        consecutive pairs are alike. Lossless either way (the law is computed for the weights used), but
        a pair's weights, hence its acceptance to the solver's tolerance and the tokens drawn under given
        uniforms, then depend on the pair solved before it. Default off: a pair's rule is a function of
        the pair alone.

    >>> from mdsd.verifiers import verifier
    >>> verifier("optimal", 2).acceptance([1.0, 0.0], [0.5, 0.5])
    0.75
    """

    name = "optimal"
    # i.i.d. drafts and the without-replacement fallback run as device kernels; a flow (another law on a
    # network of at most ``flow_tuples`` tuples, decided from V and k) and the Luce rule are solved on
    # the host: see reads_back
    sync_free = True
    laws = ("iid", "wor")
    slab_share = 8  # CPU slabs of one row at a real vocabulary: its layout's temporaries then stay in cache

    def __init__(
        self,
        k: int,
        law: str | DraftLaw = "iid",
        flow_tuples: int = FLOW_TUPLES,
        wor_rule: str = "luce",
        warm_start: bool = False,
    ) -> None:
        self._law_spec = law
        self.flow_tuples = check_k(flow_tuples, "flow_tuples", minimum=0)
        if wor_rule not in ("luce", "fallback"):
            raise ValueError(f"wor_rule must be 'luce' or 'fallback'; got {wor_rule!r}")
        self.wor_rule = wor_rule
        if not isinstance(warm_start, bool):
            raise TypeError(f"warm_start must be a bool; got {warm_start!r}")
        self.warm_start = warm_start
        self._pair_cache: tuple[torch.Tensor, torch.Tensor, object, object] | None = None
        self._shared = False  # within simulate's calls (Rows.shared): one pair, its whole stack on the host
        self._luce_cache: tuple[np.ndarray, np.ndarray, LuceRule] | None = None
        super().__init__(k)

    def __repr__(self) -> str:
        return f"verifier({self.name!r}, k={self.k}, law={self.law.name!r})"

    def _law(self, k):
        spec = self._law_spec
        if isinstance(spec, DraftLaw):
            if spec.k != k:
                raise ValueError(f"law {spec!r} draws {spec.k} drafts, but k = {k}")
            return spec
        if spec not in _LAWS:
            raise ValueError(f"law must be 'iid', 'wor' or a mdsd.DraftLaw; got {spec!r}")
        return _LAWS[spec](k)

    @classmethod
    def check_law(cls, law, spelled):
        if law not in _LAWS:
            super().check_law(law, spelled)

    def _uniform_columns(self) -> int:
        # i.i.d.: one depth per draft (+ the accept/residual uniform); the without-replacement fallback
        # also decides k − 1 repeats and picks each repeat; the Luce rule uses one column
        return 3 * self.k - 2 if self._fallback() else self.k

    def _fallback(self) -> bool:
        return isinstance(self.law, WithoutReplacement) and self.wor_rule == "fallback"

    def luce(self, p: object, q: object) -> LuceRule:
        """The Luce rule this verifier uses for the pair p, q [n] (drafts without replacement).

        >>> rule = OptimalVerifier(2, law="wor").luce([0.0, 0.5, 0.5], [0.6, 0.2, 0.2])
        >>> rule.level.tolist()  # token 0 (p = 0) below the others: never selected beside them
        [1, 0, 0]
        """
        pa, qa = as_pair(p, q)
        return self._luce(pa / pa.sum(), qa / qa.sum())

    def _luce(self, p: np.ndarray, q: np.ndarray) -> LuceRule:
        """The Luce rule of one pair (normalised float64 vectors), solved once per pair.

        The last pair's rule is reused for a pair equal to it up to the rounding of a normalisation
        (every entry within :data:`SAME_PAIR_RTOL` of it, relatively: the same zeros). :meth:`acceptance`
        (NumPy) and :meth:`simulate` / :meth:`verify` (torch) normalise the same input by different sums,
        a few ulps apart, and the rule costs seconds at full vocabulary. With ``warm_start`` a new pair's
        solve starts from the last pair's weights.
        """
        cached = self._luce_cache
        if cached is None or not (_same_vector(cached[0], p) and _same_vector(cached[1], q)):
            warm = self.warm_start and cached is not None and cached[1].shape == q.shape
            rule = luce_rule(p, q, self.k, init=cached[2].log_weight if warm else None)
            self._luce_cache = cached = (p.copy(), q.copy(), rule)
        return cached[2]

    def reads_back(self, n: int) -> bool:
        """Whether verifying on a vocabulary of n tokens reads values back to the host: a flow (a law
        other than i.i.d. within the flow size) or the Luce rule; never i.i.d. drafts or the fallback."""
        if isinstance(self.law, IID):
            return False
        return self._small(n) or not self._fallback()

    def _small(self, n: int, limit: int | None = None) -> bool:
        """Whether a law other than i.i.d. on n tokens takes the exact flow: at most ``limit`` tuples
        (default ``flow_tuples``), and without replacement at most :data:`FLOW_ENTRIES` tuples × n (the
        flow's table holds a vector [n] per tuple)."""
        count = _tuple_count(n, self.law)
        if isinstance(self.law, WithoutReplacement) and count * n > FLOW_ENTRIES:
            return False
        return count <= (self.flow_tuples if limit is None else limit)

    # -- acceptance ---------------------------------------------------------------------------------------

    def exact_obstacle(self, q, limit=None):
        """None where :meth:`acceptance` is exact: i.i.d. drafts, a flow of at most ``limit`` (default
        ``flow_tuples``) draft tuples, the Luce rule, or the without-replacement fallback with k <= 4."""
        if isinstance(self.law, IID) or (isinstance(self.law, WithoutReplacement) and self.k <= 4):
            return None
        if isinstance(self.law, WithoutReplacement) and not self._fallback():
            return None
        n = np.shape(q)[-1]
        if self._small(n, limit):
            return None
        limit = self.flow_tuples if limit is None else limit
        if isinstance(self.law, WithoutReplacement):
            return (
                f"{self!r} on {n} tokens runs the i.i.d. fallback (more than {limit} "
                "draft tuples), whose exact acceptance is known only for k <= 4: it lies between "
                "optimal_acceptance(p, q, IID(k)) and optimal_acceptance(p, q, WithoutReplacement(k)); "
                "estimate it with mdsd.estimate_acceptance(v, p, q, num_samples, seed)"
            )
        return f"{self!r} solves a flow on at most {limit} draft tuples; q gives more"

    def _acceptance(self, p, q):
        if isinstance(self.law, IID):
            law = iid_layout(torch.from_numpy(p)[None], torch.from_numpy(q)[None], self.k).target[0].numpy()
            return float(np.minimum(law, p).sum())
        if self._small(q.size):
            return selection_acceptance(p, flow_rule(p, q, self.law))[0]
        if isinstance(self.law, WithoutReplacement) and not self._fallback():
            return self._luce_acceptance(p, q)
        if isinstance(self.law, WithoutReplacement) and self.k <= 4:
            return fallback_acceptance(p, q, self.k)
        raise ValueError(self.exact_obstacle(q))

    # -- exact output law and reference -------------------------------------------------------------------

    def _output_law(self, p, q, drafts):
        """The two-step rule: Σ_z s(z | x̄) [a_z δ_z + (1 − a_z) r] + P(⊥ | x̄) r, a_z = min(1, p(z)/F(z)),
        r = norm((p − F)+); s is the least-depth odds of the layout (i.i.d.) or the flow's rule."""
        if isinstance(self.law, IID):
            f, pieces = _pieces(p.tobytes(), q.tobytes(), self.k)
            odds = least_depth_odds([pieces[x] for x in drafts]) if self.k > 1 else [1.0]
            select = {}
            for x, chance in zip(drafts, odds, strict=True):
                select[x] = select.get(x, 0.0) + float(chance)
        elif self._small(q.size):
            rule = flow_rule(p, q, self.law)
            f = selection_acceptance(p, rule)[1]
            s = rule[drafts][1] if drafts in rule else np.zeros(p.size)
            select = {int(z): float(s[z]) for z in np.flatnonzero(s > 0)}
        else:
            raise ValueError(
                f"{self!r}: the exact output law is written for i.i.d. drafts and for flows of at most "
                f"{self.flow_tuples} draft tuples; q gives more"
            )
        residual = normalized(np.maximum(p - f, 0.0), p)
        out = (1.0 - sum(select.values())) * residual
        for z, weight in select.items():
            a = min(1.0, p[z] / f[z]) if f[z] > 0 else 1.0
            out += weight * (a * onehot(p.size, z) + (1.0 - a) * residual)
        return out

    def _reference(self, p, q, drafts, accept, residual):
        """I.i.d. drafts: the layout by a plain loop (:mod:`mdsd.verifiers.optimal.layout_reference`), then
        the two-step rule with one uniform (accept below a, else a fresh uniform for the residual). The
        without-replacement fallback beyond the flow size: first the i.i.d. stream whose distinct tokens are
        the drafts (before each draw after the first, a repeat of the drafts so far with probability their q
        mass, the repeated one drawn by q, else the next draft; uniforms: k − 1 repeat tests, k − 1 picks,
        then the k depths)."""
        k = self.k
        if self._fallback() and not self._small(p.size):
            draws, used = [drafts[0]], 1
            for i in range(k - 1):
                seen = q[list(drafts[:used])]
                if accept[i] < seen.sum():
                    draws.append(drafts[draw_index(seen, accept[k - 1 + i])])
                else:
                    draws.append(drafts[used])
                    used += 1
            drafts, accept = draws, accept[2 * k - 2 :]
        elif not isinstance(self.law, IID):
            raise ValueError(
                f"{self!r}: the float64 reference is written for i.i.d. drafts and the fallback "
                "(wor_rule='fallback'); the Luce rule's is its law (OptimalVerifier.luce)"
            )
        chosen, f = reference_select(p, q, drafts, accept[:k])
        a = min(1.0, p[chosen] / f[chosen]) if f[chosen] > 0 else 1.0
        if residual < a:
            return chosen
        return draw_index(normalized(np.maximum(p - f, 0.0), p), (residual - a) / (1.0 - a))

    # -- sampling -----------------------------------------------------------------------------------------

    def _check_drafts(self, q, drafts):
        super()._check_drafts(q, drafts)
        if isinstance(self.law, WithoutReplacement):
            same = (drafts.unsqueeze(-1) == drafts.unsqueeze(-2)).sum((-1, -2))
            if bool((same > self.k).any()):
                raise ValueError("drafts without replacement must be distinct tokens")

    def _verify(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The two-step rule emits the token itself: it is the proposal, always "accepted"; on the
        base class's degenerate rows (q with fewer than k tokens, drafts without replacement) the
        residual is a draw of p."""
        self._shared = rows.shared
        try:
            tokens = self._emit(rows.p, rows.q, rows.drafts, rows.u)
        finally:
            self._shared = False
        residual = tokens if rows.degenerate is None else rows.draw_p()
        return tokens, torch.ones_like(tokens, dtype=torch.bool), residual

    def _emit(self, p, q, drafts, u: Uniforms) -> torch.Tensor:
        if isinstance(self.law, IID):
            return self._verify_iid(p, q, drafts, u.accept[..., : self.k], u.residual)
        if self._small(p.shape[-1]):
            return self._verify_flow(p, q, drafts, u)
        if self._fallback():
            return self._verify_wor_fallback(p, q, drafts, u)
        if isinstance(self.law, WithoutReplacement):
            return self._verify_luce(p, q, drafts, u)
        raise ValueError(f"{self!r} solves a flow on at most {self.flow_tuples} draft tuples; q gives more")

    def _verify_iid(self, p, q, drafts, u_depth, u_emit) -> torch.Tensor:
        """The i.i.d. rule on rows p, q [*Bp, V] for draft tuples [*B, K] (Bp broadcastable to B):
        tokens [*B]. Within :meth:`simulate` (one pair drafted many times) the pair is laid out once
        with its whole stack, on the host."""
        n, lead = p.shape[-1], p.shape[:-1]
        if self._shared and p.ndim == 1 and self.k > 1:
            lay, pair = self._pair(p, q)
        else:
            lay, pair = iid_layout(p.reshape(-1, n), q.reshape(-1, n), self.k), None
        chosen = self._select(lay, pair, lead, drafts, u_depth)
        return two_step(p, lay.target.reshape(*lead, n), chosen, u_emit)

    def _select(self, lay, pair, lead, drafts, u) -> torch.Tensor:
        """The draft of least depth: tokens [*B] for drafts [*B, K] of the layout's rows [*lead]."""
        if self.k == 1:
            return drafts[..., 0]
        row = torch.arange(lay.order.shape[0], device=drafts.device).reshape(lead).expand(drafts.shape[:-1])
        pos = lay.rank[row.unsqueeze(-1), drafts]  # [*B, K]: places in the sorted order
        flat = pos.reshape(-1)
        if pair is not None:
            depth = pair_depths(lay, pair, flat, u.reshape(-1))
        else:
            rows = row.unsqueeze(-1).expand(pos.shape).reshape(-1)
            depth = draft_depths(lay, rows, flat, window_tops(lay, rows, flat), u.reshape(-1))
        return drafts.gather(-1, depth.reshape(pos.shape).argmin(-1, keepdim=True))[..., 0]

    def _pair(self, p, q):
        """The layout of one pair p, q [V] and its whole stack, cached (simulate draws many chunks)."""
        cache = self._pair_cache
        if cache is not None and torch.equal(cache[0], p) and torch.equal(cache[1], q):
            return cache[2], cache[3]
        lay = iid_layout(p.reshape(1, -1), q.reshape(1, -1), self.k)
        pair = pair_layout(lay)
        self._pair_cache = (p.clone(), q.clone(), lay, pair)
        return lay, pair

    def _verify_flow(self, p, q, drafts, u) -> torch.Tensor:
        """The flow's rule (a host path: the flow is solved on the CPU for every row)."""
        batch, n = drafts.shape[:-1], p.shape[-1]
        lead = p.shape[:-1]
        rows_p = p.reshape(-1, n).double().cpu().numpy()
        rows_q = q.reshape(-1, n).double().cpu().numpy()
        row = torch.arange(math.prod(lead)).reshape(lead).expand(batch).reshape(-1).tolist()
        rules, laws = [], []
        for a, b in zip(rows_p, rows_q, strict=True):
            rule = flow_rule(a / a.sum(), b / b.sum(), self.law)
            rules.append(rule)
            laws.append(selection_acceptance(a / a.sum(), rule)[1])
        flat = drafts.reshape(-1, self.k).tolist()
        pick = u.accept[..., 0].reshape(-1).tolist()
        chosen = []
        for r, x, v in zip(row, flat, pick, strict=True):
            s = rules[r].get(tuple(x), (0.0, np.zeros(n)))[1]
            cdf = np.cumsum(s)
            hit = int(np.searchsorted(cdf, v, side="right"))
            chosen.append(hit if hit < n and s[hit] > 0 else -1)  # beyond Σ s: no draft (⊥)
        selected = torch.tensor(chosen, dtype=torch.long, device=p.device).reshape(batch)
        law = torch.tensor(np.array(laws), dtype=torch.float64, device=p.device).reshape(*lead, n)
        return two_step(p, law, selected, u.residual)

    def _verify_wor_fallback(self, p, q, drafts, u) -> torch.Tensor:
        """Drafts without replacement [*B, K] turned into the first k draws of an i.i.d. stream whose
        distinct tokens are the drafts (a repeat of a draft s so far w.p. q(s), else the next draft;
        uniforms: k − 1 repeat tests, k − 1 picks), then the i.i.d. rule on those draws."""
        k = self.k
        repeat, which = u.accept[..., : k - 1], u.accept[..., k - 1 : 2 * k - 2]  # [*B, k−1] each
        qd = take(q.double(), drafts)  # [*B, K]
        iid, used = [drafts[..., 0]], torch.ones_like(drafts[..., 0])  # draws so far; distinct drafts used
        for i in range(k - 1):
            seen = torch.arange(k, device=p.device) < used.unsqueeze(-1)  # [*B, K]: drafts drawn so far
            weights = torch.where(seen, qd, 0.0).cumsum(-1)  # the last entry is q(drafts drawn so far)
            pick = (weights < (which[..., i] * weights[..., -1]).unsqueeze(-1)).sum(-1).clamp_max(k - 1)
            again = repeat[..., i] < weights[..., -1]
            fresh = drafts.gather(-1, used.clamp_max(k - 1).unsqueeze(-1))[..., 0]
            iid.append(torch.where(again, drafts.gather(-1, pick.unsqueeze(-1))[..., 0], fresh))
            used = used + (~again).long()
        draws = torch.stack(iid, dim=-1)
        return self._verify_iid(p, q, draws, u.accept[..., 2 * k - 2 :], u.residual)

    def _luce_acceptance(self, p: np.ndarray, q: np.ndarray) -> float:
        """Σ min(F, p) plus the residual draws (norm((p − F)+)) landing on another draft after a rejection."""
        p, q = p / p.sum(), q / q.sum()  # as the kernel sees them
        rule = self._luce(p, q)
        return luce_acceptance(p, q, rule.level, rule.log_weight, rule.law, self.k)

    def _verify_luce(self, p, q, drafts, u: Uniforms) -> torch.Tensor:
        """Select with the rows' Luce rules (solved on the host), then accept against their laws F."""
        rows_p = p.reshape(-1, p.shape[-1]).double().cpu().numpy()
        rows_q = q.reshape(-1, q.shape[-1]).double().cpu().numpy()
        rules = [self._luce(a / a.sum(), b / b.sum()) for a, b in zip(rows_p, rows_q, strict=True)]
        shape = p.shape

        def stack(name: str, dtype: torch.dtype) -> torch.Tensor:
            arrays = np.stack([getattr(rule, name) for rule in rules])
            return torch.as_tensor(arrays, dtype=dtype, device=p.device).reshape(shape)

        level, log_weight = stack("level", torch.long), stack("log_weight", torch.float64)
        selected = luce_select(level, log_weight, drafts, u.accept[..., 0])
        return two_step(p, stack("law", torch.float64), selected, u.residual)
