"""Build a tiny real Qwen2 model, its byte-level BPE tokenizer, and write both as one GGUF file.

The GGUF holds F32 tensors under llama.cpp's names and the tokenizer under ``tokenizer.ggml.*``, so
transformers' GGUF loader treats it like the real Qwen2.5-Coder files (only smaller and unquantised).
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch
from tiny_lms import tiny_lm
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.",
    "hello world",
] * 20


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A Qwen2-style byte-level BPE (300 tokens) trained offline on a few lines, with a chat template."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(  # Qwen2's split, as the GGUF loader rebuilds it
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def tiny_model(vocab_size: int, seed: int = 0) -> Qwen2ForCausalLM:
    """The tests' tiny Qwen2 (tests/tiny_lms.py) with random norms and biases, unsharpened."""
    return tiny_lm(seed, vocab=vocab_size, family="qwen2", sharpness=1.0, random_norms=True)


_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def _gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf_name.split(".", 3)  # model.layers.<i>.<module>.<weight|bias>
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{_NAMES[module]}.{kind}"


def write_gguf(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, path: Path) -> Path:
    """Write ``model`` and ``tokenizer`` as a qwen2 GGUF file (F32 tensors)."""
    config = model.config
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    rope = getattr(config, "rope_parameters", None) or {"rope_theta": config.rope_theta}  # transformers < 5
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if token in SPECIALS else 1 for token in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab["<|endoftext|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_pad_token_id(vocab["<|endoftext|>"])
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in model.state_dict().items():
        writer.add_tensor(_gguf_name(name), tensor.detach().to(torch.float32).numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
