"""The baselines users already have, Hugging Face sampling and assisted generation, run and counted like mdsd.

* :func:`count_forwards`: a forward hook on each model's top-level module counts one forward per
  ``model(...)`` call, whoever makes it (HF ``generate``, HF's assistant, mdsd's
  :class:`~mdsd.tree.decoder.TreeDecoder`); the prefill is a forward like any other. So tokens per target
  forward is measured the same way for every method (:func:`mdsd.harness.comparison.compare`).
* :func:`autoregressive` and :func:`assisted`: HF ``generate`` one prompt at a time, with the fields of
  :class:`~mdsd.tree.decoder.TreeDecodeOutput` where they apply (:class:`BaselineOutput`).

**The same law as mdsd.** HF is driven to sample ``softmax(logits / T)`` (greedy at T = 0):
``do_sample=True, temperature=T, top_k=0, top_p=1.0`` (transformers fills an unset ``top_k`` with 50), and
for the duration of each call both models' ``generation_config`` are replaced by plain ones (restored
afterwards), so nothing a checkpoint's ``generation_config.json`` sets (``repetition_penalty``, ``top_p``,
``min_p``, ...) changes the law. EOS and ``max_new_tokens`` as in TreeDecoder: at most ``max_new_tokens``
tokens, ending with the first EOS token (included); ``eos_token_id`` None means the target's
``generation_config.eos_token_id``.

**HF's assisted-generation defaults** (transformers 5.23: ``GenerationConfig._get_default_generation_params``,
``generation/candidate_generator.py``): ``num_assistant_tokens = 20`` drafted tokens at most per step;
``num_assistant_tokens_schedule = "constant"`` (``"heuristic"``: + 2 after a step that accepted every draft,
else − 1, at least 1); ``assistant_confidence_threshold = 0.4``: the draft ends a chain early after a drafted
token whose draft probability (after the temperature) is below it; when scikit-learn is importable HF re-fits
the threshold after every step (ROC cost fpr + 3 fnr), otherwise it stays fixed. One drafted chain per step,
verified by speculative sampling (Leviathan et al. 2023). HF reads these three settings from the *assistant's*
``generation_config`` only: passed to ``target.generate(...)`` they are silently ignored, which is why
:func:`assisted` takes them as options and sets them there. **The draft samples at T², not T**: the
assistant's ``generate`` receives the target's prepared logits processors (temperature T included) and adds
its own temperature warper, so q = softmax(z_draft / T²) (0.36 at T = 0.6; T = 1 and greedy unaffected;
transformers 4.54, the oldest this package supports, still drafted at T).
HF verifies against that same q, so the output keeps the target's law; only its acceptance changes
(transformers PR #40657 made the assistant see the target's processors; PR #40976 proposes an explicit
assistant temperature). The tests pin this.

**HF's own deprecation notice.** From transformers 5.x, HF's assisted generation calls the assistant's
``generate`` with a ``generation_config`` and ``min_new_tokens`` / ``max_new_tokens`` together
(``generation/candidate_generator.py``), and transformers then logs that passing both is deprecated. That call
is HF's, not mdsd's (mdsd passes a ``generation_config`` alone, the form transformers asks for), and nothing
a user can change: the notice is dropped for the duration of mdsd's assisted calls
(:class:`_HFInternalNotice`); every other message of transformers is left alone.

**Randomness.** HF samples from the global torch RNG (``torch.multinomial``, ``torch.rand_like``): prompt i
is decoded under ``torch.manual_seed(seed + i)`` inside :func:`torch.random.fork_rng`, so the caller's RNG
states (CPU and the models' accelerator) are restored afterwards. mdsd itself never touches the global RNG.

>>> lm = torch.nn.Linear(2, 2)
>>> with count_forwards(lm) as counts:
...     _ = lm(torch.zeros(1, 2)), lm(torch.zeros(3, 2))
>>> counts[0], counts.tokens[0]
(2, [2, 2])
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mdsd.tree.drafter import as_drafter, check_drafter
from mdsd.tree.models import eos_ids, shared_vocab_size

__all__ = [
    "ForwardCounts",
    "count_forwards",
    "BaselineOutput",
    "autoregressive",
    "assisted",
    "ASSISTANT_OPTIONS",
]

# HF's assisted-generation settings this module lets a caller set (on the assistant's generation_config)
ASSISTANT_OPTIONS = (
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
)
_SCHEDULES = ("constant", "heuristic", "heuristic_transient")


# ---- counting forwards --------------------------------------------------------------------------------


@dataclass
class ForwardCounts:
    """Forward calls of each counted model, in the order they were given to :func:`count_forwards`.

    Attributes
    ----------
    calls : list of int
        ``calls[m]``: forward calls of model m so far.
    tokens : list of list of int
        ``tokens[m][c]``: input tokens of call c of model m (``input_ids.shape[-1]``; 0 without input_ids).
    """

    calls: list[int]
    tokens: list[list[int]]

    def __getitem__(self, model: int) -> int:
        return self.calls[model]


@contextlib.contextmanager
def count_forwards(*models: torch.nn.Module) -> Iterator[ForwardCounts]:
    """Count the forward calls of each model inside the ``with`` block, with a forward hook.

    The hook sits on each model's top-level module, so a call ``model(...)`` counts once whoever makes it;
    calls of inner modules (``model.model``, ``lm_head``) are not counted. The hooks are removed on exit.
    """
    for i, model in enumerate(models):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"models[{i}] must be a torch Module, got {type(model).__name__}")
    if len({id(m) for m in models}) != len(models):
        raise ValueError("models holds one module twice: its forwards could not be told apart")
    counts = ForwardCounts([0] * len(models), [[] for _ in models])

    def hook(index: int, module, args, kwargs, output) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        counts.calls[index] += 1
        counts.tokens[index].append(int(ids.shape[-1]) if isinstance(ids, torch.Tensor) else 0)

    handles = [
        model.register_forward_hook(
            lambda mod, args, kwargs, out, i=i: hook(i, mod, args, kwargs, out), with_kwargs=True
        )
        for i, model in enumerate(models)
    ]
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


# ---- Hugging Face generate, one prompt at a time -------------------------------------------------------


@dataclass(frozen=True)
class BaselineOutput:
    """What HF ``generate`` produced for one prompt, in :class:`~mdsd.tree.decoder.TreeDecodeOutput`'s terms.

    Attributes
    ----------
    tokens : LongTensor [T]
        Generated tokens only: ``max_new_tokens`` of them, or fewer ending with the first EOS token.
    steps : int
        Decoding steps as HF reports them (batches of tokens handed to its streamer).
    tokens_per_step : list of int
        Tokens each step emitted (after the budget and EOS cut); ``sum`` is ``len(tokens)``.
    accepted_per_step : list of int
        Drafted tokens each step kept (``tokens_per_step - 1``; 0 for autoregressive sampling).
    depth_per_step : list of int
        Tokens drafted at each step (0 for autoregressive sampling), from the target forwards' input lengths.
    draft_forwards, target_forwards : int
        Forward calls counted by :func:`count_forwards`.
    timings : dict of str to float
        ``total``: wall seconds of the ``generate`` call.
    stopped_by_eos : bool
        Whether generation ended on an EOS token.
    settings : dict
        The HF settings in effect (sampling, and for assisted generation its resolved draft settings).
    """

    tokens: torch.Tensor
    steps: int
    tokens_per_step: list[int]
    accepted_per_step: list[int]
    depth_per_step: list[int]
    draft_forwards: int
    target_forwards: int
    timings: dict[str, float]
    stopped_by_eos: bool
    settings: dict = field(default_factory=dict)

    @property
    def mean_tokens_per_step(self) -> float:
        """Tokens emitted per step, ``len(tokens) / steps``."""
        return sum(self.tokens_per_step) / max(self.steps, 1)


def autoregressive(
    target: torch.nn.Module,
    prompts: Sequence[Sequence[int] | torch.Tensor],
    max_new_tokens: int,
    temperature: float,
    seed: int = 0,
    eos_token_id: int | list[int] | None = None,
) -> list[BaselineOutput]:
    """HF autoregressive decoding, ``target.generate(do_sample=True)`` (greedy at T = 0), prompt by prompt.

    Prompt i samples ``softmax(logits / T)`` under ``torch.manual_seed(seed + i)``; the caller's global RNG
    state is restored. ``eos_token_id`` None: the target's ``generation_config.eos_token_id`` (as
    :class:`~mdsd.tree.decoder.TreeDecoder`). n new tokens take n target forwards (the first is the prefill).
    """
    check = _Checked(target, None, prompts, max_new_tokens, temperature, seed, eos_token_id)
    return [_generate(check, None, ids, check.seed + i, {}) for i, ids in enumerate(check.prompts)]


def assisted(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    prompts: Sequence[Sequence[int] | torch.Tensor],
    max_new_tokens: int,
    temperature: float,
    seed: int = 0,
    eos_token_id: int | list[int] | None = None,
    **hf_options,
) -> list[BaselineOutput]:
    """HF assisted generation, ``target.generate(assistant_model=draft, do_sample=True)``, prompt by prompt.

    ``hf_options``: any of :data:`ASSISTANT_OPTIONS` (``num_assistant_tokens``,
    ``num_assistant_tokens_schedule``, ``assistant_confidence_threshold``; 0 switches the threshold off), set
    on the draft's generation config for the call; unset ones take HF's defaults (module docstring). Every
    prompt starts from those settings (HF's ``"heuristic"`` schedule would otherwise carry its draft length
    over from the previous call). Seeds, EOS and the budget as :func:`autoregressive`; n new tokens take
    between ceil(n / (num_assistant_tokens + 1)) and n target forwards.
    """
    check = _Checked(target, draft, prompts, max_new_tokens, temperature, seed, eos_token_id)
    options = _assistant_options(hf_options)
    return [_generate(check, draft, ids, check.seed + i, options) for i, ids in enumerate(check.prompts)]


class _Checked:
    """The validated arguments shared by every method."""

    def __init__(self, target, draft, prompts, max_new_tokens, temperature, seed, eos_token_id) -> None:
        if draft is None:
            vocab = shared_vocab_size(target, target)
        else:
            if draft is target:
                raise ValueError("draft is the target itself: their forwards could not be counted apart")
            vocab = check_drafter(target, as_drafter(draft))  # a causal LM or a feature head
        self.target, self.vocab = target, vocab
        self.prompts = _check_prompts(prompts, vocab)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
            raise TypeError(f"max_new_tokens must be an integer, got {max_new_tokens!r}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TypeError(f"temperature must be a number, got {temperature!r}")
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {temperature}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.max_new_tokens, self.temperature, self.seed = int(max_new_tokens), float(temperature), int(seed)
        self.eos = eos_ids(target, eos_token_id)


def _check_prompts(prompts: object, vocab: int) -> list[list[int]]:
    if isinstance(prompts, torch.Tensor) and prompts.ndim == 2:
        prompts = list(prompts)
    if not isinstance(prompts, (Sequence, torch.Tensor)) or isinstance(prompts, (str, bytes)):
        raise TypeError(f"prompts must be a list of token-id sequences, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError("prompts is empty: give at least one prompt")
    out = []
    for i, prompt in enumerate(prompts):
        ids = torch.as_tensor(prompt, device="cpu")
        if ids.numel() == 0:
            raise ValueError(f"prompts[{i}] is empty; a prompt needs >= 1 token")
        if ids.ndim != 1 or ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"prompts[{i}] must be a 1-D sequence of integer token ids")
        if bool((ids < 0).any()) or bool((ids >= vocab).any()):
            raise ValueError(f"prompts[{i}] holds token ids outside the vocabulary [0, {vocab})")
        out.append(ids.tolist())
    return out


def _assistant_options(options: dict) -> dict:
    unknown = sorted(set(options) - set(ASSISTANT_OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown hf_options {unknown}: assisted() takes {', '.join(ASSISTANT_OPTIONS)} (the sampling "
            "law is fixed to softmax(logits / T) so that every method samples the same one)"
        )
    tokens = options.get("num_assistant_tokens")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or tokens < 1
    ):
        raise ValueError(f"num_assistant_tokens must be an integer >= 1, got {tokens!r}")
    schedule = options.get("num_assistant_tokens_schedule")
    if schedule is not None and schedule not in _SCHEDULES:
        raise ValueError(f"num_assistant_tokens_schedule must be one of {_SCHEDULES}, got {schedule!r}")
    threshold = options.get("assistant_confidence_threshold")
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold < 1
    ):
        raise ValueError(f"assistant_confidence_threshold must be in [0, 1), got {threshold!r}")
    return dict(options)


def _assistant_settings(options: dict) -> dict:
    """The draft settings HF will use: the given options, else transformers' global defaults."""
    from transformers import GenerationConfig

    config = GenerationConfig(**options)
    defaults = getattr(GenerationConfig, "_get_default_generation_params", dict)()
    settings = {
        key: getattr(config, key) if getattr(config, key) is not None else defaults.get(key)
        for key in ASSISTANT_OPTIONS
    }
    sklearn = importlib.util.find_spec("sklearn") is not None  # HF re-fits the threshold only with it
    return settings | {
        "confidence_threshold_adapts": bool(settings["assistant_confidence_threshold"]) and sklearn
    }


