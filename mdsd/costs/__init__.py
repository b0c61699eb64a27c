"""The cost model of speculative decoding: measured forward times, predicted step times and speedups.

A :class:`CostProfile` holds the measured time of one model forward that appends ``t`` new tokens per row to
a KV cache of ``c`` entries, for ``B`` rows, on a grid of (B, t, c), measured the way
:class:`mdsd.TreeDecoder` runs its forwards (:func:`measure_profile`). One decoding step of a plan
(:mod:`mdsd.tree.plan`) then takes

.. math::

    S(B, c) = \\sum_{d=0}^{D-1} \\tau_q(B, n_d, c) + \\tau_p(B, F, c) + o_0 + o_1 \\, B \\, (F + M)

with :math:`\\tau_q, \\tau_p` the draft and target profiles, :math:`n_0 = 2` (the draft reads the last two
emitted tokens) and :math:`n_d` the nodes expanded at depth d ≥ 1 (one draft forward per depth that expands
nodes), F the nodes of the target forward (root included), M the expanded nodes, and :class:`Overhead`
(:math:`o_0, o_1`) the measured time outside the forwards: sampling, verification, the walk and the cache
compaction, which handle one vocabulary row per forwarded and per expanded node. With E the expected tokens
per step (Sequoia's F, :meth:`mdsd.Tree.expected_tokens`, or a measured figure), speculation decodes
:math:`B E / S` tokens per second against :math:`B / \\tau_p(B, 1, c)` for autoregressive decoding:

.. math:: \\text{speedup}(B, c) = \\frac{E \\; \\tau_p(B, 1, c)}{S(B, c)}

It falls with B once the target forward stops being memory-bound (SSSD: Marzollo et al. 2024,
arXiv:2411.05894, §3.2); the profiles measure where that happens on a given machine.

Between grid points a profile is interpolated piecewise-linearly in B, t and c (trilinear in a grid cell);
outside the grid it raises unless asked to extrapolate. Approximations, stated: the draft's first forward of
a step reads two tokens but keeps one logit row (timed as a two-token forward, all logits kept); the draft's
cache is taken as long as the target's; the overhead is linear in B (F + M) and fitted per verifier and
temperature.

Modules: :mod:`~mdsd.costs.profile` (measured forward times), :mod:`~mdsd.costs.predict` (step times,
tokens per second, speedups), :mod:`~mdsd.costs.runs` (timed decodes, their replay, the overhead fit),
:mod:`~mdsd.costs.weights` (what a forward reads and computes per token, from the weights alone),
:mod:`~mdsd.costs.ratios` (a drafter's forward time over its target's, read by shape from a cost table).
"""

from mdsd.costs.predict import Overhead, Prediction, depth_seconds, predict, step_forwards, step_seconds
from mdsd.costs.profile import CostProfile, measure_profile
from mdsd.costs.ratios import cost_ratio, drafter_config
from mdsd.costs.runs import TimedDecode, measure_overhead, replay_seconds, time_decode
from mdsd.costs.weights import ForwardCost, forward_cost

__all__ = [
    "ForwardCost",
    "forward_cost",
    "CostProfile",
    "measure_profile",
    "Overhead",
    "Prediction",
    "step_forwards",
    "step_seconds",
    "predict",
    "depth_seconds",
    "TimedDecode",
    "time_decode",
    "replay_seconds",
    "measure_overhead",
    "cost_ratio",
    "drafter_config",
]
