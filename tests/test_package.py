"""The package surface and the promises the README makes."""

from __future__ import annotations

import re
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


def test_readme_tour_runs_up_to_the_decoder():
    """The README's code tour runs as written (the decoder part needs real models: see tests/tree)."""
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(tour.split("# Token-tree decoding", 1)[0], "README.md", "exec"), scope)
    assert scope["r"].value == scope["r"].cut_value
    assert scope["tokens"].shape == () and -1 <= int(scope["index"]) < 2
