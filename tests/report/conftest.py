"""A tiny real Estimate, built without the model catalog (a hand-written Llama config)."""

from __future__ import annotations

import pytest

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


@pytest.fixture
def tiny_estimate():
    from vramlens.estimate import estimate_spec
    from vramlens.hardware.catalog import get_gpu
    from vramlens.models.inventory import spec_from_config
    from vramlens.workload import make_workload

    spec = spec_from_config(TINY_LLAMA, name="tiny-llama")
    return estimate_spec(spec, make_workload(mode="train", batch=2, seq=128), get_gpu("24GB"))
