"""X→English translation pairs from the gettext catalogs of four pinned wheels (never installed).

Web and desktop applications ship their user-interface translations as gettext catalogs: each entry
pairs an English message (``msgid``) with its translation (``msgstr``). Four wheels on the package
index ship them for German, French, Russian, Japanese and Chinese, which gives sentence pairs whose
English side is a free reference. Their sha256 digests are pinned (:data:`CATALOGS`).

=======  ========  =====  ========  =======================================  ==================
lang     language  train  held out  from pretix / weblate / gramps / django  script of the text
=======  ========  =====  ========  =======================================  ==================
``deu``  German    6,810  747       3,323 / 1,470 / 2,564 / 200              Latin
``fra``  French    6,761  743       3,305 / 1,431 / 2,562 / 206              Latin
``rus``  Russian   4,205  450       546 / 1,431 / 2,472 / 206                Cyrillic
``jpn``  Japanese  5,971  658       3,275 / 1,384 / 1,775 / 195              kana or kanji
``cmn``  Chinese   4,591  481       1,291 / 1,406 / 2,201 / 174              Han
=======  ========  =====  ========  =======================================  ==================

The counts by wheel are of both splits together.

=====================  =====================================================  ===========================
wheel (sha256 pinned)  members read (``{locale}``: de, fr, ru, ja, zh_Hans)   licence of the translations
=====================  =====================================================  ===========================
pretix==2026.8.0       ``pretix/locale/{locale}/LC_MESSAGES/*.po``            Apache-2.0
                                                                              (``pretix/locale/LICENSE``)
weblate==5.14.3        ``weblate/locale/{locale}/LC_MESSAGES/*.po``           GPL-3.0-or-later
gramps==6.0.8          ``gramps-6.0.8.data/data/share/locale/{locale}/``      GPL-2.0-or-later
                       ``LC_MESSAGES/gramps.mo`` (.mo only; zh is ``zh_CN``)
django==5.2.8          ``django/*/locale/{locale}/LC_MESSAGES/*.po``          BSD-3-Clause
=====================  =====================================================  ===========================

The prompt is the language's instruction, a blank line, and the text: ``"Translate the following German
text into English.\n\n<text>"`` (:attr:`Language.instruction`).

A language's pairs are the translated entries of those catalogs (fuzzy, obsolete and header entries
left out; for a plural, the first form against the singular English), in a fixed order (wheel as
above, member name, entry), kept when

* the English has at least 5 words (runs of non-space characters),
* the translation differs from the English,
* at least 30 % of the translation's non-space characters are in the language's script (Latin for
  German and French, Cyrillic for Russian, kana or kanji for Japanese, Han for Chinese),
* and no earlier pair has the same normalised English (:func:`normalise`).

Entries with placeholders (``%s``, ``%(name)s``, ``{name}``) or markup (``<b>``, ``&amp;``) are kept
as they are: a translation keeps them, so the model is expected to copy them into the English.

The split depends on the normalised English alone (:func:`is_heldout`, about one pair in ten held out),
so an English sentence lands in the same split in every language: no training prompt, in any language,
is a translation of a held-out one. The held-out pairs are the ``translate-<lang>`` evaluation sets of
:mod:`mdsd.data.prompts`, the training pairs the ``translate-<lang>-train`` sets of
:mod:`mdsd.data.training`. The sha256 of each language's split (:func:`pairs_digest`) is pinned in
:data:`DIGESTS`, so that a changed catalog or parser fails loudly. The texts are software-interface and
help prose (a median of about 9 English words). mdsd redistributes none of them: it reads them out of
the wheels in the cache (:func:`mdsd.data.wheels.cache_dir`).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import struct
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mdsd.data.wheels import cache_dir, download_wheels

__all__ = [
    "CATALOGS",
    "Catalog",
    "DIGESTS",
    "LANGUAGES",
    "Language",
    "Pair",
    "SPLITS",
    "evaluation_order",
    "is_heldout",
    "load_pairs",
    "normalise",
    "pairs_digest",
    "parse_mo",
    "parse_po",
    "script_share",
    "select_pairs",
]

Message = tuple[str | None, str, str]  # (msgctxt or None, msgid, msgstr)
SPLITS = ("train", "heldout")
MIN_WORDS = 5  # English words of a kept pair
MIN_SCRIPT = 0.3  # share of the translation's non-space characters in the language's script
_SALT = "mdsd-issue43:"  # prefix of the hashed key of the split
_ORDER = "mdsd-issue43-order:"  # prefix of the hashed key of the evaluation order
_PYTHON = "3.11"  # pretix and weblate require Python >= 3.11; their wheels are only read, never imported


@dataclass(frozen=True)
class Language:
    """One source language: its catalogs' locale folder, its script, and the prompt instruction."""

    code: str  # ISO 639-3, as in mdsd.data.udhr: the suffix of the sets' names ("translate-deu")
    name: str  # in English, as the instruction names it
    locale: str  # the catalogs' locale folder (a Catalog may spell it otherwise)
    chars: str  # the characters of its script, as the inside of a regex character class

    @property
    def instruction(self) -> str:
        """The user message before the text: ``Translate the following <name> text into English.``"""
        return f"Translate the following {self.name} text into English."


