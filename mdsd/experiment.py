"""Plumbing shared by experiment scripts and reports: config from the command line, run metadata,
and results written as JSON + CSV.

An experiment declares its config as a dataclass whose fields carry defaults and a comment
(``field(default=..., metadata={"help": "..."})``); :func:`config_from_cli` turns it into flags.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import importlib.metadata
import json
import platform
import subprocess
import sys
import typing
from pathlib import Path

_PACKAGES = ("mdsd", "numpy", "scipy", "torch", "networkx", "highspy", "cvxpy", "transformers")


def config_from_cli(cls: type, argv: list[str] | None = None, description: str | None = None):
    """Build a ``cls`` instance from command-line flags ``--field-name value`` (defaults = fields').

    Tuple and list fields take several values (``--temperatures 0.3 0.6``); bool fields are
    switches ``--name`` / ``--no-name``.
    """
    parser = argparse.ArgumentParser(description=description or cls.__doc__)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        helptext = f"{f.metadata.get('help', '')} (default: {default})"
        origin = typing.get_origin(kind)
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=helptext)
        elif origin in (tuple, list):
            item = typing.get_args(kind)[0]
            parser.add_argument(flag, type=item, nargs="+", default=default, help=helptext)
        else:
            parser.add_argument(flag, type=kind, default=default, help=helptext)
    args = vars(parser.parse_args(argv))
    values = {}
    for f in dataclasses.fields(cls):
        value = args[f.name]
        values[f.name] = tuple(value) if typing.get_origin(hints[f.name]) is tuple else value
    return cls(**values)


def output_dir(name: str, given: str = "") -> Path:
    """Where an experiment writes: ``given`` if set (e.g. ``results/<name>`` to update committed results on
    purpose), else a fresh ``runs/<name>-<UTC time>`` (runs/ is not tracked), so a default run never
    overwrites committed results."""
    if given:
        return Path(given)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


def git_revision() -> str | None:
    """The checkout's HEAD commit (with ``-dirty`` if the tree has changes), or None outside git."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return rev + ("-dirty" if dirty else "")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def metadata(
    config: object,
    seed: int | None = None,
    models: list[dict] | None = None,
    prompt_sets: list[str] | None = None,
) -> dict:
    """What a result file records beside its numbers: resolved config, seed, revision, versions, and where
    its models ({role: :func:`mdsd.hf.describe_model`}: name, path, weights sha256) and prompt sets
    (:func:`mdsd.data.describe_prompt_set`: pinned package, member) came from."""
    from mdsd.data import describe_prompt_set

    cfg = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    return {
        "config": cfg,
        "seed": seed,
        "models": models or {},
        "prompt_sets": [describe_prompt_set(name) for name in prompt_sets or ()],
        "git_revision": git_revision(),
        "versions": package_versions(),
        "platform": platform.platform(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_results(
    out_dir: str | Path,
    name: str,
    rows: list[dict],
    config: object,
    seed: int | None = None,
    models: dict[str, dict] | None = None,
    prompt_sets: list[str] | None = None,
    **extra,
) -> tuple[Path, Path]:
    """Write ``rows`` to ``out_dir/name.csv`` and ``out_dir/name.json`` (rows + :func:`metadata` + extra)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out / f"{name}.json", out / f"{name}.csv"
    payload = {"metadata": metadata(config, seed, models, prompt_sets), **extra, "rows": rows}
    json_path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path
