"""What mdsd writes to disk, whoever writes it (the drafters' training runs, the command line, the experiment
harness): a folder checked to take files before any work, strict JSON, and the provenance a file records
(the checkout's git revision, the versions of the packages that computed it).

A results file (:func:`provenance`) records the command, the git revision, the package versions, the device
and the time. The committed results, ``results/`` and ``benchmarks/results/`` of the checkout mdsd comes from,
take files only from a clean tree: from a tree with uncommitted changes the revision would not say which code
computed them, so writing there is refused unless the run is marked as scratch with ``MDSD_SCRATCH=<why>``
(the file then says ``"scratch": true`` and why). Changes inside those two folders do not count: results
are not code, and results written one after another into one folder must not refuse each other.
``$MDSD_COMMIT`` names the commit of a copy that is not a checkout (a device machine's); it wins over git.
Elsewhere (runs/, a temporary folder) a dirty tree is recorded as ``<commit>-dirty`` with the changed paths.

A file that is not what its writer wrote, copied from a log or merged from parts, says so in its metadata:
``"assembled_from"`` (what it was assembled from and how), and ``"provenance_note"`` says what is known of a
revision that its fields alone do not establish.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

__all__ = [
    "ensure_output_dir",
    "strict_json",
    "git_revision",
    "package_versions",
    "device_name",
    "check_results_destination",
    "provenance",
]

_PACKAGES = ("mdsd", "numpy", "scipy", "torch", "networkx", "highspy", "cvxpy", "transformers")
_CHECKOUT = Path(__file__).resolve().parents[1]  # mdsd/outputs.py -> the checkout (an editable install)
RESULTS_FOLDERS = ("results", "benchmarks/results")  # the committed results, relative to the checkout


def ensure_output_dir(path: str | Path, flag: str = "--output-dir") -> Path:
    """``path`` as a folder that exists and takes files (created if needed), or a ``ValueError`` naming
    ``flag``; one of the committed results folders only from a clean tree (:func:`check_results_destination`).

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
    check_results_destination(folder, flag)
    return folder


def _git(*args: str) -> str | None:
    """git's output in mdsd's checkout, or None (no git, not a checkout)."""
    try:
        done = subprocess.run(["git", *args], cwd=_CHECKOUT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _git_changes() -> list[str] | None:
    """The tracked paths outside the committed results that differ from HEAD (``git status --porcelain``
    lines), or None outside git."""
    changes = _git("status", "--porcelain", "--untracked-files=no")
    if changes is None:
        return None
    return [
        line
        for line in changes.splitlines()
        if not line[3:].startswith(tuple(f"{f}/" for f in RESULTS_FOLDERS))
    ]


def git_revision() -> str | None:
    """The checkout's HEAD commit (with ``-dirty`` if the tree has changes), or None outside git;
    ``$MDSD_COMMIT`` when set (a copy of the tree that is not a checkout names the commit it was copied from).
    """
    named = os.environ.get("MDSD_COMMIT")
    if named:
        return named
    head, changes = _git("rev-parse", "HEAD"), _git_changes()
    if head is None or changes is None:
        return None
    return head.strip() + ("-dirty" if changes else "")


def _scratch() -> str | None:
    """``$MDSD_SCRATCH`` (why this run is scratch), or None when unset, empty or 0."""
    value = os.environ.get("MDSD_SCRATCH", "")
    return None if value in ("", "0") else value


def check_results_destination(path: str | Path, flag: str = "--output-dir") -> None:
    """A ``ValueError`` naming ``flag`` if ``path`` lies in the committed results (``results/`` or
    ``benchmarks/results/`` of mdsd's checkout), the tree has uncommitted changes, and neither
    ``$MDSD_SCRATCH`` marks the run as scratch nor ``$MDSD_COMMIT`` names its commit."""
    folder = Path(path).resolve()
    inside = any(folder.is_relative_to(_CHECKOUT / name) for name in RESULTS_FOLDERS)
    if not inside or os.environ.get("MDSD_COMMIT") or _scratch():
        return
    changes = _git_changes()
    if changes:
        named = ", ".join(line[3:] for line in changes[:5]) + (", ..." if len(changes) > 5 else "")
        raise ValueError(
            f"{flag} {path}: the committed results take files only from a clean tree, and {len(changes)} "
            f"tracked file(s) have uncommitted changes ({named}): commit them, write elsewhere, or set "
            "MDSD_SCRATCH=<why> to mark the run as scratch"
        )


def device_name() -> str:
    """The GPU this process computed on (``torch.cuda.get_device_name``, once torch has initialised CUDA),
    else the CPU's model name (``/proc/cpuinfo``; ``platform`` where there is none)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.get_device_name()
    return _cpu_name()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(destination: str | Path | None = None, device: str | None = None) -> dict:
    """Where a results file comes from: ``command`` (``sys.argv``), ``git_revision`` (:func:`git_revision`)
    and ``revision_from`` (``"git"`` or ``"MDSD_COMMIT"``), ``git_changes`` (the changed paths, when the
    revision ends in ``-dirty``), ``versions`` (:func:`package_versions`), ``platform``, ``device``
    (``device`` if given, else :func:`device_name`), ``cpu`` and ``created`` (UTC); with ``$MDSD_SCRATCH``
    set, ``"scratch": true`` and ``scratch_reason``.

    Writing to ``destination`` is checked first (:func:`check_results_destination`): the committed results
    take no file from a dirty tree unless the run is scratch.
    """
    if destination is not None:
        check_results_destination(destination, "destination")
    revision = git_revision()
    record = {
        "command": shlex.join(sys.argv),
        "git_revision": revision,
        "revision_from": "MDSD_COMMIT" if os.environ.get("MDSD_COMMIT") else "git" if revision else None,
    }
    if revision and revision.endswith("-dirty"):
        record["git_changes"] = _git_changes()
    record |= {
        "versions": package_versions(),
        "platform": platform.platform(),
        "device": device or device_name(),
        "cpu": _cpu_name(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    why = _scratch()
    if why:
        dirty = revision and revision.endswith("-dirty")
        record |= {
            "scratch": True,
            "scratch_reason": f"MDSD_SCRATCH={why}"
            + ("; written from a tree with uncommitted changes (git_changes)" if dirty else ""),
        }
    return record


def package_versions() -> dict[str, str | None]:
    """The versions of Python and of the packages whose code computes mdsd's numbers (None: not installed)."""
    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


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
