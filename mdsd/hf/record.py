"""Record real next-token distributions: sample a target continuation, then read both models' logits.

For a prompt x and a continuation y_1..y_L sampled from the target at temperature T, the target's
logits are those it was sampled from (KV-cached steps) and one teacher-forced forward pass of the
draft over x + y gives the draft's; at every continuation position t,

.. math::

    p_t = \\mathrm{softmax}(z^{\\text{target}}(x, y_{<t})), \\qquad
    q_t = \\mathrm{softmax}(z^{\\text{draft}}(x, y_{<t})),

the target and draft distributions a speculative decoder would compare when proposing y_t.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from tqdm import tqdm

from mdsd.tree.cache import cache_keywords, returned_cache

__all__ = [
    "sample_continuation",
    "next_token_logits",
    "record_prompt",
    "record_pairs",
    "recording_provenance",
    "RECORDED_SETS",
]

RECORDED_SETS = ("mt-bench", "humaneval", "news")  # the prompt sets record_pairs reads


@torch.no_grad()
def sample_continuation(
    model,
    input_ids: torch.Tensor,  # [L] prompt ids
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestral sampling from ``model`` at ``temperature`` (greedy if 0), with a KV cache.

    Returns ``(tokens [L'], logits [L', V])``: L' <= max_new_tokens new ids (ending at the first eos,
    if any) and the float32 logits each was sampled from (before the temperature). All randomness
    comes from ``generator`` (``torch.multinomial``), so a seed fixes the continuation.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    device = next(model.parameters()).device
    ids = input_ids.to(device).reshape(1, -1)
    cache, new, rows = None, [], []
    for _ in range(max_new_tokens):
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **cache_keywords(model, cache))
        cache = returned_cache(out)
        logits = out.logits[0, -1].float()  # [V]
        rows.append(logits.cpu())
        if not torch.isfinite(logits).all():
            raise FloatingPointError("non-finite logits while sampling a continuation")
        if temperature == 0:
            token = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = int(torch.multinomial(probs.cpu(), 1, generator=generator))
        new.append(token)
        if token == eos_token_id:
            break
        ids = torch.tensor([[token]], device=device)
    return torch.tensor(new, dtype=torch.long), torch.stack(rows)


@torch.no_grad()
def next_token_logits(model, ids: torch.Tensor, start: int) -> torch.Tensor:  # [L - start, V] float32
    """Logits predicting ``ids[start:]`` (ids: [L]) from one forward pass; row t predicts ids[start + t]."""
    if not 1 <= start < ids.numel():
        raise ValueError(f"start must be in [1, {ids.numel() - 1}], got {start}")
    device = next(model.parameters()).device
    kept = ids.numel() - start
    logits = model(input_ids=ids[:-1].to(device).reshape(1, -1), logits_to_keep=kept).logits[0].float().cpu()
    if not torch.isfinite(logits).all():
        raise FloatingPointError("non-finite logits in a teacher-forced forward pass")
    return logits


def record_prompt(
    target,
    draft,
    prompt_ids: torch.Tensor,  # [L]
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(continuation [L'], target_logits [L', V], draft_logits [L', V])`` for one prompt.

    The continuation is sampled from the target; row t of each logit matrix is that model's
    next-token logits just before ``continuation[t]`` (the target's are those it was sampled from).
    The two models must share the vocabulary.
    """
    prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1)
    continuation, p_logits = sample_continuation(
        target, prompt_ids, max_new_tokens, temperature, generator, eos_token_id
    )
    ids = torch.cat([prompt_ids, continuation])
    q_logits = next_token_logits(draft, ids, prompt_ids.numel())
    if p_logits.shape != q_logits.shape:
        raise ValueError(
            f"target and draft logits differ in shape: {tuple(p_logits.shape)} vs {tuple(q_logits.shape)}"
        )
    return continuation, p_logits, q_logits


def record_pairs(
    temperatures: tuple[float, ...],
    prompts_per_set: int = 2,
    max_new_tokens: int = 16,
    sample_temperature: float = 0.6,
    seed: int = 0,
    pair: str = "qwen2.5-coder",
) -> dict[float, tuple]:
    """Full-vocabulary pairs of the cached model ``pair`` on the prompts of :data:`RECORDED_SETS`:
    {T: (p [N, V], q [N, V], prompt set [N])}, p and q the softmax of the recorded logits at T (numpy
    float64). Each prompt's continuation is sampled from the target at ``sample_temperature``."""
    from mdsd.data.prompts import prompts
    from mdsd.hf.load import load_pair, pair_paths

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target, draft, tokenizer = load_pair(*pair_paths(pair))
    generator = torch.Generator().manual_seed(seed)
    zp, zq, names = [], [], []
    for name in RECORDED_SETS:
        for prompt in tqdm(prompts(name, prompts_per_set, tokenizer), desc=f"record {name}"):
            tokens, p_logits, q_logits = record_prompt(
                target,
                draft,
                torch.tensor(prompt.input_ids),
                max_new_tokens,
                sample_temperature,
                generator,
                tokenizer.eos_token_id,
            )
            zp.append(p_logits.double())
            zq.append(q_logits.double())
            names += [name] * tokens.numel()
    zp_all, zq_all = torch.cat(zp), torch.cat(zq)
    return {
        t: (torch.softmax(zp_all / t, -1).numpy(), torch.softmax(zq_all / t, -1).numpy(), np.array(names))
        for t in temperatures
    }


def recording_provenance(pair: str = "qwen2.5-coder") -> dict:
    """What :func:`record_pairs` read, for a results file's metadata: {"models": {role: description},
    "prompt_sets": [...]} (:func:`mdsd.hf.describe_model` of the cached pair)."""
    from mdsd.hf.fetch import describe_model
    from mdsd.hf.load import pair_paths

    target, draft = pair_paths(pair)
    return {
        "models": {"target": describe_model(target), "draft": describe_model(draft)},
        "prompt_sets": list(RECORDED_SETS),
    }