_LATIN = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff"
# hiragana, katakana (with its phonetic extensions and half-width forms) and the iteration mark 々
_KANA = "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f\u3005"
# CJK unified ideographs (and their extensions A to H) and compatibility ideographs
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
LANGUAGES: dict[str, Language] = {
    lang.code: lang
    for lang in (
        Language("deu", "German", "de", _LATIN),
        Language("fra", "French", "fr", _LATIN),
        Language("rus", "Russian", "ru", "\u0400-\u052f"),  # Cyrillic and its supplement
        Language("jpn", "Japanese", "ja", _KANA + _HAN),
        Language("cmn", "Chinese", "zh_Hans", _HAN),
    )
}


@dataclass(frozen=True)
class Catalog:
    """One pinned wheel and the members of it that hold a language's catalogs."""

    requirement: str  # "name==version"
    sha256: str  # of the wheel file
    pattern: str  # fnmatch pattern of the members ("*" spans folders); "{locale}" is the language's
    licence: str  # of the translations
    locales: dict[str, str] = field(default_factory=dict)  # language code -> locale folder, where it differs

    def member(self, language: str) -> str:
        """The pattern of ``language``'s members.

        >>> CATALOGS[2].member("cmn")
        'gramps-6.0.8.data/data/share/locale/zh_CN/LC_MESSAGES/gramps.mo'
        """
        return self.pattern.format(locale=self.locales.get(language, LANGUAGES[language].locale))


CATALOGS: tuple[Catalog, ...] = (  # in the order their pairs are taken
    Catalog(
        "pretix==2026.8.0",
        "a78932e698778d873530d67f25a57c28d1c09b1bfb1a22ec817c00d90397db85",
        "pretix/locale/{locale}/LC_MESSAGES/*.po",
        "Apache-2.0 (pretix/locale/LICENSE)",
    ),
    Catalog(
        "weblate==5.14.3",
        "0bc2c5a49ebc496758e89f08d5ec9d1b226e8aba2cff7744a18ab9f235dca816",
        "weblate/locale/{locale}/LC_MESSAGES/*.po",
        "GPL-3.0-or-later",
    ),
    Catalog(
        "gramps==6.0.8",
        "56f03bcb643320eb9f9892d4c3f8bbe7c4c4d2e4c71e56f598584af24561ec1c",
        "gramps-6.0.8.data/data/share/locale/{locale}/LC_MESSAGES/gramps.mo",  # no .po in the wheel
        "GPL-2.0-or-later",
        locales={"cmn": "zh_CN"},
    ),
    Catalog(
        "django==5.2.8",
        "37e687f7bd73ddf043e2b6b97cfe02fcbb11f2dbb3adccc6a2b18c6daa054d7f",
        "django/*/locale/{locale}/LC_MESSAGES/*.po",
        "BSD-3-Clause",
    ),
)

# sha256 of each language's split (pairs_digest), as the pinned catalogs give them
DIGESTS: dict[str, dict[str, str]] = {
    "deu": {
        "train": "d48945b2b2265dedbcaacc6ef8886abea2033d3fbdad7d5b769ff4a1a445dbe0",
        "heldout": "c819d6f7f7a17b2f8da65c855f0c16164d8697cd0076e5490be5507d750dc885",
    },
    "fra": {
        "train": "366ccb474b2049c8f41b253de9f9c4ed3645772f9e568a75fc66bd2bf89b15ea",
        "heldout": "c9d87b28e6742cb90ef340ad1a12d18a9f027822516bae75345591928896075f",
    },
    "rus": {
        "train": "bb380c9eee68036034bfa595058f53cd1e394d3f2f59c00f5c15808b6a3f90cd",
        "heldout": "68ea0c5bdeb5f12c291e5f5eaff233ab023d7c285d4a56b08827080ba6628c63",
    },
    "jpn": {
        "train": "b90df680535c367223a807cf5fc65502a06bcbcc2a2edbb6f5d65e17dc530712",
        "heldout": "c30d2ce8e923befb81b9505cefda09890daa90932681f72754faca19d72cb6c9",
    },
    "cmn": {
        "train": "252119fefb372806d1c87bf005a6157c0e87f0b3f0280ad7d4ea9583c34f1800",
        "heldout": "49e3f696393610b202bc1d94a64b15665b9958d4f893e43474d2826f594b1bb6",
    },
}


