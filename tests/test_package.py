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
