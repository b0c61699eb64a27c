"""The package surface, and the facts that the README, BENCHMARKS.md and the results folders' READMEs give
a reader: the commands they print run or exist, the paths they name exist, the figures the README quotes
come from BENCHMARKS.md."""

from __future__ import annotations

import argparse
import fnmatch
import glob
import os
import re
import subprocess
from pathlib import Path

import mdsd

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BENCHMARKS = ROOT / "BENCHMARKS.md"
# Where the repository's own paths start; a span naming one of these is a path to check.
TOP = ("mdsd/", "docs/", "experiments/", "results/", "benchmarks/", "notebooks/", "tests/", ".ci/")
FILE_SUFFIXES = (".py", ".md", ".json", ".csv", ".png", ".npz", ".gz", ".sh", ".ipynb", ".toml")


def test_every_public_name_resolves():
    assert len(mdsd.__all__) == len(set(mdsd.__all__))
    for name in mdsd.__all__:
        assert getattr(mdsd, name) is not None, name


def _section(text: str, heading: str) -> str:
    return text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]


def quick_start_commands() -> list[str]:
    section = _section(README.read_text(), "Quick start")
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_readme_quick_start_has_two_commands_from_a_fresh_venv():
    commands = quick_start_commands()
    assert len(commands) == 2
    for command in commands:
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && ")
    assert commands[0].endswith(" && .venv/bin/mdsd report")


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = quick_start_commands()[1]
    assert re.search(r"pytest -n auto$", test_command)  # the tests spread over the cores (pytest-xdist)
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_the_cpu_wheel_comes_before_the_first_command_regression():
    """Issue 41: a pip that reads only PyPI resolves torch==2.13.0 to the CUDA build, and the CPU-only
    command sat below the quick start's first command, where a newcomer copying that command missed it. The
    CPU command installs the same torch version into the same .venv, from the PyTorch CPU index, and comes
    first."""
    section = _section(README.read_text(), "Quick start")
    cpu = "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert f"`{cpu}`" in section
    assert section.index(cpu) < section.index(quick_start_commands()[0])


def test_the_fast_subset_the_readme_gives_is_a_registered_marker():
    """The README's `-m "not slow"` names a marker pyproject registers (so --strict-markers accepts it)."""
    assert '.venv/bin/python -m pytest -m "not slow"' in README.read_text()
    assert '\n    "slow: ' in (ROOT / "pyproject.toml").read_text()


