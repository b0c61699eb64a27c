"""Timed batch decodes, their replay by the cost model, and the overhead fit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mdsd.costs.predict import Overhead, as_plan, check_profiles, step_seconds, vocabulary_rows
from mdsd.costs.profile import CostProfile, check_grid
from mdsd.token_tree import Tree
from mdsd.tree.plan import DynamicTree, Plan, truncated_plan

__all__ = ["TimedDecode", "time_decode", "replay_seconds", "measure_overhead"]


@dataclass(frozen=True)
class TimedDecode:
    """A batch decode and the time and tokens of its steps after the first (which also reads the prompts).

    ``schedule`` holds, for each of those steps, (active rows, cache length before it, drafted depth).
    """

    outputs: list  # of TreeDecodeOutput, one per prompt
    prompt_lengths: list[int]
    seconds: float
    tokens: int
    steps: int

    @property
    def schedule(self) -> list[tuple[int, int, int]]:
        return _schedule(self.outputs, self.prompt_lengths)


def time_decode(decoder, prompts: Sequence[Sequence[int]], max_new_tokens: int, seed: int) -> TimedDecode:
    """Decode ``prompts`` as one batch and time every step after the first.

    After an untimed warm-up decode of the same length (the fast path captures its steps there) the batch is
    decoded from one seed for ``max_new_tokens`` tokens, then for 1 token: both runs make the same first
    step (prompt forwards included), so the difference of the decoder's own ``timings["total"]`` is the
    time of the later steps. EOS ends rows as the decoder says (build it with ``eos_token_id=[]`` for rows
    of equal length).
    """
    dev = next(decoder.target.parameters()).device

    def run(n: int):
        return decoder.generate_batch(prompts, n, torch.Generator(device=dev).manual_seed(seed))

    run(max_new_tokens)  # warm-up
    outputs = run(max_new_tokens)
    first = run(1)
    seconds = outputs[0].timings["total"] - first[0].timings["total"]
    tokens = sum(sum(o.tokens_per_step[1:]) for o in outputs)
    steps = max(o.steps for o in outputs) - 1
    return TimedDecode(outputs, [len(p) for p in prompts], seconds, tokens, steps)


def _schedule(outputs: list, prompt_lengths: Sequence[int]) -> list[tuple[int, int, int]]:
    """(rows, cache length, depth) of every step after the first of a finished batch decode.

    Rows leave the batch when done. After a step the target's cache keeps, behind the longest row, the token
    read at that step and the accepted nodes: it grows by 1 + the most nodes any active row accepted (slots
    every row's forward attends over, live or not; exact for static trees and prompts of equal length). The
    draft's cache is taken to be as long (it differs by an entry or two).
    """
    steps = max(o.steps for o in outputs)
    context = max(prompt_lengths)  # the first step's forward reads the prompts whole (the root last)
    out = []
    for s in range(steps):
        active = [o for o in outputs if o.steps > s]
        if s:
            out.append((len(active), context, max(o.depth_per_step[s] for o in active)))
        context += max(o.accepted_per_step[s] for o in active) + (1 if s else 0)
    return out


def replay_seconds(
    target_profile: CostProfile,
    draft_profile: CostProfile,
    tree: Tree | DynamicTree,
    timed: TimedDecode,
    overhead: Overhead | None = None,
    extrapolate: bool = False,
) -> float:
    """Predicted seconds of the steps after the first of a timed decode (:func:`time_decode`), step by step:
    each at its own number of active rows, cache length and drafted depth (adaptive depths)."""
    check_profiles(target_profile, draft_profile)
    plans: dict[int, Plan] = {}
    total = 0.0
    for rows, context, depth in timed.schedule:
        plan = plans.setdefault(depth, truncated_plan(tree, depth))
        total += step_seconds(target_profile, draft_profile, plan, rows, context, overhead, extrapolate)
    return total


def measure_overhead(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    target_profile: CostProfile,
    draft_profile: CostProfile,
    trees: Sequence[Tree | DynamicTree],
    batches: Sequence[int],
    verifier: str,
    temperature: float,
    context: int,
    max_new_tokens: int = 8,
    generator: torch.Generator | None = None,
    progress: bool = True,
    compile: bool | str = False,
) -> Overhead:
    """Fit :class:`Overhead` to timed decodes: what the forwards predicted by the profiles leave unexplained.

    Every tree is decoded at every batch size from random prompts of ``context`` tokens (:func:`time_decode`,
    no EOS); for run r with its steps s >= 1, the measured time minus :func:`replay_seconds` without overhead
    is fitted by non-negative least squares as

    .. math:: o_0 \\, (\\text{steps}_r) + o_1 \\sum_s B_s (F + M)

    Use at least two runs that differ in B (F + M). The profiles must cover the batches and the contexts
    from ``context`` to about ``context + max_new_tokens`` (checked before decoding, and again by the replay).
    ``compile`` picks the decoder's path (:class:`mdsd.TreeDecoder`); fit it to profiles of the same path.
    """
    from scipy.optimize import nnls
    from tqdm import tqdm

    from mdsd.tree.decoder import TreeDecoder

    check_profiles(target_profile, draft_profile)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 2:
        raise ValueError(
            f"max_new_tokens must be an int >= 2 (steps after the first), got {max_new_tokens!r}"
        )
    runs = [(tree, B) for tree in trees for B in check_grid(sorted(set(batches)), "batches", 1)]
    if len(runs) < 2:
        raise ValueError(f"measure_overhead needs at least two (tree, batch) runs, got {len(runs)}")
    for tree, B in runs:  # fail before decoding if a profile is too small
        for c in (context, context + max_new_tokens):
            step_seconds(target_profile, draft_profile, as_plan(tree), B, c)
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    vocab = int(target.config.vocab_size)
    design, residual, measured = [], [], []
    for tree, B in tqdm(runs, desc=f"overhead {verifier}", disable=not progress, leave=False):
        prompts = torch.randint(vocab, (B, context), generator=generator, device=generator.device).tolist()
        seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
        decoder = TreeDecoder(target, draft, tree, verifier, temperature, eos_token_id=[], compile=compile)
        timed = time_decode(decoder, prompts, max_new_tokens, seed)
        plan = as_plan(tree)
        schedule = timed.schedule
        forwards = replay_seconds(target_profile, draft_profile, tree, timed)
        design.append([len(schedule), sum(rows * vocabulary_rows(plan) for rows, _, _ in schedule)])
        residual.append(timed.seconds - forwards)
        measured.append(timed.seconds)
    A, y = np.array(design, dtype=np.float64), np.array(residual)
    scale = A.max(axis=0).clip(min=1e-300)  # columns of similar size for the solver
    coef, _ = nnls(A / scale, y)
    coef = coef / scale
    fitted = np.array(measured) - y + A @ coef
    error = float(np.sqrt(np.mean(((fitted - measured) / np.array(measured)) ** 2)))
    return Overhead(float(coef[0]), float(coef[1]), verifier, float(temperature), len(runs), error)