@dataclass(frozen=True, order=True)
class Pair:
    """One translation pair: the wheel it comes from, the English message and its translation."""

    source: str  # the catalog's requirement, "pretix==2026.8.0"
    english: str  # the msgid: the reference answer
    text: str  # the msgstr, in the source language: the prompt's text


# --------------------------------------------------------------------------------------------- parsing

_PO_KEYWORD = re.compile(rb'(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+"(.*)"\s*$')
_PO_STRING = re.compile(rb'"(.*)"\s*$')
_PO_ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)", re.DOTALL)
_PO_ESCAPES = {
    b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"v": b"\v",
    b'"': b'"', b"'": b"'", b"?": b"?", b"\\": b"\\",
}  # fmt: skip


def _unescape(body: bytes, number: int) -> bytes:
    # the C escapes of a .po string: \n \t \" \\ ..., octal \NNN and hex \xHH (bytes of the UTF-8 text)
    def one(match: re.Match) -> bytes:
        code = match.group(1)
        if code[:1] == b"x":
            return bytes([int(code[1:], 16)])
        if code[0] in b"01234567":
            return bytes([int(code, 8) & 0xFF])
        if code not in _PO_ESCAPES:
            raise ValueError(f"line {number} of the .po has an unknown escape {match.group(0)!r}")
        return _PO_ESCAPES[code]

    return _PO_ESCAPE.sub(one, body)


