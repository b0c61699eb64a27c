"""Fixtures shared by the test folders (tests/hf, tests/harness, tests/sources): the tiny GGUF pair."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """A tiny Qwen2 model, its tokenizer, and the GGUF file written from them (session-wide: ~1 s)."""
    import torch
    from tiny_gguf import tiny_model, tiny_tokenizer, write_gguf

    torch.set_num_threads(1)
    tokenizer = tiny_tokenizer()
    model = tiny_model(len(tokenizer))
    path = write_gguf(model, tokenizer, tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    return model, tokenizer, path