def _sampling_config(check: _Checked, pad: int | None):
    from transformers import GenerationConfig

    sampling = {"do_sample": False}
    if check.temperature > 0:  # the law softmax(logits / T): no top-k (HF's default 50), no top-p
        sampling = {"do_sample": True, "temperature": check.temperature, "top_k": 0, "top_p": 1.0}
    eos = sorted(check.eos)
    config = GenerationConfig(
        max_new_tokens=check.max_new_tokens, eos_token_id=eos or None, pad_token_id=pad, **sampling
    )
    return config, sampling


@contextlib.contextmanager
def _plain_generation_configs(target, draft, options: dict) -> Iterator[None]:
    """Replace the models' generation configs with plain ones for one call, and restore them."""
    from transformers import GenerationConfig

    models = [target] if draft is None else [target, draft]
    saved = [model.generation_config for model in models]
    try:
        target.generation_config = GenerationConfig()
        if draft is not None:
            draft.generation_config = GenerationConfig(**options)
        yield
    finally:
        for model, config in zip(models, saved, strict=True):
            model.generation_config = config


class _HFInternalNotice(logging.Filter):
    """Drops the deprecation notice HF logs about its own assistant call (module docstring): a
    ``generation_config`` passed together with ``min_new_tokens`` / ``max_new_tokens``. Transformers without
    that call (4.54) never log it, and the filter passes everything else."""

    LOGGER = "transformers.generation.utils"

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Passing `generation_config` together with generation-related arguments")
            and "min_new_tokens" in message
        )


