"""Fixtures shared by the test folders (tests/hf, tests/harness, tests/sources): the tiny GGUF pair; one torch
thread per pytest-xdist worker."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    """Under pytest-xdist (``-n auto``) each worker is a process of its own: one torch thread each, so that
    the workers share the cores instead of oversubscribing them."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


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
