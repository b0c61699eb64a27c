"""What mdsd writes to disk, whoever writes it (the drafters' training runs, the command line, the experiment
harness): a folder checked to take files before any work, strict JSON, and the provenance a file records
(the checkout's git revision, the versions of the packages that computed it).
"""

from __future__ import annotations

import importlib.metadata
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["ensure_output_dir", "strict_json", "git_revision", "package_versions"]

_PACKAGES = ("mdsd", "numpy", "scipy", "torch", "networkx", "highspy", "cvxpy", "transformers")


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
