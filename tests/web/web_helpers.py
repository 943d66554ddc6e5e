"""Shared values of the web tests (a uniquely named module: conftest names clash across folders)."""

from __future__ import annotations

TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def needs_model_loader():
    """Catalog names resolve (vramlens.models.load_model): a failure here is a real failure."""
    from vramlens.models import load_model

    load_model("llama-2-7b")
