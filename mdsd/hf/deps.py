"""Check, before any download or model load, that the packages real models need are importable."""

from __future__ import annotations

import importlib.util

__all__ = ["HF_PACKAGES", "require_hf"]

# import name -> requirement (the same pins as pyproject.toml's dependencies)
HF_PACKAGES = {
    "transformers": "transformers>=4.54.1,<5.25",
    "safetensors": "safetensors>=0.4",
    "gguf": "gguf>=0.10",
    "accelerate": "accelerate>=0.30",
}


def require_hf(what: str, packages: tuple[str, ...] = ("transformers", "safetensors")) -> None:
    """Raise ``ModuleNotFoundError`` naming the exact install line if any of ``packages`` is missing.

    >>> require_hf("a doctest", ())  # nothing to check
    """
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if missing:
        line = " ".join(f'"{HF_PACKAGES[name]}"' for name in missing)
        raise ModuleNotFoundError(
            f"{what} needs {', '.join(missing)}, which is not installed in this environment; "
            f"install it with: pip install {line}"
        )
