"""Tiny causal LMs with random weights, built from a config (no downloads): the tests' one model builder.

On the test path of every test directory (pyproject: ``pythonpath = ["tests"]``).
"""

import copy

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)


def tiny_lm(
    seed: int,
    vocab: int = 12,
    family: str = "qwen2",
    attn: str = "sdpa",
    sharpness: float = 3.0,
    random_norms: bool = False,
    layers: int = 2,
):
    """A model of ``layers`` layers (2); ``sharpness`` scales the output layer (peakier next-token laws);
    ``random_norms`` also randomises the norm weights and biases (a mis-mapped tensor in a file format then
    shows)."""
    families = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }
    config_cls, model_cls = families[family]
    config = config_cls(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    config._attn_implementation = attn
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpness)
        for name, param in model.named_parameters() if random_norms else ():
            if "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.copy_(0.1 * torch.randn_like(param))
    return model


def perturbed(model, noise: float, seed: int):
    """A copy of ``model`` with Gaussian noise of relative size ``noise`` on every weight (a close draft)."""
    gen = torch.Generator().manual_seed(seed)
    other = copy.deepcopy(model)
    with torch.no_grad():
        for w in other.parameters():
            w.add_(noise * w.std() * torch.randn(w.shape, generator=gen))
    return other


WORDS = ["<unk>", "the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "and", "then"]


def word_pair(root):
    """``(target_dir, draft_dir)`` under ``root``: a tiny target over :data:`WORDS` and a perturbed draft,
    saved as model directories with a word-level tokenizer (what ``mdsd decode`` loads)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="<unk>")
    target = tiny_lm(0, vocab=len(WORDS))
    for name, model in (("target", target), ("draft", perturbed(target, 0.3, seed=1))):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return root / "target", root / "draft"
