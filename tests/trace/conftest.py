import pytest

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")


def tiny_llama(layers: int = 2, **over) -> dict:
    """A Llama config at tiny sizes (GQA: 4 query heads, 2 KV heads)."""
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
        "intermediate_size": 344, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    }
    cfg.update(over)
    return cfg
