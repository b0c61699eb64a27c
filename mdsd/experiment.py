"""Plumbing shared by experiment scripts and reports: config from the command line, run metadata,
and results written as JSON + CSV.

An experiment declares its config as a dataclass whose fields carry defaults and a comment
(``field(default=..., metadata={"help": "..."})``); :func:`config_from_cli` turns it into flags.
A field with ``"const"`` in its metadata is a flag whose value may be left out (``--ray`` alone means
``--ray <const>``). A field marked ``"run": True`` says how to run the experiment, not what it computes
(``--ray``, ``--resume``): results record it under ``metadata["run"]``, apart from ``metadata["config"]``,
so two runs of the same config compare equal however they ran.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import platform
import subprocess
import sys
import typing
from collections.abc import Iterator
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
        elif "const" in f.metadata:
            parser.add_argument(
                flag, type=kind, nargs="?", const=f.metadata["const"], default=default, help=helptext
            )
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


def split_config(config: object) -> tuple[dict, dict]:
    """``(what it computes, how it runs)``: the config's fields, and those marked ``"run"`` apart."""
    if not dataclasses.is_dataclass(config):
        return dict(config), {}
    run = {f.name for f in dataclasses.fields(config) if f.metadata.get("run")}
    values = dataclasses.asdict(config)
    return {k: v for k, v in values.items() if k not in run}, {k: v for k, v in values.items() if k in run}


def metadata(
    config: object,
    seed: int | None = None,
    models: list[dict] | None = None,
    prompt_sets: list[str] | None = None,
) -> dict:
    """What a result file records beside its numbers: resolved config, seed, revision, versions, and where
    its models ({role: :func:`mdsd.hf.describe_model`}: name, path, weights sha256) and prompt sets
    (:func:`mdsd.data.describe_prompt_set`: pinned package, member) came from.

    ``run`` holds the config fields that say how it ran (see the module docstring); ``created`` the time.
    """
    from mdsd.data import describe_prompt_set

    cfg, run = split_config(config)
    return {
        "config": cfg,
        "run": run,
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


@contextlib.contextmanager
def partial_results(out_dir: str | Path, name: str, config: object, resume: bool) -> Iterator[Path]:
    """The checkpoint file of an experiment's sweep (:func:`mdsd.sweep.run_tasks`), deleted once it completes.

    ``out_dir/name.<config hash>.tasks.jsonl``: the hash covers the config fields that decide the numbers
    (not the ``"run"`` ones), so only a run of the same config resumes from it. If the file is there
    from an interrupted run, ``resume=True`` continues from it; without it the run stops before
    computing anything, so that no finished task is thrown away unasked. The file is kept when the
    block raises (a task failed, the run was interrupted) and deleted when it completes.
    """
    cfg, _ = split_config(config)
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = Path(out_dir) / f"{name}.{digest}.tasks.jsonl"
    if path.exists() and not resume:
        raise FileExistsError(
            f"{path} holds the partial results of an interrupted run of this config: pass --resume to "
            "continue from them, or delete the file to start afresh"
        )
    yield path
    path.unlink(missing_ok=True)
