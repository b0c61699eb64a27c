"""Shared helpers of the draft-source tests: independent reference rankers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf"))  # tiny_gguf: a Qwen2-style tokenizer
