"""Fake data-only wheels, like the ones the real model parts ship in."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(
    folder: Path, package: str, version: str, member: str, data: bytes, record: bytes | None = None
):
    """A data-only wheel ``<package>-<version>-py3-none-any.whl`` holding ``member`` and a RECORD.

    ``record`` (default: ``data``) is what the RECORD hash is computed from, so a test can make a
    wheel whose member disagrees with its RECORD.
    """
    module = package.replace("-", "_")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data if record is None else record).digest()).rstrip(
        b"="
    )
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{module}/__init__.py", "")
        archive.writestr(member, data)
        archive.writestr(
            f"{module}-{version}.dist-info/RECORD", f"{member},sha256={digest.decode()},{len(data)}\n"
        )
    return path


def split_into_wheels(blob: bytes, folder: Path, package: str, version: str, parts: int) -> list[Path]:
    """Cut ``blob`` into ``parts`` wheels ``<package><i>``, each holding ``<module><i>/data/partNN.bin``."""
    folder.mkdir(parents=True, exist_ok=True)
    bounds = [len(blob) * i // parts for i in range(parts + 1)]
    return [
        make_wheel(
            folder,
            f"{package}{i}",
            version,
            f"{package.replace('-', '_')}{i}/data/part{i:02d}.bin",
            blob[bounds[i - 1] : bounds[i]],
        )
        for i in range(1, parts + 1)
    ]
