"""Model specs for the advisor's tests, built from config dicts (no catalog needed)."""

from __future__ import annotations

from functools import lru_cache

from vramlens.models._reader import ConfigReader
from vramlens.models.families.llama import build_llama_like
from vramlens.models.spec import ModelSpec

LLAMA_2_7B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
    "num_key_value_heads": 32, "num_hidden_layers": 32, "vocab_size": 32_000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float16",
}
TINY = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 8,
    "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 1_000, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "torch_dtype": "float32",
}


def build(cfg: dict, name: str) -> ModelSpec:
    b = build_llama_like(ConfigReader(cfg, "llama", name), "LlamaForCausalLM")
    return ModelSpec(name=name, model_type="llama", architecture="LlamaForCausalLM", tensors=tuple(b.tensors),
                     config=cfg, **b.facts)


@lru_cache(maxsize=None)
def llama7b() -> ModelSpec:
    return build(LLAMA_2_7B, "llama-2-7b")


@lru_cache(maxsize=None)
def tiny() -> ModelSpec:
    return build(TINY, "tiny-llama")