def test_readme_tour_runs_as_written_regression():
    """The README's code tour runs as written, the decoder included (regression: it used target, draft,
    input_ids and ids_a..c without defining them, and the test stopped before the decoder)."""
    tour = README.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(tour, "README.md", "exec"), scope)
    assert scope["r"].value == scope["r"].cut_value
    assert scope["tokens"].shape == () and -1 <= int(scope["index"]) < 2
    assert len(scope["out"].tokens) == 32 and scope["out"].mean_tokens_per_step >= 1
    assert [len(o.tokens) for o in scope["outs"]] == [16, 16, 16]


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    names = (
        listed.stdout.splitlines()
        if listed.returncode == 0
        else [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")]
    )
    out = []
    for name in names:
        path = ROOT / name
        if path.is_file() and path.suffix in {".py", ".md", ".ipynb", ".toml", ".txt", ".cfg", ""}:
            out.append(path)
    return out


def test_the_repository_stands_alone_regression():
    """Bug: the README and docstrings cited a MATH file outside the repository, and results cited paths
    outside it. Every citation of the mathematics points into docs/mathematics.md, at a section that exists;
    no tracked file names a path outside the repository."""
    outside = ("MATH" + ".md", "../" + "shared", "/work" + "/")
    sections = set(re.findall(r"^## (\d+)\.", (ROOT / "docs" / "mathematics.md").read_text(), re.M))
    cited = 0
    for path in _tracked_text_files():
        text = path.read_text(errors="replace")
        for needle in outside:
            assert needle not in text, f"{path.relative_to(ROOT)} cites {needle}"
        for numbers in re.findall(r"docs/mathematics\.md (§[\d§, –-]+)", text):
            for number in re.findall(r"\d+", numbers):
                cited += 1
                assert number in sections, f"{path.relative_to(ROOT)} cites §{number}"
    assert cited > 50


def test_the_license_is_the_one_pyproject_declares():
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the mdsd authors" in text


# ---- the facts the documents give -------------------------------------------------------------------------


def _results_readmes() -> list[Path]:
    return sorted(ROOT.glob("results/*/README.md"))


def _documents() -> list[Path]:
    return [README, BENCHMARKS, *_results_readmes()]


def _spans(text: str) -> list[str]:
    """Inline code spans (fenced blocks left out), whitespace collapsed (a span may wrap a line)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text)]


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _file_names() -> set[str]:
    names = set()
    for _folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in {".git", ".venv", "__pycache__", "node_modules"}]
        names.update(files)
    return names


def _expand(pattern: str) -> list[str]:
    """`a.{md,csv}` -> a.md, a.csv (one brace group)."""
    match = re.search(r"\{([^{}]+)\}", pattern)
    if not match:
        return [pattern]
    return [pattern[: match.start()] + part + pattern[match.end() :] for part in match.group(1).split(",")]


def _exists(base: Path, pattern: str) -> bool:
    return all(glob.glob(str(base / p)) for p in _expand(pattern))


def _is_path(span: str) -> bool:
    return " " not in span and "<" not in span and "$" not in span and "=" not in span and "(" not in span


def test_every_path_the_documents_name_exists():
    """Every repository path in README.md, BENCHMARKS.md and the results folders' READMEs exists: a code span
    or link starting with a top-level folder (relative to the root; a results README's links and its other
    paths relative to its folder), and every bare file name (README and BENCHMARKS: anywhere in the
    repository; a results README: in its folder)."""
    names = _file_names()
    missing = []
    for doc in _documents():
        text = doc.read_text()
        here = doc.parent
        in_results = doc.parent.parent == ROOT / "results"
        for span in _spans(text):  # the scripts a command runs
            for word in span.split():
                if word.startswith(TOP) and word.endswith((".py", ".sh")) and not (ROOT / word).is_file():
                    missing.append((doc, word))
        for span in filter(_is_path, _spans(text)):
            if span.startswith(TOP):
                if not _exists(ROOT, span):
                    missing.append((doc, span))
            elif span.endswith(FILE_SUFFIXES) or span.endswith(".*") or "}" in span:
                if span.startswith("."):
                    continue  # `.csv` beside `name.json`
                if in_results:
                    if not _exists(here, span):
                        missing.append((doc, span))
                elif "/" not in span and not any(fnmatch.fnmatch(n, p) for p in _expand(span) for n in names):
                    missing.append((doc, span))
                elif "/" in span:
                    missing.append((doc, span + " (a path outside the top-level folders)"))
        for link in _links(text):
            if link.startswith(("http://", "https://", "#")):
                continue
            target = link.split("#", 1)[0]
            if not (here / target).exists():
                missing.append((doc, link))
    assert not missing, "\n".join(f"{d.relative_to(ROOT)}: {s}" for d, s in missing)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def test_every_anchor_the_documents_link_to_is_a_heading():
    anchors = {
        path: {_slug(h) for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}
        for path in (README, BENCHMARKS)
    }
    bad = []
    for doc in _documents():
        for link in _links(doc.read_text()):
            if "#" not in link or link.startswith("http"):
                continue
            target, anchor = link.split("#", 1)
            path = (doc.parent / target).resolve() if target else doc
            if path in anchors and anchor not in anchors[path]:
                bad.append(f"{doc.relative_to(ROOT)}: {link}")
    assert not bad, "\n".join(bad)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_mdsd_command_the_documents_name_is_real():
    """Each `mdsd SUBCOMMAND [SUBSUBCOMMAND] [--option ...]` the documents print names a real subcommand of
    `mdsd --help` (mdsd.cli.build_parser) and only options it takes."""
    from mdsd.cli import build_parser

    root = build_parser()
    checked, bad = 0, []
    for doc in _documents():
        for span in _spans(doc.read_text()):
            words = span.split()
            if len(words) < 2 or words[0] != "mdsd":
                continue
            parser, rest = root, words[1:]
            while rest and _subcommands(parser):
                choices = _subcommands(parser)
                if rest[0] not in choices:
                    bad.append(f"{doc.relative_to(ROOT)}: `{span}`: no subcommand {rest[0]!r}")
                    break
                parser, rest = choices[rest[0]], rest[1:]
            else:
                options = {o for a in parser._actions for o in a.option_strings}
                for word in rest:
                    if word.startswith("--") and word.split("=", 1)[0] not in options:
                        bad.append(f"{doc.relative_to(ROOT)}: `{span}`: no option {word}")
                checked += 1
    assert not bad, "\n".join(bad)
    assert checked >= 10


def test_every_results_folder_has_a_readme_with_its_command():
    folders = sorted(p for p in (ROOT / "results").iterdir() if p.is_dir())
    assert len(folders) >= 20
    for folder in folders:
        readme = folder / "README.md"
        assert readme.is_file(), f"{folder.relative_to(ROOT)} has no README.md"
        text = readme.read_text()
        assert text.startswith(f"# results/{folder.name}\n"), readme
        assert "python experiments/" in " ".join(text.split()), f"{readme.relative_to(ROOT)} gives no command"


def test_benchmarks_names_every_results_folder():
    """BENCHMARKS.md names every results folder (a reader finds each from there)."""
    benchmarks = BENCHMARKS.read_text()
    for folder in (ROOT / "results").iterdir():
        if folder.is_dir():
            assert f"results/{folder.name}" in benchmarks, folder.name


def _numbers(text: str) -> list[str]:
    return [n.rstrip(".,") for n in re.findall(r"\d[\d,.]*(?:e-?\d+)?", text)]


def test_the_readmes_headline_figures_are_benchmarks_figures():
    """Every figure of the README's headline results is copied from BENCHMARKS.md (no rounding anew)."""
    headline = _section(README.read_text(), "Headline results")
    benchmarks = set(_numbers(BENCHMARKS.read_text()))
    figures = _numbers(headline)
    assert len(figures) > 20
    assert not [f for f in figures if f not in benchmarks]


def test_benchmarks_opens_with_a_summary_whose_rows_point_to_sections():
    text = BENCHMARKS.read_text()
    assert text.split("\n## ", 1)[1].startswith("Summary\n")
    rows = [
        line for line in _section(text, "Summary").splitlines() if line.startswith("| ") and "](#" in line
    ]
    assert len(rows) >= 10
