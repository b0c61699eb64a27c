"""Check, before any download or model load, that the packages real models need are importable."""

from __future__ import annotations

import importlib.util

__all__ = ["HF_PACKAGES", "require_hf", "dtype_argument"]

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


def dtype_argument(dtype) -> dict:
    """The keyword ``from_pretrained`` takes a dtype by: ``dtype`` from transformers 4.56 on, ``torch_dtype``
    before (4.54 and 4.55 hand an unknown ``dtype`` to the model's constructor, which refuses it).

    >>> sorted(dtype_argument("float32"))[0] in ("dtype", "torch_dtype")
    True
    """
    import transformers
    from packaging.version import Version

    new = Version(transformers.__version__).release >= (4, 56)
    return {"dtype" if new else "torch_dtype": dtype}
