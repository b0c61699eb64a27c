"""Plumbing shared by experiment scripts and reports: config from the command line, run metadata,
and results written as JSON + CSV.

An experiment declares its config as a dataclass whose fields carry defaults and a comment
(``field(default=..., metadata={"help": "..."})``); :func:`config_from_cli` turns it into flags.
A field with ``"const"`` in its metadata is a flag whose value may be left out (``--ray`` alone means
``--ray <const>``). A field marked ``"run": True`` says how to run the experiment, not what it computes
(``--ray``, ``--resume``): results record it under ``metadata["run"]``, apart from ``metadata["config"]``,
so two runs of the same config compare equal however they ran.

Every script of experiments/ ends with ``if __name__ == "__main__": run_script(main)``: bad input (a
``ValueError`` or ``TypeError`` that mdsd or the script raises about it, an ``OSError``) is one line
``<script>: error: ...`` and exit status 2, as with the ``mdsd`` command (:mod:`mdsd.errors`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import hashlib
import itertools
import json
import os
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

from mdsd.errors import report_exception
from mdsd.outputs import ensure_output_dir, git_revision, package_versions, provenance, strict_json

# ensure_output_dir, git_revision, package_versions and strict_json live in mdsd.outputs, which the drafters'
# runs below the harness share; they are names of this module too, for the experiments.
__all__ = [
    "run_script",
    "config_from_cli",
    "add_config_arguments",
    "config_from_args",
    "output_dir_field",
    "ray_field",
    "resume_field",
    "output_dir",
    "ensure_output_dir",
    "git_revision",
    "package_versions",
    "split_config",
    "metadata",
    "write_results",
    "strict_json",
    "partial_results",
]


def run_script(main: Callable[[list[str]], object], argv: list[str] | None = None) -> None:
    """Run an experiment script's ``main(argv)`` (``argv``: ``sys.argv[1:]`` by default): return when it
    returns (the script then ends with status 0); for bad input print one line ``<script>: error: MESSAGE`` on
    stderr and exit with status 2; for anything else print the traceback and a line that says it is a bug,
    and exit with status 1 (:func:`mdsd.errors.report_exception`; the script's own explicit raises count as
    mdsd's). A bad flag is argparse's, which exits 2 itself."""
    script = os.path.abspath(main.__code__.co_filename)
    prog = os.path.basename(script)
    try:
        main(sys.argv[1:] if argv is None else argv)
    except Exception as err:  # noqa: BLE001 (bad input: one line, exit 2; anything else: a bug, exit 1)
        sys.exit(report_exception(err, prog, own=[script], what=f"mdsd or {prog}"))


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
    """The ``cls`` instance of parsed flags (:func:`add_config_arguments`). A ``ValueError`` or ``TypeError``
    of the config's checks that starts with a field's name (``n must be >= 2``, ``laws: ...``) names its flag
    instead (``--n must be >= 2``): the command line's words, not the API's."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, f.name)
        values[f.name] = tuple(value) if typing.get_origin(hints[f.name]) is tuple else value
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:
        message = str(err)
        for f in dataclasses.fields(cls):
            if message.startswith((f"{f.name} ", f"{f.name}:")):
                raise type(err)("--" + f.name.replace("_", "-") + message[len(f.name) :]) from None
        raise


def output_dir_field() -> typing.Any:
    """The ``output_dir`` field of an experiment's config: where :func:`output_dir` writes ('' = a fresh
    runs/ folder)."""
    return dataclasses.field(default="", metadata={"help": "where results go ('' = a fresh runs/ folder)"})


def ray_field() -> typing.Any:
    """The ``ray`` field of a sweep's config (:func:`mdsd.harness.sweep.run_tasks`): '' runs here without Ray,
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
    top = Path(__file__).resolve().parents[2]  # mdsd/harness/experiment.py -> the checkout
    return (top if (top / "pyproject.toml").is_file() and (top / ".git").exists() else Path.cwd()) / "runs"


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
    destination: str | Path | None = None,
) -> dict:
    """What a result file records beside its numbers: resolved config, seed, where its models
    ({role: :func:`mdsd.hf.describe_model`}: name, path, weights sha256) and prompt sets
    (:func:`mdsd.data.describe_prompt_set`: pinned package, member) came from, and its
    :func:`mdsd.outputs.provenance` (command, git revision, versions, device, time; a dirty tree may not
    write into the committed results folders unless ``$MDSD_SCRATCH`` marks the run as scratch).

    ``run`` holds the config fields that say how it ran (see the module docstring). A file later copied
    from a log or merged from parts adds ``assembled_from`` (:mod:`mdsd.outputs`).
    """
    from mdsd.data import describe_prompt_set

    cfg, run = split_config(config)
    return {
        "config": cfg,
        "run": run,
        "seed": seed,
        "models": models or {},
        "prompt_sets": [describe_prompt_set(name) for name in prompt_sets or ()],
        **provenance(destination),
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
    """Write ``rows`` to ``out_dir/name.csv`` and ``out_dir/name.json`` (rows + :func:`metadata` + extra);
    a ``ValueError`` before writing if ``out_dir`` is a committed results folder and the tree is dirty
    (:func:`mdsd.outputs.check_results_destination`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out / f"{name}.json", out / f"{name}.csv"
    meta = metadata(config, seed, models, prompt_sets, destination=out)
    payload = strict_json({"metadata": meta, **extra, "rows": rows})
    json_path.write_text(json.dumps(payload, indent=2, allow_nan=False, default=float) + "\n")
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(payload["rows"])  # a missing value is an empty cell
    return json_path, csv_path


@contextlib.contextmanager
def partial_results(out_dir: str | Path, name: str, config: object, resume: bool) -> Iterator[Path]:
    """The checkpoint file of an experiment's sweep (:func:`mdsd.harness.sweep.run_tasks`), deleted once it
    completes.

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
