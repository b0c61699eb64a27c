"""The package surface and the promises the README makes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import mdsd

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_resolves():
    assert len(mdsd.__all__) == len(set(mdsd.__all__))
    for name in mdsd.__all__:
        assert getattr(mdsd, name) is not None, name


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_readme_quick_start_has_two_commands_from_a_fresh_venv():
    commands = quick_start_commands()
    assert len(commands) == 2
    for command in commands:
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && ")


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = quick_start_commands()[1]
    assert re.search(r"pytest$", test_command)
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_readme_tour_runs_as_written_regression():
    """The README's code tour runs as written, the decoder included (regression: it used target, draft,
    input_ids and ids_a..c without defining them, and the test stopped before the decoder)."""
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("```python\n", 1)[1].split("```", 1)[0]
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


def test_readme_says_how_to_get_the_cpu_torch_and_a_fast_subset():
    """The README tells a CPU-only user the PyTorch CPU wheel index, and contributors the marker that
    leaves the slow tests out (registered in pyproject, so --strict-markers accepts it)."""
    readme = (ROOT / "README.md").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme
    assert '-m "not slow"' in readme and "The whole test run" in readme
    assert '\n    "slow: ' in (ROOT / "pyproject.toml").read_text()
