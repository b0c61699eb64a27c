"""npm tarball cache: npm pack stubbed out, the pinned sha256 enforced, members read."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile

import pytest

from mdsd.data import npm


def make_tarball(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


BLOB = make_tarball({"package/data.txt": b"hello"})
PACKAGE = npm.NpmPackage("pkg", "1.2.3", hashlib.sha256(BLOB).hexdigest())


def test_download_runs_npm_pack_once_and_checks_the_digest(tmp_path, monkeypatch):
    calls = []

    def fake_npm(command, capture_output, text):
        calls.append(command)
        (tmp_path / "pkg-1.2.3.tgz").write_bytes(BLOB)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(npm.subprocess, "run", fake_npm)
    path = npm.download_npm(PACKAGE, tmp_path)
    assert npm.read_tar_member(path, "package/data.txt") == b"hello"
    (command,) = calls
    assert command[:3] == ["npm", "pack", "pkg@1.2.3"] and str(tmp_path) in command
    npm.download_npm(PACKAGE, tmp_path)
    assert len(calls) == 1, "a second call finds the tarball cached"


def test_a_tampered_tarball_is_refused_and_removed(tmp_path):
    (tmp_path / "pkg-1.2.3.tgz").write_bytes(make_tarball({"package/data.txt": b"HELLO"}))
    with pytest.raises(ValueError, match="has sha256 .*, expected"):
        npm.download_npm(PACKAGE, tmp_path)
    assert not (tmp_path / "pkg-1.2.3.tgz").exists()


def test_npm_failures_become_os_errors(tmp_path, monkeypatch):
    def failing(command, capture_output, text):
        return subprocess.CompletedProcess(command, 1, "", "npm error 404 Not Found - pkg@1.2.3")

    monkeypatch.setattr(npm.subprocess, "run", failing)
    with pytest.raises(OSError, match="npm pack failed for pkg@1.2.3: npm error 404"):
        npm.download_npm(PACKAGE, tmp_path)

    def missing(command, capture_output, text):
        raise FileNotFoundError("npm")

    monkeypatch.setattr(npm.subprocess, "run", missing)
    with pytest.raises(OSError, match="npm is needed"):
        npm.download_npm(PACKAGE, tmp_path)


def test_missing_members_and_tarballs(tmp_path):
    path = tmp_path / "t.tgz"
    path.write_bytes(BLOB)
    with pytest.raises(FileNotFoundError, match="no file member"):
        npm.read_tar_member(path, "package/other.txt")
    with pytest.raises(FileNotFoundError, match="tarball not found"):
        npm.read_tar_member(tmp_path / "absent.tgz", "x")