@contextlib.contextmanager
def _without_hf_internal_notice() -> Iterator[None]:
    """:class:`_HFInternalNotice` on transformers' generation logger for the duration of the block."""
    logger, notice = logging.getLogger(_HFInternalNotice.LOGGER), _HFInternalNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


@contextlib.contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    """``torch.manual_seed(seed)`` inside; the global RNG states (CPU, ``device``'s kind) restored after."""
    if device.type == "cpu":
        kind, devices = "cuda", []
    else:
        kind = device.type
        devices = list(range(torch.get_device_module(kind).device_count()))
    with torch.random.fork_rng(devices=devices, device_type=kind):
        torch.manual_seed(seed)
        yield


class _Steps:
    """A ``generate`` streamer recording how many tokens each step emitted (the first put is the prompt)."""

    def __init__(self) -> None:
        self.puts: list[int] = []

    def put(self, value: torch.Tensor) -> None:
        self.puts.append(int(value.numel()))

    def end(self) -> None:
        pass


@torch.no_grad()
def _generate(check: _Checked, draft, ids: list[int], seed: int, options: dict) -> BaselineOutput:
    target = check.target
    device = next(target.parameters()).device
    input_ids = torch.tensor([ids], device=device)
    config, sampling = _sampling_config(check, min(check.eos) if check.eos else None)
    steps = _Steps()
    models = (target,) if draft is None else (target, draft)
    plain = _plain_generation_configs(target, draft, options)
    with plain, _without_hf_internal_notice(), _seeded(seed, device), count_forwards(*models) as n:
        start = time.perf_counter()
        sequence = target.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            generation_config=config,
            assistant_model=draft,
            streamer=steps,
        )
        _synchronize(device)
        seconds = time.perf_counter() - start
    tokens = sequence[0, len(ids) :].cpu()
    per_step = steps.puts[1:]
    lengths = n.tokens[0]  # the first target forward holds the prompt, the others the last token + drafts
    depths = [lengths[0] - len(ids)] + [t - 1 for t in lengths[1:]]
    settings = dict(sampling)
    if draft is not None:
        settings |= _assistant_settings(options)
    return BaselineOutput(
        tokens=tokens,
        steps=len(per_step),
        tokens_per_step=per_step,
        accepted_per_step=[t - 1 for t in per_step],
        depth_per_step=depths,
        draft_forwards=n[1] if draft is not None else 0,
        target_forwards=n[0],
        timings={"total": seconds},
        stopped_by_eos=bool(tokens.numel()) and int(tokens[-1]) in check.eos,
        settings=settings,
    )


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
