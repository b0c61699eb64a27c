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
import itertools
import json
import math
import platform
import subprocess
import sys
import tempfile
import typing
from collections.abc import Iterator
from pathlib import Path

import numpy as np

_PACKAGES = ("mdsd", "numpy", "scipy", "torch", "networkx", "highspy", "cvxpy", "transformers")


def config_from_cli(cls: type, argv: list[str] | None = None, description: str | None = None):
    """Build a ``cls`` instance from command-line flags ``--field-name value`` (defaults = fields').

    Tuple and list fields take several values (``--temperatures 0.3 0.6``); bool fields are
    switches ``--name`` / ``--no-name``.
    """
    parser = argparse.ArgumentParser(description=description or cls.__doc__)
    add_config_arguments(parser, cls)
    return config_from_args(cls, parser.parse_args(argv))


def add_config_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add a flag ``--field-name`` to ``parser`` for every field of the dataclass ``cls`` (see
    :func:`config_from_cli`)."""
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


def config_from_args(cls: type, args: argparse.Namespace):
    """The ``cls`` instance of parsed flags (:func:`add_config_arguments`)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, f.name)
        values[f.name] = tuple(value) if typing.get_origin(hints[f.name]) is tuple else value
    return cls(**values)


def output_dir_field() -> typing.Any:
    """The ``output_dir`` field of an experiment's config: where :func:`output_dir` writes ('' = a fresh
    runs/ folder)."""
    return dataclasses.field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})


def ray_field() -> typing.Any:
    """The ``ray`` field of a sweep's config (:func:`mdsd.sweep.run_tasks`): '' runs here without Ray,
    ``--ray`` alone on a local Ray, ``--ray auto`` or ``--ray HOST:PORT`` on a cluster. A run field."""
    return dataclasses.field(
        default="",
        metadata={
            "help": "run on Ray: --ray (here), --ray auto or HOST:PORT (a cluster)",
            "const": "local",
            "run": True,
        },
    )


def resume_field() -> typing.Any:
    """The ``resume`` field of a sweep's config (:func:`partial_results`). A run field."""
    return dataclasses.field(
        default=False, metadata={"help": "continue from an interrupted run's finished tasks", "run": True}
    )


def output_dir(name: str, given: str = "", flag: str = "--output-dir") -> Path:
    """Where an experiment writes, created now (before any work, so a bad ``--output-dir`` fails at once):
    ``given`` if set (e.g. ``results/<name>`` to update committed results on purpose), else a fresh
    ``runs/<name>-<UTC time>`` in the repository's runs/ folder (not tracked; or in the working directory
    when mdsd is not run from a checkout), so a default run never overwrites committed results. Two runs
    started in the same second get different folders (``-2``, ``-3``, ...: each folder is created
    atomically by the run that names it)."""
    if given:
        return ensure_output_dir(given, flag)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    runs = _runs_root()
    ensure_output_dir(runs, "runs/")
    for attempt in itertools.count(1):
        path = runs / (f"{name}-{stamp}" if attempt == 1 else f"{name}-{stamp}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def _runs_root() -> Path:
    """runs/ at the top of the checkout this mdsd comes from (an editable install), else in the working
    directory: a script run from experiments/ writes to the same runs/ as one run from the top."""
    top = Path(__file__).resolve().parents[1]
    return (top if (top / "pyproject.toml").is_file() and (top / ".git").exists() else Path.cwd()) / "runs"


def ensure_output_dir(path: str | Path, flag: str = "--output-dir") -> Path:
    """``path`` as a folder that exists and takes files (created if needed), or a ``ValueError`` naming
    ``flag``.

    >>> ensure_output_dir("/dev/null/x")
    Traceback (most recent call last):
    ...
    ValueError: --output-dir /dev/null/x: cannot write there (Not a directory)
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot write there ({err.strerror or err})") from None
    return folder


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
    payload = strict_json({"metadata": metadata(config, seed, models, prompt_sets), **extra, "rows": rows})
    json_path.write_text(json.dumps(payload, indent=2, allow_nan=False, default=float) + "\n")
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(payload["rows"])  # a missing value is an empty cell
    return json_path, csv_path


def strict_json(value: object) -> object:
    """``value`` with every NaN or infinite float (numpy's too) replaced by None and numpy scalars and arrays
    made plain, so that ``json.dumps(..., allow_nan=False)`` writes strict JSON (``null``, never ``NaN``).

    >>> strict_json({"a": [float("nan"), np.float32(0.5), np.inf], "b": (1, np.int64(2))})
    {'a': [None, 0.5, None], 'b': [1, 2]}
    """
    if isinstance(value, dict):
        return {key: strict_json(v) for key, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [strict_json(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


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
