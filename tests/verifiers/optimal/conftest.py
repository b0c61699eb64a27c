"""The optimal verifier's tests share the verifier tests' helpers (tests/verifiers: verifier_cases,
verifier_enumeration, verifier_gtest), importable from here as from there."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
