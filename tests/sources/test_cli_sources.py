"""``mdsd sources build`` / ``info`` on a tiny corpus with a tiny Qwen2-style tokenizer (offline)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from mdsd.cli import main
from mdsd.sources import SEPARATOR, Datastore


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tiny_gguf import tiny_tokenizer
    from transformers import Qwen2Config

    tokenizer = tiny_tokenizer()
    folder = tmp_path_factory.mktemp("tok")
    tokenizer.save_pretrained(folder)
    Qwen2Config(vocab_size=len(tokenizer)).save_pretrained(folder)  # a model directory, as mdsd.hf wants
    return folder, tokenizer


def test_build_from_files_then_info(tmp_path, tokenizer_dir, capsys):
    folder, tokenizer = tokenizer_dir
    texts = ["def add(a, b):\n    return a + b\n", "hello world\nhello world\n"]
    files = []
    for i, text in enumerate(texts):
        files.append(tmp_path / f"doc{i}.txt")
        files[-1].write_text(text)
    out = tmp_path / "store"
    args = ["sources", "build", "--corpus", *map(str, files), "--tokenizer", str(folder), "--out", str(out)]
    assert main(args) == 0
    store = Datastore.load(out)
    ids = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    assert store.tokens.tolist() == ids[0] + [SEPARATOR] + ids[1]
    assert store.info["tokenizer"] == str(folder) and store.info["vocabulary"] == len(tokenizer)
    hello = tokenizer.encode("hello world\nhello", add_special_tokens=False)
    (best,) = store.propose(hello, width=1, depth=2)
    assert best.tokens == tuple(ids[1][len(hello) : len(hello) + 2]), "the corpus continues the text"
    assert "tokens from 2 documents" in capsys.readouterr().out
    assert main(["sources", "info", str(out)]) == 0
    assert '"tokens": ' + str(len(store)) in capsys.readouterr().out


def test_build_from_a_prompt_set_s_heldout_text(tmp_path, tokenizer_dir, monkeypatch):
    prompts = importlib.import_module("mdsd.data.prompts")  # the attribute mdsd.data.prompts is a function

    folder, tokenizer = tokenizer_dir
    monkeypatch.setattr(prompts, "load_heldout", lambda name, cache=None: ["hello world", "the fox"])
    out = tmp_path / "store"
    args = ["sources", "build", "--heldout", "udhr-eng", "--tokenizer", str(folder), "--out", str(out)]
    assert main(args + ["--sort-depth", "8"]) == 0
    store = Datastore.load(out)
    assert store.info["heldout"] == "udhr-eng" and store.sort_depth == 8 and store.max_ngram == 7
    assert np.count_nonzero(np.asarray(store.tokens) == SEPARATOR) == 1


def test_an_out_folder_that_cannot_be_written_fails_before_tokenising(tmp_path, capsys, monkeypatch):
    import mdsd.hf.load

    def no_work(*args, **kwargs):
        raise AssertionError("the corpus was tokenised before --out was checked")

    monkeypatch.setattr(mdsd.hf.load, "load_tokenizer", no_work)
    corpus = tmp_path / "c.txt"
    corpus.write_text("x")
    args = ["sources", "build", "--corpus", str(corpus), "--tokenizer", "nope", "--out", "/dev/null/x"]
    assert main(args) == 2
    assert (
        capsys.readouterr().err
        == "mdsd sources: error: --out /dev/null/x: cannot write there (Not a directory)\n"
    )


def test_bad_tokenizer_is_a_clean_error(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("x")
    args = ["sources", "build", "--corpus", str(corpus), "--tokenizer", "nope", "--out", str(tmp_path / "o")]
    assert main(args) == 2
    assert (
        "mdsd sources: error: --tokenizer must be a model directory or one of qwen2.5-coder, got 'nope'"
        in (capsys.readouterr().err)
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--heldout", "udhr-xx"], "--heldout must be a prompt set with held-out text (udhr-"),
        (["--heldout", "mt-bench"], "--heldout must be a prompt set with held-out text (udhr-"),
        (["--corpus", "missing.txt"], "--corpus missing.txt: no such file"),
        (["--heldout", "udhr-eng", "--sort-depth", "1"], "--sort-depth must be an integer >= 2, got 1"),
    ],
)
def test_build_names_its_flags_before_reading_anything_regression(
    tmp_path, capsys, monkeypatch, argv, message
):
    """Bug: `--heldout` answered in the API's words ("name must be one of [...]") and a missing --corpus file
    as a bare [Errno 2]; every argument is checked, naming its flag, before a text is read."""
    import mdsd.hf.load

    def no_work(*args, **kwargs):
        raise AssertionError("a tokenizer was loaded before the arguments were checked")

    monkeypatch.setattr(mdsd.hf.load, "load_tokenizer", no_work)
    monkeypatch.chdir(tmp_path)
    assert main(["sources", "build", *argv, "--tokenizer", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mdsd sources: error: {message}") and err.count("\n") == 1
