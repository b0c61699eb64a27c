"""Prompt sets read from (fake and, when cached, real) wheels; chat template and truncation."""

from __future__ import annotations

import gzip
import json
import zipfile

import pytest

from mdsd.data.prompts import PROMPT_SETS, load_texts, parse_texts, prompts, render
from mdsd.data.wheels import cache_dir, find_wheel, parse_requirement


class CharTokenizer:
    """One id per character (ord); with ``template`` it renders chats as ``<u>content</u><a>``."""

    def __init__(self, template: bool):
        self.chat_template = "<u>{content}</u><a>" if template else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([1] if add_special_tokens else []) + [ord(c) for c in text]  # 1 = a BOS id

    def decode(self, ids) -> str:
        return "".join(chr(i) for i in ids if i != 1)

    def apply_chat_template(self, messages, tokenize: bool, add_generation_prompt: bool) -> str:
        assert not tokenize and add_generation_prompt and len(messages) == 1
        return self.chat_template.format(content=messages[0]["content"])


# one member of one wheel each (udhr-*: test_udhr.py; translate-*: test_translation.py)
WHEEL_SETS = {
    name: spec for name, spec in PROMPT_SETS.items() if spec.npm is None and spec.translation is None
}
MTBENCH = [{"question_id": 81 + i, "turns": [f"Question {i}?", "Follow-up"]} for i in range(3)]
HUMANEVAL = [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    '''Doc {i}.'''\n"} for i in range(2)]
NEWS = "First article about fires.\nSecond article, on floods.\n\nThird one.\n"


@pytest.fixture
def fake_cache(tmp_path, monkeypatch):
    """A cache whose wheels dir holds fake wheels of the three prompt sets; MDSD_CACHE points there."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    contents = {
        "mt-bench": "\n".join(json.dumps(q) for q in MTBENCH).encode(),
        "humaneval": gzip.compress("\n".join(json.dumps(q) for q in HUMANEVAL).encode()),
        "news": NEWS.encode(),
    }
    for name, spec in WHEEL_SETS.items():
        project, version = parse_requirement(spec.requirement)
        with zipfile.ZipFile(
            wheels / f"{project.replace('-', '_')}-{version}-py3-none-any.whl", "w"
        ) as archive:
            archive.writestr(spec.member, contents[name])
    monkeypatch.setenv("MDSD_CACHE", str(tmp_path))
    return tmp_path


def test_cache_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSD_CACHE", str(tmp_path / "env"))
    assert cache_dir() == tmp_path / "env"
    assert cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("MDSD_CACHE")
    assert cache_dir().name == "mdsd"


def test_texts_come_out_of_the_wheels(fake_cache):
    assert load_texts("mt-bench") == ["Question 0?", "Question 1?", "Question 2?"]
    assert load_texts("humaneval") == [q["prompt"] for q in HUMANEVAL]
    assert load_texts("news") == ["First article about fires.", "Second article, on floods.", "Third one."]


def test_prompts_use_the_chat_template_and_the_instruction(fake_cache):
    tok = CharTokenizer(template=True)
    (first,) = prompts("humaneval", 1, tok)
    assert (first.dataset, first.index, first.text) == ("humaneval", 0, HUMANEVAL[0]["prompt"])
    expected = "<u>" + PROMPT_SETS["humaneval"].instruction.format(text=first.text) + "</u><a>"
    assert tok.decode(first.input_ids) == expected
    assert first.input_ids[0] != 1, "a templated prompt adds no extra special tokens"


def test_prompts_without_a_template_or_tokenizer(fake_cache):
    (plain,) = prompts("mt-bench", 1, CharTokenizer(template=False))
    assert plain.input_ids == tuple([1] + [ord(c) for c in "Question 0?"])
    assert [p.input_ids for p in prompts("news", 3)] == [None] * 3


@pytest.mark.parametrize("max_tokens", [12, 20, 31])
def test_truncation_keeps_the_template_and_the_beginning(max_tokens):
    tok = CharTokenizer(template=True)
    text = "abcdefghijklmnopqrstuvwxyz" * 3
    ids = render(text, tok, max_tokens)
    assert len(ids) == max_tokens, "the budget is used up exactly by one id per character"
    assert tok.decode(ids) == "<u>" + text[: max_tokens - len("<u></u><a>")] + "</u><a>"
    assert render("short", tok, 40) == tuple(tok.encode("<u>short</u><a>", add_special_tokens=False))


def test_bad_arguments_are_refused(fake_cache):
    with pytest.raises(ValueError, match="name must be one of"):
        prompts("cnn", 1)
    with pytest.raises(ValueError, match="n=4 exceeds the 3 prompts"):
        prompts("mt-bench", 4)
    with pytest.raises(ValueError, match="n must be a positive int"):
        prompts("mt-bench", 0)
    with pytest.raises(ValueError, match="max_tokens must be"):
        prompts("mt-bench", 1, max_tokens=0)
    with pytest.raises(ValueError, match="too small"):
        render("hello", CharTokenizer(template=True), 5)
    with pytest.raises(ValueError, match="pinned"):
        parse_requirement("gensim>=4")


def test_parse_texts_handles_each_format():
    assert parse_texts("news", b"a\n\n b \n") == ["a", "b"]
    assert parse_texts("humaneval", gzip.compress(b'{"prompt": "def f(): pass"}\n')) == ["def f(): pass"]


_REAL = {name: find_wheel(spec.requirement, cache_dir() / "wheels") for name, spec in WHEEL_SETS.items()}


@pytest.mark.skipif(not all(_REAL.values()), reason="the prompt-set wheels are not in the mdsd cache")
def test_real_prompt_sets_have_their_published_sizes():
    assert [len(load_texts(name)) for name in ("mt-bench", "humaneval", "news")] == [80, 164, 300]
    assert load_texts("humaneval")[0].startswith("from typing import List\n\n\ndef has_close_elements")