def parse_po(raw: bytes) -> list[Message]:
    r"""The translated entries of a UTF-8 ``.po`` file: ``(msgctxt or None, msgid, msgstr)`` in file order.

    Adjacent strings are joined and C escapes decoded. Left out: entries flagged fuzzy, obsolete (``#~``)
    entries, the header (empty msgid) and untranslated entries (empty msgstr). A plural entry gives its
    first form (``msgstr[0]``) against the singular msgid. Raises :class:`ValueError` on a line that is
    not part of a .po file.

    >>> parse_po('''
    ... #, fuzzy
    ... msgid "Old"
    ... msgstr "Alt"
    ...
    ... msgctxt "menu"
    ... msgid "Open "
    ... "file"
    ... msgstr "Datei \\"öffnen\\""
    ...
    ... msgid "one day"
    ... msgid_plural "%d days"
    ... msgstr[0] "ein Tag"
    ... msgstr[1] "%d Tage"
    ... '''.encode())
    [('menu', 'Open file', 'Datei "öffnen"'), (None, 'one day', 'ein Tag')]
    """
    out: list[Message] = []
    entry: dict[str, bytes] = {}  # keyword -> its joined string so far
    last: str | None = None  # the keyword the next string continues
    fuzzy = False

    def flush() -> None:
        nonlocal entry, last, fuzzy
        msgid, msgstr = entry.get("msgid"), entry.get("msgstr", entry.get("msgstr[0]"))
        if msgid and msgstr and not fuzzy:
            context = entry.get("msgctxt")
            out.append((None if context is None else context.decode(), msgid.decode(), msgstr.decode()))
        entry, last, fuzzy = {}, None, False

    def translated() -> bool:
        return any(keyword.startswith("msgstr") for keyword in entry)

    for number, line in enumerate(raw.removeprefix(b"\xef\xbb\xbf").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(b"#"):
            if entry and (not line or translated()):  # a comment after a msgstr starts the next entry
                flush()
            if line.startswith(b"#,") and b"fuzzy" in line[2:].replace(b",", b" ").split():
                fuzzy = True
            continue
        keyword = _PO_KEYWORD.match(line)
        string = None if keyword else _PO_STRING.match(line)
        if keyword:
            name = keyword.group(1).decode()
            if (name == "msgctxt" and entry) or (name == "msgid" and ("msgid" in entry or translated())):
                flush()  # a new entry begins
            last = name
            entry[last] = _unescape(keyword.group(2), number)
        elif string and last is not None:
            entry[last] += _unescape(string.group(1), number)
        else:
            raise ValueError(f"line {number} of the .po is not a comment, keyword or string: {line[:60]!r}")
    flush()
    return out


_MO_MAGIC = 0x950412DE


def parse_mo(raw: bytes) -> list[Message]:
    """The translated entries of a GNU ``.mo`` file (either byte order): ``(msgctxt or None, msgid, msgstr)``.

    In table order (sorted by msgid). A context is the part of the msgid before ``\\x04``; a plural entry
    gives its first form against the singular msgid (both split on ``\\x00``). The header (empty msgid)
    and empty translations are left out. Raises :class:`ValueError` if ``raw`` is not a .mo file.

    >>> head = struct.pack("<5I", 0x950412DE, 0, 1, 20, 28)
    >>> parse_mo(head + struct.pack("<4I", 3, 36, 5, 39) + b"Hi!Hallo")
    [(None, 'Hi!', 'Hallo')]
    """
    order = next((o for o in "<>" if raw[:4] == struct.pack(o + "I", _MO_MAGIC)), None)
    if order is None:
        raise ValueError(f"raw is not a GNU .mo file: it starts with {raw[:4]!r}")
    try:
        revision, count, originals, translations = struct.unpack_from(order + "4I", raw, 4)
        if revision >> 16 > 1:
            raise ValueError(f"raw is a .mo file of unknown major revision {revision >> 16}")
        out: list[Message] = []
        for i in range(count):
            strings = []
            for table in (originals, translations):
                length, offset = struct.unpack_from(order + "2I", raw, table + 8 * i)
                if offset + length > len(raw):
                    raise ValueError(f"entry {i} of the .mo runs past its end ({offset} + {length} bytes)")
                strings.append(raw[offset : offset + length])
            original, translation = strings
            context = None
            if b"\x04" in original:
                context, original = original.split(b"\x04", 1)
            msgid, msgstr = original.split(b"\x00")[0], translation.split(b"\x00")[0]
            if msgid and msgstr:
                out.append((None if context is None else context.decode(), msgid.decode(), msgstr.decode()))
    except struct.error as err:
        raise ValueError(f"raw is a truncated .mo file: {err}") from err
    return out


# ------------------------------------------------------------------------------------- pairs and split

_MARKUP = re.compile(
    r"%\([^)]*\)[-#0+]*\d*(?:\.\d+)?[a-zA-Z]"  # %(name)s
    r"|%(?:\d+\$)?[-#0+]*\d*(?:\.\d+)?[sdifFeEgGxXcru]"  # %s, %d, %1$s, %.2f
    r"|\{[^{}]*\}"  # {name}, {0}, {}
    r"|<[^<>]*>"  # HTML tags
    r"|&(?:[A-Za-z]+|#\d+|#[xX][0-9A-Fa-f]+);"  # HTML entities
)


def normalise(english: str) -> str:
    """The key an English message is de-duplicated and split on: placeholders (``%s``, ``%(x)s``,
    ``{x}``), HTML tags and entities removed, whitespace collapsed, lower-cased.

    >>> normalise("Order <b>%(code)s</b> could not be   paid:&nbsp;{message}\\n")
    'order could not be paid:'
    """
    return " ".join(_MARKUP.sub(" ", english).split()).lower()


def is_heldout(english: str) -> bool:
    """Whether the pair of an English message is held out: for ``key = normalise(english)``,

    .. math:: \\operatorname{int}(\\operatorname{sha256}(\\texttt{"mdsd-issue43:"} + key)) \\bmod 10 = 0.

    >>> is_heldout("Open file"), is_heldout("<b>Open</b> %s file"), is_heldout("Save the file")
    (True, True, False)
    """
    key = normalise(english)
    return int(hashlib.sha256((_SALT + key).encode()).hexdigest(), 16) % 10 == 0


def evaluation_order(pairs: Iterable[Pair]) -> list[Pair]:
    """``pairs`` sorted by sha256(``"mdsd-issue43-order:" + normalise(english)``): a fixed shuffle, so that
    the first n held-out prompts mix the four catalogs (in source order they would all be pretix's), and,
    the key being the English, the first n of two languages are mostly translations of the same messages.

    >>> a, b = Pair("x", "Open the file now", "A"), Pair("x", "Close the window now", "B")
    >>> evaluation_order([a, b]) == evaluation_order([b, a])
    True
    """
    return sorted(
        pairs, key=lambda pair: hashlib.sha256((_ORDER + normalise(pair.english)).encode()).digest()
    )


def script_share(text: str, language: str) -> float:
    """The share of the non-space characters of ``text`` written in ``language``'s script (0 if none).

    >>> script_share("Datei: 1", "deu"), script_share("ファイル OK", "jpn"), script_share("OK", "rus")
    (0.7142857142857143, 0.6666666666666666, 0.0)
    """
    chars = "".join(text.split())
    if not chars:
        return 0.0
    return len(re.findall(f"[{_language(language).chars}]", chars)) / len(chars)


def select_pairs(language: str, sources: Iterable[tuple[str, Iterable[Message]]]) -> list[Pair]:
    """The pairs of ``language`` among the messages of each ``(source, messages)``, in that order: English
    of at least 5 words, a translation that differs from it and is at least 30 % in the language's script
    (:func:`script_share`), the first pair of each normalised English (:func:`normalise`). Both sides are
    stripped of surrounding whitespace.

    >>> select_pairs("deu", [("a==1", [(None, "Save the file to disk now", "Datei jetzt speichern"),
    ...                                (None, "Save the <b>file</b> to disk now", "Speichern!"),
    ...                                (None, "Too short to keep", "Zu kurz")])])
    [Pair(source='a==1', english='Save the file to disk now', text='Datei jetzt speichern')]
    """
    _language(language)
    out, seen = [], set()
    for source, messages in sources:
        for _, msgid, msgstr in messages:
            english, text = msgid.strip(), msgstr.strip()
            if len(english.split()) < MIN_WORDS or text == english:
                continue
            key = normalise(english)
            if key in seen or script_share(text, language) < MIN_SCRIPT:
                continue
            seen.add(key)
            out.append(Pair(source, english, text))
    return out


def pairs_digest(pairs: Iterable[Pair]) -> str:
    """The sha256 of the sorted pairs, as JSON ``[[source, english, text], ...]`` (UTF-8, no ASCII escapes).

    >>> pairs_digest([]) == hashlib.sha256(b"[]").hexdigest()
    True
    """
    rows = [[pair.source, pair.english, pair.text] for pair in sorted(pairs)]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


# ------------------------------------------------------------------------------------------- loading


def _language(language: str) -> Language:
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, got {language!r}")
    return LANGUAGES[language]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _messages(catalog: Catalog, wheel: Path, language: str) -> list[Message]:
    # the entries of the wheel's members for the language, in member-name order
    pattern = catalog.member(language)
    with zipfile.ZipFile(wheel) as archive:
        members = sorted(name for name in archive.namelist() if fnmatch.fnmatchcase(name, pattern))
        if not members:
            raise FileNotFoundError(f"{wheel.name} has no member matching {pattern!r}")
        parse = {".po": parse_po, ".mo": parse_mo}
        return [entry for name in members for entry in parse[Path(name).suffix](archive.read(name))]


@functools.cache
def _checked_wheels(folder: str) -> tuple[Path, ...]:
    """The wheels of :data:`CATALOGS` in ``folder`` (downloaded once), each checked against its pinned sha256
    once a process."""
    wheels = download_wheels([c.requirement for c in CATALOGS], folder, python_version=_PYTHON)
    for catalog, wheel in zip(CATALOGS, wheels, strict=True):
        digest = _sha256(wheel)
        if digest != catalog.sha256:
            wheel.unlink()
            raise ValueError(f"{wheel.name} has sha256 {digest}, expected {catalog.sha256}; removed it")
    return tuple(wheels)


@functools.cache
def _sources(language: str, folder: str) -> tuple[tuple[str, tuple[Message, ...]], ...]:
    """(requirement, entries) of each catalog for ``language``, read once a process."""
    wheels = _checked_wheels(folder)
    return tuple(
        (c.requirement, tuple(_messages(c, w, language))) for c, w in zip(CATALOGS, wheels, strict=True)
    )


def load_pairs(language: str, split: str = "train", cache: str | os.PathLike | None = None) -> list[Pair]:
    """The translation pairs of ``language`` ("deu", "fra", "rus", "jpn", "cmn") in ``split`` ("train" or
    "heldout"), in their fixed order (:func:`select_pairs`, :func:`is_heldout`).

    Downloads the wheels of :data:`CATALOGS` once into ``<cache>/wheels`` (nothing is installed) and reads
    and checks them once a process. Raises
    :class:`ValueError` if a wheel's sha256 differs from the pinned one (the wheel is then removed, so a
    retry downloads it again), or if the split's pairs differ from the pinned :data:`DIGESTS`.
    """
    _language(language)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    sources = _sources(language, str(cache_dir(cache) / "wheels"))
    heldout = split == "heldout"
    pairs = [pair for pair in select_pairs(language, sources) if is_heldout(pair.english) == heldout]
    digest, expected = pairs_digest(pairs), DIGESTS[language][split]
    if digest != expected:
        raise ValueError(
            f"the {len(pairs)} {split} pairs of {language} have sha256 {digest}, expected {expected}: "
            "the catalogs or their parsing changed"
        )
    return pairs
